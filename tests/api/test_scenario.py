"""API.md's scenario through the REST API: content, proposals, integration outcomes, history."""

from __future__ import annotations

import pytest

from repos.models import Changeset, Event, Operation, Proposal

from .conftest import lines

pytestmark = pytest.mark.django_db(transaction=True)


def test_create_repository_answers_it_with_an_empty_main(admin):
    response = admin.post("/api/v1/repos", {"name": "demo"}, format="json")

    assert response.status_code == 201
    body = response.json()
    assert body["name"] == "demo" and body["default_stream"] == "main" and body["object_format"] == "sha1"
    assert "created" in body
    assert admin.get("/api/v1/repos/demo").json() == body
    assert admin.get("/api/v1/repos/demo/streams").json()["streams"] == [
        {"name": "main", "head": None, "updated": admin.get("/api/v1/repos/demo/streams/main").json()["updated"]}
    ]


def test_repository_list_pages_by_name_without_gaps(admin):
    for name in ["c", "a", "e", "b", "d"]:
        assert admin.post("/api/v1/repos", {"name": name}, format="json").status_code == 201

    first = admin.get("/api/v1/repos", {"limit": 2}).json()
    second = admin.get("/api/v1/repos", {"limit": 2, "cursor": first["next"]}).json()
    third = admin.get("/api/v1/repos", {"limit": 2, "cursor": second["next"]}).json()

    names = [r["name"] for r in first["repos"] + second["repos"] + third["repos"]]
    assert names == ["a", "b", "c", "d", "e"]
    assert third["next"] is None


def test_full_scenario_blobs_changeset_proposal_fast_forward(api):
    # Given blobs uploaded by POST and by PUT (with their id)
    readme = api.blob(b"# demo\n")
    put = api.client.put(
        api.url("/blobs/" + "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"), b"", content_type="application/octet-stream"
    )
    assert put.status_code == 201 and put.json()["id"] == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    again = api.client.put(api.url(f"/blobs/{readme}"), b"# demo\n", content_type="application/octet-stream")
    assert again.status_code == 200 and again.json()["id"] == readme

    # When a changeset writes one blob and one inline content
    created = api.post(
        "/changesets",
        {
            "parent": None,
            "message": "first\n",
            "operations": [
                {"op": "write", "path": "README.md", "blob": readme},
                {"op": "write", "path": "src/app.py", "content": "print('hi')\n"},
                {"op": "write", "path": "empty", "blob": "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"},
            ],
            "provenance": {"agent": "alice", "task": "T-1"},
        },
    )
    assert created.status_code == 201, created.content
    changeset = created.json()
    assert set(changeset) >= {"id", "parents", "tree"} and changeset["parents"] == []

    # Then it is readable, and proposing + integrating it fast-forwards main
    shown = api.get(f"/changesets/{changeset['id']}").json()
    assert shown["message"] == "first\n" and shown["provenance"] == {"agent": "alice", "task": "T-1"}
    assert [op["path"] for op in shown["operations"]] == ["README.md", "src/app.py", "empty"]
    proposal = api.post("/proposals", {"stream": "main", "head": changeset["id"], "title": "first"})
    assert proposal.status_code == 201 and proposal.json()["state"] == "open"
    outcome = api.integrate(proposal.json()["id"])
    assert outcome.status_code == 200, outcome.content
    assert outcome.json() | {"operation": None, "proposal": None} == {
        "outcome": "fast_forward",
        "changeset": changeset["id"],
        "stream_head": changeset["id"],
        "conflicts": [],
        "resolved": [],
        "operation": None,
        "proposal": None,
    }
    assert api.head() == changeset["id"]
    assert api.file("src/app.py") == b"print('hi')\n"
    assert api.client.get(api.url(f"/blobs/{readme}")).content == b"# demo\n"
    assert api.client.head(api.url(f"/blobs/{readme}")).status_code == 200
    landed = api.get(f"/proposals/{proposal.json()['id']}").json()
    assert landed["state"] == "integrated" and landed["outcome"] == "fast_forward"
    assert landed["stream_head"] == changeset["id"]


