"""Proposals (list and detail, with conflicts, the diff a proposal brings, its reviews and what
the repository's policy says of it), reviewing them, and the activity page.

A person reviews through their login: the reviewer is ``request.user``, who needs read access to
the repository like every repository page (the API asks a token for the ``review`` scope; a
web session has no scopes). Reviews are POST forms with Django's CSRF token, answered by a
redirect to the proposal page; a refusal (an author approving, a closed proposal) is a message
shown there.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from engine.objects import MODE_TREE

from ..errors import Forbidden, Invalid, WrongState
from ..models import Proposal
from ..services import browse, checks, policies, proposals
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
        **_review_context(request, proposal),
        "revisions": proposals.revisions(proposal),
        "head": head_info,
        "ours": ours,
        "base": base,
        "conflicts": conflicts,
        "checks": checks.results_for(repository, head_info.tree).values(),
        **diff_context(request, repository, base, proposal.head),
    }
    return remember_layout(request, render(request, "web/proposal.html", context))


#: The states in which a proposal takes reviews and the policy's checklist is worth showing.
REVIEWABLE = (Proposal.State.OPEN, Proposal.State.CONFLICTED)


def _review_context(request: HttpRequest, proposal: Proposal) -> dict:
    """The reviews (the user's own standing ones withdrawable), and the policy's word on the
    proposal: the checklist of what integrating it now needs while it is open, the decision it
    landed by once integrated."""
    reviewable = proposal.state in REVIEWABLE
    reviews = [
        {"review": review, "mine": review.user_id == request.user.pk and review.withdrawn is None and reviewable}
        for review in policies.reviews_of(proposal)
    ]
    explanation = policies.explain(proposal) if reviewable else None
    return {
        "reviews": reviews,
        "reviewable": reviewable,
        "explanation": explanation,
        "decision": proposal.decision,
        # The checklist: the recorded decision once integrated, else what integrating now needs.
        "judgment": proposal.decision or explanation,
    }


@require_POST
@repository_page
def review(request: HttpRequest, repository, number: int) -> HttpResponse:
    """Approve, reject or comment on the proposal as the logged-in user; back to its page."""
    proposal = proposals.get_proposal(repository, number)
    verdict = request.POST.get("verdict", "")
    try:
        made = policies.add_review(proposal, verdict, request.POST.get("body", ""), user=request.user)
    except (Forbidden, WrongState, Invalid) as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"Your {made.verdict} of revision {made.revision} is recorded.")
    return _back_to(repository, number)


@require_POST
@repository_page
def withdraw_review(request: HttpRequest, repository, number: int, review_id: int) -> HttpResponse:
    """Withdraw one's own review; back to the proposal's page."""
    proposal = proposals.get_proposal(repository, number)
    try:
        withdrawn = policies.withdraw_review(proposal, review_id, user=request.user)
    except Forbidden as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"Review {withdrawn.pk} is withdrawn.")
    return _back_to(repository, number)


def _back_to(repository, number: int) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("web:proposal", args=[repository.name, number]) + "#reviews")


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
