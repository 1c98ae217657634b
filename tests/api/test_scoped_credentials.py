"""Scoped credentials (README, "Scoped credentials"): a credential held to some repositories,
streams and paths, on every surface.

* A repository outside its list answers exactly as one that does not exist: REST (a view and the
  hot-read lane), SSE, WebSocket, git and MCP.
* A stream outside its patterns is 403 on every action that moves or makes one.
* A changeset, a landing or a git push touching a path outside its patterns is 403 naming them.
* The credentials API: list (no token), create (the token once), revoke.

In process for REST and SSE (Django's test client, and the whole ASGI application for the
hot-read lane); against a real server for git, the WebSocket and MCP.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from rest_framework.test import APIClient
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from repos.models import Changeset, Credential, Proposal, Stream
from tests.api.conftest import ALL_BUT_ADMIN, Api, client_with
from tests.api.test_errors import error
from tests.api.test_hot_reads import asgi_get, bearer, through_django  # noqa: F401 (a fixture)
from tests.client.test_mcp import call, http
from tests.deployment import ApiClient, Deployment
from tests.git.conftest import commit_file, git

# ----------------------------------------------------------------------------- repositories

db = pytest.mark.django_db(transaction=True)


@pytest.fixture
def repos(admin) -> Api:
    """Two repositories, ``mine`` and ``theirs``, each with a landed change on ``main``."""
    for name in ("mine", "theirs"):
        assert admin.post("/api/v1/repos", {"name": name}, format="json").status_code == 201
        owner = Api(admin, name)
        owner.land(owner.write(None, {"src/a.py": "a\n", "docs/a.md": "a\n"}))
    return Api(admin, "mine")


def held(scopes: list[str] | None = None, **reach) -> Api:
    """A client of ``mine`` whose credential is held to ``mine`` and to ``reach``."""
    return Api(client_with(scopes or ALL_BUT_ADMIN, repositories=["mine"], **reach), "mine")


READS = [
    "",
    "/streams",
    "/streams/main",
    "/proposals",
    "/log",
    "/tree/main",
    "/files/main/src/a.py",
    "/events?timeout=0",
]


@db
@pytest.mark.parametrize("suffix", READS)
def test_a_repository_outside_the_list_is_404_as_one_that_does_not_exist(repos, suffix):
    agent = held()

    outside = error(agent.client.get(f"/api/v1/repos/theirs{suffix}"), 404, "not_found")
    missing = error(agent.client.get(f"/api/v1/repos/nowhere{suffix}"), 404, "not_found")

    assert outside["message"] == "no repository named 'theirs'"
    assert missing["message"] == "no repository named 'nowhere'"
    assert agent.client.get(f"/api/v1/repos/mine{suffix}").status_code == 200


@db
def test_writes_to_a_repository_outside_the_list_are_404_and_write_nothing(repos):
    agent = held()
    changesets = Changeset.objects.count()

    refused = [
        agent.client.post("/api/v1/repos/theirs/changesets", {"parent": None, "operations": []}, format="json"),
        agent.client.post("/api/v1/repos/theirs/streams", {"name": "x"}, format="json"),
        agent.client.post("/api/v1/repos/theirs/streams/main/land", {"operations": []}, format="json"),
        agent.client.post("/api/v1/repos/theirs/blobs", b"x", content_type="application/octet-stream"),
    ]

    assert [error(answer, 404, "not_found")["message"] for answer in refused] == ["no repository named 'theirs'"] * 4
    assert Changeset.objects.count() == changesets
    assert not Stream.objects.filter(name="x").exists()


@db
@pytest.mark.parametrize("suffix", ["", "/streams/main"])
def test_the_hot_read_lane_refuses_a_repository_outside_the_list(repos, settings, through_django, suffix):  # noqa: F811
    settings.AGENTGIT = {**settings.AGENTGIT, "HOT_READS": True}
    agent = held()

    outside = asgi_get(f"/api/v1/repos/theirs{suffix}", bearer(agent.client.credential.token))
    answered_by_django = list(through_django)
    inside = asgi_get(f"/api/v1/repos/mine{suffix}", bearer(agent.client.credential.token))

    assert outside.status_code == 404 and outside.json()["error"]["message"] == "no repository named 'theirs'"
    assert answered_by_django == [f"/api/v1/repos/theirs{suffix}"]  # handed on, Django refused it
    assert inside.status_code == 200 and through_django == answered_by_django  # the lane answered this one


@db
def test_the_repository_list_has_only_the_repositories_in_reach(repos):
    def names(client) -> list[str]:
        return [repo["name"] for repo in client.get("/api/v1/repos").json()["repos"]]

    assert names(held().client) == ["mine"]
    assert names(client_with(ALL_BUT_ADMIN)) == ["mine", "theirs"]  # no limit: as before


@db
def test_an_admin_held_to_repositories_creates_only_those(repos):
    admin = client_with(["admin"], repositories=["mine", "next"])

    made = admin.post("/api/v1/repos", {"name": "next"}, format="json")
    refused = error(admin.post("/api/v1/repos", {"name": "other"}, format="json"), 403, "forbidden")

    assert made.status_code == 201
    assert "'other'" in refused["message"] and "mine, next" in refused["message"]
    assert admin.get("/api/v1/repos/other").status_code == 404


@db
def test_an_unscoped_credential_reaches_every_repository_stream_and_path(repos):
    agent = Api(client_with(ALL_BUT_ADMIN), "theirs")

    head = agent.write(agent.head(), {"anywhere/x.txt": "x\n"})
    agent.land(head)

    assert agent.head() == head
    assert agent.post("/streams", {"name": "any/stream", "from": head}).status_code == 201


# ----------------------------------------------------------------------------- streams

AGENT_STREAMS = {"streams": ["agent/*", "team/**"]}


def forbidden_stream(response, stream: str) -> None:
    refused = error(response, 403, "forbidden")
    assert f"stream {stream!r}" in refused["message"] and "agent/*, team/**" in refused["message"]
    assert refused["details"] == [{"stream": stream, "code": "stream_not_allowed", "message": refused["message"]}]


@db
def test_streams_are_created_and_deleted_only_within_the_patterns(repos):
    agent = held(["admin"], **AGENT_STREAMS)
    head = repos.head()

    forbidden_stream(agent.post("/streams", {"name": "release", "from": head}), "release")
    assert agent.post("/streams", {"name": "agent/one", "from": head}).status_code == 201
    assert agent.post("/streams", {"name": "team/a/b", "from": head}).status_code == 201
    assert repos.post("/streams", {"name": "release", "from": head}).status_code == 201
    forbidden_stream(agent.client.delete("/api/v1/repos/mine/streams/release"), "release")
    assert agent.client.delete("/api/v1/repos/mine/streams/agent/one").status_code == 204

    assert Stream.objects.filter(repository__name="mine", name="release").exists()


@db
def test_proposals_onto_a_stream_outside_the_patterns_are_refused_at_every_step(repos):
    agent = held(**AGENT_STREAMS)
    work = agent.write(repos.head(), {"src/b.py": "b\n"})
    proposals = Proposal.objects.count()

    forbidden_stream(agent.post("/proposals", {"stream": "main", "head": work}), "main")
    forbidden_stream(
        agent.post("/streams/main/land", {"operations": [{"op": "write", "path": "x", "content": "x"}]}), "main"
    )
    assert Proposal.objects.count() == proposals  # the refused landing left nothing behind

    # A proposal onto main opened by someone else: integrating, revising, resolving it are refused.
    theirs = repos.propose(work)
    forbidden_stream(agent.integrate(theirs), "main")
    forbidden_stream(agent.post(f"/proposals/{theirs}/revisions", {"head": work}), "main")
    resolve = {"stream_head": repos.head(), "resolutions": [{"path": "src/b.py", "content": "b\n"}]}
    forbidden_stream(agent.post(f"/proposals/{theirs}/resolve", resolve), "main")
    assert repos.head() != work and Proposal.objects.get(pk=theirs).state == "open"

    # Within the patterns, the same steps work.
    assert agent.post("/streams", {"name": "agent/x", "from": repos.head()}).status_code == 201
    landed = agent.post("/streams/agent/x/land", {"operations": [{"op": "write", "path": "y", "content": "y"}]})
    assert landed.status_code == 200 and landed.json()["outcome"] == "fast_forward"
    assert agent.land(work, "agent/x")["outcome"] == "merge"


# ----------------------------------------------------------------------------- paths

SRC_ONLY = {"paths": ["src/**", "!src/secret/**"]}


def forbidden_paths(response, *paths: str) -> dict:
    refused = error(response, 403, "forbidden")
    assert [detail["path"] for detail in refused["details"]] == list(paths)
    assert {detail["code"] for detail in refused["details"]} == {"path_not_allowed"}
    assert all(path in refused["message"] for path in paths) and "src/**" in refused["message"]
    return refused


@db
def test_a_changeset_touching_paths_outside_is_refused_naming_each(repos):
    agent = held(**SRC_ONLY)
    head = repos.head()
    changesets = Changeset.objects.count()

    body = {
        "parent": head,
        "operations": [
            {"op": "write", "path": "src/ok.py", "content": "ok\n"},
            {"op": "write", "path": "README.md", "content": "no\n"},
            {"op": "delete", "path": "src/secret/key"},
            {"op": "rename", "from": "src/a.py", "to": "docs/a.py"},
        ],
    }
    forbidden_paths(agent.post("/changesets", body), "README.md", "docs/a.py", "src/secret/key")
    forbidden_paths(
        agent.post("/streams/main/land", {"operations": [{"op": "rename", "from": "docs/a.md", "to": "src/a.md"}]}),
        "docs/a.md",
    )

    assert Changeset.objects.count() == changesets
    assert agent.write(head, {"src/ok.py": "ok\n", "src/deep/er.py": "e\n"})  # within: 201


# ----------------------------------------------------------------------------- the credentials API


@db
def test_the_credentials_api_round_trip(repos):
    admin = repos.client
    body = {
        "user": "robot",
        "scopes": ["read", "write"],
        "name": "ci",
        "repositories": ["mine"],
        "streams": ["agent/*"],
        "paths": ["src/**"],
        "rate": 5,
        "burst": 10,
    }

    made = admin.post("/api/v1/credentials", body, format="json")

    assert made.status_code == 201, made.content
    created = made.json()
    token = created.pop("token")
    assert token.startswith(created["token_prefix"]) and created["user"] == "robot"
    assert {k: created[k] for k in ("scopes", "repositories", "streams", "paths", "rate", "burst")} == {
        k: body[k] for k in ("scopes", "repositories", "streams", "paths", "rate", "burst")
    }
    robot = APIClient()
    robot.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert [r["name"] for r in robot.get("/api/v1/repos").json()["repos"]] == ["mine"]
    assert robot.get("/api/v1/repos/theirs").status_code == 404

    listing = admin.get("/api/v1/credentials")
    assert listing.status_code == 200
    listed = next(item for item in listing.json()["credentials"] if item["id"] == created["id"])
    assert {**listed, "last_used": None} == {**created, "last_used": None}  # robot has used it since
    assert token not in listing.content.decode() and "token_hash" not in listing.content.decode()
    assert Credential.objects.get(pk=created["id"]).token_hash not in listing.content.decode()

    assert admin.delete(f"/api/v1/credentials/{created['id']}").status_code == 204
    assert admin.delete(f"/api/v1/credentials/{created['id']}").status_code == 204  # revoked already: the same
    error(robot.get("/api/v1/repos"), 401, "unauthenticated")
    error(admin.delete("/api/v1/credentials/999999"), 404, "not_found")


@db
def test_the_credentials_api_needs_an_admin_held_to_no_repository(repos):
    body = {"user": "x", "scopes": ["read"]}
    for client in (client_with(ALL_BUT_ADMIN), client_with(["admin"], repositories=["mine"])):
        error(client.get("/api/v1/credentials"), 403, "forbidden")
        error(client.post("/api/v1/credentials", body, format="json"), 403, "forbidden")
        error(client.delete(f"/api/v1/credentials/{client.credential.pk}"), 403, "forbidden")
    assert not Credential.objects.filter(user__username="x").exists()


@db
@pytest.mark.parametrize(
    "fields, field",
    [
        ({"repositories": ["../up"]}, "repositories.0"),
        ({"streams": [""]}, "streams.0"),
        ({"paths": ["src/**", "# a comment"]}, "paths.1"),
        ({"paths": ["src/**", "!"]}, "paths.1"),  # pathspec's ValueError, not a 500
        ({"paths": ["[z-a]"]}, "paths.0"),  # re's error, not a 500
        ({"streams": ["a\nb"]}, "streams.0"),
        ({"scopes": []}, "scopes"),
        ({"user": "no spaces"}, "user"),
        ({"rate": "5"}, "rate"),
    ],
)
def test_the_credentials_api_refuses_bad_input_by_field_and_creates_nobody(repos, fields, field):
    refused = error(
        repos.client.post("/api/v1/credentials", {"user": "y", "scopes": ["read"], **fields}, format="json"),
        400,
        "invalid",
    )

    assert field in [detail.get("field") for detail in refused["details"]], refused
    assert not Credential.objects.filter(user__username="y").exists()


# ----------------------------------------------------------------------------- a real server


@pytest.fixture(scope="module")
def served():
    """A real server with ``mine`` and ``theirs`` (a landed change each), an admin token, and
    ``token(**reach)`` for tokens held to ``mine`` and to ``reach``."""
    with Deployment("embedded") as server:
        server.token = server.create_token("owner", rate=100_000, burst=100_000)
        server.start_server()
        server.port = int(server.url.rsplit(":", 1)[1])
        with ApiClient(server.url, server.token) as rest:
            for name in ("mine", "theirs"):
                rest.create_repo(name)
                base = rest.write(name, None, {"src/a.py": "a\n", "docs/a.md": "a\n"}, "base")
                rest.integrate(name, rest.open_proposal(name, base)["id"])
            rest.create_stream("mine", "agent/m", rest.head("mine"))

        def token(scopes: str = "read,write,integrate", **reach: str) -> str:
            return server.create_token("agent", scopes, repos="mine", rate=100_000, burst=100_000, **reach)

        server.token_for = token
        yield server


def git_url(server, token: str, repo: str) -> str:
    return f"http://agent:{token}@127.0.0.1:{server.port}/git/{repo}.git"


def test_git_refuses_a_repository_outside_the_list_as_one_that_does_not_exist(served, tmp_path):
    token = served.token_for()

    outside = git(tmp_path, "clone", git_url(served, token, "theirs"), "theirs", check=False)
    missing = git(tmp_path, "clone", git_url(served, token, "nowhere"), "nowhere", check=False)
    git(tmp_path, "clone", "-q", git_url(served, token, "mine"), "mine")
    pushed = git(tmp_path / "mine", "push", git_url(served, token, "theirs"), "HEAD:refs/heads/x", check=False)
    fetched = git(tmp_path / "mine", "fetch", git_url(served, token, "theirs"), check=False)

    assert outside.returncode != 0 and "not_found: no repository named 'theirs'" in outside.stderr
    assert missing.stderr.replace("nowhere", "theirs") == outside.stderr.replace("nowhere", "theirs")
    for refused in (pushed, fetched):
        assert refused.returncode != 0 and "no repository named 'theirs'" in refused.stderr
    assert (tmp_path / "mine" / "src" / "a.py").read_text() == "a\n"


def test_git_push_to_a_stream_outside_the_patterns_is_refused(served, tmp_path):
    token = served.token_for(streams="agent/*")
    git(tmp_path, "clone", "-q", git_url(served, token, "mine"), "clone")
    clone = tmp_path / "clone"
    git(clone, "config", "user.email", "a@example.com")
    git(clone, "config", "user.name", "A")
    commit_file(clone, "src/b.py", "b\n")

    for ref in ("refs/heads/main", "refs/for/main", "refs/heads/release"):
        refused = git(clone, "push", "origin", f"HEAD:{ref}", check=False)
        assert refused.returncode != 0, ref
        assert f"may not update the stream '{ref.rsplit('/', 1)[1]}'" in refused.stderr and "agent/*" in refused.stderr
    git(clone, "push", "-q", "origin", "HEAD:refs/heads/agent/b")

    with ApiClient(served.url, served.token) as rest:
        assert rest.head("mine", "agent/b") == git(clone, "rev-parse", "HEAD").stdout.strip()
        rest.request("GET", "/repos/mine/streams/release", expect=(404,))


def test_git_push_touching_paths_outside_is_refused_whole_naming_them(served, tmp_path):
    token = served.token_for(paths="src/**")
    git(tmp_path, "clone", "-q", git_url(served, token, "mine"), "clone")
    clone = tmp_path / "clone"
    git(clone, "config", "user.email", "a@example.com")
    git(clone, "config", "user.name", "A")
    allowed = commit_file(clone, "src/c.py", "c\n")
    git(clone, "branch", "inside")
    commit_file(clone, "docs/c.md", "c\n")
    commit_file(clone, "src/d.py", "d\n")  # a later commit within the paths hides nothing

    with ApiClient(served.url, served.token) as rest:
        before = rest.head("mine")
        for ref in ("refs/heads/main", "refs/for/main", "refs/heads/agent/new"):
            refused = git(clone, "push", "origin", f"HEAD:{ref}", "inside:refs/heads/inside", check=False)
            assert refused.returncode != 0, ref
            assert "outside: docs/c.md" in refused.stderr and "may not change docs/c.md" in refused.stderr
            assert "outside: src/" not in refused.stderr
            assert "[remote rejected] inside -> inside" in refused.stderr  # refused whole
        assert rest.head("mine") == before
        rest.request("GET", "/repos/mine/streams/inside", expect=(404,))

        git(clone, "push", "-q", "origin", f"{allowed}:refs/heads/main")
        assert rest.head("mine") == allowed


def test_the_websocket_refuses_a_repository_outside_the_list_with_4404(served):
    token = served.token_for()
    base = f"ws://127.0.0.1:{served.port}/ws/repos"

    with pytest.raises(ConnectionClosed) as closed:
        with connect(f"{base}/theirs/events?token={token}", open_timeout=10) as socket:
            socket.recv(timeout=10)
    with connect(f"{base}/mine/events?token={token}", open_timeout=10) as socket:
        first = json.loads(socket.recv(timeout=10))

    assert closed.value.rcvd.code == 4404 and closed.value.rcvd.reason == "no repository named 'theirs'"
    assert first["event"] == "repository.created"


def test_sse_over_a_real_server_refuses_a_repository_outside_the_list(served):
    token = served.token_for()
    answer = httpx.get(
        f"{served.url}/api/v1/repos/theirs/events", params={"timeout": 0}, headers={"Authorization": f"Bearer {token}"}
    )
    assert answer.status_code == 404 and answer.json()["error"]["message"] == "no repository named 'theirs'"


def test_mcp_holds_a_credential_to_its_repositories_streams_and_paths(served):
    token = served.token_for(streams="agent/*", paths="src/**")

    async def run() -> None:
        async with http(served, token=token) as session:
            failed, _, outside = await call(session, "read_file", repo="theirs", path="src/a.py")
            assert failed and "not_found" in outside and "no repository named 'theirs'" in outside
            failed, _, main = await call(
                session,
                "land_change",
                repo="mine",
                message="m",
                stream="main",
                writes=[{"path": "src/x.py", "content": "x"}],
            )
            assert failed and "forbidden" in main and "'main'" in main
            failed, _, docs = await call(
                session,
                "land_change",
                repo="mine",
                message="m",
                stream="agent/m",
                writes=[{"path": "docs/x", "content": "x"}],
            )
            assert failed and "forbidden" in docs and "docs/x" in docs
            failed, _, text = await call(session, "open_proposal", repo="mine", stream="main", head="main")
            assert failed and "'main'" in text
            failed, _, inside = await call(session, "read_file", repo="mine", path="src/a.py")
            assert not failed and inside == "a\n"

    asyncio.run(run())
