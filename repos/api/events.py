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
import time
from collections.abc import AsyncIterator, Iterator
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from agentgit_site.observability import note

from ..errors import CLOSE_TOO_FAR_BEHIND, ERRORS, Invalid, Unauthenticated
from ..services import metrics
from ..services.admission import SCOPE_KEY
from ..services.events import Message, check_resumable, events_after, wire
from ..services.relay import BATCH, Filter, TooFarBehind, relay, release_connection
from . import serializers as s
from .base import ApiView, query_number, repository
from .errors import answer_for

logger = logging.getLogger("repos.api")

POLL_S = 0.1
KEEPALIVE_S = 15.0
DEFAULT_TIMEOUT_S = 25.0
MAX_TIMEOUT_S = 300.0
KEEPALIVE = b": keep-alive\n\n"
#: The event kinds and stream names a filter may name.
_NAME = re.compile(r"[A-Za-z0-9._/-]{1,200}")

FILTER_PARAMETERS = [
    OpenApiParameter(
        "kinds",
        str,
        description="Only these kinds, comma-separated (e.g. `stream.integrate,proposal.conflict`); default all.",
    ),
    OpenApiParameter("stream", str, description="Only events about this stream (e.g. `main`); default all."),
]


@extend_schema(tags=["events"])
class EventsView(ApiView):
    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="Resume after this event id (the Last-Event-ID header wins)."),
            *FILTER_PARAMETERS,
            OpenApiParameter(
                "timeout",
                float,
                description=f"Seconds until the stream ends (default {DEFAULT_TIMEOUT_S:g}, max {MAX_TIMEOUT_S:g}).",
            ),
            OpenApiParameter("Last-Event-ID", int, location=OpenApiParameter.HEADER),
        ],
        responses={
            (200, "text/event-stream"): OpenApiResponse(
                OpenApiTypes.STR,
                description="`id: <seq>`, `event: <kind>`, `data: <JSON>` per event; `: keep-alive` comments; "
                "`: too far behind; resume after N` then the end, for a subscriber that reads too slowly. "
                "400 `invalid` with `details[0].first_available` when the events after the resume id were pruned.",
            ),
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
    """The last event id the client has: ``Last-Event-ID`` or ``?after=``; 0 when neither."""
    return event_id(request.headers.get("Last-Event-ID") or request.query_params.get("after") or "0")


def event_id(raw: str) -> int:
    try:
        after = int(raw)
    except ValueError:
        raise Invalid(f"an event id is a whole number, not {raw!r}") from None
    if after < 0:
        raise Invalid(f"an event id is not negative: {after}")
    return after


def event_filter(kinds: str | None, stream: str | None) -> Filter:
    """``?kinds=`` (comma-separated) and ``?stream=`` as a :class:`Filter`; 400 when malformed."""
    names = frozenset(kind.strip() for kind in (kinds or "").split(",") if kind.strip())
    for name in [*names, *([stream] if stream else [])]:
        if not _NAME.fullmatch(name):
            raise Invalid(f"not an event kind or stream name: {name!r}")
    return Filter(kinds=names, stream=stream or None)


def encode(message: Message) -> bytes:
    """One event in the SSE wire format."""
    text = json.dumps(message["data"], separators=(",", ":"), default=str)
    return f"id: {message['id']}\nevent: {message['event']}\ndata: {text}\n\n".encode()


def as_json(message: Message) -> str:
    """One event as the WebSocket sends it."""
    return json.dumps(message, separators=(",", ":"), default=str)


async def relayed(repository_id: int, after: int, wants: Filter, timeout_s: float) -> AsyncIterator[bytes]:
    """The SSE stream under ASGI: from this process's relay until ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    subscription = await relay().subscribe(repository_id, after, wants)
    try:
        while (left := deadline - time.monotonic()) > 0:
            messages = await subscription.next(min(KEEPALIVE_S, left))
            if messages:
                yield b"".join(subscription.encoded(message, encode) for message in messages)
            elif deadline - time.monotonic() > 0:
                yield KEEPALIVE
    except TooFarBehind as behind:
        yield f": too far behind; resume after {behind.resume_id}\n\n".encode()
    finally:
        subscription.close()


def polled(repository_id: int, after: int, wants: Filter, timeout_s: float) -> Iterator[bytes]:
    """The SSE stream under WSGI (and Django's test client), which has no event loop for a
    relay: the outbox, read every ``POLL_S`` until ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    quiet_since = time.monotonic()
    while True:
        rows = events_after(repository_id, after, BATCH)
        messages = [wire(event) for event in rows]
        if messages:
            metrics.observe_relayed(event.created for event in rows)  # the poll is this feed's relay
            after = messages[-1]["id"]
            wanted = [message for message in messages if wants(message)]
            if wanted:
                quiet_since = time.monotonic()
                yield b"".join(encode(message) for message in wanted)
            continue
        now = time.monotonic()
        if now >= deadline:
            return
        if now - quiet_since >= KEEPALIVE_S:
            quiet_since = now
            yield KEEPALIVE
        time.sleep(min(POLL_S, deadline - now))


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
            note(self.scope, credential=admission.admit("read"))
            found = repository(self.scope["url_route"]["kwargs"]["repo"])
            query = {key: values[0] for key, values in parse_qs(self.scope.get("query_string", b"").decode()).items()}
            after = event_id(query.get("after", "0"))
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
