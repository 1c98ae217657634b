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
import time
from collections.abc import AsyncIterator, Iterator
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from agentgit_site.observability import note

from ..errors import ApiError, Invalid, Unauthenticated
from ..models import Event
from ..services import metrics, ratelimit
from ..services.credentials import authenticate_token, require_scope
from . import serializers as s
from .base import ApiView, query_number, repository

POLL_S = 0.1
KEEPALIVE_S = 15.0
DEFAULT_TIMEOUT_S = 25.0
MAX_TIMEOUT_S = 300.0
#: Most events read per query.
BATCH = 500
KEEPALIVE = b": keep-alive\n\n"


@extend_schema(tags=["events"])
class EventsView(ApiView):
    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="Resume after this event id (the Last-Event-ID header wins)."),
            OpenApiParameter(
                "timeout",
                float,
                description=f"Seconds until the stream ends (default {DEFAULT_TIMEOUT_S:g}, max {MAX_TIMEOUT_S:g}).",
            ),
            OpenApiParameter("Last-Event-ID", int, location=OpenApiParameter.HEADER),
        ],
        responses={
            (200, "text/event-stream"): OpenApiResponse(
                OpenApiTypes.STR, description="`id: <seq>`, `event: <kind>`, `data: <JSON>` per event."
            ),
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
    """The last event id the client has: ``Last-Event-ID`` or ``?after=``; 0 when neither."""
    raw = request.headers.get("Last-Event-ID") or request.query_params.get("after") or "0"
    try:
        after = int(raw)
    except ValueError:
        raise Invalid(f"an event id is a whole number, not {raw!r}") from None
    if after < 0:
        raise Invalid(f"an event id is not negative: {after}")
    return after


def event_data(event: Event) -> dict:
    """An event's data as both feeds send it: its payload plus ``seq`` and ``created``."""
    return {**event.payload, "seq": event.seq, "created": event.created.isoformat().replace("+00:00", "Z")}


def encode(event: Event) -> bytes:
    """One event in the SSE wire format."""
    text = json.dumps(event_data(event), separators=(",", ":"), default=str)
    return f"id: {event.seq}\nevent: {event.kind}\ndata: {text}\n\n".encode()


class EventFeed:
    """The events of one repository after ``after``, polled until ``timeout_s`` has passed."""

    def __init__(self, repository_id: int, after: int, timeout_s: float) -> None:
        self.repository_id = repository_id
        self.after = after
        now = time.monotonic()
        self.deadline = now + timeout_s
        self.quiet_since = now

    def fetch(self) -> list[Event]:
        return list(Event.objects.filter(repository_id=self.repository_id, seq__gt=self.after).order_by("seq")[:BATCH])

    def step(self, events: list[Event]) -> tuple[bytes, float | None]:
        """After a fetch: the bytes to send, and the pause before the next fetch (None: the end)."""
        now = time.monotonic()
        if events:
            self.after = events[-1].seq
            self.quiet_since = now
            metrics.observe_relayed(event.created for event in events)
            return b"".join(encode(event) for event in events), 0.0
        if now >= self.deadline:
            return b"", None
        chunk = b""
        if now - self.quiet_since >= KEEPALIVE_S:
            chunk, self.quiet_since = KEEPALIVE, now
        return chunk, min(POLL_S, self.deadline - now)

    def synchronous(self) -> Iterator[bytes]:
        while True:
            chunk, pause = self.step(self.fetch())
            if chunk:
                yield chunk
            if pause is None:
                return
            time.sleep(pause)

    async def asynchronous(self) -> AsyncIterator[bytes]:
        fetch = sync_to_async(self.fetch)  # thread-sensitive: the request's own thread and connection
        while True:
            chunk, pause = self.step(await fetch())
            if chunk:
                yield chunk
            if pause is None:
                return
            await asyncio.sleep(pause)


# ------------------------------------------------------------------------------ WebSocket

#: The consumer's URL pattern (agentgit_site/asgi.py), as the access log and metrics name it.
ROUTE = "ws/repos/<str:repo>/events"

#: WebSocket close codes: 4000 + the HTTP status the same refusal gets over HTTP.
CLOSE_CODES = {"invalid": 4400, "unauthenticated": 4401, "forbidden": 4403, "not_found": 4404, "rate_limited": 4429}


class EventsConsumer(AsyncWebsocketConsumer):
    """``/ws/repos/{repo}/events?after=N&token=T``: every event as ``{"id", "event", "data"}``.

    The token comes as ``?token=`` (browsers cannot set headers on a WebSocket) or in the
    ``Authorization: Bearer`` header; it needs the ``read`` scope. The feed is the SSE feed's
    (the same outbox, in ``seq`` order, resumable with ``?after=``), without its time limit:
    it runs until the client goes away. A refusal accepts the socket and closes it at once with
    a code of :data:`CLOSE_CODES`.
    """

    async def connect(self) -> None:
        note(self.scope, route=ROUTE)
        try:
            repository_id, after = await database_sync_to_async(self._admit)()
        except ApiError as error:
            # Accept, then close: a socket closed before accepting is refused with a bare HTTP
            # 403 during the handshake, and the client never learns why.
            await self.accept()
            await self.close(code=CLOSE_CODES.get(error.code, 4500))
            return
        await self.accept()
        self.feed = EventFeed(repository_id, after, timeout_s=float("inf"))
        self.task = asyncio.ensure_future(self._stream())

    async def disconnect(self, code: int) -> None:
        task = getattr(self, "task", None)
        if task is not None:
            task.cancel()

    def _admit(self) -> tuple[int, int]:
        query = parse_qs(self.scope.get("query_string", b"").decode())
        headers = dict(self.scope.get("headers", []))
        token = (query.get("token") or [""])[0]
        authorization = headers.get(b"authorization", b"").decode()
        if not token and authorization.lower().startswith("bearer "):
            token = authorization[7:].strip()
        if not token:
            raise Unauthenticated("a token is required (?token= or Authorization: Bearer)")
        credential = authenticate_token(token)
        note(self.scope, credential=credential)
        require_scope(credential, "read")
        ratelimit.take(credential)
        found = repository(self.scope["url_route"]["kwargs"]["repo"])
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
