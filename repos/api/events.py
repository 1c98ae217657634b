"""The event feeds (API.md, "Events"): Server-Sent Events at ``GET /api/v1/repos/{repo}/events``
and the same events as JSON over a WebSocket at ``/ws/repos/{repo}/events``.

The feed reads the outbox (the Event table) in ``seq`` order. Sequence numbers are handed out
under the repository row's write lock, in commit order and without gaps, so a reader that
resumes after id N — from the ``Last-Event-ID`` header (what EventSource sends when it
reconnects; it wins) or ``?after=N`` — misses nothing and sees nothing twice. Without either
the feed starts at the repository's first event.

Each event is::

    id: <seq>
    event: <kind>
    data: <payload as JSON, plus "seq" and "created">

The response streams: the feed polls the database every ``POLL_S`` for newer events, sends a
``: keep-alive`` comment after ``KEEPALIVE_S`` of silence, and ends after ``?timeout=`` seconds
(default 25; the client reconnects with ``Last-Event-ID``). Under ASGI the feed is an async
generator whose queries run in the request's thread (``sync_to_async``), so a subscriber holds
no thread while it waits; under WSGI (and Django's test client) it is a plain generator.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from agentgit_site.observability import note

from ..errors import ERRORS, Invalid, Unauthenticated
from ..services.admission import SCOPE_KEY
from ..services.events import DEFAULT_TIMEOUT_S, KEEPALIVE_S, MAX_TIMEOUT_S, EventFeed, event_data
from . import serializers as s
from .base import ApiView, query_number, repository
from .errors import answer_for

if TYPE_CHECKING:
    pass

logger = logging.getLogger("repos.api")


#: One Server-Sent Event as the schema describes it (OpenAPI 3.0: the schema of a
#: ``text/event-stream`` answer is the schema of each event).
SSE_EVENT = {
    "type": "object",
    "required": ["id", "event", "data"],
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$", "description": "The event's id: monotonic per repository."},
        "event": {"type": "string", "description": "The kind, e.g. `stream.integrate`, `proposal.opened`."},
        "data": {
            "type": "string",
            "description": "A JSON object: the event's payload plus `seq` (its id) and `created`.",
        },
    },
}

FEEDS = f"""
**Server-Sent Events.** Each event is `id: <seq>`, `event: <kind>`, `data: <JSON>`; the `data`
object is the event's payload plus `seq` and `created`. The feed starts after `Last-Event-ID`
(the header wins; EventSource sends it when it reconnects) or `?after=`, else at the
repository's first event, and misses nothing and repeats nothing across reconnections. It sends
`: keep-alive` after {KEEPALIVE_S:g} s of silence and ends after `?timeout=` seconds (default
{DEFAULT_TIMEOUT_S:g}, at most {MAX_TIMEOUT_S:g}; `0` sends what is there and ends): reconnect
with `Last-Event-ID`.

