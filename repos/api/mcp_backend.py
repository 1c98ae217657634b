"""The MCP tools' backend inside the server: the tools of ``agentgit.mcp_server`` calling the
services directly (as the REST views do), for the credential that authenticated the request.

Answers are the client package's typed results built from the same documents the REST API
answers, so a tool behaves the same over stdio (through the HTTP client) and at ``/mcp``. Each
method checks the scope its REST endpoint needs; errors become the client's typed errors.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from agentgit import _core
from agentgit import errors as client_errors
from agentgit.types import (
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

from ..errors import Invalid, Unavailable, api_error
from ..models import Credential, Operation, Repository
from ..services import content, integration, landing, policies, proposals, reads
from ..services.credentials import require_proposal_stream, require_repository, require_scope
from ..services.relay import Filter, TooFarBehind, relay
from ..services.repositories import get_repository
from .errors import error_from_dict
from .serializers import ProposalSerializer
from .serializers_proposals import ReviewSerializer
from .views_search import answer as search_answer

#: The longest a tool waits for an integration before answering that it is still queued.
INTEGRATE_WAIT_S = 60.0


class ServiceBackend:
    """The backend of one request: its credential, and the services."""

    def __init__(self, credential: Credential) -> None:
        self.credential = credential

    def _repository(self, name: str) -> Repository:
        """The repository, if the credential reaches it (else the 404 of one that does not exist)."""
        require_repository(self.credential, name)
        return get_repository(name)

    async def read_file(self, repo: str, rev: str, path: str) -> bytes:
        return await self._run("read", lambda: reads.read_file(self._repository(repo), rev, path))

    async def tree(self, repo: str, rev: str, path: str = "") -> list[TreeEntry]:
        entries = await self._run("read", lambda: reads.tree(self._repository(repo), rev, path))
        return [TreeEntry.from_api(entry) for entry in entries]

    async def log(
        self, repo: str, rev: str | None = None, *, path: str | None = None, limit: int | None = None, cursor=None
    ) -> Page[LogEntry]:
        doc = await self._run("read", lambda: reads.log(self._repository(repo), rev, path, limit=limit, cursor=cursor))
        return Page([LogEntry.from_api(entry) for entry in doc["changesets"]], doc["next"], doc)

    async def diff(self, repo: str, from_rev: str, to_rev: str) -> Diff:
        return Diff.from_api(await self._run("read", lambda: reads.diff(self._repository(repo), from_rev, to_rev)))

    async def blame(self, repo: str, rev: str, path: str) -> list[BlameLine]:
        lines = await self._run("read", lambda: reads.blame(self._repository(repo), rev, path))
        return [BlameLine.from_api(line) for line in lines]

    async def search(self, repo: str, q: str, **options: Any) -> dict:
        options = _search_options(options)  # then the REST view's answer, cursors and all
        return await self._run("read", lambda: search_answer(self._repository(repo), q, **options))

    async def land(
        self, repo: str, stream: str, edits: list[Edit | dict], message: str = "", *, parent: Any = landing.STREAM_HEAD
    ) -> Landing:
        return Landing.from_api(await self._run("write", lambda: self._land(repo, stream, edits, message, parent)))

    def _land(self, repo: str, stream: str, edits: list[Edit | dict], message: str, parent: Any) -> dict:
        require_scope(self.credential, "integrate")
        repository = self._repository(repo)
        plan = _core.plan_change(edits)
        for index, source in plan.uploads:  # the tools' binary contents, decoded from base64
            if not isinstance(source, bytes):
                raise Invalid("a write's content is text or bytes here")
            plan.operations[index]["blob"] = content.upload_blob(repository, source)[0]
        landed = landing.land(
            repository,
            stream,
            parent=parent,
            message=message,
            operations=plan.operations,
            provenance={"agent": "mcp"},
            credential=self.credential,
        )
        outcome = _outcome_of(integration.wait_for(landed.operation, INTEGRATE_WAIT_S))
        return {**outcome, "changeset": landed.changeset.commit_id, "proposal": landed.proposal.pk}

    async def open_proposal(self, repo: str, stream: str, head: str, title: str = "") -> Proposal:
        def open_one() -> dict:
            made = proposals.open_proposal(
                self._repository(repo), stream=stream, head=head, title=title, credential=self.credential
            )
            return ProposalSerializer(made).data

        return Proposal.from_api(await self._run("write", open_one))

    async def integrate(self, repo: str, proposal_id: int, **_options: Any) -> Outcome:
        def integrate_one() -> dict:
            proposal = proposals.get_proposal(self._repository(repo), proposal_id)
            require_proposal_stream(self.credential, proposal)
            return _outcome_of(integration.wait_for(integration.request_integration(proposal), INTEGRATE_WAIT_S))

        return Outcome.from_api(await self._run("integrate", integrate_one))

    async def review(self, repo: str, proposal_id: int, verdict: str, body: str = "") -> Review:
        """``POST .../reviews`` (scope ``review``): the credential's user reviews."""

        def review_one() -> dict:
            proposal = proposals.get_proposal(self._repository(repo), proposal_id)
            made = policies.add_review(proposal, verdict, body, user=self.credential.user, credential=self.credential)
            return ReviewSerializer(made).data

        return Review.from_api(await self._run("review", review_one))

    async def explain(self, repo: str, proposal_id: int) -> Explanation:
        """``GET .../proposals/{id}/policy`` (scope ``read``)."""
        return Explanation.from_api(
            await self._run(
                "read", lambda: policies.explain(proposals.get_proposal(self._repository(repo), proposal_id))
            )
        )

    async def list_proposals(
        self, repo: str, *, state: str | None = None, stream: str | None = None, limit: int | None = None, cursor=None
    ) -> Page[Proposal]:
        size = min(max(int(limit or 20), 1), 200)

        def page() -> dict:
            found = proposals.list_proposals(self._repository(repo), state=state, stream=stream)
            if cursor:
                found = found.filter(id__lt=int(cursor))
            rows = list(found.select_related("author__user")[: size + 1])
            more = len(rows) > size
            return {
                "proposals": ProposalSerializer(rows[:size], many=True).data,
                "next": str(rows[size - 1].pk) if more else None,
            }

        doc = await self._run("read", page)
        return Page([Proposal.from_api(p) for p in doc["proposals"]], doc["next"], doc)

    async def events(
        self,
        repo: str,
        *,
        after: int | None = None,
        kinds: list[str] | None = None,
        timeout_s: float | None = None,
        reconnect: bool = False,
    ) -> AsyncIterator[Event]:
        """The SSE feed's events (the same outbox, in order) until ``timeout_s``."""
        repository = await self._run("read", lambda: self._repository(repo))
        wants = Filter(kinds=frozenset(kinds or ()))
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else 20.0)
        subscription = await relay().subscribe(repository.pk, after or 0, wants)
        try:
            while (left := deadline - time.monotonic()) > 0:
                for message in await subscription.next(left):
                    yield Event(message["id"], message["event"], message["data"])
        except TooFarBehind:
            return  # the caller resumes after the last event it was given
        finally:
            subscription.close()

    async def _run(self, scope: str, work: Callable[[], Any]) -> Any:
        """``work()`` in Django's thread, with the scope checked; the server's errors as the client's."""

        def checked() -> Any:
            require_scope(self.credential, scope)
            return work()

        try:
            return await sync_to_async(_closing(checked))()
        except Exception as exc:  # an API error, or an engine error crossing the one boundary
            error = api_error(exc)
            if error is None:
                raise
            raise client_errors.error_from_body(error.as_dict(), error.status) from None


def _search_options(options: dict[str, Any]) -> dict[str, Any]:
    """The client's ``search`` keywords as the service takes them."""
    out = {key: value for key, value in options.items() if value is not None}
    out["paths"] = tuple(out.pop("paths", None) or ())
    out["exclude"] = tuple(out.get("exclude") or ())
    return out


def _closing(work: Callable[[], Any]) -> Callable[[], Any]:
    """``work`` that gives its database connection back afterwards, as the end of a request does
    (nothing here goes through Django's request cycle)."""

    def run() -> Any:
        try:
            return work()
        finally:
            close_old_connections()

    return run


def _outcome_of(operation: Operation) -> dict:
    """An integration's outcome document; its error when it failed; Unavailable while queued."""
    if operation.state == Operation.State.DONE:
        return operation.outcome_document() or {}
    if operation.state == Operation.State.FAILED:
        raise error_from_dict(operation.error or {})
    raise Unavailable(f"integration operation {operation.pk} is still queued; ask again (integrate_proposal)")
