"""The synchronous client: :class:`Client`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx

from . import _core
from ._core import STREAM_HEAD, Call, Config, Progress, seg
from .errors import AgentGitError, ApiError, error_from_response
from .types import Edit, Event, Landing, LogEntry, Outcome, Proposal, Repository, Stream

T = TypeVar("T")


class Client(_core.Endpoints):
    """AgentGit over HTTP, blocking. One connection pool; use as a context manager or ``close()``.

    ``Client(url, token)``; either may come from ``AGENTGIT_URL`` / ``AGENTGIT_TOKEN``. Retryable
    errors (``rate_limited``, ``unavailable``, ``aborted``, dropped connections) are retried up to
    ``retries`` times, waiting as the server says (``retry_after_ms``, ``Retry-After``), with the
    same ``Idempotency-Key``. ``transport`` is httpx's (tests, proxies).
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout_s: float = 60.0,
        retries: int = _core.DEFAULT_RETRIES,
        backoff_s: float = _core.BACKOFF_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.config = Config.resolve(url, token, timeout_s=timeout_s, retries=retries, backoff_s=backoff_s)
        self._http = httpx.Client(transport=transport, **self.config.http_options())

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the request loop --------------------------------------------------------------------

    def _run(self, call: Call) -> Any:
        return call.parse(self._send(call))

    def _send(self, call: Call, body: Callable[[], Iterator[bytes]] | None = None) -> httpx.Response:
        """The successful response to ``call``, retried as the policy says; else the error.

        ``body``: gives a fresh request body per attempt (streamed uploads).
        """

        def once() -> httpx.Response:
            response = self._http.request(
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

        return self._retrying(once, may_resend=call.may_resend, one_shot=call.one_shot)

    def _retrying(self, once: Callable[[], T], *, may_resend: bool, one_shot: bool = False) -> T:
        """``once()``, again after each retryable failure (``may_resend``: a request that may have
        reached the server can be sent again)."""
        attempt = 0
        error: AgentGitError
        while True:
            try:
                return once()
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
            time.sleep(_core.retry_delay(attempt, error, self.config))
            attempt += 1

    # -- lists -------------------------------------------------------------------------------

    def iter_repos(self, *, page_size: int | None = None) -> Iterator[Repository]:
        """Every repository, following the pages."""
        return self._follow(lambda cursor: self.list_repos(limit=page_size, cursor=cursor))

    def iter_streams(self, repo: str, *, page_size: int | None = None) -> Iterator[Stream]:
        return self._follow(lambda cursor: self.list_streams(repo, limit=page_size, cursor=cursor))

    def iter_proposals(
        self, repo: str, *, state: str | None = None, stream: str | None = None, page_size: int | None = None
    ) -> Iterator[Proposal]:
        return self._follow(
            lambda cursor: self.list_proposals(repo, state=state, stream=stream, limit=page_size, cursor=cursor)
        )

    def iter_log(
        self, repo: str, rev: str | None = None, *, path: str | None = None, page_size: int | None = None
    ) -> Iterator[LogEntry]:
        """The whole history from ``rev``, newest first, a page at a time."""
        return self._follow(lambda cursor: self.log(repo, rev, path=path, limit=page_size, cursor=cursor))

    @staticmethod
    def _follow(fetch) -> Iterator[Any]:
        cursor = None
        while True:
            page = fetch(cursor)
            yield from page.items
            if not page.next:
                return
            cursor = page.next

    # -- blobs, streamed -----------------------------------------------------------------------

    def upload_blob(self, repo: str, data: bytes | Path | IO[bytes], *, progress: Progress | None = None) -> str:
        """Store ``data`` (bytes, a path or an open binary file, streamed) as a blob; its id."""
        if isinstance(data, Path):
            with data.open("rb") as file:
                return self.upload_blob(repo, file, progress=progress)
        call, total, start = _core.upload_call(repo, data)

        def body() -> Iterator[bytes]:
            if start is not None:
                data.seek(start)  # type: ignore[union-attr]
            return _core.chunks(data, progress, total)

        return self._send(call, body).json()["id"]

    def download_blob(
        self, repo: str, blob_id: str, into: IO[bytes] | None = None, *, progress: Progress | None = None
    ) -> bytes | int:
        """A blob's bytes; with ``into`` (an open binary file) streamed into it, and its size returned."""
        return self._download(f"/repos/{seg(repo)}/blobs/{seg(blob_id)}", into, progress)

    def download_file(
        self, repo: str, rev: str, path: str, into: IO[bytes] | None = None, *, progress: Progress | None = None
    ) -> bytes | int:
        """Like :meth:`download_blob`, for a file at a revision."""
        return self._download(f"/repos/{seg(repo)}/files/{_core.path_of(rev)}/{_core.path_of(path)}", into, progress)

    def _download(self, path: str, into: IO[bytes] | None, progress: Progress | None) -> bytes | int:
        def once() -> bytes | int:
            with self._http.stream("GET", path) as response:
                if not response.is_success:
                    response.read()
                    raise error_from_response(response)
                total = _core.content_length(response)
                parts: list[bytes] = []
                done = 0
                for piece in response.iter_bytes(_core.CHUNK):
                    done += len(piece)
                    if into is not None:
                        into.write(piece)
                    else:
                        parts.append(piece)
                    if progress:
                        progress(done, total)
                return done if into is not None else b"".join(parts)

        # What was written into a file cannot be taken back: a dropped download is not resumed.
        return self._retrying(once, may_resend=into is None)

    # -- integration -------------------------------------------------------------------------

    def integrate(
        self,
        repo: str,
        proposal_id: int,
        *,
        wait_s: float | None = None,
        timeout_s: float = 120,
        idempotency_key: str | None = None,
        bypass: str | None = None,
    ) -> Outcome:
        """Integrate a proposal; its outcome (a conflict is an outcome, not an error). A 202 (not
        done within the server's wait) is polled until done, for at most ``timeout_s``. A policy's
        refusal raises :class:`~agentgit.errors.PolicyDenied`; an admin's ``bypass`` (the reason)
        lands it anyway, recorded."""
        call = _core.integrate_call(repo, proposal_id, wait_s, idempotency_key, bypass)
        response = self._send(call)
        doc = response.json()
        if response.status_code == 202:
            doc = self._outcome_of(repo, doc["operation"], timeout_s)
        return Outcome.from_api(doc)

    def land(
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
        """Land a change in one call: write ``edits`` on ``parent`` (default: the stream's head),
        propose and integrate it. Binary or large contents are uploaded (streamed) first; the
        landing itself is one request, retried with one Idempotency-Key."""
        plan = _core.plan_change(edits)
        for index, source in plan.uploads:
            plan.operations[index]["blob"] = self.upload_blob(repo, source, progress=progress)
        call = _core.land_call(
            repo, stream, _core.land_body(parent, message, plan.operations, provenance), wait_s, idempotency_key
        )
        response = self._send(call)
        answer = response.json()
        outcome = self._outcome_of(repo, answer["operation"], timeout_s) if response.status_code == 202 else None
        return Landing.from_api(_core.landing_doc(answer, outcome))

    def _outcome_of(self, repo: str, operation_id: int, timeout_s: float) -> dict:
        """The outcome document of an operation, polled until it is no longer queued."""
        deadline = time.monotonic() + timeout_s
        pause = 0.05
        while True:
            operation = self.get_operation(repo, operation_id)
            outcome = _core.settle(operation, operation_id, deadline, time.monotonic(), pause)
            if outcome is not None:
                return outcome
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    # -- events ------------------------------------------------------------------------------

    def events(
        self,
        repo: str,
        *,
        after: int | None = None,
        kinds: list[str] | None = None,
        stream: str | None = None,
        timeout_s: float | None = None,
        reconnect: bool = True,
    ) -> Iterator[Event]:
        """The repository's events from after ``after``, as they happen.

        The server ends each feed after ``timeout_s`` (its default otherwise); with ``reconnect``
        the iterator connects again with ``Last-Event-ID`` — after a dropped connection too — so
        no event is missed or repeated. Without it, the iterator ends with the feed.
        """
        last = after
        params = _core.events_params(kinds, stream, timeout_s)
        while True:
            headers = {"Accept": "text/event-stream"}
            if last is not None:
                headers["Last-Event-ID"] = str(last)

            def connect(headers: dict[str, str] = headers) -> httpx.Response:
                request = self._http.build_request(
                    "GET", f"/repos/{seg(repo)}/events", params=params, headers=headers, timeout=_core.STREAM_TIMEOUT
                )
                response = self._http.send(request, stream=True)
                if not response.is_success:
                    response.read()
                    response.close()
                    raise error_from_response(response)
                return response

            response = self._retrying(connect, may_resend=True) if reconnect else connect()
            try:
                parser = _core.SseParser()
                for line in response.iter_lines():
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
                response.close()
            if not reconnect:
                return
