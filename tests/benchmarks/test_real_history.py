"""``agentgit_bench history --source`` in small: a generated git history with renames, imported
into a real server (tests/deployment.py), every row measured beside git and cgit and checked
against git's answers. Never a timing: what is asserted is that each row ran and agreed."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from benchmarks import real_history
from benchmarks.real_history import Git, long_lived_paths, parse_blame, parse_ls_tree, parse_raw

pytestmark = pytest.mark.skipif(not os.access(real_history.CGIT, os.X_OK), reason="`make cgit` installs cgit")


def _history(path: Path) -> Path:
    """A bare repository of 40 commits on ``trunk`` (the streams are named after the branch, not
    "main"): a file edited throughout, a rename, a deleted file, a submodule and a symlink."""
    work = path / "work"
    env = real_history._env(path)
    subprocess.run(["git", "init", "-q", "-b", "trunk", os.fspath(work)], check=True, env=env)

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", os.fspath(work), *args], check=True, env=env, capture_output=True)

    (work / "src").mkdir()
    (work / "src" / "kept.txt").write_text("".join(f"kept line {n}\n" for n in range(20)))
    (work / "src" / "gone.txt").write_text("soon gone\n")
    for step in range(40):
        (work / "CHANGES.txt").write_text("".join(f"change {n}\n" for n in range(step + 1)))
        (work / "src" / f"f{step % 5}.py").write_text(f"value = {step}\n" * (step % 7 + 3))
        if step == 20:
            git("mv", "src/kept.txt", "src/moved.txt")
        if step == 30:
            git("rm", "-q", "src/gone.txt")
        if step == 35:  # a symlink at the root
            (work / "link").symlink_to("CHANGES.txt")
        git("add", "-A")
        if step == 39:  # a submodule: a commit of another repository (in the index only)
            git("update-index", "--add", "--cacheinfo", f"160000,{'5' * 40},vendored")
        git("commit", "-q", "-m", f"step {step}")
    bare = path / "source.git"
    subprocess.run(["git", "clone", "-q", "--bare", os.fspath(work), os.fspath(bare)], check=True, env=env)
    return bare


def test_every_row_runs_and_agrees_with_git(tmp_path):
    source = _history(tmp_path)
    json_path = tmp_path / "real.json"
    out = io.StringIO()

    call_command(
        "agentgit_bench", "history", "--source", os.fspath(source), "--samples", "1",
        "--data-dir", os.fspath(tmp_path / "data"), "--json", os.fspath(json_path), stdout=out, stderr=io.StringIO(),
    )  # fmt: skip

    data = json.loads(json_path.read_text())
    assert data["commits"] == 40
    figures = {row["figure"]: row for row in data["rows"]}
    assert "log --path CHANGES.txt, first page" in figures  # the file every commit changes
    for name in ("log, first page (50)", "blame CHANGES.txt", "tree (the root)", "file CHANGES.txt",
                 "web page: log", "web page: blame CHANGES.txt", "clone (git clone --bare over HTTP)",
                 "one-file landing on the imported stream", "import (agentgit_import)"):  # fmt: skip
        assert name in figures, sorted(figures)
    for row in data["rows"]:
        assert row["failure"] == "" and row["ours_ms"] > 0 and row["theirs_ms"] > 0, row
        assert row["figure"] in out.getvalue()
    assert figures["blame CHANGES.txt"]["detail"] == "agrees with git on 40 of 40 lines"
    assert "1 renames" in figures["diff across 39 changesets (changes and patch)"]["detail"]
    assert data["imported"]["peak_rss"] > 0 and not data["imported"]["reused"]

    # Again on the same data directory: the import is reused, not repeated.
    call_command(
        "agentgit_bench", "history", "--source", os.fspath(source), "--samples", "1",
        "--data-dir", os.fspath(tmp_path / "data"), "--json", os.fspath(json_path), stdout=io.StringIO(),
        stderr=io.StringIO(),
    )  # fmt: skip
    assert json.loads(json_path.read_text())["imported"]["reused"]


def test_an_answer_that_differs_from_git_fails_the_command(tmp_path, monkeypatch):
    source = _history(tmp_path)
    # git's tree as the check reads it, one entry short: our (right) answer no longer equals it.
    monkeypatch.setattr(real_history, "parse_ls_tree", lambda listing: parse_ls_tree(listing)[1:])
    with pytest.raises(CommandError, match="tree .the root.: the tree's entries differ from git's"):
        call_command(
            "agentgit_bench", "history", "--source", os.fspath(source), "--samples", "1",
            stdout=io.StringIO(), stderr=io.StringIO(),
        )  # fmt: skip


def test_git_s_outputs_are_read_as_our_answers(tmp_path):
    source = _history(tmp_path)
    git = Git(source, tmp_path)
    tip = git.text("rev-parse", "trunk").strip()
    assert long_lived_paths(git, tip, 1) == ["CHANGES.txt"]
    changes = parse_raw(git.run("diff", "--raw", "-z", "-M", f"{tip}~25", tip))
    assert ("renamed", "src/moved.txt", "src/kept.txt") in changes
    assert ("deleted", "src/gone.txt", None) in changes
    assert ("modified", "CHANGES.txt", None) in changes
    entries = parse_ls_tree(git.run("ls-tree", "-z", tip))
    assert [(e["name"], e["type"], e["mode"]) for e in entries] == [
        ("CHANGES.txt", "file", "100644"),
        ("link", "file", "120000"),
        ("src", "dir", "040000"),
        ("vendored", "submodule", "160000"),
    ]
    assert len(parse_blame(git.run("blame", "--porcelain", tip, "--", "CHANGES.txt"))) == 40
