"""Three-way merges: clean cases combine both sides; every conflict kind is reported, never merged."""

from __future__ import annotations

import pytest

from engine.changeset import Write, create_changeset
from engine.merge import merge_text, merge_trees
from engine.objects import BLOB, MODE_EXECUTABLE
from engine.store import MemoryStore, ObjectBatch
from engine.trees import iter_files

from .conftest import Builder, signature

TEXT = "".join(f"line {i}\n" for i in range(1, 11))


def _merge(build, base, ours, theirs):
    store = build.store
    tree = lambda c: store.read_commit(c).tree  # noqa: E731
    batch = ObjectBatch(store)
    result = merge_trees(batch, tree(base), tree(ours), tree(theirs))
    batch.flush()
    return result


def _files(store, tree):
    return {path: store.read_blob(entry.id) for path, entry in iter_files(store, tree)}


def test_changes_to_different_files_combine(build):
    base = build.commit({"a.txt": "a\n", "b.txt": "b\n"})
    ours = build.commit({"a.txt": "A\n"}, parent=base)
    theirs = build.commit({"b.txt": "B\n", "c/new.txt": "new\n"}, parent=base)
    result = _merge(build, base, ours, theirs)
    assert result.clean
    assert _files(build.store, result.tree) == {"a.txt": b"A\n", "b.txt": b"B\n", "c/new.txt": b"new\n"}


def test_changes_to_different_lines_of_one_file_combine(build):
    base = build.commit({"f.txt": TEXT})
    ours = build.commit({"f.txt": TEXT.replace("line 2\n", "line two\n")}, parent=base)
    theirs = build.commit({"f.txt": TEXT.replace("line 9\n", "line nine\n")}, parent=base)
    result = _merge(build, base, ours, theirs)
    assert result.clean
    merged = _files(build.store, result.tree)["f.txt"].decode()
    assert "line two\n" in merged and "line nine\n" in merged and "line 5\n" in merged


def test_a_rename_on_one_side_carries_the_edit_from_the_other(build):
    base = build.commit({"old/f.txt": TEXT, "keep.txt": "k\n"})
    ours = build.commit(renames={"old/f.txt": "new/f.txt"}, parent=base)
    theirs = build.commit({"old/f.txt": TEXT.replace("line 4\n", "edited\n")}, parent=base)
    for a, b in ((ours, theirs), (theirs, ours)):
        result = _merge(build, base, a, b)
        assert result.clean
        files = _files(build.store, result.tree)
        assert "old/f.txt" not in files
        assert files["new/f.txt"] == TEXT.replace("line 4\n", "edited\n").encode()


def test_the_same_change_on_both_sides_is_not_a_conflict(build):
    base = build.commit({"f.txt": TEXT})
    ours = build.commit({"f.txt": "same\n", "g.txt": "added twice\n"}, parent=base)
    theirs = build.commit({"f.txt": "same\n", "g.txt": "added twice\n"}, parent=base)
    result = _merge(build, base, ours, theirs)
    assert result.clean and _files(build.store, result.tree) == {"f.txt": b"same\n", "g.txt": b"added twice\n"}


def test_a_mode_change_and_a_content_change_combine(store):
    build = Builder(store)
    base = build.commit({"run.sh": TEXT})
    blob = store.add(BLOB, TEXT.encode())
    ours = create_changeset(store, base, [Write("run.sh", blob, MODE_EXECUTABLE)], message="x", author=signature())
    theirs = build.commit({"run.sh": TEXT + "more\n"}, parent=base)
    result = _merge(build, base, ours, theirs)
    ((path, entry),) = iter_files(store, result.tree)
    assert entry.mode == MODE_EXECUTABLE and store.read_blob(entry.id) == (TEXT + "more\n").encode()


def _conflict_cases():
    binary = b"\x00\x01binary"
    return {
        "content": (
            {"f.txt": TEXT},
            {"f.txt": TEXT.replace("line 5", "ours")},
            {"f.txt": TEXT.replace("line 5", "theirs")},
            {},
            {},
            "f.txt",
        ),
        "add/add": ({"x": "x\n"}, {"n.txt": "one\n"}, {"n.txt": "two\n"}, {}, {}, "n.txt"),
        "modify/delete": ({"f.txt": TEXT}, {"f.txt": TEXT + "more\n"}, {"f.txt": None}, {}, {}, "f.txt"),
        "rename/delete": ({"f.txt": TEXT}, {}, {"f.txt": None}, {"f.txt": "g.txt"}, {}, "g.txt"),
        "rename/rename": ({"f.txt": TEXT}, {}, {}, {"f.txt": "a.txt"}, {"f.txt": "b.txt"}, "a.txt"),
        "binary": ({"b.bin": binary}, {"b.bin": binary + b"1"}, {"b.bin": binary + b"2"}, {}, {}, "b.bin"),
        "file/directory": ({"x": "x\n"}, {"p": "file\n"}, {"p/inner.txt": "dir\n"}, {}, {}, "p"),
    }


