"""The agent's cycle over real HTTP against real server processes: ``manage.py agentgit_bench cycle``.

A *cycle* is what an agent does to land a change (as in reference/server-under-load.txt): upload
two files, create a changeset of them, open a proposal, integrate it. :func:`run_writers` drives
closed-loop writers from threads — every writer on its own stream, or all on one stream, for a
number of cycles or a duration — against a :class:`~tests.deployment.Deployment` (the test
harness: the very deployments the end-to-end tests check) or a running server, and reports
throughput and latency. The end-to-end tests drive their load with the same writers.

No Django here: the processes it starts import Django, this module does not.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import platform
import secrets
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.deployment import BASE_DIR, ApiClient, ApiFailure, Deployment

SCENARIOS = ("streams", "stream")


# ------------------------------------------------------------------------------ the cycle

#: The steps of a cycle, in order, as timed.
STEPS = ("head", "upload", "changeset", "propose", "integrate")
#: Server processes, as ``make serve`` starts them: two per core.
DEFAULT_SERVER_WORKERS = 2 * (os.cpu_count() or 1)


@dataclass
class Cycle:
    """One cycle of one writer: what it wrote and what the server answered."""

    writer: int
    index: int
    files: dict[str, str]
    changeset: str | None = None
    proposal: int | None = None
    outcome: str | None = None
    stream_head: str | None = None
    error: str | None = None  # an error code (aborted, rate_limited, …) or an exception name
    conflicts: list[str] = field(default_factory=list)  # the paths of a ``conflict`` outcome
    timings_ms: dict[str, float] = field(default_factory=dict)
    total_ms: float = 0.0


@dataclass
class LoadResult:
    scenario: str
    writers: int
    elapsed_s: float
    cycles: list[Cycle]
    #: CPU seconds of the server and worker processes during the run (when measured).
    cpu_s: float | None = None
    #: CPU seconds of this process (the writers: client threads, httpx) during the run.
    client_cpu_s: float | None = None
    #: Share of all the machine's CPUs busy during the run (0–1; PostgreSQL, Redis, anything else too).
    machine_busy: float | None = None

    @property
    def answered(self) -> list[Cycle]:
        return [c for c in self.cycles if c.outcome is not None]

    @property
    def failed(self) -> list[Cycle]:
        return [c for c in self.cycles if c.outcome is None]

    def outcomes(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for cycle in self.cycles:
            key = cycle.outcome or f"error:{cycle.error}"
            counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items()))

    def per_second(self) -> float:
        return len(self.answered) / self.elapsed_s if self.elapsed_s else 0.0

    def percentiles(self, step: str | None) -> dict[str, float | None]:
        """Nearest-rank p50/p99/max (milliseconds) of a step, or of whole cycles (``None``)."""
        values = sorted(
            (c.total_ms if step is None else c.timings_ms[step])
            for c in self.answered
            if step is None or step in c.timings_ms
        )
        return {"p50": nearest_rank(values, 50), "p99": nearest_rank(values, 99), "max": values[-1] if values else None}


def nearest_rank(values: list[float], percent: float) -> float | None:
    """The nearest-rank percentile of sorted ``values`` (a latency that happened)."""
    if not values:
        return None
    rank = max(1, math.ceil(percent / 100 * len(values)))
    return values[rank - 1]


def writer_files(writer: int, index: int) -> dict[str, str]:
    """The two files a writer writes in a cycle: its own, with contents unique to the cycle."""
    return {
        f"w{writer:02d}/a.txt": f"writer {writer} cycle {index} file a\n",
        f"w{writer:02d}/b.txt": f"writer {writer}\ncycle {index}\nfile b\n",
    }


def prepare_repository(client: ApiClient, repo: str, writers: int, scenario: str) -> str:
    """A new repository with one changeset on ``main`` and, for ``streams``, a stream per writer."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario is one of {SCENARIOS}, not {scenario!r}")
    client.create_repo(repo)
    base = client.write(repo, None, {"README.md": "cycle benchmark\n"}, "base")
    client.integrate(repo, client.open_proposal(repo, base)["id"])
    if scenario == "streams":
        for writer in range(writers):
            client.create_stream(repo, writer_stream(writer), base)
    return base


