"""Integration: the landing queue, and the only code that moves a stream head.

Asking to integrate a proposal records an :class:`Operation` (``queued``) and hands the stream to
the landing job :data:`LAND_STREAM` once that commits (repos/services/dispatch.py: on the worker
pool with a broker, in this process without one; retried alike on a transient database error).
Landing a stream takes the stream's row lock, so one worker at a time drains its queued
operations, in order: each is integrated by the engine on top of the previous one's result, their
objects are made durable, and then one transaction moves the head by compare-and-swap on
``Stream.version`` and records every operation's outcome, every proposal's new state and one
event per operation. Different streams land in parallel (PostgreSQL row locks; SQLite serializes
all writers anyway).

Crash safety: objects are fsynced before the transaction that names them commits; the outcome,
the head and the event commit together or not at all. An operation a crash left ``queued`` is
landed by :func:`recover` (at worker start and on a schedule) exactly once, because landing it
is what moves it out of ``queued``.

The compare-and-swap cannot lose while the row lock is held; it still guards against anything
that moves a head without the lock, with the reference's bounded retry (attempts default 24,
deterministic spread backoff, at most 32 ms). When the attempts run out the operations fail
as ``aborted`` (retryable) and their proposals are untouched.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from engine.errors import EngineError
from engine.graph import is_ancestor
from engine.integrate import Integration, Outcome, integrate
from engine.merge import Rule
from engine.policy import DEFAULT_CHECK_TIMEOUT_S, Decision, Policy
from engine.store import ObjectStore
from engine.trees import diff_trees

from ..errors import Aborted, ApiError, Forbidden, NotFound, WrongState, from_engine
from ..lookups import Insert, Rows, Update, columns, instance
from ..models import Changeset, Credential, Operation, Proposal, ProposalRevision, Repository, ResolverRule, Stream
from . import derived, gate, metrics, policies, refmirror, search
from .dispatch import Job, after_commit, jobs_run_in_process, later
from .events import (
    MAX_PATHS,
    PROPOSAL_CONFLICT,
    STREAM_DELETED,
    STREAM_INTEGRATE,
    append_all,
    append_event,
    author,
    changed_paths,
)
from .opening import Opening
from .repositories import find_stream
from .stores import restore_journaled, server_signature, store_for

User = get_user_model()

_FINISHED_PROPOSAL = (Proposal.State.INTEGRATED, Proposal.State.CONFLICTED)


def request_integration(proposal: Proposal, *, bypass: dict | None = None) -> Operation:
    """The operation integrating ``proposal``: its last finished one, or a new one, landed in this
    transaction where it may be, else queued.

    Integrating a proposal that already landed (or conflicted) answers the first outcome again;
    asking while one is queued joins it. A closed proposal is refused (and never landed: the
    landing checks again, for one closed while queued). ``bypass`` (an admin's, checked by
    ``policies.check_bypass``) lands it whatever the policy says, and is recorded.

    The stream's landing lock is taken first, as a one-call landing takes it (docs/adr/0029):
    without workers the operation lands in this transaction, with the rest of the queue; with
    workers too when the stream's row is free, nothing is queued on it and it requires no checks.
    Otherwise it is queued and landed after the commit (by a worker, or in this process).
    """
    if proposal.state == Proposal.State.CLOSED:
        raise closed_refusal(proposal)
    if proposal.state in _FINISHED_PROPOSAL:
        finished = proposal.operations.filter(state=Operation.State.DONE).order_by("-id").first()
        if finished is not None:
            return finished
    workers = not jobs_run_in_process()
    try:
        with transaction.atomic():
            locked = _lock_stream_by_id(proposal.stream_id, unless_busy=workers)
            operation = _INSERT_OPERATION.run(
                Operation(
                    repository_id=proposal.repository_id, stream_id=proposal.stream_id, proposal=proposal, bypass=bypass
                )
            )
            if locked is None or (workers and not may_land_held(locked)):
                _enqueue_on_commit(proposal.stream_id)
            else:
                # The queue is read under the lock held here (the proposal as it is now, not as
                # the caller read it) and landed in this transaction: one commit, no hand-off.
                land_stream(proposal.stream_id, locked)
                operation = next((landed for landed in locked.batch if landed.pk == operation.pk), operation)
                operation.stream, operation.repository = locked.stream, locked.stream.repository
    except IntegrityError:  # one is queued already (the partial unique constraint)
        operation = Operation.objects.get(proposal=proposal, state=Operation.State.QUEUED)
        # Asking again also drives the landing: the first landing may have failed (a lost
        # database connection), and landing a drained queue costs one query.
        _enqueue_on_commit(proposal.stream_id)
    return operation


_INSERT_OPERATION = Insert(Operation)


def queue_opened(proposal: Proposal) -> Operation:
    """The queued operation of a proposal opened in the caller's transaction: none can exist yet,
    so no savepoint for request_integration's one-queued constraint."""
    operation = _INSERT_OPERATION.run(new_operation(proposal))
    _enqueue_on_commit(proposal.stream_id)
    return operation


def new_operation(proposal: Proposal) -> Operation:
    """The operation integrating ``proposal``, queued now, not written yet (its creation time is
    now, whenever its row is written: a one-call landing writes it landed, docs/adr/0024)."""
    return Operation(repository=proposal.repository, stream=proposal.stream, proposal=proposal, created=timezone.now())


def closed_refusal(proposal: Proposal) -> WrongState:
    return WrongState(f"proposal {proposal.pk} is closed: reopen it (POST .../reopen) to integrate it")


def resolver_rules(repository: Repository) -> list[Rule]:
    """The repository's resolver rules as the engine takes them (plain data), in their order."""
    _using, rows = _RULES.all(repository.pk, model=ResolverRule)
    return [Rule(pattern, rule) for pattern, rule in rows]


