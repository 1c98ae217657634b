"""Repository maintenance: ours, because git's automatic gc is off (gitdir.GIT_CONFIG).

Every landing writes a few loose objects or a small pack; left alone they pile up (1 627 loose
objects after 357 landings; audit F7: 236 756 in production), and every read and clone pays for
them. :func:`maintain` keeps each repository in the layout git serves fastest:

* ``git repack -d --geometric=2 --write-midx --write-bitmap-index``: loose objects and the small
  packs roll up into bigger ones so pack sizes grow geometrically (a run rewrites only the small
  end, not the whole repository), one multi-pack index over them with a reachability bitmap, so
  ``upload-pack`` counts and reuses objects instead of walking them;
* ``git commit-graph write --reachable``: the history walks of fetches and connectivity checks;
* ``git pack-refs --all``: the mirror's loose refs into one file, for git's own tools, once
  they are more than ``LOOSE_REFS_SHARE`` of the refs (the rewrite costs every ref);
* the ref mirror's sweep (refmirror.rebuild): the refs of the streams that changed since the
  last sweep are made what the database says, protection refs that their heads reach go;
* pushed changesets whose operation lists a crash left unwritten get them
  (content.write_pending_operations: a push writes them after its answer);
* push quarantines a killed server left behind (``objects/incoming-*``, older than an hour) go.

Safe at any moment, beside landings, pushes and clones: a geometric repack puts every object of
the packs it rolls up (and every loose object) into the new pack, reachable or not, and removes
only loose objects that are packed; nothing is ever pruned, so an object written by a landing
that has not committed yet survives whatever its age. Two maintainers of one repository never
overlap (a lock file); the one that finds it taken skips the repository.

What the last repack did is kept beside the repository (``agentgit-maintenance.json``) and
summarised with the current counts by :func:`repack_state` for ``/metrics``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from django.conf import settings
from django.db.models import QuerySet

from ..models import Repository
from . import content, metrics, refmirror
from .packs import exclusive
from .stores import checkpoint, repository_path, store_for

logger = logging.getLogger(__name__)

STATE_FILE = "agentgit-maintenance.json"
#: A push quarantine older than this belongs to a push whose server died.
STALE_QUARANTINE_S = 3600


@dataclass
class RepackState:
    repository: str
    #: done | skipped (nothing to do, or another process holds the repository) | failed
    outcome: str
    finished: float
    duration_s: float
    loose_before: int
    loose_after: int
    packs_before: int
    packs_after: int
    refs_changed: int = 0
    #: Loose refs folded into packed-refs (0: too few to be worth a rewrite of the file).
    refs_packed: int = 0
    operations_written: int = 0
    error: str = ""


def objects_of(git_dir: Path) -> tuple[int, int]:
    """``(loose objects, packs)`` of the repository (``git count-objects -v``)."""
    out = refmirror.git(git_dir, "count-objects", "-v")
    values = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    return int(values.get("count", 0)), int(values.get("packs", 0))


def maintain(repository: Repository, *, force: bool = False) -> RepackState:
    """Repack one repository if it needs it (or ``force``); sweep its ref mirror; record the
    state, and in the row the event sequence read first (``maintained_seq``: see :func:`maintain_all`)."""
    git_dir = repository_path(repository.name)
    store_for(repository.name)  # opened first: after a power loss it rebuilds a torn pack index
    started = time.monotonic()
    # (None: the row is gone since it was listed: nothing to mark.)
    seq = Repository.objects.filter(pk=repository.pk).values_list("event_seq", flat=True).first() or 0
    loose, packs = objects_of(git_dir)
    config = settings.AGENTGIT
    state = RepackState(repository.name, "skipped", time.time(), 0.0, loose, loose, packs, packs)
    due = force or loose >= config["REPACK_LOOSE_OBJECTS"] or packs >= config["REPACK_PACKS"]
    with exclusive(git_dir) as held:
        if not held:
            return state
        try:
            _remove_stale_quarantines(git_dir)
            if due:
                _repack(git_dir)
                state.outcome = "done"
            checkpoint(repository.name)
            state.refs_changed = refmirror.rebuild(repository)
            state.refs_packed = pack_refs_if_due(git_dir)
            state.operations_written = content.write_pending_operations(repository)
        except (subprocess.CalledProcessError, RuntimeError, OSError) as error:
            state.outcome = "failed"
            state.error = getattr(error, "stderr", "") or str(error)
            logger.exception("maintenance of %s failed", repository.name)
        state.loose_after, state.packs_after = objects_of(git_dir)
        state.duration_s = round(time.monotonic() - started, 3)
        state.finished = time.time()
        if state.outcome != "skipped":  # the file keeps the last repack, not the last look
            _write_state(git_dir, state)
        if state.outcome != "failed":
            Repository.objects.filter(pk=repository.pk, maintained_seq__lt=seq).update(maintained_seq=seq)
    return state


def changed_repositories(*, everything: bool = False) -> QuerySet[Repository]:
    """The repositories with events since their last maintenance (every one with ``everything``).

    What makes a repository need maintenance comes with an event: a landing's or a push's
    objects and refs, a push's operation lists still to write, a push quarantine its killed
    server left (the push's own repository, which changes again when it is retried). A write
    that appends no event (a blob uploaded and never used) waits for the repository's next
    one, or for ``agentgit_maintain --all``. So a start or a beat run with 10 000 repositories
    costs the ones that changed (docs/adr/0021)."""
    return refmirror.changed_since(Repository.objects.all(), "maintained_seq", everything=everything)


def maintain_all(*, force: bool = False, everything: bool = False) -> list[RepackState]:
    """:func:`maintain` the repositories that changed since their last maintenance (every one
    with ``everything`` or ``force``): the periodic task, and ``make serve``'s."""
    return [maintain(repository, force=force) for repository in changed_repositories(everything=everything or force)]


def _repack(git_dir: Path) -> None:
    refmirror.git(git_dir, "repack", "-d", "-q", "--geometric=2", "--write-midx", "--write-bitmap-index")
    refmirror.git(git_dir, "commit-graph", "write", "--reachable", "--no-progress")


#: Loose refs are packed once they are more than this share of the refs (the goal is at most
#: 1 %): git reads a loose ref a file each, packed ones from one sorted file (the ref-iteration
#: thread), but packing rewrites that whole file, so it waits until enough changed to pay for it.
LOOSE_REFS_SHARE = 0.005


def loose_refs(git_dir: Path) -> int:
    """The loose ref files under ``refs/`` (a walk of the directories: what changed since the
    last pack, not every ref)."""
    count = 0
    pending = [git_dir / "refs"]
    while pending:
        with contextlib.suppress(FileNotFoundError), os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))
                elif not entry.name.endswith(".lock"):
                    count += 1
    return count


