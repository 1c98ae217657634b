"""Code search is exact: engine.search against ``git grep -E`` and against a brute-force RE2 scan,
on a generated history at five revisions, with the index whole, half built and empty.

The corpus holds what trips searches up: CRLF lines, Unicode (case folding beyond ASCII: KELVIN
SIGN, long s, sharp s), binary files, bytes that are not UTF-8, a file over 1 MiB (never
indexed), an empty file, a last line without its newline, a symbolic link and an executable.

git grep is the oracle where its syntax (POSIX ERE, glibc, C.UTF-8) and RE2's agree: literals,
classes, alternation, repetition, anchors and ``-i``/``-w``/``-F`` on ASCII. The brute-force
RE2 scan (a few lines, independent of engine.search) is the oracle for the rest: ``(?i)``,
Unicode, ``.``, ``\\d``, ``\\b``.
"""

from __future__ import annotations

import os
import random
import subprocess

import pytest
import re2  # type: ignore[import-untyped]

from engine.changeset import Delete, Write, create_changeset
from engine.errors import InvalidInput
from engine.objects import BLOB, MODE_EXECUTABLE, MODE_SYMLINK
from engine.search import COUNT, FILES, FileList, Matcher, PathFilter, Position, file_changes, search
from engine.search_index import SearchIndex
from engine.store import DiskStore

from .conftest import signature

WORDS = [
    "alpha", "beta", "gamma", "delta", "foo", "Foo", "FOO", "bar_baz", "main", "print", "return",
    "def", "class", "import", "x1", "y22", "z_3", "error", "Error", "handle_error",
    "straße", "STRASSE", "\u212aelvin", "kelvin", "\u017fign", "sign", "café", "CAFÉ", "日本語", "Ωmega",
    "(a)", "[b]", "{c}", "a.b", "a*b", "x+y", "q?", "p|q", "^caret", "dollar$", "back\\slash",
]  # fmt: skip
SEED = 20261204


def _line(rng: random.Random) -> bytes:
    words = [rng.choice(WORDS) for _ in range(rng.randint(0, 7))]
    text = (" " if rng.random() < 0.8 else "\t").join(words).encode()
    if rng.random() < 0.04:
        text += bytes([0xFF, 0xC3])  # not UTF-8
    return text + (b"\r\n" if rng.random() < 0.15 else b"\n")


