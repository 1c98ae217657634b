"""Conflict packages and resolver rules in the engine: the versions of each side, the diff3
marker blob (git merge-file is the oracle), and union / ours / theirs rules."""

from __future__ import annotations

import subprocess

import pytest

from engine.changeset import Write, create_changeset
from engine.conflicts import LABELS, conflict_package, diff3_markers
from engine.integrate import Outcome, integrate
from engine.merge import Rule
from engine.objects import BLOB, MODE_EXECUTABLE, MODE_SYMLINK
from engine.store import MemoryStore

from .conftest import GIT_ENV, Builder, signature

TEXT = "".join(f"line {n}\n" for n in range(1, 11))


def git_merge_file(tmp_path, base: bytes, ours: bytes, theirs: bytes, *flags: str) -> bytes:
    """What ``git merge-file -p`` writes for the three versions, labelled as the package labels them."""
    for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
        (tmp_path / name).write_bytes(data)
    labels = [arg for label in LABELS for arg in ("-L", label)]
    result = subprocess.run(
        ["git", "merge-file", "-p", *flags, *labels, "ours", "base", "theirs"],
        cwd=tmp_path,
        capture_output=True,
        env=GIT_ENV,
    )
    assert result.returncode >= 0, result.stderr  # the number of conflicts, or an error (negative)
    return result.stdout


DIFF3_CASES = {
    "one line both ways": (TEXT, TEXT.replace("line 5", "ours"), TEXT.replace("line 5", "theirs")),
    "two regions": (
        TEXT,
        TEXT.replace("line 2", "o2").replace("line 8", "o8"),
        TEXT.replace("line 2", "t2").replace("line 8", "t8"),
    ),
    "conflict and clean change": (
        TEXT,
        TEXT.replace("line 2", "o2").replace("line 9", "o9"),
        TEXT.replace("line 2", "t2\nmore t2"),
    ),
    "both append": (TEXT, TEXT + "ours 1\nours 2\n", TEXT + "theirs\n"),
    "no final newline": ("a\nb\nc", "a\nb\nours", "a\nb\ntheirs"),
    "one side deletes lines": (TEXT, TEXT.replace("line 4\nline 5\n", ""), TEXT.replace("line 5", "theirs")),
    "empty base": ("", "ours\n", "theirs\n"),
}


@pytest.mark.parametrize("case", sorted(DIFF3_CASES))
def test_the_marker_blob_is_what_git_merge_file_diff3_writes(case, tmp_path):
    base, ours, theirs = (text.encode() for text in DIFF3_CASES[case])
    assert diff3_markers(base, ours, theirs) == git_merge_file(tmp_path, base, ours, theirs, "--diff3")


def _package(base_files, our_files, their_files, our_renames=None, their_renames=None, rules=()):
    store = MemoryStore()
    build = Builder(store)
    base = build.commit(base_files)
    ours = build.commit(our_files, parent=base, renames=our_renames)
    theirs = build.commit(their_files, parent=base, renames=their_renames)
    return store, conflict_package(store, ours, theirs, rules=rules)


def _sides(detail) -> dict:
    data = detail.as_dict()
    return {side: (data[side]["path"] if side in data else None) for side in ("base", "ours", "theirs")}


def test_a_content_conflict_has_three_sides_and_a_marker_blob(tmp_path):
    ours_text, theirs_text = TEXT.replace("line 5", "ours"), TEXT.replace("line 5", "theirs")
    store, (detail,) = _package({"f.txt": TEXT}, {"f.txt": ours_text}, {"f.txt": theirs_text})
    data = detail.as_dict()
    assert data["kind"] == "content" and _sides(detail) == {"base": "f.txt", "ours": "f.txt", "theirs": "f.txt"}
    assert [store.read_blob(data[side]["blob"]) for side in ("base", "ours", "theirs")] == [
        TEXT.encode(),
        ours_text.encode(),
        theirs_text.encode(),
    ]
    assert data["ours"]["mode"] == "100644"
    expected = git_merge_file(tmp_path, TEXT.encode(), ours_text.encode(), theirs_text.encode(), "--diff3")
    assert store.read_blob(data["marked"]) == expected
    assert b"||||||| base\nline 5\n=======" in expected


def test_an_add_add_conflict_has_no_base_and_marks_both_texts():
    store, (detail,) = _package({"x": "x\n"}, {"n.txt": "one\n"}, {"n.txt": "two\n"})
    assert detail.conflict.kind == "add/add"
    assert _sides(detail) == {"base": None, "ours": "n.txt", "theirs": "n.txt"}
    assert store.read_blob(detail.marked) == b"<<<<<<< stream\none\n||||||| base\n=======\ntwo\n>>>>>>> proposal\n"


def test_a_modify_delete_conflict_lacks_the_deleting_side():
    store, (detail,) = _package({"f.txt": TEXT}, {"f.txt": TEXT + "more\n"}, {"f.txt": None})
    assert detail.conflict.kind == "modify/delete" and detail.marked is None
    assert _sides(detail) == {"base": "f.txt", "ours": "f.txt", "theirs": None}
    assert store.read_blob(detail.conflict.ours.blob) == (TEXT + "more\n").encode()


