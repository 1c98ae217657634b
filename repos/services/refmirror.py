"""The ref mirror: git refs on disk that follow the database, so git's own tools lose nothing.

The database owns every name (DESIGN.md decision 2). A repository directory is still a
self-consistent git repository, because its refs are kept as a derived mirror of the rows:

* ``refs/heads/<stream>`` — each non-empty stream's head, and ``HEAD`` → the default stream;
* ``refs/agentgit/changesets/<id>`` — a recorded changeset that may not be on any stream yet:
  written when it is created (before its row commits: the id is the commit itself, nothing to
  read back), removed when a landing puts it on a stream;
* ``refs/agentgit/proposals/<id>`` — a proposal not integrated (open, conflicted, closed: it
  may still be revised, resolved or reopened) whose head is not a recorded changeset (any
  commit of the store may be proposed; a recorded one is protected already).

So ``git gc --prune=now``, ``git repack -a -d`` or ``git fsck`` run in the directory see every
object the database names. Why per-changeset refs rather than one ref per stream plus a grace
period: a changeset that is never proposed is still named by its row, and ``--prune=now`` has no
grace. The landing hot path pays only plain file writes in git's lock-file protocol (create
``<ref>.lock`` exclusively, write, rename: what git does, so git waits for us and we for git):
a new file's inode, 0.8–1.3 ms on this machine's disk, against 6 ms for a ``git update-ref``
subprocess (docs/adr/0010); the removal of protection refs that a landing does not know about (a
changeset reached through another one) is left to :func:`rebuild`, which maintenance and
recovery run: a surplus protection ref costs nothing but a line in ``for-each-ref``.

Many new streams at once (a push of many branches) are written into ``packed-refs`` in one
rewrite, under git's lock of that file, rather than a loose file each; a landing writes its one
loose ref, and maintenance packs the loose ones once they are a share of the refs worth a
rewrite. :func:`rebuild` follows the events since the last rebuild, so it costs what changed.

Stream refs are written after the landing commits, from the database, under the ref's lock:
whoever writes last read the database last, so the mirror never goes back in time. A landing's
ref is written at most ``AGENTGIT["MIRROR_FOLLOW_S"]`` (0.1 s) after its commit, with the other
landings of the stream meanwhile (:class:`_Follower`), and a changeset landed in the request that
recorded it never had a protection ref. Between a commit and its mirror write new objects are
protected by our maintenance never pruning (repos.services.maintenance), not from a hand-run
``gc --prune=now`` (which git itself calls unsafe beside writers): run that on a repository at
rest. :func:`rebuild` closes the gap after a crash. A failed mirror write never fails the
landing: it is logged, and the next rebuild repairs it.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import heapq
import json
import logging
import mmap
import os
import subprocess
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings
from django.db import connections
from django.db.models import Exists, F, OuterRef, Q, QuerySet

from ..lookups import Rows
from ..models import Changeset, Event, Proposal, Repository, Stream
from .gitdir import configure, git, git_env
from .stores import repository_path

logger = logging.getLogger(__name__)

HEADS = "refs/heads/"
CHANGESETS = "refs/agentgit/changesets/"
PROPOSALS = "refs/agentgit/proposals/"
#: The namespaces the mirror owns; refs elsewhere are left alone.
MIRRORED = (HEADS, "refs/agentgit/")

#: A lock older than this was left by a process that died holding it (we hold ours for
#: microseconds; git's pack-refs for milliseconds).
_STALE_LOCK_S = 10.0
_LOCK_WAIT_S = 5.0
_ZERO = "0" * 40
#: The heads a landing moved its stream from and to (None: read the stream's head instead).
Moved = tuple[str | None, str | None] | None


# ----------------------------------------------------------------------------- ref files


class _RefLock:
    """git's lock file for the ref at ``path``: ``<path>.lock``, created exclusively; the new
    value is written to it and renamed over the ref (:meth:`commit`), or it is removed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = path.with_name(path.name + ".lock")
        self.fd: int | None = None
        self.committed = False

    def __enter__(self) -> _RefLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + _LOCK_WAIT_S
        pause = 0.0005
        while True:
            try:
                self.fd = os.open(self.lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                return self
            except FileExistsError:
                with contextlib.suppress(FileNotFoundError):
                    if time.time() - self.lock.stat().st_mtime > _STALE_LOCK_S:
                        self.lock.unlink()
                        continue
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.lock} is held") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.05)

    def commit(self, content: str | bytes) -> None:
        assert self.fd is not None, "commit() is called on a lock that is held"
        with memoryview(content.encode() if isinstance(content, str) else content) as rest:
            while rest:  # one write() may take less than a large packed-refs
                rest = rest[os.write(self.fd, rest) :]
        self._close()
        os.replace(self.lock, self.path)
        self.committed = True  # the lock file is the ref now; the next .lock is someone else's

    def _close(self) -> None:
        # Exactly once: a second close could close another thread's new file with this number.
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def __exit__(self, *exc_info) -> None:
        self._close()
        if not self.committed:
            with contextlib.suppress(FileNotFoundError):
                self.lock.unlink()


