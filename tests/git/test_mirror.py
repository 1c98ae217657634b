"""The ref mirror: a repository directory survives git's own maintenance (issue 8, item 1)."""

from __future__ import annotations

import io
import os
import shutil

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db.models import F

from repos.models import Changeset, Event, Proposal, Repository
from repos.services import gitdir, refmirror, repositories, stores

from .conftest import fsck, git

pytestmark = pytest.mark.django_db(transaction=True)


def _history(api) -> dict:
    """Every kind of object the database names: streams, open and conflicted proposals, a
    changeset never proposed, one landed by fast-forward and one by merge."""
    base = api.write(None, {"a.txt": "a\n", "b.txt": "b\n"}, "base\n")
    api.land(base)
    ours = api.write(base, {"a.txt": "ours\n"}, "ours\n")
    theirs = api.write(base, {"a.txt": "theirs\n"}, "theirs\n")
    merged = api.write(base, {"c.txt": "c\n"}, "merged\n")
    api.land(ours)
    conflicted = api.propose(theirs)
    assert api.integrate(conflicted).json()["outcome"] == "conflict"
    assert api.land(merged)["outcome"] == "merge"
    assert api.post("/streams", {"name": "topic/x", "from": base}).status_code == 201
    waiting = api.propose(api.write(base, {"d.txt": "d\n"}, "waiting\n"), stream="topic/x")
    lonely = api.write(None, {"lonely.txt": "nobody proposed me\n"}, "lonely\n")
    # A commit the store has but no row records (git wrote it), proposed by its id.
    git_dir = stores.repository_path("demo")
    tree = git(git_dir, "rev-parse", f"{base}^{{tree}}").stdout.strip()
    stray = git(git_dir, "commit-tree", tree, "-m", "made by git", env=_IDENTITY).stdout.strip()
    unrecorded = api.propose(stray, stream="topic/x")
    return {"conflicted": conflicted, "waiting": waiting, "lonely": lonely, "unrecorded": unrecorded}


_IDENTITY = {"GIT_AUTHOR_NAME": "git", "GIT_AUTHOR_EMAIL": "git@example.com"} | {
    "GIT_COMMITTER_NAME": "git",
    "GIT_COMMITTER_EMAIL": "git@example.com",
}


def _reads_back(api, made: dict) -> None:
    for changeset in Changeset.objects.all():
        assert api.get(f"/changesets/{changeset.commit_id}").status_code == 200
        assert api.get(f"/tree/{changeset.commit_id}").status_code == 200, changeset.commit_id
    for proposal in Proposal.objects.all():
        assert api.get(f"/tree/{proposal.head}").status_code == 200
    for stream in ("main", "topic/x"):
        assert api.get(f"/tree/{stream}").status_code == 200
        assert api.get("/log", rev=stream, limit=500).status_code == 200
    assert api.file("c.txt") == b"c\n" and api.file("a.txt") == b"ours\n"
    assert api.file("lonely.txt", rev=made["lonely"]) == b"nobody proposed me\n"


def _forget_parsed_objects() -> None:
    """A fresh process's view: no parsed-object caches."""
    stores._stores.clear()


def test_the_mirror_holds_streams_head_proposals_and_unlanded_changesets(api):
    made = _history(api)
    git_dir = stores.repository_path("demo")
    repository = Repository.objects.get(name="demo")

    refs = refmirror.actual_refs(git_dir)

    assert refs["refs/heads/main"] == api.head("main")
    assert refs["refs/heads/topic/x"] == api.head("topic/x")
    assert (git_dir / "HEAD").read_text() == "ref: refs/heads/main\n"
    # Proposals of recorded changesets are protected by the changesets' refs; the others by their own.
    assert f"refs/agentgit/proposals/{made['unrecorded']}" in refs
    assert [name for name in refs if name.startswith("refs/agentgit/proposals/")] == [
        f"refs/agentgit/proposals/{made['unrecorded']}"
    ]
    for proposal in ("conflicted", "waiting"):
        head = Proposal.objects.get(pk=made[proposal]).head
        assert refs[f"refs/agentgit/changesets/{head}"] == head
    assert refs[f"refs/agentgit/changesets/{made['lonely']}"] == made["lonely"]
    # What a landing put on a stream is no longer protected on its own.
    landed = Proposal.objects.filter(state="integrated").values_list("id", "head")
    for proposal_id, head in landed:
        assert f"refs/agentgit/proposals/{proposal_id}" not in refs
        assert f"refs/agentgit/changesets/{head}" not in refs
    # The mirror is exactly what a rebuild from the database computes.
    assert refmirror.rebuild(repository) == 0


