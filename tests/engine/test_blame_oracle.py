"""Blame against ``git blame --first-parent``: histories written by git itself (``git
fast-import``), every line of every file at the head compared with git's porcelain answer, with
and without a path index.

The histories hold what decides an attribution in git: edits at the top, middle and bottom;
repeated lines where diff algorithms disagree (git's Myers with the indent heuristic, and the
common tail git cuts off before diffing); whole-file renames (pure, edited, into a new
directory, chained, between several candidates, at git's similarity thresholds); deletes and
re-creations; merges (only the first parent counts); a path that was a directory, a submodule
or a symlink in the parent; empty files, missing final newlines, CRLF and binary content.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.history import blame
from engine.objects import ObjectId
from engine.store import DiskStore

from .conftest import git_blame_origins, run_git
from .test_oracle_history import path_indexes


@dataclass(frozen=True)
class Link:
    """A symlink entry."""

    target: str


@dataclass(frozen=True)
class Gitlink:
    """A submodule entry (a commit that is not in the repository)."""

    commit: str


@dataclass
class Commit:
    """A whole tree (path -> text, bytes, Link or Gitlink) and the indexes of its parents, first
    parent first (the first commit has none, every other one at least one)."""

    files: Mapping[str, object]
    parents: Sequence[int] = field(default_factory=list)


def fast_import(path: Path, commits: Sequence[Commit]) -> list[ObjectId]:
    """Write the commits with ``git fast-import`` into a new bare repository; ``main`` is the last."""
    run_git(path.parent, "init", "-q", "--bare", path.name)
    stream = bytearray()
    for number, commit in enumerate(commits, start=1):
        stream += b"commit refs/heads/main\nmark :%d\n" % number
        stream += b"committer Agent <agent@example.com> %d +0000\n" % (1_700_000_000 + number)
        message = b"commit %d" % number
        stream += b"data %d\n%s\n" % (len(message), message)
        if commit.parents:
            stream += b"from :%d\n" % (commit.parents[0] + 1)
            for parent in commit.parents[1:]:
                stream += b"merge :%d\n" % (parent + 1)
        stream += b"deleteall\n"
        for name, content in sorted(commit.files.items()):
            encoded = name.encode()
            if isinstance(content, Gitlink):
                stream += b"M 160000 %s %s\n" % (content.commit.encode(), encoded)
                continue
            if isinstance(content, Link):
                mode, data = b"120000", content.target.encode()
            else:
                mode, data = b"100644", content.encode() if isinstance(content, str) else content
            stream += b"M %s inline %s\ndata %d\n%s\n" % (mode, encoded, len(data), data)
    marks = path / "marks"
    run_git(path, "fast-import", "--quiet", f"--export-marks={marks}", input=bytes(stream))
    found = dict(line.split() for line in marks.read_text().splitlines())
    return [found[f":{number}"] for number in range(1, len(commits) + 1)]


def assert_blames_match_git(path: Path, commits: Sequence[Commit], *, at: Sequence[int] = (-1,)) -> None:
    """Every line of every file (not submodule) at the chosen commits blames as git blames it:
    the same changeset, and the same path in it."""
    ids = fast_import(path, commits)
    store = DiskStore(path)
    for number in at:
        files = [name for name, content in commits[number].files.items() if not isinstance(content, Gitlink)]
        for name in files:
            expected = git_blame_origins(path, ids[number], name, "--first-parent")
            for kind, index in [("no index", None), *path_indexes(store, ids[: number % len(ids) + 1])]:
                ours = [(line.changeset, line.path) for line in blame(store, ids[number], name, index=index)]
                assert ours == expected, (
                    name,
                    kind,
                    [(ids.index(oid), at) for oid, at in ours],
                    [(ids.index(oid), at) for oid, at in expected],
                )


def lines(*items: str | int) -> str:
    """``lines("a", 3)``: the line ``a`` and three numbered lines ``line 0`` .. ``line 2``."""
    out = []
    for item in items:
        if isinstance(item, int):
            out.extend(f"line {n}\n" for n in range(item))
        else:
            out.append(item + "\n")
    return "".join(out)


def text(words: int, seed: int) -> list[str]:
    """``words`` distinct, varied lines (so similarity scores are not dominated by repeats)."""
    rnd = random.Random(seed)
    return [f"{rnd.randrange(10**9)} {'x' * rnd.randrange(40)} {n}\n" for n in range(words)]


# ---------------------------------------------------------------------------- line matching


def test_edits_at_the_top_middle_and_bottom(tmp_path):
    history = [
        Commit({"f.txt": lines(20)}),
        Commit({"f.txt": lines("top", 20)}, [0]),
        Commit({"f.txt": lines("top", 20, "bottom")}, [1]),
        Commit({"f.txt": lines("top", 10).replace("line 5\n", "middle\n") + lines(20)[70:] + "bottom\n"}, [2]),
        Commit({"f.txt": lines("TOP", 10).replace("line 5\n", "middle\n") + lines(20)[70:]}, [3]),
    ]
    assert_blames_match_git(tmp_path / "r.git", history, at=(-1, -2, -3))


def test_repeated_lines_are_matched_as_git_matches_them(tmp_path):
    # Where Myers and patience disagree: braces and blank lines repeat, unique lines move.
    block = "if (x) {\n\tcall();\n}\n\n"
    history = [
        Commit({"c.c": "int a;\n" + block * 3 + "int b;\n" + block + "end\n", "repeat.txt": "x\n" * 600}),
        Commit(
            {
                "c.c": "int b;\n" + block * 2 + "int a;\n" + block * 3 + "new();\n" + block + "end\n",
                # 1 200 bytes of equal tail: git cuts a 1 KiB block before diffing, which moves
                # where an ambiguous insertion in a run of equal lines lands.
                "repeat.txt": "x\n" * 603,
            },
            [0],
        ),
        Commit(
            {"c.c": "int b;\n" + block + "}\n" + block + "int a;\n" + block * 2 + "end\n", "repeat.txt": "x\n" * 40},
            [1],
        ),
    ]
    assert_blames_match_git(tmp_path / "r.git", history, at=(-1, -2))


def test_the_indent_heuristic_places_a_repeated_block(tmp_path):
    # A second, identical "if" block: plain Myers (and patience) call the lower copy new;
    # git's indent heuristic, on by default in git blame, calls the upper one new.
    before = "def run():\n    setup()\n\n    if x:\n        y()\n    done()\n"
    after = before.replace("    done()", "    if x:\n        y()\n    done()")
    history = [Commit({"m.py": before}), Commit({"m.py": after}, [0]), Commit({"m.py": after + "\n# end\n"}, [1])]
    assert_blames_match_git(tmp_path / "r.git", history)


# ---------------------------------------------------------------------------- renames


def test_whole_file_renames_are_followed_as_git_follows_them(tmp_path):
    body = text(30, 1)
    history = [
        Commit({"a.txt": "".join(body), "keep.txt": "k\n"}),
        # Pure rename, into a new directory.
        Commit({"src/a.txt": "".join(body), "keep.txt": "k\n"}, [0]),
        Commit({"src/a.txt": "".join(body[:10] + ["edit\n"] + body[11:]), "keep.txt": "k\n"}, [1]),
        # Renamed with edits (about 80 % similar) and a new name.
        Commit({"lib/b.txt": "".join(["new top\n"] + body[:10] + ["edit\n"] + body[11:25]), "keep.txt": "k\n"}, [2]),
        Commit(
            {
                "lib/b.txt": "".join(["new top\n"] + body[:10] + ["edit\n"] + body[11:25] + ["tail\n"]),
                "keep.txt": "k\n",
            },
            [3],
        ),
    ]
    assert_blames_match_git(tmp_path / "r.git", history, at=(-1, 3, 1))


def test_a_rename_is_taken_from_the_candidate_git_takes(tmp_path):
    body, other, new = text(40, 2), text(4, 3), text(4, 4)
    twin = "".join(body[:20])
    near = "".join(body)
    moved = "".join(other + body[4:])  # written anew in commit 1: its lines are commit 1's
    # 90 % like moved, 80 % like near: git takes near, the one deleted file with the same name
    # that is at least 75 % similar, before it compares the rest.
    renamed = "".join(other + body[4:36] + new)
    history = [
        Commit({"y/f.txt": twin, "old/near.txt": near, "p/dup.txt": near, "q/dup.txt": "".join(body[:30])}),
        Commit(
            {
                "y/f.txt": twin,
                "old/near.txt": near,
                "x/g.txt": twin,
                "other/o.txt": moved,
                "p/dup.txt": near,
                "q/dup.txt": "".join(body[:30] + new),
            },
            [0],
        ),
        # Two identical deleted files: git prefers the one with the same name (not the first).
        Commit(
            {"new/f.txt": twin, "new/near.txt": renamed, "p/dup.txt": near, "q/dup.txt": "".join(body[:30] + new)}, [1]
        ),
        # Two deleted files share the name: git takes the most similar file, whatever its name.
        Commit({"new/f.txt": twin, "new/near.txt": renamed, "dup.txt": "".join(body[:30] + new[:2])}, [2]),
        # Just over git's 50 %, with another name.
        Commit({"new/f.txt": twin, "last.txt": renamed[: len(renamed) // 2 + 40] + "".join(text(15, 5))}, [3]),
    ]
    assert_blames_match_git(tmp_path / "r.git", history, at=(-1, -2, -3))


def test_a_tie_between_equally_similar_files_goes_as_in_git(tmp_path):
    # b.txt and x.txt are the same 90 % match: git's four candidate slots put x.txt, the later
    # one, ahead (it takes the slot of a.txt, the first of the worst), so its history counts.
    body = text(20, 9)
    same = "".join(body)
    history = [
        Commit({"a.txt": "a\n", "b.txt": same, "c.txt": "c\n", "d.txt": "d\n"}),
        Commit({"a.txt": "a\n", "b.txt": same, "c.txt": "c\n", "d.txt": "d\n", "x.txt": same}, [0]),
        Commit({"new/n.txt": "".join(body[:10] + ["changed\n"] + body[11:])}, [1]),
    ]
    assert_blames_match_git(tmp_path / "r.git", history)


def test_chained_renames_and_a_re_creation(tmp_path):
    body = text(20, 5)
    history = [
        Commit({"one.txt": "".join(body)}),
        Commit({"two.txt": "".join(body) + "more\n"}, [0]),
        Commit({"dir/three.txt": "".join(body[2:]) + "more\n"}, [1]),
        # Deleted, then created again at the same path with other content.
        Commit({"other.txt": "o\n"}, [2]),
        Commit({"dir/three.txt": "fresh\n" + "".join(body[2:5]), "other.txt": "o\n"}, [3]),
    ]
    assert_blames_match_git(tmp_path / "r.git", history, at=(-1, 2))


def test_a_path_that_was_a_directory_a_submodule_or_a_symlink(tmp_path):
    body = "".join(text(10, 6))
    submodule = "1234567890abcdef1234567890abcdef12345678"
    history = [
        Commit({"d/inner.txt": body, "s": Gitlink(submodule), "l": Link("d/inner.txt")}),
        # The directory becomes a file holding its old file's lines (git finds the rename);
        # the submodule and the symlink become files (a type change: git stops there).
        Commit({"d": body + "end\n", "s": body, "l": "d/inner.txt\nmore\n"}, [0]),
        Commit({"d": body + "end\n", "s": body + "s\n", "l": "d/inner.txt\nmore\n", "link": Link("d")}, [1]),
        Commit({"d": body + "end\n", "s": body + "s\n", "l": "d/inner.txt\nmore\n", "link": Link("s")}, [2]),
    ]
    assert_blames_match_git(tmp_path / "r.git", history)


def test_empty_files_final_newlines_crlf_and_binary(tmp_path):
    body = text(12, 7)
    crlf = "".join(line.replace("\n", "\r\n") for line in body)
    # Short CRLF lines with 40 % of them changed: 60 % alike byte for byte, but git's score
    # skips a CR before a LF in text (45 %), so git sees no rename; in binary content it
    # skips nothing, and sees one.
    windows = "".join(f"{n:02d}\r\n" for n in range(30))
    windows_edited = "".join(f"{n:02d}\r\n" if n >= 12 else f"{chr(97 + n) * 2}\r\n" for n in range(30))
    binary_windows = "\0\r\n" + "".join(f"{n:02d}\r\n" for n in range(30, 60))
    binary_edited = "\0\r\n" + "".join(
        f"{n:02d}\r\n" if n >= 42 else f"{chr(65 + n - 30) * 2}\r\n" for n in range(30, 60)
    )
    binary = b"\x00\x01head\n" + "".join(body).encode()
    history = [
        Commit(
            {
                "empty": "",
                "nl.txt": "a\nb",
                "lf.txt": "".join(body),
                "bin": binary,
                "win.txt": windows,
                "w.bin": binary_windows,
            }
        ),
        Commit(
            {
                "empty": "",
                "nl.txt": "a\nb\nc",
                "lf.txt": "".join(body),
                "bin": binary + b"\x00tail\n",
                "win.txt": windows,
                "w.bin": binary_windows,
            },
            [0],
        ),
        # Renamed and converted to CRLF, renamed with edits (binary: no CR is skipped).
        Commit(
            {
                "e2": "",
                "nl.txt": "a\nb\nc\n",
                "crlf.txt": crlf,
                "bin2": binary[:-20] + b"\x00tail\n",
                "w2.txt": windows_edited,
                "w2.bin": binary_edited,
            },
            [1],
        ),
        Commit(
            {
                "e2": "now\n",
                "nl.txt": "a\nB\nc\n",
                "crlf.txt": "top\r\n" + crlf,
                "bin2": b"\x02" + binary,
                "w2.txt": windows_edited,
                "w2.bin": binary_edited,
            },
            [2],
        ),
    ]
    assert_blames_match_git(tmp_path / "r.git", history, at=(-1, -2))


def test_only_the_first_parent_of_a_merge_counts(tmp_path):
    body = text(10, 8)
    history = [
        Commit({"f.txt": "".join(body)}),
        Commit({"f.txt": "".join(body) + "side\n", "side/moved.txt": "".join(body[:8])}, [0]),
        Commit({"f.txt": "main\n" + "".join(body), "g.txt": "".join(body[:8])}, [0]),
        # The merge takes both sides; the side's lines are the merge's for --first-parent.
        Commit(
            {
                "f.txt": "main\n" + "".join(body) + "side\n",
                "g.txt": "".join(body[:8]),
                "side/moved.txt": "".join(body[:8]),
            },
            [2, 1],
        ),
        Commit(
            {
                "f.txt": "main\n" + "".join(body) + "side\nafter\n",
                "h.txt": "".join(body[:8]) + "h\n",
                "side/moved.txt": "".join(body[:8]),
            },
            [3],
        ),
    ]
    assert_blames_match_git(tmp_path / "r.git", history)


# ---------------------------------------------------------------------------- random histories

ORACLE = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Few distinct lines, so that files repeat lines and resemble each other: the matching and the
#: rename scores get close calls.
WORDS = ["{\n", "}\n", "\n", "return x;\n", "alpha\n", "beta\n", "gamma\n", "delta\n", "a much longer line " * 4 + "\n"]


@st.composite
def histories(draw) -> list[Commit]:
    """Up to three files edited, renamed, deleted and re-created over a few commits, a merge now and then."""
    names = ["a.txt", "b.txt", "d/a.txt", "d/c.txt", "e/f/a.txt"]
    files: dict[str, str] = {}
    for name in draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True)):
        files[name] = "".join(draw(st.lists(st.sampled_from(WORDS), max_size=12)))
    history = [Commit(dict(files))]
    for number in range(1, draw(st.integers(2, 7))):
        files = dict(history[-1].files)  # type: ignore[arg-type]
        for _ in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(["edit", "edit", "rename", "delete", "create"]))
            existing = sorted(files)
            if kind == "create" or not existing:
                files[draw(st.sampled_from(names))] = "".join(draw(st.lists(st.sampled_from(WORDS), max_size=12)))
                continue
            name = draw(st.sampled_from(existing))
            if kind == "delete":
                del files[name]
            elif kind == "rename":
                target = draw(st.sampled_from(names))
                content = files.pop(name)
                if draw(st.booleans()):
                    content += draw(st.sampled_from(WORDS))
                files[target] = content
            else:
                current = files[name].splitlines(keepends=True)
                for _ in range(draw(st.integers(1, 3))):
                    at = draw(st.integers(0, len(current)))
                    if current and draw(st.booleans()):
                        del current[min(at, len(current) - 1)]
                    else:
                        current.insert(at, draw(st.sampled_from(WORDS)))
                files[name] = "".join(current)
        parents = [number - 1]
        if number >= 2 and draw(st.integers(0, 3)) == 0:
            parents.append(draw(st.integers(0, number - 2)))
        history.append(Commit(files, parents))
    return history


@contextmanager
def fresh_path() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as directory:
        yield Path(directory) / "r.git"


@ORACLE
@given(history=histories())
def test_blame_equals_git_on_random_histories(history):
    with fresh_path() as path:
        assert_blames_match_git(path, history)
