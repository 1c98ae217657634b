"""Refusals: each with its documented status and code, one JSON shape, and nothing half-written."""

from __future__ import annotations

import pytest
from django.utils import timezone

from repos.errors import RateLimited, Unavailable
from repos.models import Changeset, Operation, Proposal, Repository, Stream

from .conftest import client_with

pytestmark = pytest.mark.django_db(transaction=True)

EMPTY_BLOB = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
MISSING = "0123456789abcdef0123456789abcdef01234567"


def error(response, status: int, code: str) -> dict:
    """The error body, after checking the status, the shape and the code."""
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}
    assert {"code", "message", "retryable"} <= set(body["error"])
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


@pytest.fixture
def landed(api):
    """``api`` with main at one changeset; answers (api, head)."""
    head = api.write(None, {"f.txt": "x\n"})
    api.land(head)
    return api, head


def nothing_written(api, head):
    assert api.head() == head
    assert Changeset.objects.count() == 1 and Proposal.objects.count() == 1


# Malformed and wrongly typed bodies.


@pytest.mark.parametrize("suffix", ["/changesets", "/proposals", "/streams", "/blobs/batch", "/proposals/1/integrate"])
def test_malformed_json_is_invalid(landed, suffix):
    api, head = landed

    response = api.client.post(api.url(suffix), b'{"parent": ', content_type="application/json")

    error(response, 400, "invalid")
    nothing_written(api, head)
    assert Stream.objects.count() == 1


def test_malformed_json_is_invalid_whatever_the_content_type(admin):
    response = admin.post("/api/v1/repos", "name=demo", content_type="application/x-www-form-urlencoded")

    error(response, 400, "invalid")
    assert Repository.objects.count() == 0


def test_a_json_body_that_is_not_an_object_is_invalid(landed):
    api, head = landed

    error(api.post("/changesets", [1, 2]), 400, "invalid")
    nothing_written(api, head)


@pytest.mark.parametrize(
    "body",
    [
        {"parent": None, "operations": "write f.txt"},
        {"parent": None, "operations": [{"op": "write", "path": "f.txt", "content": "x"}], "message": 7},
        {"parent": None, "operations": [{"op": "write", "path": "f.txt", "content": "x"}], "provenance": [1]},
        {"parent": 12, "operations": [{"op": "write", "path": "f.txt", "content": "x"}]},
        {"parent": None, "operations": [{"op": "copy", "path": "f.txt"}]},
        {"parent": None, "operations": [{"op": "write", "path": "f.txt", "content": 5}]},
        {"parent": None, "operations": [{"op": "write", "path": "f.txt", "content": "x", "blob": EMPTY_BLOB}]},
    ],
)
def test_changesets_with_wrong_types_are_invalid(landed, body):
    api, head = landed

    error(api.post("/changesets", body), 400, "invalid")
    nothing_written(api, head)


@pytest.mark.parametrize(
    "body",
    [
        {"stream": "main", "head": 5},
        {"stream": ["main"], "head": "main"},
        {"head": "main"},
        {"stream": "main", "head": "main", "title": 3},
    ],
)
def test_proposals_with_wrong_types_are_invalid(landed, body):
    api, head = landed

    error(api.post("/proposals", body), 400, "invalid")
    nothing_written(api, head)


@pytest.mark.parametrize("body", [{"name": 5}, {}, {"name": "bad name"}, {"name": "../x"}, {"name": "x", "from": 3}])
def test_streams_with_bad_names_or_starts_are_invalid(landed, body):
    api, head = landed

    error(api.post("/streams", body), 400, "invalid")
    assert Stream.objects.count() == 1


@pytest.mark.parametrize("body", [{}, {"name": 5}, {"name": "a/b"}, {"name": "x.git"}])
def test_repositories_with_bad_names_are_invalid(admin, body):
    error(admin.post("/api/v1/repos", body, format="json"), 400, "invalid")
    assert Repository.objects.count() == 0


def test_a_repository_or_stream_name_taken_answers_409_already_exists(api, admin):
    taken = error(admin.post("/api/v1/repos", {"name": "demo"}, format="json"), 409, "already_exists")
    assert taken["retryable"] is False


def test_a_repository_name_taken_already_exists(api, admin):
    body = error(admin.post("/api/v1/repos", {"name": "demo"}, format="json"), 409, "already_exists")

    assert "demo" in body["message"] and body["retryable"] is False
    assert Repository.objects.count() == 1
    error(api.post("/streams", {"name": "main"}), 409, "already_exists")
    assert Stream.objects.count() == 1