def test_rename_rename_names_the_source_and_both_destinations():
    _store, details = _package({"f.txt": TEXT}, {}, {}, {"f.txt": "a.txt"}, {"f.txt": "b.txt"})
    assert {d.conflict.path for d in details} == {"f.txt", "a.txt", "b.txt"}
    for detail in details:
        assert detail.conflict.kind == "rename/rename"
        assert _sides(detail) == {"base": "f.txt", "ours": "a.txt", "theirs": "b.txt"}


def test_rename_delete_gives_the_source_and_the_renamed_side():
    _store, (detail,) = _package({"f.txt": TEXT}, {}, {"f.txt": None}, {"f.txt": "g.txt"})
    assert (detail.conflict.path, detail.conflict.kind, detail.conflict.old_path) == ("g.txt", "rename/delete", "f.txt")
    assert _sides(detail) == {"base": "f.txt", "ours": "g.txt", "theirs": None}


def test_a_binary_conflict_has_its_sides_and_no_markers():
    data = b"\x00\x01binary"
    store, (detail,) = _package({"b.bin": data}, {"b.bin": data + b"1"}, {"b.bin": data + b"2"})
    assert detail.conflict.kind == "binary" and detail.marked is None
    assert store.read_blob(detail.conflict.theirs.blob) == data + b"2"


def test_a_mode_conflict_gives_each_sides_mode():
    store = MemoryStore()
    build = Builder(store)
    base = build.commit({"f": "x\n"})
    x = store.add(BLOB, b"x\n")
    ours = create_changeset(store, base, [Write("f", x, MODE_EXECUTABLE)], message="m", author=signature(1))
    link = store.add(BLOB, b"target")
    theirs = create_changeset(store, base, [Write("f", link, MODE_SYMLINK)], message="m", author=signature(2))
    (detail,) = conflict_package(store, ours, theirs)
    data = detail.as_dict()
    assert data["kind"] == "mode"
    assert (data["base"]["mode"], data["ours"]["mode"], data["theirs"]["mode"]) == ("100644", "100755", "120000")


def test_a_file_directory_conflict_gives_the_file_and_the_directory():
    _store, (detail,) = _package({"x": "x\n"}, {"p": "file\n"}, {"p/inner.txt": "dir\n"})
    data = detail.as_dict()
    assert data["kind"] == "file/directory" and "base" not in data
    assert data["ours"]["mode"] == "100644" and data["theirs"]["mode"] == "040000"


def test_a_clean_merge_has_an_empty_package():
    _store, details = _package({"a": "a\n", "b": "b\n"}, {"a": "A\n"}, {"b": "B\n"})
    assert details == []


# --------------------------------------------------------------------------- resolver rules


def _integrate(rules, base_files, our_files, their_files):
    store = MemoryStore()
    build = Builder(store)
    base = build.commit(base_files)
    ours = build.commit(our_files, parent=base)
    theirs = build.commit(their_files, parent=base)
    return store, build, integrate(store, ours, theirs, committer=signature(9), rules=rules)


def test_a_union_rule_keeps_both_appends_as_git_merge_union_does(tmp_path):
    base, ours, theirs = "# Changes\n", "# Changes\n- agent one\n", "# Changes\n- agent two\n"
    store, build, result = _integrate(
        [Rule("CHANGELOG.md", "union")], {"CHANGELOG.md": base}, {"CHANGELOG.md": ours}, {"CHANGELOG.md": theirs}
    )
    assert result.outcome == Outcome.MERGE
    assert [r.as_dict() for r in result.resolved] == [{"path": "CHANGELOG.md", "rule": "union"}]
    expected = git_merge_file(tmp_path, base.encode(), ours.encode(), theirs.encode(), "--union")
    assert build.read(result.changeset, "CHANGELOG.md") == expected == b"# Changes\n- agent one\n- agent two\n"


@pytest.mark.parametrize(("rule", "winner"), [("ours", "stream"), ("theirs", "proposal")])
def test_ours_and_theirs_rules_take_one_side(rule, winner):
    files = {"stream": {"deps.lock": "a 2\n"}, "proposal": {"deps.lock": "a 3\n"}}
    _store, build, result = _integrate(
        [Rule("*.lock", rule)], {"deps.lock": "a 1\n"}, files["stream"], files["proposal"]
    )
    assert result.outcome == Outcome.MERGE
    assert build.read(result.changeset, "deps.lock") == files[winner]["deps.lock"].encode()


def test_a_rule_applies_only_to_the_paths_it_matches():
    rules = [Rule("docs/*.md", "union")]
    _store, _build, result = _integrate(
        rules,
        {"docs/a.md": "x\n", "b.md": "x\n"},
        {"docs/a.md": "o\n", "b.md": "o\n"},
        {"docs/a.md": "t\n", "b.md": "t\n"},
    )
    assert result.outcome == Outcome.CONFLICT
    assert [c.path for c in result.conflicts] == ["b.md"]
    assert [r.path for r in result.resolved] == ["docs/a.md"]


def test_rule_patterns_match_like_gitattributes():
    assert Rule("CHANGELOG.md", "union").matches("sub/dir/CHANGELOG.md")
    assert not Rule("docs/*.md", "union").matches("other/docs/a.md")
    assert Rule("/docs/*.md", "union").matches("docs/a.md")
