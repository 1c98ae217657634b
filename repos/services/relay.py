"""The event relay: one per server process, pushing committed events to every subscriber there.

The outbox (repos/services/events.py) is the truth; the relay is how subscribers hear of new
rows without asking the database. Two halves, joined by a *transport*:

* **publishing** (any process that commits events: a server, a Celery worker): once the
  transaction commits, ``publish_on_commit`` hands the event to this process's publisher thread,
  which sends what has gathered, grouped per repository, through the transport (both in
  repos/services/transports.py, which the outbox imports without importing the relay);
* **relaying** (each server process that has subscribers): :class:`Relay` listens on the
  transport for the repositories its subscribers follow and offers each event, in ``seq``
  order, to every subscriber's bounded buffer (:class:`Subscription`).

The transports (docs/adr/0011-event-relay.md says why these two):

* with ``CHANNEL_LAYERS`` configured (production: channels-redis), a Channels group per
  repository (``events.<id>``): every server process on every machine hears at once;
* without (the embedded default), a Unix datagram socket per server process in the data
  directory's ``relay/``: a publisher sends each batch to every socket there.

A push can be lost (a full socket, a Redis hiccup, a process that subscribed a moment late) or
arrive out of order (two workers commit one after the other, their pushes race; one process's
push can hold its own events 4 and 6 while another's holds 5). Sequence numbers are gapless, so
each shows as a jump, before a push or inside it: the relay reads the missing rows from the outbox
(one query per process, not per subscriber) before going on, and drops what it has already
relayed. A subscriber catches up from the outbox by itself when it starts (resume) and when its
own position and the relay's differ. So every subscriber sees every event once, in order.

An idle subscriber costs nothing: no query, no timer but its heartbeat.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection

from . import metrics
from .events import events_after, wire
from .transports import Message, Transport, make_transport

logger = logging.getLogger(__name__)

#: Most events read from the outbox per query (catching up, filling a gap).
BATCH = 500


# ------------------------------------------------------------------------------ relaying


class TooFarBehind(Exception):
    """The subscriber's buffer overflowed: it was dropped, and resumes after :attr:`resume_id`."""

    def __init__(self, resume_id: int) -> None:
        super().__init__(f"too far behind; resume after {resume_id}")
        self.resume_id = resume_id


@dataclass(frozen=True)
class Filter:
    """Which events a subscriber wants: ``kinds`` (empty: all) and one ``stream`` (None: any)."""

    kinds: frozenset[str] = frozenset()
    stream: str | None = None

    def __call__(self, message: Message) -> bool:
        if self.kinds and message["event"] not in self.kinds:
            return False
        return self.stream is None or message["data"].get("stream") == self.stream


