"""``manage.py agentgit_bench engine``: every row runs, measures, and is checked against git.

The benchmark touches no database (its repositories are a MemoryStore or a DiskStore in a
temporary directory), so these tests need no ``django_db`` mark. One small size keeps them fast.
"""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from benchmarks import candidates, engine_bench
from benchmarks.engine_bench import GIT_OPERATIONS, OPERATIONS

EXPECTED_KEYS = {"operation", "files", "median_ms", "min_ms", "max_ms", "samples", "git_median_ms"}


def run_bench(*args: str) -> str:
    out = io.StringIO()
    call_command("agentgit_bench", "engine", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_every_row_is_measured_beside_git(backend, tmp_path):
    json_path, markdown_path = tmp_path / "bench.json", tmp_path / "bench.md"

    table = run_bench(
        "--sizes", "200", "--samples", "2", "--backend", backend,
        "--json", str(json_path), "--markdown", str(markdown_path),
    )  # fmt: skip

    report = json.loads(json_path.read_text())
    assert report["conditions"]["backend"] == backend
    assert report["conditions"]["sizes"] == [200]
    assert report["conditions"]["git_version"]
    assert [row["operation"] for row in report["rows"]] == list(OPERATIONS)
    for row in report["rows"]:
        assert set(row) == EXPECTED_KEYS
        assert row["files"] == 200
        assert row["samples"] >= 1
        assert 0 < row["min_ms"] <= row["median_ms"] <= row["max_ms"], row
        if row["operation"] in GIT_OPERATIONS:
            assert row["git_median_ms"] > 0, row
        else:
            assert row["git_median_ms"] is None, row
    stateful = {row["operation"]: row["samples"] for row in report["rows"]}
    assert stateful["integrate fast-forward"] == stateful["tree diff 1 file"] == 2
    for operation in OPERATIONS:
        assert operation in table
        assert f"| {operation} |" in markdown_path.read_text()


def test_a_row_that_does_not_measure_what_it_says_fails_the_command(monkeypatch, tmp_path):
    # detect_renames finding nothing must fail its row (not be timed as a fast no-op).
    monkeypatch.setattr(engine_bench, "detect_renames", lambda store, changes: [])
    json_path = tmp_path / "bench.json"

    with pytest.raises(CommandError) as failed:
        run_bench("--sizes", "200", "--samples", "1", "--json", str(json_path))

    message = str(failed.value)
    assert "detect_renames 1% exact at 200 files" in message
    assert "detect_renames 100 similar at 200 files" in message
    assert "tree diff" not in message  # the other rows still ran and passed
    assert not json_path.exists()


def test_sizes_below_the_minimum_are_refused():
    with pytest.raises(CommandError):
        run_bench("--sizes", "10")


def test_each_suite_takes_only_its_own_options():
    with pytest.raises(CommandError, match="--commits"):
        run_bench("--commits", "150")  # a history option given to the engine suite
    with pytest.raises(CommandError, match="--url needs --token"):
        call_command("agentgit_bench", "cycle", "--url", "http://127.0.0.1:9", stdout=io.StringIO())


def test_the_library_candidates_are_measured_on_every_operation(tmp_path):
    json_path = tmp_path / "candidates.json"
    out = io.StringIO()

    call_command(
        "agentgit_bench", "candidates", "--sizes", "200", "--samples", "1", "--json", str(json_path), stdout=out
    )

    cells = {(c["operation"], c["candidate"]) for c in json.loads(json_path.read_text())["rows"]}
    for operation in candidates.OPERATIONS:
        for candidate in ("dulwich", "pygit2"):
            assert (operation, candidate) in cells
    for operation in ("tree diff 1 file", "merge_trees 1 file each side", "blame 20 changesets"):
        assert {(operation, "ours"), (operation, "ours (cold)")} <= cells
    assert "| 200 files |" in out.getvalue()


# ---------------------------------------------------------------------------- history


def run_history(*args: str) -> str:
    out = io.StringIO()
    call_command("agentgit_bench", "history", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.mark.django_db
def test_history_reads_are_measured_with_and_without_the_derived_data(tmp_path):
    json_path = tmp_path / "history.json"
    table = run_history("--commits", "150", "--samples", "1", "--json", str(json_path))
    report = json.loads(json_path.read_text())
    operations = {row["operation"] for row in report["rows"]}
    assert any(operation.startswith("log --path d7/f7.txt") for operation in operations)
    assert {row["commits"] for row in report["rows"]} == {150}
    for row in report["rows"]:
        assert row["without_ms"] > 0 and row["with_ms"] > 0, row
        assert row["operation"] in table
    assert report["derive"]["150"]["changesets"] > 150  # merges and proposals besides the stream's own
    assert "derive pass at 150" in table
    from repos.models import Repository

    assert not Repository.objects.exists()  # the throwaway repository is gone


@pytest.mark.django_db
def test_a_path_index_that_changes_the_answer_fails_the_history_benchmark(monkeypatch):
    from repos.services import derived

    monkeypatch.setattr(derived.DatabasePathIndex, "changed", lambda self, key, below: ([], 0))
    with pytest.raises(CommandError, match="changed the answer"):
        run_history("--commits", "150", "--samples", "1")