_RULES = Rows(lambda repository: ResolverRule.objects.filter(repository=repository).values_list("pattern", "rule"), int)


class _RulesWhenAsked(Sequence[Rule]):
    """A repository's resolver rules, read the first time they are asked for: only a merge
    applies them, so a landing that fast-forwards never reads them."""

    def __init__(self, repository: Repository) -> None:
        self._repository = repository
        self._rules: list[Rule] | None = None

    def _read(self) -> list[Rule]:
        if self._rules is None:
            self._rules = resolver_rules(self._repository)
        return self._rules

    def __getitem__(self, index):  # type: ignore[override]  # an int or a slice, as list's
        return self._read()[index]

    def __len__(self) -> int:
        return len(self._read())

    def __iter__(self) -> Iterator[Rule]:
        return iter(self._read())


def _enqueue_on_commit(stream_id: int) -> None:
    after_commit(LAND_STREAM, stream_id)


def get_operation(repository: Repository, operation_id: object) -> Operation:
    try:
        number = int(operation_id)  # type: ignore[call-overload]
    except (ValueError, TypeError):
        number = 0
    using, rows = _OPERATION.all(repository.pk, number, model=Operation, limit=1) if 0 < number < 2**63 else ("", [])
    if not rows:
        raise NotFound(f"no operation {operation_id} in {repository.name}")
    operation = instance(Operation, using, rows[0])
    operation.stream = instance(Stream, using, rows[0], _OPERATION_COLUMNS)
    return operation


#: The integrate endpoint's answer reads its operation (repos/lookups.py: compiled once).
_OPERATION = Rows(
    lambda repository, pk: Operation.objects.select_related("stream").filter(repository=repository, pk=pk), int, int
)


def wait_for(operation: Operation, timeout_s: float) -> Operation:
    """The operation, refreshed until it is no longer queued or ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    pause = 0.005
    while operation.state == Operation.State.QUEUED:
        # Refresh before the first pause: when Celery is eager the operation has landed already
        # (on commit, before this is called), and the copy in hand still says queued. A compiled
        # read: under many agents a request polls a dozen times while the queue drains.
        _using, rows = _OPERATION_STATE.all(operation.pk, model=Operation, limit=1)
        if not rows:  # deleted with its stream meanwhile
            raise NotFound(f"operation {operation.pk} is gone: its stream was deleted")
        operation.state, operation.outcome, operation.error, operation.attempts, operation.finished = rows[0]
        if operation.state != Operation.State.QUEUED or time.monotonic() >= deadline:
            break
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.1)
    return operation


_OPERATION_STATE = Rows(
    lambda operation: Operation.objects.filter(pk=operation).values_list(
        "state", "outcome", "error", "attempts", "finished"
    ),
    int,
)


@dataclass
class Held:
    """What a request holds in its own transaction when it lands the stream there: the stream's
    row, locked by :func:`lock_stream` before anything else, with its repository, and whether
    operations were queued on it then.

    The integrate endpoint (:func:`request_integration`) holds no operation: its landing reads
    the queue. A one-call landing (repos/services/landing.py) also holds the one operation it
    queued since, with its proposal and revision 1 (``opening``), none of them written yet, and
    the landing reads none of them again. When it lands that operation at once by a
    fast-forward without a policy to judge it, it inserts the three rows in their final state
    (docs/adr/0024); otherwise it writes them queued first (:meth:`write_rows`) and updates them
    as it updates every operation, and with operations queued before it, or a policy that
    requires checks, it writes them with their event and reads the queue as every other landing
    does (:meth:`write_pending`)."""

    stream: Stream
    queued_before: bool
    operation: Operation | None = None
    opening: Opening | None = None
    #: Whether the operation's changeset is a child of the stream's head (or the stream is
    #: empty): it fast-forwards, which the engine decides without the merge message that names
    #: the proposal's id.
    fast_forward: bool = False
    events: list[tuple[str, dict]] = field(default_factory=list)
    #: The operations the landing read from the queue under this lock, as it left them (done,
    #: failed, or still queued): without an ``operation`` held, the landing reads the queue as
    #: every landing does, in the caller's transaction (the integrate endpoint's).
    batch: list[Operation] = field(default_factory=list)

    def write_rows(self) -> None:
        """Insert the proposal, its revision and its operation as they stand (open, queued),
        unless written already; their ``proposal.opened`` event is written with the landing's."""
        if self.operation is not None and self.opening is not None and not self.opening.written:
            _insert_opened(self.operation, self.opening)
            self.events.insert(0, self.opening.event())

    def write_pending(self) -> None:
        """Write everything held (:meth:`write_rows`, then the pending events): the landing that
        goes on reads the queue as every landing, or another thread lands it."""
        self.write_rows()
        events, self.events = self.events, []
        append_all(self.stream.repository, events)

    def take_events(self) -> list[tuple[str, dict]]:
        events, self.events = self.events, []
        return events


def _insert_opened(operation: Operation, opening: Opening, outcome: dict | None = None) -> None:
    """Insert a one-call landing's rows as they stand (queued, failed, or done with ``outcome``):
    the proposal first, then its operation (a done one's outcome names the proposal; its own id
    is added on read, ``Operation.outcome_document``), then revision 1 (its outcome names both)."""
    proposal = opening.insert_proposal()
    operation.proposal = proposal
    if outcome is not None:
        operation.outcome = {**outcome, "proposal": proposal.pk}
    _INSERT_OPERATION.run(operation)
    if outcome is not None:
        opening.revision.outcome = operation.outcome_document()
    opening.insert_revision()


