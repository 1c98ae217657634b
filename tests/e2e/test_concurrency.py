"""Many writers at once: everything lands, nothing is aborted, nothing is lost.

The embedded default (SQLite, Celery eager, one ``uvicorn`` process) against 16 client threads,
each with its own connection pool, 20 cycles each, all on ``main``. A cycle: read the head of
``main``, upload the writer's two files (its own paths), create a changeset on that head, open a
proposal, integrate it (a merge when the head moved meanwhile — with 16 writers, nearly always).
The driver is the cycle benchmark's (benchmarks/cycle.py), run for a number of cycles
instead of a duration.

Then: every cycle was answered ``fast_forward`` or ``merge`` (no ``aborted``, no error); every
proposal's changeset is in the history of the final head, by the API's log and by
``git rev-list``; every writer's files at the head are those of its last cycle; every operation
is done; the objects pass ``git fsck --strict``.

The same on the production mode, smaller: ``uvicorn --workers 2`` on PostgreSQL, two Celery
worker processes on Redis, writers on one stream and then writers on a stream each (landings of
different streams of one repository run in parallel there, and contend for its rows); and no
worker logged an error (a deadlock between the landing transaction and a proposal's insert was
found this way).
"""

from __future__ import annotations

import io
import json
import re
import time

import pytest
from django.core.management import call_command

from .support import (
    ApiClient,
    Deployment,
    LoadResult,
    fsck,
    prepare_repository,
    rev_list,
    run_writers,
    sql,
    writer_files,
)


def land_concurrently(deployment: Deployment, repo: str, scenario: str, writers: int, cycles: int) -> LoadResult:
    with ApiClient(deployment.url, deployment.token) as client:
        prepare_repository(client, repo, writers, scenario)
    started = time.monotonic()
    # stop_on_error: the first failure stops every writer (the test fails on it anyway), so a
    # broken server costs one request timeout, not one per remaining cycle.
    result = run_writers(
        deployment.url, deployment.token, repo, writers=writers, scenario=scenario, cycles=cycles, stop_on_error=True
    )
    print(f"{deployment.mode}/{scenario}: {len(result.cycles)} cycles in {time.monotonic() - started:.1f} s "
          f"({result.per_second():.1f}/s): {result.outcomes()}")  # fmt: skip
    return result


def check_everything_landed(deployment: Deployment, repo: str, result: LoadResult, writers: int, cycles: int) -> None:
    summary = f"{result.scenario}: {result.outcomes()}"
    failed = "\n".join(f"writer {c.writer} cycle {c.index}: {c.error}" for c in result.failed[:10])
    assert not result.failed, f"{summary}\n{failed}"
    assert len(result.cycles) == writers * cycles, summary
    expected = {"merge", "fast_forward"} if result.scenario == "stream" else {"fast_forward"}
    assert set(result.outcomes()) <= expected, summary

    with ApiClient(deployment.url, deployment.token) as client:
        streams = ["main"] if result.scenario == "stream" else [f"w{w:02d}" for w in range(writers)]
        for stream in streams:
            head = client.head(repo, stream)
            mine = [c for c in result.cycles if result.scenario == "stream" or f"w{c.writer:02d}" == stream]
            history = set(client.history(repo, head))
            missing = [c for c in mine if c.changeset not in history]
            assert not missing, f"{len(missing)} landed changesets are not in the history of {stream} at {head}"
            assert {c.changeset for c in mine} <= set(rev_list(deployment.repository_dir(repo), head))  # git agrees
            for writer in {c.writer for c in mine}:
                for path, text in writer_files(writer, cycles - 1).items():
                    assert client.file(repo, head, path) == text.encode(), (stream, writer, path)
            fsck(deployment.repository_dir(repo), head)

    states = sql(
        deployment,
        "SELECT o.state, count(*) FROM repos_operation o JOIN repos_repository r ON r.id = o.repository_id "
        "WHERE r.name = %s GROUP BY o.state",
        (repo,),
    )
    assert dict(states) == {"done": writers * cycles + 1}, states  # + the base changeset


def test_sixteen_writers_on_one_stream_all_land_embedded(embedded):
    result = land_concurrently(embedded, "busy", "stream", writers=16, cycles=20)
    check_everything_landed(embedded, "busy", result, writers=16, cycles=20)


@pytest.fixture(scope="module")
def production_pool():
    """PostgreSQL, Redis, ``uvicorn --workers 2`` and two Celery worker processes."""
    with Deployment("production") as deployment:
        deployment.start_server(workers=2)
        deployment.workers = [deployment.start_worker(), deployment.start_worker()]
        deployment.token = deployment.create_token("agent", rate=100_000, burst=100_000)
        yield deployment


@pytest.mark.parametrize("scenario, writers, cycles", [("stream", 8, 8), ("streams", 8, 4)])
def test_concurrent_writers_all_land_on_the_worker_pool(production_pool, scenario, writers, cycles):
    repo = f"busy-{scenario}"
    result = land_concurrently(production_pool, repo, scenario, writers, cycles)
    check_everything_landed(production_pool, repo, result, writers, cycles)
    for worker in production_pool.workers:
        assert not re.search(r"ERROR|Traceback|deadlock", worker.log()), worker.log_tail()


def test_the_cycle_benchmark_command_drives_a_running_server(embedded, tmp_path):
    """``manage.py agentgit_bench cycle --url``: both scenarios, a table and the JSON report."""
    out, report_path = io.StringIO(), tmp_path / "cycle.json"
    call_command(
        "agentgit_bench", "cycle", "--url", embedded.url, "--token", embedded.token,
        "--writers", "2", "--duration", "1", "--json", str(report_path), stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    report = json.loads(report_path.read_text())
    assert [row["scenario"] for row in report["rows"]] == ["streams", "stream"]
    for row in report["rows"]:
        assert row["cycles"] >= 1 and row["failures"] == 0, row
        assert set(row["latency_ms"]) == {"head", "upload", "changeset", "propose", "integrate", "cycle"}
        assert row["latency_ms"]["cycle"]["p50"] > 0
    assert "cycles/s" in out.getvalue() and "streams" in out.getvalue()


def test_databases_left_by_a_killed_run_are_dropped_by_the_next_one():
    from tests.deployment import PostgresDatabase

    dead_pid = 2**22 + 12345  # beyond Linux's default pid_max: no such process
    orphan = f"agentgit_e2e_{dead_pid}_0123456789ab"
    first = PostgresDatabase()
    try:
        with first.connect() as conn:
            conn.execute(f'CREATE DATABASE "{orphan}"')
        second = PostgresDatabase()
        second.drop()
        names = {row[0] for row in first.query("SELECT datname FROM pg_database")}
        assert orphan not in names
        assert first.name in names  # a live run's database is left alone
    finally:
        first.drop()
