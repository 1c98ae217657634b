"""Conflict packages: what an agent needs to resolve a conflicted merge without a checkout.

For each conflicting path a package gives its kind and the three versions of the file (base,
ours = the stream, theirs = the proposal: path, mode and blob id, so a rename's source is the
base's path), and for text conflicts a blob holding the file with git-style diff3 conflict
markers, ready to edit: the same bytes ``git merge-file --diff3 -p -L <ours> -L <base> -L
<theirs>`` writes for the same three versions (tests/engine/test_conflicts.py holds git to it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .integrate import merge_heads
from .merge import _FORMAT_MASK, _REGULAR, ADD_ADD, CONTENT, Conflict, Rule, Version, merge_text
from .objects import BLOB, ObjectId, is_binary
from .store import ObjectBatch, ObjectStore

#: The marker labels: the stream's side, the merge base, the proposal's side.
LABELS = ("stream", "base", "proposal")


def diff3_markers(base: bytes, ours: bytes, theirs: bytes, labels: tuple[str, str, str] = LABELS) -> bytes:
    """The three-way merge of a text with every conflicting region in diff3 style:
    ``<<<<<<< ours`` … ``||||||| base`` … ``=======`` … ``>>>>>>> theirs``."""
    ours_label, base_label, theirs_label = labels
    return merge_text(base, ours, theirs, labels=(ours_label, theirs_label), base_label=base_label).content


@dataclass(frozen=True)
class ConflictDetail:
    """A conflict with, for text, the blob id of its marked-up merge (None otherwise)."""

    conflict: Conflict
    marked: ObjectId | None

    def as_dict(self) -> dict[str, object]:
        data: dict[str, object] = dict(self.conflict.as_dict())
        for side in ("base", "ours", "theirs"):
            version = getattr(self.conflict, side)
            if version is not None:
                data[side] = version.as_dict()
        if self.marked is not None:
            data["marked"] = self.marked
        return data


def conflict_package(
    store: ObjectStore, stream_head: ObjectId, proposal_head: ObjectId, *, rules: Sequence[Rule] = ()
) -> list[ConflictDetail]:
    """The conflicts of merging ``proposal_head`` into ``stream_head`` (as integrating it reports
    them), each with its versions and marker blob; the marker blobs are written durably.
    Empty when the two merge cleanly."""
    batch = ObjectBatch(store)
    merged = merge_heads(store, batch, stream_head, proposal_head, rules=rules)
    details = [ConflictDetail(conflict, _marked(batch, conflict)) for conflict in merged.conflicts]
    # Only the marker blobs: a clean merge's tree is not needed, and conflicts wrote no tree.
    markers = ObjectBatch(store)
    for detail in details:
        if detail.marked is not None:
            markers.add(BLOB, batch.read_blob(detail.marked))
    markers.flush()
    return details


def _is_text_file(version: Version | None) -> bool:
    return version is None or (version.mode & _FORMAT_MASK) == _REGULAR


def _marked(batch: ObjectBatch, conflict: Conflict) -> ObjectId | None:
    """The diff3-marked text of a content or add/add conflict between two text files."""
    if conflict.kind not in (CONTENT, ADD_ADD) or conflict.ours is None or conflict.theirs is None:
        return None
    if not all(_is_text_file(v) for v in (conflict.base, conflict.ours, conflict.theirs)):
        return None
    base = batch.read_blob(conflict.base.blob) if conflict.base is not None and conflict.kind == CONTENT else b""
    ours, theirs = batch.read_blob(conflict.ours.blob), batch.read_blob(conflict.theirs.blob)
    if any(is_binary(text) for text in (base, ours, theirs)):
        return None
    return batch.add(BLOB, diff3_markers(base, ours, theirs))
