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
from repos.api.events import EventsConsumer  # noqa: E402
from repos.git_http.app import GitHttp  # noqa: E402

application = ProtocolTypeRouter(
    {
        # /git/ streams packs both ways with its own push limit: in front of the body limit,
        # behind load shedding.
        "http": LoadShedding(GitHttp(BodyLimit(django_application))),
        "websocket": URLRouter([path("ws/repos/<str:repo>/events", EventsConsumer.as_asgi())]),
    }
)
