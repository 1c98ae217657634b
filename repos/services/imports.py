"""Importing an existing git repository: git fetches the objects, the services record the rest.

Every branch of the source becomes a stream with its commit id unchanged. git fetches the
branch tips straight into the ref mirror's protection refs (``refs/agentgit/changesets/<id>``),
so the fetched objects are protected from the moment they arrive; then the commits no stream
reached are recorded as changesets (operation lists from their diffs), streams are created or
fast-forwarded through the services, the derived data is built, and the mirror is rebuilt.

Running it again is a no-op plus whatever is new: commits already recorded are skipped, and a
stream already at its branch's tip is left alone. A branch that diverged from its stream is
not forced: it is reported and left for a proposal.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

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


def _fetch(git_dir: Path, source: str, tips: list[str]) -> None:
    """git fetches the tips' history into the protection refs: protected as they arrive.

    git checks every object it receives (``fetch.fsckObjects`` is not needed for that: a pack
    that does not index or connect is refused whole), so a broken source fails here, naming
    git's reason, with nothing recorded."""
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
