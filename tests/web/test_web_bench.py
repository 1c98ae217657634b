"""``agentgit_bench web`` on a small repository: every page answers, and the query counts of the
small and the big repository are compared (a page whose count grows fails the command)."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from repos.models import Repository

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_web_benchmark_measures_every_page_and_leaves_nothing_behind(settings, tmp_path, capsys):
    settings.AGENTGIT = {**settings.AGENTGIT, "REPOS_DIR": tmp_path / "repos"}
    out = tmp_path / "web.json"
    call_command(
        "agentgit_bench", "web", "--files", "2000", "--changesets", "300", "--samples", "2", "--json", str(out)
    )
    table = capsys.readouterr().out
    assert "blame (2,000 lines)" in table and "diff (500 files)" in table
    assert "the same on both repositories for every page" in table
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 14 and all(row["queries"] > 0 and row["p50_ms"] > 0 for row in rows)
    assert not Repository.objects.exists()  # the throwaway repositories are gone
