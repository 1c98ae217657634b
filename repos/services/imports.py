"""Importing an existing git repository: git brings the objects, the services record the rest.

Every branch of the source becomes a stream with its commit id unchanged. The objects come as
``git clone`` takes a local repository's: its packs hard-linked (or copied), checked to hold the
tips' whole history; otherwise git fetches the tips. Either way the branch tips go straight
into the ref mirror's protection refs (``refs/agentgit/changesets/<id>``), so the objects are
protected from the moment the database could name them; then the commits no stream reached are
recorded as changesets (operation lists from git's diffs, repos.services.gitdiff), streams are
created or fast-forwarded through the services, and the mirror is rebuilt.

Running it again is a no-op plus whatever is new: commits already recorded are skipped, and a
stream already at its branch's tip is left alone. A branch that diverged from its stream is
not forced: it is reported and left for a proposal.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.store import fsync_dir

from ..errors import Invalid, NotFound
from ..models import Repository, Stream
from . import content, derived, integration, refmirror, repositories
from .gitdir import git_env
from .stores import repository_path

Progress = Callable[[str, int, int], None]


@dataclass
class Imported:
    repository: str
    created: bool = False
    #: Changesets recorded by this run.
    changesets: int = 0
    #: Streams created / fast-forwarded / left alone (already there) by this run.
    created_streams: list[str] = field(default_factory=list)
    moved_streams: list[str] = field(default_factory=list)
    unchanged_streams: list[str] = field(default_factory=list)
    #: Branches not imported, with why (a name git allows and streams do not; a divergence).
    skipped: dict[str, str] = field(default_factory=dict)


def source_path(source: str) -> str:
    """A local repository path from ``path`` or ``file://path``; Invalid if it is not a git repository."""
    path = source.removeprefix("file://") if source.startswith("file://") else source
    resolved = Path(path).expanduser().resolve()
    done = subprocess.run(
        ["git", "-C", os.fspath(resolved), "rev-parse", "--git-dir"], capture_output=True, text=True, env=git_env()
    )
    if done.returncode != 0:
        raise Invalid(f"{source} is not a local git repository: {done.stderr.strip()}")
    return os.fspath(resolved)


def branches_of(source: str) -> tuple[dict[str, str], str | None]:
    """``{branch: tip}`` of the source, and the branch its HEAD names (None if detached or unborn)."""
    out = subprocess.run(
        ["git", "ls-remote", "--symref", source, "HEAD", "refs/heads/*"],
        capture_output=True, text=True, check=True, env=git_env(),
    ).stdout  # fmt: skip
    branches: dict[str, str] = {}
    head_branch = None
    for line in out.splitlines():
        left, _, name = line.partition("\t")
        if left.startswith("ref: ") and name == "HEAD":
            head_branch = left.removeprefix("ref: refs/heads/")
        elif name.startswith("refs/heads/"):
            branches[name.removeprefix("refs/heads/")] = left
    return branches, head_branch


def import_repository(name: str, source: str, *, progress: Progress | None = None) -> Imported:
    """Import every branch of the local git repository ``source`` into the repository ``name``
    (created if it does not exist). ``progress(step, done, total)`` follows the long steps."""
    path = source_path(source)
    branches, head_branch = branches_of(path)
    result = Imported(name)
    try:
        repository = repositories.get_repository(name)
    except NotFound:
        default = head_branch if head_branch in branches else "main"
        repository = repositories.create_repository(name, default_stream=default)
        result.created = True
    importable = {}
    for branch, tip in branches.items():
        try:
            importable[repositories.check_stream_name(branch)] = tip
        except Invalid as error:
            result.skipped[branch] = error.message
    if not importable:
        return result
    git_dir = repository_path(repository.name)
    known_heads = repositories.stream_heads(repository)
    tips = sorted(set(importable.values()))
    if progress is not None:
        progress("fetching objects", 0, 1)
    if not _link_packs(git_dir, path, tips):
        _fetch(git_dir, path, tips)
    if progress is not None:
        progress("fetching objects", 1, 1)
    new = _unreached(git_dir, tips, known_heads)
    if new:
        done = 0

        def step(count: int) -> None:
            nonlocal done
            done += count
            if progress is not None:
                progress("recording changesets", done, len(new))

        provenance = {"source": "import", "from": source}
        result.changesets = content.record_commits(
            repository, new, credential=None, provenance=provenance, progress=step, derive=True
        )
    for branch, tip in sorted(importable.items()):
        _stream_to(repository, branch, tip, result)
    derived.derive_missing(None if progress is None else lambda stream, done, total: progress("deriving", done, total))
    refmirror.rebuild(repository)
    return result


