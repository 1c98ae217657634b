"""Proposals: a request to land a changeset on a stream."""

from __future__ import annotations

from django.db import transaction

from ..errors import Invalid, NotFound
from ..lookups import Lookup
from ..models import Credential, Proposal, Repository
from . import refmirror
from .events import PROPOSAL_OPENED, append_event, author
from .repositories import get_stream, resolve_rev


def open_proposal(
    repository: Repository, *, stream: str, head: str, title: str = "", credential: Credential | None = None
) -> Proposal:
    """Open a proposal to land the changeset ``head`` on ``stream``."""
    if not isinstance(stream, str) or not isinstance(head, str):
        raise Invalid("stream and head are strings")
    if not isinstance(title, str) or len(title) > 300:
        raise Invalid("title is a string of at most 300 characters")
    target = get_stream(repository, stream)
    head_id = resolve_rev(repository, head)
    with transaction.atomic():
        proposal = Proposal.objects.create(
            repository=repository, stream=target, head=head_id, title=title, author=credential
        )
        refmirror.protect_proposal(repository, proposal.pk, head_id)  # before the row commits
        payload = {"proposal": proposal.pk, "stream": stream, "head": head_id, "author": author(credential)}
        append_event(repository, PROPOSAL_OPENED, payload)
    return proposal


_BY_ID = Lookup(Proposal, "repository", "id")


def get_proposal(repository: Repository, proposal_id: int | str) -> Proposal:
    try:
        number = int(proposal_id)
    except (ValueError, TypeError):
        number = 0
    found = _BY_ID.get(repository.pk, number) if 0 < number < 2**63 else None  # a bigint
    if found is None:
        raise NotFound(f"no proposal {proposal_id} in {repository.name}")
    return found[0]


def list_proposals(repository: Repository, *, state: str | None = None, stream: str | None = None):
    """Proposals newest first, optionally of one state and one stream (a queryset, for paging)."""
    proposals = Proposal.objects.filter(repository=repository).select_related("stream")
    if state:
        if state not in Proposal.State.values:
            raise Invalid(f"state is one of {', '.join(Proposal.State.values)}")
        proposals = proposals.filter(state=state)
    if stream:
        # No stream name holds NUL, and PostgreSQL refuses it in a query parameter.
        proposals = proposals.filter(stream__name=stream) if "\x00" not in stream else proposals.none()
    return proposals.order_by("-id")
