"""The real git binary as the oracle: ids, fsck, and git merge-tree on the same objects."""

from __future__ import annotations

import os
import subprocess

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from engine.changeset import Write, create_changeset
from engine.integrate import Outcome, integrate
from engine.objects import BLOB, MODE_EXECUTABLE, MODE_SYMLINK, Signature
from engine.renames import similarity
from engine.store import DiskStore
from engine.trees import Added, Deleted, diff_trees

from .conftest import GIT_ENV, Builder, git, run_git, signature

TEXT = "".join(f"line {i}\n" for i in range(1, 13))


def _git_env(when: int) -> dict:
    env = dict(GIT_ENV)
    for role in ("AUTHOR", "COMMITTER"):
        env[f"GIT_{role}_NAME"] = "Agent"
        env[f"GIT_{role}_EMAIL"] = "agent@example.com"
        env[f"GIT_{role}_DATE"] = f"{when} +0000"
    return env


def test_tree_and_commit_ids_equal_gits_for_the_same_content(tmp_path):
    files = {
        "README": b"hello\n",
        "a-b": b"dash\n",
        "a.b": b"dot\n",
        "a/b": b"dir entry sorts as 'a/'\n",
        "a0": b"zero\n",
        "deep/er/still/file.txt": b"deep\n",
        "bin/tool": b"#!/bin/sh\necho hi\n",
        "link": b"README",
        "unicode/caf\u00e9.txt": b"accent\n",
    }
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q")
    for path, data in files.items():
        target = work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if path == "link":
            os.symlink(data.decode(), target)
        else:
            target.write_bytes(data)
    os.chmod(work / "bin/tool", 0o755)
    git(work, "add", "-A")
    git_tree = git(work, "write-tree").strip()
    when = 1_700_000_123
    git_commit = (
        subprocess.run(
            ["git", "commit-tree", git_tree, "-m", "import"],
            cwd=work,
            env=_git_env(when),
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )

    store = DiskStore(tmp_path / "ours.git")
    ops = []
    for path, data in files.items():
        mode = MODE_SYMLINK if path == "link" else MODE_EXECUTABLE if path == "bin/tool" else 0o100644
        ops.append(Write(path, store.add(BLOB, data), mode))
    author = Signature("Agent", "agent@example.com", when)
    ours = create_changeset(store, None, ops, message="import\n", author=author)
    assert store.read_commit(ours).tree == git_tree
    assert ours == git_commit


def test_git_fsck_strict_accepts_every_object_we_write(tmp_path):
    store = DiskStore(tmp_path / "repo.git")
    build = Builder(store)
    base = build.commit({f"pkg/mod{i}/file{j}.rs": f"fn f{i}{j}() {{}}\n" for i in range(4) for j in range(10)})
    stream = build.commit({"pkg/mod1/file1.rs": "changed\n"}, parent=base)
    proposal = build.commit(
        {"pkg/mod2/new.rs": "new\n", "pkg/mod3/file3.rs": None},
        parent=base,
        renames={"pkg/mod0/file0.rs": "moved/file0.rs"},
    )
    merged = integrate(store, stream, proposal, committer=signature(9))
    assert merged.outcome == Outcome.MERGE
    git(store.path, "update-ref", "refs/heads/main", merged.head)
    git(store.path, "fsck", "--strict", "--no-dangling")


def _merge_tree(repo: str, ours: str, theirs: str) -> tuple[int, str, set[str]]:
    """git merge-tree --write-tree: (exit status, tree id, conflicted paths).

    Directory renames are not inferred by our merge (a new file stays where its author put it),
    so git's directory-rename detection is turned off for the comparison.
    """
    result = run_git(
        repo,
        "-c",
        "merge.directoryRenames=false",
        "merge-tree",
        "--write-tree",
        "--name-only",
        "--no-messages",
        ours,
        theirs,
        ok=(0, 1),
    )
    lines = result.stdout.decode().splitlines()
    return result.returncode, lines[0], {line for line in lines[1:] if line}


SCENARIOS = {
    "different files": ({"a.txt": "a\n", "b.txt": "b\n"}, {"a.txt": "A\n"}, {}, {"b.txt": "B\n"}, {}),
    "different lines of one file": (
        {"f.txt": TEXT},
        {"f.txt": TEXT.replace("line 2\n", "two\n")},
        {},
        {"f.txt": TEXT.replace("line 11\n", "eleven\n")},
        {},
    ),
    "rename vs edit": (
        {"src/app.py": TEXT, "x": "x\n"},
        {},
        {"src/app.py": "lib/app.py"},
        {"src/app.py": TEXT.replace("line 6", "six")},
        {},
    ),
    "edited rename vs edit of other lines": (
        {"old.txt": TEXT},
        {"old.txt": None, "new.txt": TEXT.replace("line 1\n", "one\n")},
        {},
        {"old.txt": TEXT.replace("line 12\n", "twelve\n")},
        {},
    ),
    "both add the same file, new directories": (
        {"k": "k\n"},
        {"n/e/w.txt": "same\n", "ours/only.txt": "o\n"},
        {},
        {"n/e/w.txt": "same\n", "theirs/only.txt": "t\n"},
        {},
    ),
    "delete vs untouched, directory emptied": (
        {"d/only.txt": "x\n", "e.txt": "e\n"},
        {"d/only.txt": None},
        {},
        {"e.txt": "E\n"},
        {},
    ),
    "content conflict": (
        {"f.txt": TEXT},
        {"f.txt": TEXT.replace("line 4", "O")},
        {},
        {"f.txt": TEXT.replace("line 4", "T")},
        {},
    ),
    "modify/delete": ({"f.txt": TEXT, "g": "g\n"}, {"f.txt": TEXT + "x\n"}, {}, {"f.txt": None}, {}),
    "add/add": ({"g": "g\n"}, {"n.txt": "one\n"}, {}, {"n.txt": "two\n"}, {}),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_merges_give_the_same_tree_or_the_same_conflicted_paths_as_git_merge_tree(tmp_path, name):
    store = DiskStore(tmp_path / "repo.git")
    build = Builder(store)
    base_files, our_files, our_renames, their_files, their_renames = SCENARIOS[name]
    base = build.commit(base_files)
    ours = build.commit(our_files, parent=base, renames=our_renames)
    theirs = build.commit(their_files, parent=base, renames=their_renames)
    _assert_same_as_git(store, ours, theirs)


def _assert_same_as_git(store: DiskStore, ours: str, theirs: str) -> None:
    status, git_tree, git_conflicts = _merge_tree(store.path, ours, theirs)
    result = integrate(store, ours, theirs, committer=signature(77))
    if status == 0 and result.outcome == Outcome.CONFLICT:
        # git 2.39 calls some rename/add collisions clean while writing conflict markers into
        # the file (an inner merge's 8-character markers). That is a silent merge; we must
        # report those files as conflicts instead.
        marked = _files_with_markers(store.path, git_tree)
        assert marked and {c.path for c in result.conflicts} <= marked, (result.conflicts, marked)
    elif status == 0:
        assert result.outcome == Outcome.MERGE, result.conflicts
        assert store.read_commit(result.head).tree == git_tree
    else:
        assert result.outcome == Outcome.CONFLICT
        assert {c.path for c in result.conflicts} == git_conflicts


def _files_with_markers(repo: str, tree: str) -> set[str]:
    marked = set()
    for line in git(repo, "ls-tree", "-r", tree).splitlines():
        meta, path = line.split("\t", 1)
        if b"\n<<<<<<<" in b"\n" + run_git(repo, "cat-file", "blob", meta.split()[2]).stdout:
            marked.add(path)
    return marked


# Random histories: a fixed set of paths (no file/directory clashes) and a small line alphabet.
PATHS = ["a/x.txt", "a/y.txt", "a/c/z.txt", "b/x.txt", "top.txt"]
LINES = [f"common line {i}\n" for i in range(12)]
file_content = st.lists(st.sampled_from(LINES), min_size=1, max_size=8, unique=True).map("".join)
tree_spec = st.dictionaries(st.sampled_from(PATHS), file_content, min_size=1)
side_edit = st.dictionaries(st.sampled_from(PATHS), st.one_of(st.none(), file_content))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base_files=tree_spec, our_edit=side_edit, their_edit=side_edit)
def test_random_merges_agree_with_git_merge_tree(tmp_path_factory, base_files, our_edit, their_edit):
    store = DiskStore(tmp_path_factory.mktemp("oracle") / "repo.git")
    build = Builder(store)
    base = build.commit(base_files)
    ours = build.commit(_valid(base_files, our_edit), parent=base, message="ours")
    theirs = build.commit(_valid(base_files, their_edit), parent=base, message="theirs")
    # When two rename pairings score the same, git's choice follows its traversal order (and
    # git diff-tree and git merge-tree choose differently); only unambiguous histories compare.
    assume(not _ambiguous_renames(store, base, ours) and not _ambiguous_renames(store, base, theirs))
    _assert_same_as_git(store, ours, theirs)


def _ambiguous_renames(store: DiskStore, old: str, new: str) -> bool:
    changes = diff_trees(store, store.read_commit(old).tree, store.read_commit(new).tree)
    deleted = [store.read_blob(c.old.id) for c in changes if isinstance(c, Deleted)]
    added = [store.read_blob(c.new.id) for c in changes if isinstance(c, Added)]
    scores = [[similarity(d, a) for a in added] for d in deleted]
    for row in scores:
        if max(row, default=0) >= 50 and row.count(max(row)) > 1:
            return True
    return any(max(column) >= 50 and column.count(max(column)) > 1 for column in zip(*scores))


def _valid(base_files: dict, edit: dict) -> dict:
    """Drop deletions of files the base does not have (the builder would refuse them)."""
    return {path: content for path, content in edit.items() if content is not None or path in base_files}


def test_a_directory_replaced_by_a_file_merges_cleanly_as_git_merges_it(tmp_path):
    """Their side empties ``d/`` and writes a file ``d``; ours edits a file elsewhere. (Where ours
    edits inside ``d/``, git reports the clash under a renamed path, ``d~<commit>``, and we under
    ``d``: tests/engine/test_merge.py.)"""
    store = DiskStore(tmp_path / "repo.git")
    build = Builder(store)
    base = build.commit({"d/x.txt": "x\n", "e.txt": "e\n"})
    emptied = build.commit({"d/x.txt": None}, parent=base)
    theirs = build.commit({"d": "now a file\n"}, parent=emptied)
    ours = build.commit({"e.txt": "edited\n"}, parent=base)
    _assert_same_as_git(store, ours, theirs)
