"""The Python client (client/, ``agentgit``) against a real server process."""

from __future__ import annotations

import asyncio
import http.client
import io
import select
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

import agentgit
from agentgit import AsyncClient, Client, delete, errors, rename, write

from .conftest import Recording

BINARY = bytes(range(256)) * 8


@pytest.fixture
def ag(server):
    with Client(server.url, server.token) as client:
        yield client


def test_repositories_and_streams(ag, repo):
    assert ag.get_repo(repo).default_stream == "main"
    created = ag.create_repo(f"{repo}-b")
    assert isinstance(created, agentgit.Repository) and created.name == f"{repo}-b"
    names = [r.name for r in ag.iter_repos(page_size=1)]
    assert repo in names and f"{repo}-b" in names and len(names) == len(set(names))
    assert ag.list_repos(limit=1).next is not None

    head = ag.land(repo, "main", [write("a.txt", "a\n")], message="first").changeset
    stream = ag.create_stream(repo, "feature/x", head)
    assert stream.name == "feature/x" and stream.head == head
    assert ag.get_stream(repo, "feature/x").head == head
    assert [s.name for s in ag.iter_streams(repo, page_size=1)] == ["feature/x", "main"]
    assert ag.list_streams(repo).items[0].raw["name"] == "feature/x"


def test_blobs_stream_both_ways_from_bytes_files_and_paths(ag, repo, tmp_path):
    seen: list[tuple[int, int | None]] = []
    from_bytes = ag.upload_blob(repo, BINARY)
    from_file = ag.upload_blob(repo, io.BytesIO(BINARY), progress=lambda done, total: seen.append((done, total)))
    path = tmp_path / "blob.bin"
    path.write_bytes(BINARY)
    from_path = ag.upload_blob(repo, path)
    assert from_bytes == from_file == from_path and ag.has_blob(repo, from_bytes)
    assert seen[-1] == (len(BINARY), len(BINARY))
    assert not ag.has_blob(repo, "0" * 40)

    assert ag.download_blob(repo, from_bytes) == BINARY
    sink = io.BytesIO()
    progress: list[int] = []
    assert ag.download_blob(repo, from_bytes, sink, progress=lambda done, total: progress.append(done)) == len(BINARY)
    assert sink.getvalue() == BINARY and progress[-1] == len(BINARY)


def test_changesets_proposals_integration_and_operations(ag, repo):
    changeset = ag.create_changeset(repo, None, [{"op": "write", "path": "a", "content": "a"}], "first\n")
    assert isinstance(changeset, agentgit.Changeset) and changeset.parents == []
    assert ag.get_changeset(repo, changeset.id).message == "first\n"

    proposal = ag.open_proposal(repo, "main", changeset.id, title="first")
    assert proposal.state == "open" and ag.get_proposal(repo, proposal.id).title == "first"
    outcome = ag.integrate(repo, proposal.id)
    assert isinstance(outcome, agentgit.Outcome) and outcome.outcome == "fast_forward" and not outcome.conflicted
    assert ag.get_operation(repo, outcome.operation).state == "done"
    assert [p.id for p in ag.iter_proposals(repo, state="integrated")] == [proposal.id]
    assert ag.list_proposals(repo, state="open").items == []


def test_land_writes_deletes_renames_and_binary_in_one_change(ag, repo, tmp_path):
    ag.land(repo, "main", [write("old.txt", "old\n"), write("move/me.txt", "me\n")], message="base")
    local = tmp_path / "image.bin"
    local.write_bytes(BINARY)

    landed = ag.land(
        repo,
        "main",
        [
            write("image.bin", local),
            write("run.sh", "#!/bin/sh\n", mode="100755"),
            delete("old.txt"),
            rename("move/me.txt", "me.txt"),
        ],
        message="change\n",
        provenance={"agent": "test"},
    )

    assert landed.outcome == "fast_forward" and landed.stream_head == landed.changeset
    assert ag.read_file(repo, "main", "image.bin") == BINARY
    assert {e.path: e.mode for e in ag.tree(repo, "main")} == {
        "image.bin": "100644",
        "me.txt": "100644",
        "run.sh": "100755",
    }
    assert ag.get_changeset(repo, landed.changeset).provenance == {"agent": "test"}
    sink = io.BytesIO()
    assert ag.download_file(repo, "main", "image.bin", sink) == len(BINARY) and sink.getvalue() == BINARY


