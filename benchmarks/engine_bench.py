"""The engine benchmark: what the engine's hot paths cost by repository size, beside git.

The counterpart of the reference's ``ag-bench engine`` (reference/engine-performance.txt), on
its synthetic layout: n files at ``pkgNNN/modNN/fileN.rs`` with two-line contents, plus one
200-line text file (:data:`TARGET_PATH`) created by one changeset and changed by 20 more, for
the history rows. Every row calls the real engine in-process on a real store — a
``MemoryStore`` (the engine's CPU cost) or a ``DiskStore`` in a temporary directory (a bare git
repository: packs, fsyncs) — and asserts what it measured: an integration is the outcome its
name says and holds both sides' changes, the renames found are the ones made, a merge is clean.

Beside each row, on the same objects in the same run, the ``git`` binary does the same work
where it has a command for it (``merge-tree --write-tree``, ``diff-tree``, ``blame``, ``log``),
timed as a subprocess, process start included: that is what a server shelling out would pay.
git is also the oracle: the tree it writes, the renames it finds, the lines it blames and the
commits it lists must equal the engine's, or the row fails. For the memory backend the objects
are first copied (outside the timings) into a bare repository that git can read.

Timing: ``time.perf_counter_ns`` around the engine call only (setup — blobs, proposals, the
change lists given to ``detect_renames`` — is outside), with the cyclic garbage collector
paused during the call, as ``timeit`` does. Stateful rows (the integrations) are sampled one
after another, each on top of the previous result; pure functions are sampled on the same
inputs. A row stops early after :data:`ROW_BUDGET_S` seconds if it has
:data:`MIN_SAMPLES_UNDER_BUDGET` samples.

No Django here, so this module can move with the engine.
"""

from __future__ import annotations

import datetime
import gc
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from engine.changeset import Delete, Operation, Rename, Write, create_changeset
from engine.history import blame, log
from engine.integrate import Outcome, integrate
from engine.merge import merge_trees
from engine.objects import BLOB, MODE_FILE, MODE_GITLINK, MODE_TREE, Entry, ObjectId, Signature
from engine.renames import detect_renames
from engine.store import DiskStore, MemoryStore, ObjectBatch, ObjectStore
from engine.trees import FileChange, Modified, Renamed, TreeReader, diff_trees, lookup

T = TypeVar("T")

# ---------------------------------------------------------------------------- the rows

INGEST = "ingest"
COMMIT = "commit"
FAST_FORWARD = "integrate fast-forward"
THREE_WAY = "integrate three-way merge"
RENAME_VS_EDIT = "integrate rename vs edit"
MERGE_TREES = "merge_trees 1 file each side"
RENAMES_EXACT = "detect_renames 1% exact"
RENAMES_SIMILAR = "detect_renames 100 similar"
TREE_DIFF = "tree diff 1 file"
BLAME = "blame 20 changesets"
LOG_PATH = "log --path"

#: Every row, in the order it runs and is reported.
OPERATIONS: tuple[str, ...] = (
    INGEST,
    COMMIT,
    FAST_FORWARD,
    THREE_WAY,
    RENAME_VS_EDIT,
    MERGE_TREES,
    RENAMES_EXACT,
    RENAMES_SIMILAR,
    TREE_DIFF,
    BLAME,
    LOG_PATH,
)
#: The rows git is run beside: ``git merge-tree --write-tree`` for the merges, ``git diff-tree``
#: for renames and diffs, ``git blame --porcelain`` and ``git log --format=%H -- PATH``.
MERGE_TREE_OPERATIONS = frozenset({FAST_FORWARD, THREE_WAY, RENAME_VS_EDIT, MERGE_TREES})
GIT_OPERATIONS = MERGE_TREE_OPERATIONS | {RENAMES_EXACT, RENAMES_SIMILAR, TREE_DIFF, BLAME, LOG_PATH}
#: One-off setup steps: on disk they are sampled once (each sample would fsync a whole pack).
ONE_OFF = frozenset({INGEST, COMMIT})

BACKENDS = ("memory", "disk")
DEFAULT_SIZES = (1_000, 10_000, 100_000)
DEFAULT_SAMPLES = 7
#: Below this the rows stop meaning what they say (1 % of the files must be a few files).
MIN_FILES = 200
ROW_BUDGET_S = 60.0
MIN_SAMPLES_UNDER_BUDGET = 3

