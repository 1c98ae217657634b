"""The WebSocket event feed, over a real uvicorn server: the same events as SSE, as JSON."""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.deployment import Deployment


@pytest.fixture(scope="module")
def served():
    with Deployment("embedded") as server:
        token, writer = server.create_token("ws"), server.create_token("w", scopes="write")
        server.start_server()
        server.port = int(server.url.rsplit(":", 1)[1])
        yield server, token, writer


def test_events_arrive_as_json_and_resume_after_an_id(served):
    server, token, _ = served
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=f"{server.url}/api/v1", headers=auth, timeout=30, trust_env=False) as http:
        assert http.post("/repos", json={"name": "demo"}).status_code == 201
        url = f"ws://127.0.0.1:{server.port}/ws/repos/demo/events?token={token}"
        with connect(url, open_timeout=10) as socket:
            first, second = (json.loads(socket.recv(timeout=10)) for _ in range(2))
            assert (first["id"], first["event"]) == (1, "repository.created")
            assert (second["id"], second["event"]) == (2, "stream.created")
            # A change made while subscribed is pushed.
            head = http.post(
                "/repos/demo/changesets",
                json={"parent": None, "message": "m\n", "operations": [{"op": "write", "path": "a", "content": "a\n"}]},
            ).json()["id"]
            proposal = http.post("/repos/demo/proposals", json={"stream": "main", "head": head}).json()["id"]
            assert http.post(f"/repos/demo/proposals/{proposal}/integrate", json={}).json()["outcome"] == "fast_forward"
            pushed = [json.loads(socket.recv(timeout=10)) for _ in range(2)]
            assert [e["event"] for e in pushed] == ["proposal.opened", "stream.integrate"]
            assert pushed[1]["data"]["head"] == head and pushed[1]["id"] == 4

    # Resuming after id 2 gives 3 and 4, with the Authorization header instead of ?token=.
    with connect(f"ws://127.0.0.1:{server.port}/ws/repos/demo/events?after=2", additional_headers=auth) as socket:
        assert [json.loads(socket.recv(timeout=10))["id"] for _ in range(2)] == [3, 4]


@pytest.mark.parametrize(
    "query, code",
    [("", 4401), ("?token=agt_unknown", 4401), ("?token={writer}", 4403), ("?token={token}&after=x", 4400)],
)
def test_refusals_close_with_the_code_of_their_http_status(served, query, code):
    server, token, writer = served
    url = f"ws://127.0.0.1:{server.port}/ws/repos/demo/events" + query.format(token=token, writer=writer)
    httpx.post(f"{server.url}/api/v1/repos", json={"name": "demo"}, headers={"Authorization": f"Bearer {token}"})
    with pytest.raises(ConnectionClosed) as closed:
        with connect(url, open_timeout=10) as socket:
            socket.recv(timeout=10)
    assert closed.value.rcvd.code == code


def test_an_unknown_repository_closes_with_4404(served):
    server, token, _ = served
    with pytest.raises(ConnectionClosed) as closed:
        with connect(f"ws://127.0.0.1:{server.port}/ws/repos/nope/events?token={token}", open_timeout=10) as socket:
            socket.recv(timeout=10)
    assert closed.value.rcvd.code == 4404


def test_a_credential_out_of_tokens_is_closed_with_4429(served):
    server, token, _ = served
    limited = server.create_token("limited", scopes="read", rate=0.1, burst=1)
    httpx.post(f"{server.url}/api/v1/repos", json={"name": "demo"}, headers={"Authorization": f"Bearer {token}"})
    url = f"ws://127.0.0.1:{server.port}/ws/repos/demo/events?token={limited}"
    with connect(url, open_timeout=10) as socket:  # the burst: one connection
        assert json.loads(socket.recv(timeout=10))["id"] == 1
    with pytest.raises(ConnectionClosed) as closed:
        with connect(url, open_timeout=10) as socket:
            socket.recv(timeout=10)
    assert closed.value.rcvd.code == 4429