def test_a_conflict_is_a_value_with_its_paths(ag, repo):
    base = ag.land(repo, "main", [write("a.txt", "a\n")], message="base").changeset
    ag.land(repo, "main", [write("a.txt", "ours\n")], message="ours")

    landed = ag.land(repo, "main", [write("a.txt", "theirs\n")], message="theirs", parent=base)

    assert landed.conflicted and [(c.path, c.kind) for c in landed.conflicts] == [("a.txt", "content")]
    assert landed.stream_head == ag.get_stream(repo, "main").head


def test_history_tree_diff_blame_and_the_whole_log(ag, repo):
    first = ag.land(repo, "main", [write("src/a.py", "one\n")], message="one").changeset
    for n in range(2, 6):
        ag.land(repo, "main", [write("src/a.py", "".join(f"{i}\n" for i in range(n)))], message=f"v{n}")

    assert [(e.name, e.type) for e in ag.tree(repo, "main")] == [("src", "dir")]
    assert [e.path for e in ag.tree(repo, "main", "src")] == ["src/a.py"]
    diff = ag.diff(repo, first, "main")
    assert [(c.status, c.path) for c in diff.changes] == [("modified", "src/a.py")] and "+4" in diff.patch
    blame = ag.blame(repo, "main", "src/a.py")
    assert [line.text for line in blame] == ["0", "1", "2", "3", "4"] and isinstance(blame[0], agentgit.BlameLine)
    page = ag.log(repo, "main", limit=2)
    assert len(page.items) == 2 and page.next
    entries = list(ag.iter_log(repo, "main", page_size=2))
    assert [e.message for e in entries] == ["v5", "v4", "v3", "v2", "one"]
    assert [e.id for e in ag.iter_log(repo, path="src/a.py", page_size=3)] == [e.id for e in entries]


def test_api_reaches_any_endpoint(ag, repo):
    assert ag.api("GET", f"/repos/{repo}")["name"] == repo
    assert ag.api("GET", f"/api/v1/repos/{repo}/streams/main")["head"] is None
    made = ag.api("POST", f"/repos/{repo}/changesets", json={"parent": None, "operations": []})
    assert len(made["id"]) == 40


# ------------------------------------------------------------------------------ reviews and policies

ONE_APPROVAL = {"rules": [{"streams": ["main"], "required_approvals": 1}]}


def test_a_review_round_trip_under_a_policy(server, ag, repo):
    ag.land(repo, "main", [write("a.txt", "a\n")], message="base")
    assert ag.policy(repo).version == 0
    stored = ag.set_policy(repo, ONE_APPROVAL)
    assert stored.version == 1 and stored.document == ONE_APPROVAL and ag.policy(repo).rules == ONE_APPROVAL["rules"]

    # A landing on the protected stream is refused with what is missing; its proposal waits.
    with pytest.raises(errors.PolicyDenied) as refused:
        ag.land(repo, "main", [write("b.txt", "b\n")], message="wants a review")
    assert refused.value.status == 403 and refused.value.policy_version == 1
    assert [item["requirement"] for item in refused.value.requirements] == ["approvals"]
    assert "needs 1 approval" in refused.value.requirements[0]["message"]
    waiting = refused.value.proposal
    assert ag.get_proposal(repo, waiting).state == "open"
    explained = ag.explain(repo, waiting)
    assert not explained.allowed and explained.policy_version == 1
    assert [(r.requirement, r.met) for r in explained.unmet] == [("approvals", False)]

    # Its author may comment, not approve.
    ag.review(repo, waiting, "comment", "over to you")
    with pytest.raises(errors.Forbidden):
        ag.review(repo, waiting, "approve")
    with Client(server.url, server.token_for("read,review")) as reviewer:
        approval = reviewer.review(repo, waiting, "approve", "looks right")
    assert approval.verdict == "approve" and approval.revision == 1 and approval.withdrawn is None
    assert [(r.verdict, r.body) for r in ag.reviews(repo, waiting)] == [
        ("comment", "over to you"),
        ("approve", "looks right"),
    ]
    now = ag.explain(repo, waiting)
    assert now.allowed and now.approvals == [approval.reviewer] and now.unmet == []

    landed = ag.integrate(repo, waiting)
    assert landed.outcome == "fast_forward"
    decision = ag.get_proposal(repo, waiting).decision
    assert decision["allowed"] and decision["approvals"] == [approval.reviewer] and decision["bypass"] is None


