"""The web UI benchmark: server time and queries of the main pages on a big repository.

``manage.py agentgit_bench web [--files 100000] [--commits 3000] [--samples 20]`` builds, in a
throwaway repository of the configured database, an import of ``--files`` files followed by
``--commits`` one-file changesets, among them a 2 000-line file edited by every tenth changeset
(its blame has many hunks) and one changeset that edits 500 files (the big diff). It lands the
head on ``main`` through the integration service (which derives the graph and the path index,
as every landing does), then requests each page through Django's whole stack (middleware,
session, access check, view, template) with a logged-in user holding a read grant, and reports
the first request's time (the page's own caches empty: a blame is remembered once computed),
the median and 90th percentile server time of the requests after it (nearest rank) and the
queries each page made.

The same pages are measured on a small repository too (1 000 files, 200 changesets): a page
whose query count differs between the two grows with the history or the number of files, and
fails the row. Goals (issue 9): p50 <= 50 ms each, <= 150 ms for the 500-file diff.
"""

from __future__ import annotations

import random
import shutil
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from engine.changeset import Write, create_changeset
from engine.objects import BLOB, Signature, hash_object
from engine.store import MemoryStore

from .report import text_table

DEFAULT_FILES = 100_000
DEFAULT_COMMITS = 3_000
DEFAULT_SAMPLES = 20
SMALL = (1_000, 200)
BLAME_FILE = "src/big/blame.py"
BLAME_LINES = 2_000
SHOWN_FILE = "src/d1/f1.py"
WIDE_FILES = 500
GOAL_MS = 50.0
WIDE_GOAL_MS = 150.0


@dataclass
class PageRow:
    page: str
    files: int
    commits: int
    #: The first request (caches of the page's own results empty; the object store warm).
    first_ms: float
    p50_ms: float
    p90_ms: float
    queries: int
    goal_ms: float
    samples: int

    @property
    def met(self) -> bool:
        return self.p50_ms <= self.goal_ms


@dataclass
class WebRun:
    rows: list[PageRow] = field(default_factory=list)
    #: Pages whose query count differs between the small and the big repository.
    growing: list[str] = field(default_factory=list)
    build_s: dict[str, float] = field(default_factory=dict)


def _file_text(number: int) -> bytes:
    return "".join(f"value_{number}_{line} = {line} * {number}\n" for line in range(10)).encode()


def build(store, files: int, commits: int, seed: int = 1) -> tuple[str, str]:
    """Write the benchmark's history into ``store``; ``(head, the 500-file changeset)``."""
    rnd = random.Random(seed)
    staging = MemoryStore()
    clock = 1_700_000_000

    def sig() -> Signature:
        return Signature("Agent", "agent@example.com", clock)

    paths = [f"src/d{number % 500}/f{number}.py" for number in range(files)]
    contents = [_file_text(number) for number in range(files)]
    blame_lines = [f"line {n} = {n}\n" for n in range(BLAME_LINES)]
    contents.append("".join(blame_lines).encode())
    paths.append(BLAME_FILE)
    operations = [Write(path, hash_object(BLOB, data)) for path, data in zip(paths, contents)]
    head = create_changeset(staging, None, operations, message="import\n", author=sig(), blobs=contents)
    wide = head
    for step in range(commits):
        clock += 1
        if step == commits // 2:
            chosen = rnd.sample(range(files), min(WIDE_FILES, files))
            blobs = [_file_text(number).replace(b" = 3 *", b" = 3 + 1 *") for number in chosen]
            ops = [Write(paths[n], hash_object(BLOB, data)) for n, data in zip(chosen, blobs)]
            head = wide = create_changeset(staging, head, ops, message="edit 500 files\n", author=sig(), blobs=blobs)
            continue
        if step % 10 == 0:
            for _ in range(5):
                line = rnd.randrange(BLAME_LINES)
                blame_lines[line] = f"line {line} = {step}\n"
            data = "".join(blame_lines).encode()
            path = BLAME_FILE
        else:
            number = rnd.randrange(files)
            data = _file_text(number) + f"# edit {step}\n".encode()
            path = paths[number]
        ops = [Write(path, hash_object(BLOB, data))]
        head = create_changeset(staging, head, ops, message=f"change {step}\n", author=sig(), blobs=[data])
    store.add_many([staging.read(oid) for oid in staging])  # one pack
    return head, wide


def run_web_benchmark(
    files: int = DEFAULT_FILES,
    commits: int = DEFAULT_COMMITS,
    *,
    samples: int = DEFAULT_SAMPLES,
    on_step: Callable[[str], None] = lambda name: None,
) -> WebRun:
    """Build the small and the big repository, measure every page on both (needs Django)."""
    run = WebRun()
    counts: dict[str, dict[str, int]] = {}
    for size, history in (SMALL, (files, commits)):
        label = f"{size:,} files, {history:,} changesets"
        rows = _measure_repository(size, history, samples, on_step, run, label)
        counts[label] = {row.page: row.queries for row in rows}
        run.rows += rows
    small, big = counts.values()
    run.growing = [page for page in big if big[page] != small.get(page)]
    return run


