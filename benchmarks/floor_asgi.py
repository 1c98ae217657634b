"""The floor of ``agentgit_bench load``'s ``reads``: an ASGI application that does no work.

It answers every HTTP request with a fixed stream head in JSON, served by the same ``uvicorn``
command line, process count and ``wrk`` script as the server. What the server's reads reach of
its throughput is what our own request path leaves of uvicorn's and the loopback's (issue 25:
``reads`` at least 20 % of it, in one run). No Django, no database.
"""

from __future__ import annotations

BODY = b'{"name":"main","head":"0000000000000000000000000000000000000000","created":"2026-01-01T00:00:00Z"}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def application(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})
