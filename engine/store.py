"""Object stores: the port through which the engine reads and writes git objects.

``ObjectStore`` is the interface every engine function takes first (``diff_trees(store, a, b)``).
Two implementations, one contract test suite:

* :class:`MemoryStore` — a dict; for tests and for measuring the engine's own CPU cost.
* :class:`DiskStore` — a bare git repository. Reads go through libgit2 (pygit2) at C speed,
  loose objects and packs alike. Writes are ours, because they must be durable before any
  database row names them: every batch (a changeset's objects, a merge's, one upload) is one
  pack, fsynced, then its directory, fsynced (docs/adr/0001, 0015, 0020). The pack's index is
  derived data, written but not synced: a process killed leaves it whole in the page cache, and
  after a power loss (a new boot) the first store to open the repository checks every index
  against its checksum and rebuilds one that is missing or torn from its pack.
* A store given a :class:`PackJournal` (the server's: the database) may make a small pack
  durable another way: the journal keeps its bytes in the transaction that will name its
  objects, the file is written without an fsync, and the first open in a new boot writes back
  every journaled pack a power loss took (docs/adr/0023). A checkpoint syncs the files and lets
  the journal forget them.

The base class caches parsed trees and commits by id. Objects are immutable, so a cached parse
never goes stale; the tree cache is bounded by a number of entries and evicts least recently used.
Every lookup is counted in a :class:`CacheStats` (one per store, or one shared by several: the
server shares one per process and reports its hit rates).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import struct
import threading
import zlib
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from hashlib import sha1
from typing import Any, TypeVar

from .errors import CorruptObject, ObjectMissing, WrongObjectType
from .objects import (
    BLOB,
    COMMIT,
    OBJECT_TYPES,
    TREE,
    Commit,
    GraphNode,
    ObjectId,
    Tree,
    decode_commit,
    decode_tree,
    encode_tree,
    hash_object,
)

T = TypeVar("T")

#: Default budget of the parsed-tree cache, in tree entries (about 150 bytes each in CPython).
DEFAULT_TREE_CACHE_ENTRIES = 500_000
_COMMIT_CACHE_SIZE = 100_000


class CacheStats:
    """Lookups of the parsed-object caches: hits and misses per cache (``"tree"``, ``"commit"``).

    Thread-safe; one instance may count for many stores. Whoever reports the numbers reads
    :meth:`snapshot` (cumulative counts, never reset).
    """

    CACHES = ("tree", "commit")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = {(cache, hit): 0 for cache in self.CACHES for hit in (True, False)}

    def count(self, cache: str, *, hit: bool) -> None:
        """One lookup of ``cache``."""
        with self._lock:
            self._counts[cache, hit] += 1

    def snapshot(self) -> dict[tuple[str, bool], int]:
        """``{(cache, hit): lookups}`` so far."""
        with self._lock:
            return dict(self._counts)


class ObjectStore(ABC):
    """Content-addressed storage of git objects, plus parsed-object caches."""

    def __init__(
        self, *, tree_cache_entries: int = DEFAULT_TREE_CACHE_ENTRIES, cache_stats: CacheStats | None = None
    ) -> None:
        self._tree_cache: OrderedDict[ObjectId, Tree] = OrderedDict()
        self._tree_cache_entries = 0
        self._tree_cache_budget = tree_cache_entries
        self._commit_cache: OrderedDict[ObjectId, Commit] = OrderedDict()
        self._lock = threading.Lock()
        #: Hits and misses of the caches above.
        self.cache_stats = cache_stats if cache_stats is not None else CacheStats()
        # The commit graph's memo (generation numbers), owned by engine.graph: read and fill it
        # only through graph_node, known_nodes and remember_nodes there.
        self._graph_nodes: dict[ObjectId, GraphNode] = {}

    # -- the port: what an implementation provides ------------------------------------

    @abstractmethod
    def contains(self, oid: ObjectId) -> bool:
        """Whether the object is stored."""

    @abstractmethod
    def kind(self, oid: ObjectId) -> str | None:
        """The object's kind (blob, tree, commit) without reading its content; None if absent."""

    @abstractmethod
    def _read_raw(self, oid: ObjectId) -> tuple[str, bytes] | None:
        """``(kind, content)`` of a stored object, or None if absent."""

    @abstractmethod
    def _write(self, objects: list[tuple[ObjectId, str, bytes]]) -> None:
        """Durably store objects (hashed and deduplicated; some may already be present)."""

    # -- reading ----------------------------------------------------------------------

    def read(self, oid: ObjectId) -> tuple[str, bytes]:
        """``(kind, content)`` of the object; raises :class:`ObjectMissing`."""
        found = self._read_raw(oid)
        if found is None:
            raise ObjectMissing.for_id(oid)
        return found

    def _read_kind(self, oid: ObjectId, kind: str) -> bytes:
        found_kind, raw = self.read(oid)
        if found_kind != kind:
            raise WrongObjectType(f"object {oid} is a {found_kind}, not a {kind}")
        return raw

    def read_blob(self, oid: ObjectId) -> bytes:
        return self._read_kind(oid, BLOB)

    def read_tree(self, oid: ObjectId) -> Tree:
        """The parsed tree (cached; do not mutate the result)."""
        with self._lock:
            tree = self._tree_cache.get(oid)
            if tree is not None:
                self._tree_cache.move_to_end(oid)
        self.cache_stats.count("tree", hit=tree is not None)
        if tree is not None:
            return tree
        tree = decode_tree(self._read_kind(oid, TREE))
        self._remember_tree(oid, tree)
        return tree

    def read_commit(self, oid: ObjectId) -> Commit:
        """The parsed commit (cached)."""
        commit = self._commit_cache.get(oid)
        self.cache_stats.count("commit", hit=commit is not None)
        if commit is None:
            commit = decode_commit(self._read_kind(oid, COMMIT))
            self._remember_commit(oid, commit)
        return commit

    def _remember_commit(self, oid: ObjectId, commit: Commit) -> None:
        with self._lock:
            self._commit_cache[oid] = commit
            if len(self._commit_cache) > _COMMIT_CACHE_SIZE:
                self._commit_cache.popitem(last=False)

    def _remember_tree(self, oid: ObjectId, tree: Tree) -> None:
        with self._lock:
            if oid in self._tree_cache or len(tree) > self._tree_cache_budget:
                return
            self._tree_cache[oid] = tree
            self._tree_cache_entries += len(tree) + 1
            while self._tree_cache_entries > self._tree_cache_budget:
                _, evicted = self._tree_cache.popitem(last=False)
                self._tree_cache_entries -= len(evicted) + 1

    # -- writing ----------------------------------------------------------------------

    def add(self, kind: str, raw: bytes) -> ObjectId:
        """Durably store one object and return its id."""
        return self.add_many([(kind, raw)])[0]

    def add_many(self, objects: Iterable[tuple[str, bytes]]) -> list[ObjectId]:
        """Durably store a batch of objects (one pack on disk) and return their ids in order."""
        ids: list[ObjectId] = []
        new: dict[ObjectId, tuple[ObjectId, str, bytes]] = {}
        for kind, raw in objects:
            if kind not in OBJECT_TYPES:
                raise ValueError(f"unknown object kind {kind!r}")
            oid = hash_object(kind, raw)
            ids.append(oid)
            new.setdefault(oid, (oid, kind, raw))
        if new:
            self._write(list(new.values()))
        return ids

    def add_tree(self, tree: Tree) -> ObjectId:
        """Store a tree built in memory, keeping its parsed form in the cache."""
        batch = ObjectBatch(self)
        oid = batch.add_tree(tree)
        batch.flush()
        return oid