@pytest.mark.parametrize("kind", sorted(_conflict_cases()))
def test_each_conflict_kind_is_reported_by_path_and_nothing_is_written(kind):
    store = MemoryStore()
    build = Builder(store)
    base_files, our_files, their_files, our_renames, their_renames, path = _conflict_cases()[kind]
    base = build.commit(base_files)
    ours = build.commit(our_files, parent=base, renames=our_renames)
    theirs = build.commit(their_files, parent=base, renames=their_renames)
    before = len(store)
    tree = lambda c: store.read_commit(c).tree  # noqa: E731
    result = merge_trees(ObjectBatch(store), tree(base), tree(ours), tree(theirs))
    assert result.tree is None
    assert (path, kind) in {(c.path, c.kind) for c in result.conflicts}
    assert len(store) == before


def test_a_file_and_a_directory_at_one_path_in_a_new_directory_conflict(build):
    """Neither side's file is dropped: the clash is below a directory the base does not have."""
    base = build.commit({"x": "x\n"})
    ours = build.commit({"new/p": "file\n"}, parent=base)
    theirs = build.commit({"new/p/inner.txt": "dir\n"}, parent=base)
    result = _merge(build, base, ours, theirs)
    assert result.tree is None
    assert [(c.path, c.kind) for c in result.conflicts] == [("new/p", "file/directory")]


def test_a_file_where_the_other_side_still_has_files_of_that_directory_conflicts(build):
    base = build.commit({"d/x.txt": "x\n", "e.txt": "e\n"})
    emptied = build.commit({"d/x.txt": None}, parent=base)
    theirs = build.commit({"d": "now a file\n"}, parent=emptied)
    ours = build.commit({"d/x.txt": "edited\n"}, parent=base)
    result = _merge(build, base, ours, theirs)
    assert result.tree is None
    assert {(c.path, c.kind) for c in result.conflicts} == {("d", "file/directory"), ("d/x.txt", "modify/delete")}


def test_a_mode_conflict_is_reported(store):
    build = Builder(store)
    base = build.commit({"f": "x\n"})
    link = store.add(BLOB, b"target")
    ours = create_changeset(
        store, base, [Write("f", store.add(BLOB, b"x\n"), MODE_EXECUTABLE)], message="m", author=signature()
    )
    theirs = create_changeset(store, base, [Write("f", link, 0o120000)], message="m", author=signature())
    tree = lambda c: store.read_commit(c).tree  # noqa: E731
    result = merge_trees(ObjectBatch(store), tree(base), tree(ours), tree(theirs))
    assert [(c.path, c.kind) for c in result.conflicts] == [("f", "mode")]


def test_a_binary_file_changed_on_one_side_only_merges(build):
    base = build.commit({"b.bin": b"\x00base", "t.txt": "t\n"})
    ours = build.commit({"b.bin": b"\x00ours"}, parent=base)
    theirs = build.commit({"t.txt": "T\n"}, parent=base)
    result = _merge(build, base, ours, theirs)
    assert result.clean and _files(build.store, result.tree) == {"b.bin": b"\x00ours", "t.txt": b"T\n"}


def test_text_merge_marks_conflicting_regions():
    result = merge_text(b"a\nb\nc\n", b"a\nB1\nc\n", b"a\nB2\nc\n", labels=("stream", "proposal"))
    assert result.conflicted
    assert result.content == b"a\n<<<<<<< stream\nB1\n=======\nB2\n>>>>>>> proposal\nc\n"


def test_text_merge_of_separate_edits_is_clean():
    result = merge_text(b"1\n2\n3\n4\n5\n", b"one\n2\n3\n4\n5\n", b"1\n2\n3\n4\nfive\n")
    assert not result.conflicted and result.content == b"one\n2\n3\n4\nfive\n"
