"""A proposal being opened: its row and its revision 1's, built before they are written.

Both ``proposals.open_on`` (which writes them at once) and the landing (repos/services/
integration.py, which may write them landed: docs/adr/0024) take them from here, so that
neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import timezone

from ..lookups import Insert
from ..models import Credential, Proposal, ProposalRevision, Repository, Stream
from .events import PROPOSAL_OPENED, author


@dataclass
class Opening:
    """A proposal and its revision 1, built but not written yet.

    ``proposals.open_on`` writes them at once. A one-call landing without workers hands them to
    its landing (repos/services/integration.py), which inserts them in their final state when it
    lands them at once (docs/adr/0024: no update after the insert), or as ``open_on`` writes
    them when it does not. The proposal's row comes first (the others name it).
    """

    proposal: Proposal
    revision: ProposalRevision
    #: The stream's name, for the ``proposal.opened`` event.
    stream: str

    @classmethod
    def of(
        cls, repository: Repository, target: Stream, head_id: str, title: str, credential: Credential | None
    ) -> Opening:
        now = timezone.now()  # opened now, whenever the rows are written
        proposal = Proposal(
            repository=repository, stream=target, head=head_id, title=title, author=credential, created=now
        )
        revision = ProposalRevision(
            number=1, head=head_id, kind=ProposalRevision.Kind.OPENED, author=credential, created=now
        )
        return cls(proposal, revision, target.name)

    @property
    def written(self) -> bool:
        return self.proposal.pk is not None

    def insert_proposal(self) -> Proposal:
        """The proposal's row, as the instance is now (open, or already in its final state)."""
        _INSERT_PROPOSAL.run(self.proposal)
        self.revision.proposal = self.proposal
        return self.proposal

    def insert_revision(self) -> ProposalRevision:
        """Revision 1's row, after the proposal's (with its outcome when it was landed at once)."""
        return _INSERT_REVISION.run(self.revision)

    def event(self) -> tuple[str, dict]:
        """Its ``proposal.opened`` event as ``(kind, payload)``, once the proposal has its id."""
        proposal = self.proposal
        payload = {
            "proposal": proposal.pk,
            "stream": self.stream,
            "head": proposal.head,
            "author": author(proposal.author),
        }
        return PROPOSAL_OPENED, payload


_INSERT_PROPOSAL = Insert(Proposal)
_INSERT_REVISION = Insert(ProposalRevision)
