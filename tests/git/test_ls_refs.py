"""ls-refs answers from the database with ref-prefix pushed down to an index (audit F6)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from repos.git_http import pktline
from repos.git_http.app import ls_refs
from repos.models import Repository, Stream
from repos.services import repositories

pytestmark = pytest.mark.django_db

HEAD = "a" * 40


def _answer(repository, *arguments: str) -> list[str]:
    out = ls_refs(repository, [f"{argument}\n".encode() for argument in arguments])
    reader = pktline.Reader()
    reader.feed(out)
    lines = []
    while (packet := reader.next()) not in (None, "flush"):
        lines.append(packet.decode().rstrip("\n"))
    return lines


@pytest.fixture
def many_streams():
    repository = Repository.objects.create(name="many")
    Stream.objects.bulk_create(
        [Stream(repository=repository, name=f"agent-{n:05d}", head=HEAD) for n in range(10_000)]
        + [Stream(repository=repository, name="main", head="b" * 40)],
        batch_size=2_000,
    )
    return repository


def test_one_ref_prefix_among_ten_thousand_streams_is_one_indexed_query(many_streams):
    with CaptureQueriesContext(connection) as queries:
        lines = _answer(many_streams, "ref-prefix refs/heads/agent-04242")

    assert lines == [f"{HEAD} refs/heads/agent-04242"]
    assert len(queries.captured_queries) == 1
    sql = queries.captured_queries[0]["sql"]
    plan = " ".join(str(row) for row in connection.cursor().execute(f"EXPLAIN QUERY PLAN {sql}").fetchall())
    assert "USING INDEX" in plan and "SCAN" not in plan.replace("SCAN CONSTANT", ""), plan


def test_git_fetch_of_one_branch_searches_the_index_for_each_of_its_prefixes(many_streams):
    # What `git fetch URL refs/heads/agent-04242` sends: two of its prefixes name streams. As an
    # OR of two ranges, SQLite without ANALYZE searched the index by repository alone: a scan of
    # every stream, 13x slower at a million streams than at a thousand.
    fetch = [
        f"ref-prefix {p}refs/heads/agent-04242" for p in ("", "refs/", "refs/tags/", "refs/heads/", "refs/remotes/")
    ]
    with CaptureQueriesContext(connection) as queries:
        assert _answer(many_streams, *fetch, "ref-prefix refs/tags/") == [f"{HEAD} refs/heads/agent-04242"]

    sql = queries.captured_queries[-1]["sql"]
    plan = [str(row) for row in connection.cursor().execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()]
    searches = [step for step in plan if "repos_stream" in step]
    assert len(searches) == 2 and all("name>? AND name<?" in step for step in searches), plan


def test_overlapping_prefixes_list_each_stream_once_in_order(many_streams):
    found = repositories.streams_by_prefix(many_streams, ["agent-0999", "agent-09990", "main", "agent-00001"])
    assert [name for name, _ in found] == ["agent-00001"] + [f"agent-0999{n}" for n in range(10)] + ["main"]


def test_what_git_clone_and_fetch_ask_for(many_streams):
    # git fetch origin main: the prefixes git derives from "main".
    fetch = ["ref-prefix main", "ref-prefix refs/main", "ref-prefix refs/tags/main", "ref-prefix refs/heads/main"]
    with CaptureQueriesContext(connection) as queries:
        assert _answer(many_streams, *fetch) == [f"{'b' * 40} refs/heads/main"]
    assert len(queries.captured_queries) == 1

    # git clone: HEAD (a symref) and every branch.
    cloned = _answer(
        many_streams, "symrefs", "unborn", "ref-prefix HEAD", "ref-prefix refs/heads/", "ref-prefix refs/tags/"
    )
    assert cloned[0] == f"{'b' * 40} HEAD symref-target:refs/heads/main"
    assert len(cloned) == 1 + 10_001


def test_prefixes_are_exact_and_case_sensitive(many_streams):
    Stream.objects.create(repository=many_streams, name="Agent-x", head=HEAD)
    assert repositories.streams_by_prefix(many_streams, ["Agent"]) == [("Agent-x", HEAD)]
    assert len(repositories.streams_by_prefix(many_streams, ["agent-0999"])) == 10
    assert repositories.streams_by_prefix(many_streams, ["agent-1"]) == []
    assert repositories.streams_by_prefix(many_streams, []) == []


def test_an_empty_default_stream_is_an_unborn_head():
    repository = Repository.objects.create(name="empty")
    Stream.objects.create(repository=repository, name="main")
    assert _answer(repository, "symrefs", "unborn", "ref-prefix HEAD") == ["unborn HEAD symref-target:refs/heads/main"]
    assert _answer(repository, "ref-prefix HEAD") == []
