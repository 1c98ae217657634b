"""What the end-to-end tests share: real processes, a real HTTP client, and the oracles.

The process machinery — a fresh data directory, a fresh PostgreSQL database
(``agentgit_e2e_<random>``, dropped afterwards), a Redis database index of its own (8–15, held by
a lock file, flushed), ``manage.py migrate`` and ``agentgit_credential create`` in subprocesses,
``uvicorn`` and ``celery worker`` processes in process groups of their own with bounded readiness
waits and a kill on teardown — lives in :mod:`tests.deployment`, which the cycle benchmark
(``manage.py agentgit_bench cycle``) uses too, and the closed-loop writers are the cycle
benchmark's own (:mod:`benchmarks.cycle`). This module re-exports both and adds what only the
end-to-end tests need: git as an oracle, direct reads of the deployment's database.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

from benchmarks.cycle import LoadResult, prepare_repository, run_writers, writer_files
from tests.deployment import ApiClient, ApiFailure, Deployment, DeploymentError, Process

__all__ = [  # re-exported for the tests
    "ApiClient", "ApiFailure", "Deployment", "DeploymentError", "LoadResult", "Process",
    "prepare_repository", "run_writers", "writer_files",
    "LANDING_TIMEOUT_S", "TEXT", "blob_id", "git", "fsck", "rev_list", "blame_first_parent",
    "sql", "operations_of", "events_of", "queued_operations", "stream_held",
]  # fmt: skip

#: A generous bound on waiting for an integration to land: a loaded 2-core CI machine is slow, but
#: nothing may hang forever (process start-ups have their own bounds in tests.deployment).
LANDING_TIMEOUT_S = 60

TEXT = "".join(f"line {i}\n" for i in range(1, 11))


def blob_id(data: bytes) -> str:
    """git's id of a blob with these bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


# ------------------------------------------------------------------------------ git, the oracle


def git(repository_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-c", f"safe.directory={repository_dir}", *args],
        cwd=repository_dir, capture_output=True, text=True, timeout=120, check=check,
    )  # fmt: skip


def fsck(repository_dir: Path, *heads: str) -> str:
    """``git fsck --strict`` of everything reachable from ``heads``: every object the heads name
    exists and is well formed. Returns git's output; raises AssertionError with it on failure."""
    done = git(repository_dir, "fsck", "--strict", "--no-dangling", "--no-progress", *heads, check=False)
    output = done.stdout + done.stderr
    problems = [
        line for line in output.splitlines()
        if line.strip() and not line.startswith("notice:")  # "HEAD points to an unborn branch"
    ]  # fmt: skip
    if done.returncode != 0 or problems:
        raise AssertionError(f"git fsck --strict failed ({done.returncode}) in {repository_dir}:\n{output}")
    return output


def rev_list(repository_dir: Path, head: str) -> list[str]:
    """Every commit reachable from ``head``, by git."""
    return git(repository_dir, "rev-list", head).stdout.split()


def blame_first_parent(repository_dir: Path, head: str, path: str) -> list[str]:
    """The commit ``git blame --first-parent`` gives each line of ``path`` at ``head``."""
    out = git(repository_dir, "blame", "--first-parent", "--porcelain", head, "--", path).stdout
    owners = {int(match[2]): match[1] for match in re.finditer(r"^([0-9a-f]{40}) \d+ (\d+)", out, re.M)}
    return [owners[number] for number in range(1, len(owners) + 1)]


# ------------------------------------------------------------------------------ the database


def sql(deployment: Deployment, query: str, params: tuple = ()) -> list[tuple]:
    """Rows of a query on the deployment's own database (PostgreSQL, or the SQLite file read-only)."""
    if deployment.database is not None:
        return deployment.database.query(query, params)
    path = deployment.data_dir / "agentgit.sqlite3"
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return connection.execute(query.replace("%s", "?"), params).fetchall()
    finally:
        connection.close()


def operations_of(deployment: Deployment, proposal_id: int) -> list[tuple[str, dict | str | None]]:
    """``(state, outcome)`` of every operation of a proposal, oldest first."""
    return sql(
        deployment, "SELECT state, outcome FROM repos_operation WHERE proposal_id = %s ORDER BY id", (proposal_id,)
    )


def events_of(deployment: Deployment, proposal_id: int, kind: str) -> int:
    """How many events of ``kind`` name the proposal."""
    rows = sql(deployment, "SELECT payload FROM repos_event WHERE kind = %s", (kind,))
    payloads = [row[0] if isinstance(row[0], dict) else json.loads(row[0]) for row in rows]
    return sum(1 for payload in payloads if payload.get("proposal") == proposal_id)


def derived_changesets(deployment: Deployment, repository: str) -> set[str]:
    """The changesets of a repository that have derived data (graph node and path index)."""
    rows = sql(
        deployment,
        "SELECT n.commit_id FROM repos_commitnode n JOIN repos_repository r ON r.id = n.repository_id WHERE r.name = %s",
        (repository,),
    )
    return {row[0] for row in rows}


def queued_operations(deployment: Deployment) -> int:
    return sql(deployment, "SELECT count(*) FROM repos_operation WHERE state = 'queued'")[0][0]


@contextlib.contextmanager
def stream_held(deployment: Deployment, repository: str, stream: str) -> Iterator[None]:
    """Another transaction holds the stream's row (PostgreSQL), as a worker landing it does: an
    integrate or one-call landing request queues its operation for the workers instead of landing
    it in its own transaction (docs/adr/0026, 0029), and a worker lands it once this ends."""
    assert deployment.database is not None, "the production deployment's database"
    with deployment.database.connect() as lander, lander.transaction():
        lander.execute(
            "SELECT 1 FROM repos_stream WHERE name = %s AND repository_id ="
            " (SELECT id FROM repos_repository WHERE name = %s) FOR NO KEY UPDATE",
            (stream, repository),
        )
        yield
