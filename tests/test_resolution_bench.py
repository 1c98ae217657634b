"""``agentgit_bench resolution`` in small: agents with planned conflicts against a real server
(tests/deployment.py) resolve each conflict in one call, and every change lands."""

from __future__ import annotations

import io
import json

from django.core.management import call_command

from benchmarks.resolution_bench import keep_both


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
