"""Conflicts an agent can resolve (issue 11), over the REST API: the conflict package, resolving in
one call (also when the stream moved meanwhile), merge changesets, revisions, closing, deleting a
stream, resolver rules, and their events."""

from __future__ import annotations

import subprocess

import pytest

from engine.conflicts import LABELS
from tests.engine.conftest import GIT_ENV

from .conftest import lines

pytestmark = pytest.mark.django_db(transaction=True)


def conflicted(api, base_text: str, stream_text: str, proposal_text: str, path: str = "f.txt"):
    """A stream that changed ``path`` one way and a proposal that changed it another: (base, proposal id)."""
    base = api.write(None, {path: base_text})
    api.land(base)
    api.land(api.write(base, {path: stream_text}))
    proposal = api.propose(api.write(base, {path: proposal_text}))
    outcome = api.integrate(proposal).json()
    assert outcome["outcome"] == "conflict", outcome
    return base, proposal, outcome


def test_the_conflict_outcome_links_to_a_package_with_sides_and_git_markers(api, tmp_path):
    base_text, ours, theirs = lines(10), lines(10, l5="stream"), lines(10, l5="proposal")
    _base, proposal, outcome = conflicted(api, base_text, ours, theirs)
    assert outcome["package"] == f"/api/v1/repos/demo/proposals/{proposal}/conflicts"
    package = api.client.get(outcome["package"]).json()
    assert package["stream_head"] == api.head() == outcome["stream_head"]
    (conflict,) = package["conflicts"]
    assert (conflict["path"], conflict["kind"]) == ("f.txt", "content")
    texts = {side: api.get(f"/blobs/{conflict[side]['blob']}").content for side in ("base", "ours", "theirs")}
    assert texts == {"base": base_text.encode(), "ours": ours.encode(), "theirs": theirs.encode()}
    for name, data in (("o", ours), ("b", base_text), ("t", theirs)):
        (tmp_path / name).write_text(data)
    labels = [arg for label in LABELS for arg in ("-L", label)]
    oracle = subprocess.run(
        ["git", "merge-file", "-p", "--diff3", *labels, "o", "b", "t"], cwd=tmp_path, capture_output=True, env=GIT_ENV
    ).stdout
    assert api.get(f"/blobs/{conflict['marked']}").content == oracle


def test_a_content_conflict_resolved_in_one_call_lands_as_a_merge_with_the_resolution(api):
    _base, proposal, outcome = conflicted(api, lines(5), lines(5, l3="stream"), lines(5, l3="proposal"))
    resolved = lines(5, l3="stream\nproposal")
    body = {"stream_head": outcome["stream_head"], "resolutions": [{"path": "f.txt", "content": resolved}]}
    answer = api.post(f"/proposals/{proposal}/resolve", {**body, "provenance": {"agent": "fixer"}})
    assert answer.status_code == 200, answer.content
    landed = answer.json()
    assert landed["outcome"] == "merge" and landed["stream_head"] == api.head() == landed["changeset"]
    assert api.file("f.txt") == resolved.encode()
    merge = api.get(f"/changesets/{landed['changeset']}").json()
    assert merge["parents"][0] == outcome["stream_head"] and len(merge["parents"]) == 2
    assert merge["provenance"]["resolved"] == [{"path": "f.txt", "by": "fixer"}]
    assert api.get(f"/proposals/{proposal}").json()["state"] == "integrated"
    kinds = [e["kind"] for e in _events(api)]
    assert "proposal.resolved" in kinds


def test_a_resolution_after_the_stream_moved_merges_over_the_newer_change(api):
    _base, proposal, outcome = conflicted(api, lines(9), lines(9, l2="stream"), lines(9, l2="proposal"))
    newer = api.land(api.write(api.head(), {"f.txt": lines(9, l2="stream", l8="newer")}))
    resolved = lines(9, l2="both")
    body = {"stream_head": outcome["stream_head"], "resolutions": [{"path": "f.txt", "content": resolved}]}
    landed = api.post(f"/proposals/{proposal}/resolve", body).json()
    assert landed["outcome"] == "merge", landed
    merge = api.get(f"/changesets/{landed['changeset']}").json()
    assert merge["parents"][0] == newer["stream_head"]  # merged over the newer change, not onto the old head
    assert api.file("f.txt") == lines(9, l2="both", l8="newer").encode()


