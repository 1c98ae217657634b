"""AgentGit's tools for agents over MCP (the official SDK's ``MCPServer``).

Twelve tools, each with ``ToolAnnotations``; their answers are sized for a context window: lists
and files come a page at a time with a continuation argument, diffs as raw text with a limit per
file (or paths only), and a conflict answers with the stream's current head and each
conflicting path with its kind, so the next call can fix it. A landing the repository's policy
refuses is an answer too (``outcome: "policy_denied"``): the unmet requirements and the proposal
that waits for them (review it with ``review_proposal``, check it with ``explain_policy``).

The tools talk to a *backend* with the async client's methods: :class:`~agentgit.AsyncClient`
for ``agentgit mcp`` (stdio), or the server's own services when the AgentGit server serves them
at ``/mcp`` (``repos/api/mcp_backend.py``). ``build_server(backend, read_only=, tools=)``:
``backend`` is a client, or a function of the request's ``Context`` giving one.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Literal, Protocol

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from .errors import AgentGitError, ApiError, PolicyDenied
from .types import (
    BlameLine,
    Diff,
    Edit,
    Event,
    Explanation,
    Landing,
    LogEntry,
    Outcome,
    Page,
    Proposal,
    Review,
    TreeEntry,
)
from .types import delete as delete_op
from .types import rename as rename_op
from .types import write as write_op

#: The most characters a tool answers at once (about 12 000 tokens).
MAX_ANSWER_CHARS = 48_000
DEFAULT_LINES = 400
DEFAULT_PATCH_BYTES_PER_FILE = 6_000


class Backend(Protocol):
    """What the tools need: the async client's methods of the same names."""

    async def read_file(self, repo: str, rev: str, path: str) -> bytes: ...
    async def tree(self, repo: str, rev: str, path: str = "") -> list[TreeEntry]: ...
    async def log(self, repo: str, rev: str | None = None, *, path: str | None = None, limit: int | None = None, cursor: str | None = None) -> Page[LogEntry]: ...  # fmt: skip
    async def diff(self, repo: str, from_rev: str, to_rev: str) -> Diff: ...
    async def blame(self, repo: str, rev: str, path: str) -> list[BlameLine]: ...
    async def search(self, repo: str, q: str, **options: Any) -> dict: ...
    async def land(self, repo: str, stream: str, edits: list[Edit | dict], message: str = "", *, parent: Any = ...) -> Landing: ...  # fmt: skip
    async def open_proposal(self, repo: str, stream: str, head: str, title: str = "") -> Proposal: ...
    async def integrate(self, repo: str, proposal_id: int) -> Outcome: ...
    async def review(self, repo: str, proposal_id: int, verdict: str, body: str = "") -> Review: ...
    async def explain(self, repo: str, proposal_id: int) -> Explanation: ...
    async def list_proposals(self, repo: str, *, state: str | None = None, stream: str | None = None, limit: int | None = None, cursor: str | None = None) -> Page[Proposal]: ...  # fmt: skip
    def events(self, repo: str, *, after: int | None = None, kinds: list[str] | None = None, timeout_s: float | None = None, reconnect: bool = True) -> AsyncIterator[Event]: ...  # fmt: skip


class FileWrite(BaseModel):
    """A file to write: ``content`` is UTF-8 text, or base64 with ``encoding: "base64"``."""

    path: str
    content: str = ""
    encoding: Literal["utf-8", "base64"] = "utf-8"
    mode: Literal["100644", "100755", "120000"] | None = None


class FileRename(BaseModel):
    source: str
    target: str


READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
#: Lands a new changeset: the stream's files change (some may be deleted), history only grows.
LAND = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
OPEN = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
#: Integrating a proposal twice answers the first outcome again.
INTEGRATE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
#: A review adds a verdict; it changes no file (and a second one is another review).
REVIEW = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)

CONFLICT_NEXT_STEP = (
    "The stream moved and these paths changed on both sides. Read each path at stream_head, redo your "
    "change on top of it, then land again with parent=stream_head (or without parent: the stream's head)."
)

