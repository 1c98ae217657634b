"""Webhooks: a repository's events of the chosen kinds, POSTed to outside URLs, signed.

A webhook is ``{"url", "secret", "events"}``, set by an admin. Deliveries are made from the event
outbox (repos/services/events.py) in its order: each webhook keeps a cursor, the last event it
has been handed, and :func:`pump` turns the events after it into :class:`WebhookDelivery` rows
(one per webhook and event: a constraint) and advances it, in one transaction. An event that
commits in a repository with webhooks schedules a pump once its transaction commits
(:func:`deliver_on_commit`, called by ``append_event``); a repository without webhooks pays
nothing (its row says how many it has).

Each delivery is sent on its own (:data:`SEND`, a detached job: the Celery workers, or a thread
of this process on the embedded default), so a slow or dead receiver never holds or fails the
landing whose event it carries. Its body is JSON ``{"event", "id", "repository", "data"}`` (the
event as the feeds send it), signed as GitHub signs its own: ``X-AgentGit-Signature-256:
sha256=<hex HMAC-SHA256 of the body under the secret>``, with ``X-AgentGit-Event`` and
``X-AgentGit-Delivery`` (a UUID, the same on every attempt). Every attempt is recorded (status
code or error, duration). A 2xx answer delivers it; a 5xx, 408, 425, 429 or no answer is tried
again with exponential backoff, up to :data:`ATTEMPTS` tries; any other answer (a redirect,
which is never followed, or a refusal) fails it at once. An admin can redeliver any delivery
that is not pending.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import re
import time
import uuid
from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction
from django.db.models import F, Prefetch, QuerySet
from django.utils import timezone

from ..errors import Invalid, NotFound, WrongState
from ..models import Event, Repository, Webhook, WebhookAttempt, WebhookDelivery
from .dispatch import Job, Retry, after_commit
from .events import KINDS, wire

logger = logging.getLogger(__name__)

#: A destination: http or https, a host, then anything printable. Nothing else is ever sent to.
URL_PATTERN = r"^https?://[^\x00-\x20\x7f/?#\\]+(?:[/?#][^\x00-\x20\x7f]*)?$"
URL_MAX_LENGTH = 2000
SECRET_MAX_LENGTH = 256
#: Every kind of event.
ALL_EVENTS = "*"
#: Tries of one delivery (the first and the retries); a redelivery gets as many again.
ATTEMPTS = 8
#: Events turned into deliveries per transaction of :func:`pump`.
PUMP_BATCH = 500
#: A pending delivery not tried for this long lost its job (a crash): the next pump sends it.
STALE_AFTER = timedelta(minutes=15)
#: Answers worth trying again: the receiver is busy, or failed this time.
RETRY_STATUSES = frozenset({408, 425, 429})
#: The most of an answer read (and dropped: only its status is recorded).
ANSWER_LIMIT = 64 * 1024

SIGNATURE_HEADER = "X-AgentGit-Signature-256"
EVENT_HEADER = "X-AgentGit-Event"
DELIVERY_HEADER = "X-AgentGit-Delivery"

_URL = re.compile(URL_PATTERN)


class DeliveryFailed(Exception):
    """This attempt failed and another is due (the job's retry policy schedules it)."""


# ----------------------------------------------------------------------------- configuration


def list_webhooks(repository: Repository) -> QuerySet[Webhook]:
    return Webhook.objects.filter(repository=repository).order_by("id")


def get_webhook(repository: Repository, webhook_id: object) -> Webhook:
    found = Webhook.objects.filter(repository=repository, pk=_number(webhook_id)).first()
    if found is None:
        raise NotFound(f"no webhook {webhook_id} in {repository.name}")
    return found


def create_webhook(repository: Repository, body: dict) -> Webhook:
    """A new webhook ``{"url", "secret", "events"}``: told of the events after this one commits."""
    unknown = sorted(set(body) - {"url", "secret", "events"})
    if unknown:
        raise Invalid(f"unknown field(s): {', '.join(unknown)}", details=[{"field": f} for f in unknown])
    url, secret, events = check_url(body.get("url"), "url"), body.get("secret"), body.get("events")
    if not isinstance(secret, str) or not 1 <= len(secret) <= SECRET_MAX_LENGTH or "\x00" in secret:
        raise Invalid(f"secret is 1-{SECRET_MAX_LENGTH} characters (the HMAC key of the signatures)")
    if not isinstance(events, list) or not events or not all(isinstance(kind, str) for kind in events):
        raise Invalid(f"events is a non-empty list of event kinds ({ALL_EVENTS!r}: every kind)")
    unknown_kinds = sorted(set(events) - {*KINDS, ALL_EVENTS})
    if unknown_kinds:
        message = f"unknown event kind(s): {', '.join(unknown_kinds)}; the kinds are {', '.join(KINDS)}"
        raise Invalid(message, details=[{"field": "events", "kind": kind} for kind in unknown_kinds])
    with transaction.atomic():
        # The count first: it takes the repository row's lock, which every event's numbering
        # takes too, so the cursor read next is exactly the last event before this webhook.
        Repository.objects.filter(pk=repository.pk).update(webhooks=F("webhooks") + 1)
        cursor = Repository.objects.values_list("event_seq", flat=True).get(pk=repository.pk)
        return Webhook.objects.create(
            repository=repository, url=url, secret=secret, events=list(dict.fromkeys(events)), cursor=cursor
        )


def delete_webhook(repository: Repository, webhook_id: object) -> None:
    """Remove a webhook and its delivery log; deliveries under way may still be sent once."""
    with transaction.atomic():
        deleted, _ = Webhook.objects.filter(repository=repository, pk=_number(webhook_id)).delete()
        if not deleted:
            raise NotFound(f"no webhook {webhook_id} in {repository.name}")
        Repository.objects.filter(pk=repository.pk).update(webhooks=F("webhooks") - 1)


def check_url(url: object, field: str) -> str:
    """``url`` if it is an http or https URL of at most :data:`URL_MAX_LENGTH` characters."""
    if not isinstance(url, str) or len(url) > URL_MAX_LENGTH or not _URL.match(url):
        raise Invalid(f"{field} is an http:// or https:// URL of at most {URL_MAX_LENGTH} characters")
    return url


def _number(raw: object) -> int:
    try:
        return int(raw)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 0  # no row has it


# ----------------------------------------------------------------------------- the delivery log


def deliveries(webhook: Webhook) -> QuerySet[WebhookDelivery]:
    """A webhook's deliveries, newest first, each with its attempts."""
    attempts = Prefetch("attempt_log", queryset=WebhookAttempt.objects.order_by("number"))
    return WebhookDelivery.objects.filter(webhook=webhook).prefetch_related(attempts)


def get_delivery(webhook: Webhook, delivery_id: object) -> WebhookDelivery:
    found = deliveries(webhook).filter(pk=_number(delivery_id)).first()
    if found is None:
        raise NotFound(f"no delivery {delivery_id} of webhook {webhook.pk}")
    return found


def redeliver(delivery: WebhookDelivery) -> WebhookDelivery:
    """Send a delivery again, as it was (same body, same ``X-AgentGit-Delivery``), with
    :data:`ATTEMPTS` more tries; refused while it is still pending."""
    with transaction.atomic():
        locked = WebhookDelivery.objects.select_for_update().get(pk=delivery.pk)
        if locked.state == WebhookDelivery.State.PENDING:
            raise WrongState(f"delivery {locked.pk} is still being delivered (attempt {locked.attempts})")
        locked.state = WebhookDelivery.State.PENDING
        locked.last_attempt = locked.attempts + ATTEMPTS
        locked.save(update_fields=["state", "last_attempt", "updated"])
        after_commit(SEND, locked.pk)
    return get_delivery(delivery.webhook, delivery.pk)


# ----------------------------------------------------------------------------- from the outbox


def deliver_on_commit(repository_id: int) -> None:
    """Make the deliveries of the repository's new events once the transaction commits."""
    after_commit(PUMP, repository_id)


def pump(repository_id: int) -> int:
    """Turn the repository's events after each webhook's cursor into its deliveries, in order,
    and schedule them; also send again what a crash left pending. Returns how many it made.
    Idempotent: the cursors move in the transaction that makes the deliveries."""
    with transaction.atomic():
        hooks = list(Webhook.objects.select_for_update().filter(repository_id=repository_id).order_by("id"))
        if not hooks:
            return 0
        name = Repository.objects.values_list("name", flat=True).get(pk=repository_id)
        events = list(
            Event.objects.filter(repository_id=repository_id, seq__gt=min(hook.cursor for hook in hooks)).order_by(
                "seq"
            )[:PUMP_BATCH]
        )
        made = []
        for hook in hooks:
            wanted = set(hook.events)
            for event in events:
                if event.seq > hook.cursor and (ALL_EVENTS in wanted or event.kind in wanted):
                    made.append(_delivery(hook, name, event))
            if events and events[-1].seq > hook.cursor:
                hook.cursor = events[-1].seq
        WebhookDelivery.objects.bulk_create(made)
        Webhook.objects.bulk_update(hooks, ["cursor"])
        stale = WebhookDelivery.objects.filter(
            webhook__in=hooks, state=WebhookDelivery.State.PENDING, updated__lt=timezone.now() - STALE_AFTER
        ).values_list("pk", flat=True)
        for delivery_id in [delivery.pk for delivery in made] + list(stale):
            after_commit(SEND, delivery_id)
        if len(events) == PUMP_BATCH:  # more after these: the next transaction
            after_commit(PUMP, repository_id)
    return len(made)


def _delivery(hook: Webhook, repository_name: str, event: Event) -> WebhookDelivery:
    message = wire(event)
    body = {"event": event.kind, "id": event.seq, "repository": repository_name, "data": message["data"]}
    return WebhookDelivery(
        webhook=hook,
        guid=uuid.uuid4(),
        event_seq=event.seq,
        event=event.kind,
        body=json.dumps(body, separators=(",", ":"), sort_keys=True),
        last_attempt=ATTEMPTS,
    )


def resume() -> int:
    """Pump every repository that has webhooks (run at worker start and by beat: events whose
    pump was lost with a crash or a broker outage). Returns the deliveries it made."""
    return sum(pump(pk) for pk in Repository.objects.filter(webhooks__gt=0).values_list("pk", flat=True))


# ----------------------------------------------------------------------------- sending


def sign(secret: str, body: bytes) -> str:
    """The ``X-AgentGit-Signature-256`` of ``body``: ``sha256=`` and the hex HMAC-SHA256."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def send(delivery_id: int) -> None:
    """One attempt at a pending delivery, recorded; raises :class:`DeliveryFailed` when another
    is due, so the job's policy tries again later. Anything but pending is left alone."""
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update(of=("self",))
            .select_related("webhook")
            .filter(pk=delivery_id)
            .first()
        )
        if delivery is None or delivery.state != WebhookDelivery.State.PENDING:
            return
        number = delivery.attempts + 1
        WebhookDelivery.objects.filter(pk=delivery_id).update(attempts=number, updated=timezone.now())
    started, clock = timezone.now(), time.monotonic()
    status, error = _post(delivery)
    duration_ms = round((time.monotonic() - clock) * 1000)
    ok = status is not None and 200 <= status < 300
    retryable = not ok and (status is None or status >= 500 or status in RETRY_STATUSES)
    if ok:
        state = WebhookDelivery.State.DELIVERED
    elif retryable and number < delivery.last_attempt:
        state = WebhookDelivery.State.PENDING
    else:
        state = WebhookDelivery.State.FAILED
    with transaction.atomic():
        WebhookAttempt.objects.create(
            delivery=delivery,
            number=number,
            status_code=status,
            ok=ok,
            error=error[:500],
            duration_ms=duration_ms,
            started=started,
        )
        WebhookDelivery.objects.filter(pk=delivery_id).update(state=state, updated=timezone.now())
    if state == WebhookDelivery.State.PENDING:
        raise DeliveryFailed(f"delivery {delivery_id}, attempt {number}: {error or status}")


