"""/metrics in the production mode: what the Celery workers count reaches a scrape of the server.

``uvicorn --workers 2`` on PostgreSQL and a ``celery worker`` (prefork, two children) on Redis
share one metrics directory; integrations are counted by the worker child that landed them.
"""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .support import LANDING_TIMEOUT_S, ApiClient, stream_held


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    text = httpx.get(f"{url}/metrics", trust_env=False, timeout=30).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_the_queue_and_the_integrations_the_workers_land_are_in_the_servers_scrape(production):
    with ApiClient(production.url, production.token) as client:
        client.create_repo("metered")
        head = client.write("metered", None, {"a.txt": "a\n"}, "first")
        first = client.open_proposal("metered", head)["id"]
        with stream_held(production, "metered", "main"):  # as a worker landing it holds it
            queued = client.integrate_raw("metered", first, wait=0.2)
        assert queued.status_code == 202  # no worker yet: it waits in the queue

        waiting = scrape(production.url)
        assert waiting["agentgit_landing_queue_depth", ()] == 1
        assert waiting["agentgit_landing_queue_oldest_seconds", ()] > 0

        production.start_worker(concurrency=2)
        assert client.wait_operation("metered", queued.json()["operation"], LANDING_TIMEOUT_S)["state"] == "done"
        for number in range(3):
            head = client.write("metered", head, {f"f{number}.txt": "x\n"}, f"change {number}")
            assert client.integrate("metered", client.open_proposal("metered", head)["id"])["outcome"] == "fast_forward"

    landed = scrape(production.url)
    assert landed["agentgit_landing_queue_depth", ()] == 0
    assert landed["agentgit_integrations_total", (("outcome", "fast_forward"),)] == 4
    assert landed["agentgit_integration_duration_seconds_count", (("outcome", "fast_forward"),)] == 4
    # The object caches (of the servers writing changesets, and of the worker landing them) count.
    assert sum(value for (name, _), value in landed.items() if name == "agentgit_object_cache_lookups_total") > 0
