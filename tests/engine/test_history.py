"""Blame and log of one path, on both stores (``store`` and ``build`` fixtures from conftest)."""

from __future__ import annotations

import pytest

from engine.changeset import apply_changes, create_commit
from engine.errors import InvalidInput, InvalidObjectId, PathNotFound, UnsafePath, WrongObjectType
from engine.history import BlameLine, MemoryPathIndex, blame, derive, log, log_page, path_key
from engine.objects import BLOB, MODE_FILE, Entry, ObjectId, Signature
from engine.store import ObjectBatch
from engine.trees import changed_paths


def merge(build, parents: list[ObjectId], files: dict[str, str | None] | None = None) -> ObjectId:
    """A merge commit: the first parent's tree with ``files`` applied (None deletes)."""
    store = build.store
    changes = {
        path: None if text is None else Entry(MODE_FILE, store.add(BLOB, text.encode()))
        for path, text in (files or {}).items()
    }
    batch = ObjectBatch(store)
    tree = apply_changes(batch, store.read_commit(parents[0]).tree, changes)
    batch.flush()
    build.tick += 1
    who = Signature("Agent", "agent@example.com", 1_700_000_000 + build.tick)
    return create_commit(store, tree, parents, message="merge\n", author=who)


def owners(lines: list[BlameLine]) -> list[ObjectId]:
    return [line.changeset for line in lines]


# ---------------------------------------------------------------------------- blame


def test_blame_attributes_each_line_to_the_changeset_that_last_wrote_it(build):
    c1 = build.commit({"f.txt": "a\nb\nc\n"})
    c2 = build.commit({"f.txt": "a\nB\nc\n"}, parent=c1)  # modify
    c3 = build.commit({"f.txt": "a\nB\nc\nd\n"}, parent=c2)  # append
    c4 = build.commit({"f.txt": "x\na\nB\nc\nd\n"}, parent=c3)  # insert at the top
    c5 = build.commit({"f.txt": "x\na\nB\nd\n"}, parent=c4)  # delete
    assert blame(build.store, c5, "f.txt") == [
        BlameLine(1, c4, "x", "f.txt"),
        BlameLine(2, c1, "a", "f.txt"),
        BlameLine(3, c2, "B", "f.txt"),
        BlameLine(4, c3, "d", "f.txt"),
    ]


def test_changesets_that_leave_the_file_alone_are_passed_over(build):
    c1 = build.commit({"f.txt": "one\ntwo\n", "other.txt": "x\n"})
    c2 = build.commit({"other.txt": "y\n"}, parent=c1)
    c3 = build.commit({"f.txt": "one\nTWO\n"}, parent=c2)
    c4 = build.commit({"dir/new.txt": "z\n"}, parent=c3)
    assert owners(blame(build.store, c4, "f.txt")) == [c1, c3]


def test_lines_of_a_re_created_file_belong_to_the_re_creation(build):
    c1 = build.commit({"f.txt": "a\nb\n", "keep.txt": "k\n"})
    c2 = build.commit({"f.txt": None}, parent=c1)
    c3 = build.commit({"f.txt": "a\nb\nc\n"}, parent=c2)
    assert owners(blame(build.store, c3, "f.txt")) == [c3, c3, c3]


def test_a_renamed_file_keeps_the_history_of_its_old_path(build):
    c1 = build.commit({"old.txt": "a\nb\n"})
    c2 = build.commit(renames={"old.txt": "dir/new.txt"}, parent=c1)
    c3 = build.commit({"dir/new.txt": "a\nB\n"}, parent=c2)
    lines = blame(build.store, c3, "dir/new.txt")
    assert [(line.changeset, line.path) for line in lines] == [(c1, "old.txt"), (c3, "dir/new.txt")]


def test_blame_walks_paths_with_non_ascii_names(build):
    c1 = build.commit({"répertoire/café.txt": "a\nb\n"})
    c2 = build.commit({"répertoire/café.txt": "a\nB\n"}, parent=c1)
    c3 = build.commit({"répertoire/autre.txt": "x\n"}, parent=c2)
    assert owners(blame(build.store, c3, "répertoire/café.txt")) == [c1, c2]


def test_blame_finds_a_name_that_ends_another_name(build):
    # "a b.txt" holds " b.txt" and sorts first: the parent's "b.txt" is not mistaken for it.
    c1 = build.commit({"a b.txt": "other\n"})
    c2 = build.commit({"b.txt": "a\nb\n"}, parent=c1)
    c3 = build.commit({"b.txt": "a\nB\n"}, parent=c2)
    c4 = build.commit({"a b.txt": "changed\n"}, parent=c3)
    assert owners(blame(build.store, c4, "b.txt")) == [c2, c3]


