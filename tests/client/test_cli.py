"""The ``agentgit`` command line against a real server: ``--json`` is the API's answer; exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from agentgit.cli import EXIT_AUTH, EXIT_CONFLICT, EXIT_POLICY, cli


@pytest.fixture
def run(server, repo):
    """``run("log", "--json")``: the CLI with the server and token from the environment."""
    env = {"AGENTGIT_URL": server.url, "AGENTGIT_TOKEN": server.token, "AGENTGIT_REPO": repo}

    def invoke(*args: str, stdin: bytes | None = None, expect: int = 0, token: str | None = None):
        result = CliRunner().invoke(
            cli, list(args), env={**env, **({"AGENTGIT_TOKEN": token} if token else {})}, input=stdin
        )
        assert result.exit_code == expect, (result.output, result.exception)
        return result

    return invoke


@pytest.fixture
def api(server, repo):
    """GET the API's own answer, to compare with the CLI's."""

    def get(suffix: str, **params):
        response = httpx.get(
            f"{server.url}/api/v1/repos/{repo}{suffix}",
            params=params,
            headers={"Authorization": f"Bearer {server.token}"},
        )
        assert response.status_code == 200, response.text
        return response.json()

    return get


def as_json(result) -> object:
    return json.loads(result.stdout)


def test_repo_and_stream_commands(run, repo, server):
    made = as_json(run("repo", "create", f"{repo}-cli", "--json"))
    assert made["name"] == f"{repo}-cli"
    listed = as_json(run("--json", "repo", "list", "--limit", "1000"))
    assert made in listed["repos"]
    assert f"{repo}-cli" in run("repo", "list", "--limit", "1000").stdout  # the table

    run("land", "-m", "base", "--write", "a.txt=-", stdin=b"a\n")
    stream = as_json(run("stream", "create", "topic", "--from", "main", "--json"))
    streams = as_json(run("stream", "list", "--json"))
    assert stream in streams["streams"] and [s["name"] for s in streams["streams"]] == ["main", "topic"]


def test_land_from_the_working_directory_and_stdin(run, api, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("src").mkdir()
    Path("src/app.py").write_text("print('hi')\n")
    Path("old.txt").write_text("old\n")
    Path("local.bin").write_bytes(b"\x00\xff" * 100)
    first = as_json(run("land", "-m", "first", "--write", "src/app.py", "--write", "old.txt", "--json"))
    assert first["outcome"] == "fast_forward" and first["stream_head"] == api("/streams/main")["head"]

    second = as_json(
        run(
            "land", "-m", "second", "--write", "data/blob.bin=local.bin", "--write", "notes.txt=-",
            "--delete", "old.txt", "--rename", "src/app.py=app.py", "--agent", "cli-test", "--json",
            stdin=b"from stdin\n",
        )
    )  # fmt: skip

    assert second["outcome"] == "fast_forward"
    assert run("cat", "main", "notes.txt").stdout_bytes == b"from stdin\n"
    assert run("cat", "main", "data/blob.bin").stdout_bytes == b"\x00\xff" * 100
    tree = as_json(run("tree", "main", "--json"))
    assert tree == api("/tree/main") and [e["path"] for e in tree["entries"]] == ["app.py", "data", "notes.txt"]
    assert as_json(run("tree", "main", "data", "--json")) == api("/tree/main", path="data")
    proposal = as_json(run("proposal", "show", str(second["proposal"]), "--json"))
    assert proposal == api(f"/proposals/{second['proposal']}") and proposal["state"] == "integrated"


def test_history_commands_answer_what_the_api_does(run, api):
    first = as_json(run("land", "-m", "one", "--write", "a.txt=-", "--json", stdin=b"one\n"))
    run("land", "-m", "two", "--write", "a.txt=-", stdin=b"one\ntwo\n")

    assert as_json(run("log", "--json")) == api("/log", limit=20)
    assert as_json(run("log", "main", "--path", "a.txt", "--limit", "1", "--json")) == api(
        "/log", rev="main", path="a.txt", limit=1
    )
    assert "two" in run("log").stdout
    assert as_json(run("diff", first["changeset"], "main", "--json")) == api(
        "/diff", **{"from": first["changeset"], "to": "main"}
    )
    assert run("diff", first["changeset"], "main").stdout.endswith("+two\n")
    assert "modified  a.txt" in run("diff", first["changeset"], "main", "--stat").stdout
    assert as_json(run("blame", "main", "a.txt", "--json")) == api("/blame/main/a.txt")


def test_proposal_commands_and_exit_3_with_the_paths_on_a_conflict(run, api, server, repo):
    base = as_json(run("land", "-m", "base", "--write", "a.txt=-", "--json", stdin=b"a\n"))
    run("land", "-m", "ours", "--write", "a.txt=-", stdin=b"ours\n")

    conflicted = run(
        "land", "-m", "theirs", "--parent", base["changeset"], "--write", "a.txt=-", stdin=b"t\n", expect=EXIT_CONFLICT
    )
    assert "a.txt" in conflicted.stdout and "content" in conflicted.stdout
    as_json_conflict = as_json(
        run(
            "land",
            "-m",
            "again",
            "--parent",
            base["changeset"],
            "--write",
            "a.txt=-",
            "--json",
            stdin=b"u\n",
            expect=EXIT_CONFLICT,
        )
    )
    assert as_json_conflict["conflicts"] == [{"path": "a.txt", "kind": "content"}]

    with httpx.Client(
        base_url=f"{server.url}/api/v1/repos/{repo}", headers={"Authorization": f"Bearer {server.token}"}
    ) as http:
        made = http.post(
            "/changesets",
            json={"parent": base["changeset"], "operations": [{"op": "write", "path": "a.txt", "content": "v"}]},
        )
        opened = http.post("/proposals", json={"stream": "main", "head": made.json()["id"]}).json()
    listed = as_json(run("proposal", "list", "--state", "open", "--json"))
    assert listed == api("/proposals", state="open") and [p["id"] for p in listed["proposals"]] == [opened["id"]]
    integrated = run("proposal", "integrate", str(opened["id"]), "--json", expect=EXIT_CONFLICT)
    assert as_json(integrated)["conflicts"] == [{"path": "a.txt", "kind": "content"}]
    assert str(opened["id"]) in run("proposal", "list").stdout


def test_reviews_policies_and_exit_5_with_the_unmet_requirements(run, server, tmp_path):
    run("land", "-m", "base", "--write", "a.txt=-", stdin=b"a\n")
    rules = [{"streams": ["main"], "required_approvals": 1}]
    document = tmp_path / "policy.json"
    document.write_text(json.dumps({"rules": rules}))
    assert "policy version 1 in force (1 rules)" in run("policy", "set", str(document)).stdout
    assert run("policy", "set", "-", stdin=b"{not json", expect=2).exit_code == 2
    assert json.loads(run("policy", "show").stdout)["rules"] == rules

    # A landing on the protected stream: exit 5, each unmet requirement, the proposal that waits.
    refused = run("land", "-m", "wants review", "--write", "b.txt=-", stdin=b"b\n", expect=EXIT_POLICY)
    assert "approvals: needs 1 approval of its latest revision, has 0" in refused.stderr
    proposal = re.search(r"proposal (\d+) waits", refused.stderr).group(1)
    checklist = run("proposal", "policy", proposal).stdout
    assert f"proposal {proposal}: not allowed now (policy version 1)" in checklist
    assert re.search(r"^approvals +NO +needs 1 approval", checklist, re.MULTILINE), checklist

    # Its author may not approve it (exit 4: forbidden); another reviewer may.
    assert "would not count" in run("review", "approve", proposal, expect=EXIT_AUTH).stderr
    reviewer = server.token_for("read,review")
    run("review", "comment", proposal, "-m", "reading it", token=reviewer)
    assert "approve of proposal" in run("review", "approve", proposal, "-m", "fine", token=reviewer).stdout
    reviews = as_json(run("review", "list", proposal, "--json"))["reviews"]
    assert [(r["verdict"], r["body"]) for r in reviews] == [("comment", "reading it"), ("approve", "fine")]
    assert re.search(r"approvals +yes", run("proposal", "policy", proposal).stdout)
    assert as_json(run("proposal", "policy", proposal, "--json"))["allowed"] is True

    # Withdrawn, the approval no longer counts: integrate exits 5; an admin's bypass lands it.
    assert "withdrawn" in run("review", "withdraw", proposal, str(reviews[1]["id"]), token=reviewer).stdout
    again = run("proposal", "integrate", proposal, expect=EXIT_POLICY)
    assert "approvals: needs 1 approval" in again.stderr and f"proposal {proposal} waits" in again.stderr
    assert "fast_forward" in run("proposal", "integrate", proposal, "--bypass", "release day").stdout
    decision = as_json(run("proposal", "show", proposal, "--json"))["decision"]
    assert decision["bypass"]["reason"] == "release day"
    assert "wrong_state" in run("review", "comment", proposal, "-m", "late", expect=1).stderr


def test_events_print_json_lines(run, server, repo):
    run("land", "-m", "one", "--write", "a.txt=-", stdin=b"a\n")

    result = run("events", "--no-follow", "--timeout", "0.3", "--json")

    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["event"] for line in lines] == [
        "repository.created",
        "stream.created",
        "proposal.opened",
        "stream.integrate",
    ]
    assert [line["id"] for line in lines] == [1, 2, 3, 4]
    after = run("events", "--no-follow", "--timeout", "0.2", "--after", "3", "--json")
    assert [json.loads(line)["id"] for line in after.stdout.splitlines()] == [4]


def test_api_reaches_any_endpoint(run, api, repo):
    assert as_json(run("api", "GET", f"/repos/{repo}/streams/main")) == api("/streams/main")
    made = as_json(run("api", "POST", f"/repos/{repo}/changesets", "-d", '{"parent": null, "operations": []}'))
    assert len(made["id"]) == 40


def test_exit_codes_for_errors_usage_and_refused_tokens(run, server):
    assert "not_found" in run("proposal", "show", "999999", expect=1).stderr
    run("land", "-m", "nothing", expect=2)  # no --write, --delete or --rename
    run("frobnicate", expect=2)
    assert "unauthenticated" in run("repo", "list", token="agt_wrong", expect=EXIT_AUTH).stderr
    reader = server.token_for("read")
    assert "forbidden" in run("land", "-m", "x", "--write", "a=-", stdin=b"a", token=reader, expect=EXIT_AUTH).stderr


def test_the_console_script_runs_with_the_token_from_the_environment(server, repo):
    env = {"AGENTGIT_URL": server.url, "AGENTGIT_TOKEN": server.token, "PATH": "/usr/bin:/bin"}
    script = Path(sys.executable).parent / "agentgit"
    done = subprocess.run(
        [str(script), "--json", "repo", "list", "--limit", "1000"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert repo in [r["name"] for r in json.loads(done.stdout)["repos"]]


def test_large_transfers_show_a_progress_bar_on_a_terminal(run, tmp_path, monkeypatch):
    monkeypatch.setattr("agentgit.cli.on_terminal", lambda: True)
    big = tmp_path / "big.bin"
    big.write_bytes(bytes(range(256)) * 8192)  # 2 MiB
    landed = run("land", "-m", "big", "--write", f"big.bin={big}")
    assert "uploading" in landed.stderr and "100%" in landed.stderr

    out = tmp_path / "copy.bin"
    fetched = run("cat", "main", "big.bin", "-o", str(out))
    assert "downloading" in fetched.stderr and out.read_bytes() == big.read_bytes()


def test_search_prints_what_git_grep_prints(run, tmp_path, monkeypatch):
    """The same files landed through the CLI and committed to a local git repository."""
    monkeypatch.chdir(tmp_path)
    files = {
        "src/app.py": "import os\n\ndef main():\n    print('Hello')\n    return main_value\n",
        "src/util.py": "def helper():\n    return 'hello'\n\n\n\n\ndef main_helper():\n    main()\n",
        "README.md": "Hello main\n",
    }
    for path, text in files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    run("land", "-m", "files", *[arg for path in files for arg in ("--write", path)])
    env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@a", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@a"}
    subprocess.run(["git", "init", "-q"], check=True)
    subprocess.run(["git", "add", "."], check=True)
    subprocess.run(["git", "commit", "-qm", "files"], check=True, env={**env, "PATH": "/usr/bin:/bin"})

    for flags in ([], ["-i"], ["-w"], ["-C", "1"], ["-C", "2", "-i"], ["-l"], ["-c"], ["-F", "-i"]):
        for pattern in ("main", "hello", "^def", "Hello|return"):
            if "-F" in flags and "|" in pattern:
                continue
            grep = subprocess.run(["git", "grep", "-n", "-E", *flags, "-e", pattern], capture_output=True, text=True)
            ours = run("search", pattern, *flags, "--all", "--limit", "2")
            assert ours.stdout == grep.stdout, (flags, pattern)
    found = as_json(run("search", "main", "--path", "src", "--exclude", "*util*", "--json"))
    assert [(m["path"], m["line"]) for m in found["matches"]] == [("src/app.py", 3), ("src/app.py", 5)]
    assert run("search", "(", expect=1).exit_code == 1
