"""Derived data: the commit graph and the path index that landings record for reads.

``transaction=True``: integrations land on commit (Celery eager), as in test_integration.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from engine.graph import generation
from engine.history import log as engine_log
from engine.history import path_key
from repos.models import CommitNode, PathChange, Stream
from repos.services import derived, integration, reads
from repos.services.repositories import create_repository
from repos.services.stores import store_for

from .test_integration import TEXT, land, write

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def repository(request):
    return create_repository(request.node.name.replace("_", "-")[:60])


def history_of_landings(repository):
    """A stream of fast-forwards and merges; returns the head and a changeset per step."""
    base = write(repository, None, {"f.txt": TEXT, "docs/a.md": "a\n", "docs/b.md": "b\n"})
    land(repository, base)
    steps = [base]
    for number in range(6):
        # Two agents from the same head: the second one's proposal lands as a merge.
        head = Stream.objects.get(repository=repository).head
        one = write(repository, head, {f"src/one{number}.txt": f"{number}\n"})
        two = write(repository, head, {"docs/a.md": f"a{number}\n"} if number % 2 else {f"src/two{number}.txt": "x\n"})
        land(repository, one)
        land(repository, two)
        steps += [one, two]
    return Stream.objects.get(repository=repository).head, steps


def log_ids(repository, path, **options):
    return [item["id"] for item in reads.log(repository, "main", path, **options)["changesets"]]


def test_every_landed_changeset_has_its_graph_node_and_changed_paths(repository):
    head, steps = history_of_landings(repository)
    store = store_for(repository.name)
    nodes = {node.commit_id: node for node in CommitNode.objects.filter(repository=repository)}
    reachable = engine_log(store, head)
    assert set(nodes) == set(reachable)  # every changeset the head reaches, nothing else
    for oid in reachable:
        commit = store.read_commit(oid)
        assert nodes[oid].parents.split() == list(commit.parents)
        assert nodes[oid].time == commit.committer.time
        assert nodes[oid].generation == generation(store, oid)
        assert nodes[oid].indexed
    # docs/a.md changed (against the first parent) where an agent edited it, and at the merges
    # that brought those edits in on top of the other agent's changeset.
    listed = set(
        PathChange.objects.filter(repository=repository, key=path_key("docs/a.md")).values_list("commit_id", flat=True)
    )
    edits = {steps[2 + 2 * n] for n in (1, 3, 5)}
    assert edits <= listed
    assert all(oid in edits or len(nodes[oid].parents.split()) == 2 for oid in listed)
    assert len(listed) == 2 * len(edits)


def test_log_answers_from_the_index_what_it_answers_by_comparing_trees(repository, monkeypatch):
    head, _ = history_of_landings(repository)
    store = store_for(repository.name)
    # One row per window: the walk must fetch the index generation by generation.
    monkeypatch.setattr(derived, "INDEX_WINDOW", 1)
    for path in ("docs/a.md", "docs", "src", "src/one3.txt", "f.txt", "never/there"):
        assert log_ids(repository, path) == engine_log(store, head, path)[:50], path
    first = reads.log(repository, "main", "docs", limit=2)
    rest = reads.log(repository, "main", "docs", limit=50, cursor=first["next"])
    assert [c["id"] for c in first["changesets"] + rest["changesets"]] == engine_log(store, head, "docs")


def test_recovery_derives_what_is_missing_and_log_uses_it(repository):
    head, _ = history_of_landings(repository)
    expected = engine_log(store_for(repository.name), head, "docs/a.md")
    count = CommitNode.objects.filter(repository=repository).count()
    CommitNode.objects.filter(repository=repository).delete()  # as before the derive pass existed
    PathChange.objects.filter(repository=repository).delete()
    assert log_ids(repository, "docs/a.md") == expected  # still right, by comparing trees
    assert integration.recover().derived == count
    assert CommitNode.objects.filter(repository=repository).count() == count
    assert integration.recover().derived == 0  # exactly once
    assert log_ids(repository, "docs/a.md") == expected


def test_a_landing_too_long_to_derive_inline_is_derived_after_it_commits(repository, monkeypatch):
    monkeypatch.setattr(derived, "MAX_DERIVED_IN_LANDING", 2)
    base = write(repository, None, {"f.txt": TEXT})
    chain = [base]
    for number in range(4):
        chain.append(write(repository, chain[-1], {f"n{number}.txt": "n\n"}))
    operation = land(repository, chain[-1])  # five underived changesets: more than a landing derives
    assert operation.outcome["outcome"] == "fast_forward"
    # The derive task ran when the landing committed (Celery is eager here).
    assert set(CommitNode.objects.filter(repository=repository).values_list("commit_id", flat=True)) == set(chain)
    assert log_ids(repository, "n1.txt") == [chain[2]]


def test_agentgit_recover_derives_what_is_missing_and_says_so(repository):
    head, _ = history_of_landings(repository)
    count = CommitNode.objects.filter(repository=repository).count()
    CommitNode.objects.filter(repository=repository).delete()
    out = io.StringIO()
    call_command("agentgit_recover", stdout=out, stderr=io.StringIO())
    said = out.getvalue().strip()
    assert said.startswith(f"recovered: 0 queued integration(s) landed, {count} changeset(s) derived, ")
    assert said.endswith(" mirrored ref(s) repaired")
    seen = []
    CommitNode.objects.filter(repository=repository).delete()
    assert integration.recover(lambda stream, done, total: seen.append((stream, done, total))).derived == count
    assert seen[-1] == (f"{repository.name}:main", count, count)  # progress ends at the whole


def test_the_derived_rows_are_written_in_the_models_field_order():
    # derived._insert writes tuples, not model instances: a field added or moved must move them.
    from repos.services.derived import _INSERT_NODES, _INSERT_PATHS

    assert _INSERT_NODES.attnames == ["repository_id", "commit_id", "generation", "parents", "time", "indexed"]
    assert _INSERT_PATHS.attnames == ["repository_id", "key", "generation", "commit_id"]