class ObjectBatch:
    """Objects being created for one changeset or merge, written to the store in one go.

    Nothing reaches the store until :meth:`flush`; a refused operation simply drops the
    batch, so no half-written state is left behind. It reads like a store (pending objects
    first), so engine functions can work on objects that are not written yet.
    """

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._objects: dict[ObjectId, tuple[str, bytes]] = {}
        self._trees: dict[ObjectId, Tree] = {}
        self._commits: dict[ObjectId, Commit] = {}

    def add(self, kind: str, raw: bytes) -> ObjectId:
        oid = hash_object(kind, raw)
        self._objects[oid] = (kind, raw)
        return oid

    def add_tree(self, tree: Tree) -> ObjectId:
        oid = self.add(TREE, encode_tree(tree))
        self._trees[oid] = tree
        return oid

    def add_commit(self, commit: Commit) -> ObjectId:
        oid = self.add(COMMIT, commit.encode())
        self._commits[oid] = commit
        return oid

    def read_tree(self, oid: ObjectId) -> Tree:
        """A tree from this batch or the store."""
        tree = self._trees.get(oid)
        return tree if tree is not None else self.store.read_tree(oid)

    def read_blob(self, oid: ObjectId) -> bytes:
        pending = self._objects.get(oid)
        if pending is not None and pending[0] == BLOB:
            return pending[1]
        return self.store.read_blob(oid)

    def contains(self, oid: ObjectId) -> bool:
        return oid in self._objects or self.store.contains(oid)

    def __len__(self) -> int:
        return len(self._objects)

    def flush(self) -> None:
        """Write every pending object durably (one batch), then cache the parsed trees and
        commits: the next landing on a stream reads the head this one wrote (without the cache,
        a libgit2 miss and a rescan of the pack directory for the pack just written)."""
        if self._objects:
            self.store.add_many(self._objects.values())
        for oid, tree in self._trees.items():
            self.store._remember_tree(oid, tree)
        for oid, commit in self._commits.items():
            self.store._remember_commit(oid, commit)
        self._objects.clear()
        self._trees.clear()
        self._commits.clear()


