"""ASGI guards in front of every surface (REST, the event feeds, and whatever is mounted later):
what must be decided before any work is done, in one place rather than once per surface.

* :class:`LoadShedding` — over ``AGENTGIT["MAX_CONCURRENT_REQUESTS"]`` requests at once in this
  process, more are refused (503 ``unavailable``, retryable) instead of queued.
* :class:`BodyLimit` — bodies over ``AGENTGIT["MAX_BODY_BYTES"]`` are refused (413
  ``too_large``) before Django reads them.
* :class:`Admit` — reads the credential a request presents (Bearer, Basic with the token as the
  password, ``?token=`` on a WebSocket) and passes it down in the scope as the request's
  Admission (repos.services.admission): authenticated once, then its scope checked and its token
  bucket charged by one call of the surface, ``admit(scope)``.

Refusals answer the API's one error shape. asgi.py stacks them in this order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from urllib.parse import parse_qs

from django.conf import settings

from repos.errors import ApiError, TooLarge, Unavailable
from repos.services import metrics
from repos.services.admission import SCOPE_KEY, Admission

#: Paths never shed: probes must answer while the server is saturated, and event feeds are
#: long-lived connections, not work in progress.
_NOT_SHED = ("/healthz", "/readyz", "/metrics")
_FEED_SUFFIX = "/events"


class LoadShedding:
    """Refuse requests beyond a number in progress at once (per process), rather than queue them.

    A saturated server that queues every request makes every client wait longer and longer; one
    that refuses the excess at once keeps the requests it serves fast, and tells the others to
    retry (``unavailable`` is retryable, with ``Retry-After``). 0 turns it off.
    """

    def __init__(self, app) -> None:
        self.app = app
        self.in_progress = 0

    async def __call__(self, scope, receive, send) -> None:
        limit = settings.AGENTGIT["MAX_CONCURRENT_REQUESTS"]
        path = scope.get("path", "")
        if scope["type"] != "http" or not limit or path in _NOT_SHED or path.endswith(_FEED_SUFFIX):
            await self.app(scope, receive, send)
            return
        if self.in_progress >= limit:
            metrics.observe_shed()
            error = Unavailable(f"the server is at its limit of {limit} requests at once; retry", retry_after_ms=100)
            await answer(send, error, [(b"retry-after", b"1")])
            return
        self.in_progress += 1  # one event loop per process: no lock needed
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_progress -= 1


class Admit:
    """Pass every HTTP request and WebSocket down with its Admission in ``scope["agentgit.admission"]``.

    It only reads headers here: the token is looked up when the surface first asks (in the
    thread its work runs in; no extra hop between the event loop and a thread), once for the
    request, and the surface answers a refusal in its own protocol (a JSON 401, a WebSocket close
    code, a git challenge).
    """

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] in ("http", "websocket") and SCOPE_KEY not in scope:
            scope = {**scope, SCOPE_KEY: presented(scope)}
        await self.app(scope, receive, send)


def presented(scope: dict) -> Admission:
    """The Admission of an ASGI connection, from its headers (and ``?token=`` on a WebSocket)."""
    authorization = next((value for name, value in scope.get("headers", ()) if name == b"authorization"), None)
    query_token = None
    if scope["type"] == "websocket":
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        query_token = (query.get("token") or [None])[0]
    return Admission.presented(authorization, query_token)


class BodyLimit:
    """Refuse request bodies over the limit before Django reads them.

    Under ASGI, Django receives a whole body (spooling it to disk) before any view can look at
    it, so a 5 GiB upload would be stored in full only to be refused. This guard answers 413 at
    once when the declared ``Content-Length`` is over the limit, and stops a body without one
    (chunked) as soon as it passes the limit. Views still check the size (the test client and
    WSGI do not come through here).
    """

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = settings.AGENTGIT["MAX_BODY_BYTES"]
        declared = chunked = None
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                declared = value
            elif name == b"transfer-encoding":
                chunked = value
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _refuse(send, f"the body is {int(declared)} bytes; the limit is {limit}")
            return
        if chunked is None and (declared is None or declared.isdigit()):
            # No body, or one of the declared length within the limit, to which the HTTP server
            # holds it: nothing to count (most requests: a GET has no body).
            await self.app(scope, receive, send)
            return
        received = 0
        refused = False

        async def counting_receive():
            nonlocal received, refused
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit and not refused:
                    refused = True
                    await _refuse(send, f"the body is over the limit of {limit} bytes")
                    return {"type": "http.disconnect"}  # Django abandons the request
            return message

        async def guarded_send(message):
            if not refused:  # the refusal is the whole answer
                await send(message)

        await self.app(scope, counting_receive, guarded_send)


async def _refuse(send, message: str) -> None:
    await answer(send, TooLarge(message), [(b"connection", b"close")])


async def answer(send, error: ApiError, extra_headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    """Answer ``error`` in the API's JSON shape with its table status, from ASGI code."""
    body = json.dumps(error.as_dict()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra_headers]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