TARGET_PATH = "src/target.txt"
TARGET_LINES = 200
HISTORY_CHANGESETS = 20
LINES_PER_CHANGESET = 10
SIMILAR_RENAMES = 100
#: ``git merge-tree --write-tree`` (the merge-ort form that prints a tree) appeared in git 2.38.
GIT_MERGE_TREE_VERSION = (2, 38)
#: Author and committer times start here and advance one second per changeset.
EPOCH = 1_700_000_000


# ---------------------------------------------------------------------------- synthetic layout


def file_path(i: int) -> str:
    """Where file ``i`` of the synthetic repository lives (the reference's layout)."""
    return f"pkg{i // 1000:03d}/mod{(i // 100) % 10:02d}/file{i % 100}.rs"


def file_content(i: int) -> bytes:
    return f"fn f{i}() {{}}\n// {i}\n".encode()


def edited_content(i: int, tag: str) -> bytes:
    return f"fn f{i}() {{}}\n// {i}, edited by {tag}\n".encode()


def moved_path(i: int) -> str:
    """Where the rename rows move file ``i``: a new top-level directory, same relative path."""
    return "moved/" + file_path(i)


def target_positions(changeset: int) -> list[int]:
    """The 0-based lines of the target file that history changeset ``changeset`` (1–20) rewrites.

    Ten isolated lines (17 apart), shifted by 13 per changeset: some lines are rewritten
    twice, some never, so blame has creation lines, overwritten lines and fresh ones.
    """
    return sorted({(changeset * 13 + j * 17) % TARGET_LINES for j in range(LINES_PER_CHANGESET)})


# ---------------------------------------------------------------------------- results


class BenchFailure(Exception):
    """A row did not measure what its name says (a wrong outcome, or git disagrees)."""


@dataclass
class RowResult:
    """One row at one size: the engine's samples and, beside it, git's."""

    operation: str
    files: int
    times_ns: list[int] = field(default_factory=list)
    #: None where git has no equivalent or is not available.
    git_ns: list[int] | None = None
    #: Why the row failed (None: it passed every assertion).
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def samples(self) -> int:
        return len(self.times_ns)

    @property
    def median_ms(self) -> float | None:
        return _ms(statistics.median(self.times_ns)) if self.times_ns else None

    @property
    def min_ms(self) -> float | None:
        return _ms(min(self.times_ns)) if self.times_ns else None

    @property
    def max_ms(self) -> float | None:
        return _ms(max(self.times_ns)) if self.times_ns else None

    @property
    def git_median_ms(self) -> float | None:
        return _ms(statistics.median(self.git_ns)) if self.git_ns else None

    def as_dict(self) -> dict[str, Any]:
        """The row as the JSON report has it."""
        return {
            "operation": self.operation,
            "files": self.files,
            "median_ms": _round(self.median_ms),
            "min_ms": _round(self.min_ms),
            "max_ms": _round(self.max_ms),
            "samples": self.samples,
            "git_median_ms": _round(self.git_median_ms),
        }


@dataclass
class BenchRun:
    """Everything one run measured, with the conditions it was measured under."""

    conditions: dict[str, Any]
    rows: list[RowResult]

    @property
    def failures(self) -> list[RowResult]:
        return [row for row in self.rows if not row.ok]

    @property
    def sizes(self) -> list[int]:
        return list(dict.fromkeys(row.files for row in self.rows))

    def row(self, operation: str, files: int) -> RowResult | None:
        return next((r for r in self.rows if r.operation == operation and r.files == files), None)


def _ms(ns: float) -> float:
    return ns / 1_000_000


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


# ---------------------------------------------------------------------------- the run