def test_a_one_call_landing_protects_its_changeset_only_when_no_stream_reaches_it(api):
    base = api.write(None, {"a.txt": "a\n"}, "base\n")
    api.land(base)
    api.land(api.write(base, {"a.txt": "ours\n"}, "ours\n"))
    git_dir = stores.repository_path("demo")

    def land(body: dict) -> dict:
        response = api.post("/streams/main/land", {"message": "one call\n", **body})
        assert response.status_code == 200, response.content
        return response.json()

    landed = land({"operations": [{"op": "write", "path": "b.txt", "content": "b\n"}]})
    conflicted = land({"parent": base, "operations": [{"op": "write", "path": "a.txt", "content": "theirs\n"}]})

    assert (landed["outcome"], conflicted["outcome"]) == ("fast_forward", "conflict")
    refs = refmirror.actual_refs(git_dir)
    assert refs["refs/heads/main"] == landed["changeset"] == api.head()
    assert f"refs/agentgit/changesets/{landed['changeset']}" not in refs
    assert refs[f"refs/agentgit/changesets/{conflicted['changeset']}"] == conflicted["changeset"]
    assert refmirror.rebuild(Repository.objects.get(name="demo"), everything=True) == 0
    git(git_dir, "gc", "--prune=now", "--quiet")
    _forget_parsed_objects()
    assert api.get(f"/tree/{conflicted['changeset']}").status_code == 200


def test_a_streams_landings_meanwhile_write_its_ref_once_within_the_delay(api, settings, monkeypatch):
    settings.AGENTGIT = {**settings.AGENTGIT, "MIRROR_FOLLOW_S": 60.0}  # flushed by hand below
    git_dir = stores.repository_path("demo")
    written = []
    set_ref = refmirror._set_ref
    monkeypatch.setattr(refmirror, "_set_ref", lambda *args: written.append(args[1]) or set_ref(*args))
    base = api.write(None, {"a.txt": "0\n"}, "base\n")
    api.land(base)
    refmirror.flush_pending()
    written.clear()

    for n in range(1, 6):
        answer = api.post(
            "/streams/main/land",
            {"message": f"{n}\n", "operations": [{"op": "write", "path": "a.txt", "content": f"{n}\n"}]},
        )
        assert answer.json()["outcome"] == "fast_forward"
    proposed = api.write(api.head(), {"b.txt": "b\n"}, "separate endpoints\n")
    api.land(proposed)  # its protection ref goes with the same write

    # Only the separate endpoint's changeset was protected, when it was recorded.
    assert written == [f"refs/agentgit/changesets/{proposed}"]
    assert (git_dir / "refs/heads/main").read_text() == f"{base}\n"
    refmirror.flush_pending()
    assert (git_dir / "refs/heads/main").read_text() == f"{api.head()}\n" == f"{proposed}\n"
    assert written[1:] == ["refs/heads/main", f"refs/agentgit/changesets/{proposed}"]
    assert refmirror.rebuild(Repository.objects.get(name="demo"), everything=True) == 0


def test_a_batched_ref_write_reads_the_head_when_another_process_landed_between(api, settings):
    settings.AGENTGIT = {**settings.AGENTGIT, "MIRROR_FOLLOW_S": 60.0}
    git_dir = stores.repository_path("demo")
    api.land(api.write(None, {"a.txt": "0\n"}, "base\n"))
    api.land(api.write(api.head(), {"a.txt": "1\n"}, "one\n"))
    # A landing another process made, whose old head is not the last one this process saw.
    refmirror.follow_landing(Repository.objects.get(name="demo"), "main", [], moved=("1" * 40, "2" * 40))

    refmirror.flush_pending()

    assert (git_dir / "refs/heads/main").read_text() == f"{api.head()}\n"


def test_git_gc_prune_now_loses_nothing_the_database_names(api):
    made = _history(api)
    git_dir = stores.repository_path("demo")

    git(git_dir, "gc", "--prune=now", "--quiet")
    _forget_parsed_objects()

    assert not any((git_dir / "objects").glob("??/*")), "gc packed every object"
    _reads_back(api, made)
    fsck(git_dir)
    assert git(git_dir, "for-each-ref", "refs/heads/").stdout.count("\n") == 2


