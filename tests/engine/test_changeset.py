"""Building changesets from operation lists, and refusing bad ones without writing anything."""

from __future__ import annotations

import pytest

from engine.changeset import Delete, Rename, Write, create_changeset
from engine.errors import InvalidObjectId, InvalidOperation, ObjectMissing, UnsafePath
from engine.objects import BLOB, EMPTY_TREE_ID, MODE_EXECUTABLE, MODE_TREE
from engine.store import MemoryStore
from engine.trees import diff_trees, lookup

from .conftest import Builder, signature


def test_writes_deletes_and_renames_produce_the_expected_files(build):
    first = build.commit({"src/a.py": "a\n", "src/b.py": "b\n", "README": "hi\n"})
    second = build.commit({"src/b.py": None, "docs/x.md": "x\n"}, parent=first, renames={"src/a.py": "lib/a.py"})
    assert build.files(second) == {"README": b"hi\n", "docs/x.md": b"x\n", "lib/a.py": b"a\n"}
    assert build.store.read_commit(second).parents == (first,)


def test_only_trees_along_changed_paths_are_new():
    store = MemoryStore()
    build = Builder(store)
    files = {f"d{i}/sub/f{j}.txt": f"{i} {j}\n" for i in range(5) for j in range(5)}
    first = build.commit(files)
    before = len(store)
    second = build.commit({"d3/sub/f1.txt": "changed\n"}, parent=first)
    # One blob, three trees (root, d3, d3/sub) and the commit; untouched directories are shared.
    assert len(store) - before == 5
    old_tree, new_tree = store.read_commit(first).tree, store.read_commit(second).tree
    assert lookup(store, old_tree, "d2") == lookup(store, new_tree, "d2")
    assert [c.path for c in diff_trees(store, old_tree, new_tree)] == ["d3/sub/f1.txt"]


def test_a_file_can_become_a_directory_in_one_changeset(build):
    first = build.commit({"a": "file\n"})
    second = build.commit({"a": None, "a/b": "inside\n"}, parent=first)
    assert build.files(second) == {"a/b": b"inside\n"}


def test_directories_left_empty_disappear_and_an_empty_repository_has_the_empty_tree(build):
    first = build.commit({"d/e/f.txt": "x\n", "g.txt": "y\n"})
    second = build.commit({"d/e/f.txt": None}, parent=first)
    assert lookup(build.store, build.store.read_commit(second).tree, "d") is None
    third = build.commit({"g.txt": None}, parent=second)
    assert build.store.read_commit(third).tree == EMPTY_TREE_ID


def test_modes_are_kept(store):
    blob = store.add(BLOB, b"#!/bin/sh\n")
    commit = create_changeset(store, None, [Write("run.sh", blob, MODE_EXECUTABLE)], message="m", author=signature())
    assert lookup(store, store.read_commit(commit).tree, "run.sh").mode == MODE_EXECUTABLE


@pytest.mark.parametrize(
    "path",
    [
        "/abs",
        "a/../b",
        "..",
        "./a",
        "a//b",
        "a/",
        "",
        ".git/config",
        "x/.git/y",
        "x/.GIT",
        "nul\x00byte",
        "back\\slash",
    ],
)
def test_unsafe_paths_are_refused_and_nothing_is_written(store, path):
    blob = store.add(BLOB, b"content")
    count = _object_count(store)
    with pytest.raises(UnsafePath) as caught:
        create_changeset(store, None, [Write(path, blob)], message="m", author=signature())
    assert caught.value.code == "unsafe_path"
    assert caught.value.details[0]["path"] == path
    assert _object_count(store) == count


@pytest.mark.parametrize(
    "operations, problem",
    [
        ([Write("x", "BLOB"), Delete("x")], "also used"),
        ([Delete("missing.txt")], "no file"),
        ([Delete("dir")], "directory"),
        ([Rename("missing", "new")], "rename source"),
        ([Rename("top.txt", "dir/f.txt")], "already exists"),
        ([Write("top.txt/inner", "BLOB")], "is a file"),
        ([Write("dir", "BLOB")], "directory exists"),
        ([Write("new", "BLOB"), Write("new/deeper", "BLOB")], "written as a file"),
        ([Write("x", "BLOB", 0o040000)], "cannot be written"),
    ],
)
def test_contradictory_operations_are_refused_and_nothing_is_written(store, operations, problem):
    build = Builder(store)
    parent = build.commit({"top.txt": "t\n", "dir/f.txt": "f\n"})
    blob = store.add(BLOB, b"new content\n")
    operations = [_with_blob(op, blob) for op in operations]
    count = _object_count(store)
    with pytest.raises(InvalidOperation) as caught:
        create_changeset(store, parent, operations, message="m", author=signature())
    assert problem in str(caught.value)
    assert _object_count(store) == count


def test_every_problem_is_listed_in_details(store):
    with pytest.raises(UnsafePath) as caught:
        create_changeset(
            store,
            None,
            [Write("../a", "0" * 40), Delete("nothing"), Write("ok", "1" * 40)],
            message="m",
            author=signature(),
        )
    codes = [(d["index"], d["code"]) for d in caught.value.details]
    assert codes == [(0, "unsafe_path"), (1, "invalid_operation"), (2, "object_missing")]


def test_missing_blobs_and_malformed_ids_are_refused(store):
    with pytest.raises(ObjectMissing):
        create_changeset(store, None, [Write("a", "0" * 40)], message="m", author=signature())
    with pytest.raises(InvalidObjectId):
        create_changeset(store, None, [Write("a", "not-an-id")], message="m", author=signature())
    with pytest.raises(InvalidObjectId):
        create_changeset(store, "zz", [], message="m", author=signature())
    with pytest.raises(ObjectMissing):
        create_changeset(store, "0" * 40, [], message="m", author=signature())


def _with_blob(op, blob):
    if isinstance(op, Write) and op.blob == "BLOB":
        return Write(op.path, blob, op.mode)
    return op


def _object_count(store) -> int:
    if isinstance(store, MemoryStore):
        return len(store)
    import os

    objects = os.path.join(store.path, "objects")
    return sum(len(files) for _, _, files in os.walk(objects))


def test_directory_entries_are_trees(build):
    commit = build.commit({"a/b/c.txt": "x\n"})
    assert lookup(build.store, build.store.read_commit(commit).tree, "a/b").mode == MODE_TREE
