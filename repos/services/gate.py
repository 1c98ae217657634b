"""The landing queue's gate: a stream whose policy requires checks moves only to a result whose
tree every required check passed, batch after batch, bisecting a batch that fails.

The landing (repos/services/integration.py) integrates the queued proposals one on top of the
other, as always: candidate 1 on the stream's head, candidate 2 on that result, and so on. The
result after the first *s* candidates is the *prefix* s; its tree is what the checks test. Beside
the prefixes, each queued proposal's **own changeset** is tested (Tide's and GitHub's merge
queue's presubmit: a pull request's own checks pass before it joins a batch), so that a bad change
is found by its own test, at once and in parallel with everything else, instead of by bisecting
the batches it would have spoilt. The gate decides from the check results those trees already
have (repos/services/checks.py: kept by tree, so a prefix recomputed on top of a landed one has
the tree it had before, and its results), and from nothing else, so a restart, another worker or
a crash loses no state:

0. A proposal whose own changeset failed a check it needs (a ``failure``, an ``error``, or still
   ``pending`` past the policy's ``check_timeout_s``) is **refused** before it is integrated
   (:func:`own_failure`): it would fail the batch it joined.
1. The longest prefix whose tree passed every check its proposals need **lands**.
2. Otherwise, if the prefix of one candidate failed, that proposal is **refused**
   (``policy_denied``, requirement ``checks``, naming the check and its link); it stays open for
   a revision, and the candidates behind it are integrated again without it.
3. Otherwise the landing **waits**, having asked for what it lacks: the own changeset of every
   candidate but the first (whose prefix is its own result); and the prefix that ends before the
   first candidate whose own changeset has not passed yet (the *ready* prefix: a batch of changes
   that each passed alone, which fails only when they break each other). When the shortest tested
   prefix failed and nothing shorter is under test, half of it is asked for instead (Bors'
   bisection: one bad interaction among n costs about log2 n rounds, and the good part before it
   lands as soon as it passed). With ``speculative``, a ready prefix that grew while a shorter one
   is under test is asked for at once, so it is tested on top of the shorter one while that is
   still being tested (Zuul's speculative testing); without, it waits for the shorter one's answer.
   A queued proposal behind a candidate whose own test has not passed is not integrated yet
   (``behind``): no prefix through that candidate is asked for before its own test passes, so
   the merges behind it would be written and judged for nothing on every look; their own tests
   are asked for all the same.

Asking writes a ``pending`` result per required check (its ``updated`` time starts the timeout)
and a ``check.requested`` event naming the changeset to test (``of``: ``result`` for a prefix,
``proposal`` for a proposal's own), which a runner materialises. A report of a final state wakes
the streams that wait (:func:`integration.wake_for_checks`); a timer wakes them when the first
pending check would time out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from django.utils import timezone

from engine.graph import is_ancestor
from engine.store import ObjectStore

from ..models import CheckResult, Operation, Repository
from . import checks

#: A tree's state for some checks: every one passed; one failed (or timed out); some are still
#: running; or it was never asked for (some check has no result on it).
SUCCESS, FAILED, PENDING, MISSING = "success", "failed", "pending", "missing"
#: What a check's facts are: name -> (state, url, seconds since reported).
Facts = Mapping[str, tuple[str, str, float]]


@dataclass(frozen=True)
class Candidate:
    """A queued proposal that integrated cleanly, in the queue's order."""

    operation: Operation
    #: The stream's head after this candidate and every one before it.
    head: str
    #: The checks its decision requires (none under an admin's bypass), and their timeout.
    names: tuple[str, ...]
    timeout_s: int


@dataclass(frozen=True)
class Verdict:
    #: How many candidates land now (a prefix; 0: none).
    land: int
    #: The tree they were tested on, when some land after checks.
    tree: str | None = None
    #: The first candidate's failed checks, when it is refused.
    refuse: Facts | None = None
    #: Waiting: look again after this many seconds at the latest (the first pending check's
    #: timeout), or sooner when a check reports.
    wake_in_s: float | None = None


class Results:
    """The stored results of some trees, read in one query, as the gate sees them now."""

    def __init__(self, repository: Repository, trees: Iterable[str]) -> None:
        self.rows = checks.results_for_trees(repository, trees)
        self.now = timezone.now()

    def facts(self, tree: str, names: Sequence[str]) -> dict[str, tuple[str, str, float]]:
        return {
            row.name: (row.state, row.url, (self.now - row.updated).total_seconds())
            for row in self.rows.get(tree, [])
            if row.name in names
        }

    def state(self, tree: str, names: Sequence[str], timeout_s: int) -> str:
        results = self.facts(tree, names)
        if len(results) < len(names):
            return MISSING
        states = [
            FAILED if state in ("failure", "error") or (state == "pending" and age > timeout_s) else state
            for state, _url, age in results.values()
        ]
        if FAILED in states:
            return FAILED
        return SUCCESS if all(state == SUCCESS for state in states) else PENDING

    def wait_s(self, tree: str, names: Sequence[str], timeout_s: int) -> float:
        """Seconds until the oldest pending check of ``tree`` times out (``timeout_s`` if none runs)."""
        ages = [age for state, _url, age in self.facts(tree, names).values() if state == "pending"]
        return timeout_s - max(ages, default=0.0)


def own_results(repository: Repository, store: ObjectStore, operations: Sequence[Operation]) -> Results:
    """The results of the queued proposals' own changesets (one query), for :func:`own_failure`."""
    return Results(repository, {store.read_commit(operation.proposal.head).tree for operation in operations})


