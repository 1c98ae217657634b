"""pkt-line framing (gitprotocol-common): a 4-hex-digit length, then the payload.

``0000`` is a flush packet, ``0001`` a delimiter, ``0002`` a response end (protocol v2).
"""

from __future__ import annotations

#: The object id that means "no object" in a ref update (a creation's old value, a deletion's new one).
ZERO_ID = "0" * 40
FLUSH = b"0000"
DELIM = b"0001"
#: The largest payload of one packet (65520 bytes in all, with the length).
MAX_PAYLOAD = 65516


def pkt(payload: bytes | str) -> bytes:
    """One data packet."""
    data = payload.encode() if isinstance(payload, str) else payload
    if len(data) > MAX_PAYLOAD:
        raise ValueError("a pkt-line payload is at most 65516 bytes")
    return b"%04x" % (len(data) + 4) + data


def sideband(band: int, data: bytes) -> bytes:
    """``data`` on side band ``band`` (1: data, 2: progress, 3: error), cut into packets."""
    step = MAX_PAYLOAD - 1
    return b"".join(pkt(bytes([band]) + data[i : i + step]) for i in range(0, len(data), step)) or b""


class Reader:
    """Packets read off a byte buffer that grows as the request body arrives."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self.buffer += data

    def next(self) -> bytes | None | str:
        """The next packet's payload; ``"flush"``/``"delim"``/``"end"`` for the special packets;
        None when the buffer does not hold a whole packet yet. ValueError if malformed."""
        if len(self.buffer) < 4:
            return None
        try:
            length = int(self.buffer[:4], 16)
        except ValueError:
            raise ValueError(f"not a pkt-line length: {bytes(self.buffer[:4])!r}") from None
        if length < 4:
            del self.buffer[:4]
            return {0: "flush", 1: "delim", 2: "end"}.get(length, "flush")
        if len(self.buffer) < length:
            return None
        payload = bytes(self.buffer[4:length])
        del self.buffer[:length]
        return payload

    def take_rest(self) -> bytes:
        rest = bytes(self.buffer)
        self.buffer.clear()
        return rest


class BodyReader:
    """Packets off a request body that arrives in chunks (an async iterator of bytes).

    ``consumed`` keeps every byte read so far, so a request can still be handed whole to git
    after its first packets were looked at; :meth:`rest` is what follows the packets read.
    """

    def __init__(self, body) -> None:
        self.body = body
        self.reader = Reader()
        self.consumed = bytearray()

    async def packet(self) -> bytes | str:
        while True:
            packet = self.reader.next()
            if packet is not None:
                return packet
            chunk = await anext(self.body, None)
            if chunk is None:
                raise EOFError("the request ended in the middle of a packet")
            self.consumed += chunk
            self.reader.feed(chunk)

    async def rest(self):
        """The bytes after the packets read, then the rest of the body, as they arrive."""
        pending = self.reader.take_rest()
        if pending:
            yield pending
        async for chunk in self.body:
            yield chunk
