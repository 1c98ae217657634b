"""The hot-read lane (repos/api/hot.py) answers plain GETs exactly as Django does, or hands them on.

Through the whole ASGI application, in process: every request is asked with the lane on and
with it off (``AGENTGIT_HOT_READS=0``), and both answers must agree in status, body and every
header. Which lane answered is counted at Django's handler.
"""

from __future__ import annotations

import base64
import json
import threading

import httpx
import pytest
from asgiref.sync import async_to_sync

from agentgit_site.handler import SingleHopASGIHandler
from repos.api import hot
from repos.services import credentials, metrics, repositories
from tests.factories import CredentialFactory


def asgi_get(path: str, headers: dict[str, str], method: str = "GET") -> httpx.Response:
    from agentgit_site.asgi import application

    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            return await http.request(method, path, headers=headers)

    return async_to_sync(get)()


@pytest.fixture
def through_django(monkeypatch) -> list[str]:
    """The paths of the requests that reached Django's handler."""
    reached: list[str] = []
    real = SingleHopASGIHandler.handle

    async def counted(self, scope, receive, send):
        reached.append(scope["path"])
        return await real(self, scope, receive, send)

    monkeypatch.setattr(SingleHopASGIHandler, "handle", counted)
    return reached


@pytest.fixture
def lanes(settings, through_django):
    """``lanes(path, headers)``: the answers with the lane on and off, and whether Django answered
    the first."""

    def ask(path: str, headers: dict[str, str], method: str = "GET") -> tuple[httpx.Response, httpx.Response, bool]:
        settings.AGENTGIT = {**settings.AGENTGIT, "HOT_READS": True}
        before = len(through_django)
        on = asgi_get(path, headers, method)
        by_django = len(through_django) > before
        settings.AGENTGIT = {**settings.AGENTGIT, "HOT_READS": False}
        before = len(through_django)
        off = asgi_get(path, headers, method)
        assert len(through_django) == before + 1  # off: Django answers everything
        return on, off, by_django

    return ask


@pytest.fixture
def demo(api):
    """``demo`` with a landed head on ``main``, a stream with '/' in its name, and the ids of a
    changeset, a proposal and an operation."""
    base = api.write(None, {"README.md": "hot\n"})
    landed = api.land(base)
    assert api.post("/streams", {"name": "feature/x", "from": base}).status_code == 201
    return {"changeset": base, "proposal": landed["proposal"], "operation": landed["operation"]}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def assert_same(on: httpx.Response, off: httpx.Response) -> None:
    assert (on.status_code, on.content) == (off.status_code, off.content)
    assert dict(on.headers) == dict(off.headers)


HOT = [
    "/api/v1/repos/demo",
    "/api/v1/repos/demo/streams/main",
    "/api/v1/repos/demo/streams/feature/x",
    "/api/v1/repos/demo/changesets/{changeset}",
    "/api/v1/repos/demo/proposals/{proposal}",
    "/api/v1/repos/demo/operations/{operation}",
    "/api/v1/repos/demo/tree/main",
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", HOT)
def test_a_plain_read_is_answered_before_django_with_the_same_answer(lanes, demo, path):
    token = CredentialFactory(scopes=["read"]).token

    on, off, by_django = lanes(path.format(**demo), bearer(token))

    assert on.status_code == 200 and not by_django
    assert_same(on, off)
    assert on.headers["content-security-policy"] and on.headers["x-frame-options"] == "DENY"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/api/v1/repos/demo/streams/nope", 404),
        ("/api/v1/repos/nope", 404),
        ("/api/v1/repos/nope/streams/main", 404),
        ("/api/v1/repos/demo/proposals/not-a-number", 404),
        ("/api/v1/repos/demo/operations/999999", 404),
        ("/api/v1/repos/demo/changesets/xyz", 400),
        ("/api/v1/repos/demo/streams/main/land", 405),  # Django's resolution: the land route first
        ("/api/v1/repos/demo/streams/main?limit=1", 200),  # a query: Django's
        ("/api/v1/repos/demo/", 404),
    ],
)
def test_every_other_answer_is_djangos(lanes, demo, path, status):
    token = CredentialFactory(scopes=["read"]).token

    on, off, by_django = lanes(path, bearer(token))

    assert on.status_code == status and by_django
    assert_same(on, off)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        (bearer("agt_unknown"), 401),
        ({"Authorization": "Bearer two words"}, 401),
        ({"Authorization": "Bearer {write_only}"}, 403),
        ({"Authorization": "Bearer {read}", "Host": "evil.example"}, 400),
    ],
)
def test_refusals_are_djangos(lanes, demo, headers, status):
    tokens = {"read": CredentialFactory(scopes=["read"]).token, "write_only": CredentialFactory(scopes=["write"]).token}
    headers = {name: value.format(**tokens) for name, value in headers.items()}

    on, off, by_django = lanes("/api/v1/repos/demo/streams/main", headers)

    assert on.status_code == status and by_django
    assert_same(on, off)


@pytest.mark.django_db(transaction=True)
def test_git_basic_credentials_and_head_requests(lanes, demo):
    token = CredentialFactory(scopes=["read"]).token
    basic = {"Authorization": "Basic " + base64.b64encode(f"git:{token}".encode()).decode()}

    on, off, by_django = lanes("/api/v1/repos/demo/streams/main", basic)
    assert on.status_code == 200 and not by_django
    assert_same(on, off)

    on, off, by_django = lanes("/api/v1/repos/demo/streams/main", bearer(token), method="HEAD")
    assert on.status_code == 200 and by_django
    assert_same(on, off)


