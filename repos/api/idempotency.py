"""The ``Idempotency-Key`` header of the API's creating requests (API.md; repos.services.idempotency).

``POST`` changesets, proposals, integrate and land accept it. A retry with the same key and the
same body answers what the first request did — the same status and body, with the header
``Idempotent-Replayed: true`` — and does nothing again; the same key with another body is
400 ``invalid`` (``details`` code ``idempotency_key_reused``). A request refused with an error
records nothing, so retrying it does the work afresh. An integration first answered 202 (still
queued) is the same operation on retry: the retry waits for it again; one that failed
``aborted`` (retryable) is integrated again by the retry, as ``aborted`` asks.
"""

from __future__ import annotations

from collections.abc import Callable

from drf_spectacular.utils import OpenApiParameter
from rest_framework.response import Response

from ..models import Operation, Repository
from ..services import idempotency, integration
from ..services.repositories import get_repository
from .base import json_body

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"

#: The header in the schema of every endpoint that honours it.
IDEMPOTENCY_KEY = OpenApiParameter(
    HEADER,
    # What repos.services.idempotency.check_key accepts: printable ASCII, no spaces.
    {"type": "string", "pattern": f"^[!-~]{{1,{idempotency.MAX_KEY_LENGTH}}}$"},
    location=OpenApiParameter.HEADER,
    description=(
        "Any unique string (a UUID) of 1-255 printable ASCII characters without spaces. A retry with the same key and body "
        "answers the first request's result (with `Idempotent-Replayed: true`) and does the work once; the same "
        "key with another body is 400 `invalid` (`idempotency_key_reused`). Keys are per credential and are "
        "forgotten after AGENTGIT_IDEMPOTENCY_TTL_S (default one day)."
    ),
)


def idempotent(request, act: Callable[[], dict], answer: Callable[[dict, bool], Response]) -> Response:
    """``answer(act())``, where ``act`` runs once per idempotency key.

    ``act`` does the work and returns a JSON-able record of it (written with the key, in the
    work's transaction); ``answer(record, replayed)`` turns a record into the response, the
    first time and on every retry, so it must not depend on anything but the record and
    immutable state.
    """
    key = request.headers.get(HEADER)
    if key is None:
        return answer(act(), False)
    signature = idempotency.fingerprint(request.method, request.path, json_body(request))
    record, replayed = idempotency.once(request.auth, key, signature, act)
    response = answer(record, replayed)
    if replayed:
        response[REPLAYED_HEADER] = "true"
    return response


def created(request, make: Callable[[], dict]) -> Response:
    """201 with the body ``make()`` builds (the new resource), once per idempotency key."""
    return idempotent(request, lambda: {"body": make()}, lambda record, _replayed: Response(record["body"], status=201))


def integration_of(
    repository: Repository | str, record: dict, replayed: bool, wait_s: float, in_hand: Operation | None = None
) -> Operation:
    """The recorded integration operation, waited for up to ``wait_s``: ``in_hand``, the one this
    request queued (and landed), is not read back, nor is the repository (given by name, it is
    read only to read the operation). A retry of one that failed with a retryable error
    (``aborted``: the proposal is untouched) asks to integrate again."""
    if in_hand is not None and not replayed:
        return integration.wait_for(in_hand, wait_s)
    if isinstance(repository, str):
        repository = get_repository(repository)
    operation = integration.get_operation(repository, record["operation"])
    if replayed and operation.state == Operation.State.FAILED and (operation.error or {}).get("retryable"):
        operation = integration.request_integration(operation.proposal)
    return integration.wait_for(operation, wait_s)
