"""Check results (issue 24): reported on a changeset or a tree, kept by tree, scoped, validated,
and announced as events."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.db import transaction
from rest_framework.test import APIClient

from repos.models import Event, Repository
from repos.services.checks import request_checks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def reporter(client_for):
    """The client of a CI system: it reads and reports checks, nothing else."""
    return client_for(["read", "checks"])


def report(client, repo: str = "demo", **body):
    return client.post(f"/api/v1/repos/{repo}/checks", body, format="json")


def tree_of(api, changeset: str) -> str:
    return api.get(f"/changesets/{changeset}").json()["tree"]


def test_a_result_is_kept_by_tree_so_a_revision_with_the_same_tree_and_its_landing_keep_it(api, reporter):
    base = api.write(None, {"README": "hello\n"})
    api.land(base)
    change = api.write(base, {"src/app.py": "print(1)\n"}, "first try\n")
    answer = report(reporter, changeset=change, name="ci/test", state="success", url="https://ci.example/1")
    assert answer.status_code == 201, answer.content
    assert answer.json()["tree"] == tree_of(api, change)

    # The agent rewrites its message: a new changeset, the same tree, the same result.
    reworded = api.write(base, {"src/app.py": "print(1)\n"}, "better message\n")
    assert reworded != change
    listed = api.get("/checks", changeset=reworded).json()
    assert [(c["name"], c["state"], c["url"]) for c in listed["checks"]] == [
        ("ci/test", "success", "https://ci.example/1")
    ]
    # Landed by fast-forward: the stream head has the tree, and the result.
    outcome = api.land(reworded)
    assert api.get("/checks", changeset=outcome["stream_head"]).json()["checks"][0]["state"] == "success"
    # Another change has another tree: nothing reported on it.
    other = api.write(reworded, {"src/app.py": "print(2)\n"})
    assert api.get("/checks", changeset=other).json()["checks"] == []


def test_a_merge_whose_tree_is_the_tested_one_keeps_the_result(api, reporter):
    base = api.write(None, {"README": "hello\n"})
    api.land(base)
    # The stream gets the same change from elsewhere meanwhile: the merge of the proposal is a
    # new changeset with two parents and exactly the tree that was tested.
    tested = api.write(base, {"src/app.py": "print(1)\n"}, "ours\n")
    api.land(api.write(base, {"src/app.py": "print(1)\n"}, "theirs\n"))
    assert report(reporter, changeset=tested, name="ci/test", state="success").status_code == 201
    outcome = api.land(tested)
    assert outcome["outcome"] == "merge" and outcome["changeset"] != tested
    assert tree_of(api, outcome["changeset"]) == tree_of(api, tested)
    (kept,) = api.get("/checks", changeset=outcome["changeset"]).json()["checks"]
    assert (kept["name"], kept["state"], kept["changeset"]) == ("ci/test", "success", tested)


def test_a_new_report_replaces_the_state_and_keeps_the_history(api, reporter):
    tree = tree_of(api, api.write(None, {"a.txt": "a\n"}))
    assert report(reporter, tree=tree, name="lint", state="success").status_code == 201
    rerun = report(reporter, tree=tree, name="lint", state="pending", url="http://ci.example/run/2").json()
    assert rerun["state"] == "pending" and rerun["url"] == "http://ci.example/run/2"
    assert [past["state"] for past in rerun["history"]] == ["success"]
    failed = report(reporter, tree=tree, name="lint", state="failure", summary="E501 line too long").json()
    assert [past["state"] for past in failed["history"]] == ["success", "pending"]
    (only,) = api.get("/checks", tree=tree).json()["checks"]
    assert (only["state"], only["summary"]) == ("failure", "E501 line too long")


def test_final_states_are_check_completed_events_and_pending_is_none(api, reporter):
    change = api.write(None, {"a.txt": "a\n"})
    before = Event.objects.filter(kind="check.completed").count()
    report(reporter, changeset=change, name="ci/test", state="pending")
    assert Event.objects.filter(kind="check.completed").count() == before
    report(reporter, changeset=change, name="ci/test", state="error", url="https://ci.example/9")
    event = Event.objects.filter(kind="check.completed").latest("seq")
    assert event.payload == {
        "tree": tree_of(api, change),
        "changeset": change,
        "name": "ci/test",
        "state": "error",
        "url": "https://ci.example/9",
        "author": {"user": reporter.credential.user.username, "credential": reporter.credential.name},
    }


def test_request_checks_writes_check_requested_in_the_callers_transaction(api):
    change = api.write(None, {"a.txt": "a\n"})
    tree = tree_of(api, change)
    repository = Repository.objects.get(name="demo")
    with transaction.atomic():
        event = request_checks(repository, tree, ["ci/test", "lint", "ci/test"], {"changeset": change})
    stored = Event.objects.get(pk=event.pk)
    assert stored.kind == "check.requested"
    assert stored.payload == {"changeset": change, "tree": tree, "names": ["ci/test", "lint"]}
    with pytest.raises(RuntimeError), transaction.atomic():  # a rolled-back request leaves nothing
        request_checks(repository, tree, ["ci/test"], {})
        raise RuntimeError("the gate's transaction failed")
    assert Event.objects.filter(kind="check.requested").count() == 1


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"changeset": "0" * 40}, 404),  # no such changeset
        ({"tree": "1" * 40}, 404),  # no such tree
        ({"name": "-starts-badly"}, 400),
        ({"name": "has space"}, 400),
        ({"name": "x" * 101}, 400),
        ({"state": "passed"}, 400),
        ({"url": "javascript:alert(1)"}, 400),
        ({"url": "ftp://ci.example/1"}, 400),
        ({"url": "https://" + "a" * 2000}, 400),
        ({"summary": "x" * (64 * 1024 + 1)}, 400),
        ({"tree": None}, 400),  # both a changeset and a tree
        ({"colour": "green"}, 400),
    ],
)
def test_bad_reports_are_refused_and_leave_nothing(api, reporter, body, status):
    change = api.write(None, {"a.txt": "a\n"})
    full = {"changeset": change, "name": "ci/test", "state": "success", **body}
    if "tree" in body:
        full.pop("changeset") if body["tree"] else full.update(tree=tree_of(api, change))
    answer = report(reporter, **full)
    assert answer.status_code == status, answer.content
    assert answer.json()["error"]["code"] == {400: "invalid", 404: "not_found"}[status]
    assert api.get("/checks", changeset=change).json()["checks"] == []


def test_a_blob_is_not_a_tree(api, reporter):
    blob = api.blob(b"not a tree\n")
    assert report(reporter, tree=blob, name="ci/test", state="success").status_code == 404


def test_listing_needs_exactly_one_of_changeset_and_tree(api):
    change = api.write(None, {"a.txt": "a\n"})
    assert api.get("/checks").status_code == 400
    assert api.get("/checks", changeset=change, tree=tree_of(api, change)).status_code == 400
    assert api.get("/checks", changeset="zz").status_code == 400


def test_reporting_needs_the_checks_scope(api, client_for):
    change = api.write(None, {"a.txt": "a\n"})
    body = {"changeset": change, "name": "ci/test", "state": "success"}
    read_only = client_for(["read"])
    refused = report(read_only, **body)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert report(api.client, **body).status_code == 403  # read, write, integrate: still not checks
    assert read_only.get("/api/v1/repos/demo/checks", {"changeset": change}).json()["checks"] == []
    only_checks = client_for(["checks"])
    assert report(only_checks, **body).status_code == 201
    assert only_checks.get("/api/v1/repos/demo/checks", {"changeset": change}).status_code == 403  # reading is read's


def test_agentgit_credential_makes_a_checks_token(api):
    out = io.StringIO()
    call_command("agentgit_credential", "create", "--user", "ci", "--scopes", "read,checks", stdout=out)
    token = out.getvalue().strip().splitlines()[-1]
    change = api.write(None, {"a.txt": "a\n"})
    ci = APIClient()
    ci.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    answer = report(ci, changeset=change, name="ci/test", state="success")
    assert answer.status_code == 201, answer.content
