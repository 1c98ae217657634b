"""What the sync and async clients share: configuration, the endpoints as request descriptions
(:class:`Call`), the retry policy, the SSE parser and the planning of a change's operations.

No I/O happens here: :class:`Endpoints` builds a :class:`Call` per API method and hands it to
``self._run``, which the sync client runs with ``httpx.Client`` and the async one awaits with
``httpx.AsyncClient``.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

import httpx

from .errors import AgentGitError, ApiError, OperationPending, TransportError, error_from_body
from .types import (
    BlameLine,
    Changeset,
    Delete,
    Diff,
    Edit,
    Event,
    Explanation,
    LogEntry,
    Operation,
    Page,
    Policy,
    Proposal,
    Rename,
    Repository,
    Review,
    Stream,
    TreeEntry,
    Write,
)

DEFAULT_URL = "http://127.0.0.1:8000"
#: Retryable answers are retried this many times (so at most 1 + this many requests).
DEFAULT_RETRIES = 4
#: The first backoff when the server gives no hint; it doubles per attempt, up to MAX_BACKOFF_S.
BACKOFF_S = 0.2
MAX_BACKOFF_S = 30.0
#: Writes of text up to this size go inline in the change; larger or binary contents are uploaded.
INLINE_LIMIT = 1024 * 1024
#: Streamed uploads and downloads move this much at a time.
CHUNK = 64 * 1024
#: Methods that may be sent again after a dropped connection without doing anything twice.
_RESENDABLE = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})

Progress = Callable[[int, int | None], None]


@dataclass(frozen=True)
class Config:
    """Where the server is and how to talk to it: arguments first, then ``AGENTGIT_URL`` /
    ``AGENTGIT_TOKEN``, then the local default."""

    url: str
    token: str | None
    timeout_s: float = 60.0
    retries: int = DEFAULT_RETRIES
    backoff_s: float = BACKOFF_S

    @classmethod
    def resolve(
        cls,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout_s: float = 60.0,
        retries: int = DEFAULT_RETRIES,
        backoff_s: float = BACKOFF_S,
    ) -> Config:
        url = url or os.environ.get("AGENTGIT_URL") or DEFAULT_URL
        token = token or os.environ.get("AGENTGIT_TOKEN") or None
        return cls(url.rstrip("/"), token, timeout_s, retries, backoff_s)

    @property
    def api_url(self) -> str:
        return self.url if self.url.endswith("/api/v1") else self.url + "/api/v1"

    def headers(self) -> dict[str, str]:
        headers = {"User-Agent": "agentgit-python/0.1", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def http_options(self) -> dict[str, Any]:
        """Keyword arguments of ``httpx.Client`` / ``httpx.AsyncClient``."""
        return {"base_url": self.api_url, "headers": self.headers(), "timeout": self.timeout_s, "trust_env": False}


@dataclass
class Call:
    """One request and how to read its answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], Any]
    params: dict[str, Any] | None = None
    json: Any = None
    #: Raw bytes (a request body that is not JSON).
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: A request the server does once per key: it gets an Idempotency-Key, kept across retries.
    keyed: bool = False
    #: Sending it twice does no harm (a content-addressed upload), so a dropped connection is retried.
    resendable: bool = False
    #: Its body is a stream that can be read once (a pipe): once it may have been sent, never again.
    one_shot: bool = False
    #: Error statuses that are answers here (404 for "does this blob exist?").
    accept: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.params:
            self.params = {k: v for k, v in self.params.items() if v is not None}
        if self.keyed:
            self.headers.setdefault("Idempotency-Key", new_key())

    @property
    def may_resend(self) -> bool:
        return self.resendable or self.method in _RESENDABLE or "Idempotency-Key" in self.headers


def new_key() -> str:
    """A fresh idempotency key."""
    return str(uuid.uuid4())


def retry_delay(attempt: int, error: AgentGitError, config: Config) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based): the server's hint
    (``retry_after_ms``, else ``Retry-After``) when it gave one, else an exponential backoff."""
    if isinstance(error, ApiError) and error.retry_after_ms is not None:
        return min(MAX_BACKOFF_S, error.retry_after_ms / 1000)
    base = config.backoff_s * 2**attempt
    return min(MAX_BACKOFF_S, base * (0.5 + random.random() / 2))  # spread colliding clients


def should_retry(
    attempt: int, error: AgentGitError, config: Config, *, may_resend: bool, connected: bool, one_shot: bool = False
) -> bool:
    """Whether to send again after ``error``: retryable answers (rate_limited, unavailable,
    aborted) always; a dropped connection when the request never left or may be sent twice. A
    one-shot body is sent again only if it never left."""
    if attempt >= config.retries:
        return False
    if one_shot and connected:
        return False
    if isinstance(error, ApiError):
        return error.retryable
    if isinstance(error, TransportError):
        return may_resend or not connected
    return False


def transport_error(exc: httpx.TransportError) -> tuple[TransportError, bool]:
    """The client's error for an httpx one, and whether the request may have reached the server."""
    never_sent = isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))
    return TransportError(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__), not never_sent