def _set_ref(git_dir: Path, name: str, value_of) -> None:
    """Write the loose ref ``name`` with ``value_of()`` (an id, or None to remove it), read under its lock."""
    path = git_dir / name
    with _RefLock(path) as lock:
        oid = value_of()
        if oid is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        else:
            lock.commit(f"{oid}\n")


def _remove_ref(git_dir: Path, name: str) -> None:
    """Remove a loose ref (a packed copy, if ``pack-refs`` made one, waits for :func:`rebuild`)."""
    _set_ref(git_dir, name, lambda: None)


def _safely(what: str, action, *args) -> None:
    try:
        action(*args)
    except Exception:  # the mirror is derived: never fail the change it follows
        logger.exception("ref mirror: %s failed; the next rebuild repairs it", what)


# ----------------------------------------------------------------------------- the hot path


def protect_changeset(repository_name: str, commit_id: str) -> None:
    """Protect a changeset being recorded (called before its row commits)."""
    git_dir = repository_path(repository_name)
    _safely("protect changeset", _set_ref, git_dir, CHANGESETS + commit_id, lambda: commit_id)


def protect_proposal(repository: Repository, proposal_id: int, head: str) -> None:
    """Protect the head of a proposal being opened or revised (called before its row commits),
    unless it is a recorded changeset: those are protected already (by their own ref until a
    stream reaches them, then by the stream, which only moves forward), and a new ref file costs
    about a millisecond on this kind of disk, a query a tenth of that."""
    if _RECORDED.all(repository.pk, head, model=Changeset, limit=1)[1]:
        return
    git_dir = repository_path(repository.name)
    _safely("protect proposal", _set_ref, git_dir, f"{PROPOSALS}{proposal_id}", lambda: head)


_RECORDED = Rows(
    lambda repository, head: Changeset.objects.filter(repository=repository, commit_id=head).values_list("pk"), int, str
)


def follow_stream(repository: Repository, stream_name: str, *, moved: Moved = None) -> None:
    """Mirror the stream's head as the database has it now (after the change committed).

    ``moved``: the head a landing that just committed moved from and to. If the loose ref
    still holds the first (read under the ref's lock), no later head has been mirrored, so the
    second is written without reading the database. A later landing's write that comes after
    this one finds this head and writes its own; one that came first left another head there,
    and this one then reads the database, as without ``moved``: the mirror never goes back in
    time. (A stream deleted and created again at the old head meanwhile could get the landed
    head in its ref, not back in time but beside it, until its next landing or rebuild.)"""

    def head() -> str | None:
        _using, rows = _STREAM_HEAD.all(repository.pk, stream_name, model=Stream, limit=1)
        return rows[0][0] if rows else None

    git_dir = repository_path(repository.name)
    if moved is not None and moved[0] is not None and moved[1] is not None:
        before, after = moved
        ref = git_dir / HEADS / stream_name

        def head_after_ours() -> str | None:
            try:
                mirrored = ref.read_bytes()
            except FileNotFoundError:
                mirrored = b""
            return after if mirrored == f"{before}\n".encode() else head()

        _safely("follow stream", _set_ref, git_dir, HEADS + stream_name, head_after_ours)
        return
    written: list[str | None] = []

    def head_noted() -> str | None:
        written.append(head())
        return written[-1]

    _safely("follow stream", _set_ref, git_dir, HEADS + stream_name, head_noted)
    if written == [None] and PackedRefs(git_dir).get(HEADS + stream_name) is not None:
        # A deleted (or emptied) stream whose ref maintenance packed: git rewrites packed-refs
        # without it. Rare, so a subprocess is fine here.
        _safely("forget stream", git, git_dir, "update-ref", "-d", HEADS + stream_name)


