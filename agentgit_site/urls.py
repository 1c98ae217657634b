"""Top-level URL routes.

/healthz and /readyz are unauthenticated, as probes expect; /metrics answers whom
AGENTGIT_METRICS_ACCESS allows (loopback clients by default).
"""

from django.contrib import admin
from django.urls import include, path

from agentgit_site.views import MetricsView, healthz, readyz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", MetricsView.as_view(), name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("repos.api.urls")),
    path("", include("repos.web.urls")),  # the web UI (repos/web/)
]

# Errors Django answers itself: the API's JSON error shape under /api/, Django's pages elsewhere.
handler400 = "repos.api.errors.bad_request"
handler404 = "repos.api.errors.not_found"
handler500 = "repos.api.errors.server_error"
