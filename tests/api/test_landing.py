"""Landing in one call, and Idempotency-Key on the creating endpoints (API.md)."""

from __future__ import annotations

from unittest.mock import patch

import pytest

from repos.models import Changeset, Event, IdempotencyKey, Operation, Proposal
from repos.services import integration

pytestmark = pytest.mark.django_db(transaction=True)


def land(api, body: dict, stream: str = "main", key: str | None = None):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return api.client.post(api.url(f"/streams/{stream}/land"), body, format="json", **headers)


def test_landing_on_an_empty_stream_fast_forwards_and_names_what_it_made(api):
    body = {"message": "first\n", "operations": [{"op": "write", "path": "a.txt", "content": "a\n"}]}

    response = land(api, body)

    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["outcome"] == "fast_forward" and answer["conflicts"] == []
    assert answer["stream_head"] == answer["changeset"] == api.head()
    proposal = Proposal.objects.get(pk=answer["proposal"])
    assert proposal.state == "integrated" and proposal.title == "first" and proposal.head == answer["changeset"]
    assert api.file("a.txt") == b"a\n"


def test_landing_defaults_its_parent_to_the_stream_head_and_merges_a_stale_parent(api):
    base = land(api, {"message": "base", "operations": [{"op": "write", "path": "a.txt", "content": "a\n"}]}).json()
    on_head = land(api, {"message": "b", "operations": [{"op": "write", "path": "b.txt", "content": "b\n"}]}).json()
    assert on_head["outcome"] == "fast_forward"
    assert Changeset.objects.get(commit_id=on_head["changeset"]).parents == [base["changeset"]]

    stale = {
        "parent": base["changeset"],
        "message": "c",
        "operations": [{"op": "write", "path": "c.txt", "content": "c"}],
    }
    merged = land(api, stale).json()

    assert merged["outcome"] == "merge" and merged["stream_head"] == api.head() != merged["changeset"]
    assert api.file("b.txt") == b"b\n" and api.file("c.txt") == b"c"


def test_a_conflicting_landing_answers_the_paths_and_leaves_the_head(api):
    base = land(api, {"message": "base", "operations": [{"op": "write", "path": "a.txt", "content": "a\n"}]}).json()
    land(api, {"message": "ours", "operations": [{"op": "write", "path": "a.txt", "content": "ours\n"}]})
    head = api.head()

    theirs = {
        "parent": base["changeset"],
        "message": "t",
        "operations": [{"op": "write", "path": "a.txt", "content": "t\n"}],
    }
    response = land(api, theirs)

    assert response.status_code == 200
    answer = response.json()
    assert answer["outcome"] == "conflict" and answer["stream_head"] == head == api.head()
    assert answer["conflicts"] == [{"path": "a.txt", "kind": "content"}]
    assert Proposal.objects.get(pk=answer["proposal"]).state == "conflicted"


def test_a_refused_landing_leaves_nothing_behind(api):
    land(api, {"message": "base", "operations": [{"op": "write", "path": "a.txt", "content": "a\n"}]})
    counts = (Changeset.objects.count(), Proposal.objects.count(), Operation.objects.count(), Event.objects.count())

    unsafe = land(api, {"message": "x", "operations": [{"op": "write", "path": "../etc", "content": "x"}]})
    unknown_stream = land(api, {"message": "x", "operations": []}, stream="nope")
    unknown_field = land(api, {"message": "x", "operations": [], "head": "main"})

    assert unsafe.status_code == 400 and unsafe.json()["error"]["code"] == "invalid"
    assert unknown_stream.status_code == 404
    assert unknown_field.status_code == 400
    assert [detail["field"] for detail in unknown_field.json()["error"]["details"]] == ["head"]
    assert counts == (
        Changeset.objects.count(),
        Proposal.objects.count(),
        Operation.objects.count(),
        Event.objects.count(),
    )


def test_landing_in_an_unknown_repository_is_not_found_whatever_the_body(api):
    good = {"message": "x", "operations": [{"op": "write", "path": "a", "content": "a"}]}
    bad = {"message": "x", "operations": [], "head": "main"}
    for body in (good, bad):
        response = api.client.post("/api/v1/repos/nope/streams/main/land", body, format="json")
        assert response.status_code == 404 and response.json()["error"]["message"] == "no repository named 'nope'"
    assert Changeset.objects.count() == 0


def test_landing_needs_both_write_and_integrate(api, client_for):
    body = {"message": "x", "operations": [{"op": "write", "path": "a", "content": "a"}]}
    for scopes in (["read", "write"], ["read", "integrate"]):
        client = client_for(scopes)
        response = client.post("/api/v1/repos/demo/streams/main/land", body, format="json")
        assert response.status_code == 403, scopes
    assert Changeset.objects.count() == 0


def test_a_landing_retried_with_its_key_is_done_once_and_answers_the_same(api):
    body = {"message": "once", "operations": [{"op": "write", "path": "a.txt", "content": "a\n"}]}

    first = land(api, body, key="k-1")
    again = land(api, body, key="k-1")

    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert Changeset.objects.count() == Proposal.objects.count() == Operation.objects.count() == 1


def test_a_key_reused_with_another_body_is_refused(api):
    land(api, {"message": "one", "operations": [{"op": "write", "path": "a.txt", "content": "a\n"}]}, key="k")

    response = land(api, {"message": "two", "operations": [{"op": "write", "path": "b", "content": "b"}]}, key="k")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid" and error["details"][0]["code"] == "idempotency_key_reused"
    assert Changeset.objects.count() == 1


def test_keys_belong_to_their_credential(api, client_for):
    other = client_for(["read", "write"])
    body = {"parent": None, "message": "m", "operations": [{"op": "write", "path": "a", "content": "a"}]}
    mine = api.client.post(api.url("/changesets"), body, format="json", HTTP_IDEMPOTENCY_KEY="shared")
    theirs = other.post(api.url("/changesets"), {**body, "message": "n"}, format="json", HTTP_IDEMPOTENCY_KEY="shared")

    assert mine.status_code == theirs.status_code == 201
    assert mine.json()["id"] != theirs.json()["id"] and IdempotencyKey.objects.count() == 2


def test_changesets_proposals_and_integrate_replay_their_first_answer(api):
    def post(suffix, body, key):
        return api.client.post(api.url(suffix), body, format="json", HTTP_IDEMPOTENCY_KEY=key)

    body = {"parent": None, "message": "m", "operations": [{"op": "write", "path": "a", "content": "a"}]}
    changeset = post("/changesets", body, "c")
    assert post("/changesets", body, "c").json() == changeset.json()

    proposal = post("/proposals", {"stream": "main", "head": changeset.json()["id"]}, "p")
    integrated = post(f"/proposals/{proposal.json()['id']}/integrate", {}, "i")
    # The proposal is integrated now; its replay still answers it as it was created.
    replayed = post("/proposals", {"stream": "main", "head": changeset.json()["id"]}, "p")
    assert replayed.status_code == 201 and replayed.json() == proposal.json() and replayed.json()["state"] == "open"
    again = post(f"/proposals/{proposal.json()['id']}/integrate", {}, "i")
    assert again.status_code == integrated.status_code == 200 and again.json() == integrated.json()
    assert Proposal.objects.count() == Operation.objects.count() == 1


def test_a_refused_request_records_no_key(api):
    bad = {"parent": None, "message": "m", "operations": [{"op": "write", "path": "/abs", "content": "a"}]}
    response = api.client.post(api.url("/changesets"), bad, format="json", HTTP_IDEMPOTENCY_KEY="bad")

    assert response.status_code == 400 and IdempotencyKey.objects.count() == 0


def test_a_malformed_key_is_refused(api):
    body = {"parent": None, "message": "m", "operations": [{"op": "write", "path": "a.txt", "content": "a"}]}
    response = api.client.post(api.url("/changesets"), body, format="json", HTTP_IDEMPOTENCY_KEY="x" * 256)

    assert response.status_code == 400 and "Idempotency-Key" in response.json()["error"]["message"]


def test_an_expired_key_is_forgotten(api, settings):
    settings.AGENTGIT = {**settings.AGENTGIT, "IDEMPOTENCY_TTL_S": -1}
    body = {"message": "m", "operations": [{"op": "write", "path": "a", "content": "a"}]}
    land(api, body, key="old")

    response = land(api, {**body, "message": "other"}, key="old")

    assert response.status_code == 200 and Proposal.objects.count() == 2


def test_a_retry_of_an_aborted_integration_integrates_again(api, settings):
    settings.AGENTGIT = {**settings.AGENTGIT, "INTEGRATE_ATTEMPTS": 2}
    body = {"message": "m", "operations": [{"op": "write", "path": "a", "content": "a"}]}
    # Given a landing whose integration failed as aborted (the stream kept moving; the
    # proposal is untouched), as the compare-and-swap's exhausted retries leave it
    with patch.object(integration, "_land_once", side_effect=integration._LostRace(0)):
        first = land(api, body, key="k")
    assert first.status_code == 409 and first.json()["error"]["code"] == "aborted"
    assert first.json()["error"]["details"][-1]["proposal"] == Proposal.objects.get().pk

    # When it is retried with its key, then it integrates (once), as aborted asks
    again = land(api, body, key="k")

    assert again.status_code == 200 and again.json()["outcome"] == "fast_forward"
    assert Changeset.objects.count() == Proposal.objects.count() == 1
    assert land(api, body, key="k").json() == again.json()


