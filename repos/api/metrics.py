"""Prometheus metrics in the text exposition format (version 0.0.4), without a client library.

Two sources:

* the database, read at scrape time: repositories, streams, proposals and operations by state,
  events (gauges, and a counter for events since sequence numbers only grow);
* this process's API requests, counted as they finish: ``agentgit_http_requests_total`` by
  method, endpoint and status, and ``agentgit_http_request_duration_seconds`` (a histogram by
  endpoint). Each server process counts its own; Prometheus sums them across scrape targets.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict

from django.db.models import Count

from ..models import Event, Operation, Proposal, Repository, Stream

#: Histogram bucket upper bounds, seconds (small: most API calls take milliseconds).
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_lock = threading.Lock()
_requests: dict[tuple[str, str, str], int] = defaultdict(int)
# endpoint → (count per bucket, +Inf last; sum; count)
_durations: dict[str, list] = {}


def observe_request(method: str, endpoint: str, status: int, seconds: float) -> None:
    """Count one finished API request."""
    with _lock:
        _requests[(method, endpoint, str(status))] += 1
        histogram = _durations.get(endpoint)
        if histogram is None:
            histogram = _durations[endpoint] = [[0] * (len(BUCKETS) + 1), 0.0, 0]
        histogram[0][bisect.bisect_left(BUCKETS, seconds)] += 1
        histogram[1] += seconds
        histogram[2] += 1


def render() -> str:
    """The whole exposition: database gauges, then this process's request metrics."""
    lines: list[str] = []
    _family(lines, "agentgit_repositories", "gauge", "Repositories.", [({}, Repository.objects.count())])
    _family(lines, "agentgit_streams", "gauge", "Streams, over all repositories.", [({}, Stream.objects.count())])
    _family(lines, "agentgit_proposals", "gauge", "Proposals by state.", _by_state(Proposal))
    _family(lines, "agentgit_operations", "gauge", "Integration operations by state.", _by_state(Operation))
    events = [({}, Event.objects.count())]
    _family(lines, "agentgit_events_total", "counter", "Events recorded, over all repositories.", events)
    with _lock:
        requests = sorted(_requests.items())
        durations = {endpoint: (list(h[0]), h[1], h[2]) for endpoint, h in sorted(_durations.items())}
    _family(
        lines,
        "agentgit_http_requests_total",
        "counter",
        "API requests served by this process.",
        [({"method": m, "endpoint": e, "status": s}, n) for (m, e, s), n in requests],
    )
    lines.append("# HELP agentgit_http_request_duration_seconds API request latency in this process.")
    lines.append("# TYPE agentgit_http_request_duration_seconds histogram")
    for endpoint, (counts, total, count) in durations.items():
        cumulative = 0
        for bound, n in zip([*BUCKETS, None], counts):
            cumulative += n
            le = "+Inf" if bound is None else repr(bound)
            labels = _labels({"endpoint": endpoint, "le": le})
            lines.append(f"agentgit_http_request_duration_seconds_bucket{labels} {cumulative}")
        lines.append(f"agentgit_http_request_duration_seconds_sum{_labels({'endpoint': endpoint})} {total!r}")
        lines.append(f"agentgit_http_request_duration_seconds_count{_labels({'endpoint': endpoint})} {count}")
    return "\n".join(lines) + "\n"


def _by_state(model) -> list[tuple[dict, int]]:
    counts = dict(model.objects.values_list("state").annotate(n=Count("id")).order_by())
    return [({"state": state}, counts.get(state, 0)) for state in model.State.values]


def _family(lines: list[str], name: str, kind: str, help_text: str, samples: list[tuple[dict, float]]) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")
    for labels, value in samples:
        lines.append(f"{name}{_labels(labels)} {value}")


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{_escape(str(value))}"' for key, value in labels.items()) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
