"""Landing in one call: build a changeset, open a proposal for it and ask to integrate it.

The same three services as the separate endpoints (content, proposals, integration), in one
transaction: a refused changeset or an unknown stream leaves no proposal behind, and the
integration goes through the landing queue like every other (with workers, it lands when the
transaction commits; without, in the same transaction). The caller waits for the operation as
the integrate endpoint does.
"""

from __future__ import annotations

from typing import NamedTuple

from django.db import transaction

from ..errors import Invalid
from ..models import Changeset, Credential, Operation, Proposal, Repository
from . import content, integration, proposals
from .credentials import require_stream
from .dispatch import jobs_run_in_process
from .repositories import get_stream

#: ``parent`` when the request has none: the stream's head.
STREAM_HEAD = object()
#: A proposal's title is at most this long; a landing's is its message's first line.
_TITLE_LENGTH = 300


class Landing(NamedTuple):
    changeset: Changeset
    proposal: Proposal
    operation: Operation


def land(
    repository: Repository,
    stream: str,
    *,
    parent: object = STREAM_HEAD,
    message: object,
    operations: object,
    provenance: object,
    credential: Credential | None,
) -> Landing:
    """Write the changeset (on ``parent``, by default the stream's head), propose it on
    ``stream`` and queue its integration; nothing is written if any step is refused."""
    require_stream(credential, stream)  # before the changeset's objects are written, not after
    target = get_stream(repository, stream)
    if parent is STREAM_HEAD:
        parent = target.head
    if parent is not None and not isinstance(parent, str):
        raise Invalid("parent is a revision (a changeset id or a stream name) or null")
    if not isinstance(message, str):
        raise Invalid("message must be a string")
    provenance = {} if provenance is None else provenance
    if not isinstance(provenance, dict):
        raise Invalid("provenance must be an object")
    with transaction.atomic():
        changeset = content.create_changeset(
            repository,
            parent=parent,
            operations=operations,
            message=message,
            provenance=provenance,
            credential=credential,
        )
        title = (message.strip().splitlines() or [""])[0][:_TITLE_LENGTH]
        proposal = proposals.open_on(repository, target, changeset.commit_id, title, credential)
        landing_here = jobs_run_in_process()
        operation = integration.queue_opened(proposal, enqueue=not landing_here)
        if landing_here:
            # No workers: land in this transaction, so the changeset, the proposal and their
            # landing are one commit (one fsync of the database, not two), as a worker would
            # land it right after ours committed (docs/adr/0015).
            integration.land_stream(target.pk)
    return Landing(changeset, proposal, operation)
