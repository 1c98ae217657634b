"""Admission: the ASGI middleware reads a request's credential once, for every surface.

Over a real server: REST, the SSE feed and the WebSocket feed take their tokens from one bucket
per credential, and git's HTTP Basic (the token as the password) is admitted like a Bearer token.
In process, through the ASGI application: a request's token is looked up once, however many
parts of the server ask who the caller is.
"""

from __future__ import annotations

import base64

import httpx
import pytest
from asgiref.sync import async_to_sync
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from repos.services import admission
from tests.deployment import Deployment
from tests.factories import CredentialFactory


@pytest.fixture(scope="module")
def served():
    with Deployment("embedded") as server:
        admin = server.create_token("admission")
        server.start_server()
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {admin}"}, trust_env=False) as http:
            assert http.post("/api/v1/repos", json={"name": "demo"}).status_code == 201
        yield server


def ws_url(server: Deployment, token: str) -> str:
    port = int(server.url.rsplit(":", 1)[1])
    return f"ws://127.0.0.1:{port}/ws/repos/demo/events?token={token}"


def websocket_answer(url: str) -> int | None:
    """None if the socket was admitted (its first event arrived), else its close code."""
    try:
        with connect(url, open_timeout=10) as socket:
            socket.recv(timeout=10)
            return None
    except ConnectionClosed as closed:
        return closed.rcvd.code


def test_rest_sse_and_websocket_take_their_tokens_from_one_bucket(served):
    token = served.create_token("shared", scopes="read", rate=0.01, burst=3)  # nothing refills here
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=f"{served.url}/api/v1", headers=auth, timeout=30, trust_env=False) as http:
        assert http.get("/repos/demo").status_code == 200  # 1 of 3
        assert http.get("/repos/demo/events", params={"timeout": 0.1}).status_code == 200  # 2 of 3
        assert websocket_answer(ws_url(served, token)) is None  # 3 of 3

        rest, sse = http.get("/repos/demo"), http.get("/repos/demo/events", params={"timeout": 0.1})
        assert (rest.status_code, sse.status_code) == (429, 429)
        assert sse.json()["error"]["code"] == "rate_limited" and sse.headers["Retry-After"]
        assert websocket_answer(ws_url(served, token)) == 4429


def test_each_surface_draining_the_bucket_limits_the_others(served):
    token = served.create_token("ws-first", scopes="read", rate=0.01, burst=1)
    assert websocket_answer(ws_url(served, token)) is None
    with httpx.Client(base_url=f"{served.url}/api/v1", timeout=30, trust_env=False) as http:
        assert http.get("/repos/demo", headers={"Authorization": f"Bearer {token}"}).status_code == 429


def test_git_basic_credentials_are_admitted_through_the_middleware(served):
    token = served.create_token("git", scopes="read")

    def basic(password: str) -> dict:
        return {"Authorization": "Basic " + base64.b64encode(f"git:{password}".encode()).decode()}

    with httpx.Client(base_url=f"{served.url}/api/v1", timeout=30, trust_env=False) as http:
        assert http.get("/repos/demo", headers=basic(token)).status_code == 200
        refused = http.get("/repos/demo", headers=basic("agt_unknown"))
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthenticated"


# In process, through the ASGI application -----------------------------------------------------


def asgi_get(path: str, headers: dict[str, str]) -> httpx.Response:
    from agentgit_site.asgi import application

    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            return await http.get(path, headers=headers)

    return async_to_sync(get)()


@pytest.fixture
def lookups(monkeypatch) -> list[str]:
    """Every token lookup admission makes."""
    made: list[str] = []
    real = admission.authenticate_token

    def counted(token: str):
        made.append(token)
        return real(token)

    monkeypatch.setattr(admission, "authenticate_token", counted)
    return made


@pytest.fixture
def parsed(monkeypatch) -> list[object]:
    """Every Authorization header read into an Admission."""
    made: list[object] = []
    real = admission.Admission.presented.__func__

    def counted(cls, authorization, query_token=None):
        made.append(authorization)
        return real(cls, authorization, query_token)

    monkeypatch.setattr(admission.Admission, "presented", classmethod(counted))
    return made


@pytest.mark.django_db(transaction=True)
def test_a_request_through_the_middleware_is_read_and_looked_up_once(lookups, parsed):
    credential = CredentialFactory(scopes=["read"])

    response = asgi_get("/api/v1/repos", {"Authorization": f"Bearer {credential.token}"})

    assert response.status_code == 200
    # The middleware read the header; DRF used its Admission from the scope rather than its own.
    assert parsed == [f"Bearer {credential.token}".encode()]
    assert lookups == [credential.token]


@pytest.mark.django_db(transaction=True)
def test_without_the_middleware_rest_still_authenticates_once_and_takes_a_token(client, lookups):
    credential = CredentialFactory(scopes=["read"], rate=0.01, burst=1)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {credential.token}"}

    assert client.get("/api/v1/repos", **auth).status_code == 200  # Django's test client: no ASGI
    assert client.get("/api/v1/repos", **auth).status_code == 429
    assert lookups == [credential.token] * 2  # one per request
