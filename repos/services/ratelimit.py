"""Per-credential rate limits: one token bucket per credential (API.md, "Credentials").

A bucket holds up to ``burst`` tokens and refills at ``rate`` tokens a second; every admitted
request — REST, the SSE feed, a WebSocket connection, whatever surface calls
``Admission.admit`` (repos.services.admission) — takes one token, or is refused with ``rate_limited`` (429) and
the time until a token is back, in ``retry_after_ms`` and, rounded up to whole seconds, in
``Retry-After``. Over any span of ``t`` seconds a credential is admitted at most
``burst + rate × t`` requests. The defaults are ``AGENTGIT_RATE_LIMIT`` (requests per second,
200; 0 turns the default off) and ``AGENTGIT_RATE_BURST`` (400); a credential's own ``rate`` and
``burst`` override them.

Every server process must see the same buckets, so they live outside the process:

* in **Redis** when ``REDIS_URL`` is set (production): one Lua script per request, atomic, timed
  by Redis's clock, so servers on several machines share one bucket per credential;
* otherwise in a small **SQLite file** in the data directory (the embedded default, whose
  ``make serve`` runs two processes per core): one ``BEGIN IMMEDIATE`` transaction per request,
  without fsync (a bucket lost to a power cut refills anyway), taken after an ``flock`` on a file
  beside it, so that a request waiting for another's transaction wakes the moment it ends
  (SQLite's own busy handler sleeps for milliseconds between tries: with four processes reading
  at full speed, most of a request's time was that sleep; docs/adr/0013).

A bucket store that fails (Redis unreachable) lets the request through and logs it: the limit
protects the server, it is not what makes anything correct.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import queue
import sqlite3
import threading
import time
from pathlib import Path

from django.conf import settings

from ..errors import RateLimited
from ..models import Credential
from . import metrics

logger = logging.getLogger(__name__)


def limits_of(credential: Credential) -> tuple[float, int] | None:
    """``(rate, burst)`` of the credential's bucket; None when it is not limited."""
    config = settings.AGENTGIT
    rate = credential.rate if credential.rate is not None else config["RATE_LIMIT"]
    if not rate or rate <= 0:
        return None
    burst = credential.burst if credential.burst is not None else config["RATE_BURST"]
    return float(rate), max(1, int(burst))


def take(credential: Credential) -> None:
    """Take a token from the credential's bucket, or raise ``RateLimited`` with the wait."""
    limits = limits_of(credential)
    if limits is None:
        return
    rate, burst = limits
    # The token hash, not the primary key: a key must never be reused by another credential.
    key = credential.token_hash[:32]
    try:
        wait_s = _buckets().take(key, rate, burst)
    except Exception:  # the store is down: serve rather than refuse everyone
        logger.warning("rate limit store unavailable; request admitted", exc_info=True)
        return
    if wait_s > 0:
        metrics.observe_rate_limited()
        raise RateLimited(
            f"this credential's rate limit ({rate:g} requests/s, burst {burst}) is used up; retry later",
            retry_after_ms=max(1, int(wait_s * 1000 + 0.999)),
        )


# ---------------------------------------------------------------------------- bucket stores


class RedisBuckets:
    """Buckets as Redis hashes ``{tokens, at}``, updated by one atomic script per request."""

    # Redis's own clock (TIME) times every bucket, so the servers' clocks need not agree.
    # A bucket left alone expires once it would be full again.
    SCRIPT = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) + tonumber(now_parts[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or burst
local at = tonumber(state[2]) or now
if now > at then tokens = math.min(burst, tokens + (now - at) * rate) end
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return tostring(wait)
"""

    def __init__(self, url: str) -> None:
        import redis  # a production requirement (requirements/prod.txt)

        self._client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self._script = self._client.register_script(self.SCRIPT)

    def take(self, key: str, rate: float, burst: int) -> float:
        """Seconds until a token is free (0: one was taken)."""
        return float(self._script(keys=[f"agentgit:bucket:{key}"], args=[rate, burst]))


class SqliteBuckets:
    """Buckets as rows of a SQLite file, shared by the processes of one machine."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock_path = path.with_name(path.name + ".lock")
        # Idle connections, each with its own open lock file, reused by whichever thread comes
        # next: a connection per thread would be one per request thread.
        self._idle: queue.SimpleQueue[tuple[sqlite3.Connection, int]] = queue.SimpleQueue()

    def _connect(self) -> tuple[sqlite3.Connection, int]:
        connection = sqlite3.connect(self._path, timeout=5, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=OFF")
        connection.execute(
            "CREATE TABLE IF NOT EXISTS bucket (key TEXT PRIMARY KEY, tokens REAL NOT NULL, at REAL NOT NULL)"
        )
        # An open file description of its own: flock excludes every other connection, in this
        # process's other threads as in the other processes.
        return connection, os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def take(self, key: str, rate: float, burst: int) -> float:
        """Seconds until a token is free (0: one was taken)."""
        try:
            connection, lock_fd = self._idle.get_nowait()
        except queue.Empty:
            connection, lock_fd = self._connect()
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)  # one transaction at a time; freed by the kernel if we die
            try:
                wait = self._take(connection, key, rate, burst)
            finally:
                fcntl.flock(lock_fd, fcntl.LOCK_UN)
        except BaseException:
            connection.close()
            os.close(lock_fd)
            raise
        self._idle.put((connection, lock_fd))
        return wait

    @staticmethod
    def _take(connection: sqlite3.Connection, key: str, rate: float, burst: int) -> float:
        connection.execute("BEGIN IMMEDIATE")  # free at once: whoever held it has released the flock
        try:
            now = time.time()  # read under the lock, so updates are ordered by time
            row = connection.execute("SELECT tokens, at FROM bucket WHERE key = ?", (key,)).fetchone()
            tokens, at = row if row is not None else (float(burst), now)
            if now > at:
                tokens = min(float(burst), tokens + (now - at) * rate)
            wait = 0.0
            if tokens >= 1:
                tokens -= 1
            else:
                wait = (1 - tokens) / rate
            connection.execute(
                "INSERT INTO bucket (key, tokens, at) VALUES (?, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET tokens = excluded.tokens, at = excluded.at",
                (key, tokens, max(now, at)),
            )
            connection.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
            raise
        return wait


_store: RedisBuckets | SqliteBuckets | None = None
_store_config: tuple | None = None
_store_lock = threading.Lock()


def _forget_after_fork() -> None:
    global _store, _store_config
    _inherited.append(_store)  # a child must not share its parent's connections; kept unused
    _store, _store_config = None, None


_inherited: list = []
os.register_at_fork(after_in_child=_forget_after_fork)


def _buckets() -> RedisBuckets | SqliteBuckets:
    """This process's bucket store, for the current settings."""
    global _store, _store_config
    config = (settings.AGENTGIT["RATE_LIMIT_REDIS_URL"], settings.AGENTGIT["DATA_DIR"])
    if _store is None or _store_config != config:
        with _store_lock:
            if _store is None or _store_config != config:
                redis_url, data_dir = config
                _store = RedisBuckets(redis_url) if redis_url else SqliteBuckets(Path(data_dir) / "ratelimit.sqlite3")
                _store_config = config
    return _store