def test_blame_follows_the_first_parent_of_a_merge(build):
    base = build.commit({"f.txt": "a\nb\n"})
    side = build.commit({"f.txt": "a\nb\nside\n"}, parent=base)
    main = build.commit({"f.txt": "main\na\nb\n"}, parent=base)
    merged = merge(build, [main, side], {"f.txt": "main\na\nb\nside\n"})
    # Like `git blame --first-parent`: what the merge brought from the side is the merge's.
    assert owners(blame(build.store, merged, "f.txt")) == [main, base, base, merged]


def test_lines_that_survive_to_the_root_belong_to_the_root(build):
    c1 = build.commit({"f.txt": "a\nb\nc\n"})
    c2 = build.commit({"f.txt": "a\nc\n"}, parent=c1)
    assert owners(blame(build.store, c2, "f.txt")) == [c1, c1]


def test_blame_text_decoding_and_line_ends(build):
    c1 = build.commit({"f.txt": b"caf\xe9\r\nlast without newline"})
    lines = blame(build.store, c1, "f.txt")
    assert [line.text for line in lines] == ["caf\ufffd\r", "last without newline"]
    assert [line.number for line in lines] == [1, 2]


def test_an_empty_file_has_no_lines(build):
    c1 = build.commit({"empty.txt": ""})
    assert blame(build.store, c1, "empty.txt") == []


def test_binary_files_are_blamed_by_lines(build):
    c1 = build.commit({"bin": b"\x00\x01\nkeep\n"})
    c2 = build.commit({"bin": b"\x00\x02\nkeep\n"}, parent=c1)
    assert owners(blame(build.store, c2, "bin")) == [c2, c1]


def test_blame_refuses_what_is_not_a_file(build):
    c1 = build.commit({"dir/f.txt": "a\n"})
    with pytest.raises(PathNotFound):
        blame(build.store, c1, "missing.txt")
    with pytest.raises(PathNotFound):
        blame(build.store, c1, "dir/f.txt/below")
    with pytest.raises(WrongObjectType):
        blame(build.store, c1, "dir")
    with pytest.raises(UnsafePath):
        blame(build.store, c1, "../f.txt")
    with pytest.raises(InvalidObjectId):
        blame(build.store, "main", "dir/f.txt")
    blob = build.store.add(BLOB, b"a\n")
    with pytest.raises(WrongObjectType):
        blame(build.store, blob, "dir/f.txt")


# ---------------------------------------------------------------------------- log


def test_log_without_a_path_lists_every_commit_newest_first(build):
    c1 = build.commit({"a": "1\n"})
    c2 = build.commit({"b": "1\n"}, parent=c1)
    c3 = build.commit({"c": "1\n"}, parent=c1)
    m = merge(build, [c2, c3], {"c": "1\n"})
    assert log(build.store, m) == [m, c3, c2, c1]


def test_log_of_a_path_lists_the_changesets_that_changed_it(build):
    c1 = build.commit({"f.txt": "1\n", "g.txt": "1\n"})
    c2 = build.commit({"g.txt": "2\n"}, parent=c1)
    c3 = build.commit({"f.txt": "2\n"}, parent=c2)
    c4 = build.commit({"f.txt": None}, parent=c3)
    c5 = build.commit({"g.txt": "3\n"}, parent=c4)
    assert log(build.store, c5, "f.txt") == [c4, c3, c1]
    assert log(build.store, c5, "g.txt") == [c5, c2, c1]
    assert log(build.store, c5, "never.txt") == []


def test_log_of_a_directory_lists_changes_below_it(build):
    c1 = build.commit({"src/a.py": "1\n", "README": "r\n"})
    c2 = build.commit({"README": "r2\n"}, parent=c1)
    c3 = build.commit({"src/deep/b.py": "1\n"}, parent=c2)
    assert log(build.store, c3, "src") == [c3, c1]


def test_log_limit_and_skip(build):
    commits = [build.commit({"f.txt": "0\n"})]
    for i in range(1, 6):
        commits.append(build.commit({"f.txt": f"{i}\n"}, parent=commits[-1]))
    newest_first = commits[::-1]
    assert log(build.store, commits[-1], "f.txt", limit=2) == newest_first[:2]
    assert log(build.store, commits[-1], "f.txt", limit=2, skip=2) == newest_first[2:4]
    assert log(build.store, commits[-1], limit=10, skip=4) == newest_first[4:]
    assert log(build.store, commits[-1], limit=0) == []
    with pytest.raises(InvalidInput):
        log(build.store, commits[-1], limit=-1)


