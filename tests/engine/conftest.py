"""Fixtures for engine tests: no database, no Django — just stores and one-line builders."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from engine.changeset import Delete, Rename, Write, apply_changes, create_changeset, create_commit
from engine.objects import BLOB, MODE_FILE, Entry, ObjectId, Signature
from engine.store import DiskStore, MemoryStore, ObjectBatch, ObjectStore

BASE_TIME = 1_700_000_000


def signature(tick: int = 0) -> Signature:
    """A fixed author whose time advances by ``tick`` seconds (distinct times order git's log)."""
    return Signature("Agent", "agent@example.com", BASE_TIME + tick)


@pytest.fixture(params=["memory", "disk"])
def store(request, tmp_path) -> ObjectStore:
    """Every contract test runs against both store implementations."""
    if request.param == "memory":
        return MemoryStore()
    return DiskStore(tmp_path / "repo.git")


@pytest.fixture
def disk_store(tmp_path) -> DiskStore:
    return DiskStore(tmp_path / "repo.git")


class Builder:
    """Write changesets from plain dicts: ``commit({"a.txt": "x\\n"}, parent=c1)``.

    A value of ``None`` deletes the path; ``renames`` maps old path to new path.
    """

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.tick = 0

    def commit(
        self,
        files: dict[str, str | bytes | None] | None = None,
        *,
        parent: ObjectId | None = None,
        renames: dict[str, str] | None = None,
        message: str = "change",
    ) -> ObjectId:
        ops = []
        for path, content in (files or {}).items():
            if content is None:
                ops.append(Delete(path))
            else:
                data = content.encode() if isinstance(content, str) else content
                ops.append(Write(path, self.store.add(BLOB, data)))
        for source, target in (renames or {}).items():
            ops.append(Rename(source, target))
        self.tick += 1
        return create_changeset(self.store, parent, ops, message=message, author=signature(self.tick))

    def read(self, commit: ObjectId, path: str) -> bytes | None:
        from engine.trees import lookup

        entry = lookup(self.store, self.store.read_commit(commit).tree, path)
        return None if entry is None else self.store.read_blob(entry.id)

    def files(self, commit: ObjectId) -> dict[str, bytes]:
        from engine.trees import iter_files

        tree = self.store.read_commit(commit).tree
        return {path: self.store.read_blob(entry.id) for path, entry in iter_files(self.store, tree)}


@pytest.fixture
def build(store) -> Builder:
    return Builder(store)


def commit_on(
    store: ObjectStore,
    parents: Sequence[ObjectId],
    files: dict[str, str | None],
    *,
    time: int,
    message: str = "change\n",
) -> ObjectId:
    """A commit with any number of ``parents`` whose tree is the first parent's with ``files``
    written (None deletes); for merge commits, which operation lists cannot express."""
    changes = {
        path: None if text is None else Entry(MODE_FILE, store.add(BLOB, text.encode())) for path, text in files.items()
    }
    batch = ObjectBatch(store)
    tree = apply_changes(batch, store.read_commit(parents[0]).tree if parents else None, changes)
    batch.flush()
    return create_commit(store, tree, list(parents), message=message, author=signature(time))


#: git must not read the machine's or the user's configuration (log.follow, blame options, …).
GIT_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def run_git(
    repo: Path | str, *args: str, input: bytes | None = None, ok: tuple[int, ...] = (0,)
) -> subprocess.CompletedProcess:
    """Run the real git binary in ``repo``; fail the test with git's message on an unexpected status."""
    result = subprocess.run(["git", *args], cwd=repo, input=input, capture_output=True, env=GIT_ENV)
    if result.returncode not in ok:
        raise AssertionError(
            f"git {' '.join(args)} failed ({result.returncode}): {result.stderr.decode(errors='replace')}"
        )
    return result


def git(repo: Path | str, *args: str, input: bytes | None = None) -> str:
    """git's standard output as text."""
    return run_git(repo, *args, input=input).stdout.decode()


def git_blame_origins(repo: Path | str, rev: str, path: str, *options: str) -> list[tuple[ObjectId, str]]:
    """The commit ``git blame`` (with ``options``) gives each line of ``path`` at ``rev``, and the
    file's path in that commit, in line order."""
    out = git(repo, "blame", "--porcelain", *options, rev, "--", path)
    lines: dict[int, ObjectId] = {}
    paths: dict[ObjectId, str] = {}
    for line in out.splitlines():
        match = re.match(r"([0-9a-f]{40}) \d+ (\d+)", line)
        if match:
            commit = lines[int(match[2])] = match[1]
        elif line.startswith("filename "):
            # Given with a commit's first group (and every group of a commit seen at two paths).
            paths[commit] = line.removeprefix("filename ")
    return [(lines[number], paths[lines[number]]) for number in range(1, len(lines) + 1)]


def git_blame(repo: Path | str, rev: str, path: str, *options: str) -> list[ObjectId]:
    """The commit ``git blame`` (with ``options``) gives each line of ``path`` at ``rev``, in line order."""
    return [commit for commit, _ in git_blame_origins(repo, rev, path, *options)]
