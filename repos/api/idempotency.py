"""The ``Idempotency-Key`` header of the API's creating requests (API.md; repos.services.idempotency).

``POST`` changesets, proposals, integrate and land accept it. A retry with the same key and the
same body answers what the first request did — the same status and body, with the header
``Idempotent-Replayed: true`` — and does nothing again; the same key with another body is
400 ``invalid`` (``details`` code ``idempotency_key_reused``). A request refused with an error
records nothing, so retrying it does the work afresh. An integration first answered 202 (still
queued) is the same operation on retry: the retry waits for it again.
"""

from __future__ import annotations

from collections.abc import Callable

from drf_spectacular.utils import OpenApiParameter
from rest_framework.response import Response

from ..services import idempotency
from .base import json_body

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"

#: The header in the schema of every endpoint that honours it.
IDEMPOTENCY_KEY = OpenApiParameter(
    HEADER,
    str,
    location=OpenApiParameter.HEADER,
    description=(
        "Any unique string (a UUID) of at most 255 printable characters. A retry with the same key and body "
        "answers the first request's result (with `Idempotent-Replayed: true`) and does the work once; the same "
        "key with another body is 400 `invalid` (`idempotency_key_reused`). Keys are per credential and are "
        "forgotten after AGENTGIT_IDEMPOTENCY_TTL_S (default one day)."
    ),
)


def idempotent(request, act: Callable[[], dict], answer: Callable[[dict], Response]) -> Response:
    """``answer(act())``, where ``act`` runs once per idempotency key.

    ``act`` does the work and returns a JSON-able record of it (written with the key, in the
    work's transaction); ``answer`` turns a record into the response, the first time and on
    every retry, so it must not depend on anything but the record and immutable state.
    """
    key = request.headers.get(HEADER)
    if key is None:
        return answer(act())
    signature = idempotency.fingerprint(request.method, request.path, json_body(request))
    record, replayed = idempotency.once(request.auth, key, signature, act)
    response = answer(record)
    if replayed:
        response[REPLAYED_HEADER] = "true"
    return response


def created(request, make: Callable[[], dict]) -> Response:
    """201 with the body ``make()`` builds (the new resource), once per idempotency key."""
    return idempotent(request, lambda: {"body": make()}, lambda record: Response(record["body"], status=201))
