"""The command line of every suite: ``manage.py agentgit_bench SUITE [options]``.

One :class:`Suite` per subcommand, in :data:`SUITES`. A suite declares its own options
(``add_arguments``) and turns them into :class:`Results` (``run``); the management command
(benchmarks/management/commands/agentgit_bench.py) only builds the parser from this table, prints
the table it gets back, writes ``--json``/``--markdown``, and turns :class:`BenchmarkFailed`
(a row whose check failed) into a failing exit, after the table, with no result file written.

To add a suite: a module of its own in benchmarks/ that measures and checks, then a
``Suite`` here that parses its options and calls it, and one entry in :data:`SUITES`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from tqdm import tqdm

from tests.deployment import MODES

from . import (
    candidates,
    cost_bench,
    cycle,
    engine_bench,
    events_bench,
    git_bench,
    history_bench,
    landing_cost,
    load,
    load_report,
    policy_bench,
    real_history,
    refs_bench,
    relay_transports,
    report,
    repos_bench,
    resolution_bench,
    search_bench,
    web_bench,
)

R = TypeVar("R")

#: Where a suite reports what it is doing (the command's stderr).
Log = Callable[[str], None]


class BenchmarkFailed(Exception):
    """A row did not measure what it says (wrong outcome, git disagrees): the run fails."""


@dataclass
class Results:
    """What a suite measured: the text table, the same as JSON and as markdown.

    ``failures`` (text naming every failed row) fails the command after the table is printed.
    """

    table: str
    data: dict[str, Any]
    markdown: str
    failures: str = ""


@dataclass(frozen=True)
class Suite:
    """One subcommand of ``agentgit_bench``."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[dict[str, Any], Log], Results]


# ------------------------------------------------------------------------------ option types


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def numbers(minimum: int, what: str) -> Callable[[str], list[int]]:
    """An argparse type: comma-separated integers, each at least ``minimum``."""

    def parse(text: str) -> list[int]:
        try:
            values = [int(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"comma-separated numbers of {what}, not {text!r}") from None
        if not values or min(values) < minimum:
            raise argparse.ArgumentTypeError(f"every value must be at least {minimum} {what}")
        return values

    return parse


def choices(allowed: tuple[str, ...]) -> Callable[[str], list[str]]:
    """An argparse type: a comma-separated subset of ``allowed``."""

    def parse(text: str) -> list[str]:
        chosen = [part.strip() for part in text.split(",") if part.strip()]
        if not chosen or any(part not in allowed for part in chosen):
            raise argparse.ArgumentTypeError(f"comma-separated, of: {', '.join(allowed)}")
        return chosen

    return parse


def assignment(text: str) -> tuple[str, str]:
    """An argparse type: ``NAME=VALUE``."""
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"NAME=VALUE, not {text!r}")
    return name, value


def _progress(unit: str, total: int | None = None) -> tqdm:  # type: ignore[type-arg]
    # A bar on a terminal only (tqdm's disable=None), so logs and tests stay clean.
    return tqdm(total=total, file=sys.stderr, disable=None, unit=unit)


def _in_steps(work: Callable[[Callable[[str], None]], R]) -> R:
    """``work(step)`` with a progress bar that ``step(name)`` advances; a row's failed check
    (AssertionError) fails the run."""
    with _progress("step") as bar:

        def step(name: str) -> None:
            bar.set_description(name)
            bar.update(1)

        try:
            return work(step)
        except AssertionError as error:
            raise BenchmarkFailed(str(error)) from None


# ------------------------------------------------------------------------------ engine


def _sizes_argument(parser: argparse.ArgumentParser) -> None:
    """``--sizes``: the repositories the engine and candidates suites build (the same layout)."""
    parser.add_argument(
        "--sizes",
        type=numbers(engine_bench.MIN_FILES, "files"),
        default=list(engine_bench.DEFAULT_SIZES),
        help="numbers of files, comma-separated (default: %(default)s)",
    )


def _engine_arguments(parser: argparse.ArgumentParser) -> None:
    _sizes_argument(parser)
    parser.add_argument("--backend", choices=engine_bench.BACKENDS, default="memory")
    parser.add_argument("--samples", type=positive, default=engine_bench.DEFAULT_SAMPLES)


