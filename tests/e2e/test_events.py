"""Events at scale (issue 10), against real server processes: every integration reaches every
subscriber once, in order, through each process's relay, at a cost that does not grow with
subscribers.

The scenario is the benchmark's (benchmarks/events_bench.py): 100 subscribers (50 SSE, 50
WebSocket) follow one repository while 16 writers integrate on their own streams; 10 of the
subscribers disconnect half-way and resume from the last id they saw. ``AGENTGIT_E2E_EVENTS_S``
sets how long the writers write (default 6 s; the issue's 10 s when CI time allows).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from benchmarks.events_bench import run_fan_out
from tests.deployment import ApiClient, Deployment

SECONDS = float(os.environ.get("AGENTGIT_E2E_EVENTS_S", "6"))


@contextlib.contextmanager
def deployment(mode: str, **env: str) -> Iterator[Deployment]:
    with Deployment(mode, env=env) as server:
        server.token = server.create_token()
        server.start_server(workers=2 if mode == "production" else 4)
        if mode == "production":
            server.start_worker(concurrency=2)
        yield server


@pytest.fixture(scope="module", params=["production", "embedded"])
def served(request):
    with deployment(request.param) as server:
        yield server


def test_every_integration_reaches_every_subscriber_once_in_order(served):
    run = run_fan_out(served, repo="fan", subscribers=100, writers=16, seconds=SECONDS, resumers=10)

    assert not run.problems, run.problems
    assert run.integrations >= 16 and len(run.truth) == run.integrations
    # Each of the 100 — the 10 that disconnected and resumed among them — saw exactly the
    # outbox's stream.integrate ids, each once, in order.
    assert run.check_exactly_once() == []
    assert len(run.seen) == 100


def test_an_unauthorized_subscriber_is_refused_and_a_read_only_one_admitted(served):
    reader = served.create_token("reader", scopes="read")
    with ApiClient(served.url, served.token) as api:
        api.create_repo("guarded")
    url = f"{served.url}/api/v1/repos/guarded/events"
    ws = served.url.replace("http://", "ws://") + "/ws/repos/guarded/events"
    with httpx.Client(timeout=30, trust_env=False) as http:
        assert http.get(url, params={"timeout": 0}).status_code == 401
        refused = http.get(url, params={"timeout": 0}, headers={"Authorization": "Bearer nope"})
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthenticated"
        admitted = http.get(url, params={"timeout": 0.5}, headers={"Authorization": f"Bearer {reader}"})
        assert admitted.status_code == 200 and "event: repository.created" in admitted.text
    with connect(f"{ws}?token=nope", open_timeout=10) as refused_socket:
        with pytest.raises(ConnectionClosed) as closed:
            refused_socket.recv(timeout=10)
        assert closed.value.rcvd.code == 4401
    with connect(f"{ws}?token={reader}", open_timeout=10) as socket_:
        assert json.loads(socket_.recv(timeout=10))["event"] == "repository.created"


def test_resuming_from_a_pruned_id_says_where_history_starts():
    with deployment("embedded", AGENTGIT_EVENT_RETENTION_S="0") as server:
        with ApiClient(server.url, server.token) as api:
            api.create_repo("pruned")
            head = api.write("pruned", None, {"a": "1\n"})
            api.integrate("pruned", api.open_proposal("pruned", head)["id"])
        server.manage("shell", "-c", "from repos.services import events; events.prune()")
        url = f"{server.url}/api/v1/repos/pruned/events"
        headers = {"Authorization": f"Bearer {server.token}"}
        with httpx.Client(timeout=30, trust_env=False, headers=headers) as http:
            refused = http.get(url, params={"after": 1, "timeout": 0})
            assert refused.status_code == 400
            error = refused.json()["error"]
            assert error["code"] == "invalid" and error["details"][0]["first_available"] == 4
            # From there on, nothing is missing: the last event, the integration, is still there.
            kept = http.get(url, params={"after": 3, "timeout": 0.5}).text
            assert "event: stream.integrate" in kept
            metrics = http.get(f"{server.url}/metrics").text
            assert "agentgit_outbox_events 1.0" in metrics


def test_idle_subscribers_cost_the_database_no_queries():
    """100 idle subscribers: the database answers no more transactions than with 1 (counted in
    pg_stat_database, never timed), give or take the few that PostgreSQL's own autovacuum may
    commit in the database meanwhile; polling would cost at least one per subscriber."""
    with deployment("production") as server:
        with ApiClient(server.url, server.token) as api:
            api.create_repo("idle")

        def transactions() -> int:
            # Backends report their counts at most every second, and within 10 s when idle.
            time.sleep(11)
            rows = server.database.query(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                (server.database.name,),
            )
            return int(rows[0][0])

        def idle_queries(subscribers: int) -> int:
            stop = threading.Event()
            ready = threading.Semaphore(0)
            threads = [
                threading.Thread(target=_idle_sse, args=(server, "idle", stop, ready), daemon=True)
                for _ in range(subscribers)
            ]
            for thread in threads:
                thread.start()
            for _ in threads:  # every subscriber has its first event: its own setup is done
                assert ready.acquire(timeout=60)
            before = transactions()
            time.sleep(5)
            after = transactions()
            stop.set()
            return after - before

        one, hundred = idle_queries(1), idle_queries(100)
        # Our own counting query is the only transaction of ours in each window (one per read).
        assert one <= 3 and hundred <= one + 3, (one, hundred)


def _idle_sse(server: Deployment, repo: str, stop: threading.Event, ready: threading.Semaphore | None) -> None:
    headers = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(timeout=None, trust_env=False) as http:
        url = f"{server.url}/api/v1/repos/{repo}/events"
        with http.stream("GET", url, params={"timeout": 60}, headers=headers) as response:
            for line in response.iter_lines():
                if line.startswith("event:") and ready is not None:
                    ready.release()
                    ready = None
                if stop.is_set():
                    return
