"""Policies and reviews: a repository's policy document, the reviews of its proposals, and the
one judgment that every stream update passes.

The document and its judgment are the engine's (engine/policy.py: a pure function of the facts).
Here the server keeps the versions (``PolicyVersion``; ``Repository.policy_version`` names the one
in force), gathers the facts of a landing (the changed paths, the reviews, the CODEOWNERS file
at the stream's head, who acts) and turns a refusal into ``policy_denied``.

Every path that moves a stream asks here, inside the transaction that moves it:

* a proposal's integration (integrate, ``/land``, resolve, a git push to ``refs/for/S``, MCP and
  the CLI all queue one) is judged by the landing queue (repos/services/integration.py) with
  :func:`judge_proposal`, on the reviews and revisions as they are then: an approval withdrawn or
  a revision pushed while the landing waited is seen;
* a direct update (a git push to ``refs/heads/S``, a stream created at a head or deleted) by
  :func:`judge_direct_update`.

The decision (the policy version, the requirements met and unmet, the approvals counted, the
owners satisfied, any bypass) is written with the stream update: on the proposal
(``Proposal.decision``) and in the ``stream.integrate`` event.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from engine.errors import EngineError
from engine.graph import is_ancestor, merge_bases
from engine.objects import ObjectId
from engine.policy import (
    CodeOwners,
    CodeOwnersError,
    Decision,
    Facts,
    Policy,
    evaluate,
    owner_names,
    parse_codeowners,
    parse_policy,
)
from engine.store import ObjectStore
from engine.trees import diff_trees, lookup

from ..errors import Forbidden, Invalid, NotFound, PolicyDenied, WrongState, from_engine
from ..lookups import Rows
from ..models import Credential, Operation, PolicyVersion, Proposal, ProposalRevision, Repository, Review
from .checks import results_for
from .events import POLICY_BYPASS, POLICY_CHANGED, PROPOSAL_REVIEW, append_event
from .stores import store_for

User = get_user_model()

#: The file whose owners ``code_owners`` asks for, at the root of the target stream's head.
CODEOWNERS_PATH = "CODEOWNERS"
#: A review's body is at most this long (characters).
MAX_REVIEW_BODY = 65536
#: A bypass reason is at most this long.
MAX_REASON = 500


# ----------------------------------------------------------------------------- the document


class _Cache(OrderedDict):
    """A small least-recently-used map (compiled policies, parsed CODEOWNERS files)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def remember(self, key, value):
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)
        return value


#: Compiled policies by (repository id, version): a version never changes, so a process compiles
#: each once, and a landing on a repository with a policy reads no policy row after the first.
_POLICIES = _Cache(256)
#: Parsed CODEOWNERS files by blob id (or the error they raised).
_CODEOWNERS: _Cache = _Cache(256)


def policy_of(repository: Repository) -> Policy | None:
    """The policy in force (None: the repository has none; every update is allowed)."""
    if not repository.policy_version:
        return None
    key = (repository.pk, repository.policy_version)
    if key in _POLICIES:
        return _POLICIES[key]
    row = PolicyVersion.objects.get(repository_id=repository.pk, version=repository.policy_version)
    return _POLICIES.remember(key, parse_policy(row.document, row.version))


def policy_document(repository: Repository) -> dict:
    """``GET .../policy``: the document in force with its version (0 and no rules: none set)."""
    if not repository.policy_version:
        return {"version": 0, "rules": [], "changed_by": None, "updated": None}
    row = PolicyVersion.objects.get(repository_id=repository.pk, version=repository.policy_version)
    return {**row.document, "version": row.version, "changed_by": row.changed_by or None, "updated": row.created}


def set_policy(repository: Repository, document: object, *, by: str) -> PolicyVersion:
    """Store ``document`` as the repository's next policy version (``PUT .../policy``, Django
    admin); 400 ``invalid`` naming each problem. Setting the document in force again adds no
    version."""
    try:
        parse_policy(document)
    except EngineError as error:
        raise from_engine(error) from None
    assert isinstance(document, dict)
    with transaction.atomic():
        locked = Repository.objects.select_for_update().get(pk=repository.pk)
        current = PolicyVersion.objects.filter(repository=locked, version=locked.policy_version).first()
        if current is not None and current.document == document:
            return current
        version = PolicyVersion.objects.create(
            repository=locked, version=locked.policy_version + 1, document=document, changed_by=by
        )
        Repository.objects.filter(pk=locked.pk).update(policy_version=version.version)
        repository.policy_version = version.version
        append_event(repository, POLICY_CHANGED, {"version": version.version, "by": by})
    return version