def run_engine_benchmark(
    sizes: Sequence[int] = DEFAULT_SIZES,
    *,
    backend: str = "memory",
    samples: int = DEFAULT_SAMPLES,
    git: str | None = "git",
    on_row: Callable[[RowResult], None] | None = None,
) -> BenchRun:
    """Measure every row of :data:`OPERATIONS` at each size; ``on_row`` is told of each row done.

    ``git`` is the git executable to run beside the engine (None: engine only). A failed row
    does not stop the run; it is in :attr:`BenchRun.failures`.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if samples < 1:
        raise ValueError(f"samples must be at least 1, not {samples}")
    small = [n for n in sizes if n < MIN_FILES]
    if small or not sizes:
        raise ValueError(f"every size must be at least {MIN_FILES} files (got {list(sizes)})")
    git_exe = shutil.which(git) if git else None
    git_version = _git_version(git_exe) if git_exe else None
    conditions = _conditions(backend, sizes, samples, git_exe, git_version)
    rows: list[RowResult] = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix=f"agentgit-bench-{n}-") as workdir:
            bench = _SizeBench(n, backend, samples, Path(workdir), git_exe, git_version, on_row)
            rows.extend(bench.run())
            del bench  # free the repository before the next size is built
        gc.collect()
    return BenchRun(conditions, rows)


def _conditions(
    backend: str, sizes: Sequence[int], samples: int, git_exe: str | None, git_version: tuple[int, ...] | None
) -> dict[str, Any]:
    return {
        "backend": backend,
        "sizes": list(sizes),
        "samples": samples,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "git_version": ".".join(map(str, git_version)) if git_version else None,
        "commit": _project_commit(),
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "timing": (
            "wall time (perf_counter_ns) of the engine call only, cyclic GC paused during it; "
            "git timed as a subprocess, process start included"
        ),
        "row_budget_s": ROW_BUDGET_S,
    }


def _project_commit() -> str | None:
    """``git rev-parse HEAD`` of the checkout this code runs from, if there is one."""
    root = Path(__file__).resolve().parents[1]
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _git_version(git_exe: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run([git_exe, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    return tuple(int(part) for part in found.groups() if part is not None) if found else None


def _timed(call: Callable[[], T]) -> tuple[int, T]:
    """``(nanoseconds, result)`` of one call, with the cyclic garbage collector paused."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter_ns()
        result = call()
        elapsed = time.perf_counter_ns() - start
    finally:
        if was_enabled:
            gc.enable()
    return elapsed, result


def check(condition: object, message: str) -> None:
    """Fail the row (not with ``assert``: ``python -O`` must not skip the checks)."""
    if not condition:
        raise BenchFailure(message)


# ---------------------------------------------------------------------------- git beside us