# ------------------------------------------------------------------------------ memory


class MemoryStore(ObjectStore):
    """Objects in a dict. Not durable; the engine's CPU cost without I/O."""

    def __init__(
        self, *, tree_cache_entries: int = DEFAULT_TREE_CACHE_ENTRIES, cache_stats: CacheStats | None = None
    ) -> None:
        super().__init__(tree_cache_entries=tree_cache_entries, cache_stats=cache_stats)
        self._objects: dict[ObjectId, tuple[str, bytes]] = {}

    def contains(self, oid: ObjectId) -> bool:
        return oid in self._objects

    def kind(self, oid: ObjectId) -> str | None:
        found = self._objects.get(oid)
        return None if found is None else found[0]

    def _read_raw(self, oid: ObjectId) -> tuple[str, bytes] | None:
        return self._objects.get(oid)

    def _write(self, objects: list[tuple[ObjectId, str, bytes]]) -> None:
        for oid, kind, raw in objects:
            self._objects.setdefault(oid, (kind, raw))

    def __len__(self) -> int:
        return len(self._objects)

    def __iter__(self) -> Iterator[ObjectId]:
        """Every stored object id (to copy a memory repository elsewhere, e.g. for git)."""
        return iter(list(self._objects))


# ------------------------------------------------------------------------------ disk

_KIND_NUMBER = {COMMIT: 1, TREE: 2, BLOB: 3}
_NUMBER_KIND = {number: kind for kind, number in _KIND_NUMBER.items()}


def _compress(data: bytes) -> bytes:
    # A deflate window sized to the object: zlib's default 32 KiB window (plus its 256 KiB
    # of hash tables) costs ~80 µs per call to allocate on this kind of VM, ~4 µs when sized
    # to a small object. git inflates any window size. See docs/adr/0001.
    wbits = min(15, max(9, len(data).bit_length() + 1))
    compressor = zlib.compressobj(1, zlib.DEFLATED, wbits, min(8, max(1, wbits - 8)))
    return compressor.compress(data) + compressor.flush()


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a directory's entries durable (a file created, linked or renamed into it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(directory: str, final_name: str, data: bytes, prefix: str, *, sync: bool) -> None:
    """Write ``data`` to ``directory/final_name``: a temporary file created read-only (its mode
    is final before its name is), fsynced if ``sync``, renamed (the directory's fsync is the
    caller's). Plain descriptors, named by process and a counter: ``tempfile.mkstemp``'s random
    name, its Python file object and a ``chmod`` cost more than the writes on a landing."""
    while True:
        temporary = os.path.join(directory, f"{prefix}{os.getpid()}_{next(_temporary_numbers)}")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
            break
        except FileExistsError:  # left by an earlier process of the same id that crashed
            continue
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, os.path.join(directory, final_name))
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


_temporary_numbers = itertools.count()


