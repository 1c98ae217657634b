"""Pushes that must not keep anything: over the size limit, or cut off by a SIGKILL; and the
production mode (PostgreSQL, Redis, Celery workers) for a clone and a push."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import httpx
import pytest

from tests.deployment import ApiClient, Deployment

from .conftest import Remote, commit_file, fsck, git

REPO = "safe"


@pytest.fixture(scope="module", autouse=True)
def _repository(server):
    with ApiClient(server.url, server.token) as client:
        client.create_repo(REPO)
        base = client.write(REPO, None, {"README.md": "# safe\n"}, "base")
        client.integrate(REPO, client.open_proposal(REPO, base)["id"])


def _packs(server) -> set[str]:
    return {path.name for path in (server.repository_dir(REPO) / "objects" / "pack").glob("*.pack")}


def _incoming(server) -> list:
    return list((server.repository_dir(REPO) / "objects").glob("incoming-*"))


def _big_commit(clone, megabytes: int) -> str:
    (clone / "big.bin").write_bytes(os.urandom(megabytes * 1024 * 1024))  # incompressible
    git(clone, "add", "big.bin")
    git(clone, "commit", "-q", "-m", "big")
    return git(clone, "rev-parse", "HEAD").stdout.strip()


def test_a_push_over_the_limit_is_refused_and_nothing_is_kept(server, tmp_path):
    server.stop_server()
    server.start_server(workers=1, env={"AGENTGIT_GIT_MAX_PUSH_BYTES": "200000"})
    try:
        remote = Remote(server, REPO, server.token, tmp_path)
        remote.clone("c", "-q")
        clone = remote.checkout("c")
        _big_commit(clone, 1)
        packs = _packs(server)
        with ApiClient(server.url, server.token) as rest:
            head = rest.head(REPO)

            refused = git(clone, "push", "origin", "HEAD:refs/heads/main", check=False)

            assert refused.returncode != 0
            assert "over the limit of 200000 bytes" in refused.stderr
            assert rest.head(REPO) == head
        assert _packs(server) == packs and not _incoming(server)
    finally:
        server.stop_server()
        server.start_server(workers=1)


def test_a_push_reaching_an_object_that_is_not_whole_is_refused(server, tmp_path):
    # A tree already in the repository whose blob is not (as a crash of some other writer could
    # leave, or a hand-made `git mktree --missing`): a pushed commit of that tree passes
    # index-pack's own checks (the tree exists), so only the connectivity walk refuses it.
    name = "incomplete"
    with ApiClient(server.url, server.token) as rest:
        rest.create_repo(name)
        head = rest.write(name, None, {"README.md": "# whole\n"}, "base")
        rest.integrate(name, rest.open_proposal(name, head)["id"])
    directory = server.repository_dir(name)
    missing = "0123456789abcdef0123456789abcdef01234567"
    tree = subprocess.run(
        ["git", "--git-dir", os.fspath(directory), "mktree", "--missing"],
        input=f"100644 blob {missing}\tlost.txt\n", capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    commit = f"tree {tree}\nparent {head}\nauthor A <a@example.com> 1700000000 +0000\n"
    commit += "committer A <a@example.com> 1700000000 +0000\n\nreaches a lost blob\n"
    local = tmp_path / "local.git"
    git(tmp_path, "init", "-q", "--bare", os.fspath(local))
    commit_id = subprocess.run(
        ["git", "--git-dir", os.fspath(local), "hash-object", "-t", "commit", "-w", "--literally", "--stdin"],
        input=commit, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    pack = subprocess.run(
        ["git", "--git-dir", os.fspath(local), "pack-objects", "--stdout", "-q"],
        input=f"{commit_id}\n".encode(), capture_output=True, check=True,
    ).stdout  # fmt: skip
    command = f"{head} {commit_id} refs/heads/main\0report-status\n".encode()
    body = b"%04x" % (len(command) + 4) + command + b"0000" + pack
    packs = {path.name for path in (directory / "objects" / "pack").glob("*.pack")}

    answer = httpx.post(
        f"{server.url}/git/{name}.git/git-receive-pack",
        content=body,
        auth=("agent", server.token),
        headers={"Content-Type": "application/x-git-receive-pack-request"},
    )

    assert answer.status_code == 200
    assert b"unpack missing necessary objects" in answer.content and b"ng refs/heads/main" in answer.content
    with ApiClient(server.url, server.token) as rest:
        assert rest.head(name) == head
    assert {path.name for path in (directory / "objects" / "pack").glob("*.pack")} == packs
    assert not list((directory / "objects").glob("incoming-*"))


def test_a_sigkill_in_the_middle_of_a_push_loses_nothing_acknowledged(server, tmp_path):
    remote = Remote(server, REPO, server.token, tmp_path)
    remote.clone("k", "-q")
    clone = remote.checkout("k")
    acknowledged = commit_file(clone, "acknowledged.txt", "pushed before the crash\n")
    git(clone, "push", "-q", "origin", "HEAD:refs/heads/main")
    _big_commit(clone, 60)

    push = subprocess.Popen(
        ["git", "push", "origin", "HEAD:refs/heads/main"], cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while not any((path / "pack").exists() for path in _incoming(server)):  # index-pack is receiving
        assert time.monotonic() < deadline and push.poll() is None, "the push never reached index-pack"
        time.sleep(0.01)
    server.server.kill()
    push.communicate(timeout=60)
    assert push.returncode != 0

    server.start_server(workers=1)
    with ApiClient(server.url, server.token) as rest:
        assert rest.head(REPO) == acknowledged
        assert rest.file(REPO, "main", "acknowledged.txt") == b"pushed before the crash\n"
    directory = server.repository_dir(REPO)
    assert git(directory, "rev-parse", "refs/heads/main").stdout.strip() == acknowledged
    fsck(directory)
    git(directory, "gc", "--prune=now", "-q")
    fsck(directory)
    # The same push, again (the server came back on another port), now lands whole.
    git(clone, "remote", "set-url", "origin", remote.url())
    git(clone, "push", "-q", "origin", "HEAD:refs/heads/main")
    with ApiClient(server.url, server.token) as rest:
        assert rest.head(REPO) == git(clone, "rev-parse", "HEAD").stdout.strip()


def test_a_sigkill_right_after_the_answer_loses_nothing_of_the_push(server, tmp_path):
    """The server dies once git has its ``ok``, before it writes the pushed changesets' operation
    lists (AGENTGIT_CRASH_AT=push_answered): the stream moved, its changeset is recorded, and
    its operations are derived when first read."""
    server.stop_server()
    server.start_server(workers=1, env={"AGENTGIT_CRASH_AT": "push_answered"})
    remote = Remote(server, REPO, server.token, tmp_path)
    remote.clone("a", "-q")
    clone = remote.checkout("a")
    git(clone, "rm", "-q", "README.md")
    pushed = commit_file(clone, "answered.txt", "acknowledged, then the crash\n")

    done = git(clone, "push", "origin", "HEAD:refs/heads/main", check=False)

    assert done.returncode == 0, done.stderr
    assert f"main fast-forwarded to {pushed}" in done.stderr
    assert server.server.wait_exit(30) == -signal.SIGKILL
    server.start_server(workers=1)
    with ApiClient(server.url, server.token) as rest:
        assert rest.head(REPO) == pushed
        changeset = rest.get_json(f"/repos/{REPO}/changesets/{pushed}")
        blob = git(clone, "rev-parse", "HEAD:answered.txt").stdout.strip()
        assert sorted(changeset["operations"], key=lambda op: op["op"]) == [
            {"op": "delete", "path": "README.md"},
            {"op": "write", "path": "answered.txt", "blob": blob, "mode": "100644"},
        ]
        assert changeset["provenance"]["source"] == "git push"
        assert rest.file(REPO, "main", "answered.txt") == b"acknowledged, then the crash\n"
        assert rest.history(REPO, "main", "answered.txt")[0] == pushed
    # The directory's refs are the database's mirror, written within AGENTGIT_MIRROR_FOLLOW_S of
    # the landing: one the kill took first is written by recovery, which `make serve` runs first.
    server.manage("agentgit_recover")
    directory = server.repository_dir(REPO)
    assert git(directory, "rev-parse", "refs/heads/main").stdout.strip() == pushed
    git(directory, "gc", "--prune=now", "-q")
    fsck(directory)


def test_production_mode_clone_and_push_through_workers(tmp_path):
    with Deployment("production") as deployment:
        deployment.start_server(workers=2)
        deployment.start_worker()
        token = deployment.create_token("agent", rate=100_000, burst=100_000)
        with ApiClient(deployment.url, token) as rest:
            rest.create_repo(REPO)
            base = rest.write(REPO, None, {"README.md": "# production\n"}, "base")
            rest.integrate(REPO, rest.open_proposal(REPO, base)["id"])
            remote = Remote(deployment, REPO, token, tmp_path)
            remote.clone("c", "-q")
            clone = remote.checkout("c")
            pushed = commit_file(clone, "pushed.txt", "pushed\n")
            git(clone, "push", "-q", "origin", "HEAD:refs/heads/main")
            assert rest.head(REPO) == pushed
            theirs = rest.write(REPO, pushed, {"theirs.txt": "theirs\n"}, "theirs")
            rest.integrate(REPO, rest.open_proposal(REPO, theirs)["id"])
            commit_file(clone, "ours.txt", "ours\n")

            done = git(clone, "push", "origin", "HEAD:refs/for/main")

            merged = rest.head(REPO)
            assert f"merged into main as changeset {merged}" in done.stderr
            git(clone, "pull", "-q", "--ff-only", "origin", "main")
            assert git(clone, "rev-parse", "HEAD").stdout.strip() == merged
            fsck(clone)
            fsck(deployment.repository_dir(REPO))


def test_maintenance_beside_landings_pushes_and_clones_loses_nothing(server, tmp_path):
    import threading

    remote = Remote(server, REPO, server.token, tmp_path)
    stop = threading.Event()
    failures: list[str] = []

    def maintain_repeatedly() -> None:
        while not stop.is_set():
            try:
                server.manage("agentgit_maintain", "--force", REPO)
            except Exception as error:  # reported below, not lost in the thread
                failures.append(str(error))
                return

    maintainer = threading.Thread(target=maintain_repeatedly)
    maintainer.start()
    try:
        with ApiClient(server.url, server.token) as rest:
            remote.clone("pusher", "-q")
            clone = remote.checkout("pusher")
            for n in range(12):
                head = rest.write(REPO, rest.head(REPO), {f"rest-{n}.txt": f"{n}\n"}, f"rest {n}")
                rest.integrate(REPO, rest.open_proposal(REPO, head)["id"])
                git(clone, "pull", "-q", "--ff-only", "origin", "main")
                commit_file(clone, f"git-{n}.txt", f"{n}\n")
                git(clone, "push", "-q", "origin", "HEAD:refs/heads/main")
                remote.clone(f"reader-{n}", "-q", "--depth", "1")
            final = rest.head(REPO)
    finally:
        stop.set()
        maintainer.join(timeout=120)
    assert not failures, failures
    remote.clone("final", "-q")
    assert git(remote.work / "final", "rev-parse", "HEAD").stdout.strip() == final
    fsck(remote.work / "final")
    fsck(server.repository_dir(REPO))
    loose = git(server.repository_dir(REPO), "count-objects").stdout
    assert loose.startswith("0 objects") or int(loose.split()[0]) < 50, loose