def test_two_agents_editing_different_files_merge(api):
    base = api.write(None, {"a.txt": "a\n", "b.txt": "b\n"})
    api.land(base)
    alice = api.write(base, {"a.txt": "a by alice\n"})
    bob = api.write(base, {"b.txt": "b by bob\n"})

    first, second = api.land(alice), api.land(bob)

    assert first["outcome"] == "fast_forward"
    assert second["outcome"] == "merge"
    merge = api.get(f"/changesets/{second['changeset']}").json()
    assert sorted(merge["parents"]) == sorted([alice, bob])
    assert second["stream_head"] == second["changeset"] == api.head()
    assert api.file("a.txt") == b"a by alice\n" and api.file("b.txt") == b"b by bob\n"


def test_different_lines_of_one_file_merge_with_both_edits(api):
    base = api.write(None, {"f.txt": lines(10)})
    api.land(base)
    alice = api.write(base, {"f.txt": lines(10, l2="alice")})
    bob = api.write(base, {"f.txt": lines(10, l9="bob")})

    api.land(alice)
    outcome = api.land(bob)

    assert outcome["outcome"] == "merge" and outcome["conflicts"] == []
    assert api.file("f.txt").decode() == lines(10, l2="alice", l9="bob")


def test_same_lines_conflict_names_the_path_and_leaves_the_head(api):
    base = api.write(None, {"f.txt": lines(5)})
    api.land(base)
    alice = api.write(base, {"f.txt": lines(5, l3="alice")})
    bob = api.write(base, {"f.txt": lines(5, l3="bob")})
    api.land(alice)

    proposal = api.propose(bob)
    response = api.integrate(proposal)

    assert response.status_code == 200
    outcome = response.json()
    assert outcome["outcome"] == "conflict"
    assert outcome["changeset"] is None
    assert outcome["conflicts"] == [{"path": "f.txt", "kind": "content"}]
    assert outcome["stream_head"] == alice == api.head()
    assert api.get(f"/proposals/{proposal}").json()["state"] == "conflicted"
    assert Event.objects.filter(kind="proposal.conflict").count() == 1
    # Asking again answers the first outcome, and nothing new is recorded.
    assert api.integrate(proposal).json() == outcome
    assert Operation.objects.filter(proposal_id=proposal).count() == 1


def test_the_same_proposal_integrated_twice_answers_the_same(api):
    base = api.write(None, {"f.txt": "x\n"})
    proposal = api.propose(base)

    first = api.integrate(proposal).json()
    second = api.integrate(proposal).json()

    assert first == second and first["outcome"] == "fast_forward"
    assert Event.objects.filter(kind="stream.integrate").count() == 1


def test_rename_against_edit_lands_the_edit_at_the_new_path(api):
    base = api.write(None, {"docs/old.txt": lines(6)})
    api.land(base)
    renamer = api.commit(base, [{"op": "rename", "from": "docs/old.txt", "to": "guide/new.txt"}])
    editor = api.write(base, {"docs/old.txt": lines(6, l4="edited")})

    api.land(renamer)
    outcome = api.land(editor)

    assert outcome["outcome"] == "merge"
    assert api.file("guide/new.txt").decode() == lines(6, l4="edited")
    assert api.get("/files/main/docs/old.txt").status_code == 404


def test_integrate_answers_202_with_the_operation_when_it_waits_zero(api, monkeypatch, stream_busy):
    from repos.services import integration

    base = api.write(None, {"f.txt": "x\n"})
    proposal = api.propose(base)
    monkeypatch.setattr(integration, "_enqueue_on_commit", lambda stream_id: None)  # no worker picks it up

    response = api.post(f"/proposals/{proposal}/integrate", {}, wait=0)

    assert response.status_code == 202
    operation = response.json()["operation"]
    assert response.json()["state"] == "queued"
    assert response["Location"] == api.url(f"/operations/{operation}")
    assert api.get(f"/operations/{operation}").json()["state"] == "queued"
    integration.land_stream(Operation.objects.get(pk=operation).stream_id)
    done = api.get(f"/operations/{operation}").json()
    assert done["state"] == "done" and done["outcome"]["outcome"] == "fast_forward" and "error" not in done
    assert api.integrate(proposal).json() == done["outcome"]


