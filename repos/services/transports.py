"""Publishing committed events: the transports that carry them from the process that committed
them to every server process, and this process's publisher thread.

The first half of the event relay (repos/services/relay.py, whose docstring tells the whole
story and docs/adr/0011-event-relay.md why these transports). It imports nothing of the outbox
or the relay: the outbox (repos/services/events.py) hands each event here once its transaction
commits, and the relay listens on the same transports, so neither imports the other through it.

* with ``CHANNEL_LAYERS`` configured (production: channels-redis), a Channels group per
  repository (``events.<id>``): every server process on every machine hears at once;
* without (the embedded default), a Unix datagram socket per server process in the data
  directory's ``relay/``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import socket
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

logger = logging.getLogger(__name__)

#: An event as the feeds send it (``events.wire``): ``{"id", "event", "data"}``.
Message = dict[str, Any]


def group_name(repository_id: int) -> str:
    """The Channels group (and the datagram tag) of one repository's events."""
    return f"events.{repository_id}"


# ------------------------------------------------------------------------------ transports


class Transport:
    """How published events travel from the committing process to every server process."""

    def send(self, repository_id: int, messages: list[Message]) -> None:
        """Publish (a blocking call, on the publisher thread)."""
        raise NotImplementedError

    async def listen(self, deliver: Callable[[int, list[Message]], None]) -> None:
        """Run until cancelled, calling ``deliver(repository_id, messages)`` for what arrives."""
        raise NotImplementedError

    async def follow(self, repository_id: int) -> None:
        """Start hearing one repository's events (a transport that hears all may ignore it)."""

    async def unfollow(self, repository_id: int) -> None:
        """Stop hearing them."""


class LayerTransport(Transport):
    """The Channels layer (``CHANNEL_LAYERS["default"]``): a group per repository."""

    def __init__(self) -> None:
        from channels.layers import channel_layers

        self._publishing: tuple[Any, asyncio.AbstractEventLoop] | None = None
        self._make = lambda: channel_layers.make_backend("default")
        self._listening: Any = None
        self._channel = ""
        self._made = asyncio.Lock()

    def send(self, repository_id: int, messages: list[Message]) -> None:
        if self._publishing is None:  # the publisher thread's own layer and event loop
            self._publishing = (self._make(), asyncio.new_event_loop())
        layer, loop = self._publishing
        loop.run_until_complete(
            layer.group_send(
                group_name(repository_id), {"type": "events", "repository": repository_id, "events": messages}
            )
        )

    async def listen(self, deliver: Callable[[int, list[Message]], None]) -> None:
        layer = await self._layer()
        while True:
            message = await layer.receive(self._channel)
            deliver(int(message["repository"]), list(message["events"]))

    async def _layer(self) -> Any:
        async with self._made:  # listen() and the first follow() race to make the channel
            if self._listening is None:
                layer = self._make()
                self._channel = await layer.new_channel()
                self._listening = layer
        return self._listening

    async def follow(self, repository_id: int) -> None:
        await (await self._layer()).group_add(group_name(repository_id), self._channel)

    async def unfollow(self, repository_id: int) -> None:
        await (await self._layer()).group_discard(group_name(repository_id), self._channel)


