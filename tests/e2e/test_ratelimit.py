"""The rate limit across server processes: ``uvicorn --workers 2`` share one bucket per credential.

Embedded: the buckets are a SQLite file in the data directory. Production: they are in Redis.
Each request opens a new connection, so the kernel hands requests to both processes; if each
process kept its own bucket, a credential would get twice its burst at once.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from .support import Deployment

RATE, BURST = 5, 10
HAMMER_S = 2.0
HAMMER_MAX_S = 30.0


@pytest.fixture(scope="module", params=["embedded", "production"])
def two_servers(request):
    with Deployment(request.param) as deployment:
        deployment.start_server(workers=2)
        yield deployment


def hammer(url: str, token: str, seconds: float, clients: int) -> tuple[list[httpx.Response], float]:
    """``clients`` threads GET /repos as fast as they can, a new connection each, for at least
    ``seconds`` and until they have sent more than twice what the bucket may admit meanwhile (a
    loaded machine serves fewer requests a second), at most :data:`HAMMER_MAX_S`."""
    answers: list[httpx.Response] = []
    lock = threading.Lock()
    started = time.monotonic()

    def hammering() -> bool:
        elapsed = time.monotonic() - started
        return elapsed < seconds or (len(answers) <= 2 * (BURST + RATE * elapsed) and elapsed < HAMMER_MAX_S)

    def run() -> None:
        headers = {"Authorization": f"Bearer {token}"}
        while hammering():
            with httpx.Client(timeout=30, trust_env=False) as http:  # a new connection per request
                answer = http.get(f"{url}/api/v1/repos", headers=headers)
            with lock:
                answers.append(answer)

    threads = [threading.Thread(target=run) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers, time.monotonic() - started


def test_processes_share_each_credentials_bucket(two_servers):
    hammered = two_servers.create_token("hammered", scopes="read", rate=RATE, burst=BURST)
    quiet = two_servers.create_token("quiet", scopes="read", rate=RATE, burst=BURST)
    quiet_answers: list[int] = []

    def quiet_client() -> None:  # one call every 200 ms, on another credential
        with httpx.Client(timeout=30, trust_env=False) as http:
            for _ in range(int(HAMMER_S / 0.2)):
                quiet_answers.append(
                    http.get(
                        f"{two_servers.url}/api/v1/repos", headers={"Authorization": f"Bearer {quiet}"}
                    ).status_code
                )
                time.sleep(0.2)

    other = threading.Thread(target=quiet_client)
    other.start()
    answers, elapsed = hammer(two_servers.url, hammered, HAMMER_S, clients=6)
    other.join()

    admitted = [answer for answer in answers if answer.status_code == 200]
    refused = [answer for answer in answers if answer.status_code != 200]
    assert len(answers) > 2 * (BURST + RATE * elapsed), "the test did not hammer hard enough"
    # The bucket allows burst + rate × time; two separate buckets would allow twice that.
    assert BURST <= len(admitted) <= BURST + RATE * elapsed + 1, (len(admitted), elapsed)
    for answer in refused:
        assert answer.status_code == 429
        error = answer.json()["error"]
        assert error["code"] == "rate_limited" and error["retryable"] is True
        assert 0 < error["retry_after_ms"] <= 1000 / RATE
        assert answer.headers["Retry-After"] == "1"
    assert set(quiet_answers) == {200}  # the other credential never noticed

    time.sleep(1000 / RATE / 1000 + 0.05)  # one token's refill after the hammering stopped
    with httpx.Client(timeout=30, trust_env=False) as http:
        assert (
            http.get(f"{two_servers.url}/api/v1/repos", headers={"Authorization": f"Bearer {hammered}"}).status_code
            == 200
        )
