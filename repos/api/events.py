"""The event feeds (API.md, "Events"): Server-Sent Events at ``GET /api/v1/repos/{repo}/events``
and the same events as JSON over a WebSocket at ``/ws/repos/{repo}/events``.

Both read their process's event relay (repos/services/relay.py): a subscriber first catches up
from the outbox (the Event table), in ``seq`` order, after the id it resumes from —
``Last-Event-ID`` (what EventSource sends when it reconnects; it wins) or ``?after=N``; without
either, from the repository's first event — then receives each new event as it is pushed, so
it misses nothing and sees nothing twice, and an idle subscriber costs no queries.

Each event is::

    id: <seq>
    event: <kind>
    data: <payload as JSON, plus "seq" and "created">

``?kinds=stream.integrate,proposal.conflict`` and ``?stream=main`` choose which events are
sent. The SSE response sends a ``: keep-alive`` comment after ``KEEPALIVE_S`` of silence and ends
after ``?timeout=`` seconds (default 25; the client reconnects with ``Last-Event-ID``); the
WebSocket runs until the client goes away (uvicorn pings it every 20 s). A subscriber whose
buffer (``AGENTGIT["EVENT_BUFFER"]`` events) overflows because it reads too slowly is dropped,
so it never delays the others: the SSE stream ends with a ``: too far behind; resume after N``
comment, the WebSocket closes with code :data:`~repos.errors.CLOSE_TOO_FAR_BEHIND` and the
reason ``resume after N``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Iterator
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from agentgit_site.observability import note

from ..errors import CLOSE_TOO_FAR_BEHIND, ERRORS, Invalid, Unauthenticated
from ..services.admission import SCOPE_KEY
from ..services.events import Message, check_resumable, resume_after
from ..services.relay import KEEPALIVE_S, Filter, TooFarBehind, polled, relay, relayed, release_connection
from . import serializers as s
from .base import ApiView, query_number, repository
from .errors import answer_for
from .permissions import admit

logger = logging.getLogger("repos.api")

DEFAULT_TIMEOUT_S = 25.0
MAX_TIMEOUT_S = 300.0
#: The event kinds and stream names a filter may name, as the schema states them.
NAME = r"[A-Za-z0-9._/-]{1,200}"
KINDS_PATTERN = rf"^{NAME}(,{NAME})*$"
STREAM_PATTERN = rf"^{NAME}$"

FILTER_PARAMETERS = [
    OpenApiParameter(
        "kinds",
        {"type": "string", "pattern": KINDS_PATTERN},
        description="Only these kinds, comma-separated (e.g. `stream.integrate,proposal.conflict`); default all.",
    ),
    OpenApiParameter(
        "stream",
        {"type": "string", "pattern": STREAM_PATTERN},
        description="Only events about this stream (e.g. `main`); default all.",
    ),
]


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
with `Last-Event-ID`. `?kinds=a,b` and `?stream=S` keep only those kinds and the events about that
stream (both feeds). A subscriber that reads too slowly falls more than `AGENTGIT_EVENT_BUFFER`
events behind and is dropped: the SSE stream ends with `: too far behind; resume after N`, the
WebSocket closes with 4008 and the same reason. Resuming after an id whose successors were pruned
(`AGENTGIT_EVENT_RETENTION_S`) is 400 `invalid` with `details[0].first_available`.

**WebSocket** (`/ws/repos/{{repo}}/events`, not an HTTP operation, so described here): the same
events, one JSON text message each: `{{"id": <seq>, "event": <kind>, "data": {{...}}}}` with `data`
as above. The token comes as `?token=` (browsers cannot set headers on a WebSocket) or as
`Authorization: Bearer`, with the `read` scope; `?after=N` resumes after event N. The socket runs
until the client closes it, with no time limit. A refusal accepts the socket and closes it at
once with 4000 + the HTTP status the same refusal gets: 4400 `invalid` (a malformed `?after=`),
4401 `unauthenticated`, 4403 `forbidden`, 4404 `not_found` (no such repository), 4429
`rate_limited`; 4008 when it fell too far behind; 4500 for anything else.
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
            *FILTER_PARAMETERS,
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
        after = resume_point(request)
        check_resumable(found, after)
        wants = event_filter(request.query_params.get("kinds"), request.query_params.get("stream"))
        if isinstance(request._request, ASGIRequest):
            chunks: Iterator[bytes] | AsyncIterator[bytes] = relayed(found.pk, after, wants, timeout)
            release_connection()  # the stream reads through the relay, seldom: no connection held
        else:
            chunks = polled(found.pk, after, wants, timeout)
        response = StreamingHttpResponse(chunks, content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
        return response


def resume_point(request) -> int:
    """The last event id the client has (repos.services.events.resume_after)."""
    return resume_after(request.headers.get("Last-Event-ID"), request.query_params.get("after"))


def event_filter(kinds: str | None, stream: str | None) -> Filter:
    """``?kinds=`` (comma-separated) and ``?stream=`` as a :class:`Filter`; 400 when they do not
    match the schema's patterns (sent empty: not sent, as every optional query parameter)."""
    if kinds and not re.fullmatch(KINDS_PATTERN.strip("^$"), kinds):
        raise Invalid(f"?kinds= is event kinds separated by commas, not {kinds!r}")
    if stream and not re.fullmatch(STREAM_PATTERN.strip("^$"), stream):
        raise Invalid(f"?stream= is a stream name, not {stream!r}")
    return Filter(kinds=frozenset((kinds or "").split(",")) - {""}, stream=stream or None)