#: Every landing's mirror write reads the head (repos/lookups.py: compiled once).
_STREAM_HEAD = Rows(
    lambda repository, name: Stream.objects.filter(repository=repository, name=name).order_by().values_list("head"),
    int,
    str,
)


#: A batch of new stream refs goes into ``packed-refs`` (one rewrite of the file, whatever it
#: holds) rather than a loose file each (an inode each, about a millisecond on this disk) when it
#: is at least this many refs and at least 1/``REWRITE_PER_LOOSE`` of the refs packed already:
#: the rewrite costs 2-3 microseconds per packed ref (1.9 at 100 000, 2.7 at 1 000 000 refs,
#: docs/performance.md "Many streams"), so either way a new ref costs at most about a millisecond.
PACK_AT_LEAST = 32
REWRITE_PER_LOOSE = 300
PACKED_REFS = "packed-refs"
#: git's own header: its readers binary-search a file whose header says ``sorted``.
PACKED_HEADER = b"# pack-refs with: peeled fully-peeled sorted \n"
_NAMES_PER_QUERY = 500


def follow_streams(repository: Repository, names: list[str]) -> None:
    """Mirror many new streams at once (a push that created them): into ``packed-refs`` in one
    rewrite when they are many (see ``PACK_AT_LEAST``), else a loose ref each."""
    git_dir = repository_path(repository.name)
    if len(names) < max(PACK_AT_LEAST, packed_refs_estimate(git_dir) / REWRITE_PER_LOOSE):
        for name in names:
            follow_stream(repository, name)
        return
    _safely("follow streams", _pack_streams, repository, git_dir, names)
    for name in names:
        if (git_dir / HEADS / name).is_file():  # a loose ref wins over the packed one: make it right too
            follow_stream(repository, name)


def packed_refs_estimate(git_dir: Path) -> int:
    """About how many refs ``packed-refs`` holds (its size over a short line's: no read)."""
    try:
        return (git_dir / PACKED_REFS).stat().st_size // 64
    except FileNotFoundError:
        return 0


def _pack_streams(repository: Repository, git_dir: Path, names: list[str]) -> None:
    """Write the streams ``names`` into ``packed-refs`` as the database has them, under git's
    lock of the file (``packed-refs.lock``: git's pack-refs and ref deletions take it too, so
    whoever writes it last read the database last). A loose ref of the same name, written by a
    landing that came after, stays and wins, as it does for git."""
    with _RefLock(git_dir / PACKED_REFS) as lock:
        heads: dict[str, str] = {}
        for start in range(0, len(names), _NAMES_PER_QUERY):
            chunk = names[start : start + _NAMES_PER_QUERY]
            rows = Stream.objects.filter(repository=repository, name__in=chunk, head__isnull=False)
            heads.update(_non_empty(rows.order_by().values_list("name", "head")))
        changed = {f"{HEADS}{name}".encode() for name in names}
        mine = sorted((f"{head} {HEADS}{name}\n".encode() for name, head in heads.items()), key=_refname)
        kept = [record for record in read_packed_refs(git_dir) if _refname(record) not in changed]
        merged = heapq.merge(kept, mine, key=_refname)
        lock.commit(PACKED_HEADER + b"".join(merged))


def _refname(record: bytes) -> bytes:
    # "<40-hex oid> <name>\n" (and a peeled "^<oid>\n" after a tag's): bytes order is git's order.
    return record[41 : record.index(b"\n")]


def read_packed_refs(git_dir: Path) -> list[bytes]:
    """The records of ``packed-refs``, in its order: a ref's line with its peeled line, if any."""
    try:
        data = (git_dir / PACKED_REFS).read_bytes()
    except FileNotFoundError:
        return []
    lines = data.splitlines(keepends=True)
    if lines and lines[0].startswith(b"#"):
        lines = lines[1:]
    if b"\n^" not in data:
        return lines
    records: list[bytes] = []
    for line in lines:
        if line.startswith(b"^") and records:
            records[-1] += line
        else:
            records.append(line)
    return records


