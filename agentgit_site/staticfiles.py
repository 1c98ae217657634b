"""Static files (the admin's CSS and scripts), served by WhiteNoise from a middleware that fits
either kind of middleware chain.

WhiteNoise's own middleware is synchronous only, and in an asynchronous chain Django hops
threads around it on every request, API requests included. This one is both: in the synchronous
chain the server builds (agentgit_site/handler.py) it is a plain function call, and in an
asynchronous chain it awaits the next middleware and serves files from a worker thread. Requests
outside ``STATIC_URL`` pass straight through either way.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from whitenoise.middleware import WhiteNoiseMiddleware


class StaticFilesMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        # Used for its index of files and its responses only; it never calls a get_response.
        self._whitenoise = WhiteNoiseMiddleware(get_response=None)
        self._prefix = self._whitenoise.static_prefix
        self._async = iscoroutinefunction(get_response)
        if self._async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self._async:
            return self._acall(request)
        if request.path_info.startswith(self._prefix):
            response = self._serve(request)
            if response is not None:
                return response
        return self.get_response(request)

    async def _acall(self, request):
        if request.path_info.startswith(self._prefix):
            response = await sync_to_async(self._serve, thread_sensitive=False)(request)
            if response is not None:
                return response
        return await self.get_response(request)

    def _serve(self, request):
        whitenoise = self._whitenoise
        if whitenoise.autorefresh:  # DEBUG: look on disk every time
            static_file = whitenoise.find_file(request.path_info)
        else:
            static_file = whitenoise.files.get(request.path_info)
        return None if static_file is None else whitenoise.serve(static_file, request)
