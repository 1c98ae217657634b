"""The history benchmark: reads over long histories, with and without the derived data.

``manage.py agentgit_bench history --commits 1000,20000`` builds, per length, a history shaped
like a landing server's (a stream of one-file changesets, about a third of them landed as merges
of a proposal made a few changesets back) in a throwaway repository of the configured database,
derives it the way recovery does (``derived.derive_missing``), and times each read twice: as the
engine answers it from the objects alone, and as the server answers it with the derived data
(graph nodes and the path index, repos.services.derived). Both answers must be equal, or the
row fails. "Cold" means a new object store and nothing read yet, as in a process that just
started; "warm" repeats the read in the same process. The repository is deleted afterwards.
"""

from __future__ import annotations

import random
import shutil
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TypeVar

from engine.changeset import Write, create_changeset
from engine.graph import is_ancestor
from engine.history import blame, log
from engine.integrate import integrate
from engine.objects import BLOB, ObjectId, Signature, hash_object
from engine.store import DiskStore, MemoryStore

from .report import text_table

T = TypeVar("T")

DEFAULT_COMMITS = (1_000, 20_000)
MIN_COMMITS = 100
DEFAULT_SAMPLES = 3
FILES = 1_000
#: The file changed twenty times over the history (and never otherwise).
RARE_FILE = "d7/f7.txt"
HOT_DIRECTORY = "d3"
NEVER = "no/such/file.txt"
#: A file no changeset after the import touches: its blame walks the whole first-parent line.
UNTOUCHED_FILE = "d5/f5.txt"


@dataclass
class HistoryRow:
    operation: str
    commits: int
    without_ms: float
    with_ms: float
    samples: int

    @property
    def speedup(self) -> float:
        return self.without_ms / self.with_ms if self.with_ms else float("inf")


@dataclass
class HistoryRun:
    rows: list[HistoryRow] = field(default_factory=list)
    derive: dict[int, dict[str, float]] = field(default_factory=dict)