def lock_stream(repository: str, name: str, *, unless_busy: bool = False) -> Held | None:
    """The stream ``name`` of the repository named ``repository``, its row locked until the
    transaction ends (the landing's lock), with its repository as it is now (the request reads
    it nowhere else) and whether operations are queued on it: one query. NotFound as
    ``find_stream`` (the repository's, or the stream's). ``unless_busy``: None at once when
    another transaction holds the row (a worker landing the stream, another request), rather
    than a wait for it (PostgreSQL's SKIP LOCKED; SQLite's one writer never finds a row held)."""
    query = _LOCKED_BY_NAME_UNLESS_BUSY if unless_busy else _LOCKED_BY_NAME
    queryable = "\x00" not in repository and "\x00" not in name
    using, rows = query.all(repository, name, model=Stream, limit=1) if queryable else ("", [])
    if not rows:
        if unless_busy:
            return None  # busy, or missing: the caller reads the stream, and its NotFound is the one
        find_stream(repository, name)  # raises the one NotFound
        raise NotFound(f"no stream named {name!r} in {repository}")  # (deleted meanwhile)
    return _held(using, rows[0])


def _lock_stream_by_id(stream_id: int, *, unless_busy: bool) -> Held | None:
    """:func:`lock_stream` by the stream's id; None also when the stream is gone."""
    query = _LOCKED_BY_ID_UNLESS_BUSY if unless_busy else _LOCKED_BY_ID
    using, rows = query.all(stream_id, model=Stream, limit=1)
    return _held(using, rows[0]) if rows else None


def _held(using: str, row: list) -> Held:
    stream = instance(Stream, using, row)
    stream.repository = instance(Repository, using, row, _STREAM_COLUMNS)
    return Held(stream, bool(row[-1]))


def land_stream(stream_id: int, held: Held | None = None) -> int:
    """Land every queued operation of the stream, batch after batch; returns how many finished.

    A batch smaller than the batch size emptied the queue; an operation queued after it was read
    has its own landing task (enqueued when it committed), so there is no need to look again.
    Operations waiting for required checks stay queued: a check's report (or its timeout) lands
    the stream again.

    Calls for one stream coalesce in a process: while a thread lands it, another call only asks
    that thread to look once more when it is done, and returns 0. Landers of one stream take
    turns on its row lock anyway, and a pass over a gated queue judges every queued proposal:
    fifty check reports in a second are then two passes, not fifty in a row. A caller inside a
    transaction (a one-call landing without workers) has its operation uncommitted, invisible
    to the thread at work, so its look is asked for again when it commits.

    ``held``: what a one-call landing holds in the caller's transaction (see :class:`Held`).
    """
    with _landing_lock:
        if stream_id in _landing_now:
            _landing_now[stream_id] = True
            if transaction.get_connection().in_atomic_block:
                after_commit(LAND_STREAM, stream_id)
            if held is not None:
                held.write_pending()
            return 0
        _landing_now[stream_id] = False
    landed = 0
    try:
        while True:
            count, again = _land_batch(stream_id, held)
            held = None  # the first batch took it
            landed += count
            if again:
                continue
            with _landing_lock:  # checked and given up under one lock: no ask falls between
                if not _landing_now[stream_id]:
                    del _landing_now[stream_id]
                    return landed
                _landing_now[stream_id] = False  # asked again while this pass ran: one more
    except BaseException:
        # The failed pass is retried by its job's policy (or left to recovery), which looks at
        # everything queued, so an ask that came meanwhile is answered by that.
        with _landing_lock:
            _landing_now.pop(stream_id, None)
        raise


#: The streams a thread of this process is landing now, each with whether another call asked for
#: a look while it was at work (see :func:`land_stream`).
_landing_now: dict[int, bool] = {}
_landing_lock = threading.Lock()


#: Draining a stream's landing queue, after the commit that queued an operation.
LAND_STREAM = Job("workers.tasks.land_stream", land_stream)
#: Deriving the heads a landing left underived (a history too long to derive in a landing).
DERIVE_MISSING = Job("workers.tasks.derive_missing", derived.derive_missing)


class Recovery(NamedTuple):
    #: Operations a crash had left queued, now landed (done or failed).
    landed: int
    #: Changesets whose derived data was missing, now derived.
    derived: int


def recover(progress: Callable[[str, int, int], None] | None = None) -> Recovery:
    """Finish what a crash (or an upgrade) left behind: land every queued operation, then derive
    every head's missing data (``progress``: see ``derived.derive_missing``). Run at worker
    start, on the beat schedule and by ``make serve``; the ref mirror is rebuilt beside it
    (``refmirror.rebuild_all``: by ``agentgit_recover``, at worker start and by maintenance)."""
    restore_journaled()  # after a power loss, the journaled packs first: rows name their objects
    queued = Operation.objects.filter(state=Operation.State.QUEUED).order_by()  # no ordering: DISTINCT by stream
    stream_ids = queued.values_list("stream_id", flat=True).distinct()
    landed = sum(land_stream(stream_id) for stream_id in list(stream_ids))
    return Recovery(landed, derived.derive_missing(progress))


class _LostRace(Exception):
    """The stream head moved between reading it and the compare-and-swap."""


def _land_batch(stream_id: int, held: Held | None = None) -> tuple[int, bool]:
    config = settings.AGENTGIT
    attempts = max(1, config["INTEGRATE_ATTEMPTS"])
    for attempt in range(1, attempts + 1):
        try:
            return _land_once(stream_id, config["LANDING_BATCH"], held)
        except _LostRace as lost:
            if held is not None:  # (cannot happen under the caller's lock) the queue as read
                held.write_pending()
                held = None
            first_operation = lost.args[0]
            if attempt < attempts:
                time.sleep(backoff_ms(first_operation, attempt, config["INTEGRATE_BACKOFF_MS"]) / 1000)
    return _abort_queued(stream_id, attempts), False