def test_an_aborted_integration_answers_409_retryable(api, monkeypatch, settings):
    from repos.services import integration

    base = api.write(None, {"f.txt": "x\n"})
    proposal = api.propose(base)
    settings.AGENTGIT = {**settings.AGENTGIT, "INTEGRATE_ATTEMPTS": 1}

    def lose(stream_id, batch, held=None):
        raise integration._LostRace(0)

    monkeypatch.setattr(integration, "_land_once", lose)
    response = api.integrate(proposal)

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "aborted" and response.json()["error"]["retryable"] is True
    assert api.head() is None
    assert api.get(f"/proposals/{proposal}").json()["state"] == "open"
    failed = api.get(f"/operations/{Operation.objects.get(proposal_id=proposal).pk}").json()
    assert failed["state"] == "failed" and failed["error"]["code"] == "aborted" and "outcome" not in failed


def test_streams_created_from_a_revision_including_names_with_slashes(api):
    base = api.write(None, {"f.txt": "x\n"})
    api.land(base)

    created = api.post("/streams", {"name": "agents/alice", "from": "main"})

    assert created.status_code == 201
    assert created.json()["name"] == "agents/alice" and created.json()["head"] == base
    assert api.get("/streams/agents/alice").json()["head"] == base
    empty = api.post("/streams", {"name": "scratch"})
    assert empty.status_code == 201 and empty.json()["head"] is None
    names = [s["name"] for s in api.get("/streams").json()["streams"]]
    assert names == ["agents/alice", "main", "scratch"]
    # Files and blame at a stream whose name has a '/' in it.
    assert api.file("f.txt", rev="agents/alice") == b"x\n"
    assert api.get("/blame/agents/alice/f.txt").json()["lines"][0]["changeset"] == base


def test_proposals_list_newest_first_filtered_and_paged(api):
    base = api.write(None, {"f.txt": "x\n"})
    api.post("/streams", {"name": "other"})
    ids = [api.propose(base), api.propose(base, stream="other"), api.propose(base), api.propose(base)]
    api.integrate(ids[0])

    everything = api.get("/proposals").json()
    first = api.get("/proposals", limit=2).json()
    rest = api.get("/proposals", limit=2, cursor=first["next"]).json()

    assert [p["id"] for p in everything["proposals"]] == ids[::-1]
    assert [p["id"] for p in first["proposals"] + rest["proposals"]] == ids[::-1] and rest["next"] is None
    assert [p["id"] for p in api.get("/proposals", state="open", stream="main").json()["proposals"]] == [ids[3], ids[2]]
    assert [p["id"] for p in api.get("/proposals", state="integrated").json()["proposals"]] == [ids[0]]
    assert api.get("/proposals", stream="other").json()["proposals"][0]["stream"] == "other"
    assert everything["proposals"][0]["author"] == api.client.credential.user.username


def test_batch_upload_stores_every_blob_in_order(api):
    import base64

    response = api.post("/blobs/batch", {"blobs": [{"data": base64.b64encode(b"one\n").decode()}, {"data": ""}]})

    assert response.status_code == 201
    ids = response.json()["ids"]
    assert ids[1] == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    assert api.client.get(api.url(f"/blobs/{ids[0]}")).content == b"one\n"


# History: tree, file, diff, blame, log.


@pytest.fixture
def history(api):
    """main: c1 adds a.txt and src/b.txt; c2 edits a.txt; c3 renames src/b.txt to lib/b.txt."""
    c1 = api.write(None, {"a.txt": lines(3), "src/b.txt": lines(8)}, "one\n")
    c2 = api.write(c1, {"a.txt": lines(3, l2="two")}, "two\n")
    c3 = api.commit(c2, [{"op": "rename", "from": "src/b.txt", "to": "lib/b.txt"}], "three\n")
    api.land(c3)
    return api, (c1, c2, c3)


