"""The MCP tools with the SDK's own client: over stdio (``agentgit mcp``) and over streamable
HTTP at the server's ``/mcp``, both against a real server."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

TOOLS = {
    "read_file", "list_tree", "log", "diff", "blame", "list_proposals", "wait_for_events", "explain_policy",
    "search_code", "land_change", "open_proposal", "integrate_proposal", "review_proposal",
}  # fmt: skip
WRITERS = {"land_change", "open_proposal", "integrate_proposal", "review_proposal"}


def stdio(server, *args: str, token: str | None = None):
    script = Path(sys.executable).parent / "agentgit"
    env = {"AGENTGIT_URL": server.url, "AGENTGIT_TOKEN": token or server.token, "PATH": "/usr/bin:/bin"}
    if "PYTHONPATH" in os.environ:  # the client package under test, where it is not the one installed
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return McpClient(StdioServerParameters(command=str(script), args=["mcp", *args], env=env))


@asynccontextmanager
async def http(server, token: str | None = None):
    headers = {"Authorization": f"Bearer {token or server.token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as client:
        async with McpClient(streamable_http_client(f"{server.url}/mcp", http_client=client)) as session:
            yield session


async def call(session, name: str, **arguments):
    result = await session.call_tool(name, arguments)
    text = "\n".join(getattr(block, "text", "") for block in result.content)
    return result.is_error, result.structured_content, text


async def scenario(session, repo: str) -> None:
    """Land, read back, provoke a conflict and read its paths, through the tools."""
    listed = await session.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == TOOLS
    assert tools["read_file"].annotations.read_only_hint and not tools["land_change"].annotations.read_only_hint
    assert tools["land_change"].annotations.destructive_hint and tools["integrate_proposal"].annotations.idempotent_hint

    error, landed, _ = await call(
        session,
        "land_change",
        repo=repo,
        message="first",
        writes=[
            {"path": "src/a.py", "content": "a = 1\n"},
            {"path": "logo.bin", "content": base64.b64encode(b"\x89PNG\x00\xff").decode(), "encoding": "base64"},
        ],
    )
    assert not error and landed["outcome"] == "fast_forward", landed
    base = landed["stream_head"]

    error, _, text = await call(session, "read_file", repo=repo, path="src/a.py")
    assert not error and text == "a = 1\n"
    error, _, binary = await call(session, "read_file", repo=repo, path="logo.bin")
    assert base64.b64decode(binary.splitlines()[1]) == b"\x89PNG\x00\xff"
    error, tree, _ = await call(session, "list_tree", repo=repo, limit=1)
    assert [e["path"] for e in tree["entries"]] == ["logo.bin"] and tree["next"] == 1

    await call(session, "land_change", repo=repo, message="ours", writes=[{"path": "src/a.py", "content": "a = 2\n"}])
    error, conflict, _ = await call(
        session,
        "land_change",
        repo=repo,
        message="theirs",
        parent=base,
        writes=[{"path": "src/a.py", "content": "a = 3\n"}],
    )
    assert not error and conflict["outcome"] == "conflict"
    assert conflict["conflicts"] == [{"path": "src/a.py", "kind": "content"}] and "next_step" in conflict
    error, log, _ = await call(session, "log", repo=repo)
    assert conflict["stream_head"] == log["changesets"][0]["id"]

    error, _, diff = await call(session, "diff", repo=repo, from_rev=base, to_rev="main", stat_only=True)
    assert diff == "M src/a.py"
    error, _, patch = await call(session, "diff", repo=repo, from_rev=base, to_rev="main", max_bytes_per_file=200)
    assert "-a = 1\n+a = 2" in patch
    error, _, blame = await call(session, "blame", repo=repo, path="src/a.py")
    assert blame.endswith("a = 2")
    error, _, found = await call(session, "search_code", repo=repo, pattern="a = [0-9]")
    assert not error and found.splitlines()[0] == "src/a.py:1:a = 2", found
    error, _, found = await call(session, "search_code", repo=repo, pattern="A = 1", ignore_case=True, rev=base)
    assert found.splitlines()[0] == "src/a.py:1:a = 1", found
    error, _, found = await call(session, "search_code", repo=repo, pattern="PNG", mode="files")
    assert found.splitlines()[0] == "logo.bin:1 (binary)", found
    error, _, found = await call(session, "search_code", repo=repo, pattern="(")
    assert error and "invalid" in found
    error, proposals, _ = await call(session, "list_proposals", repo=repo, state="conflicted")
    assert [p["id"] for p in proposals["proposals"]] == [conflict["proposal"]]
    error, events, _ = await call(session, "wait_for_events", repo=repo, kinds=["proposal.conflict"], timeout_s=2)
    assert [e["data"]["proposal"] for e in events["events"]] == [conflict["proposal"]]


async def refuses_writes(session, repo: str, *, listed: bool) -> None:
    names = {tool.name for tool in (await session.list_tools()).tools}
    assert (names >= WRITERS) is listed and "read_file" in names
    error, _, text = await call(session, "land_change", repo=repo, message="x", writes=[{"path": "a", "content": "a"}])
    assert error, text
    return text


async def under_a_policy(author, reviewer, repo: str, server) -> None:
    """A landing the policy refuses is an answer naming what is unmet and the proposal that waits;
    a reviewer approves it, the checklist turns met, and it integrates."""
    tools = {tool.name: tool for tool in (await reviewer.list_tools()).tools}
    assert tools["explain_policy"].annotations.read_only_hint
    review = tools["review_proposal"].annotations
    assert not review.read_only_hint and not review.destructive_hint

    error, _, _ = await call(author, "land_change", repo=repo, message="base", writes=[{"path": "a", "content": "a"}])
    assert not error
    policy = {"rules": [{"streams": ["main"], "required_approvals": 1}]}
    headers = {"Authorization": f"Bearer {server.token}"}
    assert httpx.put(f"{server.url}/api/v1/repos/{repo}/policy", json=policy, headers=headers).status_code == 200

    error, refused, text = await call(
        author, "land_change", repo=repo, message="wants review", writes=[{"path": "b", "content": "b"}]
    )
    assert not error and refused["outcome"] == "policy_denied", text
    assert [item["requirement"] for item in refused["unmet"]] == ["approvals"] and "review_proposal" in refused[
        "next_step"
    ]
    waiting = refused["proposal"]
    error, explained, _ = await call(reviewer, "explain_policy", repo=repo, proposal_id=waiting)
    assert not error and explained["allowed"] is False
    assert [(r["requirement"], r["met"]) for r in explained["requirements"]] == [("approvals", False)]
    error, denied, _ = await call(author, "integrate_proposal", repo=repo, proposal_id=waiting)
    assert not error and denied["outcome"] == "policy_denied" and denied["proposal"] == waiting

    error, _, text = await call(author, "review_proposal", repo=repo, proposal_id=waiting, verdict="approve")
    assert error and "forbidden" in text  # the author's approval would not count
    error, made, _ = await call(
        reviewer, "review_proposal", repo=repo, proposal_id=waiting, verdict="approve", body="ok"
    )
    assert not error and made["verdict"] == "approve" and made["revision"] == 1
    error, explained, _ = await call(reviewer, "explain_policy", repo=repo, proposal_id=waiting)
    assert explained["allowed"] is True and explained["approvals"] == [made["reviewer"]]
    error, landed, _ = await call(author, "integrate_proposal", repo=repo, proposal_id=waiting)
    assert not error and landed["outcome"] == "fast_forward", landed


def test_tools_over_stdio(server, repo):
    async def run():
        async with stdio(server) as session:
            await scenario(session, repo)

    asyncio.run(run())


def test_tools_over_http(server, repo):
    async def run():
        async with http(server) as session:
            await scenario(session, repo)

    asyncio.run(run())


def test_reviews_and_policy_refusals_over_stdio(server, repo):
    async def run():
        async with stdio(server) as author, stdio(server, token=server.token_for("read,review")) as reviewer:
            await under_a_policy(author, reviewer, repo, server)

    asyncio.run(run())


def test_reviews_and_policy_refusals_over_http(server, repo):
    reviewer_token, reader = server.token_for("read,review"), server.token_for("read")

    async def run():
        async with http(server) as author, http(server, token=reviewer_token) as reviewer:
            await under_a_policy(author, reviewer, repo, server)
        async with http(server, token=reader) as session:  # reviewing needs the review scope
            error, _, text = await call(session, "review_proposal", repo=repo, proposal_id=1, verdict="comment")
            assert error and "review" in text and "forbidden" in text

    asyncio.run(run())


def test_read_only_mode_and_read_only_tokens_refuse_writes(server, repo):
    reader = server.token_for("read")

    async def run():
        async with stdio(server, "--read-only") as session:
            await refuses_writes(session, repo, listed=False)
        async with stdio(server, token=reader) as session:
            assert "forbidden" in await refuses_writes(session, repo, listed=True)
        async with http(server, token=reader) as session:
            assert "forbidden" in await refuses_writes(session, repo, listed=True)

    asyncio.run(run())
    assert (
        httpx.get(
            f"{server.url}/api/v1/repos/{repo}/streams/main", headers={"Authorization": f"Bearer {server.token}"}
        ).json()["head"]
        is None
    )


def test_the_tools_filter(server, repo):
    async def run():
        async with stdio(server, "--tools", "read_file,log") as session:
            assert {tool.name for tool in (await session.list_tools()).tools} == {"read_file", "log"}

    asyncio.run(run())


def test_mcp_over_http_needs_a_token(server):
    answer = httpx.post(f"{server.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "unauthenticated"
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("host", ["evil.example.com"])
def test_mcp_over_http_checks_the_host(server, host):
    answer = httpx.post(
        f"{server.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": f"Bearer {server.token}", "Host": host},
    )
    assert answer.status_code in (400, 421)


def test_the_parent_application_enters_and_leaves_the_sdk_lifespan():
    from agentgit_site.mcp import McpEndpoint

    endpoint = McpEndpoint()
    sent: list[str] = []

    async def run() -> None:
        messages: asyncio.Queue = asyncio.Queue()
        for kind in ("lifespan.startup", "lifespan.shutdown"):
            messages.put_nowait({"type": kind})

        async def send(message: dict) -> None:
            sent.append(message["type"])
            if message["type"] == "lifespan.startup.complete":
                assert endpoint._ready is not None and endpoint._ready.is_set()  # the session manager runs

        await endpoint.lifespan({"type": "lifespan"}, messages.get, send)
        assert endpoint._task.done()  # and has stopped

    asyncio.run(run())
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