def follow_landing(
    repository: Repository,
    stream_name: str,
    integrated: Iterable[tuple[int, str]],
    *,
    moved: Moved = None,
) -> None:
    """After a landing committed: the stream's ref (``moved``: see :func:`follow_stream`), then
    the protection refs of what it integrated (``(proposal id, proposal head)``) are dropped:
    the stream reaches them now. Within ``AGENTGIT["MIRROR_FOLLOW_S"]``, with every other
    landing on the stream meanwhile (:class:`_Follower`); at once if that is 0."""
    delay = settings.AGENTGIT["MIRROR_FOLLOW_S"]
    if delay > 0:
        _FOLLOWER.add(repository, stream_name, list(integrated), moved, delay)
    else:
        _follow_landing_now(repository, stream_name, integrated, moved)


def _follow_landing_now(
    repository: Repository,
    stream_name: str,
    integrated: Iterable[tuple[int, str]],
    moved: Moved,
) -> None:
    follow_stream(repository, stream_name, moved=moved)
    git_dir = repository_path(repository.name)
    for proposal_id, head in integrated:
        # Most proposals propose a recorded changeset and never had a ref of their own, and a
        # changeset landed in the request that recorded it has none either: no lock file to
        # create and remove for them (a ref being written now is for a revision or a changeset
        # this landing did not integrate; a packed one waits for the next rebuild anyway).
        for ref in (f"{PROPOSALS}{proposal_id}", CHANGESETS + head):
            if (git_dir / ref).exists():
                _safely("unprotect", _remove_ref, git_dir, ref)


class _Follower:
    """The landings of this process whose refs are not written yet, written together by one
    thread at most ``delay`` seconds after the first of them (docs/adr/0028).

    A ref file costs a landing more CPU than anything else in it but its SQL on this kind of
    disk (about 1.4 ms: git's lock file, and the rename over the old ref, which makes ext4
    write the new one out at once); a stream that lands 100 times a second writes its ref 10
    times. Landings of one stream in a row keep ``moved`` from the first one's old head to the
    last one's new head, so the write still reads no database (:func:`follow_stream`); a gap
    (another process landed between) makes it read the head. What a process had not written
    when it died, recovery's rebuild writes (it follows the events)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, str], _Pending] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._delay = 0.0

    def add(self, repository: Repository, stream: str, integrated: list, moved: Moved, delay: float) -> None:
        with self._lock:
            self._delay = delay
            pending = self._pending.get((repository.pk, stream))
            if pending is None:
                self._pending[repository.pk, stream] = _Pending(repository, stream, integrated, moved)
            else:
                pending.integrated += integrated
                chained = pending.moved is not None and moved is not None and pending.moved[1] == moved[0]
                pending.moved = (pending.moved[0], moved[1]) if chained else None  # type: ignore[index]
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ref-mirror", daemon=True)
                self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._wake.clear()
            self._wake.wait()
            time.sleep(self._delay)  # the landings meanwhile join the batch
            try:
                self.flush()
            finally:
                connections.close_all()  # a head read opened one: back to the pool

    def flush(self) -> None:
        """Write every pending ref now."""
        with self._lock:
            batch, self._pending = self._pending, {}
        for pending in batch.values():
            _follow_landing_now(pending.repository, pending.stream, pending.integrated, pending.moved)

    def forget_thread(self) -> None:
        """In a forked child: the parent's thread and lock are not this process's."""
        self.__init__()  # type: ignore[misc]


@dataclasses.dataclass(slots=True)
class _Pending:
    repository: Repository
    stream: str
    integrated: list[tuple[int, str]]
    moved: Moved


_FOLLOWER = _Follower()
os.register_at_fork(after_in_child=_FOLLOWER.forget_thread)
atexit.register(_FOLLOWER.flush)  # a server stopped on purpose leaves nothing for recovery


def flush_pending() -> None:
    """Write the refs of this process's landings that wait to be written (see :class:`_Follower`)."""
    _FOLLOWER.flush()


def follow_head(repository: Repository) -> None:
    """``HEAD`` → the default stream (a symbolic ref, written as git writes it)."""
    git_dir = repository_path(repository.name)
    target = f"ref: {HEADS}{repository.default_stream}\n"
    head = git_dir / "HEAD"
    with contextlib.suppress(FileNotFoundError):
        if head.read_text() == target:
            return
    _safely("follow HEAD", _set_symbolic, head, target)