def as_json(message: Message) -> str:
    """One event as the WebSocket sends it."""
    return json.dumps(message, separators=(",", ":"), default=str)


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
    its time limit: it runs until the client goes away, and with its filters (``?kinds=``,
    ``?stream=``). A refusal accepts the socket and closes it at once with a code of
    :data:`CLOSE_CODES`; a subscriber too far behind is closed with
    :data:`~repos.errors.CLOSE_TOO_FAR_BEHIND`.
    """

    async def connect(self) -> None:
        note(self.scope, route=ROUTE)
        try:
            repository_id, after, wants = await database_sync_to_async(self._admit)()
        except Exception as refused:  # every refusal (and failure) closes with its table code
            # Accept, then close: a socket closed before accepting is refused with a bare HTTP
            # 403 during the handshake, and the client never learns why.
            error, _status = answer_for(refused)
            if error.code == "internal":
                logger.error("internal error admitting a WebSocket", exc_info=refused)
            await self.accept()
            await self.close(code=error.close_code, reason=error.message[:120])
            return
        await self.accept()
        self.subscription = await relay().subscribe(repository_id, after, wants)
        self.task = asyncio.ensure_future(self._stream())

    async def disconnect(self, code: int) -> None:
        task = getattr(self, "task", None)
        if task is not None:
            task.cancel()
        subscription = getattr(self, "subscription", None)
        if subscription is not None:
            subscription.close()

    def _admit(self) -> tuple[int, int, Filter]:
        admission = self.scope.get(SCOPE_KEY)
        if admission is None:  # mounted without the middleware: refuse rather than serve unchecked
            raise Unauthenticated("this server reads no credentials on this path")
        try:
            url_kwargs = self.scope["url_route"]["kwargs"]
            note(self.scope, credential=admit(admission, "read", url_kwargs))  # as every view's
            found = repository(url_kwargs["repo"])
            query = {key: values[0] for key, values in parse_qs(self.scope.get("query_string", b"").decode()).items()}
            after = resume_after(None, query.get("after"))
            check_resumable(found, after)
            return found.pk, after, event_filter(query.get("kinds"), query.get("stream"))
        finally:
            release_connection()

    async def _stream(self) -> None:
        try:
            while True:
                for message in await self.subscription.next(float("inf")):
                    await self.send(text_data=self.subscription.encoded(message, as_json))
        except TooFarBehind as behind:
            await self.close(code=CLOSE_TOO_FAR_BEHIND, reason=f"too far behind; resume after {behind.resume_id}")