# ----------------------------------------------------------------------------- reviews


def add_review(
    proposal: Proposal, verdict: object, body: object = "", *, user, credential: Credential | None = None
) -> Review:
    """``POST .../reviews``: a verdict of the proposal's latest revision (its tree).

    An author of the proposal or of one of its revisions may comment but not approve or reject:
    that verdict would never count (403 ``forbidden`` says so)."""
    if verdict not in Review.Verdict.values:
        raise Invalid(f"verdict is one of {', '.join(Review.Verdict.values)}", details=[{"field": "verdict"}])
    if not isinstance(body, str) or len(body) > MAX_REVIEW_BODY:
        raise Invalid(f"body is a string of at most {MAX_REVIEW_BODY} characters", details=[{"field": "body"}])
    with transaction.atomic():
        locked = (
            Proposal.objects.select_for_update(of=("self",)).select_related("repository", "stream").get(pk=proposal.pk)
        )
        if locked.state in (Proposal.State.INTEGRATED, Proposal.State.CLOSED):
            raise WrongState(f"proposal {locked.pk} is {locked.state}: it takes no more reviews")
        revision = locked.revisions.order_by("-number").values_list("number", flat=True).first() or 1
        if verdict != Review.Verdict.COMMENT and user.get_username() in _authors(locked):
            raise Forbidden(
                f"{user.get_username()} wrote proposal {locked.pk} or one of its revisions: "
                f"their {verdict} would not count; another reviewer must {verdict} it"
            )
        tree = store_for(locked.repository.name).read_commit(locked.head).tree
        review = Review.objects.create(
            proposal=locked,
            user=user,
            credential=credential,
            verdict=verdict,
            body=body,
            revision=revision,
            tree=tree,
        )
        _review_event(locked, review, verdict)
    return review


def withdraw_review(proposal: Proposal, review_id: object, *, user) -> Review:
    """``DELETE .../reviews/{id}``: its author withdraws it (a rejection then no longer blocks)."""
    try:
        number = int(review_id)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        number = 0
    review = Review.objects.filter(proposal=proposal, pk=number).first() if 0 < number < 2**63 else None
    if review is None:
        raise NotFound(f"no review {review_id} of proposal {proposal.pk}")
    if review.user_id != user.pk:
        raise Forbidden(f"review {review.pk} is {review.user.get_username()}'s: only they can withdraw it")
    if review.withdrawn is None:
        with transaction.atomic():
            review.withdrawn = timezone.now()
            review.save(update_fields=["withdrawn"])
            _review_event(proposal, review, "withdrawn")
    return review


def _review_event(proposal: Proposal, review: Review, verdict: str) -> None:
    payload = {
        "proposal": proposal.pk,
        "stream": proposal.stream.name,
        "review": review.pk,
        "verdict": verdict,
        "reviewer": review.user.get_username(),
        "revision": review.revision,
    }
    append_event(proposal.repository, PROPOSAL_REVIEW, payload)


def reviews_of(proposal: Proposal) -> list[Review]:
    """Every review of the proposal, oldest first."""
    return list(Review.objects.filter(proposal=proposal).select_related("user").order_by("id"))


#: A landing's two reads of the judgment, compiled once (repos/lookups.py): the standing verdicts
#: and the revisions' authors. (Read in the landing's transaction: the primary, as it writes.)
_VERDICTS = Rows(
    lambda proposal: (
        Review.objects.filter(proposal=proposal, withdrawn__isnull=True)
        .exclude(verdict=Review.Verdict.COMMENT)
        .order_by("id")
        .values_list("user__username", "verdict", "tree", "id")
    ),
    int,
    write=True,
)
_REVISION_AUTHORS = Rows(
    lambda proposal: ProposalRevision.objects.filter(proposal=proposal, author__isnull=False).values_list(
        "author__user__username"
    ),
    int,
    write=True,
)