def _set_symbolic(head: Path, target: str) -> None:
    with _RefLock(head) as lock:
        lock.commit(target)


# ----------------------------------------------------------------------------- rebuild


def desired_refs(repository: Repository, *, changesets: bool = True) -> dict[str, str]:
    """What the mirror must hold, from the database alone.

    With ``changesets``, a ref for every recorded changeset no stream head reaches (``git
    rev-list`` over the heads: C speed, run by rebuilds only).
    """
    refs: dict[str, str] = {}
    heads = Stream.objects.filter(repository=repository, head__isnull=False).values_list("name", "head")
    for name, head in heads.iterator():
        if head is not None:  # (filtered out above; for the type checker)
            refs[HEADS + name] = head
    stream_heads = set(refs.values())
    recorded_head = Changeset.objects.filter(repository=repository, commit_id=OuterRef("head"))
    open_proposals = (
        Proposal.objects.filter(repository=repository)
        .filter(~Q(state=Proposal.State.INTEGRATED))
        .exclude(Exists(recorded_head))
    )
    for proposal_id, head in open_proposals.values_list("id", "head").iterator():
        refs[f"{PROPOSALS}{proposal_id}"] = head
    if changesets:
        reached = _reachable(repository_path(repository.name), stream_heads)
        recorded = Changeset.objects.filter(repository=repository).values_list("commit_id", flat=True)
        for commit_id in recorded.iterator(chunk_size=10_000):
            if commit_id not in reached:
                refs[CHANGESETS + commit_id] = commit_id
    return refs


def _reachable(git_dir: Path, tips: set[str]) -> set[str]:
    if not tips:
        return set()
    out = git(git_dir, "rev-list", "--ignore-missing", "--stdin", input="".join(f"{tip}\n" for tip in sorted(tips)))
    return set(out.split())


def _missing_objects(git_dir: Path, oids: set[str]) -> set[str]:
    if not oids:
        return set()
    out = git(git_dir, "cat-file", "--batch-check=%(objectname)", input="".join(f"{oid}\n" for oid in sorted(oids)))
    return {line.split()[0] for line in out.splitlines() if line.endswith(" missing")}


def actual_refs(git_dir: Path, namespaces: tuple[str, ...] = MIRRORED) -> dict[str, str]:
    """The refs on disk in ``namespaces`` (loose and packed: ``git for-each-ref``, which reads
    only the part of a sorted ``packed-refs`` that a namespace covers)."""
    out = git(git_dir, "for-each-ref", "--format=%(objectname) %(refname)", *namespaces)
    refs: dict[str, str] = {}
    for line in out.splitlines():
        oid, _, name = line.partition(" ")
        refs[name] = oid
    return refs


def rebuild(repository: Repository, *, everything: bool = False) -> int:
    """Make the mirror what the database says (never the reverse); returns how many refs changed.

    What changed since the last rebuild, as its events name it (:func:`rebuild_changed`), when
    the last rebuild left its mark and the events since are all still there; otherwise, or with
    ``everything``, every ref (:func:`rebuild_everything`). Either way the mark is then set to
    the event sequence read before the database was, beside the repository and in its row
    (``mirrored_seq``, which :func:`rebuild_all` reads to skip what did not change)."""
    git_dir = repository_path(repository.name)
    seq = Repository.objects.filter(pk=repository.pk).values_list("event_seq", flat=True).get()
    since = None if everything else _rebuilt_at(git_dir)
    changed = rebuild_changed(repository, since, seq) if since is not None else None
    if changed is None:
        changed = rebuild_everything(repository)
    _mark_rebuilt(git_dir, seq)
    # Only forward: a slower rebuild that read an older sequence does not take the mark back.
    Repository.objects.filter(pk=repository.pk, mirrored_seq__lt=seq).update(mirrored_seq=seq)
    return changed