def test_a_stream_name_taken_already_exists(landed):
    api, head = landed
    assert api.post("/streams", {"name": "topic", "from": head}).status_code == 201

    body = error(api.post("/streams", {"name": "topic"}), 409, "already_exists")

    assert "topic" in body["message"]
    assert api.head("topic") == head and Stream.objects.count() == 2


# Changesets the engine refuses: missing blobs, unsafe paths, contradictions (with details).


def test_a_changeset_naming_a_missing_blob_is_invalid_with_details(landed):
    api, head = landed

    body = error(
        api.post("/changesets", {"parent": head, "operations": [{"op": "write", "path": "g.txt", "blob": MISSING}]}),
        400,
        "invalid",
    )

    assert body["details"] and MISSING in str(body["details"])
    nothing_written(api, head)


@pytest.mark.parametrize(
    "path",
    ["/etc/passwd", "../up.txt", "a/../b.txt", ".git/config", "a//b.txt", "a/\x00.txt", "src/.git/x", "a\\b.txt",
     "caf\\xe9.txt"],
)  # fmt: skip
def test_unsafe_paths_are_invalid_with_details(landed, path):
    api, head = landed

    body = error(
        api.post("/changesets", {"parent": head, "operations": [{"op": "write", "path": path, "content": "x"}]}),
        400,
        "invalid",
    )

    assert isinstance(body["details"], list) and body["details"]
    nothing_written(api, head)


def test_text_that_utf8_cannot_carry_is_invalid_and_writes_nothing(landed):
    """JSON can spell a lone surrogate ("\\udcff"); a commit's UTF-8 cannot hold one."""
    api, head = landed
    bodies = [
        '{"parent": "%s", "message": "bad \\udcff", "operations": [{"op": "write", "path": "g.txt", "content": "x"}]}',
        '{"parent": "%s", "message": "m", "operations": [{"op": "write", "path": "bad\\udcff.txt", "content": "x"}]}',
    ]
    for raw in bodies:
        response = api.client.post(api.url("/changesets"), raw % head, content_type="application/json")

        assert error(response, 400, "invalid")
    nothing_written(api, head)


def test_contradictory_operations_are_invalid(landed):
    api, head = landed
    operations = [{"op": "write", "path": "f.txt", "content": "y"}, {"op": "delete", "path": "f.txt"}]

    body = error(api.post("/changesets", {"parent": head, "operations": operations}), 400, "invalid")

    assert body["details"]
    nothing_written(api, head)


def test_a_blob_put_under_the_wrong_id_is_invalid_and_not_stored(api):
    response = api.client.put(api.url(f"/blobs/{EMPTY_BLOB}"), b"not empty", content_type="application/octet-stream")

    error(response, 400, "invalid")
    assert api.client.head(api.url("/blobs/9a5d8aef3d4e33bee66ddd3b2b4e7ae3c7ecd8e1")).status_code == 404


def test_a_batch_with_a_bad_item_stores_nothing(api):
    import base64

    good = base64.b64encode(b"good\n").decode()
    not_base64 = {"blobs": [{"data": good}, {"data": "%%%"}, {"data": good, "id": "not-an-id"}]}
    wrong_id = {"blobs": [{"data": good}, {"data": good}, {"data": good, "id": EMPTY_BLOB}]}

    malformed = error(api.post("/blobs/batch", not_base64), 400, "invalid")
    mismatched = error(api.post("/blobs/batch", wrong_id), 400, "invalid")

    assert [d["field"] for d in malformed["details"]] == ["blobs.1.data", "blobs.2.id"]
    assert [d["index"] for d in mismatched["details"]] == [2]
    assert api.client.head(api.url("/blobs/" + _blob_id(b"good\n"))).status_code == 404


# Unknown things: 404 not_found.


@pytest.mark.parametrize(
    "suffix",
    [
        "",
        "/streams",
        "/streams/main",
        "/proposals",
        "/proposals/1",
        "/log",
        f"/blobs/{EMPTY_BLOB}",
        f"/changesets/{MISSING}",
        "/tree/main",
        "/files/main/f.txt",
        "/events",
    ],
)
def test_an_unknown_repository_is_not_found(admin, suffix):
    error(admin.get(f"/api/v1/repos/nope{suffix}"), 404, "not_found")


