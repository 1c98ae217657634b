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
* otherwise in a **file mapped into every process** of the machine, ``ratelimit.buckets`` in
  the data directory (the embedded default, whose ``make serve`` runs two processes per core):
  a table of buckets read and written under an ``flock``, a few microseconds a check. Until
  docs/adr/0019 it was a SQLite file with one ``BEGIN IMMEDIATE`` transaction per request.

A bucket store that fails (Redis unreachable, no free slot in the file's table) lets the
request through and logs it: the limit protects the server, it is not what makes anything
correct.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
import time
from pathlib import Path

from django.conf import settings

from ..errors import RateLimited
from ..models import Credential
from . import metrics
from .mapped import map_shared

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
        wait_s = _buckets().take(key, rate, burst) or 0.0  # (None only without waiting)
    except Exception:  # the store is down: serve rather than refuse everyone
        logger.warning("rate limit store unavailable; request admitted", exc_info=True)
        return
    if wait_s > 0:
        metrics.observe_rate_limited()
        raise RateLimited(
            f"this credential's rate limit ({rate:g} requests/s, burst {burst}) is used up; retry later",
            retry_after_ms=max(1, int(wait_s * 1000 + 0.999)),
        )


def took_at_once(credential: Credential) -> bool:
    """Whether a token was taken from the credential's bucket without waiting: a bucket in the
    mapped file whose locks were free, with a token in it. False tells nothing (a refusal, a
    lock held elsewhere, or Redis, which is a round trip): call :func:`take`, which decides and
    counts. For a caller that must not wait (the event loop)."""
    limits = limits_of(credential)
    if limits is None:
        return True
    store = _buckets()
    if not isinstance(store, FileBuckets):
        return False
    try:
        return store.take(credential.token_hash[:32], *limits, wait=False) == 0
    except Exception:  # the store is failing: take() says so, and lets the request through
        return False


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


class BucketsFull(Exception):
    """No slot for a new bucket near its place in the table: the request is let through."""


class FileBuckets:
    """Buckets in a file mapped into every process of one machine: a fixed table of slots, one
    per credential in use, read and written under an ``flock``.

    A slot is the key (16 bytes of the token hash), the tokens, when they were counted, and when
    the bucket will be full again; from then on the slot is as good as empty and a new bucket
    may take it. A key's slot is within :data:`PROBES` slots of the place its hash names. A
    check is a lock, a few memory reads and one write: no transaction, no SQL (docs/adr/0019).
    Nothing is synced: a bucket lost to a power cut refills anyway.
    """

    SLOTS = 16384
    PROBES = 32
    _SLOT = struct.Struct("<16sddd")  # key, tokens, at, full_at
    _EMPTY = bytes(16)
    #: A bucket holding at least this many tokens lends a process a few at once (a lease), so
    #: that a busy credential's requests take the ``flock`` once per lease, not each: with
    #: several processes on few cores, a process preempted while holding it stalled every other
    #: one (docs/adr/0025). Below it (every small burst, any bucket near empty), one at a time.
    LEASE_FROM = 256
    #: At most this many tokens a lease, and at most 1/LEASE_SHARE of what the bucket holds.
    LEASE_MAX, LEASE_SHARE = 16, 16
    #: A lease's tokens are spent within this; what is left goes back to the bucket.
    LEASE_SECONDS = 0.05

    def __init__(self, path: Path) -> None:
        self._fd, self._map = map_shared(path, self.SLOTS * self._SLOT.size)  # zeros: every slot empty
        # flock excludes other processes; the threads of this one share its file description.
        self._threads = threading.Lock()
        #: This process's leases: key → [tokens left, spendable until (monotonic), rate, burst].
        self._leases: dict[bytes, list] = {}

    def take(self, key: str, rate: float, burst: int, *, wait: bool = True) -> float | None:
        """Seconds until a token is free (0: one was taken); None, without ``wait``, when another
        thread or process holds the table (nothing was taken)."""
        wanted = bytes.fromhex(key)[:16].ljust(16, b"\0")
        if not self._threads.acquire(blocking=wait):
            return None
        try:
            lease = self._leases.pop(wanted, None)
            if lease is not None and lease[0] >= 1 and lease[1] > time.monotonic() and lease[2:] == [rate, burst]:
                lease[0] -= 1
                self._leases[wanted] = lease
                return 0.0
            returned = lease[0] if lease is not None else 0  # spent or not, every token is counted
            home = int.from_bytes(wanted[:8], "little") % self.SLOTS
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)  # freed if we die
            except BlockingIOError:
                if lease is not None:
                    self._leases[wanted] = lease  # its tokens go back at the next take
                return None
            try:
                seconds, lent = self._take(wanted, home, rate, burst, returned)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            if lent:
                self._leases[wanted] = [lent, time.monotonic() + self.LEASE_SECONDS, rate, burst]
            return seconds
        finally:
            self._threads.release()

    def _take(self, wanted: bytes, home: int, rate: float, burst: int, returned: float = 0) -> tuple[float, int]:
        """Seconds until a token is free (0: one was taken), and how many more were lent."""
        now = time.time()  # read under the lock, so updates are ordered by time
        table, slot_struct = self._map, self._SLOT
        free = None
        tokens, at = float(burst), now
        for probe in range(self.PROBES):
            offset = ((home + probe) % self.SLOTS) * slot_struct.size
            key, stored_tokens, stored_at, full_at = slot_struct.unpack_from(table, offset)
            if key == wanted:
                free, tokens, at = offset, stored_tokens, stored_at
                break
            if free is None and (key == self._EMPTY or full_at <= now):
                free = offset
            if key == self._EMPTY:
                break  # never used: a key further on would have taken this slot
        if free is None:
            raise BucketsFull(f"{self.PROBES} buckets in use around this one")
        if now > at:
            tokens = min(float(burst), tokens + (now - at) * rate)
        tokens = min(float(burst), tokens + returned)
        wait, lent = 0.0, 0
        if tokens >= 1:
            tokens -= 1
            if tokens >= self.LEASE_FROM:
                lent = min(self.LEASE_MAX, int(tokens // self.LEASE_SHARE))
                tokens -= lent
        else:
            wait = (1 - tokens) / rate
        at = max(now, at)
        slot_struct.pack_into(table, free, wanted, tokens, at, at + (burst - tokens) / rate)
        return wait, lent


_store: RedisBuckets | FileBuckets | None = None
_store_config: tuple | None = None
_store_lock = threading.Lock()


def _forget_after_fork() -> None:
    global _store, _store_config
    _inherited.append(_store)  # a child must not share its parent's connections; kept unused
    _store, _store_config = None, None


_inherited: list = []
os.register_at_fork(after_in_child=_forget_after_fork)


def _buckets() -> RedisBuckets | FileBuckets:
    """This process's bucket store, for the current settings."""
    global _store, _store_config
    config = (settings.AGENTGIT["RATE_LIMIT_REDIS_URL"], settings.AGENTGIT["DATA_DIR"])
    if _store is None or _store_config != config:
        with _store_lock:
            if _store is None or _store_config != config:
                redis_url, data_dir = config
                _store = RedisBuckets(redis_url) if redis_url else FileBuckets(Path(data_dir) / "ratelimit.buckets")
                _store_config = config
    return _store
