"""ASGI entry point, served by uvicorn (``make serve``): HTTP to Django, WebSockets to Channels."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentgit_site.settings")
django.setup(set_prefix=False)  # before importing anything that touches models

from agentgit_site.handler import SingleHopASGIHandler  # noqa: E402

django_application = SingleHopASGIHandler()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from agentgit_site.guards import BodyLimit, LoadShedding  # noqa: E402
from agentgit_site.observability import AccessLog  # noqa: E402
from repos.api import events  # noqa: E402

# The access log (and request metrics) outermost: it sees every answer, refusals included.
application = AccessLog(
    ProtocolTypeRouter(
        {
            "http": LoadShedding(BodyLimit(django_application)),
            "websocket": URLRouter([path(events.ROUTE, events.EventsConsumer.as_asgi())]),
        }
    )
)
