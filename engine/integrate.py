"""The integration decision: fast-forward, three-way merge, or conflict — a pure function over the store.

``integrate`` reads the two heads and writes at most the objects of one merge changeset. It never
moves a stream head: the caller records the outcome and compare-and-swaps the head in its own
transaction (repos/services). Calling it again with the same heads and committer gives the same
answer and the same merge changeset id, because a commit's id depends only on its content.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from .graph import is_ancestor, merge_bases
from .merge import Conflict, Resolved, Rule, TreeMerge, merge_trees
from .objects import Commit, ObjectId, Signature, check_object_id
from .store import ObjectBatch, ObjectStore


class Outcome(str, Enum):
    """How a proposal landed (the values are the API's outcome strings)."""

    FAST_FORWARD = "fast_forward"
    MERGE = "merge"
    CONFLICT = "conflict"
    ALREADY_INTEGRATED = "already_integrated"


@dataclass(frozen=True)
class Integration:
    """What integrating a proposal head into a stream head gives.

    ``head`` is the stream's head afterwards (unchanged for a conflict or an already-integrated
    proposal); ``changeset`` is the changeset the stream moved to (the proposal head for a
    fast-forward, the new merge changeset for a merge) or None when it did not move.
    """

    outcome: Outcome
    head: ObjectId | None
    changeset: ObjectId | None = None
    conflicts: tuple[Conflict, ...] = field(default=())
    #: Paths a resolver rule merged.
    resolved: tuple[Resolved, ...] = field(default=())


def integrate(
    store: ObjectStore,
    stream_head: ObjectId | None,
    proposal_head: ObjectId,
    *,
    committer: Signature,
    message: str | None = None,
    labels: tuple[str, str] = ("stream", "proposal"),
    rules: Sequence[Rule] = (),
) -> Integration:
    """Decide how ``proposal_head`` lands on a stream whose head is ``stream_head``.

    * empty stream, or the stream head is an ancestor of the proposal: ``fast_forward``;
    * the proposal is already contained in the stream: ``already_integrated``;
    * otherwise a rename-aware three-way merge with the merge base: ``merge`` (a merge changeset
      with parents ``(stream_head, proposal_head)`` is written) or ``conflict`` (nothing written);
      ``rules`` resolve what they match before anything is a conflict (``resolved`` names them).
    """
    store.read_commit(check_object_id(proposal_head))  # ObjectMissing / WrongObjectType first
    if stream_head is None:
        return Integration(Outcome.FAST_FORWARD, proposal_head, proposal_head)
    store.read_commit(check_object_id(stream_head))
    if is_ancestor(store, proposal_head, stream_head):
        return Integration(Outcome.ALREADY_INTEGRATED, stream_head)
    if is_ancestor(store, stream_head, proposal_head):
        return Integration(Outcome.FAST_FORWARD, proposal_head, proposal_head)

    batch = ObjectBatch(store)
    merged = merge_heads(store, batch, stream_head, proposal_head, labels=labels, rules=rules)
    resolved = tuple(merged.resolved)
    if merged.tree is None:  # conflicts: nothing is written
        return Integration(Outcome.CONFLICT, stream_head, None, tuple(merged.conflicts), resolved)
    text = message if message is not None else f"Integrate {proposal_head[:12]}\n"
    merge_id = batch.add_commit(Commit(merged.tree, (stream_head, proposal_head), committer, committer, text))
    batch.flush()
    return Integration(Outcome.MERGE, merge_id, merge_id, (), resolved)


def merge_heads(
    store: ObjectStore,
    batch: ObjectBatch,
    ours: ObjectId,
    theirs: ObjectId,
    *,
    labels: tuple[str, str] = ("stream", "proposal"),
    favor_ours: bool = False,
    rules: Sequence[Rule] = (),
) -> TreeMerge:
    """The three-way merge of two changesets' trees against their merge base (new objects in
    ``batch``, not flushed): what integrating ``theirs`` into ``ours`` merges."""
    base_tree = _base_tree(store, batch, merge_bases(store, ours, theirs))
    ours_tree = store.read_commit(ours).tree
    theirs_tree = store.read_commit(theirs).tree
    return merge_trees(batch, base_tree, ours_tree, theirs_tree, labels=labels, favor_ours=favor_ours, rules=rules)


def _base_tree(store: ObjectStore, batch: ObjectBatch, bases: list[ObjectId]) -> ObjectId | None:
    """The merge base's tree; for several bases (criss-cross), a virtual base merged from them.

    As git's recursive strategy does, the bases are merged one into the other against their own
    merge base, keeping conflict markers in text (``favor_ours``) so the result is always a tree.
    """
    if not bases:
        return None  # unrelated histories: every file is an addition on both sides
    first = bases[0]
    tree = store.read_commit(first).tree
    for other in bases[1:]:
        inner_tree = _base_tree(store, batch, merge_bases(store, first, other))
        virtual = merge_trees(batch, inner_tree, tree, store.read_commit(other).tree, favor_ours=True).tree
        assert virtual is not None, "favor_ours resolves every conflict, so the merge is a tree"
        tree = virtual
    return tree
