"""The access log and /metrics over real servers (uvicorn, the deployment harness).

Every request has its JSON access line, no token reaches any log whatever surface carried it
(Bearer, Basic, a WebSocket's ``?token=``), and a scrape sums what every server process counted.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.deployment import Deployment

BOGUS = "agt_" + "x" * 43  # shaped like a token, known to no credential


def access_lines(log: str) -> list[dict]:
    return [json.loads(line) for line in log.splitlines() if line.startswith('{"time": ')]


def wait_for_lines(server: Deployment, count: int, timeout_s: float = 15) -> list[dict]:
    """The access lines once there are ``count`` (a connection's line comes when it has ended)."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = access_lines(server.server.log())
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.1)


def credential_id(server: Deployment, token: str) -> int:
    digest = hashlib.sha256(token.encode()).hexdigest()
    with sqlite3.connect(server.data_dir / "agentgit.sqlite3") as db:
        return db.execute("SELECT id FROM repos_credential WHERE token_hash = ?", (digest,)).fetchone()[0]


def metric(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


def test_every_request_has_its_line_and_no_token_reaches_the_log():
    with Deployment("embedded") as server:
        token = server.create_token("logged")
        server.start_server()
        port = server.url.rsplit(":", 1)[1]
        me = credential_id(server, token)
        bearer = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, trust_env=False)
        basic = httpx.Client(base_url=server.url, auth=("git", token), trust_env=False)
        with bearer, basic:
            assert bearer.post("/api/v1/repos", json={"name": "fan"}).status_code == 201
            assert basic.get("/api/v1/repos/fan/streams").status_code == 200
            wrong = httpx.get(f"{server.url}/api/v1/repos", auth=("git", BOGUS), trust_env=False)
            assert wrong.status_code == 401
            # A token in a REST query string is not how REST authenticates, but it must not be logged.
            assert httpx.get(f"{server.url}/api/v1/repos?token={token}", trust_env=False).status_code == 401
            with bearer.stream("GET", "/api/v1/repos/fan/events", params={"timeout": 0.2}) as feed:
                assert b"repository.created" in b"".join(feed.iter_bytes())
            with connect(f"ws://127.0.0.1:{port}/ws/repos/fan/events?token={token}", open_timeout=10) as socket:
                assert json.loads(socket.recv(timeout=10))["event"] == "repository.created"
            with connect(f"ws://127.0.0.1:{port}/ws/repos/fan/events?token={BOGUS}", open_timeout=10) as socket:
                try:
                    socket.recv(timeout=10)
                except ConnectionClosed as closed:
                    assert closed.rcvd.code == 4401
            assert httpx.get(f"{server.url}/metrics", trust_env=False).status_code == 200

        lines = [line for line in wait_for_lines(server, 9) if line["path"] != "/healthz"]  # the harness's probe
        everything = "\n".join(path.read_text(errors="replace") for path in server.log_dir.iterdir())

    assert "agt_" not in everything, everything
    assert token[4:] not in everything and BOGUS[4:] not in everything
    seen = [(line["method"], line["path"], line["status"], line["credential"]) for line in lines]
    assert sorted(seen, key=str) == sorted(
        [
            ("POST", "/api/v1/repos", 201, me),
            ("GET", "/api/v1/repos/fan/streams", 200, me),
            ("GET", "/api/v1/repos", 401, None),
            ("GET", "/api/v1/repos", 401, None),
            ("GET", "/api/v1/repos/fan/events", 200, me),
            ("WEBSOCKET", "/ws/repos/fan/events", 101, me),
            ("WEBSOCKET", "/ws/repos/fan/events", 101, None),
            ("GET", "/metrics", 200, None),
        ],
        key=str,
    ), lines
    by_path = {(line["method"], line["path"], line["status"]): line for line in lines}
    created = by_path["POST", "/api/v1/repos", 201]
    assert created["route"] == "api/v1/repos" and created["bytes_received"] > 0 and created["bytes_sent"] > 0
    assert created["duration_ms"] > 0 and created["client"] == "127.0.0.1"
    assert by_path["GET", "/api/v1/repos/fan/streams", 200]["route"] == "api/v1/repos/<str:repo>/streams"
    assert [line["query"] for line in lines if line.get("query", "").startswith("token")] == ["token=[redacted]"] * 3
    sockets = [line for line in lines if line["method"] == "WEBSOCKET"]
    assert all(line["route"] == "ws/repos/<str:repo>/events" for line in sockets)
    assert sockets[0]["bytes_sent"] > 0 and sockets[1]["close_code"] == 4401
    assert all(line["query"] == "token=[redacted]" for line in sockets)


def test_a_scrape_sums_requests_and_integrations_over_both_server_processes():
    with Deployment("embedded") as server:
        token = server.create_token("counted")
        server.start_server(workers=2)
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=f"{server.url}/api/v1", headers=auth, trust_env=False, timeout=30) as http:
            assert http.post("/repos", json={"name": "sum"}).status_code == 201
            head = None
            for number in range(6):  # integrations land in whichever process was asked
                operations = [{"op": "write", "path": f"f{number}.txt", "content": f"{number}\n"}]
                body = {"parent": head, "message": f"{number}\n", "operations": operations}
                head = http.post("/repos/sum/changesets", json=body).json()["id"]
                proposal = http.post("/repos/sum/proposals", json={"stream": "main", "head": head}).json()["id"]
                outcome = http.post(f"/repos/sum/proposals/{proposal}/integrate", json={}).json()
                assert outcome["outcome"] == "fast_forward"

        # A connection each, from several threads at once, until both processes have answered.
        reads = 0
        lock = threading.Lock()

        def read() -> None:
            nonlocal reads
            response = httpx.get(f"{server.url}/api/v1/repos/sum", headers=auth, trust_env=False, timeout=30)
            assert response.status_code == 200
            with lock:
                reads += 1

        for _round in range(20):
            threads = [threading.Thread(target=read) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            pids = {line["pid"] for line in access_lines(server.server.log()) if line["path"] == "/api/v1/repos/sum"}
            if len(pids) == 2:
                break
        assert len(pids) == 2, "every read went to one process"

        scrapes = [httpx.get(f"{server.url}/metrics", trust_env=False).text for _ in range(4)]

    route = "api/v1/repos/<str:repo>"
    for text in scrapes:  # the same totals whichever process answered the scrape
        assert metric(text, "agentgit_http_requests_total", method="GET", route=route, status="200") == reads
        assert metric(text, "agentgit_http_request_duration_seconds_count", method="GET", route=route) == reads
        assert metric(text, "agentgit_integrations_total", outcome="fast_forward") == 6
        assert metric(text, "agentgit_integration_duration_seconds_count", outcome="fast_forward") == 6


def test_the_access_log_can_be_turned_off_and_requests_are_still_counted():
    with Deployment("embedded", env={"AGENTGIT_ACCESS_LOG": "0"}) as server:
        token = server.create_token("quiet")
        server.start_server()
        for _ in range(3):
            response = httpx.get(
                f"{server.url}/api/v1/repos", headers={"Authorization": f"Bearer {token}"}, trust_env=False
            )
            assert response.status_code == 200
        text = httpx.get(f"{server.url}/metrics", trust_env=False).text
        log = server.server.log()

    assert access_lines(log) == [] and "Started server process" in log
    assert metric(text, "agentgit_http_requests_total", method="GET", route="api/v1/repos", status="200") == 3
