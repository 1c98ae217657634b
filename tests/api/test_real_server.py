"""The core scenario over real HTTP: uvicorn (ASGI) on a free port, a fresh data directory."""

from __future__ import annotations

import json
import time

import httpx

from tests.deployment import Deployment


def test_core_scenario_over_http():
    with Deployment("embedded") as server:
        token = server.create_token("ci")
        server.start_server()
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=f"{server.url}/api/v1", headers=auth, timeout=30, trust_env=False) as http:
            assert http.post("/repos", json={"name": "demo"}).status_code == 201
            blob = http.post("/repos/demo/blobs", content=b"hello\n").json()["id"]
            base = http.post(
                "/repos/demo/changesets",
                json={
                    "parent": None,
                    "message": "base\n",
                    "operations": [
                        {"op": "write", "path": "a.txt", "blob": blob},
                        {"op": "write", "path": "b.txt", "content": "b\n"},
                    ],
                },
            )
            assert base.status_code == 201, base.text
            base_id = base.json()["id"]
            assert land(http, base_id)["outcome"] == "fast_forward"

            alice = commit(http, base_id, "a.txt", "hello from alice\n")
            bob = commit(http, base_id, "b.txt", "b from bob\n")
            assert land(http, alice)["outcome"] == "fast_forward"
            merged = land(http, bob)
            assert merged["outcome"] == "merge"

            assert http.get("/repos/demo/files/main/a.txt").content == b"hello from alice\n"
            assert http.get("/repos/demo/files/main/b.txt").content == b"b from bob\n"
            assert http.get("/repos/demo/streams/main").json()["head"] == merged["stream_head"]
            unauthenticated = httpx.get(f"{server.url}/api/v1/repos", trust_env=False)
            assert unauthenticated.status_code == 401 and unauthenticated.json()["error"]["code"] == "unauthenticated"

            # The event stream is streamed (not buffered until its timeout) under ASGI.
            started = time.monotonic()
            with http.stream("GET", "/repos/demo/events", params={"timeout": 20}) as events:
                assert events.headers["content-type"].startswith("text/event-stream")
                first = next(events.iter_text())
            assert time.monotonic() - started < 10
            assert first.startswith("id: 1\nevent: repository.created\n")

            resume = {"Last-Event-ID": "5"}
            with http.stream("GET", "/repos/demo/events", params={"timeout": 0.5}, headers=resume) as events:
                body = "".join(events.iter_text())
            ids = [int(line[4:]) for line in body.splitlines() if line.startswith("id: ")]
            assert ids and ids[0] == 6 and ids == list(range(6, 6 + len(ids)))
            last = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")][-1]
            assert last["outcome"] == "merge" and last["head"] == merged["stream_head"]

            # ?timeout=0: what is stored after the resume point, then the end (as under WSGI).
            params = {"timeout": 0, "kinds": "stream.integrate"}
            body = http.get("/repos/demo/events", params=params, headers=resume).text
            heads = [json.loads(line[6:])["head"] for line in body.splitlines() if line.startswith("data: ")]
            assert heads == [alice, merged["stream_head"]]

        ready = httpx.get(f"{server.url}/readyz", trust_env=False)
        assert ready.status_code == 200 and ready.json()["status"] == "ok"
        metrics = httpx.get(f"{server.url}/metrics", trust_env=False).text
        assert 'agentgit_integrations_total{outcome="merge"} 1.0' in metrics
        schema = httpx.get(f"{server.url}/api/v1/schema?format=json", trust_env=False).json()
        assert "/api/v1/repos/{repo}/changesets" in schema["paths"]
        log = server.server.log()  # the whole uvicorn log, not a tail
        assert "Traceback" not in log and "synchronous iterators" not in log, log


def commit(http: httpx.Client, parent: str, path: str, text: str) -> str:
    response = http.post(
        "/repos/demo/changesets",
        json={
            "parent": parent,
            "message": f"edit {path}\n",
            "operations": [{"op": "write", "path": path, "content": text}],
        },
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


def land(http: httpx.Client, head: str) -> dict:
    proposal = http.post("/repos/demo/proposals", json={"stream": "main", "head": head})
    assert proposal.status_code == 201, proposal.text
    outcome = http.post(f"/repos/demo/proposals/{proposal.json()['id']}/integrate", json={})
    assert outcome.status_code == 200, outcome.text
    return outcome.json()
