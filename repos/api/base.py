"""What every API view shares: the base class and the helpers that parse requests.

``ApiView`` authenticates (settings ``REST_FRAMEWORK``), checks the method's scope
(:mod:`.permissions`), refuses a body over ``AGENTGIT["MAX_BODY_BYTES"]`` from its Content-Length
before reading it, always answers JSON (no content negotiation: clients asking for other types
still get the JSON error shape). Requests are counted and logged around the whole application
(agentgit_site.observability), not here.

Bodies are parsed here rather than by DRF's parsers: JSON is read whatever the Content-Type
(``curl -d`` sends a form type), so a malformed body is always 400 ``invalid``, and raw-byte
endpoints read ``request.body`` directly. :func:`validated` checks a JSON body against its
serializer; :func:`page` pages a listing with opaque cursors (:mod:`.cursors`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.serializers import Serializer
from rest_framework.views import APIView

from ..errors import Invalid, TooLarge
from ..models import Repository
from ..services.repositories import get_repository
from . import cursors, serializers

DEFAULT_PAGE = 100
MAX_PAGE = 1000

PAGE_PARAMETERS = [
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
        description=f"Page size, 1-{MAX_PAGE} (default {DEFAULT_PAGE}).",
    ),
    OpenApiParameter(
        "cursor",
        {"type": "string", "pattern": cursors.PATTERN},
        description="The previous page's `next`, as it is (opaque, URL-safe).",
    ),
]


class JsonOnly(BaseContentNegotiation):
    """Always the first renderer (JSON): never a 406 for an Accept header we do not serve."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class ApiView(APIView):
    """Base of every authenticated API view."""

    #: Per-method scope overrides, e.g. ``{"POST": "admin"}`` (see permissions.required_scope).
    scopes: dict[str, str] = {}
    content_negotiation_class = JsonOnly
    #: For a view whose GET answer depends on the URL's arguments alone (no query, no body,
    #: nothing else of the request): a static method from those arguments to the answer's data,
    #: raising the API's errors. ``get`` answers with it, and the hot-read lane (:mod:`.hot`)
    #: calls it before Django's request cycle for a plain GET.
    read: Callable[..., Any] | None = None

    def initial(self, request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)  # authentication, then the scope check
        _check_length(request.META.get("CONTENT_LENGTH"))


def _check_length(header: str | None) -> None:
    if not header:
        return
    try:
        length = int(header)
    except ValueError:
        raise Invalid(f"Content-Length is not a number: {header!r}") from None
    limit = settings.AGENTGIT["MAX_BODY_BYTES"]
    if length > limit:
        raise TooLarge(f"the body is {length} bytes; the limit is {limit}")


def read_body(request) -> bytes:
    """The raw request body, within the size limit (``initial`` checked a declared Content-Length;
    a chunked body has none, so its length is checked here)."""
    body = request.body  # Django raises RequestDataTooBig past DATA_UPLOAD_MAX_MEMORY_SIZE
    limit = settings.AGENTGIT["MAX_BODY_BYTES"]
    if len(body) > limit:
        raise TooLarge(f"the body is {len(body)} bytes; the limit is {limit}")
    return body


def json_body(request) -> dict:
    """The body as a JSON object; an empty body is ``{}``."""
    raw = read_body(request)
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError both are
        raise Invalid(f"the body is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise Invalid(f"the body must be a JSON object, not {type(data).__name__}")
    return data


def validated(body: type[Serializer], request) -> dict:
    """The JSON body checked against its serializer (serializers.py, and so the schema): 400
    ``invalid`` with a detail for every field missing, unknown or not as documented."""
    return serializers.check(body, json_body(request))


def repository(name: str) -> Repository:
    """The repository named in the URL (404 ``not_found`` if none)."""
    return get_repository(name)


def query_number(request, name: str, default: float, *, low: float, high: float, kind=float) -> float:
    """A numeric query parameter within [low, high]; 400 ``invalid`` otherwise."""
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise Invalid(f"?{name}= is a number, not {raw!r}") from None
    if not low <= value <= high:
        raise Invalid(f"?{name}= is between {low} and {high}, not {raw}")
    return value


def required_query(request, name: str) -> str:
    value = request.query_params.get(name)
    if not value:
        raise Invalid(f"the query parameter ?{name}= is required")
    return value


def page(queryset, request, key: str, *, descending: bool = False, cursor_type: type = str) -> tuple[list, str | None]:
    """One page of ``queryset`` ordered by the unique ``key``, after ``?cursor=`` (keyset paging:
    rows added or removed meanwhile never shift a page); and the cursor of the next page, or None."""
    limit = int(query_number(request, "limit", DEFAULT_PAGE, low=1, high=MAX_PAGE, kind=int))
    cursor = request.query_params.get("cursor")
    if cursor:
        after = cursors.decode_key(cursor, cursor_type)
        queryset = queryset.filter(**{f"{key}__{'lt' if descending else 'gt'}": after})
    rows = list(queryset.order_by(f"-{key}" if descending else key)[: limit + 1])
    if len(rows) > limit:
        return rows[:limit], cursors.encode_key(getattr(rows[limit - 1], key))
    return rows, None
