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
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.sync.client import connect
from websockets.uri import parse_uri

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


def test_old_events_are_pruned_without_a_command_and_resuming_before_them_says_where_history_starts():
    """The embedded default has no Celery beat: its server processes prune the outbox
    themselves, after events commit (here every time: retention 0, due every 0 s)."""
    env = {"AGENTGIT_EVENT_RETENTION_S": "0", "AGENTGIT_EVENT_PRUNE_EVERY_S": "0"}
    with deployment("embedded", **env) as server:
        with ApiClient(server.url, server.token) as api:
            api.create_repo("pruned")
            head = api.write("pruned", None, {"a": "1\n"})
            api.integrate("pruned", api.open_proposal("pruned", head)["id"])
        url = f"{server.url}/api/v1/repos/pruned/events"
        headers = {"Authorization": f"Bearer {server.token}"}
        with httpx.Client(timeout=30, trust_env=False, headers=headers) as http:
            deadline = time.monotonic() + 30  # the prune runs on a thread of its own, just after
            while (refused := http.get(url, params={"after": 1, "timeout": 0})).status_code == 200:
                assert time.monotonic() < deadline, "nothing was pruned"
                time.sleep(0.2)
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


# ------------------------------------------------------------------------------ a slow consumer

#: The server's buffer per subscriber in the slow-consumer test: small, so it overflows soon.
SMALL_BUFFER = 4
#: A directory name of 250 characters, 16 deep: each changed path is about 4 kB, so an event
#: listing 100 is about 400 kB, and a few fill what the kernel buffers for a socket that is
#: not read (about 3 MB on loopback) before the server's writes wait.
DEEP = "/".join(["d" * 250] * 16)


def test_a_subscriber_that_stops_reading_is_closed_with_its_resume_id_and_the_others_get_everything():
    """Two subscribers (SSE and WebSocket) connect, then read nothing while writers integrate
    16 times, each integration's event some 400 kB (100 long changed paths); a third reads
    along. Once
    the slow ones read again, each finds a gapless prefix of the events — what the server had
    buffered for it, a bounded amount — then its close: the SSE comment and the end of the
    stream, the WebSocket's 4008, both with the id to resume after; resuming there misses
    nothing. The third got every event once, in order."""
    with deployment("embedded", AGENTGIT_EVENT_BUFFER=str(SMALL_BUFFER)) as server:
        with ApiClient(server.url, server.token) as api:
            api.create_repo("slow")
        start = max(_ids(server, "slow", after=0))
        reader = _Reader(server, "slow", start)
        slow_sse = _stalled_sse(server, "slow", start)
        slow_ws = _stalled_ws(server, "slow", start)
        _integrate(server, "slow", writers=2, each=8)
        last = max(_ids(server, "slow", after=start))

        sse_ids, sse_tail = _read_sse_to_end(slow_sse)
        ws_ids, close = _read_ws_to_close(slow_ws)
        for ids in (sse_ids, ws_ids):
            assert ids == list(range(start + 1, ids[-1] + 1))  # a gapless prefix, each once
            assert ids[-1] < last - SMALL_BUFFER  # dropped well before the end: not all buffered
        assert sse_tail == f": too far behind; resume after {sse_ids[-1]}"
        assert close == (4008, f"too far behind; resume after {ws_ids[-1]}")
        # Resuming after that id misses nothing and repeats nothing.
        assert _ids(server, "slow", after=sse_ids[-1]) == list(range(sse_ids[-1] + 1, last + 1))
        assert reader.until(last) == list(range(start + 1, last + 1))


def _ids(server: Deployment, repo: str, after: int) -> list[int]:
    """The ids the SSE feed sends after ``after`` within half a second (the outbox, caught up)."""
    headers = {"Authorization": f"Bearer {server.token}", "Last-Event-ID": str(after)}
    with httpx.Client(timeout=60, trust_env=False) as http:
        body = http.get(f"{server.url}/api/v1/repos/{repo}/events", params={"timeout": 0.5}, headers=headers).text
    return [int(line[4:]) for line in body.splitlines() if line.startswith("id: ")]


def _integrate(server: Deployment, repo: str, *, writers: int, each: int) -> None:
    """``writers`` threads, each integrating ``each`` changesets of 100 deep files on its own stream."""
    errors: list[BaseException] = []

    def write(index: int) -> None:
        try:
            with ApiClient(server.url, server.token) as api:
                head = api.head(repo)
                api.create_stream(repo, f"w{index}", head)
                for n in range(each):
                    files = {f"w{index}/{DEEP}/{i:03}.txt": f"{n}\n" for i in range(100)}
                    head = api.write(repo, head, files)
                    head = api.integrate(repo, api.open_proposal(repo, head, stream=f"w{index}")["id"])["stream_head"]
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=write, args=(index,)) for index in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def _connect_small(server: Deployment) -> socket.socket:
    """A TCP connection to the server whose receive buffer is small: one that stops reading
    makes the server's writes wait soon, as a stalled client across a network would."""
    host, port = server.url.removeprefix("http://").split(":")
    connection = socket.socket()
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    connection.connect((host, int(port)))
    connection.settimeout(60)
    return connection


