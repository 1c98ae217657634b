"""Commits that arrived by git (an import, a push), described by git itself.

A changeset recorded from git needs its changes against its first parent twice: as its
operation list (the API's ``operations``) and as the paths the path index records
(repos.services.derived). For a long history that is most of an import's work, and git
computes it at C speed: one ``git diff-tree --stdin -r -M --root`` streams them all, renames
found as git finds them, so the recorded renames are git's own (DESIGN.md, decision 3). An
import of git's own repository spent three quarters of its time diffing trees in Python before.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from engine.history import MAX_INDEXED_PATHS
from engine.objects import ObjectId, path_from_bytes

from ..errors import Invalid
from .gitdir import git_env


class Change(NamedTuple):
    """One path changed against the first parent, as ``git diff-tree --raw`` reports it."""

    #: ``A`` added, ``M`` modified, ``T`` type changed, ``D`` deleted, ``R`` renamed.
    status: str
    old_mode: int
    new_mode: int
    new_id: ObjectId
    #: The path (the new one for a rename), in the escaped form (engine.objects).
    path: str
    #: A rename's old path; None otherwise.
    old_path: str | None
    #: Whether a rename also changed the content or mode.
    edited: bool


class FirstParentChanges:
    """The changes of ``commits`` against their first parents, streamed from one
    ``git diff-tree --stdin`` as it computes them: iterate it for ``(commit, changes)`` in the
    order given. git works on the other core while the caller records what it has, and the
    pipe's bound keeps the memory flat however long the history. Use it as a context manager.
    """

    # --diff-merges=first-parent: a merge against its first parent, as the stream saw it land.
    _COMMAND = (
        "diff-tree",
        "--stdin",
        "--diff-merges=first-parent",
        "-r",
        "-M",
        "--root",
        "-z",
        "--no-abbrev",
        "--always",
    )

    def __init__(self, git_dir: Path, commits: Sequence[ObjectId]) -> None:
        self._first = commits[0] if commits else None
        self._process = subprocess.Popen(
            ["git", "--git-dir", os.fspath(git_dir), *self._COMMAND],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=git_env(),
        )  # fmt: skip
        lines = "".join(f"{commit}\n" for commit in commits).encode()
        # A writer of its own: git answers while it reads, and both pipes fill.
        self._writer = threading.Thread(target=self._feed, args=(lines,), daemon=True)
        self._writer.start()

    def _feed(self, lines: bytes) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        try:
            stdin.write(lines)
            stdin.close()
        except (BrokenPipeError, ValueError):  # git died (its error is read at the end), or we closed
            pass

    def __enter__(self) -> FirstParentChanges:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        for pipe in (self._process.stdout, self._process.stderr):
            if pipe is not None:
                pipe.close()

    def __iter__(self) -> Iterator[tuple[ObjectId, list[Change]]]:
        stdout = self._process.stdout
        assert stdout is not None
        commit: ObjectId | None = None
        changes: list[Change] = []
        meta: list[bytes] = []
        paths: list[bytes] = []
        rest = b""
        while block := os.read(stdout.fileno(), 1 << 16):
            tokens = (rest + block).split(b"\x00")
            rest = tokens.pop()
            for token in tokens:
                if meta:  # the path(s) of the change whose metadata came last
                    paths.append(token)
                    if len(paths) == (2 if meta[4][:1] in b"RC" else 1):
                        changes.append(_change(meta, paths))
                        meta, paths = [], []
                elif token.startswith(b":"):
                    meta = token[1:].split(b" ")
                elif token:  # a commit's id opens its changes (--always: even when there are none)
                    if commit is not None:
                        yield commit, changes
                    commit, changes = token.decode("ascii"), []
        errors = b"" if self._process.stderr is None else self._process.stderr.read()
        if self._process.wait() != 0:
            raise Invalid(
                f"git could not diff the commits from {self._first}: {errors.decode(errors='replace').strip()}"
            )
        if commit is not None:
            yield commit, changes


def _change(meta: list[bytes], paths: list[bytes]) -> Change:
    old_mode, new_mode, old_id, new_id, status = meta
    if len(paths) == 2:  # a rename (or copy): the old path, then the new
        edited = old_id != new_id or old_mode != new_mode
        return Change(
            "R",
            int(old_mode, 8),
            int(new_mode, 8),
            new_id.decode(),
            path_from_bytes(paths[1]),
            path_from_bytes(paths[0]),
            edited,
        )
    return Change(
        status[:1].decode(), int(old_mode, 8), int(new_mode, 8), new_id.decode(), path_from_bytes(paths[0]), None, False
    )


def first_parent_changes(git_dir: Path, commits: Sequence[ObjectId]) -> dict[ObjectId, list[Change]]:
    """``{commit: its changes}`` (a few commits: a push's), from one git process; ``Invalid``
    naming a commit git cannot describe."""
    with FirstParentChanges(git_dir, commits) as stream:
        found = dict(stream)
    missing = [commit for commit in commits if commit not in found]
    if missing:
        raise Invalid(f"git did not describe commit {missing[0]}")
    return found


def operations(changes: list[Change]) -> list[dict]:
    """The operation list (API.md's shape) of a commit's changes, ordered by path."""
    out: list[dict] = []
    for change in sorted(changes, key=lambda change: change.path):
        if change.status == "D":
            out.append({"op": "delete", "path": change.path})
        elif change.status == "R":
            operation = {"op": "rename", "from": change.old_path, "to": change.path}
            if change.edited:
                operation.update(blob=change.new_id, mode=f"{change.new_mode:o}")
            out.append(operation)
        else:
            out.append({"op": "write", "path": change.path, "blob": change.new_id, "mode": f"{change.new_mode:o}"})
    return out


def changed_paths(changes: list[Change], limit: int = MAX_INDEXED_PATHS) -> set[str] | None:
    """The paths whose entry differs from the first parent's, files and the directories above
    them (what engine.trees.changed_paths finds by walking the trees), or None past ``limit``."""
    found: set[str] = set()
    for change in changes:
        for path in (change.path, change.old_path):
            while path and path not in found:
                found.add(path)
                path = path.rpartition("/")[0]
        if len(found) > limit:
            return None
    return found