#: The landing's queries, compiled once (repos/lookups.py): a landing is a handful of short
#: statements, and building them with the ORM cost about half of its CPU.
#:
#: The stream's row only (of=self), and FOR NO KEY UPDATE: a plain FOR UPDATE of the join also
#: locked the repository row and blocked the foreign-key checks (FOR KEY SHARE, at COMMIT:
#: Django's constraints are deferred) of a concurrent proposal or operation insert that had
#: bumped the repository's event_seq: a deadlock on PostgreSQL. Landers of one stream still take
#: turns (NO KEY UPDATE conflicts with itself).
_LOCKED_STREAM = Rows(
    lambda stream: (
        Stream.objects.select_for_update(of=("self",), no_key=True).select_related("repository").filter(pk=stream)
    ),
    int,
    write=True,
)
_STREAM_COLUMNS = len(columns(Stream))


def _locked_with_queue(where: Callable[..., dict], *kinds: type, skip_locked: bool) -> Rows:
    """:func:`lock_stream`'s query: as ``_LOCKED_STREAM``, found by ``where``, with whether
    operations are queued; with ``skip_locked``, no row rather than a wait when another
    transaction holds it."""
    return Rows(
        lambda *values: (
            Stream.objects.select_for_update(of=("self",), no_key=True, skip_locked=skip_locked)
            .filter(**where(*values))
            .order_by()
            .annotate(queued=Exists(Operation.objects.filter(stream=OuterRef("pk"), state=Operation.State.QUEUED)))
            .values_list(*columns(Stream), *columns(Repository, "repository__"), "queued")
        ),
        *kinds,
        write=True,
    )


def _by_name(repository, name) -> dict:
    return {"repository__name": repository, "name": name}


def _by_id(stream) -> dict:
    return {"pk": stream}


_LOCKED_BY_NAME = _locked_with_queue(_by_name, str, str, skip_locked=False)
_LOCKED_BY_NAME_UNLESS_BUSY = _locked_with_queue(_by_name, str, str, skip_locked=True)
_LOCKED_BY_ID = _locked_with_queue(_by_id, int, skip_locked=False)
_LOCKED_BY_ID_UNLESS_BUSY = _locked_with_queue(_by_id, int, skip_locked=True)
_OPERATION_COLUMNS = len(columns(Operation))
#: The queued operations in order, each with its proposal and the proposal's author (and user).
_QUEUED = Rows(
    lambda stream: (
        Operation.objects.filter(stream=stream, state=Operation.State.QUEUED)
        .order_by("id")
        .values_list(
            *columns(Operation),
            *columns(Proposal, "proposal__"),
            *columns(Credential, "proposal__author__"),
            *columns(User, "proposal__author__user__"),
        )
    ),
    int,
    write=True,
)
_LATEST_REVISION = Rows(
    lambda proposal: (
        ProposalRevision.objects.filter(proposal=proposal).order_by("-number").values_list(*columns(ProposalRevision))
    ),
    int,
    write=True,
)

#: The landing's writes, one statement each (repos/lookups.py).
_MOVE_HEAD = Update(Stream, ("head", "updated"), where=("id", "version"), increment=("version",))
_FINISH_OPERATION = Update(Operation, ("state", "outcome", "finished"), where=("id",), increment=("attempts",))
_FAIL_OPERATION = Update(Operation, ("state", "error", "finished"), where=("id",), increment=("attempts",))
_RECORD_REVISION = Update(ProposalRevision, ("outcome",), where=("id",))
_RECORD_PROPOSAL = Update(
    Proposal, ("state", "outcome", "result_changeset", "result_head", "conflicts", "decision", "updated"), where=("id",)
)


def _locked_stream(stream_id: int) -> Stream | None:
    """The stream's row, locked until the transaction ends, with its repository."""
    using, rows = _LOCKED_STREAM.all(stream_id, model=Stream)
    if not rows:
        return None
    stream = instance(Stream, using, rows[0])
    stream.repository = instance(Repository, using, rows[0], _STREAM_COLUMNS)
    return stream


#: Where a queued row's proposal, author and user columns begin.
_AT_AUTHOR = _OPERATION_COLUMNS + len(columns(Proposal))
_AT_USER = _AT_AUTHOR + len(columns(Credential))


def _queued(stream: Stream, batch_size: int) -> list[Operation]:
    """The stream's first ``batch_size`` queued operations, each with its proposal and author."""
    using, rows = _QUEUED.all(stream.pk, model=Operation, limit=batch_size)
    operations = []
    for row in rows:
        operation = instance(Operation, using, row)
        proposal = instance(Proposal, using, row, _OPERATION_COLUMNS)
        if proposal.author_id is not None:
            credential = instance(Credential, using, row, _AT_AUTHOR)
            credential.user = instance(User, using, row, _AT_USER)
            proposal.author = credential
        operation.proposal = proposal
        operations.append(operation)
    return operations


def _latest_revision(proposal: Proposal) -> ProposalRevision | None:
    using, rows = _LATEST_REVISION.all(proposal.pk, model=ProposalRevision, limit=1)
    return instance(ProposalRevision, using, rows[0]) if rows else None