def test_recovery_rebuilds_a_lost_or_wrong_mirror_from_the_database(api):
    made = _history(api)
    git_dir = stores.repository_path("demo")
    right = refmirror.actual_refs(git_dir)
    shutil.rmtree(git_dir / "refs" / "heads")
    (git_dir / "refs" / "heads").mkdir()
    (git_dir / "refs" / "heads" / "bogus").write_text(made["lonely"] + "\n")
    (git_dir / "refs" / "agentgit" / "changesets" / made["lonely"]).unlink()
    (git_dir / "HEAD").write_text("ref: refs/heads/master\n")

    call_command("agentgit_recover", stdout=io.StringIO())

    assert refmirror.actual_refs(git_dir) == right
    assert (git_dir / "HEAD").read_text() == "ref: refs/heads/main\n"
    git(git_dir, "gc", "--prune=now", "--quiet")
    _forget_parsed_objects()
    _reads_back(api, made)


def test_every_repository_has_git_automatic_maintenance_off(api):
    git_dir = stores.repository_path("demo")
    for key, value in gitdir.GIT_CONFIG.items():
        assert git(git_dir, "config", "--get", key).stdout.strip() == value
    # An existing repository (made before this rule) gets the same config when first opened.
    git(git_dir, "config", "--unset", "gc.auto")
    _forget_parsed_objects()
    stores.store_for("demo")
    assert git(git_dir, "config", "--get", "gc.auto").stdout.strip() == "0"
    assert settings.AGENTGIT["REPOS_DIR"] in git_dir.parents


def test_a_head_whose_object_is_missing_does_not_stop_the_rest_of_the_mirror(api):
    _history(api)
    git_dir = stores.repository_path("demo")
    repository = Repository.objects.get(name="demo")
    repository.streams.create(name="broken", head="0123456789" * 4)  # names an object the store lacks
    (git_dir / "refs" / "heads" / "main").unlink()

    refmirror.rebuild(repository)

    refs = refmirror.actual_refs(git_dir)
    assert refs["refs/heads/main"] == api.head("main") and "refs/heads/broken" not in refs


def test_a_rebuild_after_the_last_one_repairs_what_changed_since_and_everything_on_demand(api):
    base = api.write(None, {"a.txt": "a\n"}, "base\n")
    api.land(base)
    assert api.post("/streams", {"name": "topic/x", "from": base}).status_code == 201
    git_dir = stores.repository_path("demo")
    repository = Repository.objects.get(name="demo")
    refmirror.rebuild(repository)  # the first one checks every ref and marks where it got to
    ahead = api.write(base, {"a.txt": "ahead\n"}, "ahead\n")
    api.land(ahead)
    # The landing's mirror write lost (a crash right after its commit), and a stream that did not
    # change damaged by hand.
    (git_dir / "refs" / "heads" / "main").write_text(base + "\n")
    (git_dir / "refs" / "heads" / "topic" / "x").write_text(ahead + "\n")

    assert refmirror.rebuild(repository) == 1
    assert git(git_dir, "rev-parse", "refs/heads/main").stdout.strip() == ahead
    assert git(git_dir, "rev-parse", "refs/heads/topic/x").stdout.strip() == ahead  # not among what changed

    call_command("agentgit_recover", "--full-mirror", stdout=io.StringIO())
    assert git(git_dir, "rev-parse", "refs/heads/topic/x").stdout.strip() == base
    assert refmirror.rebuild(repository) == 0

    # The events since the mark pruned: only a full rebuild can tell what changed.
    again = api.write(ahead, {"a.txt": "again\n"}, "again\n")
    api.land(again)
    (git_dir / "refs" / "heads" / "main").write_text(ahead + "\n")
    (git_dir / "refs" / "heads" / "topic" / "x").write_text(again + "\n")
    Event.objects.filter(repository=repository).delete()
    refmirror.rebuild(repository)
    assert refmirror.actual_refs(git_dir, (refmirror.HEADS,)) == {"refs/heads/main": again, "refs/heads/topic/x": base}


