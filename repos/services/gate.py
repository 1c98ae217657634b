"""The landing queue's gate: a stream whose policy requires checks moves only to a result whose
tree every required check passed, batch after batch, bisecting a batch that fails.

The landing (repos/services/integration.py) integrates the queued proposals one on top of the
other, as always: candidate 1 on the stream's head, candidate 2 on that result, and so on. The
result after the first *s* candidates is the *prefix* s; its tree is what the checks test. The
gate decides from the check results those trees already have (repos/services/checks.py: kept by
tree, so a prefix recomputed on top of a landed one has the tree it had before, and its results),
and from nothing else, so a restart, another worker or a crash loses no state:

1. The longest prefix whose tree passed every check its proposals need **lands**.
2. Otherwise, if the prefix of one candidate failed (a check failed, errored, or stayed pending
   past the policy's ``check_timeout_s``), that proposal is **refused** (``policy_denied``,
   requirement ``checks``, naming the check and its link); it stays open for a revision, and the
   candidates behind it are integrated again without it.
3. Otherwise the landing **waits**: on the prefixes under test, or, when the smallest tested
   prefix failed and nothing shorter is under test, on half of it (Bors' bisection: one bad change
   among n costs about log2 n rounds, and the good part before it lands as soon as it passed); or,
   when nothing was asked yet, on the whole batch. With ``speculative``, a batch that grew while a
   prefix is under test is asked for as well, so that it is tested on top of the prefix while the
   prefix is still being tested (Zuul's speculative testing).

Asking writes a ``pending`` result per required check (its ``updated`` time starts the timeout)
and a ``check.requested`` event naming the result's changeset, which a runner materialises. A
report of a final state wakes the streams that wait (:func:`integration.wake_for_checks`); a
timer wakes them when the first pending check would time out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.utils import timezone

from engine.store import ObjectStore

from ..models import CheckResult, Operation, Repository
from . import checks

#: A prefix's state: every required check passed; one failed (or timed out); some are still
#: running; or it was never asked for (some required check has no result on its tree).
SUCCESS, FAILED, PENDING, MISSING = "success", "failed", "pending", "missing"


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
    #: The first candidate's failed checks (name -> (state, url, seconds since reported)), when
    #: it is refused.
    refuse: Mapping[str, tuple[str, str, float]] | None = None
    #: Waiting: look again after this many seconds at the latest (the first pending check's
    #: timeout), or sooner when a check reports.
    wake_in_s: float | None = None


def judge(
    repository: Repository, stream: str, store: ObjectStore, candidates: Sequence[Candidate], *, speculative: bool
) -> Verdict:
    """What to do with the queue's candidates now (see the module's docstring)."""
    count = len(candidates)
    needed: list[tuple[str, ...]] = []
    timeouts: list[int] = []
    for candidate in candidates:
        names = sorted({*(needed[-1] if needed else ()), *candidate.names})
        needed.append(tuple(names))
        timeouts.append(min((timeouts[-1] if timeouts else candidate.timeout_s), candidate.timeout_s))
    if not count or not needed[-1]:
        return Verdict(land=count)
    trees = [store.read_commit(candidate.head).tree for candidate in candidates]
    rows = checks.results_for_trees(repository, set(trees))
    now = timezone.now()

    def facts(size: int) -> dict[str, tuple[str, str, float]]:
        found = {row.name: row for row in rows.get(trees[size - 1], [])}
        return {
            name: (row.state, row.url, (now - row.updated).total_seconds())
            for name, row in found.items()
            if name in needed[size - 1]
        }

    def state(size: int) -> str:
        results, timeout = facts(size), timeouts[size - 1]
        if len(results) < len(needed[size - 1]):
            return MISSING
        states = [
            FAILED if result in ("failure", "error") or (result == "pending" and age > timeout) else result
            for result, _url, age in results.values()
        ]
        if FAILED in states:
            return FAILED
        return SUCCESS if all(result == SUCCESS for result in states) else PENDING

    states = {size: state(size) for size in range(1, count + 1)}
    passed = [size for size, found in states.items() if found == SUCCESS]
    if passed:
        return Verdict(land=max(passed), tree=trees[max(passed) - 1])
    failed = min((size for size, found in states.items() if found == FAILED), default=None)
    if failed == 1:
        return Verdict(land=0, refuse=facts(1))
    pending = [size for size, found in states.items() if found == PENDING and (failed is None or size < failed)]
    ask = []
    if failed is not None and not pending:
        ask.append((failed + 1) // 2)  # bisect: half of the smallest failed prefix
    elif failed is None and (not pending or (speculative and states[count] == MISSING)):
        ask.append(count)  # the whole batch (beside a prefix under test, when speculative)
    for size in ask:
        _ask(repository, stream, trees[size - 1], needed[size - 1], candidates[:size])
    waits = [timeouts[size - 1] - _oldest(facts(size)) for size in pending] + [timeouts[size - 1] for size in ask]
    return Verdict(land=0, wake_in_s=max(0.0, min(waits)) + 1.0)


def _oldest(results: Mapping[str, tuple[str, str, float]]) -> float:
    return max((age for state, _url, age in results.values() if state == "pending"), default=0.0)


def _ask(repository: Repository, stream: str, tree: str, names: Sequence[str], candidates: Sequence[Candidate]) -> None:
    """Ask for ``names`` on ``tree``: a pending result per check it lacks (their time starts the
    timeout) and the ``check.requested`` event, in the landing's transaction."""
    for name in names:  # get_or_create: a runner's first report may race this one (a savepoint)
        CheckResult.objects.get_or_create(
            repository=repository, tree=tree, name=name, defaults={"state": CheckResult.State.PENDING}
        )
    context = {
        "stream": stream,
        "changeset": candidates[-1].head,
        "proposals": [candidate.operation.proposal_id for candidate in candidates],
    }
    checks.request_checks(repository, tree, names, context)