#: The file of a repository naming the boot whose first store checked its pack indexes.
INDEXES_CHECKED = "agentgit-indexes-checked"
#: Where, in a repository, a pack found torn after a power loss is moved (see repair_pack_indexes).
TORN_PACKS = "agentgit-torn-packs"


def boot_id() -> str | None:
    """This kernel's boot (a new one after every power loss or crash of the machine), or None
    where the system does not say."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


class PackJournal(ABC):
    """Where a :class:`DiskStore` may keep a pack instead of fsyncing its file (docs/adr/0023).

    The journal's promise: what :meth:`record` accepts is durable when, and only when, the
    transaction that names the pack's objects commits; nothing acknowledges them before that."""

    @abstractmethod
    def record(self, name: str, pack: bytes) -> bool:
        """Keep ``pack`` (the file ``name``.pack) in the caller's transaction, if there is one and
        the pack is small enough; whether it did (if not, the store fsyncs the file)."""

    @abstractmethod
    def recorded(self) -> list[tuple[str, bytes]]:
        """The packs kept and not yet forgotten after a checkpoint, oldest first."""


def _open_odb(objects_dir: str) -> Any:
    import pygit2

    # As git reads objects: their ids checked when they arrive (index-pack on a push or a fetch,
    # our own hashing on a write, git fsck on demand), not re-hashed on every read. libgit2's
    # default re-hashes each object it reads: half of a blame's time on Flask's app.py
    # (docs/adr/0032). A process-wide switch, set by every store that opens (the same value).
    pygit2.settings.enable_strict_hash_verification(False)
    return pygit2.Odb(objects_dir)


def _pack_is_whole(pack: bytes) -> bool:
    """Whether ``pack`` is all there: git's header and its SHA-1 trailer right."""
    return len(pack) >= 32 and pack[:4] == b"PACK" and sha1(pack[:-20]).digest() == pack[-20:]