def test_many_new_streams_are_written_into_packed_refs_at_once(api):
    base = api.write(None, {"a.txt": "a\n"}, "base\n")
    api.land(base)
    git_dir = stores.repository_path("demo")
    repository = Repository.objects.get(name="demo")
    names = [f"bulk/{n:03d}" for n in range(refmirror.PACK_AT_LEAST + 8)]
    # A loose ref left behind by an earlier stream of the same name (its removal lost): it
    # would shadow the packed one.
    (git_dir / "refs" / "heads" / "bulk").mkdir(parents=True)
    (git_dir / "refs" / "heads" / "bulk" / "005").write_text(("0" * 39 + "1") + "\n")

    created, refused = repositories.create_streams(repository, [(name, base) for name in names])

    assert created == names and refused == {}
    packed = (git_dir / "packed-refs").read_text().splitlines()
    assert packed[0].startswith("# pack-refs with:") and " sorted" in packed[0]
    assert packed[1:] == sorted(packed[1:], key=lambda line: line.split(" ", 1)[1].encode())
    assert [line for line in packed if "refs/heads/bulk/" in line] == [f"{base} refs/heads/{name}" for name in names]
    assert os.listdir(git_dir / "refs" / "heads" / "bulk") == ["005"]  # the stale one, made right
    assert refmirror.actual_refs(git_dir, (refmirror.HEADS,)) == {
        f"refs/heads/{name}": base for name in ["main", *names]
    }
    assert Event.objects.filter(
        repository=repository, kind="stream.created", payload__stream__startswith="bulk/"
    ).count() == len(names)
    fsck(git_dir)
    # Looked up as git does, by a binary search of the sorted file.
    lookup = refmirror.PackedRefs(git_dir)
    assert [lookup.get(f"refs/heads/{name}") for name in names] == [base] * len(names)
    assert lookup.get("refs/heads/bulk") is None and lookup.get("refs/heads/zzz") is None


def test_many_repositories_are_created_at_once_each_as_one_is(api):
    created, refused = repositories.create_repositories(["bulk-1", "bulk-2", "demo", "bulk-1", "bad..name"])

    assert created == ["bulk-1", "bulk-2"]
    assert set(refused) == {"demo", "bulk-1", "bad..name"}  # taken, named twice, invalid
    for name in created:
        repository = Repository.objects.get(name=name)
        git_dir = stores.repository_path(name)
        assert list(repository.streams.values_list("name", "head")) == [("main", None)]
        assert list(Event.objects.filter(repository=repository).values_list("seq", "kind")) == [
            (1, "repository.created"),
            (2, "stream.created"),
        ]
        assert (git_dir / "HEAD").read_text() == "ref: refs/heads/main\n"
        assert git(git_dir, "config", "--get", "gc.auto").stdout.strip() == "0"
        fsck(git_dir)


def test_a_start_rebuilds_the_mirrors_of_the_repositories_that_changed_only(api):
    head = api.write(None, {"a.txt": "a\n"}, "base\n")
    api.land(head)
    repositories.create_repositories(["quiet-1", "quiet-2"])
    call_command("agentgit_recover", stdout=io.StringIO())
    assert not Repository.objects.exclude(mirrored_seq=F("event_seq")).exists()
    # A ref damaged by hand in a repository with no event since: a start does not look at it
    # (that is what --full-mirror is for) ...
    quiet = stores.repository_path("quiet-1")
    (quiet / "HEAD").write_text("ref: refs/heads/master\n")
    assert refmirror.rebuild_all() == 0
    assert (quiet / "HEAD").read_text() == "ref: refs/heads/master\n"
    # ... while a repository whose landing's mirror write was lost is repaired, from its events.
    ahead = api.write(head, {"a.txt": "ahead\n"}, "ahead\n")
    api.land(ahead)
    git_dir = stores.repository_path("demo")
    (git_dir / "refs" / "heads" / "main").write_text(head + "\n")
    assert list(refmirror.changed_since(Repository.objects.all(), "mirrored_seq")) == [
        Repository.objects.get(name="demo")
    ]

    assert refmirror.rebuild_all() == 1

    assert git(git_dir, "rev-parse", "refs/heads/main").stdout.strip() == ahead
    assert not Repository.objects.exclude(mirrored_seq=F("event_seq")).exists()
    call_command("agentgit_recover", "--full-mirror", stdout=io.StringIO())
    assert (quiet / "HEAD").read_text() == "ref: refs/heads/main\n"
