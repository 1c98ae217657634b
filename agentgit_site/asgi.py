"""ASGI entry point, served by uvicorn (``make serve``): HTTP to Django, WebSockets to Channels.

Every connection passes the guards first (agentgit_site/guards.py), outermost first:
``LoadShedding`` (refuse beyond the requests in progress, before anything else is spent),
``Admit`` (the presented credential, passed down in the scope), then the surfaces: the hot-read
lane (repos/api/hot.py), git's smart HTTP (repos/git_http), ``BodyLimit`` (refuse an oversized
body before it is read), and the router to Django, MCP and the WebSocket feed.
"""

import gc
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentgit_site.settings")
django.setup(set_prefix=False)  # before importing anything that touches models

from agentgit_site.handler import SingleHopASGIHandler  # noqa: E402

django_application = SingleHopASGIHandler()

import pygit2  # noqa: E402, F401  (the disk store's, imported on its first use otherwise)
from django.urls import get_resolver  # noqa: E402

# Import every view (and what they import: the engine, DRF's serializers) and libgit2 now, while
# the process starts, rather than in its first requests: a new server's first seconds under
# load went a tenth to imports (docs/adr/0013).
get_resolver().url_patterns  # noqa: B018

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from agentgit_site.guards import Admit, BodyLimit, LoadShedding  # noqa: E402
from agentgit_site.mcp import McpEndpoint, with_mcp  # noqa: E402
from agentgit_site.observability import AccessLog  # noqa: E402
from repos.api import events  # noqa: E402
from repos.api.hot import HotReads  # noqa: E402
from repos.git_http.app import GitHttp  # noqa: E402

# The agent tools over MCP at /mcp (agentgit_site/mcp.py), behind the same guards as Django.
mcp_endpoint = McpEndpoint()

# The access log (and request metrics) outermost: it sees every answer, refusals included.
# Then the guards: shedding refuses before any work, and Admit reads the presented credential
# once for every surface behind it (docs/adr/0004). The hot-read lane answers plain GETs of one
# resource without Django's request cycle, and hands everything else on (repos/api/hot.py).
# Git's smart HTTP at /git/ streams packs both ways with its own push limit, so it sits in front
# of the body limit.
application = AccessLog(
    LoadShedding(
        Admit(
            HotReads(
                GitHttp(
                    BodyLimit(
                        ProtocolTypeRouter(
                            {
                                "http": with_mcp(mcp_endpoint, django_application),
                                "websocket": URLRouter([path(events.ROUTE, events.EventsConsumer.as_asgi())]),
                                "lifespan": mcp_endpoint.lifespan,
                            }
                        )
                    )
                )
            )
        )
    )
)

# What the process has made by now (modules, views, the URL resolver, the MCP server) lives as
# long as it does: frozen out of the garbage collector's sight, so that every full collection
# does not traverse its ~180 000 objects again. In one process, the collections' share of a
# stream read went from 130-220 to ~60 us (docs/adr/0013).
gc.freeze()
