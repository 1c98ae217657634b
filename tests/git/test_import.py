"""agentgit_import: a local repository in, cloned back out with identical commit ids."""

from __future__ import annotations

import pytest

from tests.deployment import ApiClient, Deployment

from .conftest import commit_file, fsck, git


@pytest.fixture
def source(tmp_path):
    """A repository with history on three branches, a merge, a rename, and HEAD on trunk."""
    path = tmp_path / "source"
    path.mkdir()
    git(path, "init", "-q", "-b", "trunk")
    git(path, "config", "user.name", "Source")
    git(path, "config", "user.email", "source@example.com")
    commit_file(path, "a.txt", "".join(f"line {n}\n" for n in range(30)))
    git(path, "checkout", "-q", "-b", "feature/x")
    git(path, "mv", "a.txt", "renamed.txt")
    git(path, "commit", "-q", "-m", "rename")
    git(path, "checkout", "-q", "trunk")
    commit_file(path, "b.txt", "b\n")
    git(path, "merge", "-q", "--no-edit", "feature/x")
    git(path, "branch", "old", "HEAD~1")
    return path


def _refs(repository) -> dict[str, str]:
    out = git(repository, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/", "refs/remotes/").stdout
    return dict(line.split() for line in out.splitlines())


def test_import_round_trip_keeps_every_commit_id_and_runs_again_as_a_no_op(source, tmp_path):
    with Deployment("embedded") as deployment:
        first = deployment.manage("agentgit_import", "imported", f"file://{source}")
        assert "created, 4 changeset(s) recorded; streams created 2, fast-forwarded 1" in first
        deployment.start_server(workers=1)
        token = deployment.create_token("agent", rate=100_000, burst=100_000)
        host = deployment.url.removeprefix("http://")

        git(tmp_path, "clone", "-q", "--mirror", f"http://a:{token}@{host}/git/imported.git", "back")

        assert _refs(tmp_path / "back") == _refs(source)
        source_ids = git(source, "rev-list", "--all").stdout.split()
        assert sorted(git(tmp_path / "back", "rev-list", "--all").stdout.split()) == sorted(source_ids)
        assert git(tmp_path / "back", "symbolic-ref", "HEAD").stdout.strip() == "refs/heads/trunk"
        fsck(tmp_path / "back")
        with ApiClient(deployment.url, token) as rest:
            merge = git(source, "rev-parse", "feature/x").stdout.strip()
            recorded = rest.get_json(f"/repos/imported/changesets/{merge}")
            assert recorded["operations"] == [{"op": "rename", "from": "a.txt", "to": "renamed.txt"}]
            assert rest.log("imported", "trunk", path="renamed.txt", limit=10)["changesets"]

            assert "0 changeset(s) recorded; streams created 0, fast-forwarded 0, unchanged 3" in deployment.manage(
                "agentgit_import", "imported", str(source)
            )
            new = commit_file(source, "c.txt", "c\n")
            again = deployment.manage("agentgit_import", "imported", str(source))
            assert "1 changeset(s) recorded; streams created 0, fast-forwarded 1, unchanged 2" in again
            assert rest.head("imported", "trunk") == new
        fsck(deployment.repository_dir("imported"))


def test_a_history_with_every_oddity_pushes_with_mirror_and_clones_back_byte_for_byte(tmp_path):
    """git push --mirror of branches: the odd history (tests/git/odd_history.py) lands with its
    ids, its objects' bytes (an ISO-8859-1 message, a path that is not UTF-8, a submodule, a
    gpgsig header) are served back unchanged, and the REST reads show it as git shows it."""
    from .odd_history import build, git_bytes

    source = build(tmp_path / "source.git")
    with Deployment("embedded") as deployment:
        deployment.start_server(workers=1)
        token = deployment.create_token("agent", rate=100_000, burst=100_000)
        url = f"http://a:{token}@{deployment.url.removeprefix('http://')}/git/pushed.git"
        with ApiClient(deployment.url, token) as rest:
            rest.create_repo("pushed")
            pushed = git(source.git_dir, "push", "--mirror", url, check=False)
            assert pushed.returncode == 0, pushed.stderr

            git(tmp_path, "clone", "-q", "--mirror", url, "back")
            assert _refs(tmp_path / "back") == _refs(source.git_dir)
            for commit in (source.odd["latin1"], source.odd["signed"], source.odd["octopus"]):
                ours = git_bytes(tmp_path / "back", "cat-file", "commit", commit)
                assert ours == git_bytes(source.git_dir, "cat-file", "commit", commit)
            fsck(tmp_path / "back")
            latin1 = rest.get_json(f"/repos/pushed/changesets/{source.odd['latin1']}")
            assert latin1["message"] == "Café crème: édité\n"
            added = rest.get_json(f"/repos/pushed/changesets/{source.odd['invalid']}")["operations"]
            assert sorted(op["path"] for op in added) == ["back\\\\slash.txt", "caf\\xe9.txt"]
            log = rest.log("pushed", "main", limit=100)["changesets"]
            assert [c["id"] for c in log] == git(source.git_dir, "rev-list", "main").stdout.split()
        fsck(deployment.repository_dir("pushed"))