def _measure_repository(files, commits, samples, on_step, run, label) -> list[PageRow]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from repos.models import Repository
    from repos.services import integration
    from repos.services.access import grant_access
    from repos.services.proposals import open_proposal
    from repos.services.repositories import create_repository
    from repos.services.stores import repository_path, store_for

    name = f"bench-web-{uuid.uuid4().hex[:8]}"
    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}")
    repository = create_repository(name)
    try:
        on_step(f"{label}: build")
        started = time.perf_counter()
        head, wide = build(store_for(name), files, commits)
        run.build_s[f"{label}: build"] = time.perf_counter() - started
        on_step(f"{label}: land and derive")
        started = time.perf_counter()
        proposal = open_proposal(repository, stream="main", head=head)
        integration.request_integration(proposal)  # lands after commit (eager) or in a worker
        _wait_landed(repository, head)
        run.build_s[f"{label}: land and derive"] = time.perf_counter() - started
        grant_access(user, repository)
        client = Client(SERVER_NAME="localhost")
        client.force_login(user)
        base = f"/repos/{name}"
        pages = [
            ("repository home", f"{base}/", GOAL_MS),
            ("tree root", f"{base}/tree/main", GOAL_MS),
            ("file (highlighted)", f"{base}/blob/main/{SHOWN_FILE}", GOAL_MS),
            (f"blame ({BLAME_LINES:,} lines)", f"{base}/blame/main/{BLAME_FILE}", GOAL_MS),
            (f"diff ({WIDE_FILES} files)", f"{base}/changeset/{wide}", WIDE_GOAL_MS),
            ("path log", f"{base}/log/main?path={BLAME_FILE}", GOAL_MS),
            ("stream log", f"{base}/log/main", GOAL_MS),
        ]
        rows = []
        for page, url, goal in pages:
            on_step(f"{label}: {page}")
            start = time.perf_counter_ns()
            first = client.get(url)  # then warm: the process's caches hold what a served page left
            first_ms = (time.perf_counter_ns() - start) / 1e6
            if first.status_code != 200:
                raise AssertionError(f"{page}: {url} answered {first.status_code}")
            times = []
            queries = 0
            for _ in range(samples):
                with CaptureQueriesContext(connection) as captured:
                    start = time.perf_counter_ns()
                    response = client.get(url)
                    times.append((time.perf_counter_ns() - start) / 1e6)
                if response.status_code != 200:
                    raise AssertionError(f"{page}: {url} answered {response.status_code}")
                queries = len(captured)
            rows.append(
                PageRow(page, files, commits, first_ms, statistics.median(times), _p90(times), queries, goal, samples)
            )
        return rows
    finally:
        # The benchmark's own repository, named at random (as the history benchmark does it):
        # its rows and its directory simply go.
        Repository.objects.filter(name=name).delete()
        user.delete()
        shutil.rmtree(repository_path(name), ignore_errors=True)


def _wait_landed(repository, head: str, timeout_s: float = 600) -> None:
    from repos.models import Stream

    deadline = time.monotonic() + timeout_s
    while Stream.objects.get(repository=repository, name="main").head != head:
        if time.monotonic() > deadline:
            raise AssertionError("the benchmark's history did not land (is a worker running?)")
        time.sleep(0.1)


def _p90(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[max(0, -(-len(ordered) * 9 // 10) - 1)]


def format_web(run: WebRun) -> str:
    header = ["page", "repository", "first (ms)", "p50 (ms)", "p90 (ms)", "goal (ms)", "queries", "met"]
    lines = [header] + [
        [
            row.page,
            f"{row.files:,} files, {row.commits:,} changesets",
            f"{row.first_ms:.1f}",
            f"{row.p50_ms:.1f}",
            f"{row.p90_ms:.1f}",
            f"{row.goal_ms:.0f}",
            str(row.queries),
            "yes" if row.met else "NO",
        ]
        for row in run.rows
    ]
    out = text_table(lines)
    out += [f"{step}: {seconds:.1f} s" for step, seconds in run.build_s.items()]
    if run.growing:
        out.append("query counts that grow with the repository: " + ", ".join(run.growing))
    else:
        out.append("query counts: the same on both repositories for every page")
    return "\n".join(out) + "\n"


def web_json(run: WebRun) -> dict:
    return {
        "rows": [{**asdict(row), "met": row.met} for row in run.rows],
        "growing": run.growing,
        "build_s": run.build_s,
    }