def _engine_run(options: dict[str, Any], log: Log) -> Results:
    sizes = options["sizes"]
    with _progress("row", len(engine_bench.OPERATIONS) * len(sizes)) as bar:

        def on_row(row: engine_bench.RowResult) -> None:
            bar.set_description(f"{row.files} files: {row.operation}")
            bar.update(1)

        run = engine_bench.run_engine_benchmark(
            sizes, backend=options["backend"], samples=options["samples"], on_row=on_row
        )
    failures = f"{len(run.failures)} benchmark rows failed:\n{report.failures_text(run)}" if run.failures else ""
    return Results(report.format_table(run), report.to_json(run), report.to_markdown(run), failures)


# ------------------------------------------------------------------------------ candidates


def _candidates_arguments(parser: argparse.ArgumentParser) -> None:
    _sizes_argument(parser)
    parser.add_argument("--samples", type=positive, default=engine_bench.DEFAULT_SAMPLES)


def _candidates_run(options: dict[str, Any], log: Log) -> Results:
    with _progress("cell") as bar:

        def on_cell(cell: candidates.Cell) -> None:
            bar.update(1)

        cells = candidates.run_candidates(options["sizes"], samples=options["samples"], on_cell=on_cell)
    table = candidates.format_candidates(cells)
    return Results(table + "\n", {"rows": [asdict(cell) for cell in cells]}, table)


# ------------------------------------------------------------------------------ cycle


def _cycle_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--modes",
        type=choices(MODES),
        default=list(MODES),
        help="embedded (SQLite, eager, one uvicorn) and/or production (PostgreSQL, Redis, "
        "uvicorn workers, celery workers); comma-separated (default: both)",
    )
    parser.add_argument(
        "--scenarios",
        type=choices(cycle.SCENARIOS),
        default=list(cycle.SCENARIOS),
        help="streams (a stream per writer) and/or stream (all on main); default: both",
    )
    parser.add_argument("--writers", type=positive, default=16, help="closed-loop writers (default: %(default)s)")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per row (default: %(default)s)")
    parser.add_argument(
        "--server-workers",
        type=positive,
        default=cycle.DEFAULT_SERVER_WORKERS,
        help="uvicorn --workers, both modes (default: two per core, as make serve)",
    )
    parser.add_argument("--celery-workers", type=positive, default=2, help="celery worker processes, production mode")
    parser.add_argument("--celery-concurrency", type=positive, default=1, help="pool size of each celery worker")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        type=assignment,
        metavar="NAME=VALUE",
        help="an environment variable for every process started (repeatable), e.g. AGENTGIT_LANDING_BATCH=64",
    )
    parser.add_argument("--url", help="drive this running server instead of starting one (needs --token)")
    parser.add_argument("--token", help="a token with scopes read,write,integrate,admin, for --url")


def _cycle_run(options: dict[str, Any], log: Log) -> Results:
    scenarios, writers, duration = options["scenarios"], options["writers"], options["duration"]
    if options["url"]:
        if not options["token"]:
            raise BenchmarkFailed("--url needs --token")
        data = cycle.run_against(
            options["url"], options["token"], scenarios=scenarios, writers=writers, duration_s=duration
        )
    else:
        data = cycle.run_cycle_benchmark(
            modes=options["modes"],
            scenarios=scenarios,
            writers=writers,
            duration_s=duration,
            server_workers=options["server_workers"],
            celery_workers=options["celery_workers"],
            celery_concurrency=options["celery_concurrency"],
            env=dict(options["env"]),
            log=log,
        )
    table = cycle.format_report(data)
    return Results(table, data, table)


# ------------------------------------------------------------------------------ history


