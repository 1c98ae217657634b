"""``agentgit_bench resolution`` in small: agents with planned conflicts against a real server
(tests/deployment.py) resolve each conflict in one call, and every change lands; and the same
agents without resolution (the load benchmark's peer scenario)."""

from __future__ import annotations

import io
import json

from django.core.management import call_command

from benchmarks.resolution_bench import SHARED, keep_both, run_landing
from tests.deployment import Deployment


def test_keep_both_takes_the_streams_lines_then_the_agents_without_the_base():
    marked = b"a\n<<<<<<< stream\nmine\n||||||| base\nold\n=======\nyours\n>>>>>>> proposal\nz\n"
    assert keep_both(marked) == "a\nmine\nyours\nz\n"


def test_every_change_lands_and_every_planned_line_is_kept(tmp_path):
    json_path = tmp_path / "landing.json"
    out = io.StringIO()

    call_command(
        "agentgit_bench", "resolution", "--agents", "4", "--changes", "5", "--json", str(json_path),
        stdout=out, stderr=io.StringIO(),
    )  # fmt: skip

    data = json.loads(json_path.read_text())
    assert data["landed"] == data["changes"] == 20
    assert data["planned_conflicts"] == 4 == data["shared_lines_kept"]
    assert data["resolved_in_calls"] >= 3  # all but the first planned change conflicted at least once
    assert data["failures"] == [] and data["lands_per_min"] > 0 and data["p99_ms"] > 0
    assert "20 of 20" in out.getvalue()


def test_agents_who_leave_their_conflicts_land_every_other_change_at_its_first_call():
    # The peer's landing scenario (issue 13's `landing`): a planned conflict is reported with
    # its path and left; only the first planned change to reach the contested line lands.
    with Deployment("embedded") as deployment:
        url = deployment.start_server(workers=2)
        token = deployment.create_token("landing", rate=100_000, burst=100_000)
        run = run_landing(url, token, agents=4, changes=5, resolve=False)

    planned = [c for c in run.changes if c.planned_conflict]
    unplanned = [c for c in run.changes if not c.planned_conflict]
    assert len(planned) == 4 and all(c.outcome in ("fast_forward", "merge") for c in unplanned)
    assert all(c.attempts == 1 for c in run.landed)
    assert sorted(c.outcome == "conflict" for c in planned) == [False, True, True, True]
    assert all(c.conflicts == [SHARED] for c in run.conflicted)
    assert run.shared_lines_kept == 1
    assert run.summary()["conflicted"] == 3 and len(run.landed) == 17
