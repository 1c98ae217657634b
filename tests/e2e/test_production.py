"""The API acceptance scenario in the production mode, over real HTTP: ``uvicorn --workers 2`` on
PostgreSQL (``DATABASE_URL``) with Celery on Redis (``REDIS_URL``), and integrations landed by a
real ``celery -A agentgit_site worker`` process.

The first test proves the worker pool lands what a request does not: with the stream held by
another transaction and no worker running, an integration stays queued (202, the stream does not
move); a worker started afterwards lands it. On a free stream the request lands it itself. The second is
the scenario: create, upload, changeset, proposal, fast-forward, merges (different files;
different lines of one file), a conflict that names the path and leaves the head alone, rename
against edit, asking twice, and every read (tree, file, diff, blame, log). Its assertions are
checked against the database (operations, events) and against git (``fsck``, ``rev-list``).
"""

from __future__ import annotations

import re
import time

import pytest

from .support import (
    LANDING_TIMEOUT_S,
    TEXT,
    ApiClient,
    blame_first_parent,
    blob_id,
    events_of,
    fsck,
    operations_of,
    rev_list,
    sql,
    stream_held,
)

REPO = "demo"


@pytest.fixture(scope="module")
def client(production):
    with ApiClient(production.url, production.token) as api:
        yield api


@pytest.fixture(scope="module")
def worker(production):
    """One Celery worker (the default prefork pool, two processes), for the rest of the module."""
    return production.start_worker(concurrency=2)


LANDED_TASK = r"Task workers\.tasks\.land_stream\[[^\]]+\] succeeded"


def landed_tasks(process) -> int:
    return len(re.findall(LANDED_TASK, process.log()))


def test_integrations_are_landed_by_the_worker_pool_not_the_server(production, client, request):
    client.create_repo("pool")
    base = client.write("pool", None, {"README.md": "hello\n"}, "base")
    proposal = client.open_proposal("pool", base)["id"]

    # Another transaction holds the stream and no worker runs: the server records the operation,
    # hands it to the broker and answers 202.
    with stream_held(production, "pool", "main"):
        queued = client.integrate_raw("pool", proposal, wait=0.5)
    assert queued.status_code == 202, queued.text
    operation = queued.json()["operation"]
    time.sleep(1.0)
    assert client.operation("pool", operation)["state"] == "queued"
    assert client.head("pool") is None
    assert client.proposal("pool", proposal)["state"] == "open"

    worker = request.getfixturevalue("worker")
    done = client.wait_operation("pool", operation, LANDING_TIMEOUT_S)
    assert done["state"] == "done", done
    assert done["outcome"]["outcome"] == "fast_forward"
    assert client.head("pool") == base
    # The task commits the landing before Celery logs that it succeeded: wait for that line.
    worker.wait_for_log(LANDED_TASK, LANDING_TIMEOUT_S)
    # Asking again answers the first outcome, now at once.
    again = client.integrate_raw("pool", proposal)
    assert again.status_code == 200 and again.json() == done["outcome"]


def test_the_acceptance_scenario_over_http(production, client, worker):
    tasks_before = landed_tasks(worker)
    scenario(production, client)
    # One integration at a time on a free stream: each request landed its own (docs/adr/0029).
    assert landed_tasks(worker) == tasks_before


def test_the_acceptance_scenario_over_http_on_the_embedded_default(embedded):
    """The same scenario on SQLite with Celery eager: integrations land in the server process."""
    with ApiClient(embedded.url, embedded.token) as api:
        scenario(embedded, api)