def _link_packs(git_dir: Path, source: str, tips: list[str]) -> bool:
    """Take the source's objects as ``git clone`` takes a local repository's by default: its
    packs hard-linked into this repository (copied and fsynced where the data directory is on
    another file system), instead of a new pack made from them and indexed again; then every
    object the tips reach is checked present before the protection refs name the tips.

    Loose objects are linked too. False, with no ref written, when that is not the whole history
    (objects in an alternate store, a shallow source, an object missing): the caller fetches
    instead. Packs are immutable, so
    a link shares nothing that either side changes: a repack on either side unlinks its own
    name. What the packs hold beyond the tips' history stays unreferenced, as after a fetch
    that was cut short.
    """
    common = Path(
        subprocess.run(
            ["git", "-C", source, "rev-parse", "--path-format=absolute", "--git-common-dir"],
            capture_output=True, text=True, check=True, env=git_env(),
        ).stdout.strip()
    )  # fmt: skip
    objects = common / "objects"
    packs = [pack for pack in sorted((objects / "pack").glob("pack-*.pack")) if pack.with_suffix(".idx").exists()]
    if (objects / "info" / "alternates").exists() or (common / "shallow").exists():
        return False
    target = git_dir / "objects" / "pack"
    for pack in packs:
        for part in (pack, pack.with_suffix(".idx")):  # the pack first: git finds a pack by its index
            if not (target / part.name).exists():
                _link_or_copy(part, target / part.name)
    fsync_dir(target)
    for fanout in objects.glob("[0-9a-f][0-9a-f]"):  # loose objects, as git clone links them too
        loose = [name for name in os.listdir(fanout) if len(name) == 38]
        if loose:
            (git_dir / "objects" / fanout.name).mkdir(exist_ok=True)
            for name in loose:
                if not (git_dir / "objects" / fanout.name / name).exists():
                    _link_or_copy(fanout / name, git_dir / "objects" / fanout.name / name)
            fsync_dir(git_dir / "objects" / fanout.name)
    reached = subprocess.run(
        ["git", "--git-dir", os.fspath(git_dir), "rev-list", "--objects", "--quiet", *tips],
        capture_output=True, env=git_env(),
    )  # fmt: skip
    if reached.returncode != 0:
        return False
    refmirror.git(
        git_dir, "update-ref", "--stdin", input="".join(f"update {refmirror.CHANGESETS}{tip} {tip}\n" for tip in tips)
    )
    return True


def _link_or_copy(source: Path, target: Path) -> None:
    """``target`` made to hold ``source``'s bytes, durably, and only ever whole (a temporary
    name renamed into place)."""
    temporary = target.with_name(f"tmp-import-{os.getpid()}-{target.name}")
    try:
        os.link(source, temporary)
    except OSError:  # another file system, or links refused: a copy of our own
        shutil.copyfile(source, temporary)
        with open(temporary, "rb") as copied:
            os.fsync(copied.fileno())
    os.replace(temporary, target)


def _fetch(git_dir: Path, source: str, tips: list[str]) -> None:
    """git fetches the tips' history into the protection refs: protected as they arrive.

    ``git index-pack`` hashes every object it receives and the fetch checks that the history
    connects, so a pack that does not index or connect is refused whole: a broken source fails
    here, naming git's reason, with nothing recorded."""
    refspecs = [f"+{tip}:{refmirror.CHANGESETS}{tip}" for tip in tips]
    done = subprocess.run(
        ["git", "--git-dir", os.fspath(git_dir), "fetch", "--no-tags", "--no-write-fetch-head", "--quiet", source, *refspecs],
        env=git_env(), capture_output=True, text=True, errors="replace",
    )  # fmt: skip
    if done.returncode != 0:
        raise Invalid(f"git could not fetch the history of {source}: {done.stderr.strip() or done.returncode}")


def _unreached(git_dir: Path, tips: list[str], known_heads: set[str]) -> list[str]:
    """The commits of the tips that no stream reached yet, parents first."""
    stdin = "".join(f"{tip}\n" for tip in tips) + "".join(f"^{head}\n" for head in sorted(known_heads))
    return refmirror.git(git_dir, "rev-list", "--reverse", "--topo-order", "--stdin", input=stdin).split()


def _stream_to(repository: Repository, branch: str, tip: str, result: Imported) -> None:
    stream = Stream.objects.filter(repository=repository, name=branch).select_related("repository").first()
    if stream is None:
        repositories.create_stream(repository, branch, tip)
        result.created_streams.append(branch)
    elif stream.head == tip:
        result.unchanged_streams.append(branch)
    else:
        try:
            integration.push_fast_forward(stream, stream.head, tip, None, via="import")
        except integration.NotFastForward as refused:
            result.skipped[branch] = str(refused)
            return
        result.moved_streams.append(branch)
