"""Django under ASGI, with a request's synchronous work run in one thread hop, on a thread that
outlives the request.

Django's ASGI handler runs an asynchronous middleware chain. Our middleware (Django's own) are
``MiddlewareMixin`` classes, which under an asynchronous chain call each ``process_request`` and
``process_response`` through ``sync_to_async``: about a dozen hops between the event loop and the
request's thread per request, each 100–250 µs on this kind of machine, for an API whose views
are synchronous anyway. This handler builds the chain synchronously, as under WSGI, and runs
in the request's thread, with a single ``sync_to_async``: the ``request_started`` signal, chain
and view, and — for a response that is all there, not streamed — its ``close()`` (the
``request_finished`` signal, which gives the request's database connections back). Django's
own handler spends a hop on each of the three. Everything else — reading the body, streaming
responses (the event feed's asynchronous iterator, closed after its last part), disconnects —
stays Django's ASGI handling.

Each request's synchronous work runs on one thread of its own (so a request waiting for its
integration does not hold up the others, and the request's database connection stays in one
thread). Django makes that thread per request: a new one-thread executor, started on the first
hop and joined, from yet another new thread, at the end: two thread starts and a join, which
were the largest cost of a request (docs/adr/0013). Here the request borrows an idle thread
from :class:`RequestThreads` instead and gives it back when it is done, as a WSGI server's
thread pool would; Django's ``request_finished`` has closed the request's connections by then.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from asgiref.sync import SyncToAsync, ThreadSensitiveContext, sync_to_async
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import HttpRequest, HttpResponseBase
from django.urls import set_script_prefix


class RequestThread(ThreadPoolExecutor):
    """One thread that runs one request's synchronous work at a time."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="agentgit-request")
        self._last: Future | None = None

    def submit(self, fn, /, *args, **kwargs) -> Future:
        self._last = future = super().submit(fn, *args, **kwargs)
        return future

    @property
    def idle(self) -> bool:
        """Everything submitted has run (one worker runs them in order: the last one is the latest)."""
        last = self._last
        return last is None or last.done()


class RequestThreads:
    """Idle request threads, lent to one request at a time.

    At most ``keep`` idle threads are kept (more than that many requests at once start new
    ones, which end when given back). A thread given back while it is still running something
    — a request abandoned mid-view — is not lent again: it ends once its work does.
    """

    def __init__(self, keep: int = 64) -> None:
        self.keep = keep
        self._idle: list[RequestThread] = []
        self._lock = threading.Lock()  # lent and given back on the event loop; locked anyway, it is cheap

    def lend(self) -> RequestThread:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return RequestThread()

    def give_back(self, thread: RequestThread) -> None:
        if thread.idle:
            with self._lock:
                if len(self._idle) < self.keep:
                    self._idle.append(thread)
                    return
        thread.shutdown(wait=False)


class _RequestContext(ThreadSensitiveContext):
    """Django's per-request context, with a borrowed thread instead of a new one.

    Every thread-sensitive call of the request (ours and Django's) runs on ``thread`` while the
    request lasts. A task started during the request that outlives it (the event relay's
    listener, started by the first subscriber) then gets a thread of its own on its next call,
    as under Django's handler — not asgiref's ``ThreadSensitiveContext(executor=…)``, which
    refuses such calls, nor the borrowed thread, lent to other requests by then.
    """

    def __init__(self, thread: RequestThread) -> None:
        super().__init__()
        self._thread = thread

    async def __aenter__(self):
        await super().__aenter__()
        if self.token is not None:  # the outermost context: this request's
            SyncToAsync.context_to_thread_executor[self] = self._thread
        return self

    async def __aexit__(self, exc, value, tb):
        if SyncToAsync.context_to_thread_executor.get(self) is self._thread:
            del SyncToAsync.context_to_thread_executor[self]  # given back, not shut down
        await super().__aexit__(exc, value, tb)


class SingleHopASGIHandler(ASGIHandler):
    def __init__(self) -> None:
        super().__init__()
        self.threads = RequestThreads()
        # Made once, as a decorator is: SyncToAsync's constructor inspects and wraps the function
        # (9 us alone; 3 % of a read's server samples under load when made per request).
        self._respond_in_thread = sync_to_async(self._respond, thread_sensitive=True)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        thread = self.threads.lend()
        try:
            async with _RequestContext(thread):
                await self.handle(scope, receive, send)
        finally:
            self.threads.give_back(thread)

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def handle(self, scope, receive, send):
        """Django's ``ASGIHandler.handle`` (5.2), with ``request_started`` and, for a response
        that is not streamed, ``close()`` moved into the request's one hop (:meth:`_respond`)."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            body_file.close()
            await self.send_response(error_response, send)
            await sync_to_async(error_response.close)()
            return

        async def process_request(request, send):
            response = await self.run_get_response(request)
            with contextlib.suppress(asyncio.CancelledError):  # the client went away meanwhile
                await self.send_response(response, send)
            return response

        # Answer, or stop on a disconnect (listen_for_disconnect first: it raises nothing
        # unexpected that would keep process_request from being cancelled).
        tasks = [
            asyncio.create_task(self.listen_for_disconnect(receive)),
            asyncio.create_task(process_request(request, send)),
        ]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done():
                try:
                    task.result()
                except RequestAborted:
                    pass
                except AssertionError:
                    body_file.close()
                    raise
            else:
                task.cancel()  # lets views handle cancellation
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        try:
            response = tasks[1].result()
        except asyncio.CancelledError:
            await signals.request_finished.asend(sender=self.__class__)
        else:
            if response.streaming:  # the others were closed in their hop
                await sync_to_async(response.close)()
        body_file.close()

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        return await self._respond_in_thread(request)

    def _respond(self, request: HttpRequest) -> HttpResponseBase:
        scope = request.scope  # type: ignore[attr-defined]  # an ASGIRequest: this handler made it
        signals.request_started.send(sender=self.__class__, scope=scope)
        response = self.get_response(request)
        if not response.streaming:
            # request_finished: the request's database connections are given back, in the
            # thread that used them. The body is all in memory already.
            response.close()
        return response