def _content(rng: random.Random) -> bytes:
    kind = rng.random()
    data = b"".join(_line(rng) for _ in range(rng.randint(0, 40)))
    if kind < 0.06:
        return data[: len(data) // 2] + b"\x00" + data[len(data) // 2 :]  # binary
    if kind < 0.1 and data.endswith(b"\n"):
        return data[:-1]  # no newline at the end
    return data


def build_history(store: DiskStore) -> list[str]:
    """Five revisions of a ~60-file tree; answers their commit ids."""
    rng = random.Random(SEED)
    paths = [
        f"{rng.choice(['src', 'lib', 'docs', 'src/deep/er'])}/file{n}.{rng.choice(['py', 'txt', 'md'])}"
        for n in range(60)
    ]
    big = b"".join(b"filler line %d of the big file %s\n" % (n, b"-" * 200) for n in range(5_000)) + b"needle_in_big\n"
    assert len(big) > 1 << 20
    ops = [Write(path, store.add(BLOB, _content(rng))) for path in dict.fromkeys(paths)]
    ops += [
        Write("big/huge.log", store.add(BLOB, big)),
        Write("empty.txt", store.add(BLOB, b"")),
        Write("link", store.add(BLOB, b"alpha beta target"), MODE_SYMLINK),
        Write("run.sh", store.add(BLOB, b"#!/bin/sh\necho alpha\n"), MODE_EXECUTABLE),
    ]
    commits = [create_changeset(store, None, ops, message="one", author=signature(1))]
    for step in range(4):
        live = sorted(set(paths))
        change = [Write(path, store.add(BLOB, _content(rng))) for path in rng.sample(live, 8)]
        change += [Delete(path) for path in rng.sample(sorted(set(live) - {op.path for op in change}), 2)]
        change += [Write(f"new/{step}/added{n}.py", store.add(BLOB, _content(rng))) for n in range(3)]
        for op in change:
            if isinstance(op, Delete):
                paths = [p for p in paths if p != op.path]
        commits.append(create_changeset(store, commits[-1], change, message=f"step {step}", author=signature(step + 2)))
    return commits


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    root = tmp_path_factory.mktemp("search")
    store = DiskStore(root / "repo.git")
    commits = build_history(store)
    trees = [store.read_commit(commit).tree for commit in commits]
    lists = [FileList.of_tree(store, tree) for tree in trees]
    blobs = sorted({blob for files in lists for blob in files.blobs})
    indexes = {}
    for state, share in (("whole", 1.0), ("half", 0.5), ("empty", 0.0)):
        index = SearchIndex(str(root / f"{state}.sqlite3"))
        index.add((blob, store.read_blob(blob.hex())) for blob in blobs[: int(len(blobs) * share)])
        indexes[state] = index
    return store, root / "repo.git", trees, lists, indexes


def ours(history, revision: int, matcher: Matcher, state: str = "whole", **options) -> list[tuple]:
    store, _git_dir, _trees, lists, indexes = history
    result = search(
        lists[revision], matcher, lambda b: store.read_blob(b.hex()), indexes[state], limit=10**6, **options
    )
    assert not result.truncated
    out: list[tuple] = []
    for hit in result.files:
        if hit.binary:
            out.append((hit.path, "binary"))
        else:
            out += [(hit.path, line.line, line.column, line.text) for line in hit.lines]
    return out


def git_grep(git_dir, tree: str, pattern: str, *flags: str) -> list[tuple]:
    done = subprocess.run(
        ["git", f"--git-dir={git_dir}", "grep", "-n", "--column", "-E", *flags, "-e", pattern, tree],
        capture_output=True,
        env={**os.environ, "LC_ALL": "C.UTF-8"},
    )
    assert done.returncode in (0, 1), done.stderr
    out: list[tuple] = []
    for raw in done.stdout.split(b"\n"):
        if not raw:
            continue
        if raw.startswith(b"Binary file "):
            out.append((raw[len(b"Binary file ") + 41 : -len(b" matches")].decode(), "binary"))
            continue
        path, line, column, text = raw[41:].split(b":", 3)
        out.append((path.decode(), int(line), int(column), text))
    return out


def brute_force(history, revision: int, pattern: str, ignore_case: bool = False) -> list[tuple]:
    """Every regular file's lines, each searched by RE2 alone."""
    store, git_dir, trees, _lists, _indexes = history
    options = re2.Options()
    options.case_sensitive = not ignore_case
    compiled = re2.compile(pattern.encode(), options)
    listing = subprocess.run(
        ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "-z", trees[revision]], capture_output=True, check=True
    ).stdout
    out: list[tuple] = []
    for entry in listing.split(b"\x00"):
        if not entry:
            continue
        meta, path = entry.split(b"\t", 1)
        mode, _kind, oid = meta.split()
        if mode not in (b"100644", b"100755"):
            continue
        data = store.read_blob(oid.decode())
        lines = data.split(b"\n") if data else []
        if data.endswith(b"\n"):
            lines.pop()
        hits = [(n, found.start() + 1, line) for n, line in enumerate(lines, 1) if (found := compiled.search(line))]
        if hits and b"\x00" in data[:8000]:
            out.append((path.decode(), "binary"))
        else:
            out += [(path.decode(), n, column, line) for n, column, line in hits]
    return out