def writer_stream(writer: int) -> str:
    return f"w{writer:02d}"


def run_writers(
    base_url: str,
    token: str | list[str],
    repo: str,
    *,
    writers: int,
    scenario: str,
    cycles: int | None = None,
    duration_s: float | None = None,
    stop_on_error: bool = False,
    measure_cpu: Callable[[], float] | None = None,
    files: Callable[[int, int], dict[str, str]] = writer_files,
) -> LoadResult:
    """Closed-loop writers, one thread and one connection pool each, on a prepared repository.

    ``scenario="stream"``: every writer reads the head of ``main``, writes its own two files on
    it and integrates into ``main`` (a merge when the head moved meanwhile). ``"streams"``: every
    writer integrates into its own stream, on its own previous result (a fast-forward each time).
    Runs ``cycles`` cycles per writer, or until ``duration_s`` has passed. A failed cycle is
    counted (its error code kept) and the writer starts the next one, as the reference's
    generator does; ``stop_on_error`` stops every writer at the first failure instead.
    ``files(writer, index)`` is what a cycle writes (default: the writer's own two files).
    """
    if (cycles is None) == (duration_s is None):
        raise ValueError("give cycles or duration_s")
    tokens = token if isinstance(token, list) else [token]
    results: list[list[Cycle]] = [[] for _ in range(writers)]
    stop = threading.Event()
    start_gate = threading.Barrier(writers + 1)
    deadline_box: list[float] = [math.inf]
    crashed: list[BaseException] = []

    def writer_loop(writer: int) -> None:
        stream = "main" if scenario == "stream" else writer_stream(writer)
        with ApiClient(base_url, tokens[writer % len(tokens)]) as client:
            last = client.head(repo, stream)
            start_gate.wait()
            index = 0
            while not stop.is_set() and (cycles is None or index < cycles) and time.monotonic() < deadline_box[0]:
                cycle = Cycle(writer, index, files(writer, index))
                results[writer].append(cycle)
                try:
                    last = one_cycle(client, repo, stream, cycle, last if scenario == "streams" else None)
                except ApiFailure as failure:
                    cycle.error = failure.code or f"http_{failure.status}"
                except (httpx.HTTPError, TimeoutError) as error:
                    cycle.error = type(error).__name__
                except BaseException as error:  # a bug in the driver: stop everything, report it
                    cycle.error = type(error).__name__
                    crashed.append(error)
                    stop.set()
                if cycle.error is not None and stop_on_error:
                    stop.set()
                index += 1

    threads = [threading.Thread(target=writer_loop, args=(w,), name=f"writer-{w}", daemon=True) for w in range(writers)]
    for thread in threads:
        thread.start()
    start_gate.wait()
    cpu_before = measure_cpu() if measure_cpu else None
    client_before, machine_before = time.process_time(), machine_cpu_ticks()
    started = time.monotonic()
    if duration_s is not None:
        deadline_box[0] = started + duration_s
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    cpu = measure_cpu() - cpu_before if measure_cpu and cpu_before is not None else None
    client_cpu = time.process_time() - client_before
    machine_after = machine_cpu_ticks()
    busy = None
    if machine_before and machine_after and machine_after[1] > machine_before[1]:
        busy = (machine_after[0] - machine_before[0]) / (machine_after[1] - machine_before[1])
    if crashed:
        raise crashed[0]
    return LoadResult(scenario, writers, elapsed, [c for cs in results for c in cs], cpu, client_cpu, busy)


