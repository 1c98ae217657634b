"""``agentgit_bench cost``: a small run against a real embedded deployment, its invariants held.

Every landing must land (the suite fails otherwise), and what it counts must be sane: fsyncs of
the objects and of the database for each landing, statements by the dozen, CPU spent. Never a
time: those are the command's figures, not the test's.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from benchmarks import cost_bench
from benchmarks.suites import SUITES

needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed (make strace)")


def test_strace_lines_are_counted_by_call_and_file_with_the_run_s_names_folded():
    data = "/tmp/agentgit-embedded-x1"
    text = "\n".join(
        [
            f"101 fdatasync(7<{data}/agentgit.sqlite3-wal>) = 0",
            f"[pid 102] fsync(9<{data}/repos/cost-17.git/objects/pack/tmp_pack_a1b2c3>) = 0",
            f"102 fsync(9<{data}/repos/cost-17.git/objects/pack/tmp_pack_zz9>) = 0",
            f"102 fsync(10<{data}/repos/cost-17.git/objects/pack> <unfinished ...>",
            "102 <... fsync resumed>) = 0",
            f"103 fsync(4<{data}/repos/cost-17.git/objects/ab/tmp_obj_x1y2>) = 0",
            "104 fdatasync(5</var/lib/postgresql/15/main/pg_wal/000000010000000000000042>) = 0",
            "105 read(3<x>, ...) = 4",
        ]
    )
    assert cost_bench.parse_strace(text, data) == Counter(
        {
            "fdatasync DATA/agentgit.sqlite3-wal": 1,
            "fsync DATA/repos/REPO.git/objects/pack/tmp_pack_*": 2,
            "fsync DATA/repos/REPO.git/objects/pack": 1,
            "fsync DATA/repos/REPO.git/objects/XX/tmp_obj_*": 1,
            "fdatasync /var/lib/postgresql/N/main/pg_wal/N": 1,
        }
    )


@needs_strace
def test_a_small_run_lands_everything_and_counts_what_it_must():
    # Enough landings for several of /proc's 10 ms CPU ticks: three cheap ones could total none.
    options = {"modes": ["embedded"], "landings": 12, "agents": 2, "changes": 3, "server_workers": 1}
    results = SUITES["cost"].run(options, lambda text: None)

    [row] = results.data["rows"]
    sequential, scenario = row["sequential"], row["scenario"]
    # A one-file landing is durable with its database commit (its pack journaled in it,
    # docs/adr/0023): the WAL synced at least once per landing, and every fsync attributed to
    # the file it synced.
    files = sequential["fsyncs_by_file"]
    assert files.get("fdatasync DATA/agentgit.sqlite3-wal", 0) >= 1
    assert sequential["fsyncs"] == pytest.approx(sum(files.values()))
    assert 1 <= sequential["fsyncs"] <= 20
    assert 5 <= sequential["statements"] <= 60
    assert sequential["cpu_s"]["server"] > 0 and results.data["probe"]["cpu_loop_ms"] > 0
    assert scenario["changes"] == 6
    assert scenario["landed"] + scenario["conflicted"] + scenario["refused_retryably"] == 6 and scenario["landed"]
    assert scenario["fsyncs"] >= 2
    assert "statements" in results.table and "embedded" in results.table


@pytest.mark.parametrize("scenario", [False, True], ids=["sequential", "scenario"])
def test_two_checkouts_side_by_side_each_land_every_batch_and_count_their_cpu(scenario):
    # This checkout against itself: two deployments, the landings (or the scenario's batches of
    # three agents with two changes each) alternated between them.
    here = Path(__file__).resolve().parents[2]
    options = {
        "modes": ["embedded"],
        "server_workers": 1,
        "against": [here],
        "rounds": 2,
        "batch": 2 if scenario else 6,
    }
    results = SUITES["cost"].run({**options, "scenario": scenario, "agents": 3}, lambda text: None)

    [run] = results.data["side_by_side"]
    assert [row["checkout"] for row in run["checkouts"]] == [str(Path.cwd()), str(here)]
    assert run["agents"] == (3 if scenario else 0)
    for row in run["checkouts"]:
        # Lander asserts each landing; a scenario's batch, that its changes were integrated.
        assert len(row["batches_s"]) == 2 and row["cpu_s"]["server"] > 0
    assert "vs first" in results.table and results.data["side_by_side"][0]["probe"]["cpu_loop_ms"] > 0
    assert ("3 agents x 2 changes" in results.table) == scenario


def test_a_checkout_that_is_not_agentgit_is_refused(tmp_path):
    from benchmarks.suites import BenchmarkFailed

    options = {"modes": ["embedded"], "server_workers": 1, "against": [tmp_path], "rounds": 1, "batch": 1}
    with pytest.raises(BenchmarkFailed, match="not an AgentGit checkout"):
        SUITES["cost"].run(options, lambda text: None)