def build_history(store, commits: int, seed: int = 1) -> ObjectId:
    """Write a landing-shaped history of about ``commits`` changesets into ``store``; its head."""
    rnd = random.Random(seed)
    staging = MemoryStore()
    clock = 1_700_000_000

    def sig() -> Signature:
        return Signature("Agent", "agent@example.com", clock)

    contents = [f"{i}\n".encode() for i in range(FILES)]
    operations = [Write(f"d{i % 20}/f{i}.txt", hash_object(BLOB, data)) for i, data in enumerate(contents)]
    head = create_changeset(staging, None, operations, message="import\n", author=sig(), blobs=contents)
    recent = [head]
    rare_steps = {commits * k // 20 for k in range(1, 20)}
    for step in range(commits):
        clock += rnd.choice((0, 0, 1))  # many landings per second: equal times are common
        number = 7 if step in rare_steps else rnd.randrange(8, FILES)
        data = f"{step} edit\n".encode()
        change = [Write(f"d{number % 20}/f{number}.txt", hash_object(BLOB, data))]
        if rnd.random() < 0.35 and len(recent) > 4:
            proposal = create_changeset(
                staging, recent[-rnd.randint(2, 4)], change, message=f"p{step}\n", author=sig(), blobs=[data]
            )
            landed = integrate(staging, head, proposal, committer=sig(), message="Integrate\n")
            if landed.head is None:
                continue  # a conflict: the agent would rebase; this history skips it
            head = landed.head
        else:
            head = create_changeset(staging, head, change, message=f"c{step}\n", author=sig(), blobs=[data])
        recent = recent[-8:] + [head]
    store.add_many([staging.read(oid) for oid in staging])  # one pack
    return head


def _time(call: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter_ns()
    result = call()
    return (time.perf_counter_ns() - start) / 1e6, result


def run_history_benchmark(
    commit_counts: list[int], *, samples: int = DEFAULT_SAMPLES, on_row: Callable[[str], None] = lambda name: None
) -> HistoryRun:
    """Build, derive and measure each history length (needs Django: it uses the services)."""
    from repos.models import Repository
    from repos.services import derived
    from repos.services.repositories import create_repository, create_stream
    from repos.services.stores import repository_path, store_for

    run = HistoryRun()
    for commits in commit_counts:
        name = f"bench-history-{uuid.uuid4().hex[:8]}"
        repository = create_repository(name)
        try:
            on_row(f"{commits} changesets: build")
            head = build_history(store_for(name), commits)
            create_stream(repository, "bench", head)
            on_row(f"{commits} changesets: derive")
            derive_ms, count = _time(derived.derive_missing)
            run.derive[commits] = {
                "changesets": count,
                "ms": derive_ms,
                "us_per_changeset": derive_ms * 1000 / max(1, count),
            }
            oldest = _an_old_ancestor(store_for(name), head)

            def plain(path, limit=None):
                return lambda store, known: log(store, head, path, limit=limit)

            def indexed(path, limit=None):
                def read(store, known):  # as repos.services.reads.log does it
                    return log(store, head, path, limit=limit, index=derived.path_index(repository, store, known))

                return read

            def blame_plain(store, known):
                return blame(store, head, UNTOUCHED_FILE)

            def blame_indexed(store, known):  # as repos.services.reads.blame does it
                return blame(store, head, UNTOUCHED_FILE, index=derived.path_index(repository, store, known))

            def ancestry_plain(store, known):
                return is_ancestor(store, oldest, head)

            def ancestry_derived(store, known):
                derived.refresh(repository, store, known)
                return is_ancestor(store, oldest, head)

            cases = [
                ("ancestry: is_ancestor(an old changeset, head)", ancestry_plain, ancestry_derived),
                (f"log --path {RARE_FILE} (changed 20 times)", plain(RARE_FILE), indexed(RARE_FILE)),
                (f"log --path {NEVER} (never existed)", plain(NEVER), indexed(NEVER)),
                (f"blame {UNTOUCHED_FILE} (unchanged since the import)", blame_plain, blame_indexed),
                (
                    f"log --path {HOT_DIRECTORY}/ (hot directory), first 50",
                    plain(HOT_DIRECTORY, 50),
                    indexed(HOT_DIRECTORY, 50),
                ),
            ]
            for label, without, with_derived in cases:
                for temperature in ("cold", "warm"):
                    on_row(f"{commits} changesets: {label}, {temperature}")
                    row = _measure(
                        f"{label}, {temperature}",
                        commits,
                        samples,
                        temperature,
                        repository_path(name),
                        without,
                        with_derived,
                    )
                    run.rows.append(row)
        finally:
            # No service deletes a repository; this one is the benchmark's own, named at random,
            # so its rows and its directory simply go (the process's cached store of it is
            # never asked for again, and ends with the command).
            Repository.objects.filter(name=name).delete()
            shutil.rmtree(repository_path(name), ignore_errors=True)
    return run


def _an_old_ancestor(store, head: ObjectId) -> ObjectId:
    """A changeset near the bottom of the history: an ancestry question that walks far."""
    oid = head
    parents = store.read_commit(oid).parents
    while parents and store.read_commit(parents[0]).parents:  # stop one above the root
        oid = parents[0]
        parents = store.read_commit(oid).parents
    return oid


def _measure(label, commits, samples, temperature, path, without, with_derived) -> HistoryRow:
    """Median of ``samples`` timings of each reader. Cold: a new store and nothing known yet, as
    in a process that just started. Warm: the same read once more in the same "process"."""
    from repos.services.derived import Known

    times: dict[str, list[float]] = {"without": [], "with": []}
    answers = {}
    for _ in range(samples):
        for key, read in (("without", without), ("with", with_derived)):
            store, known = DiskStore(path), Known()
            if temperature == "warm":
                read(store, known)
            elapsed, answers[key] = _time(lambda: read(store, known))
            times[key].append(elapsed)
    if answers["without"] != answers["with"]:
        raise AssertionError(f"{label}: the derived data changed the answer")
    return HistoryRow(label, commits, statistics.median(times["without"]), statistics.median(times["with"]), samples)


def format_history(run: HistoryRun) -> str:
    header = ["operation", "changesets", "objects only (ms)", "with derived data (ms)", "speed-up"]
    lines = [header] + [
        [row.operation, f"{row.commits:,}", f"{row.without_ms:.2f}", f"{row.with_ms:.2f}", f"{row.speedup:.1f}x"]
        for row in run.rows
    ]
    out = text_table(lines)
    for commits, figures in run.derive.items():
        out.append(
            f"derive pass at {commits:,}: {figures['changesets']:,} changesets in {figures['ms']:.0f} ms "
            f"({figures['us_per_changeset']:.0f} µs each)"
        )
    return "\n".join(out) + "\n"


def history_json(run: HistoryRun) -> dict:
    return {
        "rows": [{**asdict(row), "speedup": round(row.speedup, 2)} for row in run.rows],
        "derive": {str(commits): figures for commits, figures in run.derive.items()},
    }
