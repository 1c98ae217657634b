"""Fixtures of the git tests: the REST API drivers of tests/api, and git as the oracle."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

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


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: end-to-end tests against real server and worker processes")


REAL_SERVER_MODULES = ("test_smart_http", "test_push_safety", "test_import", "test_policy_matrix")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.stem in REAL_SERVER_MODULES and "/git/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="module")
def server():
    """A real embedded server (SQLite, Celery eager, one uvicorn process) for a module, with a
    token of every scope."""
    from tests.deployment import Deployment

    with Deployment("embedded") as deployment:
        deployment.start_server(workers=1)
        deployment.token = deployment.create_token("agent", rate=100_000, burst=100_000)
        yield deployment


class Remote:
    """A real server's repository as git sees it: its URL with a token, and git run against it."""

    def __init__(self, deployment, repo: str, token: str, work: Path) -> None:
        self.deployment, self.repo, self.token, self.work = deployment, repo, token, work

    def url(self, token: str | None = None, repo: str | None = None) -> str:
        host = self.deployment.url.removeprefix("http://")
        return f"http://agent:{token or self.token}@{host}/git/{repo or self.repo}.git"

    def clone(self, name: str, *args: str, token: str | None = None, check: bool = True):
        return git(self.work, "clone", *args, self.url(token), name, check=check)

    def checkout(self, name: str) -> Path:
        path = self.work / name
        git(path, "config", "user.name", "Pusher")
        git(path, "config", "user.email", "pusher@example.com")
        return path


def commit_file(clone: Path, path: str, text: str, message: str | None = None) -> str:
    """Write a file in a clone and commit it; the new commit's id."""
    target = clone / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    git(clone, "add", path)
    git(clone, "commit", "-q", "-m", message or f"write {path}")
    return git(clone, "rev-parse", "HEAD").stdout.strip()
