"""Proposals: a request to land a changeset on a stream, its revisions, closing and reopening,
and its conflict package.

A proposal's head is its latest revision's (``ProposalRevision``): opening it records revision
1, ``revise`` the next (typically the same work rebased on the new stream head), and a
resolution (repos/services/resolution.py) the merge changeset built from an agent's
resolutions. A new revision makes the proposal ``open`` again, so integrating it integrates the
latest revision; each revision keeps the outcome of its own integration.
"""

from __future__ import annotations

from django.db import transaction

from engine.conflicts import ConflictDetail, conflict_package

from ..errors import Invalid, NotFound, WrongState
from ..lookups import Lookup
from ..models import Credential, Proposal, ProposalRevision, Repository, Stream
from . import refmirror
from .credentials import require_proposal_stream, require_stream
from .events import PROPOSAL_CLOSED, PROPOSAL_REOPENED, PROPOSAL_REVISED, append_event
from .integration import resolver_rules
from .opening import Opening
from .repositories import get_stream, resolve_rev
from .stores import store_for


def open_proposal(
    repository: Repository, *, stream: str, head: str, title: str = "", credential: Credential | None = None
) -> Proposal:
    """Open a proposal to land the changeset ``head`` on ``stream`` (Forbidden if the
    credential may not update that stream)."""
    if not isinstance(stream, str) or not isinstance(head, str):
        raise Invalid("stream and head are strings")
    require_stream(credential, stream)
    if not isinstance(title, str) or len(title) > 300:
        raise Invalid("title is a string of at most 300 characters")
    target = get_stream(repository, stream)
    return open_on(repository, target, resolve_rev(repository, head), title, credential)


def open_on(
    repository: Repository,
    target: Stream,
    head_id: str,
    title: str,
    credential: Credential | None,
    *,
    recorded: bool = False,
) -> Proposal:
    """Open a proposal on the stream ``target`` for the changeset ``head_id`` (both already
    looked up). No savepoint of its own: nothing here is caught, so a failure rolls back the
    caller's transaction whole. ``recorded``: the caller knows ``head_id`` is a recorded
    changeset (it just recorded it), which the ref mirror protects already."""
    opening = Opening.of(repository, target, head_id, title, credential)
    with transaction.atomic(savepoint=False):
        opening.insert_proposal()
        opening.insert_revision()
        if not recorded:
            refmirror.protect_proposal(repository, opening.proposal.pk, head_id)  # before the row commits
        append_event(repository, *opening.event())
    return opening.proposal


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


def add_revision(
    proposal: Proposal, head: str, *, kind: str = ProposalRevision.Kind.REVISED, credential: Credential | None = None
) -> ProposalRevision:
    """Give the proposal a new head (its next revision); it is open again, its last outcome
    stays with the revision it belonged to. Must run inside the caller's transaction."""
    if proposal.state == Proposal.State.CLOSED:
        raise WrongState(f"proposal {proposal.pk} is closed: reopen it before revising it")
    if proposal.state == Proposal.State.INTEGRATED:
        raise WrongState(f"proposal {proposal.pk} is integrated already: open a new proposal for more work")
    last = proposal.revisions.order_by("-number").values_list("number", flat=True).first() or 0
    revision = ProposalRevision.objects.create(
        proposal=proposal, number=last + 1, head=head, kind=kind, author=credential
    )
    refmirror.protect_proposal(proposal.repository, proposal.pk, head)  # before the row commits
    proposal.head = head
    proposal.state = Proposal.State.OPEN
    proposal.outcome = proposal.result_changeset = proposal.result_head = ""
    proposal.conflicts = []
    proposal.save(update_fields=["head", "state", "outcome", "result_changeset", "result_head", "conflicts", "updated"])
    return revision


def revise(proposal: Proposal, head: object, *, credential: Credential | None = None) -> Proposal:
    """``POST .../revisions {"head"}``: the proposal's next revision is the changeset ``head``."""
    if not isinstance(head, str):
        raise Invalid("head is a revision (a changeset id or a stream name)")
    require_proposal_stream(credential, proposal)
    head_id = resolve_rev(proposal.repository, head)
    with transaction.atomic():
        locked = lock_proposal(proposal)
        revision = add_revision(locked, head_id, credential=credential)
        payload = {"proposal": locked.pk, "stream": locked.stream.name, "head": head_id, "revision": revision.number}
        append_event(locked.repository, PROPOSAL_REVISED, payload)
    return locked


def close(proposal: Proposal) -> Proposal:
    """Close the proposal: it is never integrated while closed (an integrated one stays so)."""
    return _set_open(proposal, closing=True)


def reopen(proposal: Proposal) -> Proposal:
    """Reopen a closed proposal (``open``: integrating it integrates its latest revision)."""
    return _set_open(proposal, closing=False)


def _set_open(proposal: Proposal, *, closing: bool) -> Proposal:
    with transaction.atomic():
        locked = lock_proposal(proposal)
        if locked.state == Proposal.State.INTEGRATED:
            raise WrongState(f"proposal {locked.pk} is integrated: it can be neither closed nor reopened")
        if closing == (locked.state == Proposal.State.CLOSED):
            return locked  # closing a closed proposal (or reopening an open one) changes nothing
        locked.state = Proposal.State.CLOSED if closing else Proposal.State.OPEN
        locked.outcome = locked.result_changeset = locked.result_head = ""
        locked.conflicts = []
        locked.save(update_fields=["state", "outcome", "result_changeset", "result_head", "conflicts", "updated"])
        kind = PROPOSAL_CLOSED if closing else PROPOSAL_REOPENED
        append_event(locked.repository, kind, {"proposal": locked.pk, "stream": locked.stream.name})
    return locked


def lock_proposal(proposal: Proposal) -> Proposal:
    """The proposal's row, locked until the transaction ends (revisions are numbered under it)."""
    return Proposal.objects.select_for_update(of=("self",)).select_related("repository", "stream").get(pk=proposal.pk)


def revisions(proposal: Proposal) -> list[ProposalRevision]:
    """Every revision of the proposal, oldest first, each with its outcome."""
    return list(proposal.revisions.order_by("number"))


def conflicts_of(proposal: Proposal) -> tuple[str | None, list[ConflictDetail]]:
    """The conflict package of a conflicted proposal: the stream head it was merged against, and
    per conflicting path its versions and (for text) a blob with diff3 markers. Empty for a
    proposal whose latest integration did not conflict."""
    if proposal.state != Proposal.State.CONFLICTED or not proposal.result_head:
        return proposal.result_head or proposal.stream.head, []
    repository = proposal.repository
    store = store_for(repository.name)
    details = conflict_package(store, proposal.result_head, proposal.head, rules=resolver_rules(repository))
    return proposal.result_head, details