@dataclass(eq=False)
class Subscription:
    """One subscriber's place in one repository's events, with its bounded buffer.

    ``after`` is the last event id it has passed (sent, or skipped by its filter). The relay
    offers it the events it wants without waiting, and wakes it only for those: an event its
    filter skips costs it nothing but moving ``through``. When more than ``capacity`` wait
    unsent it is dropped, and :meth:`next` raises :class:`TooFarBehind` once it has sent what
    its buffer held.
    """

    relay: Relay
    repository_id: int
    after: int
    wants: Filter
    capacity: int
    #: The wanted events offered since it last took its buffer.
    buffer: deque[Message] = field(default_factory=deque)
    #: The ids those offers covered (wanted or not): ``offered_from`` .. ``through``, gapless,
    #: since the relay's offers to one subscriber follow on from each other. None: no offer since.
    offered_from: int | None = None
    through: int = 0
    dropped: bool = False
    caught_up: bool = False
    #: Its last outbox read ended before the relay's offers: the next read decides (see next()).
    read_again: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, first: int, last: int, wanted: list[Message]) -> None:
        """The relay's push of the events ``first`` .. ``last``, of which this subscriber wants
        ``wanted`` (in the event loop; never blocks)."""
        if self.dropped:
            return
        if len(self.buffer) + len(wanted) > self.capacity:
            self.dropped = True
            self.relay.remove(self)
            self.wake.set()
            return
        if self.offered_from is None:
            self.offered_from = first
        self.through = last
        if wanted:
            self.buffer.extend(wanted)
            self.wake.set()

    async def next(self, timeout_s: float) -> list[Message]:
        """The next events this subscriber wants, in order; [] after ``timeout_s`` of silence."""
        deadline: float | None = None
        while True:
            if not self.caught_up:  # resume: the outbox until it has nothing newer
                rows = await _read(self.repository_id, self.after)
                self.caught_up = len(rows) < BATCH
                outbox_ends_first = (
                    self.caught_up and self.offered_from is not None and self.offered_from > self._last(rows) + 1
                )
                # The relay offered ids past the end of what this read saw. Once, that is a read
                # begun before they committed, with the pushes between lost before the relay
                # started: read again. Twice, they are not this repository's (a push from another
                # deployment on the same broker), and reading again would find nothing more:
                # dropped, not waited for.
                self.read_again = outbox_ends_first and not self.read_again
                if self.read_again:
                    self.caught_up = False
                elif outbox_ends_first:
                    logger.warning(
                        "repository %d: relayed ids from %d are not in its outbox",
                        self.repository_id,
                        self.offered_from,
                    )
                    self.offered_from = None
                    self.buffer.clear()
                if rows:
                    wanted = self._pass(rows)
                    if wanted:
                        return wanted
                continue
            if self.offered_from is not None:
                if self.offered_from > self.after + 1:
                    # The relay's stream and ours differ (we started, or its push was late):
                    # the outbox up to there first, then the rest.
                    self.caught_up = False
                    continue
                fresh = [message for message in self.buffer if message["id"] > self.after]
                self.buffer.clear()
                self.after = max(self.after, self.through)
                self.offered_from = None
                if fresh:
                    return fresh
                continue
            if self.dropped:
                raise TooFarBehind(self.after)
            self.wake.clear()
            if timeout_s == float("inf"):
                await self.wake.wait()
                continue
            # The silence ends with a timer that sets ``wake``, not with a cancellation:
            # asyncio.wait_for makes a task per wait (it was a third of an SSE delivery's CPU),
            # and under Django's streaming response the task can carry a cancellation request
            # already, which 3.11's asyncio.timeout then lets out as CancelledError.
            loop = asyncio.get_running_loop()
            if deadline is None:
                deadline = loop.time() + timeout_s
            left = deadline - loop.time()
            if left <= 0:
                return []
            timer = loop.call_later(left, self.wake.set)
            try:
                await self.wake.wait()
            finally:
                timer.cancel()

    def encoded(self, message: Message, encode: Callable[[Message], Any]) -> Any:
        """``encode(message)``, computed once per event and form in this process, however many
        subscribers send it (the relay's subscribers share the message objects)."""
        return self.relay.encoded(self.repository_id, message, encode)

    def _last(self, rows: list[Message]) -> int:
        return rows[-1]["id"] if rows else self.after

    def _pass(self, messages: list[Message]) -> list[Message]:
        self.after = messages[-1]["id"]
        return [message for message in messages if self.wants(message)]

    def close(self) -> None:
        """Leave the relay (the connection ended)."""
        self.relay.remove(self)


@dataclass(eq=False)
class Topic:
    """One repository's events in this process: its subscribers and the last id relayed."""

    subscribers: set[Subscription] = field(default_factory=set)
    #: The last id relayed to the subscribers, in order and without a gap; None until known.
    last: int | None = None
    #: Pushes that arrived while a gap was being filled, handled next, in arrival order.
    waiting: list[list[Message]] = field(default_factory=list)
    filling: bool = False
    #: When a push was last heard, and when the outbox was last read past ``last`` (monotonic).
    heard: float = 0.0
    #: From the topic's start: at 0 the quiet check was due at once, so the first tick after the
    #: first push read the outbox and relayed events whose pushes were still on their way.
    checked: float = field(default_factory=time.monotonic)


