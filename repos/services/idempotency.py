"""Idempotency keys: a retried request does its work once and answers what the first did.

A client that lost an answer (a dropped connection, a timeout) cannot tell whether the work was
done. Sending the same ``Idempotency-Key`` again makes :func:`once` return the record the first
request wrote instead of acting a second time.

* The key's row is inserted in the transaction that does the work, and the work's record (the
  answer, or the ids it created) is written to it in that same transaction: a crash leaves
  either both or neither.
* The unique constraint on (credential, key) is the lock, not a check-then-act: a concurrent
  retry's insert waits for the first transaction (PostgreSQL's unique index; SQLite takes the
  write lock at BEGIN) and then finds the committed record.
* A refused request (any error) rolls back with its work, so nothing is recorded and a retry
  does the work afresh.
* Keys belong to a credential, and are forgotten ``AGENTGIT["IDEMPOTENCY_TTL_S"]`` seconds
  after their first use; the same key with a different request is refused (``invalid``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from ..errors import Invalid
from ..models import Credential, IdempotencyKey

#: The longest key accepted; UUIDs and ULIDs fit many times over.
MAX_KEY_LENGTH = 255
#: The ``details`` code of a key sent again with a different request.
KEY_REUSED = "idempotency_key_reused"


def check_key(key: str) -> str:
    """The key if it is 1-255 printable ASCII characters; Invalid otherwise."""
    if not 0 < len(key) <= MAX_KEY_LENGTH or not all(" " < c <= "~" for c in key):
        raise Invalid(f"an Idempotency-Key is 1-{MAX_KEY_LENGTH} printable ASCII characters without spaces")
    return key


def fingerprint(method: str, path: str, body: object) -> str:
    """What makes two requests the same: method, path and the body as canonical JSON."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(f"{method.upper()} {path}\n{canonical}".encode()).hexdigest()


def once(credential: Credential, key: str, request_fingerprint: str, act: Callable[[], dict]) -> tuple[dict, bool]:
    """``act()``'s record, from running it now or from the first request with this key.

    ``act`` runs inside the transaction that records the key and returns a JSON-able record;
    returns ``(record, replayed)``. Invalid if the key was first used for a different request.
    """
    check_key(key)
    now = timezone.now()
    with transaction.atomic():
        # Forget this credential's expired keys (the index makes it cheap), so one can be reused.
        IdempotencyKey.objects.filter(credential=credential, expires__lt=now).delete()
        try:
            with transaction.atomic():  # a savepoint: a lost race leaves the outer transaction usable
                row = IdempotencyKey.objects.create(
                    credential=credential,
                    key=key,
                    fingerprint=request_fingerprint,
                    expires=now + timedelta(seconds=settings.AGENTGIT["IDEMPOTENCY_TTL_S"]),
                )
        except IntegrityError:
            first = IdempotencyKey.objects.get(credential=credential, key=key)
            if first.fingerprint != request_fingerprint:
                raise Invalid(
                    f"the Idempotency-Key {key!r} was first used with a different request; use a new key",
                    details=[{"code": KEY_REUSED, "message": "same key, different method, path or body"}],
                ) from None
            return first.record, True
        row.record = act()
        row.save(update_fields=["record"])
    return row.record, False
