"""The live activity feed of the web UI: Server-Sent Events behind the browser's session.

EventSource cannot send a bearer token, so the page's script reads this endpoint instead of the
API's, with the session cookie; the repository page's access rules apply (anonymous: log in; no
access: 404). The stream itself is the API's: the outbox read in ``seq`` order, resumable with
``Last-Event-ID`` or ``?after=``, ended after a while so that the browser reconnects and the
access check runs again.

The stream is the API feed's: this process's relay (``repos.services.relay``) under ASGI.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse
from django.views.decorators.http import require_safe

from repos.services.events import check_resumable, resume_after
from repos.services.relay import Filter, polled, relayed, release_connection

from .pages import repository_page

#: Seconds one connection streams before the browser reconnects (and access is checked again).
TIMEOUT_S = 25.0


@require_safe
@repository_page
def activity_events(request: HttpRequest, repository) -> StreamingHttpResponse:
    after = resume_after(request.headers.get("Last-Event-ID"), request.GET.get("after"))
    check_resumable(repository, after)
    if isinstance(request, ASGIRequest):
        chunks: Iterator[bytes] | AsyncIterator[bytes] = relayed(repository.pk, after, Filter(), TIMEOUT_S)
        release_connection()  # the stream reads through the relay, seldom: no connection held
    else:
        chunks = polled(repository.pk, after, Filter(), TIMEOUT_S)
    response = StreamingHttpResponse(chunks, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
