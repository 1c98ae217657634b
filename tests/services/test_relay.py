"""The relay hands every subscriber each event once, in order, even when pushes are lost or
late, and drops a subscriber that falls behind without delaying the others.

The pushes are handed to :meth:`Relay.deliver` here as the transport would (its socket listens
in a directory no publisher sends to), so a test chooses which pushes are lost and in which
order the rest arrive; the events themselves are real committed outbox rows.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from django.db import transaction

from repos.services import relay as relay_module
from repos.services.events import append_event, wire
from repos.services.relay import Filter, Relay, Subscription, TooFarBehind
from repos.services.repositories import create_repository
from repos.services.transports import LayerTransport, SocketTransport
from tests.deployment import REDIS_BASE_URL

pytestmark = pytest.mark.django_db(transaction=True)


def committed(repository, streams: list[str], kind: str = "stream.integrate") -> list[dict]:
    """One committed event per stream name; their messages as the transport carries them."""
    messages = []
    for stream in streams:
        with transaction.atomic():
            messages.append(wire(append_event(repository, kind, {"stream": stream})))
    return messages


async def drain(subscription, until: int) -> list[int]:
    ids: list[int] = []
    while not ids or ids[-1] < until:
        batch = await subscription.next(timeout_s=2)
        assert batch, f"nothing more after {ids}"
        ids += [message["id"] for message in batch]
    return ids


async def following(relay: Relay, repository) -> tuple[Subscription, list[int]]:
    """A subscriber from after event 2 that has its event 3 from the relay: caught up, so from
    then on it hears only the relay."""
    subscription = await relay.subscribe(repository.pk, after=2)
    relay.deliver(repository.pk, await asyncio.to_thread(committed, repository, ["a"]))  # 3
    return subscription, await drain(subscription, 3)


def test_lost_and_out_of_order_pushes_are_filled_from_the_outbox(tmp_path):
    repository = create_repository("relayed")  # events 1 and 2

    async def scenario() -> list[int]:
        relay = Relay(SocketTransport(tmp_path), capacity=100)
        subscription = await relay.subscribe(repository.pk, after=0)
        assert [m["id"] for m in await subscription.next(timeout_s=1)] == [1, 2]  # caught up
        first = await asyncio.to_thread(committed, repository, ["a"])
        relay.deliver(repository.pk, first)  # the relay starts at 3
        later = await asyncio.to_thread(committed, repository, ["a", "b", "c", "d"])  # 4..7
        relay.deliver(repository.pk, [later[2]])  # 6 arrives first: 4 and 5 read from the outbox
        relay.deliver(repository.pk, [later[0], later[1]])  # late: already relayed
        # 7's push is lost; the next push (8) shows the gap.
        relay.deliver(repository.pk, await asyncio.to_thread(committed, repository, ["e"]))
        ids = await drain(subscription, 8)
        subscription.close()
        return ids

    assert asyncio.run(scenario()) == [3, 4, 5, 6, 7, 8]


def test_a_push_with_a_hole_waits_for_the_event_another_process_committed_between(tmp_path):
    # Each process's publisher sends the events its own process committed: one that committed
    # 4 and 6 can push them together while 5, committed by another process, is still on its way.
    repository = create_repository("interleaved")  # events 1 and 2

    async def scenario() -> list[int]:
        relay = Relay(SocketTransport(tmp_path), capacity=100)
        subscription, ids = await following(relay, repository)
        fourth, fifth, sixth = await asyncio.to_thread(committed, repository, ["a", "b", "a"])
        relay.deliver(repository.pk, [fourth, sixth])  # one process's push
        relay.deliver(repository.pk, [fifth])  # the other's, late
        ids += await drain(subscription, 6)
        subscription.close()
        return ids

    assert asyncio.run(scenario()) == [3, 4, 5, 6]


def test_a_subscriber_whose_first_read_was_too_early_for_the_relay_reads_again(tmp_path, monkeypatch):
    # A process's relay starts at the first push it hears. When the push before it was lost
    # (sent before the process followed the repository), a new subscriber's first outbox read
    # can end before both: it must read again rather than take the relay for ahead of the outbox.
    repository = create_repository("started")  # events 1 and 2
    read = relay_module._read
    first_read = True

    async def read_then_commit(repository_id: int, after: int):
        nonlocal first_read
        rows = await read(repository_id, after)
        if first_read:  # while the first read was on its way: 3 (push lost) and 4 commit
            first_read = False
            _third, fourth = await asyncio.to_thread(committed, repository, ["a", "b"])
            the_relay.deliver(repository.pk, [fourth])  # the relay starts at 4
        return rows

    monkeypatch.setattr(relay_module, "_read", read_then_commit)
    the_relay = Relay(SocketTransport(tmp_path), capacity=100)

    async def scenario() -> list[int]:
        subscription = await the_relay.subscribe(repository.pk, after=2)
        ids = await drain(subscription, 4)
        subscription.close()
        return ids

    assert asyncio.run(scenario()) == [3, 4]


def test_pushed_ids_the_outbox_does_not_have_are_dropped_after_one_read(tmp_path, monkeypatch):
    repository = create_repository("foreign")  # events 1 and 2
    read = relay_module._read
    reads: list[int] = []

    async def counted(repository_id: int, after: int):
        reads.append(after)
        return await read(repository_id, after)

    monkeypatch.setattr(relay_module, "_read", counted)

    async def scenario() -> list[int]:
        relay = Relay(SocketTransport(tmp_path), capacity=100)
        subscription, ids = await following(relay, repository)
        foreign = {
            "id": 50,
            "event": "stream.integrate",
            "data": {"stream": "x", "seq": 50, "created": "2026-01-01T00:00:00Z"},
        }
        relay.deliver(repository.pk, [foreign])  # another deployment's event 50
        relay.deliver(repository.pk, await asyncio.to_thread(committed, repository, ["b"]))  # 4
        ids += await drain(subscription, 4)
        await asyncio.sleep(0.5)  # long enough for a loop to show
        subscription.close()
        return ids

    assert asyncio.run(scenario()) == [3, 4]
    # The subscriber's first read, the fill's one or two, perhaps a tail check: a handful, where
    # filling the foreign push again and again made hundreds.
    assert len(reads) < 10, reads


def test_a_lost_last_push_is_read_from_the_outbox_soon_after(tmp_path):
    repository = create_repository("tail")  # events 1 and 2

    async def scenario() -> list[int]:
        relay = Relay(SocketTransport(tmp_path), capacity=100)
        subscription, ids = await following(relay, repository)
        fourth, _fifth = await asyncio.to_thread(committed, repository, ["b", "c"])
        relay.deliver(repository.pk, [fourth])  # 5's push is lost, and nothing comes after it
        while not ids or ids[-1] < 5:
            batch = await subscription.next(timeout_s=3 * Relay.TAIL_CHECK_S + 1)
            assert batch, f"nothing more after {ids}"
            ids += [message["id"] for message in batch]
        subscription.close()
        return ids

    assert asyncio.run(scenario()) == [3, 4, 5]


def test_a_subscriber_too_far_behind_is_dropped_with_its_resume_id_and_delays_no_one(tmp_path):
    repository = create_repository("slow")

    async def scenario() -> tuple[list[int], list[int], int]:
        relay = Relay(SocketTransport(tmp_path), capacity=5)
        fast = await relay.subscribe(repository.pk, after=2)
        slow = await relay.subscribe(repository.pk, after=2)
        assert await slow.next(timeout_s=0.1) == []  # caught up, then it stops reading
        seen_fast: list[int] = []
        for stream in "abcdefgh":  # events 3..10, one push each; the slow one reads none
            relay.deliver(repository.pk, await asyncio.to_thread(committed, repository, [stream]))
            seen_fast += [m["id"] for m in await fast.next(timeout_s=1)]
        assert slow not in relay.topics[repository.pk].subscribers  # dropped, buffer kept
        seen_slow: list[int] = []
        with pytest.raises(TooFarBehind) as behind:
            while True:
                seen_slow += [m["id"] for m in await slow.next(timeout_s=1)]
        return seen_fast, seen_slow, behind.value.resume_id

    fast, slow, resume = asyncio.run(scenario())
    assert fast == list(range(3, 11))
    assert slow == [3, 4, 5, 6, 7] and resume == 7  # resuming after 7 misses nothing


def test_filters_choose_kinds_and_a_stream_and_the_position_still_advances(tmp_path):
    repository = create_repository("filtered")

    async def scenario() -> tuple[list[int], int]:
        relay = Relay(SocketTransport(tmp_path), capacity=100)
        wants = Filter(kinds=frozenset({"stream.integrate"}), stream="main")
        subscription = await relay.subscribe(repository.pk, after=0, wants=wants)
        messages = await asyncio.to_thread(committed, repository, ["main", "side", "main"])  # 3, 4, 5
        messages += await asyncio.to_thread(committed, repository, ["main"], "proposal.opened")  # 6
        messages += await asyncio.to_thread(committed, repository, ["main"])  # 7
        relay.deliver(repository.pk, messages)
        ids = [m["id"] for m in await subscription.next(timeout_s=1)]
        ids += [m["id"] for m in await subscription.next(timeout_s=1)]
        # Events it does not want move its position without waking it: its wait still ends
        # with nothing (a feed's heartbeat), not with an error or never.
        waiting = asyncio.ensure_future(subscription.next(timeout_s=0.5))
        await asyncio.sleep(0.1)
        relay.deliver(repository.pk, await asyncio.to_thread(committed, repository, ["side"]))  # 8
        assert await waiting == []
        return ids, subscription.after

    ids, after = asyncio.run(scenario())
    assert ids == [3, 5, 7] and after == 8


def push_once(repository_id: int, messages: list[dict]) -> None:
    """One push through the Channels layer, as a publisher thread sends it (that thread keeps its
    event loop for its life; this one-off publisher closes its own)."""
    transport = LayerTransport()
    try:
        transport.send(repository_id, messages)
    finally:
        if transport._publishing is not None:
            transport._publishing[1].close()


def test_a_subscriber_who_comes_as_the_last_one_leaves_keeps_the_process_hearing_pushes(settings):
    # Through the real Redis layer: the last subscriber's leaving unfollows the repository
    # (unsubscribes the process's channel). A subscriber who came in the same turn of the event
    # loop followed it first, and the unfollow, landing after, left the process deaf to it.
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [f"{REDIS_BASE_URL}/0"], "prefix": f"test-relay-{uuid.uuid4().hex}"},
        }
    }
    repository = create_repository("handover")  # events 1 and 2

    async def scenario() -> list[int]:
        relay = Relay(LayerTransport(), capacity=100)
        first = await relay.subscribe(repository.pk, after=2)
        first.close()  # the last one here leaves...
        second = await relay.subscribe(repository.pk, after=2)  # ...as another comes
        assert await second.next(timeout_s=0.3) == []  # caught up: now it hears only the relay
        (third,) = await asyncio.to_thread(committed, repository, ["a"])
        await asyncio.to_thread(push_once, repository.pk, [third])  # a publisher's push
        batch = await second.next(timeout_s=5)
        second.close()
        return [message["id"] for message in batch]

    assert asyncio.run(scenario()) == [3]
