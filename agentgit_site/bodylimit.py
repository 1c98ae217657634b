"""Refuse request bodies over ``AGENTGIT["MAX_BODY_BYTES"]`` before Django reads them.

Under ASGI, Django receives a whole body (spooling it to disk) before any view can look at it,
so a 5 GiB upload would be stored in full only to be refused. This guard answers 413
``too_large`` at once when the declared ``Content-Length`` is over the limit, and stops a body
without one (chunked) as soon as it passes the limit. Views still check the size (the test client
and WSGI do not come through here).
"""

from __future__ import annotations

import json

from django.conf import settings

from repos.errors import TooLarge


class BodyLimit:
    """ASGI middleware around the HTTP application."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = settings.AGENTGIT["MAX_BODY_BYTES"]
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _refuse(send, f"the body is {int(declared)} bytes; the limit is {limit}")
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
    body = json.dumps(TooLarge(message).as_dict()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})