def _land_once(stream_id: int, batch_size: int, held: Held | None = None) -> tuple[int, bool]:
    """Land what the queue's first ``batch_size`` operations allow; how many were finished, and
    whether to look at the queue again at once (more may be landable).

    ``held`` (see :class:`Held`): when its operation is the whole queue and the stream requires
    no checks, the queue is that operation, the stream as the caller locked it, and the landing
    runs in the caller's transaction without a savepoint of its own: it writes nothing before
    its compare-and-swap, the one step that raises to be tried again (and cannot fail under the
    caller's lock). Otherwise the caller's event is written and the landing is every landing.
    """
    if held is not None and held.operation is not None and not _holds_the_queue(held):
        held.write_pending()
        held = None
    with transaction.atomic() if held is None else contextlib.nullcontext():
        stream = _locked_stream(stream_id) if held is None else held.stream
        if stream is None:
            return 0, False  # deleted (with its queued operations) since the landing was asked for
        repository = stream.repository
        policy = policies.policy_of(repository)
        gated = _gated(policy, stream.name)
        if held is not None and not (held.fast_forward and policy is None):
            # Its rows written first, as a queued operation's: a merge's message names the
            # proposal's id, and a policy judges the proposal as it is stored (its reviews).
            held.write_rows()
        operations = _queued(stream, batch_size) if held is None or held.operation is None else [held.operation]
        if held is not None:
            held.batch = operations
        if not operations:
            return 0, False
        crash_point("operation_recorded")
        store = store_for(repository.name)
        head = stream.head
        # The graph nodes other processes derived (ancestry questions about them read no
        # objects), unless this process knows the head already: it derived it itself.
        known = derived.known_at(repository, store, head)
        rules = _RulesWhenAsked(repository)
        # The queued proposals' own test results, when the stream requires checks: a proposal
        # whose own changeset failed is refused before it spoils a batch (repos/services/gate.py).
        own = gate.own_results(repository, store, operations) if gated else None
        own_refused: set[int] = set()  # operation ids refused for their own changeset's failure
        results: list[tuple[Operation, Integration | None, EngineError | ApiError | None]] = []
        moves: dict[int, tuple[str | None, str]] = {}  # operation id -> the head it moved from, to
        decisions: dict[int, Decision] = {}  # operation id -> the policy decision it lands by
        candidates: list[gate.Candidate] = []  # the clean integrations, in order, for the gate
        # Queued behind a candidate whose own test has not passed: no prefix through it is asked
        # for until it has, so it is not integrated yet (its own test is asked for all the same).
        behind: list[gate.Candidate] = []
        behind_at = 0  # where in ``results`` the first of them would have been
        for operation in operations:
            if operation.proposal.state == Proposal.State.CLOSED:
                results.append((operation, None, closed_refusal(operation.proposal)))
                continue
            if policy is not None:
                # Judged here, on the head this operation lands on and the reviews as they are
                # now, and recorded with the outcome in this transaction. Required checks are
                # the gate's, below: they are of the result, which is not made yet.
                decision = policies.judge_proposal(policy, store, stream.name, head, operation)
                if not decision.allowed and not decision.waiting:
                    results.append((operation, None, _refused(decision, operation, stream.name)))
                    continue
                decisions[operation.pk] = decision
                failed = own is not None and gate.own_failure(
                    own, store, operation, _checks_of(decision), decision.check_timeout_s
                )
                if failed:
                    own_refused.add(operation.pk)
                    checked = f"the proposal's own changeset {operation.proposal.head}"
                    refused = policies.judge_proposal(
                        policy, store, stream.name, head, operation, checks=failed, checked=checked
                    )
                    results.append((operation, None, _refused(refused, operation, stream.name)))
                    continue
            decided = decisions.get(operation.pk)
            names = _checks_of(decided) if decided is not None else ()
            timeout = decided.check_timeout_s if decided is not None else DEFAULT_CHECK_TIMEOUT_S
            if own is not None and (behind or (candidates and not gate.own_passed(own, store, operation, names, head))):
                behind_at = behind_at if behind else len(results)
                behind.append(gate.Candidate(operation, operation.proposal.head, names, timeout))
                continue
            try:
                integration = _integrate(repository, store, head, operation.proposal, stream.name, rules)
            except EngineError as error:
                results.append((operation, None, error))
                continue
            results.append((operation, integration, None))
            if integration.head is not None and integration.head != head:
                moves[operation.pk] = (head, integration.head)
                candidates.append(gate.Candidate(operation, integration.head, names, timeout))
            head = integration.head
        crash_point("objects_written")
        verdict = gate.judge(repository, stream.name, store, candidates, behind, speculative=_speculative())
        # What the verdict lets finish: everything before the first candidate that does not land
        # (integrated on heads that do land), and a refused first candidate; the rest waits.
        finished = behind_at if behind else len(results)
        again = len(operations) == batch_size or (bool(behind) and verdict.land > 0)
        if verdict.land < len(candidates):
            waiting = candidates[verdict.land].operation
            finished = next(index for index, (operation, _i, _e) in enumerate(results) if operation is waiting)
            head = candidates[verdict.land - 1].head if verdict.land else stream.head
            if verdict.refuse is not None:
                assert policy is not None  # only a policy requires checks
                refused = policies.judge_proposal(
                    policy, store, stream.name, stream.head, waiting, checks=verdict.refuse
                )
                results[finished] = (waiting, None, _refused(refused, waiting, stream.name))
                finished += 1
            again = verdict.refuse is not None or verdict.land > 0
        # Refusals of a proposal's own failed test do not depend on what lands before them.
        results = results[:finished] + [item for item in results[finished:] if item[0].pk in own_refused]
        moved = head == stream.head or _MOVE_HEAD.run(head, timezone.now(), stream.pk, stream.version) == 1
        if not moved:
            raise _LostRace(operations[0].pk)
        events: list[tuple[str, dict]] = []  # the records', written together below
        for operation, integration, error in results:
            decision = decisions.get(operation.pk)
            record = None if decision is None else _landed_by(decision, verdict, integration)
            move = moves.get(operation.pk)
            paths = None if move is None else paths_between(store, *move)
            opening = held.opening if held is not None and operation is held.operation else None
            events += _record(stream, store, operation, integration, error, paths, record, opening)
        # The caller's event first (written before the landing, it would have come first).
        append_all(repository, (held.take_events() if held is not None else []) + events)
        if head != stream.head and not derived.derive_landed(repository, store, head, known):
            # A long underived history: derived in chunks, after this commits.
            after_commit(DERIVE_MISSING)
        if head != stream.head:
            search.after_landing(repository, head)  # searchable without a scan, after this commits
        if verdict.wake_in_s is not None:
            _wake_later(stream.pk, verdict.wake_in_s)  # a pending check's timeout
        crash_point("cas_applied")
    crash_point("committed")
    metrics.observe_integrations(
        (integration.outcome.value if integration is not None else "failed", operation.created, operation.finished)
        for operation, integration, _error in results
    )
    integrated = [
        (operation.proposal_id, operation.proposal.head)
        for operation, integration, _error in results
        if integration is not None and integration.outcome != Outcome.CONFLICT
    ]
    if head != stream.head or integrated:
        # After the commit: at once, unless a caller's transaction holds the landing (one-call
        # landing without workers), whose commit is the landing's.
        moved_from, moved_to = stream.head, head
        transaction.on_commit(
            lambda: refmirror.follow_landing(repository, stream.name, integrated, moved=(moved_from, moved_to))
        )
    return len(results), again


