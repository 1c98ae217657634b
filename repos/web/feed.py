"""The live activity feed of the web UI: Server-Sent Events behind the browser's session.

EventSource cannot send a bearer token, so the page's script reads this endpoint instead of the
API's, with the session cookie; the repository page's access rules apply (anonymous: log in; no
access: 404). The stream itself is the API's: the outbox read in ``seq`` order, resumable with
``Last-Event-ID`` or ``?after=``, ended after a while so that the browser reconnects and the
access check runs again.

The stream is the outbox reader the API's feed uses (``repos.services.events.EventFeed``).
"""

from __future__ import annotations

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse
from django.views.decorators.http import require_safe

from repos.services.events import EventFeed

from ..errors import Invalid
from .pages import repository_page

#: Seconds one connection streams before the browser reconnects (and access is checked again).
TIMEOUT_S = 25.0


def resume_point(request: HttpRequest) -> int:
    """The last event id the browser has: ``Last-Event-ID`` (sent on reconnect) or ``?after=``."""
    raw = request.headers.get("Last-Event-ID") or request.GET.get("after") or "0"
    if not raw.isdigit():
        raise Invalid(f"an event id is a whole number, not {raw!r}")
    return int(raw)


@require_safe
@repository_page
def activity_events(request: HttpRequest, repository) -> StreamingHttpResponse:
    feed = EventFeed(repository.pk, resume_point(request), TIMEOUT_S)
    chunks = feed.asynchronous() if isinstance(request, ASGIRequest) else feed.synchronous()
    response = StreamingHttpResponse(chunks, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