def test_a_withdrawn_approval_no_longer_counts_and_an_admin_bypasses(server, ag, repo):
    ag.land(repo, "main", [write("a.txt", "a\n")], message="base")
    ag.set_policy(repo, ONE_APPROVAL)
    head = ag.create_changeset(repo, ag.get_stream(repo, "main").head, [{"op": "write", "path": "c", "content": "c"}])
    proposal = ag.open_proposal(repo, "main", head.id).id
    with Client(server.url, server.token_for("read,review")) as reviewer:
        approval = reviewer.review(repo, proposal, "approve")
        withdrawn = reviewer.withdraw_review(repo, proposal, approval.id)
    assert withdrawn.withdrawn is not None
    with pytest.raises(errors.PolicyDenied) as refused:
        ag.integrate(repo, proposal)
    assert refused.value.proposal == proposal and refused.value.requirements[0]["requirement"] == "approvals"

    async def bypass():
        async with AsyncClient(server.url, server.token) as admin:
            assert not (await admin.explain(repo, proposal)).allowed
            return await admin.integrate(repo, proposal, bypass="hotfix for the outage")

    assert asyncio.run(bypass()).outcome == "fast_forward"
    assert ag.get_proposal(repo, proposal).decision["bypass"]["reason"] == "hotfix for the outage"


# ------------------------------------------------------------------------------ errors


def test_typed_errors_by_code(server, ag, repo):
    with pytest.raises(errors.NotFound) as not_found:
        ag.get_repo("nope")
    assert not_found.value.status == 404 and not not_found.value.retryable

    with pytest.raises(errors.Invalid) as invalid:
        ag.create_changeset(repo, None, [{"op": "write", "path": "../x", "content": "x"}])
    assert invalid.value.details and invalid.value.status == 400

    with Client(server.url, "agt_not-a-token") as stranger, pytest.raises(errors.Unauthenticated):
        stranger.list_repos()
    with Client(server.url, server.token_for("read")) as reader, pytest.raises(errors.Forbidden):
        reader.land(repo, "main", [write("a", "a")])

    with Client(server.url, server.token_for("read", rate=0.01, burst=1), retries=0) as limited:
        limited.get_repo(repo)
        with pytest.raises(errors.RateLimited) as limited_error:
            limited.get_repo(repo)
    assert limited_error.value.retryable and limited_error.value.retry_after_ms > 1000


