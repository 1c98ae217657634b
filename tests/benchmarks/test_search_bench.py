"""``manage.py agentgit_bench search``: every row measured beside git grep (and rg when installed),
and an index that loses a match fails the run."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from engine.search_index import SearchIndex

SMALL = ["--files", "300", "--landings", "6", "--streams", "2", "--patterns", "12"]


def test_every_goal_has_a_row_and_the_answers_are_exact(tmp_path):
    out = io.StringIO()
    call_command(
        "agentgit_bench", "search", *SMALL, "--json", str(tmp_path / "s.json"), stdout=out, stderr=io.StringIO()
    )

    report = json.loads((tmp_path / "s.json").read_text())
    assert [row["what"] for row in report["rows"]] == [
        "selective literal",
        "selective regex (half with (?i))",
        "term in most files, limit=100",
        "no usable trigram",
        "mode=count over everything",
    ]
    assert all(row["git_grep_ms"] > 0 and row["ours_p50_ms"] > 0 for row in report["rows"])
    assert report["differences"] == [] and report["figures"]["exactness_checks"] == 12 * 3  # two streams and the import
    assert "0 differences" in out.getvalue() and "3-file landing indexed" in out.getvalue()


def test_an_index_that_loses_matches_fails_the_run(monkeypatch):
    real = SearchIndex.matching
    monkeypatch.setattr(SearchIndex, "matching", lambda self, query: set(list(real(self, query))[1:]))

    with pytest.raises(CommandError, match="index and scan differ"):
        call_command("agentgit_bench", "search", *SMALL, stdout=io.StringIO(), stderr=io.StringIO())