def test_writes_to_an_unknown_repository_are_not_found_and_write_nothing(client_for):
    client = client_for(["read", "write", "integrate"])

    changeset = {"parent": None, "operations": []}

    error(client.post("/api/v1/repos/nope/changesets", changeset, format="json"), 404, "not_found")
    error(client.post("/api/v1/repos/nope/blobs", b"x", content_type="application/octet-stream"), 404, "not_found")
    assert Changeset.objects.count() == 0


def test_unknown_streams_proposals_objects_and_operations_are_not_found(landed):
    api, head = landed

    error(api.get("/streams/nope"), 404, "not_found")
    error(api.post("/proposals", {"stream": "nope", "head": head}), 404, "not_found")
    error(api.post("/proposals", {"stream": "main", "head": MISSING}), 404, "not_found")
    error(api.get("/proposals/999"), 404, "not_found")
    error(api.get("/proposals/abc"), 404, "not_found")
    error(api.get(f"/proposals/{2**70}"), 404, "not_found")  # beyond a database integer
    error(api.get("/proposals/-1"), 404, "not_found")
    error(api.get(f"/operations/{2**70}"), 404, "not_found")
    error(api.post("/proposals/999/integrate"), 404, "not_found")
    error(api.get(f"/blobs/{MISSING}"), 404, "not_found")
    assert api.client.head(api.url(f"/blobs/{MISSING}")).status_code == 404
    error(api.get(f"/changesets/{MISSING}"), 404, "not_found")
    error(api.get("/operations/999"), 404, "not_found")
    error(api.get("/files/main/nope.txt"), 404, "not_found")
    error(api.get("/files/nope/f.txt"), 404, "not_found")
    error(api.get("/tree/nope"), 404, "not_found")
    error(api.post("/streams", {"name": "x", "from": "nope"}), 404, "not_found")
    nothing_written(api, head)
    assert Operation.objects.count() == 1 and Stream.objects.count() == 1


def test_an_unknown_api_url_answers_the_json_shape(admin):
    error(admin.get("/api/v1/nope"), 404, "not_found")
    error(admin.get("/api/v1/repos/demo/streams/main/extra/"), 404, "not_found")


def test_a_method_not_served_is_405_invalid_with_allow(api):
    response = api.client.delete(api.url())

    error(response, 405, "invalid")
    assert "GET" in response["Allow"]


def test_an_accept_header_we_do_not_serve_still_gets_json(api):
    error(api.client.get(api.url("/streams/nope"), HTTP_ACCEPT="text/html"), 404, "not_found")
    assert api.client.get(api.url(), HTTP_ACCEPT="text/html").status_code == 200


@pytest.mark.parametrize(
    "suffix, params",
    [
        ("/log", {"limit": 0}),
        ("/log", {"limit": "many"}),
        ("/log", {"cursor": "garbage"}),
        ("/diff", {"to": "main"}),
        ("/proposals", {"state": "weird"}),
        ("/proposals", {"cursor": "x"}),
        ("/streams", {"limit": 100000}),
        ("/events", {"after": "x", "timeout": 0}),
        ("/events", {"timeout": -1}),
    ],
)
def test_bad_query_parameters_are_invalid(landed, suffix, params):
    api, head = landed
    error(api.get(suffix, **params), 400, "invalid")


def test_integrate_with_a_bad_wait_is_invalid_and_integrates_nothing(landed):
    api, head = landed
    proposal = api.propose(api.write(head, {"g.txt": "g\n"}))

    error(api.post(f"/proposals/{proposal}/integrate", {}, wait="soon"), 400, "invalid")
    error(api.post(f"/proposals/{proposal}/integrate", {}, wait=61), 400, "invalid")

    assert api.head() == head and Operation.objects.filter(proposal_id=proposal).count() == 0


# Body size.


def test_bodies_over_the_limit_are_too_large_and_write_nothing(landed, settings):
    api, head = landed
    settings.AGENTGIT = {**settings.AGENTGIT, "MAX_BODY_BYTES": 64}
    big = b"x" * 65

    error(api.client.post(api.url("/blobs"), big, content_type="application/octet-stream"), 413, "too_large")
    error(api.client.put(api.url(f"/blobs/{MISSING}"), big, content_type="application/octet-stream"), 413, "too_large")
    operations = [{"op": "write", "path": "g.txt", "content": "y" * 100}]
    error(api.post("/changesets", {"parent": head, "operations": operations}), 413, "too_large")
    settings.AGENTGIT = {**settings.AGENTGIT, "MAX_BODY_BYTES": 1 << 20}
    assert api.client.head(api.url("/blobs/" + _blob_id(big))).status_code == 404
    nothing_written(api, head)