def rebuild_everything(repository: Repository, *, changesets: bool = True, attempts: int = 5) -> int:
    """Make every ref of the mirror what the database says; returns how many refs changed.

    One ``git update-ref --stdin`` transaction whose every command names the value it expects,
    so a landing that writes a ref meanwhile makes it fail (and it is tried again) instead of
    being overwritten by an older value. Also sets the config and ``HEAD``.
    """
    git_dir = repository_path(repository.name)
    configure(git_dir)
    follow_head(repository)
    for attempt in range(1, attempts + 1):
        actual = actual_refs(git_dir)
        desired = desired_refs(repository, changesets=changesets)
        changed = {name: oid for name, oid in desired.items() if actual.get(name) != oid}
        missing = _missing_objects(git_dir, set(changed.values()))
        if missing:
            # git refuses a ref to an object it lacks, and the transaction with it: say so, and
            # mirror the rest (that the database names a missing object is for fsck to report).
            logger.error("%s: the database names missing objects %s", repository.name, sorted(missing)[:10])
        commands = []
        for name, oid in changed.items():
            if oid not in missing:
                commands.append(f"update {name} {oid} {actual.get(name, _ZERO)}\n")
        for name, oid in actual.items():
            if name not in desired and (changesets or not name.startswith(CHANGESETS)):
                commands.append(f"delete {name} {oid}\n")
        if not commands:
            return 0
        done = subprocess.run(
            ["git", "--git-dir", os.fspath(git_dir), "update-ref", "--stdin"],
            input="".join(commands),
            capture_output=True,
            text=True,
            env=git_env(),
        )
        if done.returncode == 0:
            return len(commands)
        if attempt == attempts:
            raise RuntimeError(f"rebuilding the ref mirror of {repository.name} failed: {done.stderr.strip()}")
        time.sleep(0.01 * attempt)
    return 0


def rebuild_all(*, everything: bool = False) -> int:
    """:func:`rebuild` for every repository with events since its last rebuild (with
    ``everything``, for every repository, every ref); returns how many refs changed in all.

    A repository's mirror changes only with its events (every stream change appends one in its
    transaction, and a landing's own mirror write comes after that commit), so one whose
    ``event_seq`` is still its ``mirrored_seq`` has nothing to repair: a start with 10 000
    repositories costs the ones that changed, not a directory visit each (docs/adr/0021)."""
    changed = 0
    for repository in changed_since(Repository.objects.all(), "mirrored_seq", everything=everything):
        try:
            changed += rebuild(repository, everything=everything)
        except Exception:
            logger.exception("ref mirror of %s not rebuilt", repository.name)
    return changed


def changed_since(repositories: QuerySet[Repository], mark: str, *, everything: bool = False) -> QuerySet[Repository]:
    """Those of ``repositories`` with events after their ``mark`` (a sequence column of the
    row: ``mirrored_seq``, ``maintained_seq``), by id; all of them with ``everything``. One
    query, in the database, whatever the number of repositories."""
    if not everything:
        repositories = repositories.filter(event_seq__gt=F(mark))
    return repositories.order_by("id")


# ----------------------------------------------------------------------------- what changed

#: Beside the repository: the event sequence the mirror was last rebuilt up to.
REBUILT_FILE = "agentgit-mirror.json"
#: Protection refs checked one ``merge-base`` each up to this many; more, one walk of the
#: moved heads' history.
_ONE_BY_ONE = 64