def test_a_merge_that_kept_the_first_parents_file_hides_the_other_side(build):
    base = build.commit({"f.txt": "base\n", "g.txt": "g\n"})
    side = build.commit({"f.txt": "side\n"}, parent=base)
    main = build.commit({"g.txt": "main\n"}, parent=base)
    m = merge(build, [main, side], {"f.txt": "base\n"})  # the merge threw the side's f.txt away
    assert log(build.store, m, "f.txt") == [base]
    assert log(build.store, m, "g.txt") == [main, base]


def test_a_merge_that_took_the_file_from_a_side_shows_that_side_only(build):
    base = build.commit({"f.txt": "base\n", "g.txt": "g\n"})
    main = build.commit({"f.txt": "main\n"}, parent=base)
    side = build.commit({"f.txt": "side\n"}, parent=base)
    m = merge(build, [main, side], {"f.txt": "side\n"})
    # Treesame to the side: the merge and main's rejected edit are not listed.
    assert log(build.store, m, "f.txt") == [side, base]


def test_a_merge_treesame_to_both_parents_follows_only_the_first(build):
    base = build.commit({"f.txt": "base\n", "g.txt": "g\n"})
    changed = build.commit({"f.txt": "changed\n"}, parent=base)
    reverted = build.commit({"f.txt": "base\n"}, parent=changed)
    main = build.commit({"g.txt": "main\n"}, parent=base)
    m = merge(build, [main, reverted])
    assert log(build.store, m, "f.txt") == [base]


def test_a_merge_that_differs_from_every_parent_is_shown_with_both_sides(build):
    base = build.commit({"f.txt": "base\n"})
    main = build.commit({"f.txt": "main\n"}, parent=base)
    side = build.commit({"f.txt": "side\n"}, parent=base)
    m = merge(build, [main, side], {"f.txt": "resolved\n"})
    assert log(build.store, m, "f.txt") == [m, side, main, base]


def test_log_refuses_bad_input(build):
    c1 = build.commit({"f.txt": "1\n"})
    with pytest.raises(UnsafePath):
        log(build.store, c1, "/f.txt")
    with pytest.raises(InvalidObjectId):
        log(build.store, "main")


# ---------------------------------------------------------------------------- pages


def test_pages_cover_the_log_once_and_end_with_no_cursor(build):
    commits = [build.commit({"f.txt": "0\n"})]
    for i in range(1, 7):
        commits.append(build.commit({"f.txt": f"{i}\n"}, parent=commits[-1]))
    pages, cursor = [], None
    while True:
        page = log_page(build.store, commits[-1], "f.txt", limit=3, cursor=cursor)
        pages.append(page.changesets)
        cursor = page.next
        if cursor is None:
            break
    assert pages == [commits[:3:-1], commits[3:0:-1], commits[:1]]


def test_a_cursor_keeps_paging_the_first_walk_after_the_stream_moved(build):
    c1 = build.commit({"f.txt": "1\n"})
    c2 = build.commit({"f.txt": "2\n"}, parent=c1)
    c3 = build.commit({"f.txt": "3\n"}, parent=c2)
    first = log_page(build.store, c3, limit=2)
    assert first.changesets == [c3, c2]
    c4 = build.commit({"f.txt": "4\n"}, parent=c3)  # the stream moves on between pages
    second = log_page(build.store, c4, limit=2, cursor=first.next)
    assert second == ([c1], None)


def test_malformed_cursors_and_limits_are_refused(build):
    c1 = build.commit({"f.txt": "1\n"})
    for cursor in ("garbage", f"{c1}+", f"{c1}+-1", f"{c1[:-1]}+1", f"{c1}+1x"):
        with pytest.raises(InvalidInput):
            log_page(build.store, c1, limit=1, cursor=cursor)
    with pytest.raises(InvalidInput):
        log_page(build.store, c1, limit=0)


# ---------------------------------------------------------------------------- cost


def test_blame_and_log_read_only_the_directories_along_the_path(build, monkeypatch):
    files = {f"lib{d}/m{m}.txt": f"{d} {m}\n" for d in range(20) for m in range(5)}
    c = build.commit({**files, "src/deep/target.txt": "a\nb\n"})
    for i in range(8):
        change = {"src/deep/target.txt": f"a\nb\n{i}\n"} if i % 2 else {f"lib{i}/m0.txt": f"{i}\n"}
        c = build.commit(change, parent=c)
    store = build.store
    unrelated: set[ObjectId] = set()
    commit = c
    while True:
        tree = store.read_tree(store.read_commit(commit).tree)
        unrelated |= {entry.id for name, entry in tree.items() if name.startswith("lib")}
        parents = store.read_commit(commit).parents
        if not parents:
            break
        commit = parents[0]
    read: list[ObjectId] = []
    original = store.read_tree
    monkeypatch.setattr(store, "read_tree", lambda oid: read.append(oid) or original(oid))
    assert len(blame(store, c, "src/deep/target.txt")) == 3
    assert len(log(store, c, "src/deep/target.txt")) == 5
    assert read and not unrelated.intersection(read)