def test_a_resolution_that_the_newer_change_contradicts_gets_a_new_package(api):
    _base, proposal, outcome = conflicted(api, lines(9), lines(9, l2="stream"), lines(9, l2="proposal"))
    newer = api.land(api.write(api.head(), {"f.txt": lines(9, l2="newer")}))
    body = {"stream_head": outcome["stream_head"], "resolutions": [{"path": "f.txt", "content": lines(9, l2="both")}]}
    again = api.post(f"/proposals/{proposal}/resolve", body).json()
    assert again["outcome"] == "conflict" and again["stream_head"] == newer["stream_head"] == api.head()
    package = api.client.get(again["package"]).json()
    (conflict,) = package["conflicts"]
    assert api.get(f"/blobs/{conflict['ours']['blob']}").content == lines(9, l2="newer").encode()
    assert api.get(f"/blobs/{conflict['theirs']['blob']}").content == lines(9, l2="both").encode()
    # Resolved again against the newer head, it lands.
    body = {"stream_head": package["stream_head"], "resolutions": [{"path": "f.txt", "content": lines(9, l2="all")}]}
    assert api.post(f"/proposals/{proposal}/resolve", body).json()["outcome"] == "merge"
    assert api.file("f.txt") == lines(9, l2="all").encode()


def test_a_resolution_must_cover_exactly_the_conflicting_paths(api):
    _base, proposal, outcome = conflicted(api, lines(5), lines(5, l3="a"), lines(5, l3="b"))
    head = outcome["stream_head"]
    wrong = [
        {"stream_head": head, "resolutions": [{"path": "other.txt", "delete": True}]},
        {"stream_head": head, "resolutions": [{"path": "f.txt", "content": "x", "blob": "0" * 40}]},
        {"stream_head": head, "resolutions": [{"path": "f.txt", "content": "x", "colour": "red"}]},
        {"stream_head": head, "resolutions": [{"path": "f.txt", "content": "x"}], "extra": 1},
        {"stream_head": "0" * 40, "resolutions": [{"path": "f.txt", "content": "x"}]},
    ]
    for body in wrong:
        answer = api.post(f"/proposals/{proposal}/resolve", body)
        assert answer.status_code in (400, 404), (body, answer.content)
    assert api.head() == head and api.get(f"/proposals/{proposal}").json()["state"] == "conflicted"


def test_a_changeset_with_several_parents_is_an_agents_own_merge(api):
    base = api.write(None, {"a": "a\n"})
    left, right = api.write(base, {"b": "b\n"}), api.write(base, {"c": "c\n"})
    merge = api.post(
        "/changesets",
        {
            "parents": [left, right],
            "message": "merge\n",
            "operations": [{"op": "write", "path": "c", "content": "c\n"}],
        },
    )
    assert merge.status_code == 201, merge.content
    assert merge.json()["parents"] == [left, right]
    both = api.post("/changesets", {"parent": left, "parents": [left, right], "operations": []})
    assert both.status_code == 400 and both.json()["error"]["code"] == "invalid"
    assert api.post("/changesets", {"parents": [left, left], "operations": []}).status_code == 400
    assert api.post("/changesets", {"parents": [], "operations": []}).status_code == 400


def test_a_revision_rebased_on_the_new_head_fast_forwards_and_each_revision_keeps_its_outcome(api):
    base, proposal, _outcome = conflicted(api, lines(5), lines(5, l3="stream"), lines(5, l3="proposal"))
    rebased = api.write(api.head(), {"f.txt": lines(5, l3="stream and proposal")})
    revised = api.post(f"/proposals/{proposal}/revisions", {"head": rebased})
    assert revised.status_code == 201, revised.content
    assert revised.json()["head"] == rebased and revised.json()["state"] == "open"
    landed = api.integrate(proposal).json()
    assert landed["outcome"] == "fast_forward" and api.head() == rebased
    revisions = api.get(f"/proposals/{proposal}/revisions").json()["revisions"]
    assert [(r["number"], r["kind"], r["outcome"]["outcome"]) for r in revisions] == [
        (1, "opened", "conflict"),
        (2, "revised", "fast_forward"),
    ]
    assert "proposal.revised" in [e["kind"] for e in _events(api)]


