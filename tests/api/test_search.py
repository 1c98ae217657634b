"""GET /api/v1/repos/{repo}/search (API.md, "Search"): every parameter, the answer shapes, paging,
the time limit, scoped credentials, and a search right after a landing.

The engine's exactness against git grep is tests/engine/test_search_oracle.py; here the
answers are checked against what the files hold, through the API as an agent calls it.
"""

from __future__ import annotations

import base64
import io
import sqlite3
import subprocess
import time

import pytest
from django.core.management import call_command

from engine.search import FileList
from repos.services import search as search_service
from tests.api.conftest import Api, client_with
from tests.api.test_errors import error

pytestmark = pytest.mark.django_db(transaction=True)

FILES = {
    "src/app.py": "import os\n\ndef main():\n    print('Hello, World')\n    return os.getcwd()\n",
    "src/util.py": "def helper():\n    return 'hello'\n\n\ndef main_helper():\n    pass\n",
    "docs/readme.md": "# Hello\n\nSay hello to main.\r\nCRLF line\r\n",
    "notes.txt": "nothing here\n",
}


def find(api: Api, q: str, **params):
    response = api.get("/search", q=q, **params)
    assert response.status_code == 200, response.content
    return response.json()


@pytest.fixture
def repo(api):
    head = api.write(None, FILES)
    api.land(head)
    return api


def test_lines_that_match_with_line_column_and_text(repo):
    found = find(repo, "main")

    assert found["rev"] == repo.head()
    assert found["truncated"] is False and found["next"] is None
    assert [(m["path"], m["line"], m["column"], m["text"]) for m in found["matches"]] == [
        ("docs/readme.md", 3, 14, "Say hello to main.\r"),
        ("src/app.py", 3, 5, "def main():"),
        ("src/util.py", 5, 5, "def main_helper():"),
    ]


def test_flags_ignore_case_word_and_fixed(repo):
    assert {m["path"] for m in find(repo, "hello")["matches"]} == {"docs/readme.md", "src/util.py"}
    insensitive = find(repo, "hello", ignore_case="1")["matches"]
    assert [(m["path"], m["line"]) for m in insensitive] == [
        ("docs/readme.md", 1),
        ("docs/readme.md", 3),
        ("src/app.py", 4),
        ("src/util.py", 2),
    ]
    assert find(repo, "(?i)HELLO")["matches"] == insensitive
    assert [m["text"] for m in find(repo, "main", word="1")["matches"]] == ["Say hello to main.\r", "def main():"]
    assert find(repo, "print(", fixed="1")["matches"][0]["path"] == "src/app.py"
    assert find(repo, "os?.g", fixed="true")["matches"] == [] and find(repo, "os.g", fixed="1")["matches"]
    assert find(repo, "os?.g")["matches"][0]["text"] == "    return os.getcwd()"


def test_anchors_see_the_carriage_return_as_git_does(repo):
    assert find(repo, "line$")["matches"] == []
    assert [m["line"] for m in find(repo, "line\r$")["matches"]] == [4]


def test_context_lines_before_and_after(repo):
    [match] = find(repo, "getcwd", context="2")["matches"]

    assert match["before"] == ["def main():", "    print('Hello, World')"] and match["after"] == []


def test_path_globs_keep_and_exclude(repo):
    assert {m["path"] for m in find(repo, "hello", ignore_case="1", path="src")["matches"]} == {
        "src/app.py",
        "src/util.py",
    }
    assert {m["path"] for m in find(repo, "hello", ignore_case="1", path="*.md")["matches"]} == {"docs/readme.md"}
    response = repo.client.get(repo.url("/search"), {"q": "hello", "ignore_case": "1", "exclude": ["src/*", "*.md"]})
    assert response.json()["matches"] == []


def test_files_and_count_modes(repo):
    files = find(repo, "hello", ignore_case="1", mode="files")
    assert files["files"] == [
        {"path": "docs/readme.md", "matches": 2},
        {"path": "src/app.py", "matches": 1},
        {
            "path": "src/util.py",
            "matches": 1,
        },
    ]
    assert find(repo, "hello", ignore_case="1", mode="count") == {"rev": repo.head(), "count": 4, "truncated": False}


