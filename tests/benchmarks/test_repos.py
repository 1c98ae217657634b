"""``agentgit_bench repos`` in small: deployments of 2 and of 5 repositories, each filled through
the services (every repository a git repository with its landed changeset), then make serve's
start steps: after the first start every repository's mirror is marked rebuilt through its last
event, a start with nothing changed maintains no repository and one after landings in 2
repositories maintains exactly those 2. Never a timing."""

from __future__ import annotations

import io
import json

from django.core.management import call_command

from benchmarks.repos_bench import FIRST_START, START_STEPS


def test_a_start_costs_the_repositories_that_changed(tmp_path):
    json_path = tmp_path / "repos.json"
    out, progress = io.StringIO(), io.StringIO()

    call_command(
        "agentgit_bench", "repos", "--counts", "2,5", "--samples", "1", "--idle-s", "1", "--changed", "2",
        "--server-workers", "1", "--json", str(json_path), stdout=out, stderr=progress,
    )  # fmt: skip

    data = json.loads(json_path.read_text())
    assert [run["repositories"] for run in data["runs"]] == [2, 5]
    for run in data["runs"]:
        checks = run["checks"]
        assert checks["repositories"] == checks["landed"] == run["repositories"]
        assert checks["unmirrored_after_first_start"] == checks["unmirrored_after_start"] == 0
        assert checks["maintained_nothing_changed"] == 0
        assert checks["maintained_after_changes"] == 2
    figures = {(row["figure"], row["repositories"]): row for row in data["rows"]}
    for phase in (FIRST_START, "start, nothing changed", "start, 2 changed"):
        for step in [argv[0] for argv in START_STEPS] + ["start, in all"]:
            assert figures[(f"{phase}: {step} (ms)", 2)]["vs_smallest"] == 1.0
            assert figures[(f"{phase}: {step} (ms)", 5)]["vs_smallest"] is not None
    assert figures[("start, nothing changed: start, in all (ms)", 5)]["goal"] == 2.0
    assert figures[(f"{FIRST_START}: start, in all (ms)", 5)]["goal"] is None
    assert ("idle server CPU (ms per minute)", 5) in figures
    assert "sample 1 of 1: the idle servers" in progress.getvalue()
    assert "start, nothing changed: agentgit_recover (ms)" in out.getvalue()
