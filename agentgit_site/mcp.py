"""``/mcp``: the agent tools (``agentgit.mcp_server``) over MCP's streamable HTTP, mounted in the
server's ASGI application beside Django.

* **Authentication**: the same tokens as the REST API, read once by the admission middleware
  (agentgit_site.guards.Admit) and checked in :func:`authenticate`; a request without a live token with ``read`` is
  answered 401 in the API's error shape before MCP sees it. Each tool then checks the scope its
  REST endpoint needs (``repos.api.mcp_backend``).
* **Stateless**: every HTTP request is a whole MCP exchange (no server-side session), so any
  server process can answer any request (``uvicorn --workers N``), and answers are JSON.
* **Lifespan**: the SDK's session manager must be running before it can answer. The parent
  application enters it: on ASGI lifespan startup when the server sends lifespan events, else on
  the first request (``make serve`` runs uvicorn with ``--lifespan off``), and leaves it on
  lifespan shutdown.
* **Allowed hosts**: the SDK's DNS-rebinding protection takes Django's ``ALLOWED_HOSTS``.
"""

from __future__ import annotations

import asyncio

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings

from agentgit.mcp_server import build_server
from agentgit_site.guards import answer
from agentgit_site.observability import note
from repos.api.mcp_backend import ServiceBackend
from repos.errors import ApiError, Unauthenticated
from repos.models import Credential
from repos.services.admission import BEARER_CHALLENGE, SCOPE_KEY, Admission

PATH = "/mcp"
#: Where the request's credential travels in the ASGI scope, to the tools.
CREDENTIAL = "agentgit.credential"


def _admit(admission: Admission) -> Credential:
    try:
        return admission.admit("read")
    finally:
        close_old_connections()


async def authenticate(scope: dict) -> Credential:
    """The request's credential, read by the admission middleware (agentgit_site.guards.Admit),
    with ``read`` and its token taken; an ApiError (unauthenticated, forbidden, rate_limited) if none."""
    admission = scope.get(SCOPE_KEY)
    if admission is None:  # mounted without the middleware: refuse rather than serve unchecked
        raise Unauthenticated("this server reads no credentials on this path")
    credential = await sync_to_async(_admit)(admission)
    note(scope, route=PATH, credential=credential)
    return credential


def transport_security() -> TransportSecuritySettings:
    """Django's ALLOWED_HOSTS as the SDK's allowed Host and Origin values (any port)."""
    hosts = [host.lstrip(".") for host in settings.ALLOWED_HOSTS]
    if "*" in hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(
        allowed_hosts=[pattern for host in hosts for pattern in (host, f"{host}:*")],
        allowed_origins=[
            f"{scheme}://{host}{port}" for host in hosts for scheme in ("http", "https") for port in ("", ":*")
        ],
    )


def backend_of(ctx: Context) -> ServiceBackend:
    """The tools' backend for a request: the services, for the credential that authenticated it."""
    request = ctx.request_context.request
    if request is None:  # not over HTTP: nothing authenticated it
        raise Unauthenticated("the AgentGit tools at /mcp need an HTTP request with a token")
    return ServiceBackend(request.scope[CREDENTIAL])


class McpEndpoint:
    """The ASGI application answering ``/mcp``; also the application's lifespan handler."""

    def __init__(self) -> None:
        self.server = build_server(backend_of, own_logging=False)  # the server's logging is settings.LOGGING's
        self.app = self.server.streamable_http_app(
            streamable_http_path=PATH, stateless_http=True, json_response=True, transport_security=transport_security()
        )
        self._ready: asyncio.Event | None = None
        self._stop = asyncio.Event()

    async def __call__(self, scope, receive, send) -> None:
        await self.start()
        try:
            credential = await authenticate(scope)
        except ApiError as error:
            await _refuse(send, error)
            return
        await self.app({**scope, CREDENTIAL: credential}, receive, send)

    async def start(self) -> None:
        """Enter the SDK's session manager (once per process) and wait until it runs."""
        if self._ready is None:
            self._ready = asyncio.Event()
            self._task = asyncio.ensure_future(self._run())
        await self._ready.wait()

    async def _run(self) -> None:
        async with self.server.session_manager.run():
            assert self._ready is not None
            self._ready.set()
            await self._stop.wait()

    async def lifespan(self, scope, receive, send) -> None:
        """ASGI lifespan: start with the server, stop with it."""
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self._stop.set()
                if self._ready is not None:
                    await self._task
                await send({"type": "lifespan.shutdown.complete"})
                return


def with_mcp(mcp: McpEndpoint, app):
    """``app``, with ``/mcp`` answered by ``mcp``."""

    async def route(scope, receive, send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == PATH or path.startswith(PATH + "/")):
            await mcp(scope, receive, send)
        else:
            await app(scope, receive, send)

    return route


async def _refuse(send, error: ApiError) -> None:
    headers = []
    if error.code == "unauthenticated":
        headers.append((b"www-authenticate", BEARER_CHALLENGE.encode()))
    if error.retry_after_ms is not None:
        headers.append((b"retry-after", str(max(0, -(-error.retry_after_ms // 1000))).encode()))
    await answer(send, error, headers)