POLICY_NEXT_STEP = (
    "The repository's policy refuses this landing until the unmet requirements are met; the proposal stays open. "
    "Another reviewer approves it (review_proposal), explain_policy shows what is still missing, then "
    "integrate_proposal lands it. Nothing changed on the stream."
)

Repo = Annotated[str, Field(description="Repository name.")]
ProposalId = Annotated[int, Field(ge=1, description="The proposal's id.")]
Rev = Annotated[str, Field(description="A stream name or a 40-hex changeset id.")]


def build_server(
    backend: Backend | Callable[[Context], Backend],
    *,
    read_only: bool = False,
    tools: list[str] | None = None,
    name: str = "agentgit",
    own_logging: bool = True,
) -> MCPServer:
    """The MCP server with AgentGit's tools; ``read_only`` keeps only those that change nothing,
    ``tools`` only the named ones (ValueError for a name that is not a tool). ``own_logging``
    False leaves the process's logging as it was (the SDK configures the root logger)."""
    resolve: Callable[[Context], Backend] = backend if callable(backend) else (lambda _ctx: backend)  # type: ignore[assignment]
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    server = MCPServer(
        name,
        log_level="WARNING",  # on stdio, stderr is the agent's log: no line per HTTP request
        instructions=(
            "AgentGit: a version-control server for coding agents. Read with read_file, list_tree, log, diff and "
            "blame; change a stream atomically with land_change (several files at once). A conflict is an answer, "
            "not a failure: it names the stream's head and the conflicting paths."
        ),
    )
    if not own_logging:
        root.handlers[:] = handlers
        root.setLevel(level)
    every = _tools(resolve)
    unknown = sorted(set(tools or ()) - {tool.__name__ for tool, _ in every})
    if unknown:
        raise ValueError(f"no tool named {', '.join(unknown)}; the tools are {', '.join(t.__name__ for t, _ in every)}")
    for tool, hints in every:
        if read_only and not hints.read_only_hint:
            continue
        if tools is not None and tool.__name__ not in tools:
            continue
        server.add_tool(tool, name=tool.__name__, description=(tool.__doc__ or "").strip(), annotations=hints)
    return server


