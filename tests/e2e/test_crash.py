"""A worker killed in the middle of landing loses nothing and lands nothing twice.

Production mode (PostgreSQL, Redis, uvicorn, Celery). For each crash point of the landing
(``repos.services.integration.CRASH_POINTS``): a worker started with ``AGENTGIT_CRASH_AT=<point>``
(the solo pool, so the worker process itself is what dies) takes the integration of a proposal
that needs a merge and SIGKILLs itself at that step. Then a normal worker starts; recovery runs
when it is ready (workers/tasks.py). Afterwards: the proposal has exactly one operation and it is
done; exactly one ``stream.integrate`` event names it; the proposal is integrated, once; the stream
head is the merge of the old head and the proposal, holding both changes; ``git fsck --strict``
finds every object the head names.
"""

from __future__ import annotations

import re
import signal
import time

import pytest

from repos.services.integration import CRASH_POINTS

from .support import (
    LANDING_TIMEOUT_S,
    TEXT,
    ApiClient,
    Deployment,
    derived_changesets,
    events_of,
    fsck,
    operations_of,
    queued_operations,
    sql,
    stream_held,
)


@pytest.fixture(scope="module")
def client(production):
    with ApiClient(production.url, production.token) as api:
        yield api


#: A landing task's last log line, before the number of operations it landed.
LANDED_LINE = r"workers\.tasks\.(?:recover|land_stream)\[[^\]]+\] succeeded in [0-9.]+s: "


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_worker_killed_while_landing_is_recovered_exactly_once(production, client, point):
    repo = f"crash-{point.replace('_', '-')}"
    client.create_repo(repo)
    # A stream whose head is not an ancestor of the proposal: landing it writes a merge changeset.
    # The head is set by creating the stream at a revision, so no worker is needed yet.
    base = client.write(repo, None, {"f.txt": TEXT, "g.txt": "g\n"}, "base")
    theirs = client.write(repo, base, {"g.txt": "g changed on the stream\n"}, "on the stream")
    client.create_stream(repo, "target", theirs)
    mine = client.write(repo, base, {"f.txt": TEXT.replace("line 3\n", "line three\n")}, "proposed")
    proposal = client.open_proposal(repo, mine, stream="target")["id"]

    crashing = production.start_worker(env={"AGENTGIT_CRASH_AT": point}, pool="solo")
    with stream_held(production, repo, "target"):  # queued for the worker, not landed by the request
        answer = client.integrate_raw(repo, proposal, wait=0)
    assert answer.status_code == 202, answer.text
    operation = answer.json()["operation"]

    status = crashing.wait_exit(LANDING_TIMEOUT_S)
    assert status == -signal.SIGKILL, f"the worker exited with {status}, not SIGKILL:\n{crashing.log_tail()}"
    crashing.kill()  # nothing of it may linger (its group)
    if point == "committed":  # it died after the commit: the landing is complete already
        assert client.operation(repo, operation)["state"] == "done"
    else:  # it died inside the transaction: rolled back, nothing moved
        assert client.operation(repo, operation)["state"] == "queued"
        assert client.head(repo, "target") == theirs
        assert events_of(production, proposal, "stream.integrate") == 0

    recovering = production.start_worker()
    try:
        done = client.wait_operation(repo, operation, LANDING_TIMEOUT_S)
        if point != "committed":
            # The task that landed it reports once it returns (a loaded machine may take a moment
            # after the commit); a worker stopped before that would never say which one it was.
            recovering.wait_for_log(LANDED_LINE + r"[1-9]", LANDING_TIMEOUT_S)
    finally:
        recovering.stop()
    if point != "committed":
        # Landed by the new worker: by recovery at its start, or by the dead worker's landing task,
        # redelivered because it was never acknowledged — whichever comes first; the other finds
        # nothing left to land. Exactly one of them landed exactly one operation.
        landed = re.findall(LANDED_LINE + r"(\d+)", recovering.log())
        assert sorted(int(count) for count in landed if count != "0") == [1], recovering.log_tail()

    assert done["state"] == "done", done
    outcome = done["outcome"]
    assert outcome["outcome"] == "merge", outcome
    assert [state for state, _ in operations_of(production, proposal)] == ["done"]
    assert events_of(production, proposal, "stream.integrate") == 1
    assert queued_operations(production) == 0

    head = client.head(repo, "target")
    assert head == outcome["stream_head"] == outcome["changeset"]
    assert client.get_json(f"/repos/{repo}/changesets/{head}")["parents"] == [theirs, mine]
    assert client.file(repo, head, "f.txt") == TEXT.replace("line 3\n", "line three\n").encode()
    assert client.file(repo, head, "g.txt") == b"g changed on the stream\n"
    state = client.proposal(repo, proposal)
    assert state["state"] == "integrated" and state["changeset"] == head
    fsck(production.repository_dir(repo), head)
    # The derived data committed with the head (or was derived by recovery): the whole history.
    assert derived_changesets(production, repo) == {base, theirs, mine, head}
    log = client.get_json(f"/repos/{repo}/log", rev="target", path="g.txt")
    assert [changeset["id"] for changeset in log["changesets"]] == [theirs, base]

    # Asking again is the same answer, and lands nothing more.
    again = client.integrate_raw(repo, proposal, wait=0)
    assert again.status_code == 200 and again.json() == outcome
    assert events_of(production, proposal, "stream.integrate") == 1
    assert client.head(repo, "target") == head