class Relay:
    """This process's relay (one per event loop): follows the repositories its subscribers
    follow, and offers every event to each, in order, gaps filled from the outbox.

    A lost push shows as a jump at the next push, but a lost push that ended a burst has no
    next one: so a repository's outbox is also read once :attr:`TAIL_CHECK_S` after the last
    push heard, and every :attr:`QUIET_CHECK_S` while it has subscribers here. One query per
    repository and process, whatever the number of subscribers; none for a repository this
    process has heard nothing of yet.
    """

    TAIL_CHECK_S = 1.0
    QUIET_CHECK_S = 30.0

    def __init__(self, transport: Transport, capacity: int) -> None:
        self.transport = transport
        self.capacity = capacity
        self.topics: dict[int, Topic] = {}
        self._encoded: OrderedDict[tuple[int, int, Callable], Any] = OrderedDict()
        self._listener: asyncio.Task | None = None
        self._tails: asyncio.Task | None = None
        #: Unfollows still on their way, by repository (see subscribe()).
        self._unfollowing: dict[int, asyncio.Future] = {}

    async def subscribe(self, repository_id: int, after: int, wants: Filter = Filter()) -> Subscription:
        """A new subscriber to one repository, from after the id ``after``."""
        if self._listener is None or self._listener.done():
            self._listener = asyncio.create_task(self.transport.listen(self.deliver), name="event relay listener")
            self._listener.add_done_callback(_log_end)
        if self._tails is None or self._tails.done():
            self._tails = asyncio.create_task(self._check_tails(), name="event relay tail check")
            self._tails.add_done_callback(_log_end)
        topic = self.topics.get(repository_id)
        subscription = Subscription(self, repository_id, after, wants, self.capacity)
        if topic is None:
            topic = self.topics[repository_id] = Topic()
            topic.subscribers.add(subscription)
            leaving = self._unfollowing.get(repository_id)
            if leaving is not None:
                # The last subscriber here left a moment ago: follow after its unfollow, not
                # before, or this process would stop hearing the repository (a transport
                # unfollows once, however often it was followed).
                await asyncio.wait([leaving])
            await self.transport.follow(repository_id)
        else:
            topic.subscribers.add(subscription)
        return subscription

    #: Encoded events kept for the subscribers still to send them (most recent first to go).
    ENCODED_KEPT = 4096

    def encoded(self, repository_id: int, message: Message, encode: Callable[[Message], Any]) -> Any:
        """The wire form ``encode`` makes of one event, made once per process."""
        key = (repository_id, message["id"], encode)
        found = self._encoded.get(key)
        if found is None:
            found = self._encoded[key] = encode(message)
            if len(self._encoded) > self.ENCODED_KEPT:
                self._encoded.popitem(last=False)
        return found

    def remove(self, subscription: Subscription) -> None:
        topic = self.topics.get(subscription.repository_id)
        if topic is None:
            return
        topic.subscribers.discard(subscription)
        if not topic.subscribers and not topic.filling:
            del self.topics[subscription.repository_id]
            self._unfollow(subscription.repository_id)

    def _unfollow(self, repository_id: int) -> None:
        """Stop hearing a repository that has no subscribers here any more."""
        leaving = self._unfollowing[repository_id] = asyncio.ensure_future(self.transport.unfollow(repository_id))

        def done(task: asyncio.Future) -> None:
            if self._unfollowing.get(repository_id) is task:
                del self._unfollowing[repository_id]
            if not task.cancelled() and task.exception() is not None:
                logger.warning("unfollowing repository %d failed", repository_id, exc_info=task.exception())

        leaving.add_done_callback(done)

    def deliver(self, repository_id: int, messages: list[Message]) -> None:
        """A push arrived (in the event loop)."""
        topic = self.topics.get(repository_id)
        if topic is None or not messages:
            return
        topic.heard = time.monotonic()
        if topic.filling:
            topic.waiting.append(messages)
            return
        messages.sort(key=lambda message: message["id"])
        if topic.last is None:
            # The first push this process hears for the repository: the relay starts here; a
            # subscriber that resumes from further back reads the rest from the outbox itself.
            topic.last = messages[0]["id"] - 1
        fresh = [message for message in messages if message["id"] > topic.last]
        if not fresh:
            return
        # Ids are gapless, so anything but last+1, last+2, ... is a hole: before the push, or
        # inside it (one process's publisher sends the events its own process committed, and
        # another process can have committed one between two of them).
        in_order = all(message["id"] == topic.last + 1 + i for i, message in enumerate(fresh))
        if not in_order or any("data" not in message for message in fresh):
            topic.filling = True
            asyncio.ensure_future(self._fill(repository_id, topic, fresh))
            return
        self._fan_out(topic, fresh)

    async def _fill(self, repository_id: int, topic: Topic, push: list[Message]) -> None:
        """Read the outbox from the last relayed id through the end of ``push``, relay it, then
        the push itself (what it has that the outbox did not) and those that arrived meanwhile."""
        through = push[-1]["id"]
        pending = [push]
        try:
            while topic.last is not None and topic.last < through:
                rows = await _read(repository_id, topic.last)
                if not rows:
                    # The outbox ends before the push: its ids are not this repository's (a push
                    # from another deployment on the same broker). Dropped, not read again.
                    logger.warning("repository %d: pushed ids through %d are not in its outbox", repository_id, through)
                    pending = []
                    break
                self._fan_out(topic, rows)
        except Exception:
            logger.exception("filling a gap in repository %d's events", repository_id)
            # Then again with the pushes gathered meanwhile, not at once: with the database
            # down, retrying at once would be a busy loop.
            await asyncio.sleep(self.TAIL_CHECK_S)
        finally:
            topic.filling = False
            waiting, topic.waiting = pending + topic.waiting, []
            for messages in waiting:
                self.deliver(repository_id, messages)
            if not topic.subscribers and self.topics.get(repository_id) is topic and not topic.filling:
                del self.topics[repository_id]
                self._unfollow(repository_id)

    async def _check_tails(self) -> None:
        """Read past each topic's last relayed id when it is due (see the class): what a lost
        last push left out is relayed as a push would have been."""
        while True:
            await asyncio.sleep(self.TAIL_CHECK_S)
            now = time.monotonic()
            for repository_id, topic in list(self.topics.items()):
                after_burst = topic.checked < topic.heard <= now - self.TAIL_CHECK_S
                if (
                    topic.filling
                    or topic.last is None
                    or not (after_burst or now - topic.checked >= self.QUIET_CHECK_S)
                ):
                    continue
                topic.checked = now
                try:
                    rows = await _read(repository_id, topic.last)
                except Exception:
                    logger.exception("reading repository %d's latest events", repository_id)
                    continue
                if rows and self.topics.get(repository_id) is topic:
                    logger.info(
                        "repository %d: %d events after %d came with no push", repository_id, len(rows), topic.last
                    )
                    self.deliver(repository_id, rows)

    def _fan_out(self, topic: Topic, messages: list[Message]) -> None:
        messages = [message for message in messages if "data" in message]
        if not messages:
            return
        first, topic.last = messages[0]["id"], messages[-1]["id"]
        metrics.observe_relayed(datetime.fromisoformat(message["data"]["created"]) for message in messages)
        wanted: dict[Filter, list[Message]] = {}  # each filter applied once, however many use it
        for subscription in list(topic.subscribers):
            chosen = wanted.get(subscription.wants)
            if chosen is None:
                chosen = wanted[subscription.wants] = [message for message in messages if subscription.wants(message)]
            subscription.offer(first, topic.last, chosen)