# ---------------------------------------------------------------------------- path index


def tree_of(build, commit: ObjectId) -> ObjectId:
    return build.store.read_commit(commit).tree


def test_changed_paths_lists_the_files_and_directories_that_differ(build):
    c1 = build.commit({"a/b/f.txt": "1\n", "a/g.txt": "1\n", "top.txt": "1\n", "x": "file\n"})
    c2 = build.commit({"a/b/f.txt": "2\n", "x": None, "x/inside.txt": "now a directory\n"}, parent=c1)
    old, new = tree_of(build, c1), tree_of(build, c2)
    assert changed_paths(build.store, old, new, limit=100) == {"a", "a/b", "a/b/f.txt", "x", "x/inside.txt"}
    assert changed_paths(build.store, new, new, limit=0) == set()
    assert changed_paths(build.store, None, old, limit=100) == {"a", "a/b", "a/b/f.txt", "a/g.txt", "top.txt", "x"}
    assert changed_paths(build.store, old, new, limit=4) is None  # too many to index


def test_derive_lists_what_is_not_derived_yet_parents_first(build):
    c1 = build.commit({"f.txt": "1\n"})
    c2 = build.commit({"f.txt": "2\n"}, parent=c1)
    side = build.commit({"d/g.txt": "1\n"}, parent=c1)
    m = merge(build, [c2, side], {"d/g.txt": "1\n"})
    derived = derive(build.store, m, lambda oid: False)
    assert [d.id for d in derived][0] == c1 and [d.id for d in derived][-1] == m
    by_id = {d.id: d for d in derived}
    assert [by_id[oid].generation for oid in (c1, c2, side, m)] == [1, 2, 2, 3]
    assert by_id[c1].changed == frozenset() and by_id[m].parents == (c2, side)
    assert by_id[c2].changed == {path_key("f.txt")}
    assert by_id[m].changed == {path_key("d"), path_key("d/g.txt")}  # against the first parent
    # Derived changesets stop the walk: their ancestors are derived too.
    assert [d.id for d in derive(build.store, m, lambda oid: oid in (c1, c2))] == [side, m]
    assert derive(build.store, m, lambda oid: True) == []


def test_an_indexed_log_reads_no_tree_of_the_changesets_that_leave_the_path_alone(build):
    first = build.commit({"f.txt": "0\n", "other.txt": "0\n"})
    history = [first]
    for number in range(1, 30):
        files = {"f.txt": f"{number}\n"} if number % 10 == 0 else {"other.txt": f"{number}\n"}
        history.append(build.commit(files, parent=history[-1]))
    index = MemoryPathIndex()
    index.add(derive(build.store, history[-1], lambda oid: False))
    expected = [history[20], history[10], first]
    assert log(build.store, history[-1], "f.txt") == expected

    reads: list[ObjectId] = []
    read_tree = build.store.read_tree
    build.store.read_tree = lambda oid: reads.append(oid) or read_tree(oid)
    assert log(build.store, history[-1], "f.txt", index=index) == expected
    # The root's tree (to see the file exists) and, per listed changeset, its tree and its
    # parent's, one segment deep: not one per changeset walked.
    assert len(reads) <= 1 + 2 * 2


def test_an_indexed_blame_looks_the_file_up_only_where_it_changed(build):
    history = [build.commit({"f.txt": "a\n", "other.txt": "0\n"})]
    for number in range(1, 30):
        files = {"f.txt": f"a\n{number}\n"} if number % 10 == 0 else {"other.txt": f"{number}\n"}
        history.append(build.commit(files, parent=history[-1]))
    index = MemoryPathIndex()
    index.add(derive(build.store, history[-1], lambda oid: False))
    expected = blame(build.store, history[-1], "f.txt")
    assert [line.changeset for line in expected] == [history[0], history[20]]

    reads: list[ObjectId] = []
    read_tree = build.store.read_tree
    build.store.read_tree = lambda oid: reads.append(oid) or read_tree(oid)
    assert blame(build.store, history[-1], "f.txt", index=index) == expected
    # The head's lookup, then per changeset that changed the file its parent's: 3 lookups, not 30.
    assert len(reads) <= 3
