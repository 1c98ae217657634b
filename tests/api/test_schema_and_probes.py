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


def test_every_operation_has_a_summary_and_a_description_of_its_own():
    schema = yaml.safe_load(Client().get("/api/v1/schema").content)
    operations = [op for item in schema["paths"].values() for op in item.values() if isinstance(op, dict)]

    summaries = [op.get("summary") for op in operations]
    descriptions = [op.get("description") for op in operations]
    assert all(summaries) and len(set(summaries)) == len(operations), summaries
    assert all(descriptions) and len(set(descriptions)) == len(operations), descriptions
    assert not any("Base of every" in text for text in descriptions)


def test_the_schema_states_the_limits_and_shapes_the_server_enforces():
    schema = yaml.safe_load(Client().get("/api/v1/schema").content)
    paths, components = schema["paths"], schema["components"]["schemas"]

    def parameter(path, name):
        found = [p for p in paths[path]["get"]["parameters"] if p["name"] == name]
        return found[0]["schema"]

    assert parameter("/api/v1/repos/{repo}/log", "limit")["maximum"] == 500
    assert parameter("/api/v1/repos/{repo}/streams", "limit")["maximum"] == 1000
    assert parameter("/api/v1/repos", "limit") == {"type": "integer", "minimum": 1, "maximum": 1000}
    assert components["StreamCreateRequest"]["properties"]["from"]["minLength"] == 1
    assert {"parent", "parents"} <= set(components["ChangesetCreateRequest"]["properties"])  # one of them
    assert components["ChangesetCreateRequest"]["properties"]["parents"]["maxItems"] == 16
    requests = [name for name in components if name.endswith("Request") and "properties" in components[name]]
    assert requests and all(components[name]["additionalProperties"] is False for name in requests)
    assert {"409"} <= set(paths["/api/v1/repos"]["post"]["responses"])
    assert "already_exists" in components["CodeEnum"]["enum"]


def test_the_schema_documents_the_websocket_feed():
    schema = yaml.safe_load(Client().get("/api/v1/schema").content)
    events = schema["paths"]["/api/v1/repos/{repo}/events"]["get"]

    for words in ["/ws/repos/{repo}/events", "?token=", "?after=", '{"id": <seq>, "event": <kind>', "4401", "timeout"]:
        assert words in events["description"], words


def test_the_docs_page_loads_nothing_from_the_internet_and_its_assets_are_served():
    client = Client()
    page = client.get("/api/v1/docs").content.decode()

    assert not re.search(r"(?:https?:)?//[^\s\"']+", page), page
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert any(asset.endswith("redoc.standalone.js") for asset in assets), page
    for asset in assets:
        answer = client.get(asset)
        assert answer.status_code == 200, asset
        assert answer["Content-Type"].startswith(("text/javascript", "application/javascript", "text/css"))


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