def _history_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--commits",
        type=numbers(history_bench.MIN_COMMITS, "changesets"),
        default=list(history_bench.DEFAULT_COMMITS),
        help="history lengths in changesets, comma-separated (default: %(default)s)",
    )
    parser.add_argument("--samples", type=positive, help="samples per row (default: 3; 5 with --source)")
    real = parser.add_argument_group(
        "a real repository (issue 35)", "with --source: import it and time every read beside git and cgit"
    )
    real.add_argument("--source", type=Path, metavar="DIR", help="a local git repository (a bare clone)")
    real.add_argument("--branch", help="the branch read (default: the source's HEAD)")
    real.add_argument(
        "--paths", type=_paths, help="files for log --path, comma-separated (default: the 3 changed most often)"
    )
    real.add_argument("--blame", metavar="PATH", help="the file blamed and read (default: the first of --paths)")
    real.add_argument(
        "--data-dir",
        type=Path,
        metavar="DIR",
        help="keep the deployment (and its import) here; a later run with the same DIR reuses the import",
    )


def _paths(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _history_run(options: dict[str, Any], log: Log) -> Results:
    if options.get("source"):
        return _real_history_run(options, log)
    options["samples"] = options.get("samples") or history_bench.DEFAULT_SAMPLES
    run = _in_steps(
        lambda step: history_bench.run_history_benchmark(options["commits"], samples=options["samples"], on_row=step)
    )
    table = history_bench.format_history(run)
    return Results(table, history_bench.history_json(run), table)


def _failing_cleanly(work: Callable[[], R]) -> R:
    """``work()``, with a step that could not run (an import that failed, a git command, a
    server that did not start) reported as the run's failure, not a traceback."""
    try:
        return work()
    except (RuntimeError, subprocess.CalledProcessError, OSError) as error:
        raise BenchmarkFailed(f"{type(error).__name__}: {error}") from None


def _real_history_run(options: dict[str, Any], log: Log) -> Results:
    source: Path = options["source"]
    if not (source / "HEAD").is_file() and not (source / ".git").exists():
        raise BenchmarkFailed(f"{source} is not a git repository")
    run = _in_steps(
        lambda step: _failing_cleanly(
            lambda: real_history.run_real_history(
                source,
                branch=options.get("branch"),
                paths=options.get("paths"),
                blame_path=options.get("blame"),
                samples=options.get("samples") or real_history.DEFAULT_SAMPLES,
                data_dir=options.get("data_dir"),
                progress=_logged_steps(log, step),
            )
        )
    )
    table = real_history.format_real(run)
    return Results(table, real_history.real_json(run), table, "\n".join(run.failures))


# ------------------------------------------------------------------------------ git


def _git_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--files", type=positive, default=git_bench.DEFAULT_FILES, help="files of the cloned repository"
    )
    parser.add_argument(
        "--streams", type=positive, default=git_bench.DEFAULT_STREAMS, help="streams of the ls-refs row"
    )
    parser.add_argument("--samples", type=positive, default=3)


def _git_run(options: dict[str, Any], log: Log) -> Results:
    rows = _in_steps(
        lambda step: git_bench.run_git_benchmark(
            options["files"], options["streams"], options["samples"], progress=step
        )
    )
    table = git_bench.format_rows(rows)
    return Results(table, {"rows": git_bench.rows_json(rows)}, table)


# ------------------------------------------------------------------------------ landing


def _refs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--streams",
        type=numbers(2, "streams"),
        default=list(refs_bench.DEFAULT_SIZES),
        help="streams of each repository, comma-separated; ratios are against the first (default: %(default)s)",
    )
    parser.add_argument("--samples", type=positive, default=refs_bench.DEFAULT_SAMPLES)
    parser.add_argument(
        "--client-max",
        type=int,
        default=refs_bench.DEFAULT_CLIENT_MAX,
        help="up to this many streams, stock git push over HTTP is timed too (its client is quadratic)",
    )


def _refs_run(options: dict[str, Any], log: Log) -> Results:
    def progress(step: str) -> None:
        log(f"{step}\n")

    try:
        runs = refs_bench.run_refs_benchmark(
            options["streams"], options["samples"], options["client_max"], progress=progress
        )
    except AssertionError as error:
        raise BenchmarkFailed(str(error)) from None
    table = refs_bench.format_table(runs)
    data = {"runs": [{"streams": run.streams, "checks": run.checks} for run in runs], "rows": refs_bench.rows(runs)}
    return Results(table, data, table)


