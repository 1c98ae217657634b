"""The commit graph: generation numbers, ancestry and merge bases.

A commit's *generation* is 1 for a root and ``1 + max(generation of its parents)`` otherwise,
so every commit's generation is strictly greater than each of its ancestors'. That is what
lets the walks here stop early: a commit whose generation is at or below a target's cannot
have the target among its ancestors. Generations are computed lazily, the first time a commit
is asked about, and memoized per store together with the parents and committer time (commits
are immutable, so a node never goes stale). The memo is this module's: :func:`graph_node`
computes and reads it, :func:`known_nodes` lends it read-only to hot loops, and
:func:`remember_nodes` seeds it with nodes computed elsewhere (the server's derived data).
Every walk is iterative: histories can be 100 000 commits deep, far beyond Python's recursion
limit.

Answers match git's: ``is_ancestor`` is ``git merge-base --is-ancestor`` and ``merge_bases``
is ``git merge-base --all`` (checked against the git binary by the oracle tests).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from itertools import count

from .errors import WrongObjectType
from .objects import COMMIT, GraphNode, ObjectId, check_object_id, commit_parents_and_time
from .store import ObjectStore

__all__ = ["GraphNode", "graph_node", "known_nodes", "remember_nodes", "generation", "is_ancestor", "merge_bases"]


def graph_node(store: ObjectStore, oid: ObjectId) -> GraphNode:
    """The memoized :class:`GraphNode` of commit ``oid``, computing its ancestors' first.

    The first call on a deep history reads every ancestor once (iteratively); later calls on
    it or any of its ancestors are dictionary hits. Raises ``InvalidObjectId``,
    ``ObjectMissing`` (the commit or an ancestor is absent) or ``WrongObjectType``.
    """
    cache = store._graph_nodes
    node = cache.get(oid)
    if node is not None:
        return node
    check_object_id(oid)
    # Post-order without recursion: a commit stays on the stack until all its parents have
    # nodes. Parsed commits wait in ``parsed`` so each is read once even when revisited.
    parsed: dict[ObjectId, tuple[tuple[ObjectId, ...], int]] = {}
    stack = [oid]
    while stack:
        top = stack[-1]
        if top in cache:
            stack.pop()
            continue
        known = parsed.get(top)
        if known is None:
            known = parsed[top] = _parents_and_time(store, top)
        parents, time = known
        missing = [p for p in parents if p not in cache]
        if missing:
            stack.extend(missing)
            continue
        depth = 0
        for parent in parents:
            parent_generation = cache[parent].generation
            if parent_generation > depth:
                depth = parent_generation
        cache[top] = GraphNode(depth + 1, parents, time)
        del parsed[top]
        stack.pop()
    return cache[oid]


def known_nodes(store: ObjectStore) -> Mapping[ObjectId, GraphNode]:
    """The nodes ``store`` has computed or been given so far, by commit id (read-only).

    For hot loops that can use a node when it is known and read the commit otherwise: a
    dictionary lookup instead of a call. Everything else asks :func:`graph_node`.
    """
    return store._graph_nodes


def remember_nodes(store: ObjectStore, nodes: Iterable[tuple[ObjectId, GraphNode]]) -> None:
    """Seed the memo with nodes computed elsewhere (the server's derived rows), so a new
    process answers ancestry questions without reading the history. A node already known is
    kept. The caller vouches for the nodes: they must be what :func:`graph_node` would compute.
    """
    cache = store._graph_nodes
    for oid, node in nodes:
        cache.setdefault(oid, node)


def _parents_and_time(store: ObjectStore, oid: ObjectId) -> tuple[tuple[ObjectId, ...], int]:
    """The parents and committer time of commit ``oid`` (the hot loop of a first graph walk)."""
    kind, raw = store.read(oid)
    if kind != COMMIT:
        raise WrongObjectType(f"object {oid} is a {kind}, not a {COMMIT}")
    header = commit_parents_and_time(raw)
    if header is not None:
        return header
    commit = store.read_commit(oid)
    return commit.parents, commit.committer.time


def generation(store: ObjectStore, oid: ObjectId) -> int:
    """The generation number of commit ``oid`` (1 for a root commit)."""
    return graph_node(store, oid).generation


def is_ancestor(store: ObjectStore, ancestor: ObjectId, descendant: ObjectId) -> bool:
    """Whether ``ancestor`` is reachable from ``descendant`` (a commit is its own ancestor).

    Walks back from ``descendant`` and never past the ancestor's generation, so asking about
    a recent ancestor of a deep history costs only the commits in between (once generations
    are known: the first question about a history reads it whole, once per store). Raises
    ``InvalidObjectId``, ``ObjectMissing`` or ``WrongObjectType`` for either argument.
    """
    target = graph_node(store, check_object_id(ancestor)).generation
    start = graph_node(store, check_object_id(descendant))
    if ancestor == descendant:
        return True
    if start.generation <= target:
        return False
    stack = [descendant]
    seen = {descendant}
    while stack:
        for parent in reversed(graph_node(store, stack.pop()).parents):
            if parent == ancestor:
                return True
            if parent in seen:
                continue
            seen.add(parent)
            # Equal generation and not the target: neither it nor its ancestors can be it.
            if graph_node(store, parent).generation > target:
                stack.append(parent)
    return False


# -------------------------------------------------------------------------- merge bases

_PARENT1 = 1
_PARENT2 = 2
_STALE = 4


def merge_bases(store: ObjectStore, a: ObjectId, b: ObjectId) -> list[ObjectId]:
    """The best common ancestors of ``a`` and ``b``, sorted; ``[]`` if the histories are unrelated.

    Same set as ``git merge-base --all a b``: usually one commit, two or more after criss-cross
    merges. No base is an ancestor of another. Raises ``InvalidObjectId``, ``ObjectMissing``
    or ``WrongObjectType`` for either argument.
    """
    graph_node(store, check_object_id(a))
    graph_node(store, check_object_id(b))
    if a == b:
        return [a]
    candidates = _paint_down_to_common(store, a, b)
    if len(candidates) > 1:
        candidates = _remove_redundant(store, candidates)
    return sorted(candidates)


def _paint_down_to_common(store: ObjectStore, one: ObjectId, two: ObjectId) -> list[ObjectId]:
    """git's ``paint_down_to_common``: the common ancestors not below another common ancestor.

    Commits are painted PARENT1 (reachable from ``one``) and PARENT2 (from ``two``); a commit
    painted both is a candidate and its ancestors are painted STALE. The queue pops the highest
    generation first, so a commit's paint is complete when it is popped (all its descendants
    in the walk have higher generations). The walk ends when only stale commits are queued.
    """
    flags: dict[ObjectId, int] = {one: _PARENT1, two: _PARENT2}
    queue: list[tuple[int, int, int, ObjectId]] = []
    # How many queue entries name each commit, and how many entries name a non-stale commit:
    # git rescans the queue for a non-stale entry on every step; a counter makes that O(1).
    queued: dict[ObjectId, int] = {}
    ticket = count()
    nonstale = 0
    found: dict[ObjectId, None] = {}  # insertion-ordered set

    def push(oid: ObjectId) -> None:
        nonlocal nonstale
        node = graph_node(store, oid)
        heapq.heappush(queue, (-node.generation, -node.time, next(ticket), oid))
        queued[oid] = queued.get(oid, 0) + 1
        if not flags[oid] & _STALE:
            nonstale += 1

    push(one)
    push(two)
    while nonstale:
        oid = heapq.heappop(queue)[3]
        queued[oid] -= 1
        paint = flags[oid]
        if not paint & _STALE:
            nonstale -= 1
        if paint == _PARENT1 | _PARENT2:
            if oid not in found:  # a commit may be queued more than once
                found[oid] = None
            # The candidate itself stays unstale; only what lies below it is stale.
            paint |= _STALE
        for parent in graph_node(store, oid).parents:
            before = flags.get(parent, 0)
            if before & paint == paint:
                continue
            after = before | paint
            if after & _STALE and not before & _STALE:
                nonstale -= queued.get(parent, 0)
            flags[parent] = after
            push(parent)
    return [oid for oid in found if not flags[oid] & _STALE]


def _remove_redundant(store: ObjectStore, candidates: list[ObjectId]) -> list[ObjectId]:
    """Drop every candidate that is an ancestor of another candidate.

    One walk from all candidates' parents, bounded below by the lowest candidate generation:
    any candidate it reaches is a strict ancestor of some candidate.
    """
    wanted = set(candidates)
    floor = min(graph_node(store, oid).generation for oid in candidates)
    stack = [parent for oid in candidates for parent in graph_node(store, oid).parents]
    seen: set[ObjectId] = set()
    redundant: set[ObjectId] = set()
    while stack:
        oid = stack.pop()
        if oid in seen:
            continue
        seen.add(oid)
        node = graph_node(store, oid)
        if node.generation < floor:
            continue
        if oid in wanted:
            redundant.add(oid)
        stack.extend(node.parents)
    return [oid for oid in candidates if oid not in redundant]