# ------------------------------------------------------------------------------ paths


def seg(value: object) -> str:
    """One URL path segment."""
    return quote(str(value), safe="")


def path_of(value: str) -> str:
    """A stream name or file path in a URL: its '/' kept, everything else quoted."""
    return quote(value.strip("/"), safe="/")


def read_json(response: httpx.Response) -> Any:
    return response.json()


def _page(parse: Callable[[dict], Any], key: str) -> Callable[[httpx.Response], Page]:
    def read(response: httpx.Response) -> Page:
        doc = response.json()
        return Page([parse(item) for item in doc.get(key) or []], doc.get("next"), doc)

    return read


def _one(parse: Callable[[dict], Any]) -> Callable[[httpx.Response], Any]:
    return lambda response: parse(response.json())


class Endpoints:
    """The API's one-request methods, written once for both clients.

    Each method returns ``self._run(call)``: the result in the sync client, an awaitable of it
    in the async one.
    """

    def _run(self, call: Call) -> Any:
        raise NotImplementedError

    # -- repositories and streams --------------------------------------------------------

    def list_repos(self, *, limit: int | None = None, cursor: str | None = None) -> Page[Repository]:
        """One page of repositories, by name."""
        return self._run(
            Call("GET", "/repos", _page(Repository.from_api, "repos"), params={"limit": limit, "cursor": cursor})
        )

    def create_repo(self, name: str) -> Repository:
        """A new repository (scope ``admin``) with an empty ``main``."""
        return self._run(Call("POST", "/repos", _one(Repository.from_api), json={"name": name}))

    def get_repo(self, name: str) -> Repository:
        return self._run(Call("GET", f"/repos/{seg(name)}", _one(Repository.from_api)))

    def list_streams(self, repo: str, *, limit: int | None = None, cursor: str | None = None) -> Page[Stream]:
        return self._run(
            Call(
                "GET",
                f"/repos/{seg(repo)}/streams",
                _page(Stream.from_api, "streams"),
                params={"limit": limit, "cursor": cursor},
            )
        )

    def create_stream(self, repo: str, name: str, start: str | None = None) -> Stream:
        """A new stream at the revision ``start`` (empty when None)."""
        body = {"name": name, "from": start}
        return self._run(Call("POST", f"/repos/{seg(repo)}/streams", _one(Stream.from_api), json=body))

    def get_stream(self, repo: str, name: str) -> Stream:
        return self._run(Call("GET", f"/repos/{seg(repo)}/streams/{path_of(name)}", _one(Stream.from_api)))

    # -- content ---------------------------------------------------------------------------

    def has_blob(self, repo: str, blob_id: str) -> bool:
        return self._run(
            Call(
                "HEAD",
                f"/repos/{seg(repo)}/blobs/{seg(blob_id)}",
                lambda response: response.status_code == 200,
                accept=(404,),
            )
        )

    def create_changeset(
        self,
        repo: str,
        parent: str | None,
        operations: list[dict],
        message: str = "",
        provenance: dict | None = None,
    ) -> Changeset:
        """A changeset from raw API operations (``{"op": "write", "path", "content"|"blob"}``, …)."""
        body = {"parent": parent, "message": message, "operations": operations, "provenance": provenance or {}}
        return self._run(
            Call("POST", f"/repos/{seg(repo)}/changesets", _one(Changeset.from_api), json=body, keyed=True)
        )

    def get_changeset(self, repo: str, changeset_id: str) -> Changeset:
        return self._run(Call("GET", f"/repos/{seg(repo)}/changesets/{seg(changeset_id)}", _one(Changeset.from_api)))

    def tree(self, repo: str, rev: str, path: str = "") -> list[TreeEntry]:
        """The entries of the directory ``path`` (the root when empty) at ``rev``."""
        return self._run(
            Call(
                "GET",
                f"/repos/{seg(repo)}/tree/{path_of(rev)}",
                lambda response: [TreeEntry.from_api(e) for e in response.json()["entries"]],
                params={"path": path or None},
            )
        )

    def read_file(self, repo: str, rev: str, path: str) -> bytes:
        """A file's bytes at ``rev`` (use :meth:`download_file` to stream a large one)."""
        return self._run(
            Call("GET", f"/repos/{seg(repo)}/files/{path_of(rev)}/{path_of(path)}", lambda response: response.content)
        )

    # -- proposals and integration ---------------------------------------------------------

    def open_proposal(self, repo: str, stream: str, head: str, title: str = "") -> Proposal:
        body = {"stream": stream, "head": head, **({"title": title} if title else {})}
        return self._run(Call("POST", f"/repos/{seg(repo)}/proposals", _one(Proposal.from_api), json=body, keyed=True))

    def get_proposal(self, repo: str, proposal_id: int) -> Proposal:
        return self._run(Call("GET", f"/repos/{seg(repo)}/proposals/{seg(proposal_id)}", _one(Proposal.from_api)))

    def list_proposals(
        self,
        repo: str,
        *,
        state: str | None = None,
        stream: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[Proposal]:
        """One page of proposals, newest first."""
        params = {"state": state, "stream": stream, "limit": limit, "cursor": cursor}
        return self._run(
            Call("GET", f"/repos/{seg(repo)}/proposals", _page(Proposal.from_api, "proposals"), params=params)
        )

    def get_operation(self, repo: str, operation_id: int) -> Operation:
        return self._run(Call("GET", f"/repos/{seg(repo)}/operations/{seg(operation_id)}", _one(Operation.from_api)))

    # -- reviews and policies --------------------------------------------------------------

    def review(self, repo: str, proposal_id: int, verdict: str, body: str = "") -> Review:
        """Review the proposal's latest revision (scope ``review``): ``approve``, ``reject`` or
        ``comment``. Its authors may only comment (Forbidden otherwise)."""
        doc = {"verdict": verdict, **({"body": body} if body else {})}
        path = f"/repos/{seg(repo)}/proposals/{seg(proposal_id)}/reviews"
        return self._run(Call("POST", path, _one(Review.from_api), json=doc))

    def reviews(self, repo: str, proposal_id: int) -> list[Review]:
        """Every review of the proposal, oldest first (withdrawn ones too)."""
        return self._run(
            Call(
                "GET",
                f"/repos/{seg(repo)}/proposals/{seg(proposal_id)}/reviews",
                lambda response: [Review.from_api(item) for item in response.json()["reviews"]],
            )
        )

    def withdraw_review(self, repo: str, proposal_id: int, review_id: int) -> Review:
        """Withdraw your review: it no longer counts, and a rejection no longer blocks."""
        path = f"/repos/{seg(repo)}/proposals/{seg(proposal_id)}/reviews/{seg(review_id)}"
        return self._run(Call("DELETE", path, _one(Review.from_api)))

    def explain(self, repo: str, proposal_id: int) -> Explanation:
        """What the policy says of integrating the proposal now: each requirement, met or not."""
        path = f"/repos/{seg(repo)}/proposals/{seg(proposal_id)}/policy"
        return self._run(Call("GET", path, _one(Explanation.from_api)))

    def policy(self, repo: str) -> Policy:
        """The repository's policy in force (version 0 and no rules: none was ever set)."""
        return self._run(Call("GET", f"/repos/{seg(repo)}/policy", _one(Policy.from_api)))

    def set_policy(self, repo: str, document: dict) -> Policy:
        """Store ``document`` (``{"rules": [...]}``) as the next policy version (scope ``admin``)."""
        return self._run(Call("PUT", f"/repos/{seg(repo)}/policy", _one(Policy.from_api), json=document))

    # -- history ---------------------------------------------------------------------------

    def diff(self, repo: str, from_rev: str, to_rev: str) -> Diff:
        """The changes from ``from_rev`` to ``to_rev`` (renames detected) and a unified patch."""
        params = {"from": from_rev, "to": to_rev}
        return self._run(Call("GET", f"/repos/{seg(repo)}/diff", _one(Diff.from_api), params=params))

    def blame(self, repo: str, rev: str, path: str) -> list[BlameLine]:
        return self._run(
            Call(
                "GET",
                f"/repos/{seg(repo)}/blame/{path_of(rev)}/{path_of(path)}",
                lambda response: [BlameLine.from_api(line) for line in response.json()["lines"]],
            )
        )

    def log(
        self,
        repo: str,
        rev: str | None = None,
        *,
        path: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[LogEntry]:
        """One page of the history from ``rev`` (default: the default stream), newest first."""
        params = {"rev": rev, "path": path, "limit": limit, "cursor": cursor}
        return self._run(Call("GET", f"/repos/{seg(repo)}/log", _page(LogEntry.from_api, "changesets"), params=params))

    # -- search ----------------------------------------------------------------------------

    def search(
        self,
        repo: str,
        q: str,
        *,
        rev: str | None = None,
        fixed: bool = False,
        ignore_case: bool = False,
        word: bool = False,
        paths: list[str] | None = None,
        exclude: list[str] | None = None,
        context: int | None = None,
        mode: str | None = None,
        target: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict:
        """Code search at ``rev`` (default: the default stream), as ``git grep -E`` with RE2's syntax:
        the answer as API.md's "Search" spells it (``matches``, or ``files``, or ``count``, with
        ``truncated`` and ``next``)."""
        params = {
            "q": q,
            "rev": rev,
            "fixed": "1" if fixed else None,
            "ignore_case": "1" if ignore_case else None,
            "word": "1" if word else None,
            "path": paths or None,
            "exclude": exclude or None,
            "context": context,
            "mode": mode,
            "target": target,
            "limit": limit,
            "cursor": cursor,
        }
        return self._run(Call("GET", f"/repos/{seg(repo)}/search", lambda response: response.json(), params=params))

    # -- anything else ---------------------------------------------------------------------

    def api(self, method: str, path: str, *, json: Any = None, params: dict | None = None) -> Any:
        """Any endpoint: ``api("GET", "/repos/demo")``; the JSON answer (or the bytes, for raw ones)."""
        path = "/" + path.lstrip("/")
        if path.startswith("/api/v1/"):
            path = path[len("/api/v1") :]
        method = method.upper()

        def read(response: httpx.Response) -> Any:
            if response.headers.get("content-type", "").startswith("application/json"):
                return response.json()
            return response.content

        keyed = method == "POST" and any(path.endswith(s) for s in ("/changesets", "/proposals", "/integrate", "/land"))
        return self._run(Call(method, path, read, json=json, params=params, keyed=keyed))


# ------------------------------------------------------------------------------ landings

#: ``parent`` when not given: the server takes the stream's head.
STREAM_HEAD: Any = object()


@dataclass
class PlannedChange:
    """A change's operations as the API takes them; ``uploads`` are (operation index, source) pairs
    whose blob id goes into ``operations[index]["blob"]`` once uploaded."""

    operations: list[dict]
    uploads: list[tuple[int, bytes | Path | IO[bytes]]]


def plan_change(edits: list[Edit | dict]) -> PlannedChange:
    """Operations for ``edits``: small UTF-8 text inline, everything else uploaded first."""
    operations: list[dict] = []
    uploads: list[tuple[int, bytes | Path | IO[bytes]]] = []
    for edit in edits:
        if isinstance(edit, dict):
            operations.append(edit)
        elif isinstance(edit, Delete):
            operations.append({"op": "delete", "path": edit.path})
        elif isinstance(edit, Rename):
            operations.append({"op": "rename", "from": edit.source, "to": edit.target})
        elif isinstance(edit, Write):
            operation: dict = {"op": "write", "path": edit.path, **({"mode": edit.mode} if edit.mode else {})}
            inline = _inline_text(edit.content)
            if inline is not None:
                operation["content"] = inline
            else:
                uploads.append((len(operations), edit.content))  # type: ignore[arg-type]
            operations.append(operation)
        else:
            raise TypeError(f"an edit is write(), delete(), rename() or an operation dict, not {edit!r}")
    return PlannedChange(operations, uploads)


def _inline_text(content: object) -> str | None:
    if isinstance(content, str):
        return content if len(content.encode("utf-8")) <= INLINE_LIMIT else None
    if isinstance(content, bytes) and len(content) <= INLINE_LIMIT:
        try:
            return content.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(content, Path) and content.stat().st_size <= INLINE_LIMIT:
        return _inline_text(content.read_bytes())
    return None


def land_body(parent: Any, message: str, operations: list[dict], provenance: dict | None) -> dict:
    body: dict = {"message": message, "operations": operations}
    if parent is not STREAM_HEAD:
        body["parent"] = parent
    if provenance:
        body["provenance"] = provenance
    return body


def size_of(source: bytes | Path | IO[bytes]) -> int | None:
    """The bytes left to read from ``source``, when it can tell."""
    if isinstance(source, bytes):
        return len(source)
    if isinstance(source, Path):
        return source.stat().st_size
    try:
        if not source.seekable():
            return None
        here = source.tell()
        end = source.seek(0, os.SEEK_END)
        source.seek(here)
        return end - here
    except (AttributeError, OSError, ValueError):
        return None


def chunks(source: bytes | IO[bytes], progress: Progress | None, total: int | None) -> Iterator[bytes]:
    """``source`` a chunk at a time, reporting progress."""
    done = 0
    if isinstance(source, bytes):
        for start in range(0, len(source), CHUNK):
            piece = source[start : start + CHUNK]
            done += len(piece)
            if progress:
                progress(done, total)
            yield piece
        return
    while piece := source.read(CHUNK):
        done += len(piece)
        if progress:
            progress(done, total)
        yield piece


# ------------------------------------------------------------------------------ events


class SseParser:
    """Server-Sent Events, a line at a time (the lines without their end of line)."""

    def __init__(self) -> None:
        self._id: str | None = None
        self._kind = "message"
        self._data: list[str] = []

    def feed(self, line: str) -> tuple[int, str, dict] | None:
        """The event a blank line completes, as ``(id, kind, data)``; else None."""
        if not line:
            if not self._data:
                return None
            data, kind, event_id = "\n".join(self._data), self._kind, self._id
            self._data, self._kind = [], "message"
            try:
                doc = json.loads(data)
            except ValueError:
                doc = {"text": data}
            return int(event_id or 0), kind, doc if isinstance(doc, dict) else {"value": doc}
        if line.startswith(":"):
            return None  # a comment: the keep-alive
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "id":
            self._id = value
        elif name == "event":
            self._kind = value
        elif name == "data":
            self._data.append(value)
        return None


#: A feed is silent between events (a keep-alive every 15 s): its read timeout is above that.
STREAM_TIMEOUT = httpx.Timeout(10.0, read=60.0)


def wanted(event: Event, kinds: list[str] | None, stream: str | None) -> bool:
    """The feed's filters, applied by the client too (a server ignoring ``?kinds=`` loses nothing)."""
    if kinds and event.kind not in kinds:
        return False
    return not (stream and event.data.get("stream") not in (None, stream))


def content_length(response: httpx.Response) -> int | None:
    length = response.headers.get("Content-Length")
    return int(length) if length and length.isdigit() else None


def events_params(kinds: list[str] | None, stream: str | None, timeout_s: float | None) -> dict:
    return {"kinds": ",".join(kinds) if kinds else None, "stream": stream, "timeout": timeout_s}


# ------------------------------------------------------------------------------ multi-step calls


def integrate_call(
    repo: str, proposal_id: int, wait_s: float | None, key: str | None = None, bypass: str | None = None
) -> Call:
    path = f"/repos/{seg(repo)}/proposals/{seg(proposal_id)}/integrate"
    body = {} if bypass is None else {"bypass": bypass}
    return Call("POST", path, read_json, json=body, params={"wait": wait_s}, headers=_key(key), keyed=True)


def land_call(repo: str, stream: str, body: dict, wait_s: float | None, key: str | None = None) -> Call:
    path = f"/repos/{seg(repo)}/streams/{path_of(stream)}/land"
    return Call("POST", path, read_json, json=body, params={"wait": wait_s}, headers=_key(key), keyed=True)


def _key(key: str | None) -> dict[str, str]:
    """Headers naming the caller's own idempotency key (one it keeps across restarts); else one is made."""
    return {"Idempotency-Key": key} if key else {}


def upload_call(repo: str, source: bytes | IO[bytes]) -> tuple[Call, int | None, int | None]:
    """The blob upload of ``source``, its size if known, and where to rewind a file for a retry
    (None: a one-shot stream, which cannot be sent twice)."""
    total = size_of(source)
    start = None
    if not isinstance(source, bytes) and source.seekable():
        start = source.tell()
    headers = {"Content-Type": "application/octet-stream"}
    if total is not None:
        headers["Content-Length"] = str(total)
    # Content-addressed: sending it twice stores it once, if the bytes can be read again.
    one_shot = start is None and not isinstance(source, bytes)
    call = Call("POST", f"/repos/{seg(repo)}/blobs", read_json, headers=headers, resendable=True, one_shot=one_shot)
    return call, total, start


def settle(operation: Operation, operation_id: int, deadline: float, now: float, pause: float) -> dict | None:
    """An operation being polled: its outcome document when done, None to poll again; raises
    its error when it failed and OperationPending once past ``deadline``."""
    if operation.state == "done" and operation.outcome is not None:
        return operation.outcome.raw
    if operation.state == "failed":
        raise error_from_body({"error": operation.error or {}})
    if now + pause > deadline:
        raise OperationPending(f"operation {operation_id} still queued when the client stopped waiting", operation_id)
    return None


def landing_doc(answer: dict, outcome: dict | None) -> dict:
    """A landing's answer, completed with the polled outcome when it was 202 (queued)."""
    if outcome is None:
        return answer
    doc = {**outcome, **answer}
    doc.pop("state", None)
    return doc
