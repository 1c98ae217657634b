"""Policies and reviews over REST: the document, reviews, stale approvals, self-approval, code
owners (the last match wins), a broken CODEOWNERS, denied paths, direct updates, the explain
endpoint and an admin's bypass. Every refusal is 403 ``policy_denied`` with one detail per
unmet requirement, and the proposal stays open."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from repos.models import Event, Proposal

from .conftest import ALL_BUT_ADMIN, Api, client_with

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = ALL_BUT_ADMIN


@pytest.fixture
def repo(admin):
    """The repository ``demo`` with a first changeset on main, an agent and an admin driver."""
    assert admin.post("/api/v1/repos", {"name": "demo"}, format="json").status_code == 201
    agent = Api(client_with(AGENT), "demo")
    agent.land(agent.write(None, {"README.md": "hello\n", "src/app.py": "print(1)\n"}))
    return agent, Api(admin, "demo")


def set_policy(admin: Api, *rules: dict) -> dict:
    response = admin.client.put(admin.url("/policy"), {"rules": list(rules)}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def reviewer(name: str, scopes=("read", "review")) -> Api:
    from tests.factories import UserFactory

    return Api(client_with(list(scopes), user=UserFactory(username=name)), "demo")


def review(who: Api, proposal: int, verdict: str, body: str = "") -> dict:
    response = who.post(f"/proposals/{proposal}/reviews", {"verdict": verdict, "body": body})
    assert response.status_code == 201, response.content
    return response.json()


def denied(response) -> dict[str, str]:
    """The unmet requirements of a ``policy_denied`` answer, by kind."""
    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "policy_denied"
    return {detail["requirement"]: detail["message"] for detail in error["details"]}


def events(kind: str) -> list[dict]:
    return [event.payload for event in Event.objects.filter(kind=kind).order_by("seq")]


def open_change(agent: Api, files: dict[str, str], stream: str = "main") -> int:
    return agent.propose(agent.write(agent.head(stream), files), stream)


def test_the_document_is_versioned_validated_and_read_back(repo, client_for):
    agent, admin = repo
    assert agent.get("/policy").json() == {"version": 0, "rules": [], "changed_by": None, "updated": None}
    rules = {"streams": ["main", "release/*"], "required_approvals": 2, "deny_paths": [".ci/**"]}
    first = set_policy(admin, rules)
    assert first["version"] == 1 and first["rules"] == [rules] and first["changed_by"]
    assert set_policy(admin, rules)["version"] == 1  # the same document adds no version
    assert set_policy(admin, {**rules, "required_approvals": 1})["version"] == 2
    assert agent.get("/policy").json()["version"] == 2

    bad = admin.client.put(
        admin.url("/policy"), {"rules": [{"streams": ["main"], "deny_paths": ["a[b"]}]}, format="json"
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["details"][0]["field"] == "rules.0.deny_paths.0"
    unknown = admin.client.put(admin.url("/policy"), {"rules": [{"streams": ["main"], "approvals": 1}]}, format="json")
    assert unknown.status_code == 400
    # Setting the policy is an admin's; an agent's token is refused.
    assert agent.client.put(agent.url("/policy"), {"rules": []}, format="json").status_code == 403


def test_approvals_gate_integrate_and_land_and_the_decision_is_recorded(repo):
    agent, admin = repo
    set_policy(admin, {"streams": ["main"], "required_approvals": 1})
    head = agent.head()

    landed = agent.post(
        "/streams/main/land", {"message": "m", "operations": [{"op": "write", "path": "a", "content": "1\n"}]}
    )
    unmet = denied(landed)
    assert set(unmet) == {"approvals"} and "needs 1 approval" in unmet["approvals"]
    proposal = landed.json()["error"]["proposal"]
    assert landed.json()["error"]["policy_version"] == 1
    assert agent.head() == head  # nothing moved
    assert agent.get(f"/proposals/{proposal}").json()["state"] == "open"  # it waits

    explained = agent.get(f"/proposals/{proposal}/policy").json()
    assert explained["allowed"] is False
    assert [(r["requirement"], r["met"]) for r in explained["requirements"]] == [("approvals", False)]

    alice = reviewer("alice")
    approval = review(alice, proposal, "approve", "looks right")
    assert agent.get(f"/proposals/{proposal}/policy").json()["allowed"] is True
    outcome = agent.integrate(proposal)
    assert outcome.status_code == 200 and outcome.json()["outcome"] == "fast_forward"
    decision = agent.get(f"/proposals/{proposal}").json()["decision"]
    assert decision["allowed"] is True and decision["policy_version"] == 1
    assert decision["approvals"] == ["alice"] and decision["bypass"] is None
    assert [r["requirement"] for r in decision["requirements"]] == ["approvals"]
    # The event carries the decision it landed by.
    assert events("stream.integrate")[-1]["decision"] == decision
    assert events("proposal.review")[-1] == {
        "proposal": proposal,
        "stream": "main",
        "review": approval["id"],  # ids are not reset between tests that share a database
        "verdict": "approve",
        "reviewer": "alice",
        "revision": 1,
    }


def test_a_new_tree_drops_an_approval_and_a_revision_with_the_same_tree_keeps_it(repo):
    agent, admin = repo
    set_policy(admin, {"streams": ["main"], "required_approvals": 1})
    base = agent.head()
    first = agent.write(base, {"a.txt": "one\n"})
    proposal = agent.propose(first)
    review(reviewer("alice"), proposal, "approve")

    # The same tree under another commit (a rebase that changed nothing): still approved.
    same_tree = agent.write(base, {"a.txt": "one\n"}, message="reworded\n")
    assert same_tree != first
    assert agent.post(f"/proposals/{proposal}/revisions", {"head": same_tree}).status_code == 201
    assert agent.get(f"/proposals/{proposal}/policy").json()["allowed"] is True

    # Another tree: the approval is stale.
    other = agent.write(base, {"a.txt": "two\n"})
    assert agent.post(f"/proposals/{proposal}/revisions", {"head": other}).status_code == 201
    unmet = denied(agent.integrate(proposal))
    assert "has 0" in unmet["approvals"]


def test_the_authors_approval_does_not_count(repo):
    agent, admin = repo
    set_policy(admin, {"streams": ["main"], "required_approvals": 1})
    proposal = open_change(agent, {"b.txt": "b\n"})
    # The author's own token has no review scope; a token of the same user that has one is refused.
    same_user = Api(client_with(["read", "review"], user=agent.client.credential.user), "demo")
    refused = same_user.post(f"/proposals/{proposal}/reviews", {"verdict": "approve"})
    assert refused.status_code == 403 and "would not count" in refused.json()["error"]["message"]
    review(same_user, proposal, "comment", "a note is fine")

    # A user who wrote a revision cannot approve either.
    bob = reviewer("bob", scopes=("read", "write", "review"))
    revised = bob.write(agent.head(), {"b.txt": "b2\n"})
    assert bob.post(f"/proposals/{proposal}/revisions", {"head": revised}).status_code == 201
    assert bob.post(f"/proposals/{proposal}/reviews", {"verdict": "approve"}).status_code == 403
    assert denied(agent.integrate(proposal))["approvals"].endswith("can approve")


def test_a_rejection_blocks_until_withdrawn_or_replaced(repo):
    agent, admin = repo
    set_policy(admin, {"streams": ["main"], "required_approvals": 1})
    proposal = open_change(agent, {"c.txt": "c\n"})
    alice, carol = reviewer("alice"), reviewer("carol")
    review(alice, proposal, "approve")
    rejection = review(carol, proposal, "reject", "not like this")
    unmet = denied(agent.integrate(proposal))
    assert set(unmet) == {"rejected"} and "carol" in unmet["rejected"]

    # A comment does not replace a rejection; only its author can withdraw it.
    review(carol, proposal, "comment", "still thinking")
    assert "rejected" in denied(agent.integrate(proposal))
    assert alice.client.delete(alice.url(f"/proposals/{proposal}/reviews/{rejection['id']}")).status_code == 403
    withdrawn = carol.client.delete(carol.url(f"/proposals/{proposal}/reviews/{rejection['id']}"))
    assert withdrawn.status_code == 200 and withdrawn.json()["withdrawn"]
    assert agent.integrate(proposal).status_code == 200

    # A later approval by the rejecting reviewer replaces the rejection.
    second = open_change(agent, {"d.txt": "d\n"})
    review(carol, second, "reject")
    review(carol, second, "approve")
    assert agent.integrate(second).status_code == 200


def test_code_owners_of_nested_paths_the_last_match_wins(repo):
    agent, admin = repo
    core = Group.objects.create(name="org/core")
    for name in ("alice", "carol", "dave"):
        reviewer(name)
    from django.contrib.auth import get_user_model

    core.user_set.add(get_user_model().objects.get(username="dave"))
    codeowners = "* @alice\nsrc/ @org/core\nsrc/vendor/ @carol\n"
    agent.land(agent.write(agent.head(), {"CODEOWNERS": codeowners}))
    set_policy(admin, {"streams": ["main"], "code_owners": True})

    # src/vendor/x.py: the last matching line (src/vendor/) owns it, so carol, not the core team.
    proposal = open_change(agent, {"src/vendor/x.py": "x\n", "src/app.py": "print(2)\n"})
    review(reviewer("dave"), proposal, "approve")  # a core member: src/app.py is satisfied
    unmet = denied(agent.integrate(proposal))
    assert set(unmet) == {"code_owners"}
    assert "src/vendor/x.py needs an approval from @carol" in unmet["code_owners"]
    assert "src/app.py" not in unmet["code_owners"]
    review(reviewer("carol"), proposal, "approve")
    assert agent.integrate(proposal).status_code == 200
    owners = {item["path"]: item for item in agent.get(f"/proposals/{proposal}").json()["decision"]["owners"]}
    assert owners["src/vendor/x.py"]["approved_by"] == ["carol"]
    assert owners["src/app.py"] == {"path": "src/app.py", "owners": ["@org/core"], "approved_by": ["dave"]}


def test_a_broken_codeowners_is_an_error_the_proposal_shows_never_no_owners(repo):
    agent, admin = repo
    agent.land(agent.write(agent.head(), {"CODEOWNERS": "src/ @alice\nsrc/[ @bob\ndocs/ not-an-owner\n"}))
    set_policy(admin, {"streams": ["main"], "code_owners": True})
    proposal = open_change(agent, {"src/app.py": "print(3)\n"})
    review(reviewer("alice"), proposal, "approve")
    requirements = agent.get(f"/proposals/{proposal}/policy").json()["requirements"]
    assert requirements == [
        {
            "requirement": "code_owners",
            "met": False,
            "message": "CODEOWNERS cannot be parsed: line 2: bad pattern 'src/['; fix CODEOWNERS on main first",
        }
    ]
    assert "line 2" in denied(agent.integrate(proposal))["code_owners"]


def test_path_conditions_and_denied_paths(repo):
    agent, admin = repo
    set_policy(
        admin,
        {"streams": ["main"], "required_approvals": 1, "paths": ["**", "!docs/**"]},
        {"streams": ["main"], "deny_paths": [".ci/**"], "direct_update": "everyone"},
    )
    # A docs-only change matches no approval rule: it lands at once.
    docs = open_change(agent, {"docs/guide.md": "guide\n"})
    assert agent.integrate(docs).status_code == 200
    # A code change needs the approval; a change to .ci/ is refused whatever the approvals.
    code = open_change(agent, {"src/app.py": "print(4)\n"})
    assert set(denied(agent.integrate(code))) == {"approvals"}
    ci = open_change(agent, {".ci/run": "true\n", "docs/x.md": "x\n"})
    review(reviewer("alice"), ci, "approve")
    unmet = denied(agent.integrate(ci))
    assert set(unmet) == {"paths"} and unmet["paths"].startswith(".ci/run may not be changed on main")


def test_direct_updates_are_judged(repo):
    agent, admin = repo
    set_policy(admin, {"streams": ["release/*"], "required_approvals": 1})
    # Creating a protected stream at a head is a direct update: nobody may (approvals are asked).
    created = agent.post("/streams", {"name": "release/1", "from": "main"})
    assert set(denied(created)) == {"direct_update"}
    assert admin.post("/streams", {"name": "release/1", "from": "main"}).status_code == 403
    # An empty one can be made (no head moves), and proposals land on it once approved.
    assert admin.post("/streams", {"name": "release/1"}).status_code == 201
    proposal = open_change(agent, {"g.txt": "g\n"}, stream="release/1")
    assert set(denied(agent.integrate(proposal))) == {"approvals"}
    review(reviewer("alice"), proposal, "approve")
    assert agent.integrate(proposal).status_code == 200
    # With direct_update "admins", an admin may; an agent still may not.
    set_policy(admin, {"streams": ["release/*"], "required_approvals": 1, "direct_update": "admins"})
    assert admin.post("/streams", {"name": "release/2", "from": "main"}).status_code == 201
    assert set(denied(agent.post("/streams", {"name": "release/3", "from": "main"}))) == {"direct_update"}
    assert admin.client.delete(admin.url("/streams/release/2")).status_code == 204
    # Unprotected streams are as before.
    assert agent.post("/streams", {"name": "topic", "from": "main"}).status_code == 201


def test_an_admin_bypass_lands_and_is_recorded(repo, client_for):
    agent, admin = repo
    set_policy(admin, {"streams": ["main"], "required_approvals": 2})
    proposal = open_change(agent, {"e.txt": "e\n"})
    # Only an admin may bypass.
    refused = agent.post(f"/proposals/{proposal}/integrate", {"bypass": "hotfix"})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    landed = admin.post(f"/proposals/{proposal}/integrate", {"bypass": "hotfix for the outage"})
    assert landed.status_code == 200, landed.content
    decision = agent.get(f"/proposals/{proposal}").json()["decision"]
    assert decision["allowed"] is True
    assert decision["bypass"]["reason"] == "hotfix for the outage"
    assert [(r["requirement"], r["met"]) for r in decision["requirements"]] == [("approvals", False)]
    bypassed = events("policy.bypass")
    assert [(event["proposal"], event["reason"]) for event in bypassed] == [(proposal, "hotfix for the outage")]


def test_an_approval_withdrawn_while_the_landing_waits_is_seen(repo, settings, stream_busy):
    """The judgment reads the reviews in the landing's own transaction: a landing queued with an
    approval that is withdrawn before the queue runs is refused."""
    agent, admin = repo
    set_policy(admin, {"streams": ["main"], "required_approvals": 1})
    proposal = open_change(agent, {"f.txt": "f\n"})
    alice = reviewer("alice")
    approval = review(alice, proposal, "approve")
    from django.db import transaction

    from repos.services import integration, proposals
    from repos.services.repositories import get_repository

    found = proposals.get_proposal(get_repository("demo"), proposal)
    with transaction.atomic():  # queued here (the stream busy); it lands when this commits
        operation = integration.request_integration(found)
        assert alice.client.delete(alice.url(f"/proposals/{proposal}/reviews/{approval['id']}")).status_code == 200
    operation.refresh_from_db()
    assert operation.state == "failed" and operation.error["code"] == "policy_denied"
    assert Proposal.objects.get(pk=proposal).state == "open"


def test_the_policy_is_edited_in_django_admin_with_its_history(repo):
    from django.test import Client

    from repos.models import PolicyVersion, Repository
    from tests.factories import UserFactory

    agent, admin = repo
    set_policy(admin, {"streams": ["main"], "required_approvals": 1})
    person = Client()
    person.force_login(UserFactory(username="root", is_superuser=True, is_staff=True))
    repository = Repository.objects.get(name="demo")
    form = person.get(f"/admin/repos/policyversion/add/?repository={repository.pk}").content.decode()
    assert "required_approvals" in form  # the form starts from the document in force

    refused = person.post(
        "/admin/repos/policyversion/add/",
        {"repository": repository.pk, "document": '{"rules": [{"streams": ["main"], "required_approvals": -1}]}'},
    )
    assert refused.status_code == 200 and "rules.0.required_approvals" in refused.content.decode()
    saved = person.post(
        "/admin/repos/policyversion/add/",
        {"repository": repository.pk, "document": '{"rules": [{"streams": ["main"], "required_approvals": 2}]}'},
    )
    assert saved.status_code == 302, saved.content[:2000]
    latest = PolicyVersion.objects.get(repository=repository, version=2)
    assert latest.changed_by == "root" and latest.document["rules"][0]["required_approvals"] == 2
    assert agent.get("/policy").json()["version"] == 2
    page = person.get(f"/admin/repos/policyversion/{latest.pk}/change/").content.decode()
    assert "Changed from" in page and "&#x27;required_approvals&#x27;: 1" in page  # the version it replaced
    listing = person.get("/admin/repos/policyversion/").content.decode()
    assert "root" in listing
