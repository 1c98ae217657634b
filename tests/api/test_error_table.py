"""The error table: an engine error that reaches a surface unwrapped answers its documented code.

Services let engine errors propagate; the REST exception handler and the WebSocket consumer
translate them at one boundary (repos.errors.from_engine). Here a service raises each kind of
engine error straight into a view, and into the WebSocket's admission.
"""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator

from engine.errors import (
    CorruptObject,
    InvalidInput,
    InvalidObjectId,
    InvalidOperation,
    ObjectMissing,
    PathNotFound,
    UnsafePath,
    WrongObjectType,
)
from repos.api import events
from repos.errors import ERRORS, AlreadyExists, NotFound
from repos.services import reads
from tests.factories import CredentialFactory

#: Each engine error, and the code (with its status) API.md documents for it.
DOCUMENTED = [
    (InvalidInput("contradictory input"), "invalid", 400),
    (InvalidObjectId("not an object id: 'xyz'"), "invalid", 400),
    (UnsafePath("'../etc' leaves the tree"), "invalid", 400),
    (InvalidOperation("rename of a missing path"), "invalid", 400),
    (WrongObjectType("a blob, not a tree"), "invalid", 400),
    (ObjectMissing.for_id("0123456789abcdef0123456789abcdef01234567"), "not_found", 404),
    (PathNotFound("no such path: src"), "not_found", 404),
    (CorruptObject("the stored tree does not parse"), "internal", 500),
]


def raising(error: Exception):
    def service(*args, **kwargs):
        raise error

    return service


@pytest.mark.django_db
@pytest.mark.parametrize("engine_error, code, status", DOCUMENTED, ids=lambda v: type(v).__name__)
def test_an_engine_error_raised_unwrapped_in_a_view_answers_its_documented_code(
    api, monkeypatch, engine_error, code, status
):
    monkeypatch.setattr(reads, "tree", raising(engine_error))

    response = api.get("/tree/main")

    assert response.status_code == status, response.content
    body = response.json()["error"]
    assert body["code"] == code and body["retryable"] is False
    assert body["message"] == engine_error.message
    assert body["details"] == [{"code": engine_error.code, "message": engine_error.message}]


@pytest.mark.django_db
@pytest.mark.parametrize("engine_error, code, status", DOCUMENTED[:1] + DOCUMENTED[5:6], ids=lambda v: type(v).__name__)
def test_the_event_stream_answers_an_unwrapped_engine_error_alike(api, monkeypatch, engine_error, code, status):
    monkeypatch.setattr(events, "repository", raising(engine_error))

    response = api.get("/events", timeout=0.1)

    assert response.status_code == status and response.json()["error"]["code"] == code


def websocket_close_code(path: str) -> int:
    """Connect to the ASGI application's WebSocket at ``path``; the code it closes with."""
    from agentgit_site.asgi import application

    async def run() -> int:
        scope = {"type": "websocket", "path": path.split("?")[0], "query_string": path.partition("?")[2].encode()}
        scope |= {"headers": [], "subprotocols": []}
        socket = ApplicationCommunicator(application, scope)
        await socket.send_input({"type": "websocket.connect"})
        assert (await socket.receive_output(10))["type"] == "websocket.accept"
        closed = await socket.receive_output(10)
        assert closed["type"] == "websocket.close"
        await socket.wait(1)
        return closed["code"]

    return async_to_sync(run)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("engine_error, code, status", DOCUMENTED, ids=lambda v: type(v).__name__)
def test_an_engine_error_raised_unwrapped_while_admitting_a_websocket_closes_with_its_code(
    monkeypatch, engine_error, code, status
):
    token = CredentialFactory(scopes=["read"]).token
    monkeypatch.setattr(events, "repository", raising(engine_error))

    assert websocket_close_code(f"/ws/repos/demo/events?token={token}") == 4000 + status


def test_every_code_is_declared_once_with_a_status_retry_flag_and_close_code():
    assert list(ERRORS) == [
        "internal",
        "invalid",
        "unauthenticated",
        "forbidden",
        "policy_denied",
        "not_found",
        "already_exists",
        "aborted",
        "wrong_state",
        "too_large",
        "rate_limited",
        "unavailable",
    ]
    assert {code: (cls.status, cls.retryable) for code, cls in ERRORS.items()} == {
        "internal": (500, False),
        "invalid": (400, False),
        "unauthenticated": (401, False),
        "forbidden": (403, False),
        "policy_denied": (403, False),
        "not_found": (404, False),
        "already_exists": (409, False),
        "aborted": (409, True),
        "wrong_state": (409, False),
        "too_large": (413, False),
        "rate_limited": (429, True),
        "unavailable": (503, True),
    }
    assert all(cls.close_code == 4000 + cls.status for cls in ERRORS.values())
    assert events.CLOSE_CODES["rate_limited"] == 4429
    with pytest.raises(TypeError, match="declared twice"):
        type("Again", (AlreadyExists,), {}, code="not_found", status=404)


def test_git_is_answered_the_status_and_the_message_as_text():
    assert NotFound("no repository named 'x'").git_answer() == (404, b"not_found: no repository named 'x'\n")
