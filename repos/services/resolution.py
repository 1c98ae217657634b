"""Resolving a conflicted proposal in one call, and the repository's server-side resolver rules.

``resolve`` takes the stream head the agent resolved against and, per conflicting path, the
resolved content, a blob id or a deletion. It merges the proposal into that head again (the
same merge the conflict package reported), applies the resolutions to the merged tree, writes
the merge changeset (parents: that head and the proposal's head; provenance: each resolved path
and who resolved it) and makes it the proposal's next revision, which it integrates through the
landing queue (repos/services/integration.py). If the stream has moved since that head, the
landing merges the resolution with the newer changes against that head, so a change the agent
did not see is merged, never overridden; if it touched the same lines, the answer is a new
conflict package.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction

from engine import graph
from engine.changeset import apply_changes
from engine.errors import EngineError
from engine.integrate import merge_heads
from engine.merge import RULES, Conflict, TreeMerge
from engine.objects import BLOB, MODE_FILE, Commit, Entry, ObjectId, check_object_id, hash_object
from engine.store import ObjectBatch, ObjectStore

from ..errors import AlreadyExists, Invalid, NotFound, WrongState, from_engine
from ..models import Changeset, Credential, Operation, Proposal, ProposalRevision, Repository, ResolverRule
from . import proposals, refmirror
from .content import author_signature
from .credentials import require_paths, require_proposal_stream
from .events import PROPOSAL_RESOLVED, append_event
from .integration import closed_refusal, request_integration, resolver_rules
from .repositories import resolve_rev
from .stores import server_signature, store_for

_RESOLUTION_FIELDS = {"path", "content", "blob", "delete"}


def resolve(proposal: Proposal, body: dict, *, credential: Credential | None = None) -> Operation:
    """``POST .../resolve``: build the merge from the agent's resolutions and integrate it."""
    unknown = sorted(set(body) - {"stream_head", "resolutions", "message", "provenance"})
    if unknown:
        raise Invalid(f"unknown field(s): {', '.join(unknown)}", details=[{"field": f} for f in unknown])
    require_proposal_stream(credential, proposal)
    if proposal.state == Proposal.State.CLOSED:
        raise closed_refusal(proposal)
    if proposal.state == Proposal.State.INTEGRATED:
        raise WrongState(f"proposal {proposal.pk} is integrated already: nothing to resolve")
    repository = proposal.repository
    stream_head = body.get("stream_head")
    if not isinstance(stream_head, str):
        raise Invalid("stream_head is the stream head the conflicts were resolved against")
    base = resolve_rev(repository, stream_head)
    provenance = body.get("provenance", {})
    message = body.get("message", f"Resolve proposal {proposal.pk} on {proposal.stream.name}\n")
    if not isinstance(provenance, dict) or not isinstance(message, str):
        raise Invalid("provenance is an object and message a string")
    store = store_for(repository.name)
    current = proposal.stream.head
    if current is None or not graph.is_ancestor(store, base, current):
        raise Invalid(f"stream_head {base} is not in the history of stream {proposal.stream.name!r}")
    wanted, contents = _parse_resolutions(body.get("resolutions"))
    require_paths(credential, wanted)  # the paths the resolutions write

    batch = ObjectBatch(store)  # the resolutions' contents and the merge, written at once
    tree, merged = _resolved_tree(store, batch, base, proposal, wanted, contents)
    by = _who(provenance, credential)
    resolved = [{"path": path, "by": by} for path in sorted(wanted)]
    resolved += [item.as_dict() for item in merged.resolved]
    merge_id = batch.add_commit(
        Commit(tree, (base, proposal.head), author_signature(provenance, credential), server_signature(), message)
    )
    batch.flush()
    with transaction.atomic():
        locked = proposals.lock_proposal(proposal)
        if locked.head != proposal.head:
            raise WrongState(f"proposal {proposal.pk} got a new revision meanwhile: resolve its conflicts again")
        _record_changeset(repository, merge_id, (base, proposal.head), tree, message, provenance, resolved, credential)
        revision = proposals.add_revision(locked, merge_id, kind=ProposalRevision.Kind.RESOLVED, credential=credential)
        payload = {
            "proposal": locked.pk,
            "stream": locked.stream.name,
            "head": merge_id,
            "revision": revision.number,
            "resolved": resolved,
        }
        append_event(repository, PROPOSAL_RESOLVED, payload)
    return request_integration(locked)


def _resolved_tree(
    store: ObjectStore,
    batch: ObjectBatch,
    base: ObjectId,
    proposal: Proposal,
    wanted: dict[str, ObjectId | None],
    contents: list[bytes],
) -> tuple[ObjectId, TreeMerge]:
    """The merge of the proposal into ``base`` with every conflicting path replaced by its
    resolution (objects in ``batch``), and the merge's own result (its conflicts, what rules
    resolved). Refused when the resolutions are not exactly the conflicting paths."""
    for data in contents:
        batch.add(BLOB, data)
    rules = resolver_rules(proposal.repository)
    merged = merge_heads(store, batch, base, proposal.head, rules=rules)
    if merged.clean:
        raise WrongState(f"proposal {proposal.pk} merges into {base} without conflicts: integrate it instead")
    by_path = {conflict.path: conflict for conflict in merged.conflicts}
    missing = sorted(set(by_path) - set(wanted))
    extra = sorted(set(wanted) - set(by_path))
    if missing or extra:
        details = [{"path": p, "code": "invalid", "message": "conflicting path without a resolution"} for p in missing]
        details += [{"path": p, "code": "invalid", "message": "not a conflicting path"} for p in extra]
        raise Invalid("resolve each conflicting path, and only those", details=details)
    # A rename's source that is not itself a conflicting path is gone on both sides (renamed
    # away on one, renamed or deleted on the other), whatever our side's tree kept of it.
    changes: dict[str, Entry | None] = {
        c.old_path: None for c in merged.conflicts if c.old_path is not None and c.old_path not in wanted
    }
    for path, blob in wanted.items():
        if blob is not None and not batch.contains(blob):
            raise Invalid(f"blob {blob} (the resolution of {path}) is missing: upload it first")
        changes[path] = None if blob is None else Entry(_mode_of(by_path[path]), blob)
    # Our side wins every conflict in this tree, and then the resolutions replace each one.
    favored = merge_heads(store, batch, base, proposal.head, favor_ours=True, rules=rules)
    assert favored.tree is not None, "favor_ours resolves every conflict, so the merge is a tree"
    try:
        tree = apply_changes(batch, favored.tree, changes)
    except EngineError as error:
        raise from_engine(error, missing=Invalid) from None
    return tree, merged