def own_failure(
    results: Results, store: ObjectStore, operation: Operation, names: Sequence[str], timeout_s: int
) -> Facts | None:
    """The failed checks of the proposal's own changeset, when it failed one it needs."""
    tree = store.read_commit(operation.proposal.head).tree
    if not names or results.state(tree, names, timeout_s) != FAILED:
        return None
    return results.facts(tree, names)


def own_passed(
    results: Results, store: ObjectStore, operation: Operation, names: Sequence[str], head: str | None
) -> bool:
    """Whether the proposal's own test lets it join a batch on ``head``: it passed, none is
    needed, or it fast-forwards ``head`` (its result is its own changeset: that is its test)."""
    tree = store.read_commit(operation.proposal.head).tree
    if not names or results.state(tree, names, MAX_TIMEOUT) == SUCCESS:
        return True
    return head is None or is_ancestor(store, head, operation.proposal.head)


#: No timeout: whether a result passed does not depend on one.
MAX_TIMEOUT = 2**31


def judge(
    repository: Repository,
    stream: str,
    store: ObjectStore,
    candidates: Sequence[Candidate],
    behind: Sequence[Candidate] = (),
    *,
    speculative: bool,
) -> Verdict:
    """What to do with the queue's candidates now (see the module's docstring); ``behind``: the
    queued proposals after them, not integrated yet (:func:`own_passed` failed for the first),
    whose own tests are asked for."""
    count = len(candidates)
    needed: list[tuple[str, ...]] = []  # the checks prefix i + 1 needs: every one of its candidates'
    timeouts: list[int] = []
    for candidate in candidates:
        needed.append(tuple(sorted({*(needed[-1] if needed else ()), *candidate.names})))
        timeouts.append(min((timeouts[-1] if timeouts else candidate.timeout_s), candidate.timeout_s))
    if not count or not needed[-1]:
        return Verdict(land=count)
    trees = [store.read_commit(candidate.head).tree for candidate in candidates]
    own = [store.read_commit(candidate.operation.proposal.head).tree for candidate in candidates]
    own_behind = [store.read_commit(candidate.operation.proposal.head).tree for candidate in behind]
    results = Results(repository, {*trees, *own, *own_behind})
    states = {
        size: results.state(trees[size - 1], needed[size - 1], timeouts[size - 1]) for size in range(1, count + 1)
    }
    passed = [size for size, found in states.items() if found == SUCCESS]
    if passed:
        return Verdict(land=max(passed), tree=trees[max(passed) - 1])
    failed = min((size for size, found in states.items() if found == FAILED), default=None)
    if failed == 1:
        return Verdict(land=0, refuse=results.facts(trees[0], needed[0]))

    def own_state(index: int) -> str:
        candidate = candidates[index]
        if own[index] == trees[index]:  # it fast-forwards the prefix before it: that is its test
            return SUCCESS
        return results.state(own[index], candidate.names, candidate.timeout_s)

    ready = 1  # the first candidate's prefix is its own result
    while ready < count and own_state(ready) == SUCCESS:
        ready += 1
    pending = [size for size, found in states.items() if found == PENDING and (failed is None or size < failed)]
    asked: list[tuple[str, tuple[str, ...], int]] = []  # (tree, names, timeout)
    unready = [(candidates[index], own[index], own_state(index)) for index in range(1, count)]
    unready += [
        (candidate, tree, results.state(tree, candidate.names, candidate.timeout_s))
        for candidate, tree in zip(behind, own_behind, strict=True)
    ]
    for candidate, tree, found in unready:
        if candidate.names and found == MISSING:
            context = {"of": "proposal", "changeset": candidate.operation.proposal.head}
            _ask(repository, stream, tree, candidate.names, [candidate], context)
            asked.append((tree, candidate.names, candidate.timeout_s))
    size = None
    if failed is not None:
        size = (failed + 1) // 2 if not pending else None  # bisect: half of the smallest failed prefix
    elif states[ready] == MISSING and (speculative or not pending):
        size = ready
    if size is not None:
        context = {"of": "result", "changeset": candidates[size - 1].head}
        _ask(repository, stream, trees[size - 1], needed[size - 1], candidates[:size], context)
        asked.append((trees[size - 1], needed[size - 1], timeouts[size - 1]))
    waiting = [(trees[size - 1], needed[size - 1], timeouts[size - 1]) for size in pending]
    waiting += [(tree, candidate.names, candidate.timeout_s) for candidate, tree, found in unready if found == PENDING]
    waits = [results.wait_s(*item) for item in waiting] + [timeout for _tree, _names, timeout in asked]
    return Verdict(land=0, wake_in_s=max(0.0, min(waits, default=float(timeouts[-1]))) + 1.0)


def _ask(
    repository: Repository,
    stream: str,
    tree: str,
    names: Sequence[str],
    candidates: Sequence[Candidate],
    context: dict,
) -> None:
    """Ask for ``names`` on ``tree``: a pending result per check it lacks (their time starts the
    timeout) and the ``check.requested`` event, in the landing's transaction."""
    for name in names:  # get_or_create: a runner's first report may race this one (a savepoint)
        CheckResult.objects.get_or_create(
            repository=repository, tree=tree, name=name, defaults={"state": CheckResult.State.PENDING}
        )
    proposals = [candidate.operation.proposal_id for candidate in candidates]
    checks.request_checks(repository, tree, names, {"stream": stream, **context, "proposals": proposals})