def _tools(resolve: Callable[[Context], Backend]) -> list[tuple[Callable[..., Any], ToolAnnotations]]:
    async def read_file(
        repo: Repo,
        path: Annotated[str, Field(description="File path in the repository.")],
        ctx: Context,
        rev: Rev = "main",
        start_line: Annotated[int, Field(ge=1, description="First line to return (1-based).")] = 1,
        max_lines: Annotated[int, Field(ge=1, le=5000)] = DEFAULT_LINES,
    ) -> str:
        """Read a file at a revision, a window of lines at a time (the answer says how to continue).
        Binary files come as base64 (start_line then counts 48 KiB chunks)."""
        data = await _call(resolve(ctx).read_file(repo, rev, path))
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return _binary_window(data, start_line)
        lines = text.splitlines(keepends=True)
        window = lines[start_line - 1 : start_line - 1 + max_lines]
        body, cut = _fit("".join(window))
        shown = start_line - 1 + (body.count("\n") if cut else len(window))
        if cut or shown < len(lines):
            body += f"\n[lines {start_line}-{shown} of {len(lines)}; continue with start_line={shown + 1}]"
        return body

    async def list_tree(
        repo: Repo,
        ctx: Context,
        path: Annotated[str, Field(description="Directory; the root when empty.")] = "",
        rev: Rev = "main",
        limit: Annotated[int, Field(ge=1, le=1000)] = 200,
        cursor: Annotated[int, Field(ge=0, description="The previous answer's next.")] = 0,
    ) -> dict[str, Any]:
        """List a directory's entries (files and directories) at a revision, a page at a time."""
        entries = await _call(resolve(ctx).tree(repo, rev, path))
        page = entries[cursor : cursor + limit]
        more = cursor + limit < len(entries)
        return {
            "path": path.strip("/"),
            "entries": [{"path": e.path, "type": e.type, "mode": e.mode} for e in page],
            "next": cursor + limit if more else None,
        }

    async def log(
        repo: Repo,
        ctx: Context,
        rev: Annotated[str | None, Field(description="Where to start (default: the default stream).")] = None,
        path: Annotated[str | None, Field(description="Only changesets that touch this path.")] = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
        cursor: Annotated[str | None, Field(description="The previous answer's next.")] = None,
    ) -> dict[str, Any]:
        """The history, newest first: each changeset's id, first message line, author and time."""
        page = await _call(resolve(ctx).log(repo, rev, path=path, limit=limit, cursor=cursor))
        rows = [
            {"id": e.id, "message": _first_line(e.message), "author": e.author.get("name"), "time": e.time}
            for e in page.items
        ]
        return {"changesets": rows, "next": page.next}

    async def diff(
        repo: Repo,
        from_rev: Rev,
        to_rev: Rev,
        ctx: Context,
        stat_only: Annotated[bool, Field(description="Only the changed paths, no patch.")] = False,
        paths: Annotated[list[str] | None, Field(description="Only these paths' patches.")] = None,
        max_bytes_per_file: Annotated[int, Field(ge=200, le=200_000)] = DEFAULT_PATCH_BYTES_PER_FILE,
    ) -> str:
        """The changes between two revisions as raw text: a stat line per path, then the unified patch,
        cut at max_bytes_per_file per file (say paths=[...] with a larger limit for the rest)."""
        found = await _call(resolve(ctx).diff(repo, from_rev, to_rev))
        stat = [_stat_line(change.status, change.path, change.old_path) for change in found.changes]
        if stat_only or not found.patch:
            return _fit("\n".join(stat) or "(no changes)")[0]
        parts = ["\n".join(stat), ""]
        for file_path, patch in _split_patch(found.patch):
            if paths and file_path not in paths:
                continue
            encoded = patch.encode("utf-8")
            if len(encoded) > max_bytes_per_file:
                kept = encoded[:max_bytes_per_file].decode("utf-8", "ignore")
                patch = kept + f"\n[{file_path}: {len(encoded) - max_bytes_per_file} more bytes; diff with paths=[{file_path!r}] and a larger max_bytes_per_file]\n"  # fmt: skip
            parts.append(patch)
        body, cut = _fit("\n".join(parts))
        return body + ("\n[answer cut at the size limit: ask for fewer paths]" if cut else "")

    async def blame(
        repo: Repo,
        path: Annotated[str, Field(description="File path.")],
        ctx: Context,
        rev: Rev = "main",
        start_line: Annotated[int, Field(ge=1)] = 1,
        max_lines: Annotated[int, Field(ge=1, le=5000)] = DEFAULT_LINES,
    ) -> str:
        """Each line of a file with the changeset that last changed it ("number changeset text")."""
        lines = await _call(resolve(ctx).blame(repo, rev, path))
        window = lines[start_line - 1 : start_line - 1 + max_lines]
        body, _ = _fit("\n".join(f"{line.number}\t{line.changeset[:12]}\t{line.text}" for line in window))
        last = window[-1].number if window else start_line - 1
        if last < len(lines):
            body += f"\n[lines {start_line}-{last} of {len(lines)}; continue with start_line={last + 1}]"
        return body

    async def search_code(
        repo: Repo,
        pattern: Annotated[str, Field(description="An RE2 regular expression (or a literal with fixed=true).")],
        ctx: Context,
        rev: Annotated[str | None, Field(description="A stream or changeset id (default: the default stream).")] = None,
        fixed: Annotated[bool, Field(description="Match the pattern literally (git grep -F).")] = False,
        ignore_case: Annotated[bool, Field(description="Ignore case (git grep -i).")] = False,
        word: Annotated[bool, Field(description="Whole words only (git grep -w).")] = False,
        paths: Annotated[
            list[str] | None, Field(description="Only paths matching these globs ('src', '*.py').")
        ] = None,
        exclude: Annotated[list[str] | None, Field(description="Not paths matching these globs.")] = None,
        context: Annotated[int, Field(ge=0, le=20, description="Lines shown around each match.")] = 0,
        mode: Annotated[
            Literal["content", "files", "count"], Field(description="Lines, files, or a count.")
        ] = "content",
        target: Annotated[Literal["content", "paths"], Field(description="Search file contents or paths.")] = "content",
        limit: Annotated[int, Field(ge=1, le=1000)] = 100,
        cursor: Annotated[str | None, Field(description="The previous answer's next.")] = None,
    ) -> str:
        """Search the code at any revision, exactly as git grep -E would (RE2 syntax): "path:line:text"
        per match (mode=content), "path:count" (files), or the number of matching lines (count).
        Binary files that match are listed as such."""
        found = await _call(
            resolve(ctx).search(
                repo, pattern, rev=rev, fixed=fixed, ignore_case=ignore_case, word=word, paths=paths,
                exclude=exclude, context=context or None, mode=mode, target=target, limit=limit, cursor=cursor,
            )
        )  # fmt: skip
        return _search_text(found, mode, target)

    async def land_change(
        repo: Repo,
        message: Annotated[str, Field(description="The changeset's message.")],
        ctx: Context,
        writes: Annotated[list[FileWrite] | None, Field(description="Files to write (create or replace).")] = None,
        deletes: Annotated[list[str] | None, Field(description="Paths to delete.")] = None,
        renames: Annotated[list[FileRename] | None, Field(description="Paths to move.")] = None,
        stream: Annotated[str, Field(description="The stream to land on.")] = "main",
        parent: Annotated[
            str | None, Field(description="The changeset the change is based on; default: the stream's head.")
        ] = None,  # fmt: skip
    ) -> dict[str, Any]:
        """Land a change atomically in one call: write, delete and rename several files, propose and integrate.
        Answers the outcome (fast_forward, merge, or conflict with the paths and the stream's current head)."""
        edits: list[Edit | dict] = []
        for item in writes or []:
            content: str | bytes = item.content
            if item.encoding == "base64":
                try:
                    content = base64.b64decode(item.content, validate=True)
                except ValueError:
                    raise ToolError(f"{item.path}: content is not valid base64") from None
            edits.append(write_op(item.path, content, item.mode))
        edits += [delete_op(path) for path in deletes or []]
        edits += [rename_op(item.source, item.target) for item in renames or []]
        if not edits:
            raise ToolError("nothing to land: give writes, deletes or renames")
        on = {} if parent is None else {"parent": parent}  # else the stream's head
        try:
            landed = await _call(resolve(ctx).land(repo, stream, edits, message, **on), answer_denied=True)
        except PolicyDenied as denied:
            return _denied(denied)
        return _outcome(landed, changeset=landed.changeset, proposal=landed.proposal)

    async def open_proposal(
        repo: Repo,
        head: Annotated[str, Field(description="The changeset to land.")],
        ctx: Context,
        stream: str = "main",
        title: str = "",
    ) -> dict[str, Any]:
        """Open a proposal to land an existing changeset on a stream (integrate it with integrate_proposal)."""
        made = await _call(resolve(ctx).open_proposal(repo, stream, head, title))
        return _proposal(made)

    async def integrate_proposal(repo: Repo, proposal_id: int, ctx: Context) -> dict[str, Any]:
        """Integrate a proposal; answers the outcome (a conflict names the paths and the stream's head;
        policy_denied names the unmet requirements of the repository's policy)."""
        try:
            outcome = await _call(resolve(ctx).integrate(repo, proposal_id), answer_denied=True)
        except PolicyDenied as denied:
            return _denied(denied, proposal_id)
        return _outcome(outcome, proposal=proposal_id)

    async def review_proposal(
        repo: Repo,
        proposal_id: ProposalId,
        verdict: Annotated[
            Literal["approve", "reject", "comment"],
            Field(description="approve or reject the latest revision, or only comment."),
        ],
        ctx: Context,
        body: Annotated[str, Field(max_length=65536, description="The review's text.")] = "",
    ) -> dict[str, Any]:
        """Review a proposal's latest revision: approve, reject or comment (needs the review scope). A
        proposal's authors may only comment. A rejection blocks it until withdrawn or replaced by an approval."""
        made = await _call(resolve(ctx).review(repo, proposal_id, verdict, body))
        keys = ("id", "reviewer", "verdict", "revision")
        return {"proposal": proposal_id, **{key: made.raw.get(key) for key in keys}}

    async def explain_policy(repo: Repo, proposal_id: ProposalId, ctx: Context) -> dict[str, Any]:
        """What the repository's policy says of integrating a proposal now, without trying: allowed or not,
        and each requirement (approvals, code owners, rejections, denied paths), met or not, with who can meet it."""
        found = await _call(resolve(ctx).explain(repo, proposal_id))
        return {
            "proposal": proposal_id,
            "allowed": found.allowed,
            "policy_version": found.policy_version,
            "requirements": [item.raw for item in found.requirements],
            "approvals": found.approvals,
        }

    async def list_proposals(
        repo: Repo,
        ctx: Context,
        state: Literal["open", "integrated", "conflicted", "closed"] | None = None,
        stream: str | None = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """Proposals, newest first, a page at a time."""
        page = await _call(resolve(ctx).list_proposals(repo, state=state, stream=stream, limit=limit, cursor=cursor))
        return {"proposals": [_proposal(p) for p in page.items], "next": page.next}

    async def wait_for_events(
        repo: Repo,
        ctx: Context,
        after: Annotated[int, Field(ge=0, description="The last event id you have (0: from the start).")] = 0,
        kinds: Annotated[list[str] | None, Field(description="e.g. ['stream.integrate', 'proposal.conflict'].")] = None,
        timeout_s: Annotated[float, Field(ge=0, le=120)] = 20.0,
        max_events: Annotated[int, Field(ge=1, le=500)] = 50,
    ) -> dict[str, Any]:
        """Wait for the repository's next events after an id, up to timeout_s; answers them and the last id."""
        events = await _gather_events(resolve(ctx), repo, after, kinds, timeout_s, max_events)
        return {
            "events": [e.as_dict() for e in events],
            "last_id": events[-1].id if events else after,
            "more": len(events) >= max_events,
        }

    return [
        (read_file, READ),
        (list_tree, READ),
        (log, READ),
        (diff, READ),
        (blame, READ),
        (search_code, READ),
        (list_proposals, READ),
        (explain_policy, READ),
        (wait_for_events, READ),
        (land_change, LAND),
        (open_proposal, OPEN),
        (integrate_proposal, INTEGRATE),
        (review_proposal, REVIEW),
    ]


async def _call(awaitable: Any, *, answer_denied: bool = False) -> Any:
    """The backend's answer; its errors as tool errors the agent can read (code: message).
    ``answer_denied``: a policy's refusal is raised as it is, for the tool to answer as a value."""
    try:
        return await awaitable
    except ApiError as error:
        if answer_denied and isinstance(error, PolicyDenied):
            raise
        hint = " (retry later)" if error.retryable else ""
        raise ToolError(f"{error.code}: {error.message}{hint}") from None
    except AgentGitError as error:
        raise ToolError(str(error)) from None


async def _gather_events(
    backend: Backend, repo: str, after: int, kinds: list[str] | None, timeout_s: float, max_events: int
) -> list[Event]:
    """The events after ``after``: those there already, else the first ones to come within
    ``timeout_s``; once one came, more that follow within a moment."""
    events: list[Event] = []
    feed = backend.events(repo, after=after, kinds=kinds, timeout_s=timeout_s, reconnect=False)
    iterator = feed.__aiter__()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        while len(events) < max_events:
            wait = (deadline - loop.time()) if not events else 0.3
            if wait <= 0:
                break
            try:
                events.append(await asyncio.wait_for(iterator.__anext__(), wait))
            except (TimeoutError, StopAsyncIteration):
                break
    except AgentGitError as error:
        raise ToolError(str(error)) from None
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()
    return events


def _outcome(result: Landing | Outcome, **ids: Any) -> dict:
    answer = {
        "outcome": result.outcome,
        "stream_head": result.stream_head,
        **ids,
        "conflicts": [{"path": c.path, "kind": c.kind} for c in result.conflicts],
    }
    if result.conflicted:
        answer["next_step"] = CONFLICT_NEXT_STEP
    return answer


def _denied(error: PolicyDenied, proposal: int | None = None) -> dict:
    """A policy's refusal as an answer: what is unmet, and the proposal that waits for it."""
    return {
        "outcome": "policy_denied",
        "proposal": error.proposal if error.proposal is not None else proposal,
        "policy_version": error.policy_version,
        "unmet": error.requirements,
        "message": error.message,
        "next_step": POLICY_NEXT_STEP,
    }


def _proposal(proposal: Proposal) -> dict:
    keys = ("id", "stream", "head", "title", "state", "outcome", "stream_head")
    return {key: proposal.raw.get(key) for key in keys} | {
        "conflicts": [{"path": c.path, "kind": c.kind} for c in proposal.conflicts]
    }


def _fit(text: str) -> tuple[str, bool]:
    """``text`` within the answer limit, and whether it was cut (at a line end when possible)."""
    if len(text) <= MAX_ANSWER_CHARS:
        return text, False
    cut = text.rfind("\n", 0, MAX_ANSWER_CHARS)
    return text[: cut + 1 if cut > 0 else MAX_ANSWER_CHARS], True


def _binary_window(data: bytes, chunk: int) -> str:
    size = 48 * 1024
    start = (chunk - 1) * size
    piece = data[start : start + size]
    answer = f"[binary file, {len(data)} bytes; base64 of bytes {start}-{start + len(piece)}]\n"
    answer += base64.b64encode(piece).decode("ascii")
    if start + size < len(data):
        answer += f"\n[continue with start_line={chunk + 1}]"
    return answer


def _search_text(found: dict, mode: str, target: str) -> str:
    """A search's answer as text an agent reads: one line a match, the revision and paging last."""
    if mode == "count" and target != "paths":
        return f"{found['count']} matching line(s) at {found['rev']}" + (
            " (cut by the time limit)" if found.get("truncated") else ""
        )
    rows: list[str] = []
    if target == "paths":
        rows = [hit["path"] for hit in found["files"]]
    elif mode == "files":
        rows = [
            f"{hit['path']}:{hit['matches']}" + (" (binary)" if hit.get("binary") else "") for hit in found["files"]
        ]
    else:
        for hit in found["matches"]:
            if hit.get("binary"):
                rows.append(f"Binary file {hit['path']} matches")
                continue
            number = hit["line"]
            rows += [
                f"{hit['path']}-{number - len(hit.get('before', [])) + i}-{text}"
                for i, text in enumerate(hit.get("before", []))
            ]
            rows.append(f"{hit['path']}:{number}:{hit['text']}")
            rows += [f"{hit['path']}-{number + 1 + i}-{text}" for i, text in enumerate(hit.get("after", []))]
    body, cut = _fit("\n".join(rows) or "(no matches)")
    tail = f"\n[at {found['rev']}"
    if found.get("next"):
        tail += f"; more: continue with cursor={found['next']!r}"
    return body + ("\n[answer cut at the size limit: ask for fewer]" if cut else "") + tail + "]"


def _first_line(message: str) -> str:
    stripped = message.strip()
    return stripped.splitlines()[0] if stripped else ""


def _stat_line(status: str, path: str, old_path: str | None) -> str:
    letter = {"added": "A", "modified": "M", "deleted": "D", "renamed": "R"}.get(status, "?")
    return f"{letter} {old_path} -> {path}" if old_path else f"{letter} {path}"


_FILE_HEADER = re.compile(r"^diff --git a/(.*?) b/(.*)$", re.MULTILINE)


def _split_patch(patch: str) -> list[tuple[str, str]]:
    """The unified patch as (path, that file's patch) pairs."""
    starts = list(_FILE_HEADER.finditer(patch))
    if not starts:
        return [("", patch)]
    pieces = []
    for index, match in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(patch)
        pieces.append((match.group(2), patch[match.start() : end]))
    return pieces
