"""Fixtures for the REST API tests: authenticated clients and a small driver for the common calls.

Integration lands on commit (Celery is eager), so tests that integrate need real transactions:
``pytest.mark.django_db(transaction=True)``.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.factories import CredentialFactory

ALL_BUT_ADMIN = ["read", "write", "integrate"]


@pytest.fixture(autouse=True)
def _own_repos_dir(settings, tmp_path):
    """Each test's git repositories in its own directory (names repeat across tests)."""
    settings.AGENTGIT = {**settings.AGENTGIT, "REPOS_DIR": tmp_path / "repos"}


def client_with(scopes: list[str] | None = None, **credential) -> APIClient:
    """An API client sending the token of a new credential with ``scopes``."""
    made = CredentialFactory(scopes=scopes or ALL_BUT_ADMIN, **credential)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {made.token}")
    client.credential = made
    return client


@pytest.fixture
def client_for():
    """``client_for(["read"])``: a client whose credential has exactly those scopes."""
    return client_with


@pytest.fixture
def admin():
    return client_with(["admin"])


@pytest.fixture
def api(admin):
    """An agent's view of the repository ``demo`` (created by an admin), with a driver."""
    assert admin.post("/api/v1/repos", {"name": "demo"}, format="json").status_code == 201
    return Api(client_with(ALL_BUT_ADMIN), "demo")


class Api:
    """Short calls for the scenario steps; each asserts the documented success status."""

    def __init__(self, client: APIClient, repo: str) -> None:
        self.client = client
        self.repo = repo

    def url(self, suffix: str = "") -> str:
        return f"/api/v1/repos/{self.repo}{suffix}"

    def get(self, suffix: str, **params):
        return self.client.get(self.url(suffix), params)

    def post(self, suffix: str, body: object = None, **params):
        query = "?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else ""
        return self.client.post(self.url(suffix) + query, body if body is not None else {}, format="json")

    def blob(self, data: bytes) -> str:
        response = self.client.post(self.url("/blobs"), data, content_type="application/octet-stream")
        assert response.status_code == 201, response.content
        return response.json()["id"]

    def commit(self, parent: str | None, operations: list[dict], message: str = "change\n", **provenance) -> str:
        body = {"parent": parent, "message": message, "operations": operations, "provenance": provenance}
        response = self.post("/changesets", body)
        assert response.status_code == 201, response.content
        return response.json()["id"]

    def write(self, parent: str | None, files: dict[str, str], message: str = "change\n") -> str:
        """A changeset writing ``files`` (path → text) inline."""
        return self.commit(parent, [{"op": "write", "path": p, "content": c} for p, c in files.items()], message)

    def propose(self, head: str, stream: str = "main", title: str = "") -> int:
        response = self.post("/proposals", {"stream": stream, "head": head, "title": title})
        assert response.status_code == 201, response.content
        return response.json()["id"]

    def integrate(self, proposal: int):
        return self.post(f"/proposals/{proposal}/integrate", {})

    def land(self, head: str, stream: str = "main") -> dict:
        """Propose ``head`` on ``stream`` and integrate it; the outcome document."""
        response = self.integrate(self.propose(head, stream))
        assert response.status_code == 200, response.content
        return response.json()

    def head(self, stream: str = "main") -> str | None:
        return self.get(f"/streams/{stream}").json()["head"]

    def file(self, path: str, rev: str = "main") -> bytes:
        response = self.get(f"/files/{rev}/{path}")
        assert response.status_code == 200, response.content
        return response.content


def lines(count: int, **changed: str) -> str:
    """A text of ``count`` numbered lines, with ``l3="new"`` replacing line 3."""
    return "".join(changed.get(f"l{n}", f"line {n}") + "\n" for n in range(1, count + 1))
