"""Webhooks (issue 24): configured by admins, delivered from the outbox to a real HTTP receiver
(a thread on 127.0.0.1), signed, retried after a failure, logged, redelivered, and never in a
landing's way."""

from __future__ import annotations

import json
import socket
import time

import pytest

from repos.models import Repository, WebhookDelivery
from repos.services import webhooks
from tests.receiver import Receiver
from tests.receiver import verified as check_signature

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "It's a Secret to Everybody"
#: How long a test waits for the background sender (a bound on a hang, not a measurement).
PATIENCE_S = 30


@pytest.fixture
def receiver():
    made: list[Receiver] = []

    def make(*args, **kwargs) -> Receiver:
        made.append(Receiver(*args, **kwargs))
        return made[-1]

    yield make
    for one in made:
        one.close()


def add_hook(admin, url: str, events: list[str], repo: str = "demo") -> dict:
    answer = admin.post(
        f"/api/v1/repos/{repo}/webhooks", {"url": url, "secret": SECRET, "events": events}, format="json"
    )
    assert answer.status_code == 201, answer.content
    return answer.json()


def deliveries(admin, hook: dict, repo: str = "demo") -> list[dict]:
    answer = admin.get(f"/api/v1/repos/{repo}/webhooks/{hook['id']}/deliveries")
    assert answer.status_code == 200, answer.content
    return answer.json()["deliveries"]


def settled(admin, hook: dict, count: int) -> list[dict]:
    """The hook's deliveries once ``count`` exist and none is pending, newest first."""
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        found = deliveries(admin, hook)
        if len(found) >= count and all(d["state"] != "pending" for d in found):
            return found
        time.sleep(0.05)
    raise AssertionError(f"deliveries never settled: {deliveries(admin, hook)}")


def verified(request: dict) -> dict:
    return check_signature(request, SECRET)


def test_deliveries_are_signed_and_carry_the_events_of_the_chosen_kinds_in_order(api, admin, receiver):
    listening = receiver()
    hook = add_hook(admin, listening.url, ["stream.integrate", "stream.created"])
    base = api.write(None, {"a.txt": "a\n"})
    landed = api.land(base)
    assert (
        api.client.post("/api/v1/repos/demo/streams", {"name": "topic", "from": base}, format="json").status_code == 201
    )
    api.propose(api.write(base, {"b.txt": "b\n"}))  # proposal.opened: not chosen

    log = settled(admin, hook, 2)
    assert [(d["event"], d["state"]) for d in reversed(log)] == [
        ("stream.integrate", "delivered"),
        ("stream.created", "delivered"),
    ]
    bodies = [verified(request) for request in listening.requests]
    assert [b["event"] for b in sorted(bodies, key=lambda b: b["id"])] == ["stream.integrate", "stream.created"]
    integrate = next(b for b in bodies if b["event"] == "stream.integrate")
    assert integrate["repository"] == "demo"
    assert integrate["data"]["head"] == landed["stream_head"] and integrate["data"]["outcome"] == "fast_forward"
    request = next(r for r in listening.requests if verified(r)["event"] == "stream.integrate")
    assert request["headers"]["X-AgentGit-Event"] == "stream.integrate"
    assert request["headers"]["X-AgentGit-Delivery"] == next(
        d["delivery"] for d in log if d["event"] == "stream.integrate"
    )
    assert request["headers"]["Content-Type"] == "application/json"


def test_a_receiver_that_fails_once_gets_it_again_and_the_log_shows_both_attempts(api, admin, receiver):
    flaky = receiver(statuses=[500])
    hook = add_hook(admin, flaky.url, ["stream.integrate"])
    api.land(api.write(None, {"a.txt": "a\n"}))

    (delivery,) = settled(admin, hook, 1)
    assert delivery["state"] == "delivered"
    assert [(a["number"], a["status_code"], a["ok"]) for a in delivery["attempts"]] == [(1, 500, False), (2, 200, True)]
    assert "500" in delivery["attempts"][0]["error"] and delivery["attempts"][1]["error"] == ""
    first, second = listening_bodies = flaky.requests
    assert first["body"] == second["body"] and len(listening_bodies) == 2
    assert first["headers"]["X-AgentGit-Delivery"] == second["headers"]["X-AgentGit-Delivery"]


def test_redelivery_sends_the_same_delivery_again_and_logs_the_attempt(api, admin, receiver):
    listening = receiver()
    hook = add_hook(admin, listening.url, ["stream.integrate"])
    api.land(api.write(None, {"a.txt": "a\n"}))
    (delivery,) = settled(admin, hook, 1)

    url = f"/api/v1/repos/demo/webhooks/{hook['id']}/deliveries/{delivery['id']}/redeliver"
    answer = admin.post(url, {}, format="json")
    assert answer.status_code == 202, answer.content
    assert answer.json()["state"] == "pending" and answer.json()["delivery"] == delivery["delivery"]
    (again,) = settled(admin, hook, 1)
    assert [a["number"] for a in again["attempts"]] == [1, 2] and again["state"] == "delivered"
    assert len(listening.requests) == 2
    assert listening.requests[0]["body"] == listening.requests[1]["body"]
    assert verified(listening.requests[1])["event"] == "stream.integrate"
    assert admin.post(url.replace(str(delivery["id"]), "999999"), {}, format="json").status_code == 404


def test_a_redirect_is_recorded_and_never_followed(api, admin, receiver):
    elsewhere = receiver()
    redirecting = receiver(statuses=[307], headers={"Location": elsewhere.url})
    hook = add_hook(admin, redirecting.url, ["stream.integrate"])
    api.land(api.write(None, {"a.txt": "a\n"}))
    (delivery,) = settled(admin, hook, 1)
    assert delivery["state"] == "failed"
    assert [(a["status_code"], a["ok"]) for a in delivery["attempts"]] == [(307, False)]
    assert elsewhere.requests == []


def test_a_slow_receiver_never_holds_a_landing(api, admin, receiver):
    slow = receiver()
    slow.release.clear()  # it answers nothing until the test says so
    hook = add_hook(admin, slow.url, ["stream.integrate"])

    outcome = api.land(api.write(None, {"a.txt": "a\n"}))
    assert outcome["outcome"] == "fast_forward" and api.head() == outcome["stream_head"]
    # The landing answered while its delivery was (or was about to be) waiting on the receiver.
    assert slow.arrived.wait(PATIENCE_S) and not slow.answered.is_set()
    slow.release.set()
    (delivery,) = settled(admin, hook, 1)
    assert delivery["state"] == "delivered"


def test_a_dead_receiver_never_fails_a_landing_and_its_failures_are_logged(api, admin, monkeypatch):
    monkeypatch.setattr(webhooks, "ATTEMPTS", 1)  # fail at the first refusal: no retries outlive the test
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/hook"
    hook = add_hook(admin, dead, ["stream.integrate"])
    base = api.write(None, {"a.txt": "a\n"})
    assert api.land(base)["outcome"] == "fast_forward"
    assert api.land(api.write(base, {"a.txt": "b\n"}))["outcome"] == "fast_forward"

    log = settled(admin, hook, 2)
    assert len(log) == 2
    for delivery in log:
        (attempt,) = delivery["attempts"]
        assert delivery["state"] == "failed"
        assert attempt["status_code"] is None and not attempt["ok"] and attempt["error"].startswith("unreachable")


def test_webhooks_are_admin_only_never_show_their_secret_and_refuse_bad_input(api, admin, client_for):
    hook = add_hook(admin, "https://ci.example/hook", ["check.requested"])
    assert "secret" not in hook
    listed = admin.get("/api/v1/repos/demo/webhooks").json()["webhooks"]
    assert listed == [hook] and SECRET not in json.dumps(listed)
    agent = client_for(["read", "write", "integrate", "checks"])
    assert agent.get("/api/v1/repos/demo/webhooks").status_code == 403
    body = {"url": "https://ci.example/x", "secret": SECRET, "events": ["*"]}
    assert agent.post("/api/v1/repos/demo/webhooks", body, format="json").status_code == 403
    for bad in (
        {"url": "file:///etc/passwd"},
        {"url": "javascript:alert(1)"},
        {"url": "http://"},
        {"events": ["stream.exploded"]},
        {"events": []},
        {"secret": ""},
        {"insecure": True},
    ):
        answer = admin.post("/api/v1/repos/demo/webhooks", {**body, **bad}, format="json")
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid", (bad, answer.content)
    assert admin.get("/api/v1/repos/demo/webhooks").json()["webhooks"] == [hook]


def test_deleting_a_webhook_stops_its_deliveries(api, admin, receiver):
    listening = receiver()
    hook = add_hook(admin, listening.url, ["*"])
    assert Repository.objects.get(name="demo").webhooks == 1
    assert admin.delete(f"/api/v1/repos/demo/webhooks/{hook['id']}").status_code == 204
    assert admin.delete(f"/api/v1/repos/demo/webhooks/{hook['id']}").status_code == 404
    assert Repository.objects.get(name="demo").webhooks == 0
    api.land(api.write(None, {"a.txt": "a\n"}))
    assert not WebhookDelivery.objects.exists() and listening.requests == []
