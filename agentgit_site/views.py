"""Site-level views that belong to no app."""

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_safe


@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness probe: answers without touching the database or authentication."""
    return JsonResponse({"status": "ok"})