**WebSocket** (`/ws/repos/{{repo}}/events`, not an HTTP operation, so described here): the same
events, one JSON text message each: `{{"id": <seq>, "event": <kind>, "data": {{...}}}}` with `data`
as above. The token comes as `?token=` (browsers cannot set headers on a WebSocket) or as
`Authorization: Bearer`, with the `read` scope; `?after=N` resumes after event N. The socket runs
until the client closes it, with no time limit. A refusal accepts the socket and closes it at
once with 4000 + the HTTP status the same refusal gets: 4400 `invalid` (a malformed `?after=`),
4401 `unauthenticated`, 4403 `forbidden`, 4404 `not_found` (no such repository), 4429
`rate_limited`; 4500 for anything else.
"""


@extend_schema(tags=["events"])
class EventsView(ApiView):
    @extend_schema(
        summary="Follow the repository's events",
        description="The repository's events as Server-Sent Events, resumable without gaps or duplicates.\n" + FEEDS,
        parameters=[
            OpenApiParameter(
                "after",
                {"type": "integer", "minimum": 0},
                description="Resume after this event id (the Last-Event-ID header wins).",
            ),
            OpenApiParameter(
                "timeout",
                {"type": "number", "minimum": 0, "maximum": MAX_TIMEOUT_S},
                description=f"Seconds until the stream ends (default {DEFAULT_TIMEOUT_S:g}, max {MAX_TIMEOUT_S:g}).",
            ),
            OpenApiParameter(
                "Last-Event-ID",
                {"type": "integer", "minimum": 0},
                location=OpenApiParameter.HEADER,
                description="The last event id the client has; the feed resumes after it.",
            ),
        ],
        responses={
            (200, "text/event-stream"): OpenApiResponse(SSE_EVENT, description="One event (of many, streamed)."),
            **s.errors(400, 404),
        },
    )
    def get(self, request, repo):
        """The repository's events as Server-Sent Events, resumable without gaps or duplicates."""
        found = repository(repo)
        timeout = query_number(request, "timeout", DEFAULT_TIMEOUT_S, low=0, high=MAX_TIMEOUT_S)
        feed = EventFeed(found.pk, resume_point(request), timeout)
        chunks = feed.asynchronous() if isinstance(request._request, ASGIRequest) else feed.synchronous()
        response = StreamingHttpResponse(chunks, content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
        return response


def resume_point(request) -> int:
    """The last event id the client has: ``Last-Event-ID`` (it wins) or ``?after=``; 0 when
    neither. Both are checked when both are sent."""
    header = _event_id(request.headers.get("Last-Event-ID"), empty_is_absent=False)
    query = _event_id(request.query_params.get("after"), empty_is_absent=True)
    return header if header is not None else query or 0


def _event_id(raw: str | None, *, empty_is_absent: bool) -> int | None:
    # ``?after=`` sent empty is not sent (as every optional query parameter); an empty
    # Last-Event-ID is malformed (EventSource sends the header only when it has an id).
    if raw is None or (raw == "" and empty_is_absent):
        return None
    try:
        after = int(raw)
    except ValueError:
        raise Invalid(f"an event id is a whole number, not {raw!r}") from None
    if after < 0:
        raise Invalid(f"an event id is not negative: {after}")
    return after


# ------------------------------------------------------------------------------ WebSocket

#: The consumer's URL pattern (agentgit_site/asgi.py), as the access log and metrics name it.
ROUTE = "ws/repos/<str:repo>/events"

#: WebSocket close codes: 4000 + the HTTP status the same refusal gets over HTTP (the error table's).
CLOSE_CODES = {code: cls.close_code for code, cls in ERRORS.items()}


class EventsConsumer(AsyncWebsocketConsumer):
    """``/ws/repos/{repo}/events?after=N&token=T``: every event as ``{"id", "event", "data"}``.

    The token comes as ``?token=`` (browsers cannot set headers on a WebSocket) or in the
    ``Authorization`` header (Bearer, or Basic with the token as the password); it needs the
    ``read`` scope, and the connection takes one token from the credential's bucket. The ASGI
    middleware read the token (agentgit_site/guards.py); admitting it is one call here. The feed
    is the SSE feed's (the same outbox, in ``seq`` order, resumable with ``?after=``), without
    its time limit: it runs until the client goes away. A refusal accepts the socket and closes it at once with
    a code of :data:`CLOSE_CODES`.
    """

    async def connect(self) -> None:
        note(self.scope, route=ROUTE)
        try:
            repository_id, after = await database_sync_to_async(self._admit)()
        except Exception as refused:  # every refusal (and failure) closes with its table code
            # Accept, then close: a socket closed before accepting is refused with a bare HTTP
            # 403 during the handshake, and the client never learns why.
            error, _status = answer_for(refused)
            if error.code == "internal":
                logger.error("internal error admitting a WebSocket", exc_info=refused)
            await self.accept()
            await self.close(code=error.close_code)
            return
        await self.accept()
        self.feed = EventFeed(repository_id, after, timeout_s=float("inf"))
        self.task = asyncio.ensure_future(self._stream())

    async def disconnect(self, code: int) -> None:
        task = getattr(self, "task", None)
        if task is not None:
            task.cancel()

    def _admit(self) -> tuple[int, int]:
        admission = self.scope.get(SCOPE_KEY)
        if admission is None:  # mounted without the middleware: refuse rather than serve unchecked
            raise Unauthenticated("this server reads no credentials on this path")
        note(self.scope, credential=admission.admit("read"))
        found = repository(self.scope["url_route"]["kwargs"]["repo"])
        query = parse_qs(self.scope.get("query_string", b"").decode())
        raw = (query.get("after") or ["0"])[0]
        if not raw.isdigit():
            raise Invalid(f"an event id is a whole number, not {raw!r}")
        return found.pk, int(raw)

    async def _stream(self) -> None:
        fetch = database_sync_to_async(self.feed.fetch)
        while True:
            events = await fetch()
            for event in events:
                await self.send(
                    text_data=json.dumps({"id": event.seq, "event": event.kind, "data": event_data(event)}, default=str)
                )
            _, pause = self.feed.step(events)
            await asyncio.sleep(pause or 0)
