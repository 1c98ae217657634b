"""Commit graph: generations, ancestry and merge bases, on both stores (``store`` fixture)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import CorruptObject, InvalidObjectId, ObjectMissing, WrongObjectType
from engine.graph import generation, graph_node, is_ancestor, merge_bases
from engine.objects import (
    BLOB,
    COMMIT,
    EMPTY_TREE_ID,
    TREE,
    Commit,
    ObjectId,
    Signature,
    hash_object,
)
from engine.store import MemoryStore, ObjectStore

from .conftest import BASE_TIME, commit_on


def build_history(store: ObjectStore, parents: Sequence[Sequence[int]]) -> list[ObjectId]:
    """Commit ``i`` has the commits at indexes ``parents[i]`` as parents and adds file ``c{i}``.

    ``build_history(store, [[], [0], [0], [1, 2]])`` is a root, two children and their merge.
    Committer times are distinct and increase with the index.
    """
    ids: list[ObjectId] = []
    for index, parent_indexes in enumerate(parents):
        parent_ids = [ids[p] for p in parent_indexes]
        ids.append(commit_on(store, parent_ids, {f"c{index}": f"commit {index}\n"}, time=index, message=f"c{index}\n"))
    return ids


def ancestors(history: Sequence[Sequence[int]], index: int) -> set[int]:
    """Reference answer: every index reachable from ``index`` (itself included)."""
    found, stack = set(), [index]
    while stack:
        i = stack.pop()
        if i not in found:
            found.add(i)
            stack.extend(history[i])
    return found


LINEAR = [[], [0], [1], [2]]
#: 0 - 1 - 2 - 4 (merge of 2 and 3), with 3 branching from 1.
BRANCHY = [[], [0], [1], [1], [2, 3]]
#: Criss-cross: 3 and 4 each merge 1 and 2, so both 1 and 2 are best common ancestors of 5 and 6.
CRISS_CROSS = [[], [0], [0], [1, 2], [2, 1], [3], [4]]
#: Two unrelated roots, 0 and 2.
UNRELATED = [[], [0], [], [2]]


# ---------------------------------------------------------------------------- generations


def test_generation_counts_the_longest_path_to_a_root(store):
    c = build_history(store, BRANCHY)
    assert [generation(store, oid) for oid in c] == [1, 2, 3, 3, 4]


def test_graph_node_records_parents_in_order_and_committer_time(store):
    c = build_history(store, BRANCHY)
    node = graph_node(store, c[4])
    assert node.parents == (c[2], c[3])
    assert node.time == BASE_TIME + 4


def test_generations_are_memoized_so_a_second_question_reads_no_commit(store, monkeypatch):
    c = build_history(store, [[]] + [[i] for i in range(30)])
    assert generation(store, c[-1]) == 31
    reads = []
    original = store.read_commit
    monkeypatch.setattr(store, "read_commit", lambda oid: reads.append(oid) or original(oid))
    assert is_ancestor(store, c[3], c[-1])
    assert merge_bases(store, c[10], c[20]) == [c[10]]
    assert reads == []


def test_graph_reads_signed_commits_and_ignores_look_alikes_in_the_message(store):
    (root,) = build_history(store, [[]])
    raw = (
        f"tree {EMPTY_TREE_ID}\nparent {root}\n"
        "author A <a@example.com> 1 +0000\n"
        "committer C <c@example.com> 1700000123 -0130\n"
        "gpgsig -----BEGIN PGP SIGNATURE-----\n \n committer X <x@x> 9 +0000\n -----END PGP SIGNATURE-----\n"
        "\nmessage\ncommitter X <x@example.com> 5 +0000\n"
    ).encode()
    store.add_many([(TREE, b"")])
    signed = store.add(COMMIT, raw)
    assert graph_node(store, signed) == (2, (root,), 1_700_000_123)
    assert graph_node(store, signed).time == store.read_commit(signed).committer.time


def test_a_commit_whose_committer_date_git_cannot_read_is_walked_with_time_zero(store):
    # git log shows such a commit with an empty date instead of failing (fsck calls it badDate).
    raw = f"tree {EMPTY_TREE_ID}\nauthor A <a@x> 1 +0000\ncommitter C <c@x> soon +0000\n\nm\n".encode()
    store.add_many([(TREE, b"")])
    commit = store.add(COMMIT, raw)
    assert generation(store, commit) == 1
    assert graph_node(store, commit).time == 0


def test_a_commit_without_a_committer_is_reported(store):
    raw = f"tree {EMPTY_TREE_ID}\nauthor A <a@x> 1 +0000\n\nm\n".encode()
    store.add_many([(TREE, b"")])
    with pytest.raises(CorruptObject):
        generation(store, store.add(COMMIT, raw))


@pytest.fixture
def long_linear(store) -> list[ObjectId]:
    """20 000 commits in one line, written as one batch (a pack on disk) to keep the test fast."""
    who = Signature("Agent", "agent@example.com", BASE_TIME)
    objects: list[tuple[str, bytes]] = [(TREE, b"")]
    ids: list[ObjectId] = []
    parent: tuple[ObjectId, ...] = ()
    for index in range(20_000):
        raw = Commit(EMPTY_TREE_ID, parent, who, who, f"{index}\n").encode()
        objects.append((COMMIT, raw))
        ids.append(hash_object(COMMIT, raw))
        parent = (ids[-1],)
    store.add_many(objects)
    return ids


def test_a_20000_commit_history_needs_no_recursion(store, long_linear):
    head = long_linear[-1]
    assert generation(store, head) == 20_000
    assert is_ancestor(store, long_linear[0], head)
    assert not is_ancestor(store, head, long_linear[0])
    assert merge_bases(store, head, long_linear[12_345]) == [long_linear[12_345]]


# ---------------------------------------------------------------------------- ancestry


def test_is_ancestor_on_a_line(store):
    c = build_history(store, LINEAR)
    assert is_ancestor(store, c[0], c[3])
    assert is_ancestor(store, c[2], c[3])
    assert not is_ancestor(store, c[3], c[0])
    assert not is_ancestor(store, c[3], c[2])


def test_a_commit_is_its_own_ancestor(store):
    c = build_history(store, LINEAR)
    assert all(is_ancestor(store, oid, oid) for oid in c)


def test_is_ancestor_across_branches_and_merges(store):
    c = build_history(store, BRANCHY)
    assert is_ancestor(store, c[3], c[4])  # through the merge's second parent
    assert is_ancestor(store, c[1], c[4])
    assert not is_ancestor(store, c[2], c[3])  # siblings
    assert not is_ancestor(store, c[3], c[2])


def test_unrelated_histories_are_not_ancestors(store):
    c = build_history(store, UNRELATED)
    assert not is_ancestor(store, c[0], c[3])
    assert not is_ancestor(store, c[2], c[1])


# ---------------------------------------------------------------------------- merge bases


def test_merge_base_of_a_line_is_the_older_commit(store):
    c = build_history(store, LINEAR)
    assert merge_bases(store, c[1], c[3]) == [c[1]]
    assert merge_bases(store, c[3], c[1]) == [c[1]]
    assert merge_bases(store, c[2], c[2]) == [c[2]]


def test_merge_base_of_two_branches_is_the_fork_point(store):
    c = build_history(store, BRANCHY)
    assert merge_bases(store, c[2], c[3]) == [c[1]]
    assert merge_bases(store, c[4], c[3]) == [c[3]]


def test_criss_cross_merge_has_two_merge_bases(store):
    c = build_history(store, CRISS_CROSS)
    assert merge_bases(store, c[5], c[6]) == sorted([c[1], c[2]])
    assert merge_bases(store, c[3], c[4]) == sorted([c[1], c[2]])


def test_unrelated_histories_have_no_merge_base(store):
    c = build_history(store, UNRELATED)
    assert merge_bases(store, c[1], c[3]) == []


def test_the_nearest_common_ancestor_wins_over_older_ones(store):
    # 5 merges 3 and 4; 6 descends from 4. Of the common ancestors 0, 1, 2 and 4, only 4 is best.
    c = build_history(store, [[], [0], [1], [1], [2], [3, 4], [4]])
    assert merge_bases(store, c[5], c[6]) == [c[4]]


def test_candidates_below_another_candidate_are_removed(store):
    # With exact generations the paint-down walk does not produce such candidates itself;
    # the clean-up step is git's safety net and is checked directly.
    from engine.graph import _remove_redundant

    c = build_history(store, CRISS_CROSS)
    assert sorted(_remove_redundant(store, [c[0], c[1], c[2], c[3]])) == [c[3]]
    assert sorted(_remove_redundant(store, [c[1], c[2]])) == sorted([c[1], c[2]])


# ---------------------------------------------------------------------------- errors


def test_malformed_ids_are_refused(store):
    c = build_history(store, LINEAR)
    with pytest.raises(InvalidObjectId):
        is_ancestor(store, "HEAD", c[0])
    with pytest.raises(InvalidObjectId):
        merge_bases(store, c[0], c[0].upper())


def test_missing_commit_is_reported(store):
    c = build_history(store, LINEAR)
    with pytest.raises(ObjectMissing):
        merge_bases(store, c[0], "0" * 40)
    with pytest.raises(ObjectMissing):
        generation(store, "1" * 40)


def test_a_blob_is_not_a_commit(store):
    c = build_history(store, LINEAR)
    blob = store.add(BLOB, b"not a commit\n")
    with pytest.raises(WrongObjectType):
        is_ancestor(store, blob, c[3])
    with pytest.raises(WrongObjectType):
        merge_bases(store, c[3], blob)


# ---------------------------------------------------------------------------- property


@st.composite
def dags(draw) -> list[list[int]]:
    """Random histories of up to 12 commits: roots, linear steps, merges of two or three."""
    size = draw(st.integers(1, 12))
    history: list[list[int]] = [[]]
    for index in range(1, size):
        count = draw(st.sampled_from([0, 1, 1, 1, 2, 2, 3]))
        count = min(count, index)
        history.append(draw(st.lists(st.integers(0, index - 1), min_size=count, max_size=count, unique=True)))
    return history


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=dags(), data=st.data())
def test_merge_bases_are_exactly_the_best_common_ancestors(history, data):
    store = MemoryStore()
    c = build_history(store, history)
    a = data.draw(st.integers(0, len(history) - 1))
    b = data.draw(st.integers(0, len(history) - 1))
    common = ancestors(history, a) & ancestors(history, b)
    best = {i for i in common if not any(i in ancestors(history, j) for j in common if j != i)}
    assert merge_bases(store, c[a], c[b]) == sorted(c[i] for i in best)
    assert is_ancestor(store, c[a], c[b]) == (a in ancestors(history, b))
