"""Rate limits: every credential has a token bucket; an empty bucket answers 429 ``rate_limited``.

In process, buckets are the embedded default's mapped file (the test data directory); the same
tests run against Redis buckets. ``tests/e2e/test_ratelimit.py`` checks the limit holds across
server processes.
"""

from __future__ import annotations

import time
import uuid

import pytest

from repos.services import ratelimit

from .conftest import client_with

pytestmark = pytest.mark.django_db

REDIS_URL = "redis://127.0.0.1:6379/7"


@pytest.fixture(params=["file", "redis"])
def buckets(request, settings):
    """Run a test on each bucket store."""
    url = REDIS_URL if request.param == "redis" else None
    settings.AGENTGIT = {**settings.AGENTGIT, "RATE_LIMIT_REDIS_URL": url}
    return request.param


def test_a_credential_gets_its_burst_then_429_with_a_retry_hint(buckets):
    client = client_with(["read"], rate=2, burst=3)
    assert [client.get("/api/v1/repos").status_code for _ in range(3)] == [200, 200, 200]
    refused = client.get("/api/v1/repos")
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "rate_limited" and error["retryable"] is True
    assert 0 < error["retry_after_ms"] <= 500  # one token comes back every 500 ms
    assert refused["Retry-After"] == "1"  # whole seconds, rounded up
    time.sleep(error["retry_after_ms"] / 1000 + 0.02)
    assert client.get("/api/v1/repos").status_code == 200  # the hint was enough


def test_one_credential_running_dry_does_not_limit_another(buckets):
    hammered = client_with(["read"], rate=0.1, burst=2)  # a token every 10 s: none comes back here
    other = client_with(["read"], rate=0.1, burst=2)
    statuses = [hammered.get("/api/v1/repos").status_code for _ in range(5)]
    assert statuses == [200, 200, 429, 429, 429]
    assert other.get("/api/v1/repos").status_code == 200


def test_the_default_limit_applies_unless_the_credential_has_its_own(settings):
    settings.AGENTGIT = {**settings.AGENTGIT, "RATE_LIMIT": 0.1, "RATE_BURST": 2, "RATE_LIMIT_REDIS_URL": None}
    default = client_with(["read"])
    own = client_with(["read"], rate=1000, burst=1000)
    assert [default.get("/api/v1/repos").status_code for _ in range(3)] == [200, 200, 429]
    assert all(own.get("/api/v1/repos").status_code == 200 for _ in range(10))
    settings.AGENTGIT = {**settings.AGENTGIT, "RATE_LIMIT": 0}  # 0: no default limit
    assert all(default.get("/api/v1/repos").status_code == 200 for _ in range(5))


def test_refused_requests_are_those_that_would_be_served(settings):
    """Unauthenticated and forbidden requests are answered as such; they take no token."""
    client = client_with(["read"], rate=0.1, burst=1)
    for _ in range(3):
        assert client.post("/api/v1/repos", {"name": "x"}, format="json").status_code == 403
    assert client.get("/api/v1/repos").status_code == 200


def test_an_unreachable_bucket_store_lets_requests_through(settings, caplog):
    settings.AGENTGIT = {**settings.AGENTGIT, "RATE_LIMIT_REDIS_URL": "redis://127.0.0.1:1/0"}
    client = client_with(["read"], rate=1, burst=1)
    assert [client.get("/api/v1/repos").status_code for _ in range(3)] == [200, 200, 200]
    assert "rate limit store unavailable" in caplog.text


@pytest.mark.parametrize("store", ["file", "redis"])
def test_a_bucket_admits_burst_plus_rate_times_time(store, tmp_path):
    """The arithmetic, straight on a store: 40 takes as fast as possible over ~0.3 s."""
    buckets = ratelimit.RedisBuckets(REDIS_URL) if store == "redis" else ratelimit.FileBuckets(tmp_path / "b.buckets")
    key = uuid.uuid4().hex
    started = time.monotonic()
    admitted = 0
    while time.monotonic() - started < 0.3:
        admitted += buckets.take(key, 20.0, 5) == 0
    elapsed = time.monotonic() - started
    # Never more than the bucket allows; and it did refill while being drained (a machine that
    # stalls the loop for a while loses refills to the full bucket, so no tighter lower bound).
    assert 5 < admitted <= 5 + 20 * elapsed + 1


def test_the_file_shares_its_buckets_and_reuses_the_slots_of_full_ones(tmp_path, monkeypatch):
    """Two openings of one file (as two processes have) drain one bucket; a bucket that is full
    again gives its slot up, and a table with no slot near a key's place refuses to guess.
    On a clock of the test's own: the store reads ``time.time()`` under its lock."""
    now = [1000.0]
    monkeypatch.setattr(ratelimit, "time", type("Clock", (), {"time": staticmethod(lambda: now[0])}))
    path = tmp_path / "b.buckets"
    first, second = ratelimit.FileBuckets(path), ratelimit.FileBuckets(path)
    key = uuid.uuid4().hex
    assert [first.take(key, 1.0, 2), second.take(key, 1.0, 2)] == [0, 0]
    assert first.take(key, 1.0, 2) == 1.0 and second.take(key, 1.0, 2) == 1.0  # empty for both

    # Keys that all have one place: the table holds PROBES of them, then refuses...
    same_place = ["0" * 16 + f"{index:016x}" for index in range(1, ratelimit.FileBuckets.PROBES + 2)]
    for other in same_place[:-1]:
        assert first.take(other, 1.0, 1) == 0
    with pytest.raises(ratelimit.BucketsFull):
        first.take(same_place[-1], 1.0, 1)
    now[0] += 1.0  # ...until those buckets are full again (1 token at 1/s)
    assert first.take(same_place[-1], 1.0, 1) == 0


def test_a_busy_bucket_lends_tokens_to_a_process_and_no_token_is_lost_or_made(tmp_path, monkeypatch):
    """A bucket holding many tokens lends each opening (process) a few at once, so most takes
    skip the file's lock; still, two openings draining it admit exactly its burst, including
    the tokens of a lease that expired unspent (given back). On a clock of the test's own."""
    now = [1000.0]
    clock = type("Clock", (), {"time": staticmethod(lambda: now[0]), "monotonic": staticmethod(lambda: now[0])})
    monkeypatch.setattr(ratelimit, "time", clock)
    locked: list[int] = []
    real_flock = ratelimit.fcntl.flock

    def counting_flock(fd: int, operation: int) -> None:
        locked.append(operation)
        real_flock(fd, operation)

    monkeypatch.setattr(ratelimit.fcntl, "flock", counting_flock)
    path = tmp_path / "b.buckets"
    first, second = ratelimit.FileBuckets(path), ratelimit.FileBuckets(path)
    key = uuid.uuid4().hex
    rate, burst = 1e-6, 1000  # no refill to speak of

    assert first.take(key, rate, burst) == 0  # and a lease for the next ones
    now[0] += 1.0  # the lease expires unspent: its tokens go back with the next take
    admitted = 1
    refused = {first: False, second: False}
    while not all(refused.values()):
        for opening in (second, first):
            if opening.take(key, rate, burst) == 0:
                admitted += 1
            else:
                refused[opening] = True

    assert admitted == burst
    assert locked.count(ratelimit.fcntl.LOCK_EX) < burst / 3
