"""Site-level views that belong to no app: the probes and the metrics scrape."""

import os
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_safe
from rest_framework.views import APIView

from repos.services import metrics

#: Seconds a readiness check may wait for the broker.
BROKER_TIMEOUT_S = 1.0


@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness probe: answers without touching the database or authentication."""
    return JsonResponse({"status": "ok"})


@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness probe: the database answers, the object store root is writable and, when one is
    configured, the broker answers. 200 ``{"status": "ok", "checks": {...}}``, else 503 with
    ``"status": "unavailable"`` and each failing check's reason."""
    checks = {"database": _check(_database), "object_store": _check(_object_store), "broker": _check(_broker)}
    ok = all(result in ("ok", "not configured") for result in checks.values())
    return JsonResponse({"status": "ok" if ok else "unavailable", "checks": checks}, status=200 if ok else 503)


def _check(probe) -> str:
    try:
        return probe()
    except Exception as error:  # a probe reports every failure, whatever its kind
        return f"error: {type(error).__name__}: {error}"


def _database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return "ok"


def _object_store() -> str:
    # Exists and writable; or not created yet (no repository so far) under a writable parent.
    root = Path(settings.AGENTGIT["REPOS_DIR"])
    target = root if root.exists() else root.parent
    if not target.is_dir():
        return f"error: {target} is not a directory"
    if not os.access(target, os.W_OK | os.X_OK):
        return f"error: {target} is not writable"
    return "ok"


def _broker() -> str:
    url = getattr(settings, "CELERY_BROKER_URL", None)
    if not url:
        return "not configured"
    if url.startswith(("redis://", "rediss://", "unix://")):
        import redis  # prod.txt; only needed when a Redis broker is configured

        client = redis.Redis.from_url(url, socket_connect_timeout=BROKER_TIMEOUT_S, socket_timeout=BROKER_TIMEOUT_S)
        try:
            client.ping()
        finally:
            client.close()
        return "ok"
    from kombu import Connection

    with Connection(url, connect_timeout=BROKER_TIMEOUT_S) as broker:
        broker.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_S)
    return "ok"


class MetricsView(APIView):
    """Prometheus scrape (``GET /metrics``): every server and worker process's counters, summed,
    and the landing queue; served to whom ``AGENTGIT["METRICS_ACCESS"]`` allows."""

    schema = None  # an operations endpoint, not part of the API's contract
    permission_classes: list = []

    def get_authenticators(self):
        # Only the scope mode reads a credential; in the others a stray header is not an error.
        return super().get_authenticators() if settings.AGENTGIT["METRICS_ACCESS"] == "scope" else []

    def get(self, request) -> HttpResponse:
        metrics.check_scrape_access(request.META.get("REMOTE_ADDR"), request.auth)
        return HttpResponse(metrics.render(), content_type=metrics.CONTENT_TYPE)
