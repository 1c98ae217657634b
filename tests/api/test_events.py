"""Server-Sent Events: integration events in order, resumable without gaps or duplicates."""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.db import connection

from repos.services import events as sse

pytestmark = pytest.mark.django_db(transaction=True)


def read_events(api, **params) -> tuple[list[dict], bytes]:
    """GET the event stream (with a short timeout) and parse it: [{"id", "event", "data"}], raw bytes."""
    headers = {}
    if "last_event_id" in params:
        headers["HTTP_LAST_EVENT_ID"] = str(params.pop("last_event_id"))
    response = api.client.get(api.url("/events"), {"timeout": 0.3, **params}, **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/event-stream")
    assert response["Cache-Control"] == "no-cache"
    raw = b"".join(response.streaming_content)
    parsed = []
    for block in raw.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if fields:
            parsed.append({"id": int(fields["id"]), "event": fields["event"], "data": json.loads(fields["data"])})
    return parsed, raw


def test_integration_events_arrive_in_order_with_increasing_ids(api):
    base = api.write(None, {"f.txt": "x\n"})
    outcome = api.land(base)

    events, _ = read_events(api)

    ids = [e["id"] for e in events]
    assert ids == sorted(ids) and ids == list(range(1, len(ids) + 1))
    kinds = [e["event"] for e in events]
    assert kinds[:2] == ["repository.created", "stream.created"]
    assert kinds[-2:] == ["proposal.opened", "stream.integrate"]
    integrate = events[-1]["data"]
    assert integrate["stream"] == "main" and integrate["outcome"] == "fast_forward"
    assert integrate["head"] == outcome["stream_head"] and integrate["changeset"] == base
    assert integrate["seq"] == events[-1]["id"] and integrate["created"].endswith("Z")


def test_last_event_id_resumes_without_gaps_or_duplicates(api):
    first = api.write(None, {"f.txt": "1\n"})
    api.land(first)
    seen, _ = read_events(api)

    second = api.write(first, {"f.txt": "2\n"})
    api.land(second)
    resumed, _ = read_events(api, last_event_id=seen[-1]["id"])
    by_query, _ = read_events(api, after=seen[-1]["id"])
    everything, _ = read_events(api)

    assert [e["id"] for e in resumed] == list(range(seen[-1]["id"] + 1, everything[-1]["id"] + 1))
    assert seen + resumed == everything
    assert by_query == resumed
    assert resumed[-1]["data"]["head"] == second


def test_the_header_wins_over_the_query(api):
    events, _ = read_events(api, last_event_id=1, after=0)

    assert [e["id"] for e in events] == [2]


def test_a_quiet_stream_sends_keep_alive_comments(api, monkeypatch):
    monkeypatch.setattr(sse, "KEEPALIVE_S", 0.05)

    events, raw = read_events(api, after=2)

    assert events == []
    assert b": keep-alive\n\n" in raw


def test_events_stream_new_events_while_connected(api):
    """The feed polls: an event committed after the stream began still arrives, promptly."""
    head = api.write(None, {"f.txt": "x\n"})
    response = api.client.get(api.url("/events"), {"timeout": 10, "after": 2})
    chunks = iter(response.streaming_content)

    def propose_later():
        time.sleep(0.3)
        try:
            api.propose(head)
        finally:
            connection.close()

    writer = threading.Thread(target=propose_later)
    started = time.monotonic()
    writer.start()
    chunk = next(chunks)
    writer.join()

    assert chunk.startswith(b"id: 3\nevent: proposal.opened\n")
    assert 0.3 <= time.monotonic() - started < 5
    response.close()