@pytest.mark.django_db(transaction=True)
def test_the_bucket_is_charged_once_and_a_refusal_counted_once(settings, through_django, demo, monkeypatch):
    token = CredentialFactory(scopes=["read"], rate=0.001, burst=2).token
    refusals: list[None] = []
    real_observe = metrics.observe_rate_limited
    monkeypatch.setattr(metrics, "observe_rate_limited", lambda: (refusals.append(None), real_observe())[1])

    answers = [asgi_get("/api/v1/repos/demo/streams/main", bearer(token)).status_code for _ in range(3)]

    assert answers == [200, 200, 429]
    assert through_django == ["/api/v1/repos/demo/streams/main"]  # only the refusal
    assert len(refusals) == 1


@pytest.mark.django_db(transaction=True)
def test_a_404_through_the_lane_takes_one_token(demo):
    token = CredentialFactory(scopes=["read"], rate=0.001, burst=2).token

    answers = [asgi_get(path, bearer(token)).status_code for path in ("/api/v1/repos/demo/streams/nope",) * 3]

    assert answers == [404, 404, 429]  # handed on to Django, which charged each once


@pytest.mark.django_db(transaction=True)
def test_a_revoked_token_is_refused_at_once(demo):
    credential = CredentialFactory(scopes=["read"])
    assert asgi_get("/api/v1/repos/demo", bearer(credential.token)).status_code == 200

    credentials.revoke_credential(credential)

    assert asgi_get("/api/v1/repos/demo", bearer(credential.token)).status_code == 401


@pytest.mark.django_db(transaction=True)
def test_a_hot_read_is_logged_and_counted_under_its_route(settings, through_django, demo, capsys):
    settings.AGENTGIT = {**settings.AGENTGIT, "ACCESS_LOG": True}
    credential = CredentialFactory(scopes=["read"])
    capsys.readouterr()

    assert asgi_get("/api/v1/repos/demo/streams/feature/x", bearer(credential.token)).status_code == 200

    assert through_django == []
    logged = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith('{"time"')]
    assert [(line["route"], line["status"], line["credential"]) for line in logged] == [
        ("api/v1/repos/<str:repo>/streams/<path:stream>", 200, credential.pk)
    ]


@pytest.fixture
def stream_reads(monkeypatch) -> list[tuple[str, str]]:
    """The stream rows the lane's threads read from the database (not answered from what they kept)."""
    read: list[tuple[str, str]] = []
    real = repositories.find_stream

    def counted(repo: str, stream: str):
        if threading.current_thread().name.startswith("agentgit-hot"):
            read.append((repo, stream))
        return real(repo, stream)

    monkeypatch.setattr(repositories, "find_stream", counted)
    return read


@pytest.fixture
def hops(monkeypatch) -> list[str]:
    """The paths of the reads handed to the lane's thread (not answered on the event loop)."""
    handed: list[str] = []
    real = hot._answer

    def counted(scope, target, version):
        handed.append(scope["path"])
        return real(scope, target, version)

    monkeypatch.setattr(hot, "_answer", counted)
    return handed


@pytest.mark.django_db(transaction=True)
def test_an_answer_is_kept_only_while_nothing_was_committed(through_django, demo, api, admin, stream_reads, hops):
    token = CredentialFactory(scopes=["read"]).token
    path = "/api/v1/repos/demo/streams/main"
    assert asgi_get(path, bearer(token)).status_code == 200  # the token's first use writes its last_used

    first, again = (asgi_get(path, bearer(token)) for _ in range(2))
    assert first.status_code == again.status_code == 200 and first.content == again.content
    assert len(stream_reads) == 2  # the third was the bytes kept: nothing had been committed
    assert hops == [path] * 2  # and answered on the event loop

    api.land(api.write(first.json()["head"], {"README.md": "moved\n"}))
    moved = asgi_get(path, bearer(token))
    assert moved.json()["head"] == api.head() != first.json()["head"]  # the very next read sees the landing
    assert len(stream_reads) == 3

    feature = "/api/v1/repos/demo/streams/feature/x"
    assert [asgi_get(feature, bearer(token)).status_code for _ in range(2)] == [200, 200]  # kept
    assert admin.delete(feature).status_code == 204
    assert asgi_get(feature, bearer(token)).status_code == 404
    assert through_django == [feature]  # the deletion was seen by the lane, which handed the 404 on


@pytest.mark.django_db(transaction=True)
def test_a_kept_answer_is_given_only_to_an_admitted_request(through_django, demo, stream_reads):
    reader = CredentialFactory(scopes=["read"], rate=0.001, burst=3)
    elsewhere = CredentialFactory(scopes=["read"], repositories=["other"])
    path = "/api/v1/repos/demo/streams/main"
    assert [asgi_get(path, bearer(reader.token)).status_code for _ in range(3)] == [200] * 3  # kept
    reads = len(stream_reads)

    assert asgi_get(path, bearer(reader.token)).status_code == 429  # its bucket is empty
    assert asgi_get(path, bearer(elsewhere.token)).status_code == 404  # held to another repository
    assert asgi_get(path, {}).status_code == 401
    assert through_django == [path] * 3
    credentials.revoke_credential(reader)
    assert asgi_get(path, bearer(reader.token)).status_code == 401
    assert len(stream_reads) == reads  # none of them read the stream


@pytest.mark.django_db(transaction=True)
def test_answers_are_not_kept_when_turned_off(settings, demo, stream_reads):
    settings.AGENTGIT = {**settings.AGENTGIT, "HOT_READ_CACHE": False}
    token = CredentialFactory(scopes=["read"]).token

    answers = [asgi_get("/api/v1/repos/demo/streams/main", bearer(token)).status_code for _ in range(3)]

    assert answers == [200] * 3 and len(stream_reads) == 3
