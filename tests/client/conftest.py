"""A real AgentGit server for the client, CLI and MCP tests: ``uvicorn`` on a free port with a
fresh data directory (the embedded default), started once per test process."""

from __future__ import annotations

import itertools

import httpx
import pytest

from tests.deployment import Deployment

_names = itertools.count(1)


class Server:
    """The deployment, an admin token and a way to make fresh repositories and tokens."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.url = deployment.url
        self.token = deployment.token
        self._tokens: dict[str, str] = {}

    def token_for(self, scopes: str, **limits) -> str:
        """A token with ``scopes``; a fresh one when it has its own rate limit (its own bucket)."""
        if limits:
            return self.deployment.create_token(f"user{next(_names)}", scopes=scopes, **limits)
        if scopes not in self._tokens:  # each costs a manage.py process: reuse plain ones
            self._tokens[scopes] = self.deployment.create_token(f"user{next(_names)}", scopes=scopes)
        return self._tokens[scopes]

    def new_repo(self) -> str:
        """A fresh repository's name."""
        name = f"repo{next(_names)}"
        response = httpx.post(
            f"{self.url}/api/v1/repos", json={"name": name}, headers={"Authorization": f"Bearer {self.token}"}
        )
        assert response.status_code == 201, response.text
        return name


@pytest.fixture(scope="session")
def server():
    with Deployment("embedded") as deployment:
        deployment.token = deployment.create_token("agent")
        deployment.start_server(workers=2)
        yield Server(deployment)


@pytest.fixture
def repo(server) -> str:
    return server.new_repo()


class Recording(httpx.HTTPTransport):
    """httpx's transport, recording every request; ``lose(request)`` true makes the answer to that
    request get lost once (the server did the work, the client sees a dropped connection)."""

    def __init__(self, lose=None) -> None:
        super().__init__()
        self.requests: list[httpx.Request] = []
        self.lose = lose

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        response = super().handle_request(request)
        if self.lose is not None and self.lose(request):
            self.lose = None
            response.read()
            response.close()
            raise httpx.ReadError("the answer was lost", request=request)
        return response

    def count(self, method: str, suffix: str) -> int:
        return sum(1 for r in self.requests if r.method == method and r.url.path.endswith(suffix))
