"""Authenticated credentials kept in each process, valid while nothing about any credential changed.

Every API request presents a token, and looking it up was the largest part of a read: an
indexed SELECT of the credential and its user, four JSON fields and three datetimes decoded,
a user built (docs/performance.md, "Reads"). A revoked token must still be refused by the very
next request, in every server process. So a cached credential is used only while the
*credential generation* is the one it was read under: a counter that every change that can
narrow what a token may do increments — a revocation, any save or deletion of a credential or a
user (scopes, reach, rate, ``is_active``). Reading the counter is what a request pays instead
of the SELECT:

* **embedded** (SQLite, one machine): 8 bytes of a file in the data directory, mapped into
  every process (``credentials.generation``): a read is a memory load; an increment takes an
  ``flock``. The file is the one the server processes, ``manage.py`` commands and the admin
  share, since they share the data directory.
* **production with Redis** (``REDIS_URL``): the key ``agentgit:credentials:generation``, one
  ``GET`` per request (servers on several machines share it), ``INCR`` on a change.
* **PostgreSQL without Redis**: off. Server processes on several machines would not see each
  other's files; every request looks its token up.

Order (docs/adr/0019): a request reads the generation *before* it looks the token up, and keeps
what it found under that generation; a change increments the generation *after* its transaction
commits (and once more at once, for whoever reads in the same transaction). A request that read
the row before the change therefore kept it under the old generation, which no later request
accepts. A store that cannot be read (Redis down) turns the cache off for the request and drops
what the process holds; an entry is also dropped after ``AGENTGIT_CREDENTIAL_CACHE_SECONDS``
whatever the counter says, which bounds the harm of an increment lost with its store.
``AGENTGIT_CREDENTIAL_CACHE=0`` turns the cache off.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models.base import ModelState

from ..models import Credential
from .mapped import map_shared

logger = logging.getLogger(__name__)

#: The Redis key of the generation, shared by every server of a production deployment.
REDIS_KEY = "agentgit:credentials:generation"
#: The file of the generation in the data directory (embedded).
FILE_NAME = "credentials.generation"
#: The most credentials a process keeps; past it the cache starts again (tokens in use are few).
MAX_ENTRIES = 4096

_COUNTER = struct.Struct("<Q")


class FileGeneration:
    """The generation as 8 bytes of a file, mapped into every process that opens it."""

    def __init__(self, path: Path) -> None:
        self._fd, self._map = map_shared(path, _COUNTER.size)  # zeros: generation 0

    def read(self) -> int:
        return _COUNTER.unpack_from(self._map)[0]

    def bump(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_EX)  # increments from several processes never merge
        try:
            _COUNTER.pack_into(self._map, 0, _COUNTER.unpack_from(self._map)[0] + 1)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)


class RedisGeneration:
    """The generation as a Redis key: one ``GET`` a request, ``INCR`` on a change."""

    def __init__(self, url: str) -> None:
        import redis  # a production requirement (requirements/prod.txt)

        self._client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)

    def read(self) -> int:
        return int(self._client.get(REDIS_KEY) or 0)

    def bump(self) -> None:
        self._client.incr(REDIS_KEY)


class _Entry:
    __slots__ = ("generation", "until", "credential")

    def __init__(self, generation: int, until: float, credential: Credential) -> None:
        self.generation, self.until, self.credential = generation, until, credential


_store: FileGeneration | RedisGeneration | None = None
_store_config: tuple | None = None
_store_lock = threading.Lock()
_entries: dict[str, _Entry] = {}


def _forget_after_fork() -> None:
    global _store, _store_config
    _inherited.append(_store)  # a child opens its own (a Redis connection is not shared)
    _store, _store_config = None, None
    _entries.clear()


_inherited: list = []
os.register_at_fork(after_in_child=_forget_after_fork)


def _generations() -> FileGeneration | RedisGeneration | None:
    """This process's generation store for the current settings; None when the cache is off."""
    global _store, _store_config
    agentgit = settings.AGENTGIT
    config = (
        agentgit["CREDENTIAL_CACHE"],
        agentgit["RATE_LIMIT_REDIS_URL"],
        agentgit["DATA_DIR"],
        settings.DATABASES["default"]["ENGINE"],
    )
    if _store_config != config:
        with _store_lock:
            if _store_config != config:
                enabled, redis_url, data_dir, engine = config
                if not enabled:
                    _store = None
                elif redis_url:
                    _store = RedisGeneration(redis_url)
                elif "sqlite" in engine:
                    _store = FileGeneration(Path(data_dir) / FILE_NAME)
                else:
                    _store = None  # processes on several machines, nothing shared to read
                _entries.clear()
                _store_config = config
    return _store


def generation() -> int | None:
    """The current generation, read now; None when the cache is off or its store unreadable."""
    store = _generations()
    if store is None:
        return None
    try:
        return store.read()
    except Exception:  # Redis unreachable: look tokens up, and trust nothing kept before
        logger.warning("credential generation unreadable; tokens looked up", exc_info=True)
        _entries.clear()
        return None


def kept_in_memory(digest: str) -> Credential | None:
    """:func:`cached` under the current generation when reading it is a memory load (the mapped
    file): for a caller that must not wait on the network (the event loop). None otherwise."""
    store = _generations()
    if not isinstance(store, FileGeneration):
        return None
    return cached(digest, store.read())


def cached(digest: str, current: int) -> Credential | None:
    """A copy of the credential kept for the token hash under generation ``current``, or None."""
    entry = _entries.get(digest)
    if entry is None:
        return None
    if entry.generation != current or entry.until < time.monotonic():
        _entries.pop(digest, None)
        return None
    return _copy(entry.credential)  # each request its own instance: callers may set fields


def keep(digest: str, read_under: int, credential: Credential) -> None:
    """Keep a live credential, read after the generation ``read_under`` was."""
    if len(_entries) >= MAX_ENTRIES:
        _entries.clear()
    until = time.monotonic() + settings.AGENTGIT["CREDENTIAL_CACHE_SECONDS"]
    _entries[digest] = _Entry(read_under, until, _copy(credential))


def touched(digest: str, last_used: Any) -> None:
    """The kept credential's ``last_used`` is now ``last_used`` (so it is not written again soon)."""
    entry = _entries.get(digest)
    if entry is not None:
        entry.credential.last_used = last_used


def _copy(credential: Credential) -> Credential:
    """The credential and its user as new instances with the same field values (``copy.copy``
    of a model goes through pickling's ``__reduce__``: 32 against 8 µs here)."""
    user = _plain_copy(credential.user)
    found = _plain_copy(credential)
    found.user = user
    return found


def _plain_copy(instance: Any) -> Any:
    new = instance.__class__.__new__(instance.__class__)
    new.__dict__.update(instance.__dict__)
    state = new._state = ModelState()
    state.adding, state.db = False, instance._state.db
    return new


def credentials_changed(**_signal: Any) -> None:
    """Something that decides what a token may do changed: every process's kept credentials are
    stale. Increments the generation now and, inside a transaction, again once it commits (a
    request that read the old row meanwhile kept it under the first increment)."""
    _bump()
    if connection.in_atomic_block:
        transaction.on_commit(_bump)


def _bump() -> None:
    _entries.clear()
    store = _generations()
    if store is None:
        return
    try:
        store.bump()
    except Exception:  # Redis unreachable: the processes that read it now look tokens up
        logger.error("credential generation not incremented; kept credentials expire on their own", exc_info=True)