def test_django_refusing_the_body_is_too_large_too(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10

    error(api.client.post(api.url("/blobs"), b"y" * 11, content_type="application/octet-stream"), 413, "too_large")


def _blob_id(data: bytes) -> str:
    import hashlib

    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


# Authentication and scopes.


def test_no_token_is_unauthenticated_with_a_challenge(api):
    from rest_framework.test import APIClient

    response = APIClient().get(api.url())

    error(response, 401, "unauthenticated")
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("header", ["Bearer agt_unknown", "Bearer", "Bearer a b", "Basic !!!"])
def test_unknown_or_malformed_tokens_are_unauthenticated(api, header):
    from rest_framework.test import APIClient

    error(APIClient().get(api.url(), HTTP_AUTHORIZATION=header), 401, "unauthenticated")


def test_a_revoked_token_is_unauthenticated(api):
    client = client_with(["read"], revoked=timezone.now())

    error(client.get(api.url()), 401, "unauthenticated")


def test_the_token_works_as_basic_auth_password(api):
    import base64

    from rest_framework.test import APIClient

    token = client_with(["read"]).credential.token
    basic = base64.b64encode(f"anyone:{token}".encode()).decode()

    assert APIClient().get(api.url(), HTTP_AUTHORIZATION=f"Basic {basic}").status_code == 200


def test_scopes_are_enforced_per_method_and_refusals_write_nothing(landed):
    api, head = landed
    reader, writer = client_with(["read"]), client_with(["write"])
    proposal_id = Proposal.objects.get().pk

    assert reader.get(api.url("/streams/main")).status_code == 200
    error(reader.post(api.url("/changesets"), {"parent": head, "operations": []}, format="json"), 403, "forbidden")
    error(reader.post(api.url("/blobs"), b"x", content_type="application/octet-stream"), 403, "forbidden")
    error(reader.post(api.url("/proposals"), {"stream": "main", "head": head}, format="json"), 403, "forbidden")
    error(reader.post(api.url("/streams"), {"name": "s"}, format="json"), 403, "forbidden")
    error(writer.get(api.url()), 403, "forbidden")
    error(writer.post(api.url(f"/proposals/{proposal_id}/integrate"), {}, format="json"), 403, "forbidden")
    error(api.client.post("/api/v1/repos", {"name": "other"}, format="json"), 403, "forbidden")
    nothing_written(api, head)
    assert Stream.objects.count() == 1 and Repository.objects.count() == 1


def test_auth_is_checked_before_the_repository_is_looked_up(client_for):
    from rest_framework.test import APIClient

    error(APIClient().get("/api/v1/repos/nope"), 401, "unauthenticated")
    error(client_for(["write"]).get("/api/v1/repos/nope"), 403, "forbidden")


# Statuses chosen by the exception handler for errors the scenario does not provoke.


def test_rate_limited_answers_429_with_retry_after_in_whole_seconds(api, monkeypatch):
    from repos.api import views

    def slow_down(name):
        raise RateLimited("slow down", retry_after_ms=1200)

    monkeypatch.setattr(views, "repository", slow_down)
    response = api.client.get(api.url())

    body = error(response, 429, "rate_limited")
    assert body["retryable"] is True and body["retry_after_ms"] == 1200
    assert response["Retry-After"] == "2"


def test_unavailable_is_503_retryable(api, monkeypatch):
    from repos.api import views

    def down(name):
        raise Unavailable("the database is not reachable")

    monkeypatch.setattr(views, "repository", down)

    assert error(api.client.get(api.url()), 503, "unavailable")["retryable"] is True


def test_an_unexpected_exception_is_500_internal_without_internals(api, monkeypatch, caplog):
    from repos.api import views

    def broken(name):
        raise RuntimeError("secret detail")

    monkeypatch.setattr(views, "repository", broken)
    body = error(api.client.get(api.url()), 500, "internal")

    assert "secret" not in body["message"] and body["retryable"] is False
    assert "secret detail" in caplog.text


def test_outside_the_api_django_answers_its_own_pages(client):
    response = client.get("/no-such-page")

    assert response.status_code == 404
    assert not response["Content-Type"].startswith("application/json")
