"""Properties of merge and diff that must hold for any history (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.changeset import Delete, Rename, Write, create_changeset
from engine.integrate import Outcome, integrate
from engine.merge import merge_trees
from engine.renames import diff_with_renames
from engine.store import MemoryStore, ObjectBatch

from .conftest import Builder, signature

PATHS = ["a/x.txt", "a/y.txt", "a/c/z.txt", "b/x.txt", "b/d/e.txt", "top.txt"]
LINES = [f"line {i}\n" for i in range(10)]
content = st.lists(st.sampled_from(LINES), min_size=1, max_size=8).map("".join)
files = st.dictionaries(st.sampled_from(PATHS), content, min_size=1)
edits = st.dictionaries(st.sampled_from(PATHS), st.one_of(st.none(), content))
renames = st.dictionaries(st.sampled_from(PATHS), st.sampled_from(["r/one.txt", "r/two.txt", "moved.txt"]), max_size=2)

SETTINGS = settings(max_examples=60, deadline=None)


def _apply(base_files: dict, edit: dict) -> dict:
    return {p: c for p, c in edit.items() if c is not None or p in base_files}


def _renames(base_files: dict, edit: dict, wanted: dict) -> dict:
    """Keep renames of files that exist and are untouched by the edit, onto distinct free paths."""
    kept, targets = {}, set()
    for source, target in wanted.items():
        if source in base_files and source not in edit and target not in base_files and target not in targets:
            kept[source] = target
            targets.add(target)
    return kept


def _history(base_files, our_edit, their_edit, our_renames):
    store = MemoryStore()
    build = Builder(store)
    base = build.commit(base_files)
    ours = build.commit(_apply(base_files, our_edit), parent=base, renames=_renames(base_files, our_edit, our_renames))
    theirs = build.commit(_apply(base_files, their_edit), parent=base)
    return store, build, base, ours, theirs


@SETTINGS
@given(base_files=files, our_edit=edits, their_edit=edits, our_renames=renames)
def test_a_clean_merge_gives_the_same_tree_whichever_side_is_ours(base_files, our_edit, their_edit, our_renames):
    store, build, base, ours, theirs = _history(base_files, our_edit, their_edit, our_renames)
    tree = lambda c: store.read_commit(c).tree  # noqa: E731
    forward = merge_trees(ObjectBatch(store), tree(base), tree(ours), tree(theirs))
    backward = merge_trees(ObjectBatch(store), tree(base), tree(theirs), tree(ours))
    assert forward.clean == backward.clean
    if forward.clean:
        assert forward.tree == backward.tree
    else:
        assert {c.path for c in forward.conflicts} == {c.path for c in backward.conflicts}


@SETTINGS
@given(base_files=files, our_edit=edits, our_renames=renames)
def test_merging_a_changeset_with_itself_or_its_ancestor_changes_nothing(base_files, our_edit, our_renames):
    store, build, base, ours, _ = _history(base_files, our_edit, {}, our_renames)
    for proposal in (ours, base):
        result = integrate(store, ours, proposal, committer=signature(5))
        assert result.outcome == Outcome.ALREADY_INTEGRATED and result.head == ours
    tree = lambda c: store.read_commit(c).tree  # noqa: E731
    assert merge_trees(ObjectBatch(store), tree(base), tree(ours), tree(ours)).tree == tree(ours)
    assert merge_trees(ObjectBatch(store), tree(base), tree(ours), tree(base)).tree == tree(ours)


@SETTINGS
@given(old_files=files, new_files=files)
def test_a_diff_applied_as_operations_rebuilds_the_target_tree(old_files, new_files):
    store = MemoryStore()
    build = Builder(store)
    old = build.commit(old_files)
    new = build.commit(new_files)
    old_tree, new_tree = store.read_commit(old).tree, store.read_commit(new).tree
    ops = []
    for change in diff_with_renames(store, old_tree, new_tree):
        if change.status == "deleted":
            ops.append(Delete(change.path))
        elif change.status == "renamed" and change.new == change.old:
            ops.append(Rename(change.old_path, change.path))
        elif change.status == "renamed":
            # A rename with an edit: a path may appear in one operation only, so delete and write.
            ops += [Delete(change.old_path), Write(change.path, change.new.id, change.new.mode)]
        else:
            ops.append(Write(change.path, change.new.id, change.new.mode))
    rebuilt = create_changeset(store, old, ops, message="replay", author=signature(3))
    assert store.read_commit(rebuilt).tree == new_tree