def test_paths_target(repo):
    found = find(repo, r"\.py$", target="paths")

    assert found["files"] == [{"path": "src/app.py"}, {"path": "src/util.py"}]


def test_pages_follow_each_other_to_the_whole_answer(repo):
    whole = find(repo, "e", limit="1000")["matches"]
    paged, cursor = [], None
    while True:
        page = find(repo, "e", limit="2", **({"cursor": cursor} if cursor else {}))
        paged += page["matches"]
        assert len(page["matches"]) <= 2
        if not page["truncated"]:
            assert page["next"] is None
            break
        cursor = page["next"]
    assert paged == whole and len(whole) > 6


def test_a_page_keeps_the_revision_it_started_at(repo):
    first = find(repo, "def", limit="1")
    repo.land(repo.write(repo.head(), {"src/new.py": "def added():\n"}))

    second = find(repo, "def", limit="100", cursor=first["next"])

    assert second["rev"] == first["rev"] and "src/new.py" not in {m["path"] for m in second["matches"]}


def test_any_revision_and_a_search_right_after_a_landing(repo):
    before = repo.head()
    repo.client.post(repo.url("/streams"), {"name": "topic", "from": before}, format="json")
    landed = repo.post(
        "/streams/topic/land",
        {
            "message": "m",
            "operations": [
                {"op": "write", "path": "src/app.py", "content": "def main():\n    return 'fresh_token_42'\n"}
            ],
        },
    )
    assert landed.status_code == 200, landed.content

    assert [m["path"] for m in find(repo, "fresh_token_42", rev="topic")["matches"]] == ["src/app.py"]
    assert find(repo, "fresh_token_42")["matches"] == []
    assert find(repo, "fresh_token_42", rev=before)["matches"] == []
    assert find(repo, "print", rev=before)["matches"][0]["path"] == "src/app.py"


def test_binary_files_are_reported_as_git_reports_them(repo):
    blob = repo.blob(b"header\x00binary hello\n")
    repo.land(repo.commit(repo.head(), [{"op": "write", "path": "data.bin", "blob": blob}]))

    found = find(repo, "binary hello")

    assert found["matches"] == [{"path": "data.bin", "binary": True}]
    assert find(repo, "binary hello", mode="files")["files"] == [{"path": "data.bin", "matches": 1, "binary": True}]


@pytest.mark.parametrize(
    "params",
    [
        {"q": "("},
        {"q": "a{2,1}"},
        {"q": r"(a)\1"},
        {"q": "x", "mode": "lines"},
        {"q": "x", "target": "names"},
        {"q": "x", "limit": "0"},
        {"q": "x", "limit": "1001"},
        {"q": "x", "context": "-1"},
        {"q": "x", "fixed": "yes"},
        {"q": "x", "cursor": "abc"},
        {},
    ],
)
def test_bad_parameters_are_invalid(repo, params):
    error(repo.client.get(repo.url("/search"), params), 400, "invalid")


def test_unknown_revisions_and_forged_cursors_are_not_found(repo):
    error(repo.get("/search", q="x", rev="nope"), 404, "not_found")
    forged = base64.urlsafe_b64encode(b"\x01" * 20 + b"\x00\x00\x00\x00src").rstrip(b"=").decode()
    error(repo.get("/search", q="x", cursor=forged), 404, "not_found")


def test_a_search_past_the_time_limit_answers_what_it_found(repo, settings):
    settings.AGENTGIT = {**settings.AGENTGIT, "SEARCH_TIMEOUT_S": 0}

    found = find(repo, "hello")

    assert found["truncated"] is True and found["matches"] == [] and found["next"] is not None
    settings.AGENTGIT = {**settings.AGENTGIT, "SEARCH_TIMEOUT_S": 10}
    assert len(find(repo, "hello", cursor=found["next"])["matches"]) == 2


def test_scope_read_is_enough_and_needed(repo, admin):
    reader = Api(client_with(["read"]), "demo")
    assert find(reader, "main")["matches"]
    error(Api(client_with(["write"]), "demo").get("/search", q="main"), 403, "forbidden")