def _repos_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--counts",
        type=numbers(1, "repositories"),
        default=list(repos_bench.DEFAULT_COUNTS),
        help="repositories of each deployment, comma-separated; ratios are against the first (default: %(default)s)",
    )
    parser.add_argument("--samples", type=positive, default=repos_bench.DEFAULT_SAMPLES)
    parser.add_argument(
        "--idle-s", type=float, default=repos_bench.DEFAULT_IDLE_S, help="seconds the idle servers are measured"
    )
    parser.add_argument(
        "--changed", type=positive, default=repos_bench.DEFAULT_CHANGED, help="repositories landed on between starts"
    )
    parser.add_argument("--server-workers", type=positive, help="uvicorn workers (default: make serve's, 2 per core)")


def _repos_run(options: dict[str, Any], log: Log) -> Results:
    try:
        runs = repos_bench.run_repos_benchmark(
            options["counts"],
            options["samples"],
            options["idle_s"],
            options["changed"],
            options["server_workers"],
            progress=lambda step: log(f"{step}\n"),
        )
    except AssertionError as error:
        raise BenchmarkFailed(str(error)) from None
    return Results(repos_bench.format_table(runs), repos_bench.data(runs), repos_bench.markdown(runs))


def _landing_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--landings", type=positive, default=50, help="landings per way (default: %(default)s)")
    parser.add_argument("--size", type=positive, default=1024, help="bytes per file (default: %(default)s)")
    parser.add_argument("--url", help="a running server instead of a fresh embedded deployment (needs --token)")
    parser.add_argument("--token", help="a token with scopes write, integrate and admin, for --url")


def _landing_run(options: dict[str, Any], log: Log) -> Results:
    if options["url"] and not options["token"]:
        raise BenchmarkFailed("--url needs --token")
    try:
        rows = landing_cost.run_landing_cost(
            options["landings"], options["size"], log, options["url"], options["token"]
        )
    except AssertionError as error:  # an answer that was not the fast-forward each landing is
        raise BenchmarkFailed(str(error)) from None
    return Results(landing_cost.format_landing_cost(rows), {"rows": rows}, landing_cost.landing_cost_markdown(rows))


# ------------------------------------------------------------------------------ policy


def _policy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--files", type=positive, default=policy_bench.DEFAULT_FILES, help="files (default: %(default)s)"
    )
    parser.add_argument(
        "--owners-lines", type=positive, default=policy_bench.DEFAULT_OWNERS_LINES, help="CODEOWNERS lines"
    )
    parser.add_argument("--landings", type=positive, default=policy_bench.DEFAULT_LANDINGS, help="per repository")


def _policy_run(options: dict[str, Any], log: Log) -> Results:
    try:
        data = policy_bench.run_policy_benchmark(
            files=options["files"], owners_lines=options["owners_lines"], landings=options["landings"], log=log
        )
    except AssertionError as error:
        raise BenchmarkFailed(str(error)) from None
    table = policy_bench.format_policy(data)
    return Results(table, data, table)


# ------------------------------------------------------------------------------ cost


def _cost_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--modes", type=choices(MODES), default=list(MODES), help="embedded and/or production (default: both)"
    )
    parser.add_argument(
        "--landings", type=positive, default=50, help="sequential one-file landings per pass (default: %(default)s)"
    )
    parser.add_argument(
        "--agents", type=int, default=50, help="agents of the landing scenario (0: skip it; default: %(default)s)"
    )
    parser.add_argument("--changes", type=positive, default=5, help="changes per agent (default: %(default)s)")
    parser.add_argument("--server-workers", type=positive, default=cycle.DEFAULT_SERVER_WORKERS)
    parser.add_argument(
        "--against",
        type=Path,
        action="append",
        metavar="CHECKOUT",
        help="instead: this checkout's sequential landings side by side with CHECKOUT's (another "
        "AgentGit checkout, e.g. an earlier commit's git worktree; repeatable), each in a deployment of "
        "its own, landings alternated between them, for each of --modes",
    )
    parser.add_argument("--rounds", type=positive, default=8, help="with --against: batches per checkout")
    parser.add_argument(
        "--batch",
        type=positive,
        default=50,
        help="with --against: landings per batch, or with --scenario each agent's changes per batch",
    )
    parser.add_argument(
        "--scenario",
        action="store_true",
        help="with --against: each batch is the landing scenario (--agents agents), CPU per change integrated",
    )


