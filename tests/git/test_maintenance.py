"""Maintenance: repacked, bitmapped, bounded loose objects, and nothing the database needs lost."""

from __future__ import annotations

import io
import os
import time

import pytest
from django.core.management import call_command

from engine.objects import BLOB
from repos.models import Repository
from repos.services import maintenance, repositories, stores

from .conftest import fsck, git

pytestmark = pytest.mark.django_db(transaction=True)


def _land_many(api, count: int) -> str:
    head = None
    for n in range(count):
        head = api.write(head, {f"f{n % 7}.txt": f"version {n}\n"}, f"change {n}\n")
        api.land(head)
    return head


def test_a_repack_packs_every_loose_object_and_pack_with_a_bitmap_and_loses_nothing(api):
    head = _land_many(api, 30)
    git_dir = stores.repository_path("demo")
    # Objects written by a landing whose rows have not committed yet: named by nothing at all.
    in_flight = stores.store_for("demo").add(BLOB, b"written before its row commits\n")
    stale = git_dir / "objects" / "incoming-crashed"
    (stale / "pack").mkdir(parents=True)
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    for n in range(5):  # loose objects, as git itself writes them (a small push's unpack)
        (git_dir / f"loose-{n}.txt").write_text(f"loose {n}\n")
        git(git_dir, "hash-object", "-w", f"loose-{n}.txt")
    loose_before, packs_before = maintenance.objects_of(git_dir)
    assert loose_before == 5 and packs_before > 1  # every write of the server's is a pack

    state = maintenance.maintain(Repository.objects.get(name="demo"), force=True)

    assert state.outcome == "done" and state.loose_before == loose_before
    assert state.loose_after == 0 and state.packs_after <= 3
    assert list((git_dir / "objects" / "pack").glob("*.bitmap"))
    assert (git_dir / "objects" / "pack" / "multi-pack-index").exists()
    assert git(git_dir, "cat-file", "-t", in_flight).stdout.strip() == "blob"
    assert not stale.exists()
    stores._stores.clear()
    assert api.file("f1.txt") == b"version 29\n" and api.head() == head
    assert len(api.get("/log", rev="main", limit=500).json()["changesets"]) == 30
    fsck(git_dir)
    # A second run has nothing to roll up, and the state is there for /metrics.
    assert maintenance.maintain(Repository.objects.get(name="demo")).outcome == "skipped"
    [summary] = maintenance.repack_state()
    assert summary["repository"] == "demo" and summary["loose_now"] == 0 and summary["outcome"] == "done"


def test_below_the_thresholds_nothing_is_repacked(api):
    _land_many(api, 2)
    state = maintenance.maintain(Repository.objects.get(name="demo"))
    assert state.outcome == "skipped" and state.packs_after == state.packs_before > 0


def test_writes_roll_their_packs_up_geometrically_and_lose_nothing(api, settings):
    settings.AGENTGIT = {**settings.AGENTGIT, "ROLL_UP_PACKS": 4}
    git_dir = stores.repository_path("demo")
    head = _land_many(api, 12)

    _loose, packs = maintenance.objects_of(git_dir)
    # Each landing writes a pack; the fourth in a row asks for a roll-up, which folds the small
    # ones into one in the process (git's repack, and its multi-pack index, are maintenance's).
    assert packs < 4
    assert not (git_dir / "objects" / "pack" / "multi-pack-index").exists()
    stores._stores.clear()
    assert api.file("f4.txt") == b"version 11\n" and api.head() == head
    fsck(git_dir)


def test_maintenance_writes_the_operations_a_crashed_push_left_unwritten(api):
    """A push records its changesets before its refs move and writes their operation lists after
    its answer; a crash in between leaves them NULL, and a read or maintenance writes them."""
    from repos.models import Changeset
    from repos.services import content

    base = _land_many(api, 1)
    repository = Repository.objects.get(name="demo")
    tips = []
    for n in range(2):  # commits made by git, as a push brings them
        tips.append(api.write(base, {f"pushed-{n}.txt": f"pushed {n}\n"}, f"pushed {n}\n"))
    Changeset.objects.filter(commit_id__in=tips).delete()
    content.record_commits(repository, tips, credential=None, provenance={"source": "git push"}, operations_later=True)
    assert list(Changeset.objects.filter(commit_id__in=tips).values_list("operations", flat=True)) == [None, None]

    read = api.get(f"/changesets/{tips[0]}").json()["operations"]  # a read derives its own
    state = maintenance.maintain(repository)

    blob = read[0]["blob"]
    assert read == [{"op": "write", "path": "pushed-0.txt", "blob": blob, "mode": "100644"}]
    assert state.operations_written == 1
    stored = dict(Changeset.objects.filter(commit_id__in=tips).values_list("commit_id", "operations"))
    assert stored[tips[0]] == read
    assert [op["path"] for op in stored[tips[1]]] == ["pushed-1.txt"]
    assert maintenance.maintain(repository).operations_written == 0


def test_loose_refs_are_packed_once_they_pass_their_share_of_the_refs(api):
    head = _land_many(api, 1)  # main's ref: loose
    git_dir = stores.repository_path("demo")
    repository = Repository.objects.get(name="demo")
    many = [(f"s/{n:04d}", head) for n in range(400)]
    assert len(repositories.create_streams(repository, many)[0]) == 400  # into packed-refs at once
    assert maintenance.loose_refs(git_dir) == 1

    state = maintenance.maintain(repository)  # 1 loose of 401 refs: under the share, left
    assert state.refs_packed == 0 and maintenance.loose_refs(git_dir) == 1

    for n in range(3):  # 4 of 404: over it
        assert api.post("/streams", {"name": f"rest/{n}", "from": head}).status_code == 201
    state = maintenance.maintain(repository)
    assert state.refs_packed == 4 and maintenance.loose_refs(git_dir) == 0

    head = api.write(head, {"g.txt": "g\n"}, "one more\n")
    api.land(head)
    assert maintenance.maintain(repository).refs_packed == 0 and maintenance.loose_refs(git_dir) == 1
    assert git(git_dir, "rev-parse", "refs/heads/main").stdout.strip() == head
    fsck(git_dir)


def test_a_periodic_run_maintains_the_repositories_that_changed_since_the_last(api):
    _land_many(api, 1)
    repositories.create_repositories(["quiet-1", "quiet-2"])
    assert [state.repository for state in maintenance.maintain_all()] == ["demo", "quiet-1", "quiet-2"]
    assert maintenance.maintain_all() == []  # nothing changed since

    _land_many(api, 1)

    assert [state.repository for state in maintenance.maintain_all()] == ["demo"]
    assert len(maintenance.maintain_all(everything=True)) == 3
    out = io.StringIO()
    call_command("agentgit_maintain", stdout=out)
    assert out.getvalue() == "maintenance: no repository changed since its last maintenance\n"
    call_command("agentgit_maintain", "--all", stdout=out)
    assert out.getvalue().count("; loose objects ") == 3