def _post(delivery: WebhookDelivery) -> tuple[int | None, str]:
    """POST the delivery: the answer's status (None if none came) and what went wrong, if
    anything. Plain http.client: one request, no proxy, and a redirect is an answer like any
    other, never followed."""
    body = delivery.body.encode("utf-8")
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "AgentGit-Hookshot",
        EVENT_HEADER: delivery.event,
        DELIVERY_HEADER: str(delivery.guid),
        SIGNATURE_HEADER: sign(delivery.webhook.secret, body),
    }
    timeout = settings.AGENTGIT["WEBHOOK_TIMEOUT_S"]
    connection: http.client.HTTPConnection | None = None
    try:
        url = urlsplit(delivery.webhook.url)
        kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        connection = kind(url.hostname or "", url.port, timeout=timeout)
        connection.request("POST", (url.path or "/") + (f"?{url.query}" if url.query else ""), body, headers)
        answer = connection.getresponse()
        answer.read(ANSWER_LIMIT)
        ok = 200 <= answer.status < 300
        return answer.status, "" if ok else f"answered {answer.status} {answer.reason}"
    except TimeoutError:
        return None, f"no answer within {timeout} s"
    except OSError as error:  # refused, reset, no such host, TLS
        return None, f"unreachable: {error}"
    except (http.client.HTTPException, ValueError) as error:  # a malformed answer, port or host
        return None, f"{type(error).__name__}: {error}"
    finally:
        if connection is not None:
            connection.close()


#: The after-commit jobs (workers/tasks.py makes them Celery tasks). Detached: a receiver's
#: time is never a landing's. Sends are retried on a failed attempt as on a lost database.
PUMP = Job("workers.tasks.pump_webhooks", pump, detached=True)
SEND = Job(
    "workers.tasks.send_webhook",
    send,
    Retry(on=(DeliveryFailed, OperationalError, InterfaceError), retries=ATTEMPTS, backoff_max_s=300),
    detached=True,
)