def _gated(policy: Policy | None, stream: str) -> bool:
    """Whether the stream requires checks (its landings go through repos/services/gate.py)."""
    return policy is not None and any(rule.required_checks for rule in policy.rules_for(stream))


def may_land_held(held: Held) -> bool:
    """Whether nothing is queued ahead on the held stream and it requires no checks: then a
    one-call landing lands its own operation in its transaction also where workers land the
    rest (repos/services/landing.py)."""
    stream = held.stream
    return not held.queued_before and not _gated(policies.policy_of(stream.repository), stream.name)


def _holds_the_queue(held: Held) -> bool:
    """Whether the caller's one operation is the whole queue of a stream without checks."""
    return held.operation is not None and may_land_held(held)


def _checks_of(decision: Decision) -> tuple[str, ...]:
    """The checks a decision holds its landing to (none under an admin's bypass)."""
    return decision.required_checks if decision.bypass is None else ()


#: The merges this process integrated, by what they were integrated from (repository, stream
#: head, proposal head, message, resolver rules), newest last. A landing that waits for checks
#: integrates its queue again each time it looks (every check report): the merge it wrote the
#: first time is the one its checks test, and writing it again would cost a pack and its fsyncs
#: each time. A merge's objects are durable once the transaction that wrote them commits, and
#: never pruned (maintenance keeps every object); the store is still asked, for a repository
#: deleted and made again under its name.
_MERGES: OrderedDict[tuple, tuple[tuple[Rule, ...], Integration]] = OrderedDict()
_MERGES_KEPT = 4096
_merges_lock = threading.Lock()


def _integrate(
    repository: Repository,
    store: ObjectStore,
    head: str | None,
    proposal: Proposal,
    stream: str,
    rules: Sequence[Rule],
) -> Integration:
    """``engine.integrate`` of the proposal on ``head``, a merge integrated before answered again
    (the rules are compared only then: a fast-forward never reads them)."""
    message = f"Integrate proposal {proposal.pk} into {stream}\n"
    key = (repository.pk, head, proposal.head, message)
    with _merges_lock:
        known = _MERGES.get(key)
    if known is not None:
        with_rules, merged = known
        if with_rules == tuple(rules) and merged.changeset is not None and store.contains(merged.changeset):
            return merged
    integration = integrate(store, head, proposal.head, committer=server_signature(), message=message, rules=rules)
    if integration.outcome == Outcome.MERGE:
        # Remembered once the transaction that wrote it commits: its pack may be journaled in
        # that transaction (docs/adr/0023), so only then is it durable for another to name.
        transaction.on_commit(lambda: _remember_merge(key, tuple(rules), integration))
    return integration


def _remember_merge(key: tuple, rules: tuple[Rule, ...], integration: Integration) -> None:
    with _merges_lock:
        _MERGES[key] = (rules, integration)
        while len(_MERGES) > _MERGES_KEPT:
            _MERGES.popitem(last=False)


def _refused(decision: Decision, operation: Operation, stream: str) -> ApiError:
    what = f"proposal {operation.proposal_id} cannot land on {stream}"
    return policies.denied(decision, what, proposal=operation.proposal_id)


def _landed_by(decision: Decision, verdict: gate.Verdict, integration: Integration | None) -> dict:
    """The decision recorded with a landing: the required checks met on the tree it was tested on."""
    recorded = decision.as_dict()
    if decision.required_checks and decision.bypass is None and integration is not None and verdict.tree:
        names = ", ".join(decision.required_checks)
        recorded["allowed"] = True
        recorded["requirements"] = [
            {**item, "met": True, "message": f"{names} passed on the result's tree {verdict.tree}"}
            if item["requirement"] == "checks"
            else item
            for item in recorded["requirements"]  # type: ignore[attr-defined]
        ]
        recorded["checks"] = {"tree": verdict.tree, "names": list(decision.required_checks)}
    return recorded


#: Per process, when each stream waiting for checks is to be looked at again (monotonic time):
#: a landing that waits schedules its wake-up only if none is due sooner.
_WAKES: dict[int, float] = {}


def _wake_later(stream_id: int, delay_s: float) -> None:
    due = time.monotonic() + delay_s
    scheduled = _WAKES.get(stream_id)
    if scheduled is not None and time.monotonic() < scheduled <= due + 0.5:
        return
    _WAKES[stream_id] = due
    later(LAND_STREAM, delay_s, stream_id)


def _speculative() -> bool:
    return bool(settings.AGENTGIT["SPECULATIVE_CHECKS"])


def wake_for_checks(repository: Repository) -> None:
    """A check reported: look again at each stream of the repository with queued operations (the
    gate may now land, refuse or bisect). One query; nothing when nothing is queued."""
    queued = Operation.objects.filter(repository=repository, state=Operation.State.QUEUED)
    # order_by(): the model's ordering (by id) would make DISTINCT one row per operation.
    for stream_id in queued.order_by().values_list("stream_id", flat=True).distinct():
        after_commit(LAND_STREAM, stream_id)


def paths_between(store, old: str | None, new: str) -> dict:
    """The event fields naming the files a landing changed (bounded: repos/services/events.py)."""
    old_tree = store.read_commit(old).tree if old else None
    changes = diff_trees(store, old_tree, store.read_commit(new).tree)
    return changed_paths([change.path for change in changes[: MAX_PATHS + 1]])