class _Git:
    """The git binary on the repository holding the same objects as the engine's store."""

    def __init__(self, executable: str, git_dir: Path, scratch: Path) -> None:
        self.executable = executable
        env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
        env.update(GIT_DIR=str(git_dir), GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C")
        self.env = env
        # merge-tree writes the merged trees: into a scratch object directory, with the
        # repository as an alternate, so the engine's repository is left as the engine made it.
        scratch.mkdir(parents=True, exist_ok=True)
        self.writing_env = dict(
            env,
            GIT_OBJECT_DIRECTORY=str(scratch),
            GIT_ALTERNATE_OBJECT_DIRECTORIES=str(git_dir / "objects"),
        )

    def run(self, *args: str, writes: bool = False, accept: Iterable[int] = (0,)) -> tuple[int, str, int]:
        """``(nanoseconds, stdout, exit status)``; an exit status not in ``accept`` fails the row."""
        command = [self.executable, *args]
        env = self.writing_env if writes else self.env
        start = time.perf_counter_ns()
        done = subprocess.run(command, env=env, capture_output=True, check=False)
        elapsed = time.perf_counter_ns() - start
        if done.returncode not in tuple(accept):
            raise BenchFailure(
                f"git {' '.join(args)} exited {done.returncode}: {done.stderr.decode(errors='replace').strip()}"
            )
        return elapsed, done.stdout.decode("utf-8", "surrogateescape"), done.returncode


def _parse_renames(diff_tree_output: str) -> dict[tuple[str, str], int]:
    """``(old path, new path) -> score`` of the renames in ``git diff-tree -r -M`` output."""
    renames = {}
    for line in diff_tree_output.splitlines():
        meta, _, paths = line.partition("\t")
        status = meta.split(" ")[-1] if meta.startswith(":") else ""
        if status.startswith("R"):
            old, new = paths.split("\t")
            renames[(old, new)] = int(status[1:])
    return renames


_PORCELAIN_HEADER = re.compile(r"([0-9a-f]{40}) \d+ (\d+)")


def _parse_blame(porcelain: str) -> dict[int, str]:
    """``final line number -> commit`` from ``git blame --porcelain``."""
    owners = {}
    for line in porcelain.splitlines():
        found = _PORCELAIN_HEADER.match(line)
        if found:
            owners[int(found.group(2))] = found.group(1)
    return owners


# ---------------------------------------------------------------------------- one size


class _SizeBench:
    """One repository of ``n`` files and every row measured on it, in order."""

    def __init__(
        self,
        n: int,
        backend: str,
        samples: int,
        workdir: Path,
        git_exe: str | None,
        git_version: tuple[int, ...] | None,
        on_row: Callable[[RowResult], None] | None,
    ) -> None:
        self.n = n
        self.backend = backend
        self.samples = samples
        self.workdir = workdir
        self.on_row = on_row
        self.store: ObjectStore = MemoryStore()
        self.clock = EPOCH
        self.head: ObjectId = ""
        self.blob_ids: list[ObjectId] = []
        # Files are picked along a stride coprime with n: spread over the repository, each once.
        self.stride = next(p for p in (7919, 7907, 7901, 1) if math.gcd(p, n) == 1)
        self.picked = 0
        self.target_history: list[ObjectId] = []  # creation, then the 20 changes
        self.target_owners: list[ObjectId] = []  # the changeset that last wrote each line
        self.target_text: list[str] = []
        self.git_exe = git_exe
        self.git: _Git | None = None
        self.git_merges = bool(git_version and git_version >= GIT_MERGE_TREE_VERSION)
        self.mirror: DiskStore | None = None  # memory backend: git's copy of the objects
        self.exported: set[ObjectId] = set()

    # -- driving the rows ---------------------------------------------------------------

    def run(self) -> list[RowResult]:
        rows: list[RowResult] = []
        setup_failed: str | None = None
        steps: list[tuple[str, Callable[[RowResult], None]]] = [
            (INGEST, self.row_ingest),
            (COMMIT, self.row_commit),
            (FAST_FORWARD, self.row_fast_forward),
            (THREE_WAY, self.row_three_way),
            (RENAME_VS_EDIT, self.row_rename_vs_edit),
            (MERGE_TREES, self.row_merge_trees),
            (RENAMES_EXACT, self.row_renames_exact),
            (RENAMES_SIMILAR, self.row_renames_similar),
            (TREE_DIFF, self.row_tree_diff),
            (BLAME, self.row_blame),
            (LOG_PATH, self.row_log),
        ]
        for operation, measure in steps:
            row = RowResult(operation, self.n)
            if (
                self.git_exe
                and operation in GIT_OPERATIONS
                and (operation not in MERGE_TREE_OPERATIONS or self.git_merges)
            ):
                row.git_ns = []
            if setup_failed:
                row.error = f"not run: {setup_failed}"
            else:
                gc.collect()
                try:
                    measure(row)
                    if operation == COMMIT:
                        self.build_target_history()
                        self.start_git()
                except BenchFailure as exc:
                    row.error = str(exc)
                except Exception as exc:  # an engine error is a failed row, not a crashed run
                    row.error = f"{type(exc).__name__}: {exc}"
                if row.error and operation in ONE_OFF:
                    setup_failed = f"{operation} failed"
            rows.append(row)
            if self.on_row:
                self.on_row(row)
        return rows

    def sampled(self, row: RowResult, one: Callable[[int], tuple[int, int | None]]) -> None:
        """Take ``samples`` samples of ``one(k) -> (engine ns, git ns or None)``, within budget."""
        started = time.perf_counter()
        for k in range(self.samples):
            ours, theirs = one(k)
            row.times_ns.append(ours)
            if theirs is not None and row.git_ns is not None:
                row.git_ns.append(theirs)
            if k + 1 >= MIN_SAMPLES_UNDER_BUDGET and time.perf_counter() - started > ROW_BUDGET_S:
                break

    # -- building blocks ----------------------------------------------------------------

    def signature(self) -> Signature:
        self.clock += 1
        return Signature("AgentGit Bench", "bench@agentgit.invalid", self.clock)

    def commit(self, parent: ObjectId | None, operations: Sequence[Operation], message: str) -> ObjectId:
        return create_changeset(self.store, parent, operations, message=message, author=self.signature())

    def add_blobs(self, contents: Sequence[bytes]) -> list[ObjectId]:
        return self.store.add_many([(BLOB, data) for data in contents])

    def pick(self) -> int:
        """A file index not used by an earlier row (its path and content are as imported)."""
        if self.picked >= self.n:
            raise BenchFailure(f"{self.n} files are too few for {self.samples} samples of every row")
        index = (self.picked * self.stride + 11) % self.n
        self.picked += 1
        return index

    def tree_of(self, commit: ObjectId) -> ObjectId:
        return self.store.read_commit(commit).tree

    def expect_file(self, reader: TreeReader, tree: ObjectId, path: str, blob: ObjectId, what: str) -> None:
        found = lookup(reader, tree, path)
        check(found == Entry(MODE_FILE, blob), f"{what}: {path} is {found}, expected blob {blob}")

    # -- setup: the store, the import, the target's history, git ---------------------------

    def row_ingest(self, row: RowResult) -> None:
        objects = [(BLOB, file_content(i)) for i in range(self.n)]
        if self.backend == "memory":
            # Cheap to repeat on a fresh store each time; the last one is kept.
            for _ in range(self.samples):
                self.store = MemoryStore()
                elapsed, ids = _timed(lambda: self.store.add_many(objects))
                row.times_ns.append(elapsed)
        else:
            self.store = DiskStore(self.workdir / "repo.git")
            elapsed, ids = _timed(lambda: self.store.add_many(objects))
            row.times_ns.append(elapsed)
        check(len(ids) == self.n and len(set(ids)) == self.n, f"ingest returned {len(set(ids))} distinct ids")
        for i in (0, self.n // 2, self.n - 1):
            check(self.store.read_blob(ids[i]) == file_content(i), f"ingest: blob {i} does not read back")
        self.blob_ids = ids

    def row_commit(self, row: RowResult) -> None:
        operations = [Write(file_path(i), self.blob_ids[i]) for i in range(self.n)]
        author = self.signature()
        runs = self.samples if self.backend == "memory" else 1
        heads = set()
        for _ in range(runs):
            elapsed, head = _timed(
                lambda: create_changeset(self.store, None, operations, message="Import", author=author)
            )
            row.times_ns.append(elapsed)
            heads.add(head)
        check(len(heads) == 1, f"the same import gave {len(heads)} different changesets")
        self.head = heads.pop()
        tree = self.tree_of(self.head)
        for i in (0, self.n // 2, self.n - 1):
            self.expect_file(self.store, tree, file_path(i), self.blob_ids[i], "commit")

    def build_target_history(self) -> None:
        """The target file: created by one changeset, then 20 changesets rewrite 10 lines each."""
        lines = [f"line {j + 1} of the target, as first written\n" for j in range(TARGET_LINES)]
        (blob,) = self.add_blobs(["".join(lines).encode()])
        self.head = self.commit(self.head, [Write(TARGET_PATH, blob)], "Create the target")
        self.target_history = [self.head]
        self.target_owners = [self.head] * TARGET_LINES
        for k in range(1, HISTORY_CHANGESETS + 1):
            positions = target_positions(k)
            for j in positions:
                lines[j] = f"line {j + 1} of the target, rewritten by changeset {k}\n"
            (blob,) = self.add_blobs(["".join(lines).encode()])
            self.head = self.commit(self.head, [Write(TARGET_PATH, blob)], f"Change the target ({k})")
            self.target_history.append(self.head)
            for j in positions:
                self.target_owners[j] = self.head
        self.target_text = [line[:-1] for line in lines]

    def start_git(self) -> None:
        if not self.git_exe:
            return
        if self.backend == "memory":
            self.mirror = DiskStore(self.workdir / "git-mirror.git")
            git_dir = Path(self.mirror.path)
            self.export(self.head)
        else:
            git_dir = Path(self.store.path)  # type: ignore[attr-defined]
        self.git = _Git(self.git_exe, git_dir, self.workdir / "git-scratch-objects")

    def export(self, *commits: ObjectId) -> None:
        """Copy what ``commits`` reach into git's repository (memory backend; not timed)."""
        if self.mirror is None:
            return
        objects: list[tuple[str, bytes]] = []
        exported = self.exported

        def take(oid: ObjectId) -> None:
            exported.add(oid)
            objects.append(self.store.read(oid))

        trees: list[ObjectId] = []
        stack = [c for c in commits if c not in exported]
        while stack:
            oid = stack.pop()
            if oid in exported:
                continue
            take(oid)
            commit = self.store.read_commit(oid)
            stack.extend(p for p in commit.parents if p not in exported)
            if commit.tree not in exported:
                trees.append(commit.tree)
        while trees:
            oid = trees.pop()
            if oid in exported:
                continue
            take(oid)
            for entry in self.store.read_tree(oid).values():
                if entry.id in exported or entry.mode == MODE_GITLINK:
                    continue
                if entry.mode == MODE_TREE:
                    trees.append(entry.id)
                else:
                    take(entry.id)
        if objects:
            self.mirror.add_many(objects)

    def git_merge_tree(self, ours: ObjectId, theirs: ObjectId, expected_tree: ObjectId) -> int | None:
        """Time ``git merge-tree --write-tree``; its tree must be the engine's."""
        if self.git is None or not self.git_merges:
            return None
        self.export(ours, theirs)
        elapsed, out, status = self.git.run("merge-tree", "--write-tree", ours, theirs, writes=True, accept=(0, 1))
        check(status == 0, f"git merge-tree finds conflicts where the engine merged cleanly:\n{out}")
        tree = out.split()[0] if out.split() else ""
        check(tree == expected_tree, f"git merge-tree wrote tree {tree}, the engine {expected_tree}")
        return elapsed

    # -- the integrations (stateful: the stream head advances) ---------------------------

    def row_fast_forward(self, row: RowResult) -> None:
        def one(k: int) -> tuple[int, int | None]:
            i = self.pick()
            (blob,) = self.add_blobs([edited_content(i, f"fast-forward {k}")])
            base = self.head
            proposal = self.commit(base, [Write(file_path(i), blob)], f"Fast-forward {k}")
            committer = self.signature()
            elapsed, result = _timed(lambda: integrate(self.store, base, proposal, committer=committer))
            check(result.outcome == Outcome.FAST_FORWARD, f"outcome {result.outcome.value}, not fast_forward")
            check(result.head == proposal, "a fast-forward must move the stream to the proposal")
            self.head = proposal
            return elapsed, self.git_merge_tree(base, proposal, self.tree_of(proposal))

        self.sampled(row, one)

    def merge(
        self, base: ObjectId, stream_ops: list[Operation], proposal_ops: list[Operation], what: str
    ) -> tuple[int, ObjectId, ObjectId, ObjectId]:
        """Two changesets on ``base``, then the timed integration of one into the other:
        ``(nanoseconds, the merge changeset, the stream's changeset, the proposal's)``."""
        stream = self.commit(base, stream_ops, f"{what}: the stream's side")
        proposal = self.commit(base, proposal_ops, f"{what}: the proposal")
        committer = self.signature()
        elapsed, result = _timed(lambda: integrate(self.store, stream, proposal, committer=committer))
        merged = result.changeset
        if result.outcome != Outcome.MERGE or merged is None:
            raise BenchFailure(f"outcome {result.outcome.value}, not merge {list(result.conflicts)}")
        check(
            self.store.read_commit(merged).parents == (stream, proposal),
            "the merge changeset's parents are not (stream, proposal)",
        )
        return elapsed, merged, stream, proposal

    def row_three_way(self, row: RowResult) -> None:
        def one(k: int) -> tuple[int, int | None]:
            a, b = self.pick(), self.pick()
            blob_a, blob_b = self.add_blobs([edited_content(a, f"stream {k}"), edited_content(b, f"proposal {k}")])
            elapsed, merged, stream, proposal = self.merge(
                self.head, [Write(file_path(a), blob_a)], [Write(file_path(b), blob_b)], f"Three-way {k}"
            )
            tree = self.tree_of(merged)
            self.expect_file(self.store, tree, file_path(a), blob_a, "the stream's edit")
            self.expect_file(self.store, tree, file_path(b), blob_b, "the proposal's edit")
            self.head = merged
            return elapsed, self.git_merge_tree(stream, proposal, tree)

        self.sampled(row, one)

    def row_rename_vs_edit(self, row: RowResult) -> None:
        def one(k: int) -> tuple[int, int | None]:
            i = self.pick()
            (blob,) = self.add_blobs([edited_content(i, f"stream {k}")])
            source, target = file_path(i), moved_path(i)
            elapsed, merged, stream, proposal = self.merge(
                self.head, [Write(source, blob)], [Rename(source, target)], f"Rename vs edit {k}"
            )
            tree = self.tree_of(merged)
            self.expect_file(self.store, tree, target, blob, "the stream's edit at the proposal's new path")
            check(lookup(self.store, tree, source) is None, f"{source} should be gone after the rename")
            self.head = merged
            return elapsed, self.git_merge_tree(stream, proposal, tree)

        self.sampled(row, one)

    # -- pure functions (fixed inputs) ---------------------------------------------------

    def row_merge_trees(self, row: RowResult) -> None:
        a, b = self.pick(), self.pick()
        blob_a, blob_b = self.add_blobs([edited_content(a, "ours"), edited_content(b, "theirs")])
        ours = self.commit(self.head, [Write(file_path(a), blob_a)], "merge_trees: ours")
        theirs = self.commit(self.head, [Write(file_path(b), blob_b)], "merge_trees: theirs")
        base_tree, ours_tree, theirs_tree = self.tree_of(self.head), self.tree_of(ours), self.tree_of(theirs)
        trees: set[ObjectId] = set()

        def one(k: int) -> tuple[int, int | None]:
            batch = ObjectBatch(self.store)  # never flushed: each sample starts from the same store
            elapsed, merged = _timed(lambda: merge_trees(batch, base_tree, ours_tree, theirs_tree))
            tree = merged.tree
            if tree is None:
                raise BenchFailure(f"merge_trees found conflicts: {merged.conflicts}")
            self.expect_file(batch, tree, file_path(a), blob_a, "our edit")
            self.expect_file(batch, tree, file_path(b), blob_b, "their edit")
            trees.add(tree)
            check(len(trees) == 1, "merge_trees gave different trees for the same inputs")
            return elapsed, self.git_merge_tree(ours, theirs, tree)

        self.sampled(row, one)

    def renames_row(
        self, row: RowResult, before: ObjectId, after: ObjectId, expected: dict[tuple[str, str], int | None]
    ) -> None:
        """Time ``detect_renames`` on the precomputed change list of ``before → after``.

        ``expected`` maps (old path, new path) to a similarity (None: the engine's, checked
        against git's, must be at least 50 and below 100).
        """
        a, b = self.tree_of(before), self.tree_of(after)
        changes = diff_trees(self.store, a, b)
        check(len(changes) == 2 * len(expected), f"the diff has {len(changes)} changes, not {2 * len(expected)}")

        def one(k: int) -> tuple[int, int | None]:
            elapsed, result = _timed(lambda: detect_renames(self.store, changes))
            found = _renames(result)
            check(set(found) == set(expected), _pairs_mismatch("detect_renames", found, expected))
            for pair, score in found.items():
                wanted = expected[pair]
                ok = score == wanted if wanted is not None else 50 <= (score or 0) < 100
                check(ok, f"{pair[0]} -> {pair[1]}: similarity {score}, expected {wanted or '50..99'}")
            if self.git is None:
                return elapsed, None
            self.export(before, after)
            git_elapsed, out, _ = self.git.run("diff-tree", "-r", "-M", a, b)
            git_found = _parse_renames(out)
            check(git_found == found, _pairs_mismatch("git diff-tree -M", git_found, found))
            return elapsed, git_elapsed

        self.sampled(row, one)

    def row_renames_exact(self, row: RowResult) -> None:
        chosen = [self.pick() for _ in range(self.n // 100)]
        after = self.commit(self.head, [Rename(file_path(i), moved_path(i)) for i in chosen], "Rename 1%")
        self.renames_row(row, self.head, after, {(file_path(i), moved_path(i)): 100 for i in chosen})

    def row_renames_similar(self, row: RowResult) -> None:
        # An appended line keeps a two-line file above git's 50 % (20–24 bytes of 29–33 shared).
        chosen = [self.pick() for _ in range(min(SIMILAR_RENAMES, self.n // 2))]
        blobs = self.add_blobs([file_content(i) + b"// moved\n" for i in chosen])
        operations: list[Operation] = []
        for i, blob in zip(chosen, blobs):
            operations += [Delete(file_path(i)), Write(moved_path(i), blob)]
        after = self.commit(self.head, operations, "Rename and edit 100 files")
        self.renames_row(row, self.head, after, {(file_path(i), moved_path(i)): None for i in chosen})

    def row_tree_diff(self, row: RowResult) -> None:
        i = self.pick()
        (blob,) = self.add_blobs([edited_content(i, "tree diff")])
        after = self.commit(self.head, [Write(file_path(i), blob)], "One file for the tree diff")
        a, b = self.tree_of(self.head), self.tree_of(after)

        def one(k: int) -> tuple[int, int | None]:
            elapsed, changes = _timed(lambda: diff_trees(self.store, a, b))
            check(
                [(c.path, c.new) for c in changes if isinstance(c, Modified)]
                == [(file_path(i), Entry(MODE_FILE, blob))]
                and len(changes) == 1,
                f"diff_trees found {[c.path for c in changes][:5]}, expected only {file_path(i)}",
            )
            if self.git is None:
                return elapsed, None
            self.export(after)
            git_elapsed, out, _ = self.git.run("diff-tree", "-r", a, b)
            paths = [line.partition("\t")[2] for line in out.splitlines()]
            check(paths == [file_path(i)], f"git diff-tree found {paths[:5]}, expected only {file_path(i)}")
            return elapsed, git_elapsed

        self.sampled(row, one)

    # -- history (at the stream's final head: the target's changesets lie under merges) ----

    def row_blame(self, row: RowResult) -> None:
        head = self.head
        last = self.target_history[-1]

        def one(k: int) -> tuple[int, int | None]:
            elapsed, lines = _timed(lambda: blame(self.store, head, TARGET_PATH))
            check(len(lines) == TARGET_LINES, f"blame gave {len(lines)} lines, not {TARGET_LINES}")
            owners = [line.changeset for line in lines]
            for j in target_positions(HISTORY_CHANGESETS):
                check(owners[j] == last, f"line {j + 1}, changed by the last changeset, blamed on {owners[j]}")
            check(owners == self.target_owners, _blame_mismatch("blame", owners, self.target_owners))
            check([line.text for line in lines] == self.target_text, "blame's line texts are not the file's")
            check([line.number for line in lines] == list(range(1, TARGET_LINES + 1)), "blame's line numbers")
            if self.git is None:
                return elapsed, None
            self.export(head)
            git_elapsed, out, _ = self.git.run("blame", "--porcelain", head, "--", TARGET_PATH)
            by_line = _parse_blame(out)
            git_owners = [by_line.get(number, "") for number in range(1, TARGET_LINES + 1)]
            check(git_owners == owners, _blame_mismatch("git blame", git_owners, owners))
            return elapsed, git_elapsed

        self.sampled(row, one)

    def row_log(self, row: RowResult) -> None:
        head = self.head
        expected = self.target_history[::-1]

        def one(k: int) -> tuple[int, int | None]:
            elapsed, listed = _timed(lambda: log(self.store, head, path=TARGET_PATH))
            check(listed == expected, f"log --path listed {len(listed)} changesets, expected the {len(expected)} made")
            if self.git is None:
                return elapsed, None
            self.export(head)
            git_elapsed, out, _ = self.git.run("log", "--format=%H", head, "--", TARGET_PATH)
            check(out.split() == listed, f"git log lists {len(out.split())} changesets, the engine {len(listed)}")
            return elapsed, git_elapsed

        self.sampled(row, one)


def _renames(changes: list[FileChange]) -> dict[tuple[str, str], int]:
    return {(c.old_path, c.path): c.similarity for c in changes if isinstance(c, Renamed)}


def _pairs_mismatch(who: str, found: dict, expected: dict) -> str:
    missing = sorted(set(expected) - set(found))[:3]
    extra = sorted(set(found) - set(expected))[:3]
    scores = sorted((p, found[p], expected[p]) for p in set(found) & set(expected) if found[p] != expected[p])[:3]
    return (
        f"{who} found {len(found)} renames, expected {len(expected)}"
        f" (missing {missing}, unexpected {extra}, different scores {scores})"
    )


def _blame_mismatch(who: str, owners: list[str], expected: list[str]) -> str:
    pairs = enumerate(zip(owners, expected), start=1)
    wrong = [(number, got[:12], want[:12]) for number, (got, want) in pairs if got != want]
    return f"{who} attributes {len(wrong)} lines differently, e.g. (line, got, expected) {wrong[:3]}"