def test_a_closed_proposal_refuses_to_integrate_until_reopened(api):
    base = api.write(None, {"a": "a\n"})
    proposal = api.propose(base)
    closed = api.post(f"/proposals/{proposal}/close")
    assert closed.status_code == 200 and closed.json()["state"] == "closed"
    refused = api.integrate(proposal)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "wrong_state"
    assert "closed" in refused.json()["error"]["message"]
    assert api.head() is None
    assert api.post(f"/proposals/{proposal}/reopen").json()["state"] == "open"
    assert api.integrate(proposal).json()["outcome"] == "fast_forward"
    assert {"proposal.closed", "proposal.reopened"} <= {e["kind"] for e in _events(api)}


def test_deleting_a_stream_keeps_its_history_readable_and_refuses_the_default(api, admin):
    base = api.write(None, {"a": "a\n"})
    api.land(base)
    assert api.post("/streams", {"name": "topic", "from": "main"}).status_code == 201
    work = api.write(base, {"b": "b\n"})
    api.land(work, stream="topic")
    assert api.client.delete(api.url("/streams/topic")).status_code == 403  # scope admin
    assert admin.delete("/api/v1/repos/demo/streams/topic").status_code == 204
    assert api.get("/streams/topic").status_code == 404
    assert api.get(f"/changesets/{work}").status_code == 200
    assert api.get(f"/files/{work}/b").content == b"b\n"
    refused = admin.delete("/api/v1/repos/demo/streams/main")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert "stream.deleted" in [e["kind"] for e in _events(api)]


def test_two_agents_appending_to_the_changelog_with_a_union_rule_both_land(api, admin):
    rule = admin.post("/api/v1/repos/demo/resolvers", {"pattern": "CHANGELOG.md", "rule": "union"}, format="json")
    assert rule.status_code == 201, rule.content
    assert api.post("/resolvers", {"pattern": "x", "rule": "union"}).status_code == 403  # scope admin
    base = api.write(None, {"CHANGELOG.md": "# Changes\n"})
    api.land(base)
    first = api.land(api.write(base, {"CHANGELOG.md": "# Changes\n- one\n"}))
    second = api.land(api.write(base, {"CHANGELOG.md": "# Changes\n- two\n"}))
    assert first["outcome"] == "fast_forward"
    assert second["outcome"] == "merge" and second["conflicts"] == []
    assert second["resolved"] == [{"path": "CHANGELOG.md", "rule": "union"}]
    assert api.file("CHANGELOG.md") == b"# Changes\n- one\n- two\n"
    provenance = api.get(f"/changesets/{second['changeset']}").json()["provenance"]
    assert provenance["resolved"] == [{"path": "CHANGELOG.md", "rule": "union"}]
    listed = api.get("/resolvers").json()["resolvers"]
    assert [(r["pattern"], r["rule"]) for r in listed] == [("CHANGELOG.md", "union")]
    assert admin.delete(f"/api/v1/repos/demo/resolvers/{listed[0]['id']}").status_code == 204


def test_a_resolver_rule_body_is_checked(admin):
    admin.post("/api/v1/repos", {"name": "demo"}, format="json")
    for body in (
        {"pattern": "a", "rule": "mine"},
        {"pattern": "", "rule": "union"},
        {"pattern": "a", "rule": "ours", "x": 1},
    ):
        answer = admin.post("/api/v1/repos/demo/resolvers", body, format="json")
        assert answer.status_code == 400, body


def _events(api) -> list[dict]:
    """The repository's events so far, read from the SSE feed's resumable window."""
    from repos.models import Event

    return [
        {"kind": e.kind, "payload": e.payload} for e in Event.objects.filter(repository__name=api.repo).order_by("seq")
    ]