# ------------------------------------------------------------------------------ a batch waiting for checks


def _pending_checks(deployment: Deployment, repo: str) -> list[str]:
    """The trees of the repository with a pending check, as asked for by the gate."""
    rows = sql(
        deployment,
        "SELECT c.tree FROM repos_checkresult c JOIN repos_repository r ON r.id = c.repository_id"
        " WHERE r.name = %s AND c.state = 'pending' ORDER BY c.id",
        (repo,),
    )
    return [tree for (tree,) in rows]


@pytest.mark.parametrize("mode", ["embedded", "production"])
def test_a_batch_waiting_for_its_checks_survives_sigkill_and_lands_only_what_passed(mode, request):
    """SIGKILL of the server (and, in production, of the workers) while a batch waits for its
    required check: no proposal is lost, nothing lands untested, and once the check reports on
    the restarted deployment every proposal lands on a tree that passed."""
    deployment: Deployment = request.getfixturevalue(mode)
    repo = f"gated-{mode}"
    with ApiClient(deployment.url, deployment.token) as client:
        client.create_repo(repo)
        base = client.write(repo, None, {"README.md": "gated\n"}, "base")
        client.create_stream(repo, "gated", base)
        policy = {"rules": [{"streams": ["gated"], "required_checks": ["ci/test"], "check_timeout_s": 3600}]}
        client.request("PUT", f"/repos/{repo}/policy", json=policy)
        heads = [client.write(repo, base, {f"{name}.txt": f"{name}\n"}, name) for name in ("one", "two", "three")]
        proposals = [client.open_proposal(repo, head, stream="gated")["id"] for head in heads]
    workers = [deployment.start_worker()] if mode == "production" else []
    with ApiClient(deployment.url, deployment.token) as client:
        operations = []
        for proposal in proposals:
            answer = client.integrate_raw(repo, proposal, wait=0)
            assert answer.status_code == 202, answer.text
            operations.append(answer.json()["operation"])
        # The gate asked: the first proposal's result, and the others' own changesets.
        deadline = time.monotonic() + LANDING_TIMEOUT_S
        while len(_pending_checks(deployment, repo)) < len(proposals) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(_pending_checks(deployment, repo)) == len(proposals)

    for process in [deployment.server, *workers]:
        process.kill()
    deployment.start_server(workers=2 if mode == "production" else 1)
    workers = [deployment.start_worker()] if mode == "production" else []
    try:
        with ApiClient(deployment.url, deployment.token) as client:
            assert client.head(repo, "gated") == base  # nothing landed untested
            for operation in operations:
                assert client.operation(repo, operation)["state"] == "queued"
            ci_token = deployment.create_token("ci", "read,checks", rate=100_000, burst=100_000)
            with ApiClient(deployment.url, ci_token) as ci:
                deadline = time.monotonic() + LANDING_TIMEOUT_S
                while any(client.operation(repo, op)["state"] == "queued" for op in operations):
                    assert time.monotonic() < deadline, _pending_checks(deployment, repo)
                    for tree in _pending_checks(deployment, repo):
                        body = {"tree": tree, "name": "ci/test", "state": "success", "url": "https://ci.example/1"}
                        ci.request("POST", f"/repos/{repo}/checks", json=body, expect=(201,))
                    time.sleep(0.2)
            head = client.head(repo, "gated")
            landed = {client.operation(repo, op)["state"] for op in operations}
            assert landed == {"done"}
            tree = client.get_json(f"/repos/{repo}/changesets/{head}")["tree"]
            results = client.get_json(f"/repos/{repo}/checks", tree=tree)
            states = {item["name"]: item["state"] for item in results["checks"]}
            assert states == {"ci/test": "success"}  # the head's own tree passed
            for name in ("one", "two", "three"):
                assert client.file(repo, head, f"{name}.txt") == f"{name}\n".encode()
            for proposal in proposals:
                decision = client.proposal(repo, proposal)["decision"]
                tested = decision["checks"]["tree"]
                assert {r["state"] for r in client.get_json(f"/repos/{repo}/checks", tree=tested)["checks"]} == {
                    "success"
                }
                assert events_of(deployment, proposal, "stream.integrate") == 1
        fsck(deployment.repository_dir(repo), head)
    finally:
        for worker in workers:
            worker.stop()