def scenario(production, client) -> None:
    """Everything the acceptance asks of the API, against a running deployment."""
    outcomes: dict[str, dict] = {}

    def land(name: str, head: str) -> dict:
        proposal = client.open_proposal(REPO, head, title=name)
        assert proposal["state"] == "open"
        outcome = client.integrate(REPO, proposal["id"], timeout_s=LANDING_TIMEOUT_S)
        outcomes[name] = {**outcome, "proposal": proposal["id"]}
        return outcome

    # Create a repository: main exists and is empty.
    created = client.create_repo(REPO)
    assert created["name"] == REPO and created["default_stream"] == "main"
    assert client.head(REPO) is None

    # Upload a blob: its id is git's; by id (PUT) the bytes must hash to it; it reads back.
    readme = b"# demo\n"
    assert client.upload_blob(REPO, readme) == blob_id(readme)
    put = client.request("PUT", f"/repos/{REPO}/blobs/{blob_id(readme)}", content=readme, expect=(200, 201))
    assert put.json()["id"] == blob_id(readme)
    client.request("PUT", f"/repos/{REPO}/blobs/{blob_id(b'other')}", content=readme, expect=(400,))
    assert client.request("GET", f"/repos/{REPO}/blobs/{blob_id(readme)}").content == readme

    # A changeset from the uploaded blob and an inline file, proposed and fast-forwarded.
    base = client.create_changeset(
        REPO, None,
        [{"op": "write", "path": "README.md", "blob": blob_id(readme)}, {"op": "write", "path": "f.txt", "content": TEXT}],
        "base", {"agent": "setup"},
    )  # fmt: skip
    assert base["parents"] == []
    ff = land("base", base["id"])
    assert ff["outcome"] == "fast_forward" and ff["changeset"] == base["id"] and ff["stream_head"] == base["id"]
    assert client.head(REPO) == base["id"]

    # Two agents edit different files on the same head: the first fast-forwards, the second merges.
    one = client.write(REPO, base["id"], {"a.txt": "from agent one\n"}, agent="one")
    two = client.write(REPO, base["id"], {"b.txt": "from agent two\n"}, agent="two")
    assert land("one", one)["outcome"] == "fast_forward"
    merged = land("two", two)
    assert merged["outcome"] == "merge" and merged["conflicts"] == []
    head = merged["stream_head"]
    assert head == merged["changeset"] == client.head(REPO)
    assert client.get_json(f"/repos/{REPO}/changesets/{head}")["parents"] == [one, two]
    assert client.file(REPO, head, "a.txt") == b"from agent one\n"
    assert client.file(REPO, head, "b.txt") == b"from agent two\n"

    # Different lines of one file: merged line by line.
    early = client.write(REPO, head, {"f.txt": TEXT.replace("line 2\n", "line two\n")})
    late = client.write(REPO, head, {"f.txt": TEXT.replace("line 9\n", "line nine\n")})
    assert land("early", early)["outcome"] == "fast_forward"
    lines = land("late", late)
    assert lines["outcome"] == "merge"
    head = lines["stream_head"]
    both = TEXT.replace("line 2\n", "line two\n").replace("line 9\n", "line nine\n")
    assert client.file(REPO, head, "f.txt") == both.encode()

    # The same lines: a conflict naming the path; the stream head does not move.
    ours = client.write(REPO, head, {"f.txt": both.replace("line 5\n", "ours\n")})
    theirs = client.write(REPO, head, {"f.txt": both.replace("line 5\n", "theirs\n")})
    assert land("ours", ours)["outcome"] == "fast_forward"
    head = client.head(REPO)
    assert head == ours
    conflict = land("theirs", theirs)
    assert conflict["outcome"] == "conflict"
    assert conflict["conflicts"] == [{"path": "f.txt", "kind": "content"}]
    assert conflict["changeset"] is None and conflict["stream_head"] == ours
    assert client.head(REPO) == ours
    assert client.proposal(REPO, outcomes["theirs"]["proposal"])["state"] == "conflicted"
    assert b"ours\n" in client.file(REPO, ours, "f.txt")

    # Rename against edit: the edit lands at the new path.
    renamed = client.create_changeset(REPO, ours, [{"op": "rename", "from": "f.txt", "to": "docs/f.txt"}], "move")["id"]
    edited = client.write(REPO, ours, {"f.txt": both.replace("line 5\n", "ours\n").replace("line 1\n", "line one\n")})
    assert land("rename", renamed)["outcome"] == "fast_forward"
    follow = land("edit", edited)
    assert follow["outcome"] == "merge", follow
    head = follow["stream_head"]
    at_new_path = client.file(REPO, head, "docs/f.txt").decode()
    assert at_new_path == both.replace("line 5\n", "ours\n").replace("line 1\n", "line one\n")
    assert client.file_status(REPO, head, "f.txt") == 404

    # The same proposal integrated twice: the same answer (a merge, and a conflict).
    for name in ("edit", "theirs"):
        again = client.integrate_raw(REPO, outcomes[name]["proposal"])
        assert again.status_code == 200
        assert {k: v for k, v in again.json().items() if k != "proposal"} == {
            k: v for k, v in outcomes[name].items() if k != "proposal"
        }
    assert client.head(REPO) == head

    # Reads: tree, file, diff, blame, log.
    root = {entry["name"]: entry for entry in client.tree(REPO, head)}
    assert set(root) == {"README.md", "a.txt", "b.txt", "docs"}
    assert root["docs"]["type"] == "dir" and root["README.md"]["id"] == blob_id(readme)
    assert [entry["path"] for entry in client.tree(REPO, "main", "docs")] == ["docs/f.txt"]
    assert client.file(REPO, "main", "README.md") == readme

    diff = client.diff(REPO, base["id"], head)
    changes = {change["path"]: change for change in diff["changes"]}
    assert changes["a.txt"]["status"] == "added" and changes["b.txt"]["status"] == "added"
    assert changes["docs/f.txt"]["status"] == "renamed" and changes["docs/f.txt"]["old_path"] == "f.txt"
    assert "+line one" in diff["patch"] and "-line 1" in diff["patch"]

    blame = client.blame(REPO, head, "docs/f.txt")
    assert [line["text"] for line in blame] == at_new_path.splitlines()
    assert [line["number"] for line in blame] == list(range(1, len(blame) + 1))
    assert blame[0]["changeset"] in (head, edited)  # first-parent blame: the merge brought it
    # The rename is followed to f.txt, as git follows it: the older lines keep their changesets.
    assert renamed not in {line["changeset"] for line in blame}
    assert [line["changeset"] for line in blame] == blame_first_parent(
        production.repository_dir(REPO), head, "docs/f.txt"
    )

    log = client.log(REPO, "main")["changesets"]
    ids = [changeset["id"] for changeset in log]
    assert ids[0] == head
    expected = {base["id"], one, two, early, late, ours, renamed, edited, head, merged["changeset"], lines["changeset"]}
    assert expected <= set(ids) and theirs not in ids
    assert set(ids) == set(rev_list(production.repository_dir(REPO), head))  # git agrees
    path_log = [c["id"] for c in client.log(REPO, "main", path="a.txt")["changesets"]]
    assert path_log == [one]

    # Exactly one stream.integrate event per landed proposal, one conflict event, one operation each.
    landed = [name for name, outcome in outcomes.items() if outcome["outcome"] in ("fast_forward", "merge")]
    for name in landed:
        assert events_of(production, outcomes[name]["proposal"], "stream.integrate") == 1, name
    assert events_of(production, outcomes["theirs"]["proposal"], "proposal.conflict") == 1
    for name, outcome in outcomes.items():
        assert [state for state, _ in operations_of(production, outcome["proposal"])] == ["done"], name
    seqs = [
        row[0]
        for row in sql(
            production,
            "SELECT seq FROM repos_event e JOIN repos_repository r ON r.id = e.repository_id WHERE r.name = %s ORDER BY seq",
            (REPO,),
        )
    ]
    assert seqs == list(range(1, len(seqs) + 1))

    fsck(production.repository_dir(REPO), head)  # the objects are whole