def _record(
    stream: Stream,
    store: ObjectStore,
    operation: Operation,
    integration: Integration | None,
    error: EngineError | ApiError | None,
    paths: dict | None,
    decision: dict | None = None,
    opening: Opening | None = None,
) -> list[tuple[str, dict]]:
    """Write one operation's outcome and its proposal's (and latest revision's) new state (in
    the landing transaction); its events, for the landing to write with the others. The event
    carries what a subscriber acts on without asking again: the stream, proposal, outcome,
    head, changeset, changed paths, who proposed it and the policy decision it landed by.
    ``opening``: the proposal and revision 1 a one-call landing holds (the revision is not read);
    not written yet, they are inserted with the operation in their final state, and their
    ``proposal.opened`` event comes first (docs/adr/0024)."""
    proposal = operation.proposal
    now = timezone.now()
    operation.attempts += 1  # in the row: one more than it has (the update adds it)
    operation.finished = now
    fresh = opening is not None and not opening.written
    if integration is None:
        operation.state = Operation.State.FAILED
        failure = error if isinstance(error, ApiError) else from_engine(error)  # type: ignore[arg-type]
        operation.error = failure.as_dict()["error"]
        if not fresh:
            _FAIL_OPERATION.run(operation.state, operation.error, now, operation.pk)
            return []
        assert opening is not None
        _insert_opened(operation, opening)
        return [opening.event()]
    revision = opening.revision if opening is not None else _latest_revision(proposal)
    outcome = outcome_document(integration)
    if revision is not None and revision.kind == ProposalRevision.Kind.RESOLVED:
        if integration.outcome == Outcome.FAST_FORWARD:
            # The stream moved to the merge changeset the server built from the resolutions.
            outcome["outcome"] = Outcome.MERGE.value
        outcome["resolution"] = revision.head
    if integration.resolved and integration.changeset is not None:
        _record_rule_merge(stream, store, proposal, integration)
    operation.state = Operation.State.DONE
    if not fresh:
        # Stored without the operation's own id, as every operation's (added on read).
        operation.outcome = {**outcome, "proposal": proposal.pk}
        _FINISH_OPERATION.run(operation.state, operation.outcome, now, operation.pk)
        if revision is not None:
            revision.outcome = operation.outcome_document()
            _RECORD_REVISION.run(revision.outcome, revision.pk)
    conflicted = integration.outcome == Outcome.CONFLICT
    proposal.state = Proposal.State.CONFLICTED if conflicted else Proposal.State.INTEGRATED
    proposal.outcome = integration.outcome.value
    proposal.result_changeset = integration.changeset or ""
    proposal.result_head = integration.head or ""
    proposal.conflicts = outcome["conflicts"]
    proposal.decision = decision
    proposal.updated = now
    opened: list[tuple[str, dict]] = []
    if fresh:
        assert opening is not None
        _insert_opened(operation, opening, outcome)
        opened.append(opening.event())
    else:
        _RECORD_PROPOSAL.run(
            proposal.state,
            proposal.outcome,
            proposal.result_changeset,
            proposal.result_head,
            proposal.conflicts,
            proposal.decision,
            proposal.updated,
            proposal.pk,
        )
    about = {"stream": stream.name, "proposal": proposal.pk, "author": author(proposal.author)}
    if decision is not None:
        about["decision"] = decision
    if conflicted:
        payload = {**about, "outcome": integration.outcome.value, "conflicts": outcome["conflicts"]}
        return [*opened, (PROPOSAL_CONFLICT, payload)]
    payload = {
        **about,
        "outcome": integration.outcome.value,
        "head": integration.head,
        "changeset": integration.changeset,
        **(paths or changed_paths([])),
    }
    if decision is not None and decision["bypass"] is not None:
        bypass = policies.bypass_event(stream.name, proposal.pk, decision["bypass"])
        return [*opened, (STREAM_INTEGRATE, payload), bypass]
    return [*opened, (STREAM_INTEGRATE, payload)]


class NotFastForward(Exception):
    """A push that would not fast-forward the stream (or raced another change): refused, nothing moved."""


def push_fast_forward(
    stream: Stream, expected: str | None, new: str, credential, *, via: str = "git push", derive: bool = True
) -> dict:
    """Move ``stream`` from ``expected`` to ``new`` by fast-forward only (a git push to
    ``refs/heads/S``): one transaction holding the stream's row lock, with a proposal and an
    operation recording it (done, ``fast_forward``) and its ``stream.integrate`` event, as a
    landing records one. Raises :class:`NotFastForward` with what to do instead.

    ``derive=False`` leaves the head's derived data to the caller (a git push derives it once
    its answer is sent: ``derived.derive_missing``, which recovery also runs).
    """
    repository = stream.repository
    store = store_for(repository.name)
    with transaction.atomic():
        locked = Stream.objects.select_for_update(of=("self",), no_key=True).get(pk=stream.pk)
        if locked.head != expected:
            raise NotFastForward(
                f"stale: {locked.name} is at {locked.head or 'nothing'} now, not {expected or 'nothing'}; "
                "fetch and push again"
            )
        known = derived.refresh(repository, store)
        if locked.head is not None and not is_ancestor(store, locked.head, new):
            raise NotFastForward(f"not a fast-forward; push to refs/for/{locked.name} to have the server merge it")
        # Judged under the row lock, recorded on the proposal below (raises policy_denied).
        decision = policies.judge_direct_update(repository, locked.name, locked.head, new, credential)
        moved = Stream.objects.filter(pk=locked.pk, version=locked.version).update(
            head=new, version=F("version") + 1, updated=timezone.now()
        )
        if moved != 1:  # cannot happen under the row lock; never move a head blindly
            raise NotFastForward(f"{locked.name} changed meanwhile; fetch and push again")
        now = timezone.now()
        outcome = {"outcome": Outcome.FAST_FORWARD.value, "changeset": new, "stream_head": new, "conflicts": []}
        proposal = Proposal.objects.create(
            repository=repository,
            stream=locked,
            head=new,
            title=f"{via} to {locked.name}",
            author=credential,
            state=Proposal.State.INTEGRATED,
            outcome=Outcome.FAST_FORWARD.value,
            result_changeset=new,
            result_head=new,
            decision=decision.as_dict() if decision is not None else None,
        )
        operation = Operation.objects.create(
            repository=repository,
            stream=locked,
            proposal=proposal,
            state=Operation.State.DONE,
            attempts=1,
            finished=now,
            outcome={**outcome, "proposal": proposal.pk},  # its own id is added on read
        )
        payload = {
            "stream": locked.name,
            "proposal": proposal.pk,
            "outcome": Outcome.FAST_FORWARD.value,
            "head": new,
            "changeset": new,
            **({"decision": decision.as_dict()} if decision is not None else {}),
        }
        append_event(repository, STREAM_INTEGRATE, payload)
        if derive and not derived.derive_landed(repository, store, new, known):
            after_commit(DERIVE_MISSING)
        search.after_landing(repository, new)
    # Once committed (at once, unless the caller's transaction holds several: an atomic git push).
    transaction.on_commit(lambda: refmirror.follow_landing(repository, locked.name, [(proposal.pk, new)]))
    return operation.outcome_document()


