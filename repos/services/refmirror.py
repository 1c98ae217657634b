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

Stream refs are written after the landing commits, from the database, under the ref's lock:
whoever writes last read the database last, so the mirror never goes back in time. Between a
commit and its mirror write (microseconds; longer only if the process dies there) new objects
are protected by our maintenance never pruning (repos.services.maintenance), not from a
hand-run ``gc --prune=now``; :func:`rebuild` closes the gap after a crash. A failed mirror write
never fails the landing: it is logged, and the next rebuild repairs it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from django.db.models import Exists, OuterRef, Q

from ..lookups import Rows
from ..models import Changeset, Proposal, Repository, Stream
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

    def commit(self, content: str) -> None:
        assert self.fd is not None, "commit() is called on a lock that is held"
        os.write(self.fd, content.encode())
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


def follow_stream(repository: Repository, stream_name: str) -> None:
    """Mirror the stream's head as the database has it now (after the change committed)."""

    def head() -> str | None:
        _using, rows = _STREAM_HEAD.all(repository.pk, stream_name, model=Stream, limit=1)
        return rows[0][0] if rows else None

    git_dir = repository_path(repository.name)
    written: list[str | None] = []

    def head_noted() -> str | None:
        written.append(head())
        return written[-1]

    _safely("follow stream", _set_ref, git_dir, HEADS + stream_name, head_noted)
    if written == [None]:
        # A deleted (or emptied) stream: maintenance may have packed its ref, which git
        # removes from packed-refs too. Rare, so a subprocess is fine here.
        _safely("forget stream", git, git_dir, "update-ref", "-d", HEADS + stream_name)


#: Every landing's mirror write reads the head (repos/lookups.py: compiled once).
_STREAM_HEAD = Rows(
    lambda repository, name: Stream.objects.filter(repository=repository, name=name).order_by().values_list("head"),
    int,
    str,
)


def follow_landing(repository: Repository, stream_name: str, integrated: Iterable[tuple[int, str]]) -> None:
    """After a landing committed: the stream's ref, then the protection refs of what it integrated
    (``(proposal id, proposal head)``) are dropped: the stream reaches them now."""
    follow_stream(repository, stream_name)
    git_dir = repository_path(repository.name)
    for proposal_id, head in integrated:
        # Most proposals propose a recorded changeset and never had a ref of their own: no
        # lock file to create and remove for them (one being written now is for a revision,
        # which this landing did not integrate).
        proposal_ref = f"{PROPOSALS}{proposal_id}"
        if (git_dir / proposal_ref).exists():
            _safely("unprotect proposal", _remove_ref, git_dir, proposal_ref)
        _safely("unprotect changeset", _remove_ref, git_dir, CHANGESETS + head)


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


def actual_refs(git_dir: Path) -> dict[str, str]:
    """The refs on disk in the mirrored namespaces (loose and packed: ``git for-each-ref``)."""
    out = git(git_dir, "for-each-ref", "--format=%(objectname) %(refname)", *MIRRORED)
    refs: dict[str, str] = {}
    for line in out.splitlines():
        oid, _, name = line.partition(" ")
        refs[name] = oid
    return refs


def rebuild(repository: Repository, *, changesets: bool = True, attempts: int = 5) -> int:
    """Make the mirror what the database says (never the reverse); returns how many refs changed.

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


def rebuild_all(*, changesets: bool = True) -> int:
    """:func:`rebuild` for every repository; returns how many refs changed in all."""
    changed = 0
    for repository in Repository.objects.order_by("id"):
        try:
            changed += rebuild(repository, changesets=changesets)
        except Exception:
            logger.exception("ref mirror of %s not rebuilt", repository.name)
    return changed