def _rebuilt_at(git_dir: Path) -> int | None:
    try:
        return int(json.loads((git_dir / REBUILT_FILE).read_text())["event_seq"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def _mark_rebuilt(git_dir: Path, seq: int) -> None:
    temporary = git_dir / (REBUILT_FILE + ".tmp")
    temporary.write_text(json.dumps({"event_seq": seq}))
    os.replace(temporary, git_dir / REBUILT_FILE)


def rebuild_changed(repository: Repository, since: int, seq: int) -> int | None:
    """The mirror's refs of the streams that events ``since`` < seq <= ``seq`` name, made what
    the database says, and the changeset protection refs on disk that those streams' heads reach
    now, removed: work in proportion to what changed, not to the refs. None when the events
    since are not all there any more (pruned): only a full rebuild can tell then.

    Every change of a stream appends an event in its transaction (created, deleted, every head
    move), so a stream whose ref a crash left behind is named here. A protection ref that a
    stream which did not move reaches (a changeset recorded after it was on a stream already)
    stays until a full rebuild: it costs a line in ``for-each-ref``, nothing else."""
    git_dir = repository_path(repository.name)
    configure(git_dir)
    follow_head(repository)
    if seq == since:
        return 0
    events = Event.objects.filter(repository=repository, seq__gt=since, seq__lte=seq)
    if events.order_by("seq").values_list("seq", flat=True).first() != since + 1:
        return None
    names = sorted(
        {
            payload["stream"]
            for payload in events.values_list("payload", flat=True).iterator(chunk_size=10_000)
            if isinstance(payload.get("stream"), str)
        }
    )
    heads = _heads_of(repository, names)
    differ = [name for name, oid in zip(names, _refs_on_disk(git_dir, names), strict=True) if oid != heads.get(name)]
    follow_streams(repository, differ)
    return len(differ) + _sweep_protection(git_dir, set(heads.values()))


def _heads_of(repository: Repository, names: list[str]) -> dict[str, str]:
    """The database's heads of the non-empty streams among ``names``."""
    heads: dict[str, str] = {}
    for start in range(0, len(names), _NAMES_PER_QUERY):
        chunk = names[start : start + _NAMES_PER_QUERY]
        rows = Stream.objects.filter(repository=repository, name__in=chunk, head__isnull=False).order_by()
        heads.update(_non_empty(rows.values_list("name", "head")))
    return heads


def _non_empty(rows: Iterable[tuple[str, str | None]]) -> Iterable[tuple[str, str]]:
    """``(name, head)`` rows of streams with a head (the queries ask for those only)."""
    return ((name, head) for name, head in rows if head is not None)


def _refs_on_disk(git_dir: Path, names: list[str]) -> list[str | None]:
    """What git reads for each stream's ref: its loose file, else its line in ``packed-refs``."""
    packed = PackedRefs(git_dir, many=len(names) * REWRITE_PER_LOOSE >= packed_refs_estimate(git_dir))
    found: list[str | None] = []
    for name in names:
        try:
            found.append((git_dir / HEADS / name).read_text().strip() or None)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            found.append(packed.get(HEADS + name))
    return found


class PackedRefs:
    """Refs looked up in ``packed-refs`` as git does: a binary search of the sorted file (or,
    for ``many`` lookups, the file read once into a dict)."""

    def __init__(self, git_dir: Path, *, many: bool = False) -> None:
        self.data: bytes | mmap.mmap = b""
        self.all: dict[bytes, str] | None = None
        if many:
            self.all = {_refname(record): record[:40].decode() for record in read_packed_refs(git_dir)}
            return
        with contextlib.suppress(FileNotFoundError), open(git_dir / PACKED_REFS, "rb") as file:
            if os.fstat(file.fileno()).st_size:  # (an empty file cannot be mapped)
                self.data = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)  # pages read as searched

    def get(self, name: str) -> str | None:
        key = name.encode()
        if self.all is not None:
            return self.all.get(key)
        data = self.data
        low, high = 0, len(data)
        while low < high:  # the first line starting at or after mid, compared by its name
            mid = (low + high) // 2
            start = data.rfind(b"\n", 0, mid) + 1
            end = data.find(b"\n", start)
            end = len(data) if end < 0 else end
            line = data[start:end]
            if line.startswith((b"#", b"^")) or len(line) < 42:
                low = end + 1  # the header or a peeled line: what follows decides
                continue
            here = line[41:]
            if here == key:
                return line[:40].decode()
            if here < key:
                low = end + 1
            else:
                high = start
        return None


def _sweep_protection(git_dir: Path, heads: set[str]) -> int:
    """Remove the changeset protection refs that ``heads`` reach; how many were removed."""
    protected = actual_refs(git_dir, (CHANGESETS,))
    if not protected or not heads:
        return 0
    if len(protected) <= _ONE_BY_ONE:
        reached = {name for name, oid in protected.items() if _reached_by(git_dir, oid, heads)}
    else:
        history = _reachable(git_dir, heads)
        reached = {name for name, oid in protected.items() if oid in history}
    commands = "".join(f"delete {name} {protected[name]}\n" for name in sorted(reached))
    if commands:
        git(git_dir, "update-ref", "--stdin", input=commands)
    return len(reached)


def _reached_by(git_dir: Path, commit: str, heads: set[str]) -> bool:
    """Whether any of ``heads`` reaches ``commit`` (nothing new from it once they are left out)."""
    lines = f"{commit}\n" + "".join(f"^{head}\n" for head in sorted(heads))
    return not git(git_dir, "rev-list", "--max-count=1", "--ignore-missing", "--stdin", input=lines).strip()