def test_tree_lists_a_directory_at_a_revision(history):
    api, (c1, c2, c3) = history

    root = api.get("/tree/main").json()
    src = api.get(f"/tree/{c1}", path="src").json()

    assert [(e["name"], e["type"]) for e in root["entries"]] == [("a.txt", "file"), ("lib", "dir")]
    assert src["entries"] == [
        {"name": "b.txt", "path": "src/b.txt", "type": "file", "id": src["entries"][0]["id"], "mode": "100644"}
    ]
    assert api.get("/tree/main", path="nope").status_code == 404


def test_diff_reports_renames_with_similarity_and_a_patch(history):
    api, (c1, c2, c3) = history

    diff = api.get("/diff", **{"from": c1, "to": c3}).json()

    assert {"status": "modified", "path": "a.txt"} in diff["changes"]
    assert {"status": "renamed", "path": "lib/b.txt", "old_path": "src/b.txt", "similarity": 100} in diff["changes"]
    assert "rename from src/b.txt\nrename to lib/b.txt\n" in diff["patch"]
    assert "-line 2\n+two\n" in diff["patch"]


def test_a_binary_file_added_and_deleted_is_named_as_git_names_it(history):
    api, (c1, c2, c3) = history
    blob = api.blob(b"\x89PNG\r\n\x1a\n\x00binary")
    added = api.commit(c3, [{"op": "write", "path": "logo.png", "blob": blob}], "logo\n")
    deleted = api.commit(added, [{"op": "delete", "path": "logo.png"}], "no logo\n")

    assert (
        "Binary files /dev/null and b/logo.png differ\n"
        in api.get("/diff", **{"from": c3, "to": added}).json()["patch"]
    )
    assert (
        "Binary files a/logo.png and /dev/null differ\n"
        in api.get("/diff", **{"from": added, "to": deleted}).json()["patch"]
    )


def test_blame_attributes_each_line(history):
    api, (c1, c2, c3) = history

    blame = api.get("/blame/main/a.txt").json()

    assert [(line["number"], line["changeset"], line["text"]) for line in blame["lines"]] == [
        (1, c1, "line 1"),
        (2, c2, "two"),
        (3, c1, "line 3"),
    ]


def test_log_with_path_limit_and_cursor_pages_without_gaps_or_duplicates(history):
    api, (c1, c2, c3) = history
    head = c3
    for n in range(4):
        head = api.write(head, {"a.txt": lines(3, l1=f"edit {n}")}, f"edit {n}\n")
    api.land(head)

    everything = api.get("/log", rev="main", limit=100).json()
    pages, cursor = [], None
    while True:
        params = {"rev": "main", "limit": 3} | ({"cursor": cursor} if cursor else {})
        page = api.get("/log", **params).json()
        pages.append([c["id"] for c in page["changesets"]])
        cursor = page["next"]
        if cursor is None:
            break
    touching_b = api.get("/log", rev="main", path="lib/b.txt").json()

    ids = [c["id"] for c in everything["changesets"]]
    assert len(ids) == 7 and ids[0] == head and ids[-3:] == [c3, c2, c1]
    assert [i for p in pages for i in p] == ids and [len(p) for p in pages] == [3, 3, 1]
    assert [c["id"] for c in touching_b["changesets"]][0] == c3
    assert everything["changesets"][0]["message"] == "edit 3\n"


def test_refused_changeset_leaves_nothing_behind(api):
    before = Changeset.objects.count()
    operations = [{"op": "write", "path": "../x", "content": "x"}]

    response = api.post("/changesets", {"parent": None, "operations": operations})

    assert response.status_code == 400
    assert Changeset.objects.count() == before and Proposal.objects.count() == 0
