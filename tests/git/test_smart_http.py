"""Stock git against a real server (embedded mode): clone, fetch, push, and who may do what."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from tests.deployment import ApiClient

from .conftest import Remote, commit_file, fsck, git

REPO = "demo"


@pytest.fixture(scope="module")
def rest(server):
    with ApiClient(server.url, server.token) as client:
        client.create_repo(REPO)
        base = client.write(REPO, None, {"README.md": "# demo\n", "src/a.txt": "a\n" * 20}, "base")
        client.integrate(REPO, client.open_proposal(REPO, base)["id"])
        yield client


@pytest.fixture
def remote(server, rest, tmp_path) -> Remote:
    return Remote(server, REPO, server.token, tmp_path)


def _head(rest, stream: str = "main") -> str:
    return rest.head(REPO, stream)


def test_clone_has_the_streams_and_tree_the_rest_api_reports(remote, rest):
    remote.clone("v2", "-q")
    remote.clone("v0", "-q", "-c", "protocol.version=0")

    for name in ("v2", "v0"):
        clone = remote.work / name
        assert git(clone, "rev-parse", "HEAD").stdout.strip() == _head(rest)
        files = git(clone, "ls-tree", "-r", "--name-only", "HEAD").stdout.split()
        assert files == ["README.md", "src/a.txt"]
        assert (clone / "src/a.txt").read_text() == rest.file(REPO, "main", "src/a.txt").decode()
        fsck(clone)


def test_ls_remote_lists_head_and_streams_from_the_database(remote, rest):
    rest.create_stream(REPO, "topic/ls", _head(rest))

    listed = git(remote.work, "ls-remote", remote.url()).stdout.splitlines()

    refs = dict(reversed(line.split("\t")) for line in listed)
    assert refs["HEAD"] == refs["refs/heads/main"] == _head(rest)
    assert refs["refs/heads/topic/ls"] == _head(rest)
    assert not [name for name in refs if name.startswith("refs/agentgit/")]  # the mirror's own refs stay inside
    one = git(remote.work, "ls-remote", remote.url(), "refs/heads/topic/ls").stdout.split()
    assert one == [_head(rest), "refs/heads/topic/ls"]


def test_a_full_listing_follows_every_change_of_the_streams(remote, rest):
    # A full listing is kept per repository until its refs change (repos/git_http/app.py):
    # each change below must show in the next listing, over both protocols.
    def listed() -> dict[str, dict[str, str]]:
        answers = {}
        for version in ("0", "2"):
            lines = git(remote.work, "-c", f"protocol.version={version}", "ls-remote", remote.url()).stdout
            answers[version] = dict(reversed(line.split("\t")) for line in lines.splitlines())
        assert answers["0"] == answers["2"]
        return answers["2"]

    before = listed()
    rest.create_stream(REPO, "topic/listed", _head(rest))
    assert listed()["refs/heads/topic/listed"] == _head(rest)

    head = rest.write(REPO, _head(rest), {"listed.txt": "listed\n"}, "listed")
    rest.integrate(REPO, rest.open_proposal(REPO, head)["id"])
    after = listed()
    assert after["refs/heads/main"] == after["HEAD"] == head != before["refs/heads/main"]

    rest.request("DELETE", f"/repos/{REPO}/streams/topic/listed", expect=(204,))
    assert "refs/heads/topic/listed" not in listed()


def test_fetch_after_a_rest_integration_brings_the_new_head(remote, rest):
    remote.clone("c", "-q")
    clone = remote.work / "c"
    head = rest.write(REPO, _head(rest), {"fetched.txt": "new\n"}, "over REST")
    rest.integrate(REPO, rest.open_proposal(REPO, head)["id"])

    git(clone, "fetch", "-q", "origin")

    assert git(clone, "rev-parse", "origin/main").stdout.strip() == head
    assert git(clone, "show", "origin/main:fetched.txt").stdout == "new\n"
    fsck(clone)


def test_shallow_clone_has_one_commit(remote, rest):
    remote.clone("shallow", "-q", "--depth", "1")
    clone = remote.work / "shallow"

    assert git(clone, "rev-list", "--count", "HEAD").stdout.strip() == "1"
    assert git(clone, "rev-parse", "HEAD").stdout.strip() == _head(rest)
    fsck(clone)


def test_blob_none_clone_checks_out_by_fetching_blobs_on_demand(remote, rest):
    remote.clone("partial", "-q", "--filter=blob:none", "--no-checkout")
    clone = remote.work / "partial"
    missing = git(clone, "rev-list", "--objects", "--missing=print", "HEAD").stdout
    assert any(line.startswith("?") for line in missing.splitlines()), "the blobs were left out"

    git(clone, "checkout", "-q", "main")

    assert (clone / "src/a.txt").read_text() == rest.file(REPO, "main", "src/a.txt").decode()
    fsck(clone)


def test_push_fast_forward_moves_the_stream_and_records_the_changeset(remote, rest):
    remote.clone("p", "-q")
    clone = remote.checkout("p")
    git(clone, "mv", "src/a.txt", "src/b.txt")
    pushed = commit_file(clone, "pushed.txt", "pushed\n", "pushed by git")

    done = git(clone, "push", "origin", "HEAD:refs/heads/main")

    assert "main fast-forwarded to " + pushed in done.stderr
    assert _head(rest) == pushed
    changeset = rest.get_json(f"/repos/{REPO}/changesets/{pushed}")
    assert changeset["message"] == "pushed by git\n"
    assert {"op": "rename", "from": "src/a.txt", "to": "src/b.txt"} in changeset["operations"]
    assert {"op": "write", "path": "pushed.txt", "blob": changeset["operations"][0]["blob"], "mode": "100644"} in (
        changeset["operations"]
    )
    assert changeset["provenance"]["source"] == "git push"
    kinds = [event["kind"] for event in _events(rest)]
    assert kinds[-1] == "stream.integrate"


def _events(rest) -> list[dict]:
    import json

    response = rest.http.get(f"/repos/{REPO}/events", params={"after": 0}, headers={"Accept": "text/event-stream"})
    events = []
    for block in response.text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            events.append({"kind": fields["event"], "data": json.loads(fields["data"])})
    return events


def test_a_new_branch_is_a_new_stream_and_deleting_it_needs_admin(remote, rest, server):
    remote.clone("b", "-q")
    clone = remote.checkout("b")
    pushed = commit_file(clone, "branch.txt", "branch\n")

    git(clone, "push", "-q", "origin", "HEAD:refs/heads/feature/git")
    assert _head(rest, "feature/git") == pushed

    writer = server.create_token("writer", "read,write", rate=100_000, burst=100_000)
    refused = git(clone, "push", remote.url(writer), ":refs/heads/feature/git", check=False)
    assert refused.returncode != 0 and "needs the 'admin' scope" in refused.stderr
    assert _head(rest, "feature/git") == pushed

    git(clone, "push", "-q", "origin", ":refs/heads/feature/git")
    assert rest.http.get(f"/repos/{REPO}/streams/feature/git").status_code == 404
    default = git(clone, "push", "origin", ":refs/heads/main", check=False)
    assert default.returncode != 0 and "default stream" in default.stderr


def test_a_push_of_many_new_branches_creates_every_stream_and_packs_their_refs(remote, rest, server):
    remote.clone("many", "-q")
    clone = remote.checkout("many")
    base = _head(rest)
    ahead = commit_file(clone, "many.txt", "many\n")
    git(clone, "push", "-q", "origin", "HEAD:refs/heads/many/taken")
    names = [f"many/b{n:03d}" for n in range(60)]
    specs = [f"HEAD:refs/heads/{name}" for name in names]
    # Refused each on its own, the rest created: a name under another pushed alongside it, a
    # name under an existing stream (streams are git branches).
    refused = ["HEAD:refs/heads/many/b000/under", f"{base}:refs/heads/many/taken/x"]

    done = git(clone, "push", "origin", *specs, *refused, check=False)

    assert done.returncode != 0
    assert "created 60 streams, many/b000 to many/b059" in done.stderr
    assert "'many/b000/under' cannot exist beside 'many/b000'" in done.stderr
    assert "'many/taken/x' cannot exist beside 'many/taken'" in done.stderr
    streams = rest.get_json(f"/repos/{REPO}/streams", limit=500)["streams"]
    assert {stream["name"]: stream["head"] for stream in streams if stream["name"].startswith("many/b")} == {
        name: ahead for name in names
    }
    directory = server.repository_dir(REPO)
    packed = (directory / "packed-refs").read_text()
    assert all(f"{ahead} refs/heads/{name}\n" in packed for name in names)
    assert not (directory / "refs" / "heads" / "many" / "b000").exists()  # no loose file for each
    listed = git(clone, "ls-remote", "--heads", "origin", "refs/heads/many/*").stdout
    assert listed.count("refs/heads/many/b") == 60
    fsck(directory)
    # A landing on one of them writes its ref loose, which wins over the packed one: within
    # AGENTGIT_MIRROR_FOLLOW_S of its commit (0.1 s), with the stream's other landings meanwhile.
    landed = rest.write(REPO, ahead, {"one.txt": "one\n"}, "one")
    rest.integrate(REPO, rest.open_proposal(REPO, landed, stream="many/b007")["id"])
    deadline = time.monotonic() + 10
    while git(directory, "rev-parse", "refs/heads/many/b007").stdout.strip() != landed:
        assert time.monotonic() < deadline, "the landing's ref was not written within 10 s"
        time.sleep(0.02)
    assert (directory / "refs" / "heads" / "many" / "b007").read_text() == f"{landed}\n"


def test_a_non_fast_forward_push_is_refused_with_what_to_do(remote, rest):
    remote.clone("nf", "-q")
    clone = remote.checkout("nf")
    before = _head(rest)
    git(clone, "commit", "-q", "--amend", "-m", "rewritten")

    refused = git(clone, "push", "--force", "origin", "HEAD:refs/heads/main", check=False)

    assert refused.returncode != 0
    assert "not a fast-forward; push to refs/for/main to have the server merge it" in refused.stderr
    assert _head(rest) == before


def test_an_atomic_push_moves_every_stream_or_none(remote, rest):
    remote.clone("at", "-q")
    clone = remote.checkout("at")
    base = _head(rest)
    git(clone, "push", "-q", "origin", "HEAD:refs/heads/atomic/one", "HEAD:refs/heads/atomic/two")
    ahead = commit_file(clone, "atomic.txt", "atomic\n")
    moved = rest.write(REPO, base, {"elsewhere.txt": "moved meanwhile\n"}, "meanwhile")
    rest.integrate(REPO, rest.open_proposal(REPO, moved, stream="atomic/two")["id"])
    git(clone, "fetch", "-q", "origin")
    # one is a fast-forward, two is not (forced past the client's own check): neither may move.
    refused = git(
        clone, "push", "--atomic", "origin", "HEAD:refs/heads/atomic/one", "+HEAD:refs/heads/atomic/two", check=False
    )

    assert refused.returncode != 0
    assert "not a fast-forward" in refused.stderr and "atomic push failed" in refused.stderr
    assert _head(rest, "atomic/one") == base and _head(rest, "atomic/two") == moved

    done = git(clone, "push", "--atomic", "origin", "HEAD:refs/heads/atomic/one", "HEAD:refs/heads/atomic/three")

    assert "atomic/one fast-forwarded to " + ahead in done.stderr and "created stream atomic/three" in done.stderr
    assert _head(rest, "atomic/one") == ahead and _head(rest, "atomic/three") == ahead
    assert git(remote.deployment.repository_dir(REPO), "rev-parse", "refs/heads/atomic/three").stdout.strip() == ahead


def test_a_tag_push_is_refused_with_the_reason(remote, rest):
    remote.clone("tag", "-q")
    clone = remote.checkout("tag")
    git(clone, "tag", "-a", "-m", "a release", "v1")

    refused = git(clone, "push", "origin", "refs/tags/v1", check=False)

    assert refused.returncode != 0
    assert "tags are not kept here: the refs are the streams" in refused.stderr
    assert "refs/tags/v1" not in git(clone, "ls-remote", "origin").stdout


def test_push_to_refs_for_merges_on_the_server(remote, rest):
    remote.clone("m", "-q")
    clone = remote.checkout("m")
    ours = commit_file(clone, "ours.txt", "ours\n")
    theirs = rest.write(REPO, _head(rest), {"theirs.txt": "theirs\n"}, "meanwhile over REST")
    rest.integrate(REPO, rest.open_proposal(REPO, theirs)["id"])

    done = git(clone, "push", "origin", "HEAD:refs/for/main")

    merged = _head(rest)
    assert f"merged into main as changeset {merged}" in done.stderr
    assert rest.get_json(f"/repos/{REPO}/changesets/{merged}")["parents"] == [theirs, ours]
    assert rest.file(REPO, "main", "ours.txt") == b"ours\n"


def test_push_to_refs_for_that_conflicts_shows_the_paths(remote, rest):
    remote.clone("x", "-q")
    clone = remote.checkout("x")
    commit_file(clone, "README.md", "# ours\n")
    theirs = rest.write(REPO, _head(rest), {"README.md": "# theirs\n"}, "theirs")
    rest.integrate(REPO, rest.open_proposal(REPO, theirs)["id"])

    refused = git(clone, "push", "origin", "HEAD:refs/for/main", check=False)

    assert refused.returncode != 0
    assert "remote:   content: README.md" in refused.stderr
    assert "conflict in 1 path(s)" in refused.stderr
    assert _head(rest) == theirs


def test_wrong_revoked_and_read_only_tokens_are_refused(remote, rest, server):
    wrong = remote.clone("wrong", "-q", token="agt_not-a-token", check=False)
    assert wrong.returncode != 0 and "Authentication failed" in wrong.stderr

    revoked = server.create_token("revoked", "read")
    server.manage("agentgit_credential", "revoke", "--prefix", revoked[:12])
    refused = remote.clone("revoked", "-q", token=revoked, check=False)
    assert refused.returncode != 0 and "Authentication failed" in refused.stderr

    reader = server.create_token("reader", "read", rate=100_000, burst=100_000)
    remote.clone("reader", "-q", token=reader)
    clone = remote.checkout("reader")
    before = _head(rest)
    commit_file(clone, "nope.txt", "nope\n")
    push = git(clone, "push", "origin", "HEAD:refs/heads/main", check=False)
    assert push.returncode != 0 and "403" in push.stderr
    assert _head(rest) == before


def test_git_asks_for_the_token_when_the_url_has_none(remote, rest, tmp_path):
    # The 401 carries a Basic challenge, so git asks its credential helper or askpass.
    askpass = tmp_path / "askpass.sh"
    askpass.write_text(f"#!/bin/sh\necho '{remote.token}'\n")
    askpass.chmod(askpass.stat().st_mode | stat.S_IEXEC)
    url = remote.url().replace(f"agent:{remote.token}@", "")

    git(remote.work, "clone", "-q", url, "asked", env={"GIT_ASKPASS": os.fspath(askpass)})

    assert git(remote.work / "asked", "rev-parse", "HEAD").stdout.strip() == _head(rest)


def test_every_repository_directory_survives_gc_prune_now(remote, rest, server):
    """After pushes, merges and conflicts, ``git gc --prune=now`` in the directory loses nothing."""
    open_head = rest.write(REPO, _head(rest), {"open.txt": "still open\n"}, "an open proposal")
    rest.open_proposal(REPO, open_head)
    lonely = rest.write(REPO, None, {"lonely.txt": "never proposed\n"}, "lonely")
    directory = server.repository_dir(REPO)

    git(directory, "gc", "--prune=now", "--quiet")

    assert not list(Path(directory, "objects").glob("??/*"))
    for rev in (open_head, lonely, "main"):
        assert rest.http.get(f"/repos/{REPO}/tree/{rev}").status_code == 200, rev
    history = rest.history(REPO, "main")
    for changeset in history:
        assert rest.http.get(f"/repos/{REPO}/changesets/{changeset}").status_code == 200
    fsck(directory)
    remote.clone("after-gc", "-q")
    fsck(remote.work / "after-gc")


def test_a_clone_of_ten_thousand_files_has_exactly_the_tree_the_rest_api_reports(server, rest, tmp_path):
    rest.create_repo("wide")
    operations = [
        {"op": "write", "path": f"d{n // 100:03d}/f{n:05d}.txt", "content": f"file {n}\n"} for n in range(10_000)
    ]
    head = rest.create_changeset("wide", None, operations, "ten thousand files")["id"]
    rest.integrate("wide", rest.open_proposal("wide", head)["id"])
    remote = Remote(server, "wide", server.token, tmp_path)

    remote.clone("wide", "-q")

    listed = git(remote.work / "wide", "ls-tree", "-r", "HEAD").stdout.splitlines()
    cloned = {line.split("\t")[1]: line.split()[2] for line in listed}
    reported = {}
    for directory in rest.tree("wide", "main"):
        assert directory["type"] == "dir"
        for entry in rest.tree("wide", "main", directory["path"]):
            reported[entry["path"]] = entry["id"]
    assert cloned == reported and len(cloned) == 10_000
    fsck(remote.work / "wide")


def test_a_bearer_token_works_and_a_missing_one_gets_a_basic_challenge(server, rest):
    import httpx

    url = f"{server.url}/git/{REPO}.git/info/refs?service=git-upload-pack"

    missing = httpx.get(url)
    bearer = httpx.get(url, headers={"Authorization": f"Bearer {server.token}"})

    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith('Basic realm="agentgit"')
    assert bearer.status_code == 200
    assert bearer.headers["content-type"] == "application/x-git-upload-pack-advertisement"
    assert f"{_head(rest)} refs/heads/main" in bearer.text
    unknown = httpx.get(f"{server.url}/git/nope.git/info/refs?service=git-upload-pack", auth=("a", server.token))
    assert unknown.status_code == 404 and "nope" in unknown.text
