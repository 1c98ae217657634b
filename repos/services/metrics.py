"""The server's metrics (``GET /metrics``): what is counted, where, and how a scrape sums it.

Every process counts into prometheus-client's **multiprocess** files (one set per process, in
``AGENTGIT["METRICS_DIR"]``, ``PROMETHEUS_MULTIPROC_DIR``): the ``uvicorn --workers`` server
processes, the Celery workers that land integrations, the embedded server that does both. A
scrape, answered by whichever server process the connection reached, reads every process's
files and sums them, so a counter means the same whichever process answers. The directory is
emptied when a deployment starts (:func:`reset_directory`: ``make serve``, ``manage.py
agentgit_metrics_reset``), never while processes run.

Counted where it happens (the ``observe_*`` functions and the counters below):

    agentgit_http_requests_total{method,route,status}      every request, WebSocket and SSE included
    agentgit_http_request_duration_seconds{method,route}   (histogram) until the response ended
    agentgit_integrations_total{outcome}                   landed: fast_forward, merge, conflict,
                                                           already_integrated; failed; aborted
    agentgit_integration_duration_seconds{outcome}         (histogram) from the request to integrate
                                                           to its outcome committed
    agentgit_rate_limited_total                            requests refused with 429 rate_limited
    agentgit_shed_requests_total                           requests refused with 503 by load shedding
    agentgit_event_relay_lag_seconds                       (histogram) from an event's creation to
                                                           a server process's relay receiving it
    agentgit_object_cache_lookups_total{cache,result}      the engine's parsed tree and commit caches
    agentgit_sql_statements_total                          SQL statements run, only when
                                                           AGENTGIT_COUNT_STATEMENTS=1 (a benchmark's)

Read at scrape time, from the database, in bounded time (an index on queued operations; never
a count over a whole table):

    agentgit_landing_queue_depth                           operations queued
    agentgit_landing_queue_oldest_seconds                  age of the oldest queued operation
    agentgit_outbox_events                                 events kept in the outbox (ids' span)

Repack state is counted by the process that runs maintenance (runs by outcome, their duration, the
loose objects rolled up): O(1) at scrape time, whatever the number of repositories.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, values
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

from ..errors import Forbidden, Unauthenticated
from ..models import Credential, Operation
from .credentials import require_scope
from .events import outbox_span
from .stores import CACHE_STATS

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# -- multiprocess mode ------------------------------------------------------------------------
#
# prometheus-client picks where a value lives when the metric is created: mmap files in
# PROMETHEUS_MULTIPROC_DIR, named by a process identifier. The identifier is host and pid, not
# the pid alone, so processes of several machines sharing one data directory never share a file.

_DIRECTORY = Path(settings.AGENTGIT["METRICS_DIR"])
_DIRECTORY.mkdir(parents=True, exist_ok=True)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(_DIRECTORY)
_HOST = "".join(c if c.isalnum() or c in ".-" else "-" for c in socket.gethostname()) or "host"


def _identify() -> None:
    global _identity
    _identity = f"{_HOST}-{os.getpid()}"


# prometheus-client asks for the identifier on every increment (3 a request) to notice a fork:
# made once, and again in a forked child, rather than from os.getpid() on each (docs/adr/0025).
_identity = ""
_identify()
os.register_at_fork(after_in_child=_identify)


def _process_identifier() -> str:
    return _identity


values.ValueClass = values.MultiProcessValue(process_identifier=_process_identifier)

#: Latency buckets, seconds: most API calls take milliseconds; integrations and feeds can take longer.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# Created unregistered: in multiprocess mode a scrape reads the files, never these objects.
REQUESTS = Counter(
    "agentgit_http_requests", "Requests answered, by method, route and status.", ["method", "route", "status"],
    registry=None,
)  # fmt: skip
REQUEST_SECONDS = Histogram(
    "agentgit_http_request_duration_seconds", "Time from a request's arrival to the end of its answer.",
    ["method", "route"], buckets=BUCKETS, registry=None,
)  # fmt: skip
INTEGRATIONS = Counter("agentgit_integrations", "Integrations landed, by outcome.", ["outcome"], registry=None)
INTEGRATION_SECONDS = Histogram(
    "agentgit_integration_duration_seconds", "Time from the request to integrate to its outcome committed.",
    ["outcome"], buckets=BUCKETS, registry=None,
)  # fmt: skip
RATE_LIMITED = Counter(
    "agentgit_rate_limited", "Requests refused because the credential's bucket was empty.", registry=None
)
SHED = Counter("agentgit_shed_requests", "Requests refused by load shedding (503 unavailable).", registry=None)
EVENT_RELAY_LAG = Histogram(
    "agentgit_event_relay_lag_seconds", "Time from an event's creation to a feed sending it.", buckets=BUCKETS,
    registry=None,
)  # fmt: skip
REPACKS = Counter(
    "agentgit_repacks", "Maintenance runs over a repository (done, skipped, failed).", ["outcome"], registry=None
)
REPACK_SECONDS = Histogram("agentgit_repack_duration_seconds", "Time a repack took.", buckets=BUCKETS, registry=None)
LOOSE_OBJECTS_PACKED = Counter(
    "agentgit_loose_objects_packed", "Loose objects maintenance rolled up into packs.", registry=None
)
CACHE_LOOKUPS = Counter(
    "agentgit_object_cache_lookups", "Lookups of the engine's parsed-object caches.", ["cache", "result"],
    registry=None,
)  # fmt: skip
SQL_STATEMENTS = Counter(
    "agentgit_sql_statements", "SQL statements run (only with AGENTGIT_COUNT_STATEMENTS=1).", registry=None
)

#: The cache lookups already added to CACHE_LOOKUPS (CACHE_STATS counts them in the engine).
_cache_reported: dict[tuple[str, bool], int] = {}
_cache_lock = threading.Lock()


def reset_directory(directory: Path | None = None) -> Path:
    """Empty the metrics directory (made if missing). Only before the deployment's processes
    start: a process that is running keeps writing into the files it opened."""
    directory = Path(directory or settings.AGENTGIT["METRICS_DIR"])
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


# -- counted where it happens -----------------------------------------------------------------


#: (method, route, status) → its counter and histogram: labels() validates on every call.
_request_series: dict[tuple[str, str, int], tuple] = {}


def observe_request(method: str, route: str, status: int, seconds: float) -> None:
    """One answered request (the access log's middleware calls this for every surface)."""
    series = _request_series.get((method, route, status))
    if series is None:
        series = REQUESTS.labels(method, route, str(status)), REQUEST_SECONDS.labels(method, route)
        _request_series[method, route, status] = series
    series[0].inc()
    series[1].observe(seconds)
    _report_cache_lookups()


def observe_integrations(finished: Iterable[tuple[str, datetime, datetime]]) -> None:
    """Committed integrations: ``(outcome, requested, finished)`` each."""
    for outcome, requested, done in finished:
        INTEGRATIONS.labels(outcome).inc()
        INTEGRATION_SECONDS.labels(outcome).observe(max(0.0, (done - requested).total_seconds()))
    _report_cache_lookups()


def observe_rate_limited() -> None:
    RATE_LIMITED.inc()


def observe_shed() -> None:
    SHED.inc()


def observe_repack(outcome: str, seconds: float, loose_before: int, loose_after: int) -> None:
    """One maintenance run over a repository (repos.services.maintenance)."""
    REPACKS.labels(outcome).inc()
    if outcome == "done":
        REPACK_SECONDS.observe(seconds)
        LOOSE_OBJECTS_PACKED.inc(max(0, loose_before - loose_after))


def observe_relayed(created: Iterable[datetime]) -> None:
    """Events a relay is handing to its subscribers now, by their creation times."""
    now = timezone.now()
    for moment in created:
        EVENT_RELAY_LAG.observe(max(0.0, (now - moment).total_seconds()))


def _report_cache_lookups() -> None:
    """Add the cache lookups counted since the last report to the multiprocess counters.

    The engine counts in plain integers (it imports no metrics library); they reach the files
    here, after each request and landing and at each scrape: four comparisons when nothing changed.
    """
    with _cache_lock:
        for (cache, hit), total in CACHE_STATS.snapshot().items():
            new = total - _cache_reported.get((cache, hit), 0)
            if new:
                CACHE_LOOKUPS.labels(cache, "hit" if hit else "miss").inc(new)
                _cache_reported[cache, hit] = total


def _count_statement(execute: Callable, sql: str, params: object, many: bool, context: dict) -> object:
    SQL_STATEMENTS.inc()
    return execute(sql, params, many, context)


def _count_on(connection: object, **_kwargs: object) -> None:
    wrappers = connection.execute_wrappers  # type: ignore[attr-defined]
    if _count_statement not in wrappers:  # a connection object outlives its reconnections
        wrappers.append(_count_statement)


def count_statements() -> None:
    """Count every SQL statement of this process's connections into SQL_STATEMENTS (called at
    start-up when AGENTGIT["COUNT_STATEMENTS"] is on: nothing is wrapped otherwise)."""
    from django.db.backends.signals import connection_created

    connection_created.connect(_count_on, dispatch_uid="agentgit-count-statements")


# -- read at scrape time ----------------------------------------------------------------------


def landing_queue() -> Iterator[Metric]:
    """Depth and age of the landing queue: one aggregate over the queued operations only
    (the partial index ``operation_queued_by_age``), however many operations have finished."""
    queued = Operation.objects.filter(state=Operation.State.QUEUED).aggregate(depth=Count("id"), oldest=Min("created"))
    age = 0.0 if queued["oldest"] is None else max(0.0, (timezone.now() - queued["oldest"]).total_seconds())
    yield GaugeMetricFamily("agentgit_landing_queue_depth", "Integrations queued, not yet landed.", queued["depth"])
    yield GaugeMetricFamily(
        "agentgit_landing_queue_oldest_seconds", "Age of the oldest queued integration (0: none queued).", age
    )


def outbox() -> Iterator[Metric]:
    """The events the outbox holds (what retention keeps): one index lookup per repository."""
    yield GaugeMetricFamily("agentgit_outbox_events", "Events kept in the outbox (before pruning).", outbox_span())


#: Scrape-time readings of shared state (the database), computed by the process answering the
#: scrape.
SCRAPE_COLLECTORS: list[Callable[[], Iterable[Metric]]] = [landing_queue, outbox]


class _Readings:
    """The scrape-time collectors as one prometheus-client collector."""

    def collect(self) -> Iterator[Metric]:
        for collector in SCRAPE_COLLECTORS:
            yield from collector()


def render() -> bytes:
    """The whole exposition: every process's counters, summed, then the scrape-time readings."""
    _report_cache_lookups()
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(_DIRECTORY))
    registry.register(_Readings())
    return generate_latest(registry)


# -- who may scrape ---------------------------------------------------------------------------


def check_scrape_access(client_address: str | None, credential: Credential | None) -> None:
    """Raise unless ``AGENTGIT["METRICS_ACCESS"]`` lets this client scrape.

    ``local``: the connection comes from a loopback address (behind a proxy on the same machine
    that sends ``X-Forwarded-For``, uvicorn puts the real client here). ``open``: anyone.
    ``scope``: a credential with the ``metrics`` scope.
    """
    mode = settings.AGENTGIT["METRICS_ACCESS"]
    if mode == "open":
        return
    if mode == "local":
        if not _is_loopback(client_address):
            raise Forbidden("metrics are served to loopback clients only (AGENTGIT_METRICS_ACCESS=local)")
        return
    if credential is None:
        raise Unauthenticated("metrics need a credential with the metrics scope: send 'Authorization: Bearer <token>'")
    require_scope(credential, "metrics")


def _is_loopback(address: str | None) -> bool:
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return False  # no TCP peer (a Unix socket) or not an address: not known to be local
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback
