"""Load shedding over real HTTP: beyond the limit of requests at once, 503 ``unavailable`` at once."""

from __future__ import annotations

import threading
import time

import httpx

from tests.deployment import Deployment


def test_requests_beyond_the_limit_are_refused_and_served_again_when_it_frees():
    with Deployment("embedded", env={"AGENTGIT_MAX_CONCURRENT_REQUESTS": "2"}) as server:
        token = server.create_token("shed")
        server.start_server()
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=server.url, headers=auth, timeout=30, trust_env=False) as http:
            assert http.post("/api/v1/repos", json={"name": "demo"}).status_code == 201
            release = threading.Event()
            sending = threading.Semaphore(0)
            answers: list[int] = []

            def slow_upload() -> None:  # a body that trickles in holds its slot until it ends
                def body():
                    sending.release()  # the headers are on their way: the request is starting
                    yield b"first part\n"
                    release.wait(20)
                    yield b"last part\n"

                with httpx.Client(base_url=server.url, headers=auth, timeout=30, trust_env=False) as own:
                    answers.append(own.post("/api/v1/repos/demo/blobs", content=body()).status_code)

            slow = [threading.Thread(target=slow_upload) for _ in range(2)]
            for thread in slow:
                thread.start()
            for _ in slow:
                assert sending.acquire(timeout=20)
            # Both slow requests were sent before any probe: once the server has them both in
            # progress (a moment on a busy machine), a probe is refused. A probe admitted before
            # that only borrows a slot for its own short while.
            time.sleep(0.5)
            deadline = time.monotonic() + 20
            refused = http.get("/api/v1/repos/demo")
            while refused.status_code != 503 and time.monotonic() < deadline:
                time.sleep(0.2)
                refused = http.get("/api/v1/repos/demo")
            assert refused.status_code == 503
            shed = 1
            error = refused.json()["error"]
            assert error["code"] == "unavailable" and error["retryable"] is True
            assert refused.headers["Retry-After"] == "1"
            assert http.get("/healthz").status_code == 200  # probes are never refused

            release.set()
            for thread in slow:
                thread.join(30)
            assert answers == [201, 201]
            # A slot frees when the server has finished with a request, a moment after the
            # client has its answer.
            deadline = time.monotonic() + 10
            served = http.get("/api/v1/repos/demo")
            shed += served.status_code == 503
            while served.status_code == 503 and time.monotonic() < deadline:
                time.sleep(0.05)
                served = http.get("/api/v1/repos/demo")
                shed += served.status_code == 503
            assert served.status_code == 200
            # Every refusal was counted, whichever request it was.
            scraped = http.get("/metrics").text
            assert f"agentgit_shed_requests_total {float(shed)}" in scraped, (shed, scraped)
