"""Rename detection from change lists: exact, by similarity, and not below the threshold."""

from __future__ import annotations

from engine.renames import detect_renames, diff_with_renames, similarity
from engine.trees import Added, Deleted, Modified, Renamed, diff_trees

LINES = "".join(f"line number {i} of a longer file\n" for i in range(20))


def _tree(build, commit):
    return build.store.read_commit(commit).tree


def test_an_exact_rename_is_one_renamed_entry(build):
    first = build.commit({"old/name.txt": LINES, "other.txt": "o\n"})
    second = build.commit(renames={"old/name.txt": "new/name.txt"}, parent=first)
    changes = diff_with_renames(build.store, _tree(build, first), _tree(build, second))
    assert [(c.status, c.old_path, c.path, c.similarity) for c in changes] == [
        ("renamed", "old/name.txt", "new/name.txt", 100)
    ]


def test_an_edited_rename_above_the_threshold_is_found_with_its_similarity(build):
    first = build.commit({"a.txt": LINES})
    edited = LINES.replace("line number 3 of", "LINE 3 OF")
    second = build.commit({"a.txt": None, "b.txt": edited}, parent=first)
    (change,) = diff_with_renames(build.store, _tree(build, first), _tree(build, second))
    assert change.status == "renamed" and change.old_path == "a.txt" and change.path == "b.txt"
    assert 90 <= change.similarity < 100


def test_a_rewrite_below_the_threshold_is_a_delete_and_an_add(build):
    first = build.commit({"a.txt": LINES})
    second = build.commit({"a.txt": None, "b.txt": "entirely\ndifferent\ncontent\n"}, parent=first)
    changes = diff_with_renames(build.store, _tree(build, first), _tree(build, second))
    assert sorted((c.status, c.path) for c in changes) == [("added", "b.txt"), ("deleted", "a.txt")]


def test_with_several_identical_sources_the_same_name_wins(build):
    first = build.commit({"x/config.yml": "same\n", "y/settings.yml": "same\n"})
    second = build.commit(renames={"x/config.yml": "z/config.yml", "y/settings.yml": "w/other.yml"}, parent=first)
    changes = diff_with_renames(build.store, _tree(build, first), _tree(build, second))
    assert {(c.old_path, c.path) for c in changes} == {
        ("x/config.yml", "z/config.yml"),
        ("y/settings.yml", "w/other.yml"),
    }


def test_many_similar_renames_pair_each_source_with_its_own_destination(build):
    files = {f"src/f{i}.txt": f"unique header {i}\n" + LINES for i in range(30)}
    first = build.commit(files)
    moved = {f"src/f{i}.txt": None for i in range(30)}
    moved.update({f"dst/g{i}.txt": f"unique header {i}\n" + LINES + f"appended {i}\n" for i in range(30)})
    second = build.commit(moved, parent=first)
    changes = detect_renames(build.store, diff_trees(build.store, _tree(build, first), _tree(build, second)))
    assert {(c.old_path, c.path) for c in changes} == {(f"src/f{i}.txt", f"dst/g{i}.txt") for i in range(30)}


def test_similarity_is_shared_bytes_over_the_larger_file():
    assert similarity(b"a\nb\nc\nd\n", b"a\nb\nc\nd\n") == 100
    assert similarity(b"a\nb\nc\nd\n", b"a\nb\nc\nX\n") == 75
    assert similarity(b"abc\n", b"xyz\n") == 0


def test_each_change_is_a_record_of_its_own_kind_with_only_its_fields(build):
    first = build.commit({"kept.txt": "one\n", "gone.txt": "bye\n", "moved.txt": LINES})
    second = build.commit(
        {"kept.txt": "two\n", "gone.txt": None, "new.txt": "hi\n", "moved.txt": None, "there.txt": LINES},
        parent=first,
    )
    changes = {c.path: c for c in diff_with_renames(build.store, _tree(build, first), _tree(build, second))}

    assert {path: type(c) for path, c in changes.items()} == {
        "gone.txt": Deleted,
        "kept.txt": Modified,
        "new.txt": Added,
        "there.txt": Renamed,
    }
    assert {path: c.status for path, c in changes.items()} == {
        "gone.txt": "deleted",
        "kept.txt": "modified",
        "new.txt": "added",
        "there.txt": "renamed",
    }
    assert changes["kept.txt"].old != changes["kept.txt"].new
    assert not hasattr(changes["new.txt"], "old") and not hasattr(changes["gone.txt"], "new")
    renamed = changes["there.txt"]
    assert (renamed.old_path, renamed.old, renamed.similarity) == ("moved.txt", renamed.new, 100)