def _log_end(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("%s stopped", task.get_name(), exc_info=task.exception())


async def _read(repository_id: int, after: int) -> list[Message]:
    return await _read_sync(repository_id, after)


@sync_to_async
def _read_sync(repository_id: int, after: int) -> list[Message]:
    try:
        return [wire(event) for event in events_after(repository_id, after, BATCH)]
    finally:
        release_connection()


def release_connection() -> None:
    """Give this thread's database connection back (to the pool, with PostgreSQL). A feed's
    request lives as long as its subscriber: holding a connection that long would let 20
    idle subscribers exhaust the pool. Reading again opens one again."""
    if not connection.in_atomic_block:
        connection.close()


_relays: dict[asyncio.AbstractEventLoop, Relay] = {}


def relay() -> Relay:
    """This process's relay (made on first use, in the running event loop)."""
    loop = asyncio.get_running_loop()
    found = _relays.get(loop)
    if found is None:
        found = _relays[loop] = Relay(make_transport(), settings.AGENTGIT["EVENT_BUFFER"])
    return found


# ----------------------------------------------------------------------------- SSE streams
# What the SSE feeds send (the API's, and the web UI's activity feed behind a session): from
# this process's relay under ASGI, from the outbox polled under WSGI.

POLL_S = 0.1
KEEPALIVE_S = 15.0
KEEPALIVE = b": keep-alive\n\n"


def encode(message: Message) -> bytes:
    """One event in the SSE wire format."""
    text = json.dumps(message["data"], separators=(",", ":"), default=str)
    return f"id: {message['id']}\nevent: {message['event']}\ndata: {text}\n\n".encode()


async def relayed(repository_id: int, after: int, wants: Filter, timeout_s: float) -> AsyncIterator[bytes]:
    """The SSE stream under ASGI: from this process's relay until ``timeout_s`` has passed, and
    what was already there when it passes (``timeout=0``: the events stored after ``after``, then
    the end, as under WSGI)."""
    deadline = time.monotonic() + timeout_s
    subscription = await relay().subscribe(repository_id, after, wants)
    try:
        while True:
            messages = await subscription.next(min(KEEPALIVE_S, max(0.0, deadline - time.monotonic())))
            if messages:
                yield b"".join(subscription.encoded(message, encode) for message in messages)
            elif deadline - time.monotonic() > 0:
                yield KEEPALIVE
            else:
                return
    except TooFarBehind as behind:
        yield f": too far behind; resume after {behind.resume_id}\n\n".encode()
    finally:
        subscription.close()


def polled(repository_id: int, after: int, wants: Filter, timeout_s: float) -> Iterator[bytes]:
    """The SSE stream under WSGI (and Django's test client), which has no event loop for a
    relay: the outbox, read every ``POLL_S`` until ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    quiet_since = time.monotonic()
    while True:
        rows = events_after(repository_id, after, BATCH)
        messages = [wire(event) for event in rows]
        if messages:
            metrics.observe_relayed(event.created for event in rows)  # the poll is this feed's relay
            after = messages[-1]["id"]
            wanted = [message for message in messages if wants(message)]
            if wanted:
                quiet_since = time.monotonic()
                yield b"".join(encode(message) for message in wanted)
            continue
        now = time.monotonic()
        if now >= deadline:
            return
        if now - quiet_since >= KEEPALIVE_S:
            quiet_since = now
            yield KEEPALIVE
        time.sleep(min(POLL_S, deadline - now))
