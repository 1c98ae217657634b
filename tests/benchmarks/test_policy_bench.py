"""``agentgit_bench policy`` at a small size against a real server: both repositories land every
change, the guarded one with its decision (its owner's approval counted), and the table and JSON
report the server CPU of each and the difference. A timing is never asserted."""

from __future__ import annotations

import io
import json

from django.core.management import call_command


def test_the_policy_benchmark_lands_on_both_repositories_and_reports_the_judgment(tmp_path):
    # 15 landings: enough CPU for several of /proc's 10 ms ticks (five cheap ones could total none).
    out, json_path = io.StringIO(), tmp_path / "policy.json"
    call_command(
        "agentgit_bench", "policy", "--files", "300", "--owners-lines", "20", "--landings", "15",
        "--json", str(json_path), stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    data = json.loads(json_path.read_text())
    assert (data["files"], data["owners_lines"], data["landings"]) == (300, 20, 15)
    assert [row["repository"] for row in data["rows"]] == ["no policy", "approvals and code owners"]
    assert all(row["server_cpu_ms_per_landing"] > 0 for row in data["rows"])
    assert "the judgment adds" in out.getvalue()
