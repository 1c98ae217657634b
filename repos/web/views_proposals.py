"""Proposals (list and detail, with conflicts and the diff a proposal brings) and the activity page."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from engine.objects import MODE_TREE

from ..models import Proposal
from ..services import browse, checks, proposals
from ..services.events import PROPOSAL_CONFLICT, PROPOSAL_OPENED, STREAM_INTEGRATE
from .pages import diff_context, remember_layout, repository_page

PROPOSALS_PAGE = 50
#: What the activity page lists (and its script adds as they happen).
ACTIVITY_KINDS = (STREAM_INTEGRATE, PROPOSAL_CONFLICT, PROPOSAL_OPENED)


@require_safe
@repository_page
def proposal_list(request: HttpRequest, repository) -> HttpResponse:
    """Proposals newest first, by state and stream (``?state=``, ``?stream=``)."""
    state = request.GET.get("state") or ""
    stream = request.GET.get("stream") or ""
    found = proposals.list_proposals(repository, state=state or None, stream=stream or None).select_related(
        "author__user"
    )
    page = Paginator(found, PROPOSALS_PAGE).get_page(request.GET.get("page"))
    context = {
        "repository": repository,
        "page": page,
        "state": state,
        "stream": stream,
        "states": Proposal.State.values,
        "streams": browse.streams(repository),
    }
    return render(request, "web/proposals.html", context)


@require_safe
@repository_page
def proposal_detail(request: HttpRequest, repository, number: int) -> HttpResponse:
    """A proposal's state and outcome, the check results of its head's tree, its conflicts with
    both sides' versions, and its diff."""
    proposal = proposals.get_proposal(repository, number)
    target = proposal.stream
    ours = proposal.result_head or target.head  # the stream head it was (or would be) merged into
    base = browse.merge_base(repository, ours, proposal.head) if ours else None
    head_info = browse.describe(repository, [proposal.head])[proposal.head]
    if base == proposal.head:
        # Already part of the stream: what it brought is its own change.
        base = head_info.parents[0] if head_info.parents else None
    conflicts = []
    for conflict in proposal.conflicts or []:
        path = conflict.get("path", "")
        old_path = conflict.get("old_path")
        conflicts.append(
            {
                "path": path,
                "kind": conflict.get("kind", ""),
                "old_path": old_path,
                "ours": _side(repository, ours, path, old_path),
                "theirs": _side(repository, proposal.head, path, old_path),
                "base": _side(repository, base, path, old_path),
            }
        )
    _stream_head, package = proposals.conflicts_of(proposal)
    marked = {detail.conflict.path: detail.marked for detail in package if detail.marked}
    for conflict in conflicts:
        blob = marked.get(conflict["path"])
        # The text with diff3 markers an agent edits to resolve it (the API's conflict package).
        conflict["marked"] = _text(browse.read_blob(repository, blob)) if blob else None
    context = {
        "repository": repository,
        "proposal": proposal,
        "revisions": proposals.revisions(proposal),
        "head": head_info,
        "ours": ours,
        "base": base,
        "conflicts": conflicts,
        "checks": checks.results_for(repository, head_info.tree).values(),
        **diff_context(request, repository, base, proposal.head),
    }
    return remember_layout(request, render(request, "web/proposal.html", context))


#: The most of a marked-up conflict the page shows (the rest is a click away in the API).
MARKED_LIMIT = 64 * 1024


def _text(data: bytes) -> str:
    text = data[:MARKED_LIMIT].decode("utf-8", errors="replace")
    return text + ("\n… (cut here)\n" if len(data) > MARKED_LIMIT else "")


def _side(repository, commit: str | None, path: str, old_path: str | None) -> dict | None:
    """One side of a conflicting path: the changeset, the path it has there and its blob."""
    if not commit:
        return None
    for candidate in filter(None, (path, old_path)):
        entry = browse.entry_at(repository, commit, candidate)
        if entry is not None and entry.mode != MODE_TREE:
            return {"commit": commit, "path": candidate, "blob": entry.id}
    return {"commit": commit, "path": None, "blob": None}


@require_safe
@repository_page
def activity(request: HttpRequest, repository) -> HttpResponse:
    """Integrations, conflicts and new proposals, newest first; the page's script adds new ones live."""
    events = browse.recent_events(repository, ACTIVITY_KINDS, limit=50)
    numbers = {e.payload.get("proposal") for e in events if isinstance(e.payload.get("proposal"), int)}
    titles = browse.proposal_titles(repository, numbers)
    latest = browse.recent_events(repository, limit=1)
    context = {
        "repository": repository,
        "events": [(event, titles.get(event.payload.get("proposal"), "")) for event in events],
        "after": latest[0].seq if latest else 0,
        "kinds": ",".join(ACTIVITY_KINDS),
    }
    return render(request, "web/activity.html", context)
