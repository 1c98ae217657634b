"""Fixtures of the git tests: the REST API drivers of tests/api, and git as the oracle."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.api.conftest import ALL_BUT_ADMIN, Api, _own_repos_dir, admin, api, client_for, client_with  # noqa: F401 (fixtures' helpers)  # noqa: F401 (fixtures)


def git(cwd: Path, *args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real git binary, in ``cwd``, with no user or system configuration."""
    import os

    environment = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    environment.update({"GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd), "GIT_TERMINAL_PROMPT": "0"})
    environment.update(env or {})
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=environment)
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


def fsck(git_dir: Path) -> str:
    """``git fsck --strict`` over every ref: clean, or AssertionError with git's output."""
    done = git(git_dir, "fsck", "--strict", "--no-progress", check=False)
    output = done.stdout + done.stderr
    problems = [line for line in output.splitlines() if line.strip() and not line.startswith(("notice:", "dangling"))]
    assert done.returncode == 0 and not problems, f"git fsck --strict failed in {git_dir}:\n{output}"
    return output
