"""What the server tells its operators about each request: the access log, request metrics, and
secrets kept out of every log.

* :class:`AccessLog` — ASGI middleware around the whole application (HTTP, Server-Sent Events,
  WebSockets, and whatever surface is mounted later): when a request or connection ends it
  writes one JSON line to standard error and counts it in
  :mod:`repos.services.metrics` (requests by method, route and status, and their latency).
* :func:`note` — how the code that learns a request's route and credential tells the access
  log: the Django middleware :class:`NoteRequest` for every Django view, the WebSocket consumer
  for its connections.

Secrets never reach a line: the path and query string are redacted here (the only parts of an
access line a client chooses), and every log handler redacts every other record
(:mod:`agentgit_site.redaction`, settings ``LOGGING``).

JSON lines rather than logfmt: every log shipper parses JSON without a grammar of its own, and
JSON's escaping is defined, so a path or a query with spaces, quotes or ``=`` cannot break a
line apart. An access line looks like::

    {"time": "2026-12-01T08:15:02.114Z", "method": "GET", "path": "/api/v1/repos/demo/log",
     "query": "limit=5", "route": "api/v1/repos/<str:repo>/log", "status": 200,
     "duration_ms": 3.207, "bytes_sent": 1834, "bytes_received": 0, "credential": 7,
     "client": "127.0.0.1", "pid": 4242}

``credential`` is the credential's id (never its token), ``pid`` the server process that
answered; a WebSocket line has the method
``WEBSOCKET``, the status 101 once accepted (403 if refused before), and ``close_code`` when
the server closed it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from datetime import UTC, datetime
from json.encoder import encode_basestring_ascii as _json_string  # json.dumps's escaping

from django.conf import settings
from django.urls import Resolver404, resolve

from agentgit_site.redaction import redact
from repos.services import metrics

#: The scope key under which a request's :class:`RequestNote` travels.
NOTE_KEY = "agentgit.note"
#: The route of requests no URL pattern matched (kept as one label, whatever the path).
UNMATCHED = "unmatched"


class RequestNote:
    """What the application learned about a request, for its access line."""

    __slots__ = ("route", "credential")

    def __init__(self) -> None:
        self.route: str | None = None
        self.credential: int | None = None


def note(scope: dict, *, route: str | None = None, credential: object = None) -> None:
    """Tell the access log the request's route pattern and its credential (a Credential or its id)."""
    found = scope.get(NOTE_KEY)
    if found is None:  # not under AccessLog: the test client, WSGI
        return
    if route is not None:
        found.route = route
    if credential is not None:
        found.credential = getattr(credential, "pk", credential)


class NoteRequest:
    """Django middleware: the resolved route and the authenticated credential, for the access log.

    DRF sets ``request.auth`` (the Credential) on Django's request once it has authenticated."""

    sync_capable, async_capable = True, False

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        scope = getattr(request, "scope", None)
        if scope is not None:
            match = request.resolver_match
            note(scope, route=match.route if match is not None else None, credential=getattr(request, "auth", None))
        return response


class _Answer:
    """What the application sent: status, body bytes, a WebSocket's close code."""

    __slots__ = ("status", "bytes_sent", "close_code")

    def __init__(self) -> None:
        self.status: int | None = None
        self.bytes_sent = 0
        self.close_code: int | None = None

    def see(self, message: dict) -> None:
        kind = message["type"]
        if kind == "http.response.body" or kind == "websocket.send":
            body = message.get("body") or message.get("bytes") or b""
            text = message.get("text")
            self.bytes_sent += len(text.encode()) if text else len(body)
        elif kind == "http.response.start" or kind == "websocket.http.response.start":
            self.status = message["status"]
        elif kind == "websocket.accept":
            self.status = 101
        elif kind == "websocket.close":
            if self.status is None:
                self.status = 403  # closed before accepting: the client sees a refused handshake
            else:
                self.close_code = message.get("code", 1000)


class AccessLog:
    """ASGI middleware: one access line and one request metric per HTTP request or WebSocket."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request_note = RequestNote()
        scope = {**scope, NOTE_KEY: request_note}
        answer = _Answer()
        received = 0

        async def counting_receive():
            nonlocal received
            message = await receive()
            received += len(message.get("body") or b"")
            return message

        async def watching_send(message) -> None:
            answer.see(message)
            await send(message)

        started = time.perf_counter()
        try:
            await self.app(scope, counting_receive, watching_send)
        except asyncio.CancelledError:
            answer.status = answer.status or 499  # the client went away first
            raise
        except BaseException:
            answer.status = answer.status or 500
            raise
        finally:
            _finish(scope, request_note, answer, received, time.perf_counter() - started)


def _finish(scope: dict, request_note: RequestNote, answer: _Answer, received: int, seconds: float) -> None:
    websocket = scope["type"] == "websocket"
    method = "WEBSOCKET" if websocket else scope.get("method", "GET")
    route = request_note.route or _route_of(scope)
    status = answer.status or (101 if websocket else 500)
    # A WebSocket the server closed with an error (4000 + the HTTP status) counts as that error.
    label = answer.close_code if answer.close_code and answer.close_code >= 4000 else status
    metrics.observe_request(method, route, label, seconds)
    if not settings.AGENTGIT["ACCESS_LOG"]:
        return
    # The JSON by hand, each string escaped as json.dumps escapes it, in one write rather than a
    # dict, json.dumps and a LogRecord per request: 51-88 -> 18 us with the metrics (adr/0013).
    credential = request_note.credential
    line = (
        f'{{"time": "{datetime.now(UTC).isoformat(timespec="milliseconds")[:-6]}Z"'
        f', "method": {_json_string(method)}'
        f', "path": {_json_string(redact(scope.get("path", "")))}'
        f', "route": {_json_string(route)}'
        f', "status": {int(status)}'
        f', "duration_ms": {round(seconds * 1000, 3)!r}'
        f', "bytes_sent": {answer.bytes_sent}'
        f', "bytes_received": {received}'
        f', "credential": {"null" if credential is None else int(credential)}'
        f', "client": {_json_string((scope.get("client") or ("",))[0])}'
        f', "pid": {os.getpid()}'
    )
    query = scope.get("query_string", b"")
    if query:
        line += f', "query": {_json_string(redact(query.decode("latin-1")))}'
    if answer.close_code is not None:
        line += f', "close_code": {int(answer.close_code)}'
    # One write of the whole line (stderr is line-buffered: it leaves at once).
    sys.stderr.write(line + "}\n")


def _route_of(scope: dict) -> str:
    """The route of a request the application did not note (refused before Django saw it)."""
    if scope["type"] != "http":
        return UNMATCHED
    try:
        return resolve(scope.get("path", "")).route
    except Resolver404:
        return UNMATCHED
