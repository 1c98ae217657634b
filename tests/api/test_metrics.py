"""/metrics in process: who may scrape it, and what the services count.

Counters live in this test process's metrics directory for the whole run, so each test compares
a scrape after the action with one before it. Request counts come from the ASGI access log
middleware, which the test client bypasses: tests/api/test_observability.py counts them over
real servers.
"""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from repos.models import Operation, Proposal
from repos.services import integration

from .conftest import client_with

pytestmark = pytest.mark.django_db


def scrape(client: Client | None = None, **extra) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted labels): value}`` of one scrape from a loopback client."""
    response = (client or Client()).get("/metrics", **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return samples(response.content.decode())


def samples(text: str) -> dict[tuple[str, tuple], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return found


def value(scraped: dict, name: str, **labels: str) -> float:
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


def access(settings, mode: str) -> None:
    settings.AGENTGIT = {**settings.AGENTGIT, "METRICS_ACCESS": mode}


# ------------------------------------------------------------------------------ access


@pytest.mark.parametrize("address", ["127.0.0.1", "127.8.0.3", "::1", "::ffff:127.0.0.1"])
def test_local_mode_serves_loopback_clients(settings, address):
    access(settings, "local")
    assert Client(REMOTE_ADDR=address).get("/metrics").status_code == 200


@pytest.mark.parametrize("address", ["10.0.0.5", "2001:db8::1", ""])
def test_local_mode_refuses_everyone_else_even_with_an_admin_token(settings, address):
    access(settings, "local")
    admin = client_with(["admin"])
    response = admin.get("/metrics", REMOTE_ADDR=address)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert "AGENTGIT_METRICS_ACCESS" in response.json()["error"]["message"]


def test_local_is_the_default(settings):
    assert settings.AGENTGIT["METRICS_ACCESS"] == "local"
    assert Client(REMOTE_ADDR="192.0.2.7").get("/metrics").status_code == 403


def test_open_mode_serves_anyone_and_ignores_a_bad_token(settings):
    access(settings, "open")
    response = Client(REMOTE_ADDR="192.0.2.7").get("/metrics", HTTP_AUTHORIZATION="Bearer agt_not-a-token")
    assert response.status_code == 200


def test_scope_mode_needs_a_credential_with_the_metrics_scope(settings):
    access(settings, "scope")
    remote = {"REMOTE_ADDR": "192.0.2.7"}
    anonymous = Client().get("/metrics", **remote)
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "unauthenticated"
    reader = client_with(["read", "write", "integrate"]).get("/metrics", **remote)
    assert reader.status_code == 403 and reader.json()["error"]["code"] == "forbidden"
    assert client_with(["metrics"]).get("/metrics", **remote).status_code == 200
    assert client_with(["admin"]).get("/metrics", **remote).status_code == 200  # admin implies it
    # Not even from loopback without one: the scope mode is about who, not where.
    assert Client().get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 401


def test_the_metrics_scope_reads_no_repository():
    scraper = client_with(["metrics"])
    assert scraper.get("/api/v1/repos").status_code == 403


# ------------------------------------------------------------------------------ what is counted


def test_the_landing_queue_is_its_depth_and_the_age_of_its_oldest(api):
    assert value(scrape(), "agentgit_landing_queue_depth") == 0
    assert value(scrape(), "agentgit_landing_queue_oldest_seconds") == 0
    head = api.write(None, {"a.txt": "a\n"})
    # Queued as a worker would find them (an integrate request lands them itself when it may).
    for _ in range(3):
        proposal = Proposal.objects.get(pk=api.post("/proposals", {"stream": "main", "head": head}).json()["id"])
        Operation.objects.create(repository=proposal.repository, stream=proposal.stream, proposal=proposal)
    Operation.objects.filter(pk=Operation.objects.order_by("id").first().pk).update(
        created=timezone.now() - timedelta(seconds=90)
    )

    scraped = scrape()

    assert value(scraped, "agentgit_landing_queue_depth") == 3
    assert 90 <= value(scraped, "agentgit_landing_queue_oldest_seconds") < 120


def test_a_scrape_counts_no_table(api):
    """A scrape runs two queries: the queued operations, through their partial index, and the
    outbox's span, one index search per repository (the events are never counted)."""
    with CaptureQueriesContext(connection) as queries:
        scrape()
    statements = [query["sql"] for query in queries.captured_queries]
    assert len(statements) == 2
    assert "repos_operation" in statements[0] and "WHERE" in statements[0]
    with connection.cursor() as cursor:  # SQLite's plan: a search of the index, not a table scan
        cursor.execute("EXPLAIN QUERY PLAN " + statements[0].replace("%s", "'queued'"))
        plan = " ".join(str(row) for row in cursor.fetchall())
        assert "operation_queued_by_age" in plan
        assert "repos_event" in statements[1] and "COUNT" not in statements[1].upper()
        cursor.execute("EXPLAIN QUERY PLAN " + statements[1])
        plan = " ".join(str(row) for row in cursor.fetchall())
    assert "SCAN repos_event" not in plan and "USING COVERING INDEX sqlite_autoindex_repos_event" in plan, plan


