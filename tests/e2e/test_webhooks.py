"""Webhooks as deployed (issue 24): a landing's event reaches a real receiver signed, through the
Celery workers in production mode and through the server's own threads in the embedded default,
and a receiver that fails once gets it again."""

from __future__ import annotations

import time

import pytest

from tests.deployment import ApiClient
from tests.receiver import Receiver, verified

SECRET = "e2e webhook secret"
PATIENCE_S = 60


@pytest.fixture(params=["production", "embedded"])
def served(request):
    server = request.getfixturevalue(request.param)
    if request.param == "production" and not getattr(server, "webhook_worker", False):
        server.start_worker(concurrency=2)
        server.webhook_worker = True
    return server


def test_a_landing_reaches_a_receiver_that_fails_once_signed_and_logged(served):
    flaky = Receiver(statuses=[500])
    repo = f"hooks-{served.mode}"
    try:
        with ApiClient(served.url, served.token) as api:
            api.create_repo(repo)
            body = {"url": flaky.url, "secret": SECRET, "events": ["stream.integrate", "check.completed"]}
            hook = api.request("POST", f"/repos/{repo}/webhooks", json=body, expect=(201,)).json()
            head = api.write(repo, None, {"a.txt": "a\n"})
            outcome = api.integrate(repo, api.open_proposal(repo, head)["id"])
            check = {"changeset": head, "name": "ci/test", "state": "success", "url": "https://ci.example/1"}
            api.request("POST", f"/repos/{repo}/checks", json=check, expect=(201,))

            deadline = time.monotonic() + PATIENCE_S
            while time.monotonic() < deadline:
                log = api.get_json(f"/repos/{repo}/webhooks/{hook['id']}/deliveries")["deliveries"]
                if len(log) == 2 and all(delivery["state"] == "delivered" for delivery in log):
                    break
                time.sleep(0.1)
    finally:
        flaky.close()

    assert sorted(delivery["event"] for delivery in log) == ["check.completed", "stream.integrate"], log
    assert sum(len(delivery["attempts"]) for delivery in log) == 3  # one of the two failed once
    bodies = [verified(request, SECRET) for request in flaky.requests]
    assert len(bodies) == 3
    landed = next(body for body in bodies if body["event"] == "stream.integrate")
    assert landed["repository"] == repo and landed["data"]["head"] == outcome["stream_head"]
    completed = next(body for body in bodies if body["event"] == "check.completed")
    assert completed["data"]["state"] == "success" and completed["data"]["changeset"] == head