def _stalled_sse(server: Deployment, repo: str, after: int) -> socket.socket:
    """An SSE request sent, its response's headers read, then nothing more (yet)."""
    connection = _connect_small(server)
    connection.sendall(
        f"GET /api/v1/repos/{repo}/events?timeout=300 HTTP/1.1\r\nHost: {server.url.removeprefix('http://')}\r\n"
        f"Authorization: Bearer {server.token}\r\nLast-Event-ID: {after}\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += connection.recv(1)  # byte by byte: not a byte of the body read
    assert head.startswith(b"HTTP/1.1 200"), head
    return connection


def _read_sse_to_end(connection: socket.socket) -> tuple[list[int], str]:
    """The ids of the events the stream sent and its last comment, read until it ends."""
    body = b""
    while not body.endswith(b"\r\n0\r\n\r\n"):  # the chunked body's end
        data = connection.recv(65536)
        assert data, "the connection closed before the stream ended"
        body += data
    connection.close()
    text, rest = "", body
    while rest:  # de-chunk
        size, _, rest = rest.partition(b"\r\n")
        text += rest[: int(size, 16)].decode()
        rest = rest[int(size, 16) + 2 :]
    blocks = [block for block in text.split("\n\n") if block]
    ids = [int(block.split("\n")[0][4:]) for block in blocks if block.startswith("id: ")]
    return ids, blocks[-1]


def _stalled_ws(server: Deployment, repo: str, after: int) -> tuple[socket.socket, ClientProtocol]:
    """A WebSocket opened (the handshake answered), then nothing read (yet)."""
    connection = _connect_small(server)
    url = server.url.replace("http://", "ws://") + f"/ws/repos/{repo}/events?token={server.token}&after={after}"
    protocol = ClientProtocol(parse_uri(url))
    protocol.send_request(protocol.connect())
    connection.sendall(b"".join(protocol.data_to_send()))
    while not protocol.handshake_exc and protocol.state is not State.OPEN:
        protocol.receive_data(connection.recv(1))  # byte by byte: not a frame read
    assert protocol.state is State.OPEN, protocol.handshake_exc
    return connection, protocol


def _read_ws_to_close(stalled: tuple[socket.socket, ClientProtocol]) -> tuple[list[int], tuple[int, str]]:
    """The ids of the messages received, and the close code and reason, read until it closes."""
    connection, protocol = stalled
    ids: list[int] = []
    while protocol.close_rcvd is None:
        data = connection.recv(65536)
        assert data, "the connection closed without a close frame"
        protocol.receive_data(data)
        for event in protocol.events_received():
            if isinstance(event, Frame) and event.opcode is Opcode.TEXT:
                ids.append(json.loads(event.data)["id"])
        connection.sendall(b"".join(protocol.data_to_send()))  # pongs, and the closing handshake
    connection.close()
    return ids, (protocol.close_rcvd.code, protocol.close_rcvd.reason)


class _Reader:
    """A subscriber that reads along (SSE, in a thread): the ids it received."""

    def __init__(self, server: Deployment, repo: str, after: int) -> None:
        self.ids: list[int] = []
        self._thread = threading.Thread(target=self._read, args=(server, repo, after), daemon=True)
        self._thread.start()  # it catches up from the outbox after ``after``: no race to connect

    def _read(self, server: Deployment, repo: str, after: int) -> None:
        headers = {"Authorization": f"Bearer {server.token}", "Last-Event-ID": str(after)}
        url = f"{server.url}/api/v1/repos/{repo}/events"
        with httpx.Client(timeout=None, trust_env=False) as http, contextlib.suppress(httpx.HTTPError):
            # (the error: the server stopping at the test's end, while this still reads)
            with http.stream("GET", url, params={"timeout": 120}, headers=headers) as response:
                for line in response.iter_lines():
                    if line.startswith("id: "):
                        self.ids.append(int(line[4:]))

    def until(self, last: int, timeout_s: float = 60) -> list[int]:
        deadline = time.monotonic() + timeout_s
        while (not self.ids or self.ids[-1] < last) and time.monotonic() < deadline:
            time.sleep(0.05)
        return list(self.ids)