def test_a_credential_held_to_other_repositories_finds_nothing_here(repo, admin):
    assert admin.post("/api/v1/repos", {"name": "other"}, format="json").status_code == 201
    held = Api(client_with(["read"], repositories=["other"]), "demo")

    error(held.get("/search", q="main"), 404, "not_found")


def test_the_index_is_derived_data_a_search_does_not_need(repo):
    """Removed from under the server: the answer is the same, read from the blobs."""
    indexed = find(repo, "hello", ignore_case="1")
    wait_until_indexed(repo)
    path = search_service.index_path("demo")
    search_service.forget_index("demo")
    path.unlink()
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)

    assert find(repo, "hello", ignore_case="1") == indexed


def wait_until_indexed(repo) -> list:
    """The blobs at the head the index still lacks, once the landing's job (a thread) is done."""
    index = search_service.index_for("demo")
    listed = search_service.file_list("demo", repo.head())
    tree = search_service.store_for("demo").read_commit(repo.head()).tree
    deadline = time.monotonic() + 5
    # The job indexes the blobs, then saves the head's file list: done when both are there.
    while (index.missing(listed.blobs) or index.load_list(tree) is None) and time.monotonic() < deadline:
        time.sleep(0.02)
    return index.missing(listed.blobs)


def test_agentgit_recover_indexes_what_the_index_lacks(repo):
    assert wait_until_indexed(repo) == []
    search_service.forget_index("demo")
    search_service.index_path("demo").unlink()
    out = io.StringIO()

    call_command("agentgit_recover", stdout=out, stderr=io.StringIO())

    assert f"{len(FILES)} blob(s) indexed for search" in out.getvalue()
    listed = search_service.file_list("demo", repo.head())
    assert search_service.index_for("demo").missing(listed.blobs) == []
    # Again: the index is newer than every head, so recovery does not even open it.
    assert search_service._stale(None) == []
    search_service.index_path("demo").unlink()
    assert search_service._stale(None) == ["demo"]


def test_the_landing_indexed_its_blobs(repo):
    """Off the landing's answer (a detached job): within a second here."""
    assert wait_until_indexed(repo) == []
    index = search_service.index_for("demo")
    assert index.load_list(search_service.store_for("demo").read_commit(repo.head()).tree) is not None


def test_git_grep_agrees_on_the_repository(repo, settings):
    """The same question to git grep, on the server's own git directory."""
    git_dir = search_service.repository_path("demo")
    tree = search_service.store_for("demo").read_commit(repo.head()).tree
    for pattern in ["hello", "ma[a-z]n", "^def", r"\(\)", "o$"]:
        grep = subprocess.run(
            ["git", f"--git-dir={git_dir}", "grep", "-n", "--column", "-E", "-e", pattern, tree],
            capture_output=True,
        ).stdout.decode()
        expected = [line.split(":", 4)[1:] for line in grep.split("\n") if line]
        got = [[m["path"], str(m["line"]), str(m["column"]), m["text"]] for m in find(repo, pattern)["matches"]]
        assert got == expected, pattern


def test_a_revision_list_is_derived_from_a_saved_ancestor(repo):
    """A process that never saw the last landings derives their list from the nearest one the
    index saved, along the changed paths: the same list as walking the tree."""
    first = repo.head()
    for number in range(3):
        repo.land(repo.write(repo.head(), {f"new/f{number}.txt": f"{number}\n", "src/app.py": f"v{number}\n"}))
    assert wait_until_indexed(repo) == []
    store = search_service.store_for("demo")
    search_service.forget_index("demo")
    with sqlite3.connect(search_service.index_path("demo")) as db:
        db.execute("DELETE FROM lists WHERE tree != ?", (store.read_commit(first).tree,))

    derived = search_service.file_list("demo", repo.head())

    walked = FileList.of_tree(store, store.read_commit(repo.head()).tree)
    assert (derived.paths, derived.blobs) == (walked.paths, walked.blobs) and "new/f2.txt" in derived.paths