def _verdicts(proposal_id: int) -> dict[str, tuple[str, str, int]]:
    """Each reviewer's standing verdict: their latest approve or reject not withdrawn."""
    _using, rows = _VERDICTS.all(proposal_id, model=Review)
    return {user: (verdict, tree, review) for user, verdict, tree, review in rows}


def _authors(proposal: Proposal) -> frozenset[str]:
    """The proposal's author and every user who wrote one of its revisions."""
    _using, rows = _REVISION_AUTHORS.all(proposal.pk, model=ProposalRevision)
    found = {name for (name,) in rows}
    if proposal.author is not None:
        found.add(proposal.author.user.get_username())
    return frozenset(found)


# ----------------------------------------------------------------------------- judging


def judge_proposal(
    policy: Policy,
    store: ObjectStore,
    stream_name: str,
    stream_head: str | None,
    operation: Operation,
    *,
    checks: Mapping[str, tuple[str, str, float]] | None = None,
    checked: str = "the result",
) -> Decision:
    """The decision on integrating ``operation``'s proposal into a stream now at ``stream_head``
    (inside the landing's transaction; the reviews and revisions are read as they are now).
    ``checks``: the required checks' results on the result that would land, once the gate has
    them (repos/services/gate.py), and what they were run on; without them, required checks
    leave the decision waiting."""
    proposal = operation.proposal
    rules = policy.rules_for(stream_name)
    if not rules:
        return evaluate(policy, Facts(stream=stream_name, paths=(), actor=""))
    paths: Sequence[str] = ()
    if policy.needs_paths(stream_name):
        base = None
        if stream_head is not None:
            bases = merge_bases(store, stream_head, proposal.head)
            base = bases[0] if bases else None
        paths = _changed(store, base, proposal.head)
    tree = store.read_commit(proposal.head).tree
    bypass = operation.bypass or None
    authors, verdicts = _authors(proposal), _verdicts(proposal.pk)
    approvers = {user for user, (verdict, seen, _id) in verdicts.items() if verdict == "approve" and seen == tree}
    facts = Facts(
        stream=stream_name,
        paths=paths,
        actor=(bypass or {}).get("by", ""),
        authors=authors,
        tree=tree,
        verdicts=verdicts,
        bypass=(bypass["by"], bypass["reason"]) if bypass else None,
        checks=checks,
        checked=checked,
        **_owners(rules, store, stream_head, paths, approvers - authors),
    )
    return evaluate(policy, facts)


def judge_direct_update(
    repository: Repository, stream_name: str, old: str | None, new: str | None, credential: Credential | None
) -> Decision | None:
    """The decision on moving ``stream_name`` from ``old`` to ``new`` without a proposal (a push to
    refs/heads/S; a stream created at ``new``; deleted when ``new`` is None). Raises
    ``policy_denied`` when refused; None when the repository has no policy or the server itself
    acts (``credential`` None: an import, a management command)."""
    policy = policy_of(repository)
    if policy is None or credential is None or not policy.rules_for(stream_name):
        return None
    store = store_for(repository.name)
    paths: Sequence[str] = ()
    if new is not None and policy.needs_paths(stream_name):
        base = old
        if old is not None and not is_ancestor(store, old, new):
            bases = merge_bases(store, old, new)
            base = bases[0] if bases else None
        paths = _changed(store, base, new)
    facts = Facts(
        stream=stream_name,
        paths=paths,
        actor=credential.user.get_username(),
        actor_is_admin=credential.has_scope("admin"),
        via_proposal=False,
        checks=_check_facts(repository, store.read_commit(new).tree) if new is not None else None,
    )
    decision = evaluate(policy, facts)
    if not decision.allowed:
        raise denied(decision, f"{stream_name} cannot be updated directly")
    return decision


def _check_facts(repository: Repository, tree: str) -> dict[str, tuple[str, str, float]]:
    """The check results of ``tree`` as the judgment takes them: name -> (state, url, age in s)."""
    now = timezone.now()
    return {
        name: (result.state, result.url, (now - result.updated).total_seconds())
        for name, result in results_for(repository, tree).items()
    }