def _index_is_whole(path: str, pack_checksum: bytes) -> bool:
    """Whether the index at ``path`` exists, ends in its own right checksum and names the pack
    whose trailing checksum is ``pack_checksum`` (git itself reads only its header)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return False
    return len(data) >= 1072 and data[-40:-20] == pack_checksum and sha1(data[:-20]).digest() == data[-20:]


def _pack_entries(pack: bytes) -> list[tuple[bytes, int, int]]:
    """The ``(binary id, offset, crc32)`` entries of a pack of whole objects (what this store
    writes), for :func:`pack_index`: the index rebuilt from the pack, as ``git index-pack`` does."""
    if not _pack_is_whole(pack):
        raise CorruptObject("not a whole pack: its checksum is wrong")
    (count,) = struct.unpack(">I", pack[8:12])
    entries = []
    offset = 12
    for _ in range(count):
        byte = pack[offset]
        number = (byte >> 4) & 7
        size, shift, position = byte & 0x0F, 4, offset + 1
        while byte & 0x80:
            byte = pack[position]
            size |= (byte & 0x7F) << shift
            shift += 7
            position += 1
        kind = _NUMBER_KIND.get(number)
        if kind is None:  # a delta: git's packs, whose indexes git synced itself
            raise CorruptObject(f"the pack entry at {offset} is a delta: rebuild its index with git index-pack")
        inflater = zlib.decompressobj()
        raw = inflater.decompress(pack[position:-20])
        end = len(pack) - 20 - len(inflater.unused_data)
        if len(raw) != size or not inflater.eof:
            raise CorruptObject(f"the pack entry at {offset} is torn")
        entries.append((bytes.fromhex(hash_object(kind, raw)), offset, zlib.crc32(pack[offset:end])))
        offset = end
    return entries


_LARGE_OFFSET = 0x80000000
_INDEX_HEADER = b"\377tOc" + struct.pack(">I", 2)


#: A v2 index's header and fan-out table, whose last row counts the pack's objects.
_INDEX_FANOUT_END = 8 + 256 * 4


def _index_count(index: bytes) -> int:
    """How many objects the pack of a v2 index holds (its first ``_INDEX_FANOUT_END`` bytes do)."""
    if index[:8] != _INDEX_HEADER or len(index) < _INDEX_FANOUT_END:
        raise CorruptObject("not a version 2 pack index")
    (count,) = struct.unpack_from(">I", index, _INDEX_FANOUT_END - 4)
    return int(count)


def _index_entries(index: bytes) -> list[tuple[bytes, int, int]]:
    """The ``(binary id, offset, crc32)`` entries of a v2 pack index, in id order (the inverse of
    :func:`pack_index`)."""
    count = _index_count(index)
    ids_at = _INDEX_FANOUT_END
    if len(index) < ids_at + 28 * count + 40:
        raise CorruptObject("a pack index shorter than its object count")
    crcs = struct.unpack_from(f">{count}I", index, ids_at + 20 * count)
    offsets = struct.unpack_from(f">{count}I", index, ids_at + 24 * count)
    large_at = ids_at + 28 * count
    entries = []
    for n, (crc, offset) in enumerate(zip(crcs, offsets, strict=True)):
        if offset & _LARGE_OFFSET:
            (offset,) = struct.unpack_from(">Q", index, large_at + 8 * (offset & ~_LARGE_OFFSET))
        entries.append((index[ids_at + 20 * n : ids_at + 20 * n + 20], offset, crc))
    return entries


def _multi_pack_indexed(pack_dir: str) -> set[str] | None:
    """The packs (``pack-<id>``) that git's multi-pack index names, or None if it cannot be read.
    Its format (gitformat-pack): a 12-byte header whose seventh byte counts the chunks, a table
    of ``(4-byte id, 8-byte offset)`` with one more row marking the end, and the ``PNAM`` chunk:
    the packs' index names, each ending in a NUL."""
    try:
        with open(os.path.join(pack_dir, "multi-pack-index"), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return set()
    if data[:4] != b"MIDX" or len(data) < 12:
        return None
    table = [struct.unpack_from(">4sQ", data, 12 + 12 * row) for row in range(data[6] + 1)]
    for (chunk, start), (_next, end) in itertools.pairwise(table):
        if chunk == b"PNAM":
            return {name.decode().removesuffix(".idx") for name in data[start:end].split(b"\0") if name}
    return None


def geometric_split(weights: list[int], factor: int = 2) -> int:
    """How many of the packs (their object counts, ascending) to fold into one so that what
    remains, with the new pack, forms a geometric progression of ``factor``: git's own choice
    for ``git repack --geometric`` (builtin/repack.c, ``split_pack_geometry``)."""
    if not weights:
        return 0
    split = len(weights) - 1
    while split > 0 and weights[split] >= factor * weights[split - 1]:
        split -= 1
    if split:
        split += 1  # the heavier of the last pair compared is not in the progression
    total = sum(weights[:split])
    while split < len(weights) and weights[split] < factor * total:
        total += weights[split]
        split += 1
    return split


def pack_index(entries: list[tuple[bytes, int, int]], pack_checksum: bytes) -> bytes:
    """A pack's v2 index (git's gitformat-pack) of ``(binary id, offset, crc32)`` entries, built
    whole: a table at a time, where dulwich's writer packs each entry's fields one call at a time
    (7 % of a one-file landing's CPU)."""
    entries = sorted(entries)
    counts = [0] * 256
    for oid, _offset, _crc in entries:
        counts[oid[0]] += 1
    large: list[int] = []
    offsets = []
    for _oid, offset, _crc in entries:
        if offset < _LARGE_OFFSET:
            offsets.append(offset)
        else:  # an offset past 2 GiB: its 31 bits index the 8-byte table
            offsets.append(_LARGE_OFFSET | len(large))
            large.append(offset)
    count = len(entries)
    body = b"".join(
        [
            _INDEX_HEADER,
            struct.pack(">256I", *itertools.accumulate(counts)),
            b"".join(oid for oid, _offset, _crc in entries),
            struct.pack(f">{count}I", *(crc for _oid, _offset, crc in entries)),
            struct.pack(f">{count}I", *offsets),
            struct.pack(f">{len(large)}Q", *large),
            pack_checksum,
        ]
    )
    return body + sha1(body).digest()


class DiskStore(ObjectStore):
    """A bare git repository on local disk (created if missing)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        tree_cache_entries: int = DEFAULT_TREE_CACHE_ENTRIES,
        cache_stats: CacheStats | None = None,
        journal: PackJournal | None = None,
    ) -> None:
        import pygit2  # imported here so a memory-only user never needs libgit2

        super().__init__(tree_cache_entries=tree_cache_entries, cache_stats=cache_stats)
        self.path = os.fspath(path)
        if not os.path.exists(os.path.join(self.path, "objects")):
            pygit2.init_repository(self.path, bare=True)
        self._objects_dir = os.path.join(self.path, "objects")
        self._pack_dir = os.path.join(self._objects_dir, "pack")
        os.makedirs(self._pack_dir, exist_ok=True)
        self._boot_id = boot_id()
        # Without a boot id a power loss cannot be told apart, so nothing is left to be restored.
        self._journal = journal if self._boot_id is not None else None
        self._reopen()
        #: Packs :meth:`roll_up` found it may not fold (git's deltified ones), not read again.
        self._not_foldable: set[str] = set()
        self._repair_once_per_boot()

    def _reopen(self) -> None:
        """A fresh view of the objects (libgit2 lists the packs again), noting the pack
        directory's modification time first: :meth:`_reopened` tells by it whether packs may
        have gone since."""
        self._odb_listed = os.stat(self._pack_dir).st_mtime_ns
        self._odb = _open_odb(self._objects_dir)

    def _reopened(self, call: Callable[[Any], T]) -> T:
        """``call(odb)``; if a pack it knew of was removed meanwhile (a roll-up or repack by
        another process folded it into a new one), once more on the pack directory as it is
        now, as git re-reads its packs when one disappears. libgit2 answers "invalid packfile",
        or, where it had listed the pack but not opened it, that the object is missing: it
        rescans the directory on a miss but keeps the packs it knew."""
        try:
            return call(self._odb)
        except OSError:
            self._reopen()
            return call(self._odb)
        except KeyError:  # pygit2's NotFoundError
            if os.stat(self._pack_dir).st_mtime_ns == self._odb_listed:
                raise  # no pack came or went since libgit2 listed them: it is missing
            self._reopen()
            return call(self._odb)

    def contains(self, oid: ObjectId) -> bool:
        # On a miss libgit2 rescans the pack directory, so packs written since (by this
        # or another process) are found; a miss after packs went away is asked again.
        def present(odb: Any) -> bool:
            if oid in odb:
                return True
            raise KeyError(oid)

        try:
            return self._reopened(present)
        except KeyError:
            return False

    def kind(self, oid: ObjectId) -> str | None:
        try:
            number, _size = self._reopened(lambda odb: odb.read_header(oid))
        except KeyError:  # pygit2's NotFoundError is a KeyError
            return None
        return _NUMBER_KIND[number]

    def _read_raw(self, oid: ObjectId) -> tuple[str, bytes] | None:
        try:
            number, data = self._reopened(lambda odb: odb.read(oid))
        except KeyError:
            return None
        return _NUMBER_KIND[number], data

    def _write(self, objects: list[tuple[ObjectId, str, bytes]]) -> None:
        # Every batch is one pack: two fsyncs (the pack, the directory) whatever its
        # size, where a loose object costs two (its file, its fan-out directory) and a third when
        # that directory is new. Objects stored already are not looked for first (each miss cost
        # libgit2 a rescan of the pack directory, 4 % of a landing's CPU): a duplicate in a pack
        # is harmless, and the roll-up of the packs a busy repository gathers drops it
        # (repos.services.packs, git's geometric repack).
        self._write_pack(objects)

    def packs(self) -> int:
        """How many packs the repository holds (a directory listing: no pack is opened)."""
        return sum(1 for name in os.listdir(self._pack_dir) if name.endswith(".pack"))

    def _write_pack(self, objects: list[tuple[ObjectId, str, bytes]]) -> None:
        """One pack of undeltified objects plus its v2 index; each file fsynced once."""
        entries = []
        for oid, kind, raw in objects:
            size = len(raw)
            header = bytearray()
            byte = (_KIND_NUMBER[kind] << 4) | (size & 0x0F)
            size >>= 4
            while size:
                header.append(byte | 0x80)
                byte = size & 0x7F
                size >>= 7
            header.append(byte)
            entry = bytes(header) + _compress(raw)
            entries.append((bytes.fromhex(oid), zlib.crc32(entry), entry))
        self._write_pack_files(entries, journal=self._journal)

    def _write_pack_files(self, entries: list[tuple[bytes, int, bytes]], *, journal: PackJournal | None) -> str:
        """The pack of ``entries`` (``(binary id, crc32, entry)``, in pack order) and its index,
        durable before this returns: kept by ``journal`` in the caller's transaction if it takes
        it, else the pack and the directory fsynced. The pack's name."""
        index_entries = []
        offset = 12  # after the pack's header
        for oid, crc, entry in entries:
            index_entries.append((oid, offset, crc))
            offset += len(entry)
        body = b"".join([b"PACK", struct.pack(">II", 2, len(entries)), *[entry for _oid, _crc, entry in entries]])
        checksum = sha1(body).digest()
        name = "pack-" + checksum.hex()
        pack = body + checksum
        # Journaled, the pack is durable with the transaction that names its objects, and its
        # files are restored from the journal after a power loss (restore_journaled_packs).
        journaled = journal is not None and journal.record(name, pack)
        # The pack first, then its index: readers only see a pack once its index exists. The
        # index is not synced where a boot id tells a power loss apart (repair_pack_indexes);
        # the directory's fsync makes both names durable before any row names the objects.
        _write_file(self._pack_dir, name + ".pack", pack, "tmp_pack_", sync=not journaled)
        index = pack_index(index_entries, checksum)
        _write_file(self._pack_dir, name + ".idx", index, "tmp_idx_", sync=self._boot_id is None)
        if not journaled:
            fsync_dir(self._pack_dir)
        return name

    def roll_up(self, factor: int = 2) -> int:
        """Fold the small packs this store's writes left into one, without a git process; how
        many packs it folded (docs/adr/0028).

        The packs are chosen as git's geometric repack chooses them (:func:`geometric_split`),
        among those a roll-up may fold: whole objects only (this store's own packs, not git's
        deltified ones, which git's repack folds), not named by the multi-pack index
        maintenance wrote (which must keep naming packs that exist), not kept (``.keep``), not
        cruft (``.mtimes``). Their entries are copied as they are, compressed, each object once.
        The new pack is fsynced with the directory before the old ones go, so it is durable
        whatever a journal kept of them, and a reader that had listed an old pack reads again
        (see :meth:`_reopened`). The caller holds the repository's repack lock."""
        covered = _multi_pack_indexed(self._pack_dir)
        if covered is None:
            return 0
        present = set(os.listdir(self._pack_dir))
        candidates = []
        for file in present:
            name = file.removesuffix(".idx")
            if not (name.startswith("pack-") and file.endswith(".idx")) or name + ".pack" not in present:
                continue
            if name in covered or name in self._not_foldable or {name + ".keep", name + ".mtimes"} & present:
                continue
            try:  # the object count only: big packs stay unread
                with open(os.path.join(self._pack_dir, file), "rb") as f:
                    candidates.append((_index_count(f.read(_INDEX_FANOUT_END)), name))
            except (FileNotFoundError, CorruptObject):
                continue
        candidates.sort()
        folded: list[str] = []
        copied: dict[bytes, tuple[bytes, int, bytes]] = {}  # by id: each object once, in pack order
        for _count, name in candidates[: geometric_split([count for count, _name in candidates], factor)]:
            spans = self._whole_object_spans(name)
            if spans is None:
                self._not_foldable.add(name)
                continue
            for span in spans:
                copied.setdefault(span[0], span)
            folded.append(name)
        if len(folded) < 2:
            return 0
        name = self._write_pack_files(list(copied.values()), journal=None)  # fsynced: the old ones go
        for old in folded:
            if old == name:
                continue
            for suffix in (".idx", ".pack", ".rev", ".bitmap"):  # the index first: readers look for it
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self._pack_dir, old + suffix))
        self._reopen()
        return len(folded)

    def _whole_object_spans(self, name: str) -> list[tuple[bytes, int, bytes]] | None:
        """``(binary id, crc32, entry)`` of each entry of pack ``name``, in pack order; None if one
        is a delta or does not match its index's checksum, or the pack is gone."""
        try:
            with open(os.path.join(self._pack_dir, name + ".idx"), "rb") as f:
                entries = _index_entries(f.read())
            with open(os.path.join(self._pack_dir, name + ".pack"), "rb") as f:
                pack = f.read()
        except (FileNotFoundError, CorruptObject):
            return None
        entries.sort(key=lambda entry: entry[1])
        ends = [offset for _oid, offset, _crc in entries[1:]] + [len(pack) - 20] * bool(entries)
        spans = []
        for (oid, start, crc), end in zip(entries, ends, strict=True):
            entry = pack[start:end]
            if not entry or (entry[0] >> 4) & 7 not in _NUMBER_KIND or zlib.crc32(entry) != crc:
                return None
            spans.append((oid, crc, entry))
        return spans

    def restore_journaled_packs(self) -> list[str]:
        """Write back each journaled pack whose file a power loss took or tore (fsynced, then the
        directory); the packs restored. A pack a roll-up had folded into another comes back as
        a duplicate of objects stored twice, which git and libgit2 read alike."""
        if self._journal is None:
            return []
        restored = []
        for name, pack in self._journal.recorded():
            path = os.path.join(self._pack_dir, name + ".pack")
            try:
                with open(path, "rb") as f:
                    if f.read() == pack:
                        continue
            except FileNotFoundError:
                pass
            _write_file(self._pack_dir, name + ".pack", pack, "tmp_pack_", sync=True)
            restored.append(name)
        if restored:
            fsync_dir(self._pack_dir)
        return restored

    def sync_packs(self, names: Iterable[str]) -> None:
        """Make the named packs durable by their files (each one still there fsynced, then the
        directory, which also makes a repack's renames durable): a checkpoint of the journal,
        after which it may forget them."""
        for name in names:
            try:
                fd = os.open(os.path.join(self._pack_dir, name + ".pack"), os.O_RDONLY)
            except FileNotFoundError:
                continue  # folded into a pack a repack wrote (git fsyncs its packs)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(self._pack_dir)

    def repair_pack_indexes(self) -> list[str]:
        """Check every pack's index (present, its checksum right, naming its pack) and rebuild
        each one that is not from its pack; the packs whose index was rebuilt or that were
        moved aside.

        A pack that is not whole itself can only be one written without an fsync whose
        transaction never committed (every other pack was synced before any row named it, or
        is back from the journal): nothing names its objects. It is moved aside, with its
        index, into ``TORN_PACKS`` rather than deleted, for whoever wants to look."""
        rebuilt = []
        for name in sorted(os.listdir(self._pack_dir)):
            if not (name.startswith("pack-") and name.endswith(".pack")):
                continue
            pack_path = os.path.join(self._pack_dir, name)
            index_name = name[: -len(".pack")] + ".idx"
            try:
                f = open(pack_path, "rb")  # noqa: SIM115 (closed below)
            except FileNotFoundError:
                continue  # folded by a roll-up of another process since the listing
            with f:
                if os.fstat(f.fileno()).st_size >= 32:
                    f.seek(-20, os.SEEK_END)  # only the trailer: a pack may be big, and is synced
                    if _index_is_whole(os.path.join(self._pack_dir, index_name), f.read()):
                        continue
                f.seek(0)
                pack = f.read()
            if not _pack_is_whole(pack):
                self._move_aside(name, index_name)
                rebuilt.append(name)
                continue
            _write_file(self._pack_dir, index_name, pack_index(_pack_entries(pack), pack[-20:]), "tmp_idx_", sync=False)
            rebuilt.append(name)
        if rebuilt:
            self._reopen()
        return rebuilt

    def _move_aside(self, *names: str) -> None:
        torn = os.path.join(self.path, TORN_PACKS)
        os.makedirs(torn, exist_ok=True)
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.replace(os.path.join(self._pack_dir, name), os.path.join(torn, name))

    def _repair_once_per_boot(self) -> None:
        """Restore the journaled packs and repair the pack indexes unless this boot did already
        (the marker names the boot that checked them last). A marker lost or torn in a power
        loss only makes the next check run."""
        if self._boot_id is None:
            return  # no boot id: every index is synced as it is written
        marker = os.path.join(self.path, INDEXES_CHECKED)
        try:
            with open(marker) as f:
                if f.read() == self._boot_id:
                    return
        except FileNotFoundError:
            pass
        self.restore_journaled_packs()
        self.repair_pack_indexes()
        _write_file(self.path, INDEXES_CHECKED, self._boot_id.encode(), "tmp_checked_", sync=False)