class SocketTransport(Transport):
    """Unix datagram sockets in ``<data dir>/relay/``, one per listening server process.

    A publisher sends each batch to every socket there (a socket whose process died refuses,
    and is removed). A datagram is at most :data:`DATAGRAM_BYTES`; a batch is split to fit, and
    an event too large for one is sent as its id alone, which the relay reads from the outbox.
    """

    DATAGRAM_BYTES = 60_000
    #: How long a publisher waits for a listener whose queue is full before giving up (the
    #: listener fills the gap from the outbox when the next push arrives).
    SEND_TIMEOUT_S = 0.2

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._sender: socket.socket | None = None
        self._path: Path | None = None

    def send(self, repository_id: int, messages: list[Message]) -> None:
        if self._sender is None:
            self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sender.settimeout(self.SEND_TIMEOUT_S)
        try:
            peers = [self.directory / name for name in os.listdir(self.directory) if name.endswith(".sock")]
        except FileNotFoundError:
            return  # no server process listens yet
        for datagram in self._datagrams(repository_id, messages):
            for peer in peers:
                try:
                    self._sender.sendto(datagram, str(peer))
                except (ConnectionRefusedError, FileNotFoundError):
                    peer.unlink(missing_ok=True)  # its process is gone
                except OSError:  # full or slow: that relay fills the gap from the outbox
                    logger.debug("event push to %s lost", peer, exc_info=True)

    def _datagrams(self, repository_id: int, messages: list[Message]) -> Iterable[bytes]:
        batch: list[bytes] = []
        size = 0
        for message in messages:
            encoded = json.dumps(message, separators=(",", ":"), default=str).encode()
            if len(encoded) > self.DATAGRAM_BYTES - 100:
                encoded = json.dumps({"id": message["id"]}).encode()  # read from the outbox
            if batch and size + len(encoded) > self.DATAGRAM_BYTES - 100:
                yield _frame(repository_id, batch)
                batch, size = [], 0
            batch.append(encoded)
            size += len(encoded) + 1
        if batch:
            yield _frame(repository_id, batch)

    async def listen(self, deliver: Callable[[int, list[Message]], None]) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._path = self.directory / f"{socket.gethostname()}-{os.getpid()}.sock"
        self._path.unlink(missing_ok=True)
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        receiver.bind(str(self._path))
        receiver.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            while True:
                datagram = await loop.sock_recv(receiver, self.DATAGRAM_BYTES)
                repository_id, messages = _unframe(datagram)
                deliver(repository_id, messages)
        finally:
            receiver.close()
            self._path.unlink(missing_ok=True)


def _frame(repository_id: int, encoded: list[bytes]) -> bytes:
    return b"%d\n" % repository_id + b"\n".join(encoded)


def _unframe(datagram: bytes) -> tuple[int, list[Message]]:
    head, *lines = datagram.split(b"\n")
    return int(head), [json.loads(line) for line in lines]


def make_transport() -> Transport:
    """The configured transport: the Channels layer when there is one, else the sockets."""
    if getattr(settings, "CHANNEL_LAYERS", None):
        return LayerTransport()
    return SocketTransport(Path(settings.AGENTGIT["DATA_DIR"]) / "relay")


# ------------------------------------------------------------------------------ publishing


class Publisher:
    """This process's publisher: a daemon thread that sends committed events as they gather.

    The committing thread only queues (after commit, from Django's ``on_commit``); the thread
    groups what has gathered per repository and sends it, so a landing of 32 proposals is one
    push, and the request or task that committed never waits on the transport.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[int, Message]] = queue.SimpleQueue()
        self._pid = 0
        self._lock = threading.Lock()

    def put(self, repository_id: int, message: Message) -> None:
        """Queue one committed event for sending."""
        if self._pid != os.getpid():  # first use, or first use after a fork (Celery's pool)
            with self._lock:
                if self._pid != os.getpid():
                    self._queue = queue.SimpleQueue()
                    threading.Thread(target=self._run, args=(self._queue,), name="event-publisher", daemon=True).start()
                    self._pid = os.getpid()
        self._queue.put((repository_id, message))

    def _run(self, pending: queue.SimpleQueue[tuple[int, Message]]) -> None:
        transport = make_transport()
        while True:
            gathered: dict[int, list[Message]] = {}
            repository_id, message = pending.get()
            gathered.setdefault(repository_id, []).append(message)
            while True:
                try:
                    repository_id, message = pending.get_nowait()
                except queue.Empty:
                    break
                gathered.setdefault(repository_id, []).append(message)
            for repository_id, messages in gathered.items():
                try:
                    transport.send(repository_id, messages)
                except Exception:  # a lost push is healed from the outbox; the thread goes on
                    logger.warning("publishing %d events failed", len(messages), exc_info=True)


PUBLISHER = Publisher()


def publish_on_commit(repository_id: int, message: Message) -> None:
    """Push the event once the current transaction commits (never if it rolls back)."""
    transaction.on_commit(lambda: PUBLISHER.put(repository_id, message))