def test_a_landing_reads_back_as_it_answered_and_announces_the_proposal_first(api):
    # Given a stream with a head
    land(api, {"message": "base", "operations": [{"op": "write", "path": "a.txt", "content": "a\n"}]})
    seq = Event.objects.order_by("-seq").values_list("seq", flat=True).first()

    # When a change lands in one call
    answer = land(api, {"message": "b", "operations": [{"op": "write", "path": "b.txt", "content": "b\n"}]}).json()

    # Then the operation, the proposal's revision and the events say what the answer said
    operation = api.get(f"/operations/{answer['operation']}").json()
    assert operation["state"] == "done" and operation["attempts"] == 1 and operation["outcome"] == answer
    assert operation["created"] <= operation["finished"]
    proposal = api.get(f"/proposals/{answer['proposal']}").json()
    assert proposal["state"] == "integrated" and proposal["outcome"] == "fast_forward"
    (revision,) = api.get(f"/proposals/{answer['proposal']}/revisions").json()["revisions"]
    assert revision["outcome"] == operation["outcome"]
    events = list(Event.objects.filter(seq__gt=seq).order_by("seq").values_list("seq", "kind", "payload"))
    assert [(s - seq, kind) for s, kind, _ in events] == [(1, "proposal.opened"), (2, "stream.integrate")]
    assert events[1][2]["head"] == answer["stream_head"] and events[1][2]["paths"] == ["b.txt"]


def test_a_landing_behind_a_queued_operation_lands_after_it(api, stream_busy):
    # Given a proposal queued on the stream and not landed yet
    base = land(api, {"message": "base", "operations": [{"op": "write", "path": "a.txt", "content": "a\n"}]})
    queued = api.propose(api.write(base.json()["changeset"], {"q.txt": "q\n"}))
    with patch.object(integration, "_enqueue_on_commit"):
        assert api.post(f"/proposals/{queued}/integrate", {}, wait=0).status_code == 202

    # When a change lands in one call
    answer = land(api, {"message": "b", "operations": [{"op": "write", "path": "b.txt", "content": "b\n"}]}).json()

    # Then the queued one landed first, and this one on top of it
    assert Proposal.objects.get(pk=queued).state == "integrated"
    assert answer["outcome"] == "merge" and api.head() == answer["stream_head"]
    assert api.file("q.txt") == b"q\n" and api.file("b.txt") == b"b\n"
    assert not Operation.objects.filter(state="queued").exists()
    kinds = list(Event.objects.order_by("seq").values_list("kind", "payload__proposal"))
    assert kinds[-3:] == [
        ("proposal.opened", answer["proposal"]),
        ("stream.integrate", queued),
        ("stream.integrate", answer["proposal"]),
    ]


def test_a_landing_that_merges_names_its_proposal_and_reads_back_as_it_answered(api):
    # Given a stream moved on since the changeset's parent
    base = land(api, {"message": "base", "operations": [{"op": "write", "path": "a.txt", "content": "a\n"}]}).json()
    land(api, {"message": "b", "operations": [{"op": "write", "path": "b.txt", "content": "b\n"}]})
    seq = Event.objects.order_by("-seq").values_list("seq", flat=True).first()

    # When a change on the old head lands in one call
    stale = {
        "parent": base["changeset"],
        "message": "c",
        "operations": [{"op": "write", "path": "c.txt", "content": "c"}],
    }
    answer = land(api, stale).json()

    # Then the merge names the proposal, and its records and events say what the answer said
    assert answer["outcome"] == "merge"
    merge = api.get(f"/changesets/{answer['stream_head']}").json()
    assert merge["message"] == f"Integrate proposal {answer['proposal']} into main\n"
    operation = api.get(f"/operations/{answer['operation']}").json()
    assert operation["outcome"] == {k: v for k, v in answer.items() if k != "changeset"} | {
        "changeset": answer["stream_head"]
    }
    (revision,) = api.get(f"/proposals/{answer['proposal']}/revisions").json()["revisions"]
    assert revision["outcome"] == operation["outcome"]
    events = list(Event.objects.filter(seq__gt=seq).order_by("seq").values_list("kind", "payload__proposal"))
    assert events == [("proposal.opened", answer["proposal"]), ("stream.integrate", answer["proposal"])]
