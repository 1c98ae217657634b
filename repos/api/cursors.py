"""List cursors: opaque, URL-safe strings that name a position in a listing (API.md).

A cursor is URL-safe base64, without padding, of a packed position: the last name or id of a
page (keyset paging: rows added or removed meanwhile never shift a page), or, for the log, the
changeset the walk started from and how far it got. Clients pass ``next`` back as ``?cursor=``
unchanged, unencoded: the alphabet is ``A-Z a-z 0-9 - _``.

Every string of the documented pattern decodes to some position (a forged one lists whatever
follows it, or answers 404 for a log start that does not exist), so the schema's pattern is
exactly what the server accepts; anything else is 400 ``invalid``.
"""

from __future__ import annotations

import base64
import re

from ..errors import Invalid

#: Base64 without padding: lengths of 1 modulo 4 cannot be decoded.
PATTERN = r"^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2,3})?$"
#: A log cursor: 20 bytes of changeset id and a 4-byte offset, 32 characters.
LOG_PATTERN = r"^[A-Za-z0-9_-]{32}$"
_ANY = re.compile(PATTERN.replace("$", r"\Z"))
_LOG = re.compile(LOG_PATTERN.replace("$", r"\Z"))
#: The largest id a position names (a signed 64-bit database integer).
_MAX_ID = 2**63 - 1


def encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _decode(cursor: str, pattern: re.Pattern, description: str) -> bytes:
    if not pattern.match(cursor):
        raise Invalid(f"malformed cursor {cursor[:100]!r}: pass a page's `next` as it is ({description})")
    return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))


def encode_key(value: str | int) -> str:
    """The cursor after the row whose paging key is ``value`` (a name or an id)."""
    if isinstance(value, int):
        return encode(value.to_bytes(8, "big"))
    return encode(value.encode("utf-8"))


def decode_key(cursor: str, key_type: type) -> str | int:
    """The paging key a cursor names (400 ``invalid`` if it is not of the pattern)."""
    raw = _decode(cursor, _ANY, "URL-safe base64")
    if key_type is int:
        return min(int.from_bytes(raw, "big"), _MAX_ID)
    # Names never hold NUL, and PostgreSQL refuses it in a text parameter.
    return raw.decode("utf-8", errors="replace").replace("\x00", "")


def encode_log(engine_cursor: str) -> str:
    """A log cursor from the engine's ``"<start commit id>+<offset>"``."""
    start, _, offset = engine_cursor.partition("+")
    return encode(bytes.fromhex(start) + int(offset).to_bytes(4, "big"))


def decode_log(cursor: str) -> str:
    """The engine's ``"<start commit id>+<offset>"`` for a log cursor."""
    raw = _decode(cursor, _LOG, "32 characters of URL-safe base64")
    return f"{raw[:20].hex()}+{int.from_bytes(raw[20:], 'big')}"


#: A search cursor: 20 bytes of changeset id, a 4-byte line, then the path (UTF-8), at least 32
#: characters.
SEARCH_PATTERN = r"^[A-Za-z0-9_-]{32}(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2,3})?$"
_SEARCH = re.compile(SEARCH_PATTERN.replace("$", r"\Z"))


def encode_search(commit: str, path: str | None, line: int) -> str:
    """A search cursor: the changeset searched, and the position after which the next page starts."""
    raw = (path or "").encode("utf-8", "surrogateescape")
    return encode(bytes.fromhex(commit) + min(line, 2**32 - 1).to_bytes(4, "big") + raw)


def decode_search(cursor: str) -> tuple[str, str | None, int]:
    """``(changeset id, path or None, line)`` of a search cursor."""
    raw = _decode(cursor, _SEARCH, "URL-safe base64 of at least 32 characters")
    path = raw[24:].decode("utf-8", "surrogateescape").replace("\x00", "")
    return raw[:20].hex(), path or None, int.from_bytes(raw[20:24], "big")