def _cost_run(options: dict[str, Any], log: Log) -> Results:
    if options.get("against"):
        return _side_by_side_run(options, log)

    def run(step: Callable[[str], None]) -> dict[str, Any]:
        return cost_bench.run_cost(
            modes=options["modes"],
            landings=options["landings"],
            agents=options["agents"],
            changes=options["changes"],
            server_workers=options["server_workers"],
            log=_logged_steps(log, step),
        )

    data = _in_steps(run)
    table = cost_bench.format_cost(data)
    return Results(table, data, table)


def _logged_steps(log: Log, step: Callable[[str], None]) -> Log:
    """A benchmark's progress lines (``"what: how far"``), logged and counted as steps by what."""

    def progress(text: str) -> None:
        log(text)
        step(text.split(":")[0])

    return progress


def _side_by_side_run(options: dict[str, Any], log: Log) -> Results:
    checkouts = [Path.cwd(), *options["against"]]
    for checkout in checkouts[1:]:
        if not (checkout / "tests" / "deployment.py").is_file():
            raise BenchmarkFailed(f"{checkout} is not an AgentGit checkout (no tests/deployment.py)")

    def run(step: Callable[[str], None]) -> list[dict[str, Any]]:
        return [
            cost_bench.run_side_by_side(
                checkouts,
                mode=mode,
                rounds=options["rounds"],
                batch=options["batch"],
                agents=options["agents"] if options.get("scenario") else 0,
                server_workers=options["server_workers"],
                log=_logged_steps(log, step),
            )
            for mode in options["modes"]
        ]

    runs = _in_steps(run)
    table = "\n".join(cost_bench.format_side_by_side(data) for data in runs)
    return Results(table, {"side_by_side": runs}, table)


# ------------------------------------------------------------------------------ resolution


def _resolution_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", type=positive, default=50, help="concurrent agents (default: %(default)s)")
    parser.add_argument("--changes", type=positive, default=5, help="changes per agent (default: %(default)s)")
    parser.add_argument(
        "--conflict-every",
        type=positive,
        default=5,
        help="one change in N is a planned conflict (default: %(default)s, 20 %%)",
    )
    parser.add_argument("--server-workers", type=positive, default=1, help="uvicorn --workers (default: %(default)s)")
    parser.add_argument("--url", help="drive this running server instead of starting one (needs --token)")
    parser.add_argument("--token", help="a token with scopes read,write,integrate,admin, for --url")


def _resolution_run(options: dict[str, Any], log: Log) -> Results:
    if options["url"] and not options["token"]:
        raise BenchmarkFailed("--url needs --token")
    agents, changes, every = options["agents"], options["changes"], options["conflict_every"]
    log(f"resolution: {agents} agents x {changes} changes, one in {every} conflicting")
    with _progress("change", agents * changes) as bar:

        def on_change(change: resolution_bench.Change) -> None:
            bar.update(1)

        data = resolution_bench.run_landing_benchmark(
            agents=agents,
            changes=changes,
            conflict_every=every,
            server_workers=options["server_workers"],
            url=options["url"],
            token=options["token"] or "",
            on_change=on_change,
        )
    table = resolution_bench.format_landing(data)
    return Results(table, data, table, "\n".join(data["failures"]))


# ------------------------------------------------------------------------------ web


def _web_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--files", type=positive, default=web_bench.DEFAULT_FILES, help="files of the big repository")
    parser.add_argument(
        "--changesets", type=positive, default=web_bench.DEFAULT_COMMITS, help="its changesets after the import"
    )
    parser.add_argument("--samples", type=positive, default=web_bench.DEFAULT_SAMPLES, help="requests per page")


def _web_run(options: dict[str, Any], log: Log) -> Results:
    run = _in_steps(
        lambda step: web_bench.run_web_benchmark(
            options["files"], options["changesets"], samples=options["samples"], on_step=step
        )
    )
    table = web_bench.format_web(run)
    failures = "query counts grow with the repository: " + ", ".join(run.growing) if run.growing else ""
    return Results(table, web_bench.web_json(run), table, failures)