def outcome_document(integration: Integration) -> dict:
    """The outcome as API.md spells it."""
    return {
        "outcome": integration.outcome.value,
        "changeset": integration.changeset,
        "stream_head": integration.head,
        "conflicts": [conflict.as_dict() for conflict in integration.conflicts],
        "resolved": [resolved.as_dict() for resolved in integration.resolved],
    }


def _record_rule_merge(stream: Stream, store: ObjectStore, proposal: Proposal, integration: Integration) -> None:
    """The merge changeset a resolver rule took part in, recorded with the rule in its provenance."""
    assert integration.changeset is not None
    commit = store.read_commit(integration.changeset)
    Changeset.objects.get_or_create(
        repository_id=stream.repository_id,
        commit_id=integration.changeset,
        defaults={
            "parents": list(commit.parents),
            "tree": commit.tree,
            "message": commit.message,
            "provenance": {
                "proposal": proposal.pk,
                "resolved": [resolved.as_dict() for resolved in integration.resolved],
            },
        },
    )


def delete_stream(repository: Repository, name: str, credential: Credential | None = None) -> None:
    """Delete a stream (never the default one), with its proposals and operations, by REST or by
    a git push; its changesets stay readable by id (the objects are the repository's, not the
    stream's). A stream the policy protects from direct updates is refused (``policy_denied``)."""
    if name == repository.default_stream:
        raise Forbidden(f"{name!r} is the default stream of {repository.name}: it cannot be deleted")
    with transaction.atomic():
        # The landing's lock: a landing in flight finishes first, none starts on a deleted stream.
        stream = Stream.objects.select_for_update(of=("self",)).filter(repository=repository, name=name).first()
        if stream is None:
            raise NotFound(f"no stream named {name!r} in {repository.name}")
        head = stream.head
        policies.judge_direct_update(repository, name, head, None, credential)
        if head:  # its history stays: the head's changeset keeps a ref of its own in the mirror
            refmirror.protect_changeset(repository.name, head)
        stream.delete()
        append_event(repository, STREAM_DELETED, {"stream": name, "head": head})
        # The git branch goes too, once this commits; the objects stay (maintenance never prunes).
        transaction.on_commit(lambda: refmirror.follow_stream(repository, name))


def _abort_queued(stream_id: int, attempts: int) -> int:
    """The retry budget is spent: fail the queued operations as ``aborted``; proposals untouched."""
    error = Aborted(f"the stream changed {attempts} times while integrating; retry").as_dict()["error"]
    now = timezone.now()
    with transaction.atomic():
        queued = dict(
            Operation.objects.filter(stream_id=stream_id, state=Operation.State.QUEUED).values_list("id", "created")
        )
        aborted = Operation.objects.filter(pk__in=queued, state=Operation.State.QUEUED).update(
            state=Operation.State.FAILED, error=error, attempts=F("attempts") + attempts, finished=now
        )
    metrics.observe_integrations(("aborted", created, now) for created in queued.values())
    return aborted


def backoff_ms(operation_id: int, attempt: int, max_wait_ms: int) -> float:
    """The wait after losing ``attempt``: none after the first loss, then a window of 1 ms that
    doubles per loss up to ``max_wait_ms``, spread by a hash of the operation and attempt, so
    colliding writers wait different times and nothing is random."""
    if attempt < 2 or max_wait_ms <= 0:
        return 0.0
    window = min(float(max_wait_ms), float(2 ** (attempt - 2)))
    digest = hashlib.blake2b(f"{operation_id}:{attempt}".encode(), digest_size=4).digest()
    return window * (0.5 + int.from_bytes(digest, "big") / 2**33)


#: The steps of a landing where the crash tests kill the worker, in order: the queued operations
#: are read; their objects are written (fsynced); the head's compare-and-swap and the records
#: are applied but not committed; everything is committed (events are outbox rows, so this is
#: also "before the event relay": subscribers read them by sequence number).
CRASH_POINTS = ("operation_recorded", "objects_written", "cas_applied", "committed")


def crash_point(name: str) -> None:
    """Fault injection for the crash tests: die here, at once, if told to by the environment.

    ``AGENTGIT_CRASH_AT=<name>`` (one of :data:`CRASH_POINTS`) makes the process SIGKILL itself
    at that step of a landing, as a power cut would; nothing runs after it.
    """
    if os.environ.get("AGENTGIT_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