def common_patterns(count: int, seed: int) -> list[str]:
    """Patterns in the syntax git's ERE and RE2 share (no '.', no negated class: they read NUL
    and bytes that are not UTF-8 differently)."""
    rng = random.Random(seed)
    ascii_words = [w for w in WORDS if w.isascii()]
    out = []
    for _ in range(count):
        word = rng.choice(ascii_words)
        cut = rng.randint(1, max(1, len(word) - 1))
        escaped = re2.escape(word).decode() if isinstance(re2.escape(word), bytes) else re2.escape(word)
        choice = rng.randrange(9)
        if choice == 0:
            out.append(escaped)
        elif choice == 1:
            out.append(re2.escape(word[:cut]) + "[a-z_]+")
        elif choice == 2:
            out.append("^" + escaped)
        elif choice == 3:
            out.append(escaped + "$")
        elif choice == 4:
            out.append(f"({re2.escape(word)}|{re2.escape(rng.choice(ascii_words))})")
        elif choice == 5:
            out.append(re2.escape(word[:cut]) + "[0-9]{1,2}")
        elif choice == 6:
            out.append(f"{re2.escape(word[:cut])}(_[a-z]+)?")
        elif choice == 7:
            out.append("[A-Z][a-z]+")
        else:
            out.append(f"{re2.escape(word)} +{re2.escape(rng.choice(ascii_words))}")
    return list(dict.fromkeys(out))


@pytest.mark.parametrize("revision", range(5))
def test_equal_to_git_grep(history, revision):
    _store, git_dir, trees, _lists, _indexes = history
    differences = []
    for number, pattern in enumerate(common_patterns(50, SEED + revision)):
        for flags, options in (((), {}), (("-i",), {"ignore_case": True}), (("-w",), {"word": True})):
            if flags == ("-i",) and (set(pattern.lower()) & {"k", "s"} or "[" in pattern):
                continue  # RE2 folds k to KELVIN SIGN and s to LONG S, glibc does not
            expected = git_grep(git_dir, trees[revision], pattern, *flags)
            for state in ("whole", "half", "empty") if number % 4 == 0 else ("half",):
                got = ours(history, revision, Matcher(pattern, **options), state)
                if got != expected:
                    differences.append((pattern, flags, state, got[:3], expected[:3]))
    assert differences == []


@pytest.mark.parametrize("literal", ["a.b", "x+y", "(a)", "p|q", "back\\slash", "dollar$", "^caret", "[b]"])
def test_fixed_strings_equal_git_grep_f(history, literal):
    _store, git_dir, trees, _lists, _indexes = history
    for revision in (0, 4):
        for flags, ignore_case in (("-F",), False), (("-F", "-i"), True):
            expected = git_grep(git_dir, trees[revision], literal, *flags)
            assert ours(history, revision, Matcher(literal, fixed=True, ignore_case=ignore_case)) == expected
            assert expected or literal == "back\\slash"


RE2_ONLY = [
    "(?i)straße", "(?i)kelvin", "(?i)\u212aELVIN", "(?i)SIGN", "(?i)café", "日本", "Ω[a-z]+", "a.b", "a\\.b",
    "\\bfoo\\b", "\\d{2}", "^$", "^", "x*", "\\w+_\\w+", "(?i)^error", "[^ ]+\\(", "\\xff", "\r$", "(?s).", "needle_in_big",
    "(?i)Foo|BAR", "[[:upper:]]{3}", "\\pL+ß", "(?U)a+", "\\Qa*b\\E", "\\x{212a}", "foo\\z", "\\Afoo",
    "(?-m)^alpha", "(?i)ſign", "é", "(?i)É",
]  # fmt: skip


@pytest.mark.parametrize("pattern", RE2_ONLY)
def test_equal_to_a_brute_force_re2_scan(history, pattern):
    for revision in (0, 2, 4):
        expected = brute_force(history, revision, pattern)
        for state in ("whole", "half", "empty"):
            assert ours(history, revision, Matcher(pattern), state) == expected, (revision, state)


def test_generated_patterns_equal_a_brute_force_re2_scan(history):
    rng = random.Random(SEED)
    pieces = ["foo", "(?i)foo", "ß", "(?i)ss", "é", ".", "\\w", "[a-c]", "[^a]", "\\d", "\\s", "^", "$", "x?", "_", "|"]
    differences = []
    for number in range(80):
        pattern = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 4)))
        try:
            matcher = Matcher(pattern)
        except InvalidInput:
            continue
        revision = number % 5
        expected = brute_force(history, revision, pattern)
        if ours(history, revision, matcher, rng.choice(["whole", "half", "empty"])) != expected:
            differences.append(pattern)
    assert differences == []