# ------------------------------------------------------------------------------ events


def _events_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--modes", type=choices(MODES), default=list(MODES), help="embedded and/or production (default: both)"
    )
    parser.add_argument(
        "--subscribers",
        type=numbers(1, "subscribers"),
        default=[1, 100, 1000],
        help="subscriber counts, half SSE and half WebSocket (default: 1,100,1000)",
    )
    parser.add_argument("--writers", type=positive, default=16, help="writers, each on its own stream")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds the writers write per row")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds 100 idle subscribers are measured")
    parser.add_argument("--server-workers", type=positive, default=cycle.DEFAULT_SERVER_WORKERS)
    parser.add_argument(
        "--transport-pushes",
        type=int,
        default=250,
        help="pushes sent through each relay transport candidate alone, 50 a second (0: skip them)",
    )


def _events_run(options: dict[str, Any], log: Log) -> Results:
    data = events_bench.run_events_benchmark(
        modes=options["modes"],
        subscribers=options["subscribers"],
        writers=options["writers"],
        duration_s=options["duration"],
        idle_s=options["idle"],
        server_workers=options["server_workers"],
        log=log,
    )
    table = events_bench.format_report(data)
    if options["transport_pushes"] > 0:
        data["transports"] = relay_transports.run_candidates(
            listeners=options["server_workers"], pushes=options["transport_pushes"], rate=50, idle_s=3, log=log
        )
        table += "\n" + relay_transports.format_candidates(data["transports"])
    failures = [
        f"{row['mode']} {row['subscribers']}: {row['problems']}" for row in data["rows"] if not row["exactly_once"]
    ]
    return Results(table, data, table, failures="\n".join(failures))


# ------------------------------------------------------------------------------ load


def _load_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenarios",
        type=choices(load.SCENARIOS),
        default=list(load.SCENARIOS),
        help=f"comma-separated, of: {', '.join(load.SCENARIOS)} (default: all)",
    )
    parser.add_argument("--profile", choices=tuple(load.PROFILES), default="full", help="full (default) or smoke")
    parser.add_argument("--workers", type=positive, help="closed-loop writers (default: the profile's, 16 or 4)")
    parser.add_argument("--duration-secs", type=float, help="seconds per scenario (default: the profile's, 20 or 3)")
    parser.add_argument(
        "--backend",
        type=choices(tuple(load.BACKENDS)),
        default=["sqlite"],
        help="sqlite (embedded: uvicorn, SQLite, Celery eager) and/or postgres (PostgreSQL, Redis, celery "
        "workers); comma-separated (default: sqlite)",
    )
    parser.add_argument("--data-parent", help="where the servers' data directories are made (default: the temp dir)")
    parser.add_argument(
        "--plot", metavar="FILE.svg", help="write an SVG of throughput and p99, ours beside the reference"
    )
    parser.add_argument("--from-json", metavar="FILE", help="report a saved --json run instead of running")


def _load_run(options: dict[str, Any], log: Log) -> Results:
    if options["from_json"]:
        with open(options["from_json"]) as file:
            data = json.load(file)
    else:
        profile = load.profile_with(options["profile"], options["workers"], options["duration_secs"])
        scenarios, backends = options["scenarios"], options["backend"]
        with _progress("scenario", len(scenarios) * len(backends)) as bar:

            def on_scenario(name: str) -> None:
                bar.set_description(name)
                bar.update(1)

            data = load.run_load(
                scenarios=scenarios,
                backends=backends,
                profile=profile,
                profile_name=options["profile"],
                data_parent=options["data_parent"],
                log=log,
                on_scenario=on_scenario,
            )
    if options["plot"] and not data["problems"]:  # as --json: no result file of a failed run
        with open(options["plot"], "w") as file:
            file.write(load_report.load_svg(data))
    return Results(load_report.format_load(data), data, load_report.load_markdown(data), "\n".join(data["problems"]))


#: Every suite, by subcommand name, in the order ``--help`` lists them.
# ------------------------------------------------------------------------------ search