def _parse_resolutions(raw: object) -> tuple[dict[str, ObjectId | None], list[bytes]]:
    """path → blob id (None: delete it), and the inline contents to write."""
    if not isinstance(raw, list) or not raw:
        raise Invalid("resolutions is a non-empty list of {path, content | blob | delete: true}")
    wanted: dict[str, ObjectId | None] = {}
    contents: list[bytes] = []
    problems: list[dict] = []
    for index, item in enumerate(raw):
        problem = None
        if not isinstance(item, dict):
            problem = "a resolution is an object"
        elif unknown := sorted(set(item) - _RESOLUTION_FIELDS):
            problem = f"unknown field(s): {', '.join(unknown)}"
        elif not isinstance(item.get("path"), str) or not item["path"]:
            problem = "path is a non-empty string"
        elif item["path"] in wanted:
            problem = f"{item['path']} is resolved twice"
        elif len(set(item) & {"content", "blob", "delete"}) != 1:
            problem = "give exactly one of content (utf-8 text), blob (an uploaded blob id) or delete: true"
        elif "delete" in item and item["delete"] is not True:
            problem = "delete is true"
        elif "content" in item and not isinstance(item["content"], str):
            problem = "content is a string"
        elif "blob" in item:
            try:
                wanted[item["path"]] = check_object_id(item["blob"])
            except EngineError:
                problem = "blob is a 40-hex blob id"
        elif "content" in item:
            data = item["content"].encode("utf-8")
            contents.append(data)
            wanted[item["path"]] = hash_object(BLOB, data)
        else:
            wanted[item["path"]] = None
        if problem is not None:
            problems.append({"index": index, "code": "invalid", "message": problem})
    if problems:
        raise Invalid(f"{len(problems)} malformed resolution(s); the first: {problems[0]['message']}", details=problems)
    return wanted, contents


def _mode_of(conflict: Conflict) -> int:
    """A resolved file keeps the mode of the side that has one (the stream's first)."""
    for version in (conflict.ours, conflict.theirs, conflict.base):
        if version is not None and version.mode != 0o040000:
            return version.mode
    return MODE_FILE


def _who(provenance: dict, credential: Credential | None) -> str:
    agent = provenance.get("agent")
    if isinstance(agent, str) and agent:
        return agent[:100]
    return credential.user.get_username() if credential is not None else "agent"


def _record_changeset(
    repository: Repository,
    merge_id: ObjectId,
    parents: tuple[ObjectId, ObjectId],
    tree: ObjectId,
    message: str,
    provenance: dict,
    resolved: list[dict],
    credential: Credential | None,
) -> None:
    refmirror.protect_changeset(repository.name, merge_id)  # before its row names it
    Changeset.objects.get_or_create(
        repository=repository,
        commit_id=merge_id,
        defaults={
            "parents": list(parents),
            "tree": tree,
            "message": message,
            "provenance": {**provenance, "resolved": resolved},
            "credential": credential,
        },
    )


# --------------------------------------------------------------------------- resolver rules


def list_rules(repository: Repository):
    return repository.resolver_rules.all()


def add_rule(repository: Repository, body: dict) -> ResolverRule:
    """A new resolver rule ``{"pattern", "rule": "union" | "ours" | "theirs"}``."""
    unknown = sorted(set(body) - {"pattern", "rule"})
    if unknown:
        raise Invalid(f"unknown field(s): {', '.join(unknown)}", details=[{"field": f} for f in unknown])
    pattern, rule = body.get("pattern"), body.get("rule")
    if not isinstance(pattern, str) or not pattern or len(pattern) > 200 or "\x00" in pattern:
        raise Invalid("pattern is a glob of at most 200 characters (CHANGELOG.md, *.lock, docs/*.md)")
    if rule not in RULES:
        raise Invalid(f"rule is one of {', '.join(RULES)}")
    try:
        with transaction.atomic():
            return ResolverRule.objects.create(repository=repository, pattern=pattern, rule=rule)
    except IntegrityError:
        raise AlreadyExists(f"a rule for {pattern!r} exists in {repository.name}") from None


def delete_rule(repository: Repository, rule_id: object) -> None:
    try:
        deleted, _ = ResolverRule.objects.filter(repository=repository, pk=int(rule_id)).delete()  # type: ignore[call-overload]
    except (TypeError, ValueError):
        deleted = 0
    if not deleted:
        raise NotFound(f"no resolver rule {rule_id} in {repository.name}")