def explain(proposal: Proposal) -> dict:
    """``GET .../proposals/{id}/policy``: what integrating the proposal now would be judged,
    without trying (``allowed`` true where the repository has no policy)."""
    repository = proposal.repository
    policy = policy_of(repository)
    if policy is None:
        return {"allowed": True, "policy_version": 0, "requirements": []}
    store = store_for(repository.name)
    operation = Operation(proposal=proposal, repository=repository, stream=proposal.stream)
    decision = judge_proposal(policy, store, proposal.stream.name, proposal.stream.head, operation)
    return {
        "allowed": decision.allowed,
        "policy_version": decision.policy_version,
        "requirements": [requirement.as_dict() for requirement in decision.requirements],
        "approvals": list(decision.approvals),
        "owners": list(decision.owners),
    }


def denied(decision: Decision, what: str, *, proposal: int | None = None) -> PolicyDenied:
    """The ``policy_denied`` error of a refusal: one detail per unmet requirement."""
    unmet = decision.unmet
    details = [{"requirement": item.requirement, "message": item.message} for item in unmet]
    waiting = f"; proposal {proposal} stays open for that" if proposal is not None else ""
    message = f"{what}: " + "; ".join(item.message for item in unmet) + waiting
    extra: dict[str, object] = {"policy_version": decision.policy_version}
    if proposal is not None:
        extra["proposal"] = proposal
    return PolicyDenied(message, details=details, extra=extra)


def check_bypass(reason: object, credential: Credential | None) -> dict | None:
    """An integrate request's ``bypass``: only an admin may, with a reason (recorded)."""
    if reason is None:
        return None
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON:
        raise Invalid(f"bypass is the reason, a string of 1-{MAX_REASON} characters", details=[{"field": "bypass"}])
    if credential is None or "admin" not in credential.scopes:
        raise Forbidden("only a credential with the 'admin' scope can bypass the policy")
    return {"by": credential.user.get_username(), "reason": reason.strip()}


def bypass_event(stream: str, proposal: int, bypass: dict) -> tuple[str, dict]:
    """The event of a landing that bypassed the policy, as ``(kind, payload)`` (the landing writes
    it with its others, in its transaction)."""
    return POLICY_BYPASS, {"stream": stream, "proposal": proposal, **bypass}


def _changed(store: ObjectStore, base: ObjectId | None, head: ObjectId) -> list[str]:
    old = store.read_commit(base).tree if base is not None else None
    return [change.path for change in diff_trees(store, old, store.read_commit(head).tree)]


def _owners(rules, store: ObjectStore, stream_head: str | None, paths: Sequence[str], approvers: set[str]) -> dict:
    """The CODEOWNERS facts, read only when a rule asks for code owners. Groups and e-mail
    addresses are looked up only for owned paths that no approver's own name satisfies."""
    if not any(rule.code_owners for rule in rules) or stream_head is None:
        return {}
    codeowners = _codeowners(store, stream_head)
    if not isinstance(codeowners, CodeOwners):
        return {"codeowners": codeowners}
    named = {f"@{user}" for user in approvers}
    owners: set[str] = set()
    for path in paths:
        owned_by = codeowners.owners_of(path)
        if not named.intersection(owned_by):
            owners.update(owned_by)
    groups: dict[str, set[str]] = {}
    names = owner_names(owners)
    if names:
        for group, user in Group.objects.filter(name__in=names).values_list("name", "user__username"):
            if user is not None:
                groups.setdefault(group, set()).add(user)
    emails = [owner.lower() for owner in owners if not owner.startswith("@")]
    by_email = {}
    if emails:
        for email, user in User.objects.filter(email__in=emails, is_active=True).values_list("email", "username"):
            by_email[email.lower()] = user
    return {
        "codeowners": codeowners,
        "groups": {name: frozenset(members) for name, members in groups.items()},
        "emails": by_email,
    }


def _codeowners(store: ObjectStore, head: str) -> CodeOwners | CodeOwnersError | None:
    entry = lookup(store, store.read_commit(head).tree, CODEOWNERS_PATH)
    if entry is None:
        return None
    if entry.id in _CODEOWNERS:
        return _CODEOWNERS[entry.id]
    try:
        parsed: CodeOwners | CodeOwnersError = parse_codeowners(store.read_blob(entry.id).decode("utf-8"))
    except CodeOwnersError as error:
        parsed = error
    except UnicodeDecodeError:
        parsed = CodeOwnersError("CODEOWNERS cannot be parsed: it is not UTF-8 text")
    return _CODEOWNERS.remember(entry.id, parsed)
