"""The trigram index of code search: one SQLite file beside a repository (docs/adr/0033).

Content-addressed by blob id, so every stream and revision shares it and a landing adds only the
blobs it brought:

* ``blobs``: each indexed blob's number, id, size and kind (text, binary, or too large to index:
  those are always read);
* ``grams``: an FTS5 table with the ``trigram`` tokenizer, contentless (git keeps the bytes) and
  ``detail=none`` (which blobs hold a trigram, not where: the candidates are checked anyway),
  keyed by the blob's number;
* ``lists``: revisions' file lists (engine.search.FileList), by root tree, so that a process
  that has never seen a revision does not walk its whole tree.

It is derived data: deleting the file loses nothing but speed, and a blob it does not know is a
candidate of every search (:meth:`SearchIndex.candidates`), so a search is exact whatever the
index holds. Several processes may write it (WAL, one writer at a time, ``INSERT OR IGNORE``);
each reads only the rows added since it last looked.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from .search import FileList
from .trigrams import AND_OP, NONE_OP, OR_OP, Query

#: Blobs larger than this are not indexed, only read by every search that reaches them.
DEFAULT_MAX_INDEXED_BYTES = 1 << 20
TEXT, BINARY, TOO_LARGE = 0, 1, 2
#: More candidates than a file list's length over this are walked file by file, not listed.
DENSE_SHARE = 8
#: File lists kept (the least recently saved go first).
KEPT_LISTS = 64

_SCHEMA = """
CREATE TABLE IF NOT EXISTS blobs (
    num INTEGER PRIMARY KEY, oid BLOB NOT NULL UNIQUE, size INTEGER NOT NULL, kind INTEGER NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS grams USING fts5(
    body, content='', detail=none, tokenize='trigram case_sensitive 1');
CREATE TABLE IF NOT EXISTS lists (tree TEXT PRIMARY KEY, files BLOB NOT NULL, saved INTEGER NOT NULL);
"""


def fts_query(query: Query) -> str:
    """The FTS5 expression of a trigram query (neither ALL nor NONE)."""
    parts = ['"' + trigram.replace('"', '""') + '"' for trigram in query.trigrams]
    parts += ["(" + fts_query(sub) + ")" for sub in query.subs]
    return (" AND " if query.op == AND_OP else " OR ").join(parts)


def index_text(data: bytes) -> str:
    """What the tokenizer reads of a blob: its UTF-8 text, U+FFFD for every byte that is not
    UTF-8 and for NUL (at which FTS5 would stop reading)."""
    return data.decode("utf-8", "replace").replace("\x00", "\ufffd")


@dataclass(frozen=True)
class IndexStats:
    blobs: int
    blob_bytes: int
    too_large: int
    file_bytes: int


class SearchIndex:
    """The index at ``path`` (created when missing). Thread-safe: one connection per thread."""

    def __init__(self, path: str, *, max_indexed_bytes: int = DEFAULT_MAX_INDEXED_BYTES) -> None:
        self.path = path
        self.max_indexed_bytes = max_indexed_bytes
        self._local = threading.local()
        self._lock = threading.Lock()
        #: blob id -> number, for every row seen; rows are only ever added.
        self._known: dict[bytes, int] = {}
        self._oids: dict[int, bytes] = {}
        #: Tells this index's notes on file lists from another's (engine.search.FileList.unindexed).
        self._token = object()
        self._large: set[int] = set()
        self._seen = 0
        with self._connection() as db:
            db.executescript(_SCHEMA)

    def _connection(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            # Derived data: a power loss may cost the last transactions, which are found missing
            # and indexed again (a missing blob is read by every search, never lost).
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        return db

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # ------------------------------------------------------------------ reading

    def refresh(self) -> dict[bytes, int]:
        """The blobs indexed, as this process last read them plus the rows added since."""
        rows = (
            self._connection()
            .execute("SELECT num, oid, kind FROM blobs WHERE num > ? ORDER BY num", (self._seen,))
            .fetchall()
        )
        if rows:
            with self._lock:
                for num, oid, kind in rows:
                    self._known[bytes(oid)] = num
                    self._oids[num] = bytes(oid)
                    if kind == TOO_LARGE:
                        self._large.add(num)
                self._seen = max(self._seen, rows[-1][0])
        return self._known

    def matching(self, query: Query) -> set[int]:
        """The numbers of the indexed blobs that satisfy ``query`` (not ALL)."""
        if query.op == NONE_OP:
            return set()
        if query.op not in (AND_OP, OR_OP):
            raise ValueError(f"no FTS expression for {query.op}")
        rows = self._connection().execute("SELECT rowid FROM grams WHERE grams MATCH ?", (fts_query(query),))
        return {row[0] for row in rows}

    def candidates(self, query: Query, files: FileList) -> Iterable[int] | None:
        """engine.search.CandidateSource: the files whose blob the index holds and says may
        match, and every file whose blob it does not hold (or holds as too large to index)."""
        known = self.refresh()
        if query.op not in (AND_OP, OR_OP, NONE_OP):
            return None
        # The files it does not hold first: a blob indexed meanwhile (by another thread or
        # process) is then among them, and a row number this process has not read yet is skipped.
        unindexed = self._unindexed(files, known)
        nums = self.matching(query) | self._large
        if len(nums) > len(files) // DENSE_SHARE:
            # Most files may match (a common term): tested file by file as the search walks,
            # so that a page filled by the first files costs no more than those.
            unknown = set(unindexed)
            blobs = files.blobs
            return (index for index in range(len(blobs)) if index in unknown or known.get(blobs[index], 0) in nums)
        with self._lock:
            matched = {self._oids[num] for num in nums if num in self._oids}
        return sorted(set(files.positions(matched)).union(unindexed))

    def _unindexed(self, files: FileList, known: dict[bytes, int]) -> list[int]:
        """The files whose blob the index does not hold, noted on the list until rows are added."""
        version = (self._token, self._seen)
        noted = files.unindexed
        if noted is None or noted[0] != version:
            noted = files.unindexed = (version, [i for i, blob in enumerate(files.blobs) if blob not in known])
        return noted[1]

    def missing(self, blobs: Iterable[bytes]) -> list[bytes]:
        """Those of ``blobs`` the index does not hold, each once, in order."""
        known = self.refresh()
        return [blob for blob in dict.fromkeys(blobs) if blob not in known]

    # ------------------------------------------------------------------ writing

    def add(self, blobs: Iterable[tuple[bytes, bytes]]) -> int:
        """Index ``(blob id, content)`` pairs in one transaction; answers how many were new."""
        db = self._connection()
        added = 0
        db.execute("BEGIN IMMEDIATE")
        try:
            for oid, data in blobs:
                kind = TOO_LARGE if len(data) > self.max_indexed_bytes else BINARY if b"\x00" in data[:8000] else TEXT
                cursor = db.execute(
                    "INSERT OR IGNORE INTO blobs (oid, size, kind) VALUES (?, ?, ?)", (oid, len(data), kind)
                )
                if cursor.rowcount != 1:
                    continue  # another process indexed it meanwhile
                added += 1
                if kind != TOO_LARGE:
                    db.execute("INSERT INTO grams (rowid, body) VALUES (?, ?)", (cursor.lastrowid, index_text(data)))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return added

    def save_list(self, files: FileList) -> None:
        """Keep a revision's file list for the next process that searches it."""
        names = "\x00".join(files.paths).encode("utf-8", "surrogateescape")
        packed = zlib.compress(len(names).to_bytes(8, "big") + names + b"".join(files.blobs), 1)
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            saved = db.execute("SELECT coalesce(max(saved), 0) + 1 FROM lists").fetchone()[0]
            db.execute(
                "INSERT OR REPLACE INTO lists (tree, files, saved) VALUES (?, ?, ?)", (files.tree, packed, saved)
            )
            db.execute("DELETE FROM lists WHERE saved <= ?", (saved - KEPT_LISTS,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def load_list(self, tree: str) -> FileList | None:
        row = self._connection().execute("SELECT files FROM lists WHERE tree = ?", (tree,)).fetchone()
        if row is None:
            return None
        raw = zlib.decompress(row[0])
        size = int.from_bytes(raw[:8], "big")
        names = raw[8 : 8 + size].decode("utf-8", "surrogateescape")
        paths = names.split("\x00") if names else []
        ids = raw[8 + size :]
        return FileList(tree, paths, [ids[i : i + 20] for i in range(0, len(ids), 20)])

    def stats(self) -> IndexStats:
        db = self._connection()
        blobs, size = db.execute("SELECT count(*), coalesce(sum(size), 0) FROM blobs").fetchone()
        large = db.execute("SELECT count(*) FROM blobs WHERE kind = ?", (TOO_LARGE,)).fetchone()[0]
        on_disk = sum(
            os.path.getsize(self.path + suffix) for suffix in ("", "-wal") if os.path.exists(self.path + suffix)
        )
        return IndexStats(blobs, size, large, on_disk)

    def optimize(self) -> None:
        """Merge the FTS segments into one (after a large backfill)."""
        db = self._connection()
        db.execute("INSERT INTO grams (grams) VALUES ('optimize')")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