def test_too_large_and_unavailable_from_a_server_with_small_limits():
    from tests.deployment import Deployment

    env = {"AGENTGIT_MAX_BODY_BYTES": "4096", "AGENTGIT_MAX_CONCURRENT_REQUESTS": "1"}
    with Deployment("embedded", env=env) as small:
        token = small.create_token("agent")
        small.start_server()
        with Client(small.url, token) as patient:  # retries a 503 from the one slot not yet free
            patient.create_repo("demo")
            with pytest.raises(errors.TooLarge):
                patient.upload_blob("demo", b"x" * 5000)
        with Client(small.url, token, retries=0) as ag:
            # While an upload holds the one slot (its body still coming), another request is shed.
            # The upload is sent by hand so the test can see whether the server shed it instead
            # (it answers a shed request at once, and a held one only when the body is whole):
            # an upload that arrived while a probe held the slot is sent again.
            address = urlsplit(small.url)

            def held_upload() -> http.client.HTTPConnection:
                upload = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
                upload.putrequest("POST", "/api/v1/repos/demo/blobs")
                upload.putheader("Authorization", f"Bearer {token}")
                upload.putheader("Content-Length", "2")
                upload.endheaders(b"x")
                return upload

            def answered(upload: http.client.HTTPConnection) -> bool:
                return bool(select.select([upload.sock], [], [], 0)[0])

            upload = held_upload()
            try:
                deadline = time.monotonic() + 20
                while True:
                    if answered(upload):
                        upload.close()
                        upload = held_upload()
                    try:
                        ag.get_repo("demo")
                    except errors.Unavailable as shed:
                        assert shed.retryable and shed.status == 503
                        break
                    assert time.monotonic() < deadline, "never shed"
                    time.sleep(0.05)
                upload.send(b"y")  # the held upload is whole now, and served
                assert upload.getresponse().status == 201
            finally:
                upload.close()


@pytest.mark.parametrize("code", sorted(errors.BY_CODE))
def test_every_error_code_has_its_class(code):
    error = errors.error_from_body({"error": {"code": code, "message": "m", "retryable": False}}, 400)
    assert type(error) is errors.BY_CODE[code] and error.code == code
    assert isinstance(errors.error_from_body({"error": {"code": "new_code", "message": "m"}}), errors.InternalError)


# ------------------------------------------------------------------------------ retries


def test_a_429_is_retried_after_the_servers_hint(server, repo):
    transport = Recording()
    token = server.token_for("read", rate=0.5, burst=1)  # a token every two seconds
    # A tiny backoff of its own: only by waiting as the server says can the retry succeed.
    with Client(server.url, token, transport=transport, retries=2, backoff_s=0.001) as ag:
        ag.get_repo(repo)
        assert ag.get_repo(repo).name == repo
    assert transport.count("GET", f"/repos/{repo}") == 3  # the first, the 429, the retry