def _search_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--files", type=positive, default=search_bench.DEFAULT_FILES, help="(issue 37: 100000)")
    parser.add_argument("--landings", type=positive, default=search_bench.DEFAULT_LANDINGS, help="(issue 37: 1000)")
    parser.add_argument("--streams", type=positive, default=search_bench.DEFAULT_STREAMS, help="(issue 37: 50)")
    parser.add_argument(
        "--patterns", type=positive, default=search_bench.DEFAULT_PATTERNS, help="exactness: generated patterns"
    )
    parser.add_argument(
        "--repo",
        help="a real repository (a git directory, copied first) instead of the generated corpus, e.g. "
        "/work/.mirror/git+git/repo; --files, --landings and --streams do not apply",
    )


def _search_run(options: dict[str, Any], log: Log) -> Results:
    run = search_bench.run_search_benchmark(
        options["files"], options["landings"], options["streams"], options["patterns"], log=log, source=options["repo"]
    )
    table = search_bench.format_search(run)
    failures = "\n".join(run.differences)
    return Results(table, search_bench.to_json(run), table, failures)


SUITES: dict[str, Suite] = {
    suite.name: suite
    for suite in (
        Suite(
            "engine",
            "the engine's hot paths by repository size, beside the git binary doing the same work",
            _engine_arguments,
            _engine_run,
        ),
        Suite(
            "candidates",
            "the libraries the engine could have used (docs/adr/0001)",
            _candidates_arguments,
            _candidates_run,
        ),
        Suite(
            "cycle",
            "the agent's cycle per second over HTTP, against real processes it starts (or --url)",
            _cycle_arguments,
            _cycle_run,
        ),
        Suite(
            "events",
            "event fan-out: delivery lag for 1, 100 and 1000 subscribers while writers integrate, both modes",
            _events_arguments,
            _events_run,
        ),
        Suite(
            "search",
            "code search at any revision beside git grep and rg: latency, indexing, size, exactness (issue 37)",
            _search_arguments,
            _search_run,
        ),
        Suite(
            "history",
            "log and ancestry reads over long histories, with and without the derived data; with --source, a "
            "real repository imported and served beside git and cgit (issue 35)",
            _history_arguments,
            _history_run,
        ),
        Suite(
            "git",
            "stock git through the server (clone, fetch, ls-refs, push) beside git on the repository directory",
            _git_arguments,
            _git_run,
        ),
        Suite(
            "refs",
            "many streams in one repository: one push of N branches, the listings, reads, landings and "
            "maintenance at each size, beside git's own (issue 25)",
            _refs_arguments,
            _refs_run,
        ),
        Suite(
            "repos",
            "many repositories: make serve's start steps and the idle server's CPU with each count, "
            "against the smallest (issue 25)",
            _repos_arguments,
            _repos_run,
        ),
        Suite(
            "landing",
            "requests and bytes per landing of a two-file change: the separate endpoints against one call",
            _landing_arguments,
            _landing_run,
        ),
        Suite(
            "policy",
            "server CPU a landing's policy judgment adds (approvals and CODEOWNERS) on a big repository (issue 23)",
            _policy_arguments,
            _policy_run,
        ),
        Suite(
            "cost",
            "fsyncs, SQL statements and server CPU (in machine probes) per one-file landing, sequential "
            "and under the 50-agent landing scenario, embedded and production",
            _cost_arguments,
            _cost_run,
        ),
        Suite(
            "resolution",
            "agents landing on one stream with planned conflicts, each resolved in one call (issue 11)",
            _resolution_arguments,
            _resolution_run,
        ),
        Suite(
            "load",
            "the server under many clients, scenario by scenario, beside the reference (issue 13)",
            _load_arguments,
            _load_run,
        ),
        Suite(
            "web",
            "server time and queries of the web UI's main pages on a big and a small repository",
            _web_arguments,
            _web_run,
        ),
    )
}


def write_results(results: Results, json_path: str | None, markdown_path: str | None) -> None:
    """Write ``--json`` and ``--markdown`` files of a run that passed."""
    if json_path:
        with open(json_path, "w") as file:
            file.write(json.dumps(results.data, indent=2) + "\n")
    if markdown_path:
        with open(markdown_path, "w") as file:
            file.write(results.markdown)
