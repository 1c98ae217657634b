"""Rolling up the packs that writes gather, and the repository lock maintenance shares.

Every write of objects is one pack (engine/store.py: two fsyncs whatever the batch, where a
loose object cost two or three each). A busy repository so gathers a pack per changeset, merge
and upload, and readers search every pack's index for an object. Once a repository holds
``AGENTGIT["ROLL_UP_PACKS"]`` packs, the write that found it so asks (after its transaction
commits: a worker's job, or this process's without workers) for git's geometric repack, which
folds the small packs into one and leaves the big ones, so a landing's share of it stays the cost
of its own objects, whatever the repository's size (docs/adr/0015). Maintenance
(repos.services.maintenance) does the same and more, less often; the two take turns on
:func:`exclusive`.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from engine.store import DiskStore

from .dispatch import Job, after_commit
from .refmirror import git
from .stores import checkpoint, repository_path, store_for

logger = logging.getLogger(__name__)

#: The file whose lock makes repacks of one repository take turns (across processes).
LOCK_FILE = "agentgit-maintenance.lock"


@contextlib.contextmanager
def exclusive(git_dir: Path) -> Iterator[bool]:
    """Hold the repository's repack lock, if no one else does: yields whether it is held."""
    fd = os.open(git_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


def geometric_repack(git_dir: Path) -> None:
    """git's geometric repack: the packs that do not form a factor-2 progression are folded into one."""
    git(git_dir, "repack", "-d", "-q", "--geometric=2", "--write-midx")


def roll_up(name: str) -> bool:
    """Fold the repository's small packs into one, unless another process repacks it now;
    whether it did. The store folds its own packs in this process (no git process: about a
    tenth of the CPU of git's repack, docs/adr/0028); git's geometric repack runs only when
    packs it alone can fold (a push's deltified ones) keep the count at the threshold."""
    git_dir = repository_path(name)
    store = store_for(name)  # opened first: after a power loss it rebuilds a torn pack index
    with exclusive(git_dir) as held:
        if held:
            try:
                store.roll_up()
            except Exception:  # a write committed before this ran: git's repack is still right
                logger.exception("%s: rolling its packs up failed; git's repack folds them", name)
            if store.packs() >= settings.AGENTGIT["ROLL_UP_PACKS"]:
                geometric_repack(git_dir)
            checkpoint(name)  # the journaled packs are folded into one pack synced: forget them
        return held


#: Rolling a repository's packs up, after the commit of the write that found too many.
ROLL_UP = Job("workers.tasks.roll_up_packs", roll_up)


def roll_up_when_due(name: str, store: DiskStore) -> None:
    """After a write of objects: ask for a roll-up once the repository holds enough packs."""
    if store.packs() >= settings.AGENTGIT["ROLL_UP_PACKS"]:
        after_commit(ROLL_UP, name)
