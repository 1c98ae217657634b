"""The diff endpoint's patch (repos.services.reads.unified_patch), with git as the oracle: git
applies it and gets the new content; where the hunks are unambiguous they are git's, byte for byte."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from engine.objects import split_lines
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
    patch = unified_patch(split_lines(old), split_lines(new), "a/f.txt" if old else "/dev/null",
                          "b/f.txt" if new else "/dev/null")  # fmt: skip
    header = "diff --git a/f.txt b/f.txt\n" + ("new file mode 100644\n" if not old else "")
    header += "deleted file mode 100644\n" if not new else ""
    _git(tmp_path, "apply", "-", input=(header + patch).encode())
    assert (tmp_path / "f.txt").read_bytes() == new if new else not (tmp_path / "f.txt").exists()


@pytest.mark.parametrize("name", ["a new file", "a deleted file", "the last line loses its newline"])
def test_unambiguous_hunks_are_git_s_own(tmp_path, name):
    old, new = PAIRS[name]
    (tmp_path / "old").write_bytes(old)
    (tmp_path / "new").write_bytes(new)
    done = subprocess.run(["git", "diff", "--no-index", "old", "new"], cwd=tmp_path, capture_output=True)
    git_hunks = done.stdout.decode().partition("\n@@")[2]
    ours = unified_patch(split_lines(old), split_lines(new), "a/f", "b/f")
    assert ours.partition("\n@@")[2] == git_hunks


def test_identical_contents_have_no_patch():
    assert unified_patch([b"a\n"], [b"a\n"], "a/f", "b/f") == ""
