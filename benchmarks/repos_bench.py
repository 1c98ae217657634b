"""``agentgit_bench repos``: ``make serve``'s start and the idle server with many repositories (issue 25).

For each count N (``--counts 10,10000``) an embedded deployment of its own (tests.deployment) is
filled with N repositories through the service functions (:func:`fill`: created in batches by
``repositories.create_repositories``, then one changeset landed on each one's ``main`` by
``landing.land``, a batch per transaction): each a real git repository with one landed changeset.
Then, the deployments side by side, sample by sample in turn (this machine's noise is larger
than the goal):

* **make serve's start**: each step it runs before uvicorn (``collectstatic``, ``agentgit_recover``,
  ``agentgit_maintain``, ``agentgit_metrics_reset``), as ``make serve`` runs them (a
  ``manage.py`` process each, its start-up included), and their sum;

  - the first start after the fill (every repository is new to recovery and maintenance),
  - a start with nothing changed since the last one (a restart: the goal's figure),
  - a start after one landing in each of ``--changed`` repositories;

* **the idle server**: CPU of every process of a started server (``uvicorn --workers`` as
  ``make serve`` starts it) over ``--idle-s`` seconds of no requests, from /proc, in ms per
  minute; every deployment's server measured over the same seconds.

Ratios are against the smallest count; the goal is at most 2× at 10 000 against 10. Each count
checks its invariants, never a time: every repository exists with ``main`` at its landed
changeset, in the database and in git; after a start every repository's ref mirror is marked
rebuilt through its last event; a start with nothing changed maintains no repository, and one
after ``--changed`` landings maintains exactly those.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.deployment import Deployment

from .git_bench import _git
from .report import format_ms, text_table

DEFAULT_COUNTS = (10, 10_000)
DEFAULT_SAMPLES = 3
DEFAULT_IDLE_S = 30.0
DEFAULT_CHANGED = 10
#: The goal (issue 25): with 10 000 repositories, within 2× of the same with 10.
GROWTH_GOAL = 2.0
#: make serve's steps before uvicorn (the Makefile's serve target), as it runs them.
START_STEPS: tuple[tuple[str, ...], ...] = (
    ("collectstatic", "--noinput", "--verbosity", "0"),
    ("agentgit_recover",),
    ("agentgit_maintain",),
    ("agentgit_metrics_reset",),
)
FIRST_START = "first start after the fill"
#: Repositories created and landed on per transaction by :func:`fill`.
FILL_BATCH = 500
#: Repositories whose git refs the check reads with git itself (a process each), at most.
GIT_CHECKED = 50


def repository_name(n: int) -> str:
    return f"many-{n:06d}"


def fill(count: int, start: int = 0) -> None:
    """Create repositories ``start`` .. ``start + count - 1`` and land one changeset on each one's
    ``main``, through the service functions (run inside a deployment: ``manage.py shell -c``)."""
    from django.db import transaction

    from repos.services import repositories

    names = [repository_name(n) for n in range(start, start + count)]
    created, refused = repositories.create_repositories(names)
    assert not refused, f"not created: {dict(list(refused.items())[:3])}"
    for at in range(0, len(created), FILL_BATCH):
        with transaction.atomic():
            for repository in repositories.list_repositories(created[at : at + FILL_BATCH]):
                land_one(repository, "first")
        print(f"filled {min(at + FILL_BATCH, len(created))} of {count}", flush=True)


def land_one(repository, message: str) -> None:
    """One one-file changeset landed on ``main`` (in this process: the embedded default)."""
    from repos.services import landing

    operations = [{"op": "write", "path": "README.md", "content": f"{repository.name}: {message}\n"}]
    landing.land(
        repository, "main", message=message, operations=operations, provenance={"agent": "repos-bench"}, credential=None
    )


def land_on(names: list[str], message: str) -> None:
    """One landing on ``main`` of each of ``names`` (``manage.py shell -c``)."""
    from repos.services import repositories

    for repository in repositories.list_repositories(names):
        land_one(repository, message)


@dataclass
class CountRun:
    """One deployment of ``count`` repositories and what was measured of it."""

    count: int
    deployment: Deployment
    fill_s: float = 0.0
    #: ``{(phase, step): [ms, ...]}``: every sample of every step of make serve's start.
    steps: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    idle_ms_per_min: list[float] = field(default_factory=list)
    checks: dict[str, object] = field(default_factory=dict)
    #: Landings so far on the changed repositories (each sample lands again).
    rounds: int = 0


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def _start(run: CountRun, phase: str) -> dict[str, str]:
    """make serve's steps, each timed; what each printed."""
    said: dict[str, str] = {}
    for argv in START_STEPS:
        started = time.perf_counter()
        said[argv[0]] = run.deployment.manage(*argv, timeout_s=7200)
        run.steps.setdefault((phase, argv[0]), []).append((time.perf_counter() - started) * 1000)
    run.steps.setdefault((phase, "start, in all"), []).append(
        sum(run.steps[(phase, argv[0])][-1] for argv in START_STEPS)
    )
    return said