def test_resolver_rules_are_added_in_django_admin(client, django_user_model):
    from repos.models import Repository, ResolverRule
    from repos.services.repositories import create_repository

    create_repository("demo")
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com", "pw"))
    body = {"repository": Repository.objects.get(name="demo").pk, "pattern": "*.lock", "rule": "theirs"}
    answer = client.post("/admin/repos/resolverrule/add/", body)
    assert answer.status_code == 302, answer.content[:2000]
    assert list(ResolverRule.objects.values_list("pattern", "rule")) == [("*.lock", "theirs")]
    refused = client.post("/admin/repos/resolverrule/add/", {**body, "rule": "mine"})
    assert refused.status_code == 200 and ResolverRule.objects.count() == 1


def test_landing_a_deleted_stream_lands_nothing():
    from repos.services.integration import land_stream

    assert land_stream(10**9) == 0


def test_a_rename_delete_conflict_is_resolved_by_the_path_the_rename_made(api):
    base = api.write(None, {"f.txt": lines(5)})
    api.land(base)
    renamed = api.commit(base, [{"op": "rename", "from": "f.txt", "to": "g.txt"}])
    api.land(renamed)
    proposal = api.propose(api.commit(base, [{"op": "delete", "path": "f.txt"}]))
    outcome = api.integrate(proposal).json()
    assert outcome["conflicts"] == [{"path": "g.txt", "kind": "rename/delete", "old_path": "f.txt"}]
    (conflict,) = api.get(f"/proposals/{proposal}/conflicts").json()["conflicts"]
    assert (conflict["base"]["path"], conflict["ours"]["path"], "theirs" in conflict) == ("f.txt", "g.txt", False)
    body = {"stream_head": outcome["stream_head"], "resolutions": [{"path": "g.txt", "delete": True}]}
    assert api.post(f"/proposals/{proposal}/resolve", body).json()["outcome"] == "merge"
    assert api.get("/tree/main").json()["entries"] == []


def test_a_proposal_closed_while_queued_is_not_landed(api):
    from repos.models import Operation, Proposal
    from repos.services import integration, proposals

    head = api.write(None, {"a": "a\n"})
    proposal = Proposal.objects.get(pk=api.propose(head))
    queued = Operation.objects.create(repository=proposal.repository, stream=proposal.stream, proposal=proposal)
    proposals.close(proposal)

    assert integration.land_stream(proposal.stream_id) == 1

    queued.refresh_from_db()
    assert queued.state == "failed" and queued.error["code"] == "wrong_state" and "closed" in queued.error["message"]
    assert api.head() is None


def test_an_integrated_proposal_is_neither_revised_nor_closed(api):
    head = api.write(None, {"a": "a\n"})
    proposal = api.propose(head)
    api.integrate(proposal)
    other = api.write(head, {"b": "b\n"})
    for suffix, body in ((f"/proposals/{proposal}/revisions", {"head": other}), (f"/proposals/{proposal}/close", {})):
        answer = api.post(suffix, body)
        assert answer.status_code == 409 and "integrated" in answer.json()["error"]["message"], suffix
    assert api.post(f"/proposals/{proposal}/revisions", {"head": other, "title": "x"}).status_code == 400
    assert api.get(f"/proposals/{proposal}").json()["head"] == head


def test_a_resolve_retried_with_its_idempotency_key_resolves_once(api):
    _base, proposal, outcome = conflicted(api, lines(5), lines(5, l3="a"), lines(5, l3="b"))
    body = {"stream_head": outcome["stream_head"], "resolutions": [{"path": "f.txt", "content": lines(5, l3="ab")}]}
    url = api.url(f"/proposals/{proposal}/resolve")
    first = api.client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="resolve-1")
    again = api.client.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="resolve-1")
    assert first.status_code == again.status_code == 200, (first.content, again.content)
    assert first.json() == again.json()
    revisions = api.get(f"/proposals/{proposal}/revisions").json()["revisions"]
    assert [r["kind"] for r in revisions] == ["opened", "resolved"]
