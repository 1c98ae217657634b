"""ASGI entry point, served by uvicorn (``make serve``): HTTP to Django, WebSockets to Channels."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentgit_site.settings")
django_application = get_asgi_application()  # set up Django before importing consumers

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from agentgit_site.bodylimit import BodyLimit  # noqa: E402
from repos.api.events import EventsConsumer  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": BodyLimit(django_application),
        "websocket": URLRouter([path("ws/repos/<str:repo>/events", EventsConsumer.as_asgi())]),
    }
)
