"""One-call landing and Idempotency-Key in the production mode: PostgreSQL (concurrent retries
meet on the unique index), the landing queue on Celery workers (202 while no worker runs)."""

from __future__ import annotations

import threading

import httpx
import pytest

from agentgit import Client, write

from .support import LANDING_TIMEOUT_S, stream_held


def test_a_queued_landing_is_retried_into_its_outcome_once(production, request):
    auth = {"Authorization": f"Bearer {production.token}"}
    with httpx.Client(base_url=f"{production.url}/api/v1", headers=auth, timeout=60) as http:
        assert http.post("/repos", json={"name": "queued"}).status_code == 201
        body = {"message": "m", "operations": [{"op": "write", "path": "a.txt", "content": "a\n"}]}
        key = {"Idempotency-Key": "queued-1"}

        # Another transaction holds the stream as a worker landing it does, and no worker
        # runs: the landing is recorded and queued, and answers 202 with what it made.
        with stream_held(production, "queued", "main"):
            first = http.post("/repos/queued/streams/main/land", json=body, headers=key, params={"wait": 0.3})
            assert first.status_code == 202, first.text
            again = http.post("/repos/queued/streams/main/land", json=body, headers=key, params={"wait": 0.3})
            assert again.status_code == 202 and again.json() == first.json()

        request.getfixturevalue("worker")
        landed = http.post(
            "/repos/queued/streams/main/land", json=body, headers=key, params={"wait": LANDING_TIMEOUT_S}
        )
        assert landed.status_code == 200, landed.text
        answer = landed.json()
        assert answer["outcome"] == "fast_forward" and answer["changeset"] == first.json()["changeset"]
        assert answer["proposal"] == first.json()["proposal"] and landed.headers["Idempotent-Replayed"] == "true"
        assert len(http.get("/repos/queued/proposals").json()["proposals"]) == 1


def test_a_landing_on_a_free_stream_lands_in_its_own_request_with_no_worker_running(production):
    # docs/adr/0026: nothing queued on the stream and no checks: the request lands it itself,
    # in its transaction, without the broker's round trip (the workers land only the rest).
    auth = {"Authorization": f"Bearer {production.token}"}
    with httpx.Client(base_url=f"{production.url}/api/v1", headers=auth, timeout=60) as http:
        assert http.post("/repos", json={"name": "free"}).status_code == 201
        heads = []
        for path in ("a.txt", "b.txt"):
            body = {"message": path, "operations": [{"op": "write", "path": path, "content": "x\n"}]}
            landed = http.post("/repos/free/streams/main/land", json=body, params={"wait": 0.3})
            assert landed.status_code == 200 and landed.json()["outcome"] == "fast_forward", landed.text
            heads.append(landed.json()["stream_head"])
        assert http.get("/repos/free/streams/main").json()["head"] == heads[-1]
        assert http.get("/repos/free/files/main/a.txt").text == "x\n"


def test_concurrent_retries_with_one_key_land_once_on_postgresql(production, worker):
    with Client(production.url, production.token) as ag:
        ag.create_repo("race")
    answers = []
    start = threading.Barrier(6)

    def land() -> None:
        with Client(production.url, production.token) as ag:
            start.wait()
            answers.append(ag.land("race", "main", [write("a.txt", "a\n")], message="race", idempotency_key="k"))

    threads = [threading.Thread(target=land) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(answers) == 6 and len({(a.changeset, a.proposal, a.outcome) for a in answers}) == 1
    with Client(production.url, production.token) as ag:
        assert len(ag.list_proposals("race").items) == 1
        assert [entry.id for entry in ag.iter_log("race")] == [answers[0].changeset]


@pytest.fixture(scope="module")
def worker(production):
    """One Celery worker for the rest of the module (the first test starts it midway)."""
    return production.start_worker(concurrency=2)
