"""The OpenAPI schema documents every route served; /readyz answers (/metrics: test_metrics.py)."""

from __future__ import annotations

import re

import pytest
import yaml
from django.test import Client
from django.urls import URLPattern

from repos.api import urls as api_urls
from tests.deployment import free_port

PUBLIC_ROUTES = {"schema", "docs"}


def served_paths() -> dict[str, set[str]]:
    """OpenAPI path → the methods its view serves, from the API's URL patterns."""
    paths = {}
    for pattern in api_urls.urlpatterns:
        assert isinstance(pattern, URLPattern)
        if pattern.name in PUBLIC_ROUTES:
            continue
        route = "/api/v1/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", str(pattern.pattern))
        view = pattern.callback.view_class
        paths[route] = {m for m in ("get", "post", "put", "patch", "delete") if hasattr(view, m)}
    return paths


def test_schema_documents_every_route_and_method():
    response = Client().get("/api/v1/schema")

    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    assert schema["openapi"].startswith("3.")
    assert schema["info"]["title"] == "AgentGit API"
    served = served_paths()
    assert len(served) >= 18
    for path, methods in served.items():
        assert path in schema["paths"], path
        assert methods <= set(schema["paths"][path]), (path, methods)
    assert set(schema["paths"]) == set(served)
    assert set(schema["components"]["securitySchemes"]) == {"bearerAuth", "basicAuth"}


def test_schema_as_json_and_the_docs_page_are_public():
    client = Client(HTTP_AUTHORIZATION="Bearer not-a-token")

    as_json = client.get("/api/v1/schema", {"format": "json"})
    docs = client.get("/api/v1/docs")

    assert as_json.status_code == 200 and "/api/v1/repos" in as_json.json()["paths"]
    assert docs.status_code == 200 and b"/api/v1/schema" in docs.content


def test_schema_documents_request_bodies_and_error_answers():
    schema = yaml.safe_load(Client().get("/api/v1/schema").content)

    changesets = schema["paths"]["/api/v1/repos/{repo}/changesets"]["post"]
    blobs = schema["paths"]["/api/v1/repos/{repo}/blobs"]["post"]
    integrate = schema["paths"]["/api/v1/repos/{repo}/proposals/{proposal_id}/integrate"]["post"]

    assert "application/json" in changesets["requestBody"]["content"]
    assert "application/octet-stream" in blobs["requestBody"]["content"]
    assert {"200", "202", "400", "401", "403", "404", "409"} <= set(integrate["responses"])
    assert "Error" in schema["components"]["schemas"]


@pytest.mark.django_db
def test_readyz_is_ok_when_everything_answers(client):
    response = client.get("/readyz")

    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "checks": {"database": "ok", "object_store": "ok", "broker": "not configured"},
    }


@pytest.mark.django_db
def test_readyz_is_503_naming_the_failing_check(client, settings, tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    settings.AGENTGIT = {**settings.AGENTGIT, "REPOS_DIR": not_a_dir / "repos"}
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{free_port()}/0"

    response = client.get("/readyz")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable" and body["checks"]["database"] == "ok"
    assert body["checks"]["object_store"].startswith("error")
    assert body["checks"]["broker"].startswith("error")