def pack_refs_if_due(git_dir: Path) -> int:
    """``git pack-refs --all --prune`` when the loose refs are more than ``LOOSE_REFS_SHARE`` of
    all; how many were packed. Later writes stay loose and win over their packed copies."""
    loose = loose_refs(git_dir)
    if loose <= LOOSE_REFS_SHARE * (loose + refmirror.packed_refs_estimate(git_dir)):
        return 0
    refmirror.git(git_dir, "pack-refs", "--all", "--prune")
    return loose


def _remove_stale_quarantines(git_dir: Path) -> None:
    now = time.time()
    for quarantine in (git_dir / "objects").glob("incoming-*"):
        with contextlib.suppress(FileNotFoundError):
            if now - quarantine.stat().st_mtime > STALE_QUARANTINE_S:
                shutil.rmtree(quarantine, ignore_errors=True)


def _write_state(git_dir: Path, state: RepackState) -> None:
    metrics.observe_repack(state.outcome, state.duration_s, state.loose_before, state.loose_after)
    path = git_dir / STATE_FILE
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(asdict(state)))
    os.replace(temporary, path)


def repack_state() -> list[dict]:
    """The last maintenance run of every repository, for ``/metrics``: what it did, when, and
    the loose objects and packs each repository has now (``git count-objects``: no walk)."""
    states = []
    for name in Repository.objects.order_by("name").values_list("name", flat=True):
        git_dir = repository_path(name)
        try:
            last = json.loads((git_dir / STATE_FILE).read_text())
        except (FileNotFoundError, ValueError):
            last = {"repository": name, "outcome": "never", "finished": None}
        try:
            last["loose_now"], last["packs_now"] = objects_of(git_dir)
        except subprocess.CalledProcessError:
            last["loose_now"] = last["packs_now"] = None
        states.append(last)
    return states