def test_files_and_count_modes_agree_with_git_grep(history):
    _store, git_dir, trees, lists, indexes = history
    store = history[0]
    for pattern in ("alpha", "(foo|bar_baz)", "^def", "filler"):
        expected = subprocess.run(
            ["git", f"--git-dir={git_dir}", "grep", "-c", "-E", "-e", pattern, trees[4]], capture_output=True
        ).stdout.decode()
        counts = [(line.split(":")[1], int(line.split(":")[2])) for line in expected.splitlines()]
        read = lambda b: store.read_blob(b.hex())  # noqa: E731
        files = search(lists[4], Matcher(pattern), read, indexes["half"], mode=FILES, limit=10**6)
        assert [(hit.path, hit.count) for hit in files.files] == counts
        total = search(lists[4], Matcher(pattern), read, indexes["whole"], mode=COUNT)
        assert total.count == sum(count for _path, count in counts)


def test_path_globs_agree_with_git_pathspecs(history):
    _store, git_dir, trees, _lists, _indexes = history
    for include, exclude in (
        (["src"], []),
        (["*.py"], []),
        (["src/*.md", "docs"], []),
        ([], ["*.txt"]),
        (["src/deep"], ["*.py"]),
    ):
        specs = list(include) + [f":(exclude){spec}" for spec in exclude]
        done = subprocess.run(
            ["git", f"--git-dir={git_dir}", "grep", "-l", "-E", "-e", "a", trees[3], "--", *specs], capture_output=True
        )
        expected = [line.split(":", 1)[1] for line in done.stdout.decode().splitlines()]
        got = sorted(
            {hit[0] for hit in ours(history, 3, Matcher("a"), paths=PathFilter(tuple(include), tuple(exclude)))}
        )
        assert got == sorted(expected), (include, exclude)


def test_pages_and_deadlines_resume_without_gap_or_repeat(history):
    store, _git_dir, _trees, lists, indexes = history
    read = lambda b: store.read_blob(b.hex())  # noqa: E731
    matcher = Matcher("a")
    whole = search(lists[2], matcher, read, indexes["half"], limit=10**6).files
    expected = [(hit.path, line.line) for hit in whole for line in hit.lines] + [(h.path, 0) for h in whole if h.binary]
    for limit in (1, 7, 50):
        got, start = [], Position()
        while True:
            page = search(lists[2], matcher, read, indexes["half"], limit=limit, start=start)
            got += [(hit.path, line.line) for hit in page.files for line in hit.lines]
            got += [(hit.path, 0) for hit in page.files if hit.binary]
            if not page.truncated:
                break
            start = page.resume
        assert sorted(got) == sorted(expected)
    ticks = iter(range(10**6))
    timed = search(lists[2], matcher, read, indexes["half"], limit=10**6, deadline=5, clock=lambda: next(ticks))
    assert timed.truncated and timed.timed_out and timed.resume is not None
    rest = search(lists[2], matcher, read, indexes["half"], limit=10**6, start=timed.resume)
    assert [h.path for h in timed.files] + [h.path for h in rest.files] == [h.path for h in whole]


def test_a_file_list_derived_along_the_changes_equals_the_walk(history):
    store, _git_dir, trees, lists, _indexes = history
    for old, new in ((0, 1), (1, 4), (4, 0)):
        derived = lists[old].changed(trees[new], file_changes(store, trees[old], trees[new]))
        assert (derived.paths, derived.blobs) == (lists[new].paths, lists[new].blobs)


def test_the_index_saves_and_loads_file_lists(history):
    _store, _git_dir, _trees, lists, indexes = history
    indexes["whole"].save_list(lists[3])
    loaded = indexes["whole"].load_list(lists[3].tree)
    assert loaded is not None and (loaded.paths, loaded.blobs) == (lists[3].paths, lists[3].blobs)
