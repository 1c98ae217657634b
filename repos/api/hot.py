"""The hot-read lane: plain GETs of one resource answered before Django's request cycle.

Agents poll a stream's head before they land, and a proposal or an operation while they wait.
Through Django each such read cost one server process ~1.6-1.9 ms of CPU, of which the read
itself (the credential, the bucket, one indexed row, its JSON) is ~0.4 ms: the rest is the
request cycle around it — Django's ASGI handler and request object, a dozen middleware, DRF's
request, negotiation and response (docs/adr/0013, "the hot-read lane").

:class:`HotReads` is ASGI middleware that answers such a GET itself when everything about it
is plain: method GET, no query string, no body, a credential presented in a header, a host
Django accepts, and a URL that Django resolves to a view with a ``read`` (:class:`.base.ApiView`).
It then does what the view would, with the same functions and in the same order: admits the
request's Admission for the method's scope and the URL's repository (:func:`.permissions.admit`,
with :func:`.permissions.required_scope`), calls the view's ``read`` with the URL's arguments, and
renders the data with DRF's JSON renderer under the headers Django's middleware would add.

Every other case — any refusal or error (401, 403, 404, 429, a database error), a query, a
HEAD, a body — goes on to Django unchanged, which answers it as always: errors keep their one
table and their one shape. A request handed on keeps its Admission, which authenticates,
charges the bucket and refuses at most once per request, so Django asking again costs no second
lookup and no second token. tests/api/test_hot_reads.py holds both lanes to the same statuses,
bodies and headers. ``AGENTGIT_HOT_READS=0`` turns the lane off.

On SQLite a read's rendered answer is kept while the database is unchanged (``PRAGMA
data_version``, docs/adr/0027); a request for a kept answer that is admitted without waiting
(a credential kept in memory, a token from the mapped bucket) is answered on the event loop,
without the hop to the lane's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import connections
from django.db.backends.sqlite3.creation import DatabaseCreation
from django.dispatch import receiver
from django.http import HttpRequest
from django.http.request import split_domain_port, validate_host
from django.urls import Resolver404, resolve
from rest_framework.renderers import JSONRenderer

from agentgit_site.observability import note
from repos.services.admission import SCOPE_KEY, Admission
from repos.services.credentials import reaches
from repos.web.security import POLICY

from .permissions import admit, required_scope

_PREFIX = "/api/v1/repos/"
_RENDERER = JSONRenderer()


class _Target:
    """A URL that resolves to a view with a ``read``: what answering it needs."""

    __slots__ = ("read", "kwargs", "route", "scope", "headers", "kept")

    def __init__(self, view_class: Any, kwargs: dict[str, Any], route: str) -> None:
        self.read = view_class.read
        self.kwargs = kwargs
        self.route = route
        self.scope = required_scope("GET", view_class)
        self.headers = _headers_of(view_class)
        #: ``(watching connection, data_version, body)`` of the last answer kept (see :func:`_body`).
        self.kept: tuple[sqlite3.Connection, int, bytes] | None = None


@functools.lru_cache(maxsize=4096)
def _target(path: str) -> _Target | None:
    """The hot target of an API path, or None (Django resolves it, once per distinct path)."""
    try:
        match = resolve(path)
    except Resolver404:
        return None
    view_class = getattr(match.func, "view_class", None)
    if getattr(view_class, "read", None) is None:
        return None
    return _Target(view_class, match.kwargs, match.route)


@functools.cache
def _headers_of(view_class: Any) -> tuple[tuple[bytes, bytes], ...]:
    """The headers of a 200 from ``view_class`` but its length, in the order Django sends them:
    DRF's (the type and ``Allow``), then its middleware's for a plain-HTTP request
    (X-Frame-Options, our Content-Security-Policy, Django's SecurityMiddleware)."""
    headers = [
        ("content-type", _RENDERER.media_type),
        ("allow", ", ".join(_set_up(view_class).allowed_methods)),
        ("x-frame-options", settings.X_FRAME_OPTIONS.upper()),
        ("content-security-policy", POLICY),
    ]
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        headers.append(("x-content-type-options", "nosniff"))
    if settings.SECURE_REFERRER_POLICY:
        headers.append(("referrer-policy", settings.SECURE_REFERRER_POLICY))
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        headers.append(("cross-origin-opener-policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY))
    return tuple((name.encode("latin-1"), value.encode("latin-1")) for name, value in headers)


def _set_up(view_class: Any) -> Any:
    """An instance as Django sets one up for a request (``setup`` gives it ``head``)."""
    view = view_class()
    view.setup(HttpRequest())
    return view


@functools.cache
def _enabled() -> bool:
    """On, unless off, or unless Django's middleware would answer by the request's transport
    (an HTTPS redirect, HSTS on secure requests, a proxy's forwarded host or scheme), which the
    lane does not look at. Decided once per settings (every request asked it: 5 settings reads)."""
    return bool(
        settings.AGENTGIT["HOT_READS"]
        and not settings.SECURE_SSL_REDIRECT
        and not settings.SECURE_HSTS_SECONDS
        and not settings.SECURE_PROXY_SSL_HEADER
        and not settings.USE_X_FORWARDED_HOST
    )


@functools.lru_cache(maxsize=256)
def _host_allowed(host: bytes | None) -> bool:
    """Whether Django's ``get_host`` would accept the Host header (CommonMiddleware asks it of
    every request, and answers 400 otherwise). Decided once per Host value and settings."""
    if not host:
        return False
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    domain, _port = split_domain_port(host.decode("latin-1"))
    return bool(domain) and validate_host(domain, allowed)


@functools.cache
def _keeping() -> bool:
    """Whether answers are kept while the database is unchanged (:func:`_database_version`)."""
    return bool(settings.AGENTGIT["HOT_READ_CACHE"])


@receiver(setting_changed)
def _settings_changed(**_signal: Any) -> None:
    """Settings changed (tests override them): decide again, and keep no answer rendered under
    the old ones (a time zone changes how a datetime reads)."""
    _enabled.cache_clear()
    _host_allowed.cache_clear()
    _keeping.cache_clear()
    _watched_file.cache_clear()
    _target.cache_clear()


def _plain_target(scope: dict) -> _Target | None:
    """The target of a plain GET of a resource with a ``read``; None for anything else."""
    if scope["type"] != "http" or scope["method"] != "GET" or scope.get("query_string"):
        return None
    path = scope["path"]
    if not path.startswith(_PREFIX):
        return None
    admission = scope.get(SCOPE_KEY)
    if not isinstance(admission, Admission) or admission.scheme is None:
        return None  # nothing presented in a header: Django answers (a 401, or a session's read)
    host = None
    for name, value in scope["headers"]:
        if name == b"content-length" or name == b"transfer-encoding":
            return None
        if name == b"host":
            host = value
    if not _host_allowed(host) or not _enabled():
        return None
    return _target(path)


class HotReads:
    """ASGI middleware (agentgit_site/asgi.py, inside ``Admit``): answers plain GETs of a
    resource with a ``read``, and passes every other request on."""

    def __init__(self, app) -> None:
        self.app = app
        # The reads are blocking database calls (Django refuses them on the event loop): one
        # hop to a thread of the lane and back, where Django's cycle takes one hop as well. Few
        # threads: more of them only fight the event loop for the GIL (settings.py).
        self._threads = ReadThreads(max(1, settings.AGENTGIT["HOT_READ_THREADS"]))

    async def __call__(self, scope, receive, send) -> None:
        target = _plain_target(scope)
        if target is not None:
            version = _database_version()
            body = _kept_answer(scope, target, version)
            if body is None:
                body = await self._threads.run(_answer, scope, target, version)
            if body is not None:
                headers = [*target.headers, (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class ReadThreads:
    """A few threads taking reads from one queue, each result handed back to the event loop by
    one ``call_soon_threadsafe``. (``run_in_executor`` chains a concurrent future to an asyncio
    one through callbacks on both: 78 against 35 µs of CPU a hop here; docs/adr/0019.)"""

    def __init__(self, count: int) -> None:
        self._count = count
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._started_in: int | None = None  # the process whose threads serve the queue
        self._lock = threading.Lock()

    def run(self, function: Callable[..., Any], *args: Any) -> asyncio.Future:
        """A future of ``function(*args)``, run in one of the threads."""
        if self._started_in != os.getpid():
            self._start()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put((loop, future, function, args))
        return future

    def _start(self) -> None:
        with self._lock:
            if self._started_in != os.getpid():
                for index in range(self._count):
                    threading.Thread(target=self._serve, name=f"agentgit-hot-{index}", daemon=True).start()
                self._started_in = os.getpid()

    def _serve(self) -> None:
        while True:
            loop, future, function, args = self._queue.get()
            try:
                outcome: tuple[Any, BaseException | None] = (function(*args), None)
            except BaseException as error:  # handed to the awaiting request, as an executor does
                outcome = (None, error)
            with contextlib.suppress(RuntimeError):  # the loop closed: the server is stopping
                loop.call_soon_threadsafe(_settle, future, *outcome)


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():  # cancelled: the client went away
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _answer(scope: dict, target: _Target, version: _Version | None) -> bytes | None:
    """The 200's body, or None when anything but a 200 would be the answer (Django gives it).

    Outside Django's ``request_started`` and ``request_finished``, which would close the
    thread's database connection after every read and open it again for the next (on SQLite a
    pooled connection's set-up statements, ~0.2 ms a read here; docs/adr/0019): the lane's few
    threads keep one connection each, and close it after a read that left it in doubt.
    """
    try:
        admission: Admission = scope[SCOPE_KEY]
        try:
            credential = admit(admission, target.scope, target.kwargs)  # as the view's permission check does
            body = _body(target, version)
        except Exception:  # an API error or anything else: Django answers it, from its one table
            return None
    finally:
        _close_doubtful_connections()
    note(scope, route=target.route, credential=credential)
    return body


def _kept_answer(scope: dict, target: _Target, version: _Version | None) -> bytes | None:
    """On the event loop, without the hop: the kept body (:func:`_body`), if the database is
    unchanged since it was read and the request is admitted without waiting (a credential kept
    in memory with the scope, reaching the repository, a token from the mapped bucket:
    ``Admission.admitted_at_once``). None: the lane's thread answers, admitting as always."""
    kept = target.kept
    if version is None or kept is None or kept[0] is not version[0] or kept[1] != version[1]:
        return None
    credential = scope[SCOPE_KEY].admitted_at_once(target.scope)
    if credential is None:
        return None
    if "repo" in target.kwargs and not reaches(credential, target.kwargs["repo"]):
        return None  # admitted and charged: the thread's admit() refuses it, not charging again
    note(scope, route=target.route, credential=credential)
    return kept[2]


def _body(target: _Target, version: _Version | None) -> bytes:
    """The rendered answer of the target's ``read``: the one kept, while the database has not
    changed since it was read (:func:`_database_version`, read before this read's rows); else
    read now, and kept under ``version``.

    Admission has run already: what is kept is the resource, never who may read it. A read's
    answer is a function of rows only (no credential, no clock), so an unchanged database
    answers the same bytes.
    """
    kept = target.kept
    if version is not None and kept is not None and kept[0] is version[0] and kept[1] == version[1]:
        return kept[2]
    body = _RENDERER.render(target.read(**target.kwargs))
    if version is not None:
        target.kept = (*version, body)  # one tuple, swapped whole: other threads see old or new
    return body


#: A watching connection and its ``data_version``.
_Version = tuple[sqlite3.Connection, int]


class _Watcher:
    """The process's watching connection (one event loop a process; a lock for the others)."""

    lock = threading.Lock()
    connection: sqlite3.Connection | None = None
    name: str | None = None
    pid: int | None = None


def _database_version() -> _Version | None:
    """The process's watching connection to the SQLite database and its ``PRAGMA data_version``;
    None when answers are not kept. Read on the event loop, before the rows are (what is read
    after a commit is kept under the older version, which no later read matches).

    SQLite changes a connection's ``data_version`` whenever another connection, of this process
    or any other, committed to the database file since it last asked: a landing, a deleted
    repository, a changed policy, whatever wrote, is seen by the very next read of every
    process, with nothing to bump and nothing that can forget to. The watching connection never
    writes, so every commit changes what it reads, the lane's own ``last_used`` writes too; its
    values are its own, so a kept answer names it. Off for PostgreSQL (no such counter), an
    in-memory database (connections sharing one cache see one another's commits without it
    changing), and by ``AGENTGIT_HOT_READ_CACHE=0``.
    """
    name = _watched_file()
    if name is None:
        return None
    with _Watcher.lock:
        try:
            if _Watcher.connection is None or _Watcher.name != name or _Watcher.pid != os.getpid():
                _Watcher.connection = sqlite3.connect(name, isolation_level=None, timeout=0, check_same_thread=False)
                _Watcher.name, _Watcher.pid = name, os.getpid()
            return _Watcher.connection, _Watcher.connection.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error:  # nothing read, nothing kept: as if it were off, until it reopens
            _Watcher.connection = None
            return None


@functools.cache
def _watched_file() -> str | None:
    """The SQLite database file whose answers are kept; None when none are (once per settings)."""
    if not _keeping() or connections["default"].vendor != "sqlite":
        return None
    name = str(settings.DATABASES["default"]["NAME"])
    return None if DatabaseCreation.is_in_memory_db(name) else name


def _close_doubtful_connections() -> None:
    """Close this thread's connections that saw a database error or are left in a transaction
    (what Django's request signals would find unusable); the others serve the next read."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None and (
            connection.errors_occurred or connection.in_atomic_block or not connection.get_autocommit()
        ):
            connection.close()
