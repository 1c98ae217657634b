"""The landing benchmark suite (``agentgit_bench landing``) against the real server."""

from __future__ import annotations

import io
import json

from django.core.management import call_command


def test_the_landing_suite_counts_four_requests_against_one(server, tmp_path):
    out = tmp_path / "landing.json"
    call_command(
        "agentgit_bench", "landing", "--landings", "2", "--url", server.url, "--token", server.token,
        "--json", str(out), stdout=io.StringIO(), stderr=io.StringIO(),
    )  # fmt: skip

    rows = {row["way"]: row for row in json.loads(out.read_text())["rows"]}
    separate, one = rows["separate (4 requests)"], rows["one call (land)"]
    assert separate["requests"] == 4 and one["requests"] == 1
    assert one["bytes_sent"] < separate["bytes_sent"] and one["bytes_received"] < separate["bytes_received"]