def machine_cpu_ticks() -> tuple[int, int] | None:
    """``(busy, total)`` jiffies of all CPUs since boot (Linux /proc/stat), or None."""
    try:
        fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def one_cycle(client: ApiClient, repo: str, stream: str, cycle: Cycle, parent: str | None) -> str:
    """Head (when not given), two uploads, a changeset, a proposal, the integration; the new head."""
    begin = time.perf_counter()

    def lap(step: str, since: float) -> float:
        now = time.perf_counter()
        cycle.timings_ms[step] = (now - since) * 1000
        return now

    t = begin
    if parent is None:
        parent = client.head(repo, stream)
        t = lap("head", t)
    blobs = {path: client.upload_blob(repo, text.encode()) for path, text in cycle.files.items()}
    t = lap("upload", t)
    operations = [{"op": "write", "path": path, "blob": blob} for path, blob in blobs.items()]
    cycle.changeset = client.create_changeset(
        repo, parent, operations, f"writer {cycle.writer} cycle {cycle.index}", {"agent": f"writer-{cycle.writer}"}
    )["id"]
    t = lap("changeset", t)
    cycle.proposal = client.open_proposal(repo, cycle.changeset, stream)["id"]
    t = lap("propose", t)
    outcome = client.integrate(repo, cycle.proposal)
    lap("integrate", t)
    cycle.total_ms = (time.perf_counter() - begin) * 1000
    cycle.outcome, cycle.stream_head = outcome["outcome"], outcome["stream_head"]
    cycle.conflicts = [conflict["path"] for conflict in outcome.get("conflicts") or []]
    return outcome["stream_head"]


# ------------------------------------------------------------------------------ the benchmark


@dataclass
class BenchRow:
    mode: str
    scenario: str
    result: LoadResult
    setup: str

    def as_dict(self) -> dict[str, Any]:
        r = self.result
        return {
            "mode": self.mode,
            "setup": self.setup,
            "scenario": r.scenario,
            "writers": r.writers,
            "seconds": round(r.elapsed_s, 2),
            "cycles": len(r.answered),
            "cycles_per_s": round(r.per_second(), 1),
            "outcomes": r.outcomes(),
            "failures": len(r.failed),
            "server_cpu_s": None if r.cpu_s is None else round(r.cpu_s, 1),
            "client_cpu_s": None if r.client_cpu_s is None else round(r.client_cpu_s, 1),
            "machine_busy": None if r.machine_busy is None else round(r.machine_busy, 3),
            "latency_ms": {step or "cycle": r.percentiles(step) for step in (*STEPS, None)},
        }


def run_cycle_benchmark(
    *,
    modes: list[str],
    scenarios: list[str],
    writers: int = 16,
    duration_s: float = 15.0,
    server_workers: int = DEFAULT_SERVER_WORKERS,
    celery_workers: int = 2,
    celery_concurrency: int = 1,
    env: dict[str, str] | None = None,
    on_row: Callable[[BenchRow], None] | None = None,
    log: Callable[[str], None] = lambda text: None,
) -> dict[str, Any]:
    """Every scenario in every mode, each on a fresh deployment; the report as a dict.

    ``env`` is added to the environment of every process of the deployments (settings knobs)."""
    rows: list[BenchRow] = []
    for mode in modes:
        for scenario in scenarios:
            log(f"{mode} / {scenario}: starting the deployment")
            with Deployment(mode, env=env) as deployment:
                if mode == "embedded":  # as `make serve` runs it (WORKERS processes)
                    url = deployment.start_server(workers=server_workers)
                    setup = f"uvicorn ×{server_workers}, SQLite, Celery eager"
                else:
                    url = deployment.start_server(workers=server_workers)
                    for _ in range(celery_workers):
                        deployment.start_worker(concurrency=celery_concurrency)
                    setup = (
                        f"uvicorn ×{server_workers}, PostgreSQL, Redis, "
                        f"celery worker ×{celery_workers} (concurrency {celery_concurrency})"
                    )
                token = deployment.create_token("bench", rate=1_000_000, burst=1_000_000)
                with ApiClient(url, token) as client:
                    prepare_repository(client, "bench", writers, scenario)
                log(f"{mode} / {scenario}: {writers} writers for {duration_s:.0f} s")
                result = run_writers(
                    url, token, "bench", writers=writers, scenario=scenario, duration_s=duration_s,
                    measure_cpu=deployment.cpu_seconds,
                )  # fmt: skip
            row = BenchRow(mode, scenario, result, setup)
            rows.append(row)
            if on_row:
                on_row(row)
    report: dict[str, Any] = {"conditions": conditions(writers, duration_s), "rows": [row.as_dict() for row in rows]}
    report["conditions"]["env"] = dict(env or {})
    return report