def _database(run: CountRun) -> sqlite3.Connection:
    return sqlite3.connect(run.deployment.data_dir / "agentgit.sqlite3")


def _unmirrored(run: CountRun) -> int:
    """Repositories whose ref mirror is not marked rebuilt through their last event."""
    with _database(run) as database:
        return database.execute("SELECT count(*) FROM repos_repository WHERE event_seq > mirrored_seq").fetchone()[0]


def _maintained(said: str) -> int:
    """How many repositories ``agentgit_maintain`` reported on."""
    return sum(1 for line in said.splitlines() if " in " in line and "; loose objects " in line)


def _check_filled(run: CountRun) -> None:
    with _database(run) as database:
        rows = database.execute(
            "SELECT r.name, s.head FROM repos_repository r JOIN repos_stream s "
            "ON s.repository_id = r.id AND s.name = r.default_stream"
        ).fetchall()
    heads = dict(rows)
    expected = {repository_name(n) for n in range(run.count)}
    assert set(heads) == expected, f"{run.count}: {len(expected - set(heads))} repositories missing"
    empty = [name for name, head in heads.items() if head is None]
    assert not empty, f"{run.count}: main is empty in {len(empty)} repositories, e.g. {empty[:3]}"
    step = max(1, run.count // GIT_CHECKED)
    for name in sorted(heads)[::step]:
        in_git = _git(run.deployment.repository_dir(name), "rev-parse", "refs/heads/main").stdout.decode().strip()
        assert in_git == heads[name], f"{name}: git's main {in_git} is not the database's {heads[name]}"
        message = _git(run.deployment.repository_dir(name), "log", "-1", "--format=%s", "main").stdout.decode()
        assert message.strip() == "first", f"{name}: main is not the landed changeset: {message!r}"
    run.checks.update({"repositories": len(heads), "landed": len(heads) - len(empty)})


def _changed_names(count: int, changed: int) -> list[str]:
    return [repository_name(n) for n in range(0, count, max(1, count // changed))][:changed]


def _measure_starts(run: CountRun, changed: int, first: bool) -> None:
    if first:
        _start(run, FIRST_START)
        run.checks["unmirrored_after_first_start"] = _unmirrored(run)
    said = _start(run, "start, nothing changed")
    maintained = _maintained(said["agentgit_maintain"])
    assert maintained == 0, f"{run.count}: a start with nothing changed maintained {maintained} repositories"
    run.checks["maintained_nothing_changed"] = maintained
    names = _changed_names(run.count, changed)
    run.rounds += 1
    script = f"from benchmarks.repos_bench import land_on; land_on({names!r}, 'round {run.rounds}')"
    run.deployment.manage("shell", "-c", script, timeout_s=600)
    said = _start(run, f"start, {len(names)} changed")
    maintained = _maintained(said["agentgit_maintain"])
    assert maintained == len(names), f"{run.count}: {len(names)} repositories changed, {maintained} maintained"
    run.checks["maintained_after_changes"] = maintained
    unmirrored = _unmirrored(run)
    assert unmirrored == 0, f"{run.count}: {unmirrored} repositories' mirrors not marked after a start"
    run.checks["unmirrored_after_start"] = unmirrored


def _measure_idle(runs: list[CountRun], idle_s: float) -> None:
    """Every deployment's server over the same ``idle_s`` seconds (after a second to settle)."""
    time.sleep(1.0)
    servers = [run.deployment.server for run in runs]
    assert all(server is not None for server in servers), "each server is started before it is measured idle"
    before = [server.cpu_seconds() for server in servers if server is not None]
    started = time.monotonic()
    time.sleep(idle_s)
    elapsed = time.monotonic() - started
    after = [server.cpu_seconds() for server in servers if server is not None]
    for run, used_before, used_after in zip(runs, before, after, strict=True):
        run.idle_ms_per_min.append((used_after - used_before) * 1000 * 60 / elapsed)


def run_repos_benchmark(
    counts: list[int],
    samples: int = DEFAULT_SAMPLES,
    idle_s: float = DEFAULT_IDLE_S,
    changed: int = DEFAULT_CHANGED,
    server_workers: int | None = None,
    progress: Callable[[str], None] = lambda step: None,
) -> list[CountRun]:
    """Fill a deployment per count, then measure each sample of every count in turn."""
    workers = server_workers or 2 * (os.cpu_count() or 1)  # what make serve starts (the Makefile)
    runs: list[CountRun] = []
    try:
        for count in counts:
            progress(f"{count} repositories: a deployment, filled through the services")
            run = CountRun(count, Deployment("embedded"))
            runs.append(run)
            script = f"from benchmarks.repos_bench import fill; fill({count})"
            run.fill_s = _timed(lambda: run.deployment.manage("shell", "-c", script, timeout_s=7200)) / 1000
            progress(f"{count} repositories: filled in {run.fill_s:.1f} s; checking them")
            _check_filled(run)
        for sample in range(samples):
            for run in runs:
                progress(f"sample {sample + 1} of {samples}: {run.count} repositories, make serve's start")
                _measure_starts(run, min(changed, run.count), first=sample == 0)
            progress(f"sample {sample + 1} of {samples}: the idle servers, {idle_s:.0f} s")
            for run in runs:
                run.deployment.start_server(workers=workers)
            _measure_idle(runs, idle_s)
            for run in runs:
                run.deployment.stop_server()
        return runs
    finally:
        for run in runs:
            run.deployment.close()


# ------------------------------------------------------------------------------ results


def rows(runs: list[CountRun]) -> list[dict]:
    """Each figure of each count: the median, and its ratio to the smallest count's."""
    if not runs:
        return []
    smallest = runs[0]

    def figures(run: CountRun) -> dict[str, list[float]]:
        found = {f"{phase}: {step} (ms)": times for (phase, step), times in run.steps.items()}
        found["idle server CPU (ms per minute)"] = run.idle_ms_per_min
        return found

    base = {name: statistics.median(values) for name, values in figures(smallest).items() if values}
    found = []
    for run in runs:
        for name, values in figures(run).items():
            if not values:
                continue
            median = statistics.median(values)
            reference = base.get(name)
            ratio = None if not reference else round(median / reference, 3)
            found.append(
                {
                    "figure": name,
                    "repositories": run.count,
                    "median": round(median, 3),
                    "samples": [round(value, 3) for value in values],
                    "vs_smallest": ratio,
                    # The first start after the fill meets every repository new (once, by design).
                    "goal": GROWTH_GOAL if run is not smallest and not name.startswith(FIRST_START) else None,
                }
            )
    return found


def data(runs: list[CountRun]) -> dict:
    return {
        "goal_vs_smallest": GROWTH_GOAL,
        "runs": [{"repositories": run.count, "fill_s": round(run.fill_s, 1), "checks": run.checks} for run in runs],
        "rows": rows(runs),
    }


def format_table(runs: list[CountRun]) -> str:
    smallest = runs[0].count if runs else 0
    lines = [["figure", "repositories", "median", f"vs {smallest}", "goal"]]
    for row in sorted(rows(runs), key=lambda row: (row["figure"], row["repositories"])):
        lines.append(
            [row["figure"], f"{row['repositories']:,}".replace(",", " "), format_ms(row["median"]), *_versus(row)]
        )
    checks = [
        f"{run.count} repositories (filled in {run.fill_s:.1f} s): "
        + ", ".join(f"{key} {value}" for key, value in run.checks.items())
        for run in runs
    ]
    return "\n".join(text_table(lines)) + "\n\n" + "\n".join(checks) + "\n"


def markdown(runs: list[CountRun]) -> str:
    smallest = runs[0].count if runs else 0
    lines = [f"| figure | repositories | median | vs {smallest} | goal |", "|---|---|---|---|---|"]
    for row in sorted(rows(runs), key=lambda row: (row["figure"], row["repositories"])):
        ratio, goal = _versus(row)
        lines.append(f"| {row['figure']} | {row['repositories']} | {format_ms(row['median'])} | {ratio} | {goal} |")
    return "\n".join(lines) + "\n"


def _versus(row: dict) -> tuple[str, str]:
    """The ratio to the smallest count and the goal beside it, for the rows that have a goal."""
    ratio, goal = row["vs_smallest"], row["goal"]
    if goal is None:
        return "", ""
    missed = ratio is not None and ratio > goal
    return ("" if ratio is None else f"{ratio:.2f}×"), f"≤ {goal:.0f}×" + (" (missed)" if missed else "")
