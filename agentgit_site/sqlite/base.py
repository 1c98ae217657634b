"""SQLite, with write transactions that queue instead of sleeping, and pooled connections.

SQLite has one writer at a time. A connection that finds the write lock taken waits in SQLite's
busy handler, which sleeps 1, 2, 5, 10, 15, 20, 25, … ms between tries and does not notice the
lock being released in between: with many concurrent writers (agents landing changes), most of
the time went to those sleeps while the database sat idle. Here every write transaction first
takes a lock that wakes the next waiter the moment it is released — a thread lock for the
threads of this process, then an ``flock`` on a file beside the database for the other server
processes — and only then ``BEGIN IMMEDIATE``, which then finds SQLite's lock free.

Connections are pooled per database file. Under ASGI every request has a context (and a thread)
of its own, so Django opens a connection per request — and a new SQLite connection costs a file
open, Django's 30-odd SQL functions registered and the PRAGMAs run, about a millisecond here.
A connection that is closed outside a transaction goes back to the pool instead, for the next
request.

Queries are translated from Django's ``%s`` placeholders to SQLite's ``?`` once per distinct
SQL text, not on every execution: Django's backend runs a look-behind regular expression over
the whole statement each time, 60 µs for the credential lookup every request makes — more than
running the query (docs/adr/0013).

``ENGINE: "agentgit_site.sqlite"``; everything else is Django's SQLite backend.
"""

from __future__ import annotations

import fcntl
import functools
import os
import queue
import threading

from django.db import OperationalError
from django.db.backends.sqlite3 import base

#: The longest a transaction waits for the write lock: SQLite's own busy timeout (OPTIONS["timeout"]).
_DEFAULT_TIMEOUT_S = 5.0


class _WriterLock:
    """One writer at a time across the threads and processes that open one database file."""

    def __init__(self, path: str) -> None:
        self._threads = threading.Lock()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    def acquire(self, timeout_s: float) -> None:
        if not self._threads.acquire(timeout=timeout_s):
            raise OperationalError("database is locked (waited for this process's other writers)")
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)  # released by the kernel if the holder dies
        except BaseException:
            self._threads.release()
            raise

    def release(self) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()


#: Idle connections kept per database file: more than this many are closed.
POOL_SIZE = 32

_pools: dict[str, queue.LifoQueue] = {}
_locks: dict[str, _WriterLock] = {}
_locks_guard = threading.Lock()


def _writer_lock(database: str) -> _WriterLock:
    path = os.path.abspath(database) + ".writer-lock"
    with _locks_guard:
        lock = _locks.get(path)
        if lock is None:
            lock = _locks[path] = _WriterLock(path)
        return lock


def _forget_after_fork() -> None:
    """A forked child (a Celery prefork worker) must not use its parent's SQLite connections or
    share its lock file descriptions; it opens its own. The inherited ones are kept, unused, so
    that garbage collection does not close them under the parent."""
    _inherited.append((dict(_pools), dict(_locks)))
    _pools.clear()
    _locks.clear()


_inherited: list = []
os.register_at_fork(after_in_child=_forget_after_fork)


def _pool(database: str) -> queue.LifoQueue:
    path = os.path.abspath(database)
    pool = _pools.get(path)
    if pool is None:  # not setdefault: it made a LifoQueue (three Conditions) per call, twice a request
        with _locks_guard:
            pool = _pools.get(path)
            if pool is None:
                pool = _pools[path] = queue.LifoQueue()  # the most recently used first
    return pool


@functools.lru_cache(maxsize=4096)
def _qmark(query: str) -> str:
    """Django's "format" placeholders as SQLite's "qmark" ones (what Django's backend does)."""
    return base.FORMAT_QMARK_REGEX.sub("?", query).replace("%%", "%")


class CursorWrapper(base.SQLiteCursorWrapper):
    def convert_query(self, query, *, param_names=None):
        if param_names is None:
            return _qmark(query)
        return super().convert_query(query, param_names=param_names)


class DatabaseWrapper(base.DatabaseWrapper):
    _holds_writer_lock = False

    def create_cursor(self, name=None):
        return self.connection.cursor(factory=CursorWrapper)

    def get_new_connection(self, conn_params):
        if not self.is_in_memory_db():
            try:
                return _pool(str(self.settings_dict["NAME"])).get_nowait()
            except queue.Empty:
                pass
        return super().get_new_connection(conn_params)

    def _close(self) -> None:
        connection = self.connection
        if connection is not None and not self.is_in_memory_db() and not connection.in_transaction:
            pool = _pool(str(self.settings_dict["NAME"]))
            if pool.qsize() < POOL_SIZE:
                pool.put(connection)  # as good as new: no transaction, the same settings
                return None
        return super()._close()  # type: ignore[misc]  # private to Django: not in its stubs

    def _writer(self) -> _WriterLock | None:
        name = str(self.settings_dict["NAME"])
        return None if self.is_in_memory_db() else _writer_lock(name)

    def _start_transaction_under_autocommit(self) -> None:
        lock = self._writer()
        if lock is None:
            return super()._start_transaction_under_autocommit()  # type: ignore[misc]  # as _close
        lock.acquire(float(self.settings_dict.get("OPTIONS", {}).get("timeout", _DEFAULT_TIMEOUT_S)))
        self._holds_writer_lock = True
        try:
            super()._start_transaction_under_autocommit()  # type: ignore[misc]
        except BaseException:
            self._release_writer_lock()
            raise

    def _release_writer_lock(self) -> None:
        if self._holds_writer_lock:
            self._holds_writer_lock = False
            lock = self._writer()
            if lock is not None:  # it was, or nothing would be held
                lock.release()

    def commit(self) -> None:
        try:
            super().commit()
        finally:
            self._release_writer_lock()

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            self._release_writer_lock()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._release_writer_lock()