class Pipe(io.RawIOBase):
    """A stream that can be read once, like a pipe."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        piece, self.data = self.data[: size if size >= 0 else None], self.data[size if size >= 0 else len(self.data) :]
        return piece


def test_a_one_shot_upload_is_streamed_and_never_sent_twice(server, repo):
    with Client(server.url, server.token) as ag:
        assert ag.download_blob(repo, ag.upload_blob(repo, Pipe(BINARY))) == BINARY

    transport = Recording()
    with Client(server.url, server.token_for("read,write", rate=0.01, burst=1), transport=transport) as ag:
        ag.get_repo(repo)  # the bucket's one token
        with pytest.raises(errors.RateLimited):
            ag.upload_blob(repo, Pipe(b"once"))  # a bytes body would have been retried after the hint
    assert transport.count("POST", "/blobs") == 1


def test_a_landing_whose_answer_was_lost_is_retried_and_done_once(server, repo):
    transport = Recording(lose=lambda request: request.url.path.endswith("/land"))
    with Client(server.url, server.token, transport=transport) as ag:
        landed = ag.land(repo, "main", [write("a.txt", "a\n"), write("b.txt", "b\n")], message="once")

        lands = [r for r in transport.requests if r.url.path.endswith("/land")]
        assert len(lands) == 2 and len({r.headers["Idempotency-Key"] for r in lands}) == 1
        assert [e.id for e in ag.iter_log(repo)] == [landed.changeset]
        assert [p.head for p in ag.iter_proposals(repo)] == [landed.changeset]


def test_concurrent_landings_with_one_key_land_once(server, repo):
    results: list[agentgit.Landing] = []

    def land() -> None:
        with Client(server.url, server.token) as ag:
            results.append(ag.land(repo, "main", [write("a", "a")], message="race", idempotency_key="the-key"))

    threads = [threading.Thread(target=land) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and len({(r.changeset, r.proposal) for r in results}) == 1
    with Client(server.url, server.token) as ag:
        assert len(ag.list_proposals(repo).items) == 1


# ------------------------------------------------------------------------------ events


def test_events_resume_after_the_server_closes_the_feed(server, ag, repo):
    transport = Recording()
    with Client(server.url, server.token, transport=transport) as watcher:
        feed = watcher.events(repo, timeout_s=0.5, kinds=["stream.integrate"])
        landed = []
        seen = []
        for n in range(3):
            landed.append(ag.land(repo, "main", [write("a", str(n))], message=str(n)).changeset)
            seen.append(next(feed))
            time.sleep(0.7)  # the feed ends meanwhile: the iterator reconnects
        feed.close()

    assert [event.data["changeset"] for event in seen] == landed
    ids = [event.id for event in seen]
    assert ids == sorted(set(ids))
    connections = [r for r in transport.requests if r.url.path.endswith("/events")]
    assert len(connections) >= 3 and "Last-Event-ID" not in connections[0].headers
    resumed = [int(r.headers["Last-Event-ID"]) for r in connections[1:]]
    assert resumed == sorted(resumed) and resumed[-1] >= ids[-2]


def test_events_without_reconnect_end_with_the_feed(ag, repo):
    events = list(ag.events(repo, timeout_s=0.3, reconnect=False))
    assert [e.kind for e in events][:2] == ["repository.created", "stream.created"]
    assert list(ag.events(repo, after=events[-1].id, timeout_s=0.2, reconnect=False)) == []


# ------------------------------------------------------------------------------ async and config


def test_the_async_client_shares_the_sync_one_behaviour(server, repo):
    async def scenario():
        async with AsyncClient(server.url, server.token) as ag:
            first = await ag.land(repo, "main", [write("a.txt", "a\n"), write("b.bin", BINARY)], message="one")
            second = await ag.land(repo, "main", [delete("a.txt")], message="two")
            log = [entry.message async for entry in ag.iter_log(repo, page_size=1)]
            blob = (await ag.tree(repo, first.changeset))[1]
            data = await ag.download_blob(repo, blob.id)
            events = []
            async for event in ag.events(repo, kinds=["stream.integrate"], timeout_s=0.3):
                events.append(event)
                if len(events) == 2:
                    break
            with pytest.raises(errors.NotFound):
                await ag.get_repo("nope")
            return log, data, events, [first.changeset, second.changeset]

    log, data, events, landed = asyncio.run(scenario())
    assert log == ["two", "one"] and data == BINARY and [e.data["changeset"] for e in events] == landed


def test_configuration_comes_from_the_environment(server, repo, monkeypatch):
    monkeypatch.setenv("AGENTGIT_URL", server.url)
    monkeypatch.setenv("AGENTGIT_TOKEN", server.token)
    with Client() as ag:
        assert ag.get_repo(repo).name == repo
    with Client(token="agt_wrong") as ag, pytest.raises(errors.Unauthenticated):
        ag.get_repo(repo)


def test_an_unreachable_server_is_a_transport_error():
    with Client("http://127.0.0.1:9", "t", retries=1, backoff_s=0.001) as ag, pytest.raises(errors.TransportError):
        ag.list_repos()


def test_the_package_does_not_import_django():
    import subprocess
    import sys

    code = "import sys, agentgit; assert not any(m.startswith('django') for m in sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(agentgit.__file__).parent.parent)


def test_retry_after_is_the_hint_when_the_body_has_none():
    from agentgit._core import Config, retry_delay

    response = httpx.Response(
        503, json={"error": {"code": "unavailable", "message": "busy", "retryable": True}}, headers={"Retry-After": "2"}
    )
    error = errors.error_from_response(response)
    assert isinstance(error, errors.Unavailable) and error.retry_after_ms == 2000
    assert retry_delay(0, error, Config.resolve("http://x", "t")) == 2.0
