"""The diff endpoint's patch (repos.services.reads.unified_patch), with git as the oracle: git
applies it and gets the new content; where the hunks are unambiguous they are git's, byte for byte."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from repos.services.reads import unified_patch

PAIRS = {
    "an edit in the middle": (b"".join(b"line %d\n" % n for n in range(30)), None),
    "the last line loses its newline": (b"a\nb\nc\n", b"a\nb\nc"),
    "the last line gains its newline": (b"a\nb\nc", b"a\nb\nc\n"),
    "both without a newline, last line edited": (b"a\nb\nold", b"a\nb\nnew"),
    "a new file": (b"", b"one\ntwo\nthree\n"),
    "a deleted file": (b"one\ntwo\n", b""),
    "a one-line file edited": (b"x\n", b"y\nz\n"),
    "CRLF lines": (b"a\r\nb\r\nc\r\n", b"a\r\nB\r\nc\r\n"),
    "lines moved": (b"".join(b"f%d\n" % n for n in range(12)), b"".join(b"f%d\n" % n for n in (6, 7, 8, 0, 1, 2, 3, 4, 5, 9, 10, 11))),
}  # fmt: skip
LONG = [b"line %d\n" % n for n in range(100)]
REPEATED = [b"}\n" if n % 3 else b"x = %d\n" % n for n in range(60)]  # many equal lines


def _edit(lines: list[bytes], changes: dict[int, bytes | None]) -> bytes:
    return b"".join(changes.get(n, line) or b"" for n, line in enumerate(lines))


# Edits placed around the common lines the patch leaves out before matching: at either end,
# at both, two edits whose hunks merge (six equal lines between) or stay apart (seven).
PAIRS.update(
    {
        "a long file, the first line edited": (b"".join(LONG), _edit(LONG, {0: b"first\n"})),
        "a long file, the last line edited": (b"".join(LONG), _edit(LONG, {99: b"last\n"})),
        "a long file, both ends edited": (b"".join(LONG), _edit(LONG, {1: b"one\n", 98: b"ninety-eight\n"})),
        "two edits, hunks merged": (b"".join(LONG), _edit(LONG, {40: b"a\n", 47: b"b\n"})),
        "two edits, hunks apart": (b"".join(LONG), _edit(LONG, {40: b"a\n", 48: b"b\n"})),
        "a line removed near the end": (b"".join(LONG), _edit(LONG, {97: None})),
        "repeated lines, one edited": (b"".join(REPEATED), _edit(REPEATED, {31: b"};\n"})),
        "repeated lines, one removed": (b"".join(REPEATED), _edit(REPEATED, {2: None})),
        "a long file loses its last newline": (b"".join(LONG), b"".join(LONG)[:-1]),
        "a line gains a prefix its next line ends with": (b"a\nX\nz\n", b"a\nbX\nz\n"),
        "a line loses a prefix": (b"a\nbX\nz\n", b"a\nX\nz\n"),
        "a line inserted before a common ending": (b"a\nend\n", b"a\nmiddle\nend\n"),
    }
)


def _git(cwd: Path, *args: str, input: bytes | None = None) -> bytes:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "HOME": os.fspath(cwd)})
    return subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True, check=True, env=env).stdout


@pytest.mark.parametrize("name", PAIRS)
def test_git_applies_the_patch_and_gets_the_new_content(tmp_path, name):
    old, new = PAIRS[name]
    if new is None:
        new = old.replace(b"line 14\n", b"line fourteen\nline 14.5\n").replace(b"line 2\n", b"")
    _git(tmp_path, "init", "-q")
    if old:
        (tmp_path / "f.txt").write_bytes(old)
    patch = unified_patch(old, new, "a/f.txt" if old else "/dev/null", "b/f.txt" if new else "/dev/null")
    header = "diff --git a/f.txt b/f.txt\n" + ("new file mode 100644\n" if not old else "")
    header += "deleted file mode 100644\n" if not new else ""
    _git(tmp_path, "apply", "-", input=(header + patch).encode())
    assert (tmp_path / "f.txt").read_bytes() == new if new else not (tmp_path / "f.txt").exists()


@pytest.mark.parametrize(
    "name",
    [
        "a new file",
        "a deleted file",
        "the last line loses its newline",
        "a long file, the first line edited",
        "a long file, the last line edited",
        "a long file, both ends edited",
        "two edits, hunks merged",
        "two edits, hunks apart",
        "a line removed near the end",
        "a long file loses its last newline",
    ],
)
def test_unambiguous_hunks_are_git_s_own(tmp_path, name):
    old, new = PAIRS[name]
    (tmp_path / "old").write_bytes(old)
    (tmp_path / "new").write_bytes(new)
    done = subprocess.run(["git", "diff", "--no-index", "old", "new"], cwd=tmp_path, capture_output=True)
    # git names the enclosing "function" after a hunk's header (its -p heuristic); ours does not.
    git_hunks = re.sub(r"(?m)^(@@ [^@]* @@).*$", r"\1", "@@" + done.stdout.decode().partition("\n@@")[2])
    ours = unified_patch(old, new, "a/f", "b/f")
    assert "@@" + ours.partition("\n@@")[2] == git_hunks


def test_identical_contents_have_no_patch():
    assert unified_patch(b"a\n", b"a\n", "a/f", "b/f") == ""
