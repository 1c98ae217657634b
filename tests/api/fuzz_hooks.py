"""Schemathesis hooks for the schema fuzz run (tests/api/test_schema_fuzz.py); loaded by the
schemathesis process, not by pytest.

The event feed holds a request open for ``?timeout=`` seconds (25 by default) when no event is
due, so the run asks for :data:`FEED_SECONDS` (what is there, then the end): a valid ``timeout`` is
lowered and a missing one added. Invalid values are sent as generated, so refusing them is still
tested.

An ``Idempotency-Key`` is a unique string by contract: the generator draws the same short keys
("0") for different bodies, which the server rightly refuses as a reused key. A valid key is made
unique per request (an invalid one is sent as generated, so refusing it is still tested).
"""

from __future__ import annotations

import math
import re
import uuid

import schemathesis

FEED_SECONDS = 0.0


def _documented_maximum(case) -> float:
    for parameter in case.operation.definition.raw.get("parameters", []):
        if parameter.get("name") == "timeout":
            return float(parameter["schema"]["maximum"])
    return 0.0


VALID_KEY = re.compile(r"[!-~]{1,255}")


@schemathesis.hook
def before_call(context, case, kwargs) -> None:
    key = (case.headers or {}).get("Idempotency-Key")
    if isinstance(key, str) and VALID_KEY.fullmatch(key):
        case.headers = {**case.headers, "Idempotency-Key": uuid.uuid4().hex}
    if not case.path.endswith("/events"):
        return
    query = dict(case.query or {})
    raw = query.get("timeout")
    try:
        seconds = 0.0 if raw in (None, "") else float(raw)
    except (TypeError, ValueError):
        return  # not a number: the server must refuse it, and then the request ends at once
    if raw in (None, "") or (math.isfinite(seconds) and FEED_SECONDS < seconds <= _documented_maximum(case)):
        query["timeout"] = FEED_SECONDS
        case.query = query
