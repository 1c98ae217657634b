"""The asynchronous client: :class:`AsyncClient`, the sync :class:`~agentgit.Client` awaited.

Its one-request methods are the shared :class:`~agentgit._core.Endpoints` (each returns an
awaitable of what the sync client returns); the multi-step ones mirror the sync client's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import httpx

from . import _core
from ._core import STREAM_HEAD, Call, Config, Progress, seg
from .errors import AgentGitError, ApiError, error_from_response
from .types import (
    BlameLine,
    Changeset,
    Diff,
    Edit,
    Event,
    Explanation,
    Landing,
    LogEntry,
    Operation,
    Outcome,
    Page,
    Policy,
    Proposal,
    Repository,
    Review,
    Stream,
    TreeEntry,
)

T = TypeVar("T")


# The shared endpoints at run time; for a type checker, the ``async def`` signatures below.
_Endpoints = object if TYPE_CHECKING else _core.Endpoints


class AsyncClient(_Endpoints):  # type: ignore[misc, valid-type]
    """AgentGit over HTTP with ``await``; configured, retried and typed as :class:`~agentgit.Client`."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout_s: float = 60.0,
        retries: int = _core.DEFAULT_RETRIES,
        backoff_s: float = _core.BACKOFF_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = Config.resolve(url, token, timeout_s=timeout_s, retries=retries, backoff_s=backoff_s)
        self._http = httpx.AsyncClient(transport=transport, **self.config.http_options())

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    if TYPE_CHECKING:  # the shared endpoints (agentgit._core.Endpoints), as a type checker sees them here

        async def list_repos(self, *, limit: int | None = None, cursor: str | None = None) -> Page[Repository]: ...
        async def create_repo(self, name: str) -> Repository: ...
        async def get_repo(self, name: str) -> Repository: ...
        async def list_streams(self, repo: str, *, limit: int | None = None, cursor: str | None = None) -> Page[Stream]: ...  # fmt: skip
        async def create_stream(self, repo: str, name: str, start: str | None = None) -> Stream: ...
        async def get_stream(self, repo: str, name: str) -> Stream: ...
        async def has_blob(self, repo: str, blob_id: str) -> bool: ...
        async def create_changeset(self, repo: str, parent: str | None, operations: list[dict], message: str = "", provenance: dict | None = None) -> Changeset: ...  # fmt: skip
        async def get_changeset(self, repo: str, changeset_id: str) -> Changeset: ...
        async def tree(self, repo: str, rev: str, path: str = "") -> list[TreeEntry]: ...
        async def read_file(self, repo: str, rev: str, path: str) -> bytes: ...
        async def open_proposal(self, repo: str, stream: str, head: str, title: str = "") -> Proposal: ...
        async def get_proposal(self, repo: str, proposal_id: int) -> Proposal: ...
        async def list_proposals(self, repo: str, *, state: str | None = None, stream: str | None = None, limit: int | None = None, cursor: str | None = None) -> Page[Proposal]: ...  # fmt: skip
        async def get_operation(self, repo: str, operation_id: int) -> Operation: ...
        async def review(self, repo: str, proposal_id: int, verdict: str, body: str = "") -> Review: ...
        async def reviews(self, repo: str, proposal_id: int) -> list[Review]: ...
        async def withdraw_review(self, repo: str, proposal_id: int, review_id: int) -> Review: ...
        async def explain(self, repo: str, proposal_id: int) -> Explanation: ...
        async def policy(self, repo: str) -> Policy: ...
        async def set_policy(self, repo: str, document: dict) -> Policy: ...
        async def diff(self, repo: str, from_rev: str, to_rev: str) -> Diff: ...
        async def blame(self, repo: str, rev: str, path: str) -> list[BlameLine]: ...
        async def log(self, repo: str, rev: str | None = None, *, path: str | None = None, limit: int | None = None, cursor: str | None = None) -> Page[LogEntry]: ...  # fmt: skip
        async def search(self, repo: str, q: str, *, rev: str | None = None, fixed: bool = False, ignore_case: bool = False, word: bool = False, paths: list[str] | None = None, exclude: list[str] | None = None, context: int | None = None, mode: str | None = None, target: str | None = None, limit: int | None = None, cursor: str | None = None) -> dict: ...  # fmt: skip
        async def api(self, method: str, path: str, *, json: Any = None, params: dict | None = None) -> Any: ...

    # -- the request loop --------------------------------------------------------------------

    async def _run(self, call: Call) -> Any:
        return call.parse(await self._send(call))

    async def _send(self, call: Call, body: Callable[[], Any] | None = None) -> httpx.Response:
        async def once() -> httpx.Response:
            response = await self._http.request(
                call.method,
                call.path,
                params=call.params,
                json=call.json,
                content=body() if body else call.content,
                headers=call.headers,
            )
            if not response.is_success and response.status_code not in call.accept:
                raise error_from_response(response)
            return response

        return await self._retrying(once, may_resend=call.may_resend, one_shot=call.one_shot)

    async def _retrying(self, once: Callable[[], Awaitable[T]], *, may_resend: bool, one_shot: bool = False) -> T:
        attempt = 0
        error: AgentGitError
        while True:
            try:
                return await once()
            except httpx.TransportError as exc:
                error, connected = _core.transport_error(exc)
                if not _core.should_retry(
                    attempt, error, self.config, may_resend=may_resend, connected=connected, one_shot=one_shot
                ):
                    raise error from exc
            except ApiError as exc:
                error = exc
                if not _core.should_retry(
                    attempt, error, self.config, may_resend=may_resend, connected=True, one_shot=one_shot
                ):
                    raise
            await asyncio.sleep(_core.retry_delay(attempt, error, self.config))
            attempt += 1

    # -- lists -------------------------------------------------------------------------------

    def iter_repos(self, *, page_size: int | None = None) -> AsyncIterator[Repository]:
        return self._follow(lambda cursor: self.list_repos(limit=page_size, cursor=cursor))

    def iter_streams(self, repo: str, *, page_size: int | None = None) -> AsyncIterator[Stream]:
        return self._follow(lambda cursor: self.list_streams(repo, limit=page_size, cursor=cursor))

    def iter_proposals(
        self, repo: str, *, state: str | None = None, stream: str | None = None, page_size: int | None = None
    ) -> AsyncIterator[Proposal]:
        return self._follow(
            lambda cursor: self.list_proposals(repo, state=state, stream=stream, limit=page_size, cursor=cursor)
        )

    def iter_log(
        self, repo: str, rev: str | None = None, *, path: str | None = None, page_size: int | None = None
    ) -> AsyncIterator[LogEntry]:
        return self._follow(lambda cursor: self.log(repo, rev, path=path, limit=page_size, cursor=cursor))

    @staticmethod
    async def _follow(fetch: Callable[[str | None], Any]) -> AsyncIterator[Any]:
        cursor = None
        while True:
            page: Page = await fetch(cursor)
            for item in page.items:
                yield item
            if not page.next:
                return
            cursor = page.next

    # -- blobs, streamed -----------------------------------------------------------------------

    async def upload_blob(self, repo: str, data: bytes | Path | IO[bytes], *, progress: Progress | None = None) -> str:
        """Store ``data`` (bytes, a path or an open binary file, streamed) as a blob; its id."""
        if isinstance(data, Path):
            with data.open("rb") as file:
                return await self.upload_blob(repo, file, progress=progress)
        call, total, start = _core.upload_call(repo, data)

        async def body() -> AsyncIterator[bytes]:
            if start is not None:
                data.seek(start)  # type: ignore[union-attr]
            for piece in _core.chunks(data, progress, total):
                yield piece

        return (await self._send(call, body)).json()["id"]

    async def download_blob(
        self, repo: str, blob_id: str, into: IO[bytes] | None = None, *, progress: Progress | None = None
    ) -> bytes | int:
        return await self._download(f"/repos/{seg(repo)}/blobs/{seg(blob_id)}", into, progress)

    async def download_file(
        self, repo: str, rev: str, path: str, into: IO[bytes] | None = None, *, progress: Progress | None = None
    ) -> bytes | int:
        path = f"/repos/{seg(repo)}/files/{_core.path_of(rev)}/{_core.path_of(path)}"
        return await self._download(path, into, progress)

    async def _download(self, path: str, into: IO[bytes] | None, progress: Progress | None) -> bytes | int:
        async def once() -> bytes | int:
            async with self._http.stream("GET", path) as response:
                if not response.is_success:
                    await response.aread()
                    raise error_from_response(response)
                total = _core.content_length(response)
                parts: list[bytes] = []
                done = 0
                async for piece in response.aiter_bytes(_core.CHUNK):
                    done += len(piece)
                    if into is not None:
                        into.write(piece)
                    else:
                        parts.append(piece)
                    if progress:
                        progress(done, total)
                return done if into is not None else b"".join(parts)

        return await self._retrying(once, may_resend=into is None)

    # -- integration -------------------------------------------------------------------------

    async def integrate(
        self,
        repo: str,
        proposal_id: int,
        *,
        wait_s: float | None = None,
        timeout_s: float = 120,
        idempotency_key: str | None = None,
        bypass: str | None = None,
    ) -> Outcome:
        response = await self._send(_core.integrate_call(repo, proposal_id, wait_s, idempotency_key, bypass))
        doc = response.json()
        if response.status_code == 202:
            doc = await self._outcome_of(repo, doc["operation"], timeout_s)
        return Outcome.from_api(doc)

    async def land(
        self,
        repo: str,
        stream: str,
        edits: list[Edit | dict],
        message: str = "",
        *,
        parent: Any = STREAM_HEAD,
        provenance: dict | None = None,
        wait_s: float | None = None,
        timeout_s: float = 120,
        progress: Progress | None = None,
        idempotency_key: str | None = None,
    ) -> Landing:
        """As :meth:`agentgit.Client.land`."""
        plan = _core.plan_change(edits)
        for index, source in plan.uploads:
            plan.operations[index]["blob"] = await self.upload_blob(repo, source, progress=progress)
        call = _core.land_call(
            repo, stream, _core.land_body(parent, message, plan.operations, provenance), wait_s, idempotency_key
        )
        response = await self._send(call)
        answer = response.json()
        outcome = await self._outcome_of(repo, answer["operation"], timeout_s) if response.status_code == 202 else None
        return Landing.from_api(_core.landing_doc(answer, outcome))

    async def _outcome_of(self, repo: str, operation_id: int, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        pause = 0.05
        while True:
            operation = await self.get_operation(repo, operation_id)
            outcome = _core.settle(operation, operation_id, deadline, time.monotonic(), pause)
            if outcome is not None:
                return outcome
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    # -- events ------------------------------------------------------------------------------

    async def events(
        self,
        repo: str,
        *,
        after: int | None = None,
        kinds: list[str] | None = None,
        stream: str | None = None,
        timeout_s: float | None = None,
        reconnect: bool = True,
    ) -> AsyncIterator[Event]:
        """As :meth:`agentgit.Client.events`: resumes with ``Last-Event-ID`` after the feed ends or drops."""
        last = after
        params = _core.events_params(kinds, stream, timeout_s)
        while True:
            headers = {"Accept": "text/event-stream"}
            if last is not None:
                headers["Last-Event-ID"] = str(last)

            async def connect(headers: dict[str, str] = headers) -> httpx.Response:
                request = self._http.build_request(
                    "GET", f"/repos/{seg(repo)}/events", params=params, headers=headers, timeout=_core.STREAM_TIMEOUT
                )
                response = await self._http.send(request, stream=True)
                if not response.is_success:
                    await response.aread()
                    await response.aclose()
                    raise error_from_response(response)
                return response

            response = await (self._retrying(connect, may_resend=True) if reconnect else connect())
            try:
                parser = _core.SseParser()
                async for line in response.aiter_lines():
                    parsed = parser.feed(line)
                    if parsed is not None:
                        event = Event(*parsed)
                        last = event.id
                        if _core.wanted(event, kinds, stream):
                            yield event
            except httpx.TransportError as exc:
                if not reconnect:
                    raise _core.transport_error(exc)[0] from exc
            finally:
                await response.aclose()
            if not reconnect:
                return
