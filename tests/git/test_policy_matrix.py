"""No path moves a protected stream without the policy's judgment: every surface (REST, git, MCP,
the CLI) against every stream-moving action, on a real server with the real git binary.

The policy asks one approval on ``main`` and ``release/*`` (so nobody may update them directly).
Each refused action leaves the stream where it was and says why; then an approval lands the
waiting proposal, and an admin's bypass lands another with its reason recorded.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.deployment import ApiClient

from .conftest import Remote, commit_file, git

REPO = "guarded"
POLICY = {"rules": [{"streams": ["main", "release/*"], "required_approvals": 1}]}


class Actors:
    def __init__(self, server, admin: ApiClient, agent: ApiClient, reviewer: ApiClient, agent_token: str) -> None:
        self.server, self.admin, self.agent, self.reviewer, self.agent_token = (
            server,
            admin,
            agent,
            reviewer,
            agent_token,
        )

    def head(self, stream: str = "main") -> str | None:
        return self.admin.head(REPO, stream)

    def approve(self, proposal: int) -> None:
        self.reviewer.request(
            "POST", f"/repos/{REPO}/proposals/{proposal}/reviews", json={"verdict": "approve"}, expect=(201,)
        )


@pytest.fixture(scope="module")
def actors(server):
    agent_token = server.create_token("matrix-agent", "read,write,integrate")
    reviewer_token = server.create_token("matrix-reviewer", "read,review")
    with (
        ApiClient(server.url, server.token) as admin,
        ApiClient(server.url, agent_token) as agent,
        ApiClient(server.url, reviewer_token) as reviewer,
    ):
        admin.create_repo(REPO)
        base = admin.write(REPO, None, {"README.md": "# guarded\n", "shared.txt": "one\n"}, "base")
        admin.integrate(REPO, admin.open_proposal(REPO, base)["id"])
        admin.create_stream(REPO, "release/1", base)
        admin.request("PUT", f"/repos/{REPO}/policy", json=POLICY)
        yield Actors(server, admin, agent, reviewer, agent_token)


def refusal(response: httpx.Response) -> dict:
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "policy_denied", error
    return error


# ----------------------------------------------------------------------------- REST


def test_rest_integrate_land_resolve_and_stream_changes_are_judged(actors):
    agent, before = actors.agent, actors.head()
    change = agent.write(REPO, before, {"a.txt": "a\n"}, "a")
    proposal = agent.open_proposal(REPO, change)["id"]
    error = refusal(agent.request("POST", f"/repos/{REPO}/proposals/{proposal}/integrate", json={}, expect=(403,)))
    assert [detail["requirement"] for detail in error["details"]] == ["approvals"]

    body = {"message": "land", "operations": [{"op": "write", "path": "b.txt", "content": "b\n"}]}
    landed = refusal(agent.request("POST", f"/repos/{REPO}/streams/main/land", json=body, expect=(403,)))
    assert agent.proposal(REPO, landed["proposal"])["state"] == "open"

    created = agent.request("POST", f"/repos/{REPO}/streams", json={"name": "release/2", "from": before}, expect=(403,))
    assert refusal(created)["details"][0]["requirement"] == "direct_update"
    deleted = actors.admin.request("DELETE", f"/repos/{REPO}/streams/release/1", expect=(403,))
    assert refusal(deleted)["details"][0]["requirement"] == "direct_update"
    assert actors.head() == before and actors.head("release/1") == before

    # Resolve: an approved change conflicts; its resolution is a new tree, so the approval is stale.
    mine = agent.write(REPO, before, {"shared.txt": "mine\n"}, "mine")
    theirs = agent.write(REPO, before, {"shared.txt": "theirs\n"}, "theirs")
    first, second = (agent.open_proposal(REPO, head)["id"] for head in (theirs, mine))
    actors.approve(first)
    actors.approve(second)
    assert agent.integrate(REPO, first)["outcome"] == "fast_forward"
    assert agent.integrate(REPO, second)["outcome"] == "conflict"
    moved = actors.head()
    resolution = {"stream_head": moved, "resolutions": [{"path": "shared.txt", "content": "both\n"}]}
    resolved = agent.request("POST", f"/repos/{REPO}/proposals/{second}/resolve", json=resolution, expect=(403,))
    assert [detail["requirement"] for detail in refusal(resolved)["details"]] == ["approvals"]
    assert actors.head() == moved
    actors.approve(second)  # of the resolution's tree
    assert agent.integrate(REPO, second)["outcome"] in ("fast_forward", "merge")


# ----------------------------------------------------------------------------- git


def test_git_pushes_to_refs_heads_are_refused_and_refs_for_waits_for_approval(actors, tmp_path):
    remote = Remote(actors.server, REPO, actors.agent_token, tmp_path)
    remote.clone("clone", "-q")
    clone = remote.checkout("clone")
    before = actors.head()
    pushed = commit_file(clone, "git.txt", "from git\n")

    for ref in ("HEAD:refs/heads/main", "HEAD:refs/heads/release/9"):
        refused = git(clone, "push", "origin", ref, check=False)
        assert refused.returncode != 0, refused.stderr
        assert "remote: policy_denied:" in refused.stderr and "remote:   direct_update:" in refused.stderr
    atomic = git(clone, "push", "--atomic", "origin", "HEAD:refs/heads/main", check=False)
    assert atomic.returncode != 0 and "remote:   direct_update:" in atomic.stderr
    admin_remote = Remote(actors.server, REPO, actors.server.token, tmp_path)
    deleted = git(clone, "push", admin_remote.url(), ":refs/heads/release/1", check=False)
    assert deleted.returncode != 0 and "remote:   direct_update:" in deleted.stderr
    assert actors.head() == before and actors.head("release/1") is not None

    proposed = git(clone, "push", "origin", "HEAD:refs/for/main")
    assert "awaits approval before it lands on main" in proposed.stderr
    assert "remote:   approvals: needs 1 approval" in proposed.stderr
    assert actors.head() == before
    waiting = [p for p in actors.admin.get_json(f"/repos/{REPO}/proposals", state="open")["proposals"]]
    proposal = next(p["id"] for p in waiting if p["head"] == pushed)
    actors.approve(proposal)
    assert actors.agent.integrate(REPO, proposal)["outcome"] in ("fast_forward", "merge")
    assert actors.admin.file(REPO, "main", "git.txt") == b"from git\n"


# ----------------------------------------------------------------------------- MCP and the CLI


async def _mcp(server, token: str, name: str, **arguments):
    import httpx2
    from mcp import Client as McpClient
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        async with McpClient(streamable_http_client(f"{server.url}/mcp", http_client=client)) as session:
            result = await session.call_tool(name, arguments)
            return "\n".join(getattr(block, "text", "") for block in result.content), result.structured_content


def test_mcp_tools_and_the_cli_cannot_move_a_protected_stream(actors):
    before = actors.head()
    text, _ = asyncio.run(
        _mcp(actors.server, actors.agent_token, "land_change", repo=REPO, message="mcp",
             writes=[{"path": "mcp.txt", "content": "m\n"}])
    )  # fmt: skip
    assert "policy_denied" in text or "approval" in text
    change = actors.agent.write(REPO, before, {"mcp2.txt": "m\n"}, "m")
    proposal = actors.agent.open_proposal(REPO, change)["id"]
    text, _ = asyncio.run(
        _mcp(actors.server, actors.agent_token, "integrate_proposal", repo=REPO, proposal_id=proposal)
    )
    assert "approval" in text
    assert actors.head() == before

    cli = Path(sys.executable).parent / "agentgit"
    env = {**os.environ, "AGENTGIT_URL": actors.server.url, "AGENTGIT_TOKEN": actors.agent_token, "AGENTGIT_REPO": REPO}
    done = subprocess.run(
        [str(cli), "land", "-m", "cli", "--write", "cli.txt=-"], input="c\n", env=env, capture_output=True, text=True
    )
    assert done.returncode != 0 and "approval" in (done.stdout + done.stderr)
    assert actors.head() == before


def test_an_admin_bypass_lands_and_says_why(actors):
    change = actors.agent.write(REPO, actors.head(), {"hotfix.txt": "fix\n"}, "hotfix")
    proposal = actors.agent.open_proposal(REPO, change)["id"]
    body = {"bypass": "the outage"}
    refused = actors.agent.request("POST", f"/repos/{REPO}/proposals/{proposal}/integrate", json=body, expect=(403,))
    assert refused.json()["error"]["code"] == "forbidden"
    landed = actors.admin.request("POST", f"/repos/{REPO}/proposals/{proposal}/integrate", json=body).json()
    assert landed["outcome"] in ("fast_forward", "merge")
    decision = actors.admin.proposal(REPO, proposal)["decision"]
    assert decision["bypass"]["reason"] == "the outage" and decision["allowed"] is True