def run_against(url: str, token: str, *, scenarios: list[str], writers: int, duration_s: float) -> dict[str, Any]:
    """The scenarios against a server that is already running (``--url``), each on a new repository."""
    rows = []
    for scenario in scenarios:
        repo = f"cycle-{scenario}-{secrets.token_hex(4)}"
        with ApiClient(url, token) as client:
            prepare_repository(client, repo, writers, scenario)
        result = run_writers(url, token, repo, writers=writers, scenario=scenario, duration_s=duration_s)
        rows.append(BenchRow("external", scenario, result, url).as_dict())
    return {"conditions": conditions(writers, duration_s), "rows": rows}


def conditions(writers: int, duration_s: float) -> dict[str, Any]:
    commit = ""
    with contextlib.suppress(Exception):
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=BASE_DIR, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    return {
        "writers": writers,
        "duration_s": duration_s,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "commit": commit,
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "client": "threads of the benchmark process, one httpx connection pool per writer, closed loop",
    }


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def format_report(report: dict[str, Any]) -> str:
    """An aligned text table of a report from :func:`run_cycle_benchmark`."""
    header = [
        "mode", "scenario", "writers", "cycles", "cycles/s", "integrated as", "failures",
        "integrate p50/p99 ms", "cycle p50/p99/max ms", "server CPU", "client CPU", "machine busy",
    ]  # fmt: skip
    lines = [header]
    for row in report["rows"]:
        outcomes = ", ".join(
            f"{count} {name}" for name, count in row["outcomes"].items() if not name.startswith("error:")
        )
        errors = [f"{count} {name[6:]}" for name, count in row["outcomes"].items() if name.startswith("error:")]
        integrate, cycle = row["latency_ms"]["integrate"], row["latency_ms"]["cycle"]
        cpu, client_cpu, busy = row["server_cpu_s"], row["client_cpu_s"], row["machine_busy"]
        lines.append(
            [
                row["mode"],
                row["scenario"],
                str(row["writers"]),
                str(row["cycles"]),
                f"{row['cycles_per_s']:.1f}",
                outcomes or "-",
                ", ".join(errors) if errors else "0",
                f"{_ms(integrate['p50'])} / {_ms(integrate['p99'])}",
                f"{_ms(cycle['p50'])} / {_ms(cycle['p99'])} / {_ms(cycle['max'])}",
                "-" if cpu is None else f"{100 * cpu / row['seconds']:.0f} %",
                "-" if client_cpu is None else f"{100 * client_cpu / row['seconds']:.0f} %",
                "-" if busy is None else f"{100 * busy:.0f} %",
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = [
        "Cycle: upload two files, changeset, proposal, integrate (closed loop). "
        f"{report['conditions']['writers']} writers, {report['conditions']['duration_s']:.0f} s per row, "
        f"{report['conditions']['cpu_count']} CPUs, Python {report['conditions']['python']}, "
        f"commit {report['conditions']['commit'] or '?'}; server (server and worker processes) and client "
        "(the writers) CPU in % of one core; machine busy: all CPUs, everything on the machine.",
        "  ".join(text.ljust(width) for text, width in zip(lines[0], widths)).rstrip(),
        "  ".join("-" * width for width in widths),
    ]
    out += ["  ".join(text.ljust(width) for text, width in zip(line, widths)).rstrip() for line in lines[1:]]
    out += [""] + [f"{mode}: {setup}" for mode, setup in sorted({(r["mode"], r["setup"]) for r in report["rows"]})]
    if report["conditions"].get("env"):
        out.append("environment: " + " ".join(f"{k}={v}" for k, v in report["conditions"]["env"].items()))
    return "\n".join(out) + "\n"
