"""SQLite, with write transactions that queue instead of sleeping.

SQLite has one writer at a time. A connection that finds the write lock taken waits in SQLite's
busy handler, which sleeps 1, 2, 5, 10, 15, 20, 25, … ms between tries and does not notice the
lock being released in between: with many concurrent writers (agents landing changes), most of
the time went to those sleeps while the database sat idle. Here every write transaction first
takes a lock that wakes the next waiter the moment it is released — a thread lock for the
threads of this process, then an ``flock`` on a file beside the database for the other server
processes — and only then ``BEGIN IMMEDIATE``, which then finds SQLite's lock free.

``ENGINE: "agentgit_site.sqlite"``; everything else is Django's SQLite backend.
"""

from __future__ import annotations

import fcntl
import os
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


_locks: dict[str, _WriterLock] = {}
_locks_guard = threading.Lock()


def _writer_lock(database: str) -> _WriterLock:
    path = os.path.abspath(database) + ".writer-lock"
    with _locks_guard:
        lock = _locks.get(path)
        if lock is None:
            lock = _locks[path] = _WriterLock(path)
        return lock


class DatabaseWrapper(base.DatabaseWrapper):
    _holds_writer_lock = False

    def _writer(self) -> _WriterLock | None:
        name = str(self.settings_dict["NAME"])
        return None if self.is_in_memory_db() else _writer_lock(name)

    def _start_transaction_under_autocommit(self) -> None:
        lock = self._writer()
        if lock is None:
            return super()._start_transaction_under_autocommit()
        lock.acquire(float(self.settings_dict.get("OPTIONS", {}).get("timeout", _DEFAULT_TIMEOUT_S)))
        self._holds_writer_lock = True
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._release_writer_lock()
            raise

    def _release_writer_lock(self) -> None:
        if self._holds_writer_lock:
            self._holds_writer_lock = False
            self._writer().release()

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