@pytest.mark.django_db(transaction=True)
def test_integrations_are_counted_by_outcome_with_their_latency(api):
    before = scrape()
    base = api.write(None, {"a.txt": "a\n", "b.txt": "b\n"})
    ours, theirs = api.write(base, {"a.txt": "ours\n"}), api.write(base, {"b.txt": "theirs\n"})
    clash = api.write(base, {"a.txt": "clash\n"})
    outcomes = [api.land(head)["outcome"] for head in (base, ours, theirs, clash)]
    assert outcomes == ["fast_forward", "fast_forward", "merge", "conflict"]

    after = scrape()

    for outcome, landed in {"fast_forward": 2, "merge": 1, "conflict": 1}.items():
        total = "agentgit_integrations_total"
        assert value(after, total, outcome=outcome) - value(before, total, outcome=outcome) == landed
        count = "agentgit_integration_duration_seconds_count"
        assert value(after, count, outcome=outcome) - value(before, count, outcome=outcome) == landed
    assert value(after, "agentgit_landing_queue_depth") == 0


@pytest.mark.django_db(transaction=True)
def test_an_aborted_integration_is_counted_as_aborted(api, settings, monkeypatch):
    before = value(scrape(), "agentgit_integrations_total", outcome="aborted")
    head = api.write(None, {"a.txt": "a\n"})
    proposal = api.post("/proposals", {"stream": "main", "head": head}).json()["id"]

    def always_lose(stream_id, batch_size, held=None):
        raise integration._LostRace(0)

    monkeypatch.setattr(integration, "_land_once", always_lose)
    settings.AGENTGIT = {**settings.AGENTGIT, "INTEGRATE_ATTEMPTS": 2, "INTEGRATE_BACKOFF_MS": 0}
    assert api.post(f"/proposals/{proposal}/integrate").json()["error"]["code"] == "aborted"

    assert value(scrape(), "agentgit_integrations_total", outcome="aborted") - before == 1


def test_rate_limit_refusals_are_counted():
    before = value(scrape(), "agentgit_rate_limited_total")
    client = client_with(["read"], rate=0.01, burst=2)
    statuses = [client.get("/api/v1/repos").status_code for _ in range(5)]
    assert statuses == [200, 200, 429, 429, 429]
    assert value(scrape(), "agentgit_rate_limited_total") - before == 3


@pytest.mark.django_db(transaction=True)
def test_object_cache_lookups_are_counted_as_hits_and_misses(api):
    head = api.write(None, {"dir/a.txt": "a\n"})
    api.land(head)
    before = scrape()
    for _ in range(3):
        assert api.get("/tree/main", path="dir").status_code == 200

    after = scrape()

    lookups = "agentgit_object_cache_lookups_total"
    hits = value(after, lookups, cache="tree", result="hit") - value(before, lookups, cache="tree", result="hit")
    assert hits >= 3  # the trees were parsed when the changeset was written: every read hits
    assert value(after, lookups, cache="commit", result="hit") > value(before, lookups, cache="commit", result="hit")


@pytest.mark.django_db(transaction=True)
def test_the_event_feed_reports_its_relay_lag(api):
    api.land(api.write(None, {"a.txt": "a\n"}))
    before = value(scrape(), "agentgit_event_relay_lag_seconds_count")
    response = api.get("/events", timeout=0)
    sent = b"".join(response.streaming_content).count(b"\nevent: ")
    assert sent >= 3  # repository created, proposal opened, stream integrated

    after = scrape()

    assert value(after, "agentgit_event_relay_lag_seconds_count") - before == sent
    assert value(after, "agentgit_event_relay_lag_seconds_bucket", le="+Inf") >= sent


def test_the_reset_command_empties_the_metrics_directory(settings, tmp_path):
    directory = tmp_path / "metrics"
    (directory / "old").mkdir(parents=True)
    (directory / "counter_host-1.db").write_bytes(b"stale")
    settings.AGENTGIT = {**settings.AGENTGIT, "METRICS_DIR": directory}

    call_command("agentgit_metrics_reset", stdout=StringIO())

    assert directory.is_dir() and list(directory.iterdir()) == []
