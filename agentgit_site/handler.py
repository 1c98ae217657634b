"""Django under ASGI, with the middleware chain and the view run in one thread hop.

Django's ASGI handler runs an asynchronous middleware chain. Our middleware (Django's own) are
``MiddlewareMixin`` classes, which under an asynchronous chain call each ``process_request`` and
``process_response`` through ``sync_to_async``: about a dozen hops between the event loop and the
request's thread per request, each 100–250 µs on this kind of machine, for an API whose views
are synchronous anyway. This handler builds the chain synchronously, as under WSGI, and runs
chain and view together in the request's thread with a single ``sync_to_async``. Everything
else — reading the body, streaming responses (the event feed's asynchronous iterator),
disconnects — stays Django's ASGI handling.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler


class SingleHopASGIHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def get_response_async(self, request):
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)
