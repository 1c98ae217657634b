"""``manage.py agentgit_bench load``: the server under many clients, scenario by scenario, as the
reference's ``ag-bench load`` measures it (shared/reference/server-under-load.txt).

Every scenario drives real server processes (tests/deployment.py: uvicorn, and for ``postgres``
PostgreSQL, Redis and Celery workers) with real clients, measures throughput and nearest-rank
latency, the server's CPU (its process groups in /proc) and peak RSS, the generator's own CPU
beside it, counts every failure, and checks its invariants: a broken invariant is a *problem*,
and any problem fails the command after the table. The scenarios reuse the machinery that exists:

* ``reads`` and ``saturation``: Debian's ``wrk`` (a native generator: Python clients cannot
  saturate the read path) with :data:`WRK_SCRIPT`, which sends the bearer token and counts statuses;
  ``reads`` runs it on a bare ASGI app under the same uvicorn too (benchmarks/floor_asgi.py);
* ``streams``, ``contention``, ``same-file``, ``big-repo``: the closed-loop writers of
  :func:`benchmarks.cycle.run_writers`;
* ``fanout``: :func:`benchmarks.events_bench.run_fan_out`;
* ``landing``: :func:`benchmarks.resolution_bench.run_landing` (planned conflicts reported, as the peer's),
  twice: on an open main and on a main guarded by one approval, given before integrating;
* ``checks``: :func:`benchmarks.checks_bench.run_checks`: agents landing on a main that requires a
  check, run by the real ``agentgit runner``, in three landing modes;
* ``git`` and ``big-repo``: repositories built by :func:`benchmarks.git_bench.build_source` and
  brought in with ``agentgit_import``;
* ``ratelimit``: threads of this process, one credential hammered, another calling steadily.

The full profile starts a fresh deployment per scenario; ``--profile smoke`` (``make test``)
shares one deployment (restarting the server where a scenario changes its settings) so the whole
run stays near a minute, and checks invariants only. The tables, markdown and plot are
benchmarks/load_report.py. No Django here: the processes it starts import Django.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from tests.deployment import ApiClient, Deployment

from . import cycle
from .checks_bench import CHECK_MODES, CheckRun, run_checks
from .cycle import (
    DEFAULT_SERVER_WORKERS,
    LoadResult,
    machine_cpu_ticks,
    nearest_rank,
    prepare_repository,
    run_writers,
    writer_stream,
)
from .events_bench import run_fan_out
from .git_bench import _git, build_source
from .resolution_bench import SHARED, LandingRun, run_landing

SCENARIOS = (
    "reads", "streams", "contention", "same-file", "fanout", "ratelimit", "saturation", "landing", "checks", "git",
    "big-repo",
)  # fmt: skip
#: ``--backend``: the deployment mode of tests/deployment.py each one is.
BACKENDS = {"sqlite": "embedded", "postgres": "production"}
#: The rate-limit scenario's bucket (the reference's): 50 a second, a burst of 100, within 1 %.
RATE, BURST, RATE_TOLERANCE = 50.0, 100, 0.01
#: Every other credential's rate and burst: never the limit.
UNLIMITED = 1_000_000
SHARED_FILE = "shared.txt"

Log = Callable[[str], None]


@dataclass(frozen=True)
class Profile:
    """The sizes of a run; ``--workers`` and ``--duration-secs`` override theirs."""

    duration_s: float
    writers: int
    landing_agents: tuple[int, ...]
    landing_changes: int
    git_files: int
    clones: int
    big_files: int
    small_files: int
    subscribers: int
    server_workers: int
    #: A fresh deployment for each scenario (else one shared, for speed).
    fresh: bool
    #: Imported repositories are maintained (packed, indexed) as served ones are, before the run.
    maintain: bool
    #: The checks scenario: agents, changes each, and the seconds the required check takes.
    checks_agents: int
    checks_changes: int
    check_s: float


PROFILES = {
    "full": Profile(
        20, 16, (50, 100), 5, 10_000, 8, 100_000, 1_000, 100, DEFAULT_SERVER_WORKERS, True, True, 50, 5, 2.0
    ),
    "smoke": Profile(3, 4, (4,), 5, 300, 4, 1_000, 100, 10, 1, False, False, 4, 3, 0.2),
}


@dataclass
class Row:
    """One scenario's figures. ``per_s`` counts ``unit`` (what completed, as the scenario defines it)."""

    scenario: str
    backend: str
    clients: int
    seconds: float
    unit: str
    count: int
    latency_of: str
    latency_ms: dict[str, float | None]
    failures: dict[str, int] = field(default_factory=dict)
    server_cpu_s: float | None = None
    generator_cpu_s: float | None = None
    peak_rss_mib: float | None = None
    #: Share of all the machine's CPUs busy meanwhile (0-1): ours and everything else on it.
    machine_busy: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def per_s(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "backend": self.backend,
            "clients": self.clients,
            "seconds": round(self.seconds, 2),
            "unit": self.unit,
            "count": self.count,
            "per_s": round(self.per_s, 1),
            "latency_of": self.latency_of,
            "latency_ms": {k: None if v is None else round(v, 2) for k, v in self.latency_ms.items()},
            "failures": self.failures,
            "server_cpu_s": _round(self.server_cpu_s),
            "server_cores": _round(self.server_cpu_s / self.seconds if self.server_cpu_s and self.seconds else None),
            "generator_cpu_s": _round(self.generator_cpu_s),
            "generator_cores": _round(
                self.generator_cpu_s / self.seconds if self.generator_cpu_s and self.seconds else None
            ),
            "peak_rss_mib": _round(self.peak_rss_mib),
            "machine_busy": _round(self.machine_busy),
            "details": self.details,
            "problems": self.problems,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def percentiles(values_ms: list[float]) -> dict[str, float | None]:
    """Nearest-rank p50/p90/p99 and the max of latencies (a reported figure is one that happened)."""
    values = sorted(values_ms)
    return {
        "p50": nearest_rank(values, 50),
        "p90": nearest_rank(values, 90),
        "p99": nearest_rank(values, 99),
        "max": values[-1] if values else None,
    }


# ------------------------------------------------------------------------------ measuring


def generator_cpu_seconds() -> float:
    """CPU of this process (the client threads) and of its reaped children (wrk, git clone, the
    fan-out subscribers' process)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class Window:
    """The server's CPU, its peak RSS (every process of the deployment, sampled every 50 ms), the
    generator's CPU and how busy the whole machine was, from entering to leaving."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.peak_rss = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def _rss(self) -> int:
        return sum(process.rss_bytes() for process in self.deployment.processes if process.alive)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_rss = max(self.peak_rss, self._rss())
            self._stop.wait(0.05)

    def __enter__(self) -> Window:
        self.server_before = self.deployment.cpu_seconds()
        self.generator_before = generator_cpu_seconds()
        self.machine_before = machine_cpu_ticks()
        self.started = time.monotonic()
        self._sampler.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.seconds = time.monotonic() - self.started
        self.server_cpu_s = self.deployment.cpu_seconds() - self.server_before
        self.generator_cpu_s = generator_cpu_seconds() - self.generator_before
        after = machine_cpu_ticks()
        before = self.machine_before
        self.machine_busy = (
            (after[0] - before[0]) / (after[1] - before[1]) if before and after and after[1] > before[1] else None
        )
        self._stop.set()
        self._sampler.join()

    def fill(self, row: Row) -> Row:
        """``row`` with this window's CPU and RSS (where the scenario did not measure its own)."""
        if row.server_cpu_s is None:
            row.server_cpu_s = self.server_cpu_s
        if row.generator_cpu_s is None:
            row.generator_cpu_s = self.generator_cpu_s
        row.peak_rss_mib = self.peak_rss / 2**20
        row.machine_busy = self.machine_busy
        return row


# ------------------------------------------------------------------------------ deployments


class Servers:
    """The deployments the scenarios run on: a fresh one per scenario, or one shared by all
    (the smoke profile), its server restarted when a scenario needs other settings."""

    def __init__(self, backend: str, server_workers: int, fresh: bool, data_parent: str | None) -> None:
        self.mode = BACKENDS[backend]
        self.server_workers, self.fresh, self.data_parent = server_workers, fresh, data_parent
        self._shared: Deployment | None = None
        self._shared_env: dict[str, str] | None = None

    @staticmethod
    def token(deployment: Deployment) -> str:
        """A credential of every scope that is never rate-limited, one per deployment
        (``agentgit_credential create``: each is a Django start, seconds on a loaded machine)."""
        if not deployment.token:
            deployment.token = deployment.create_token("bench", rate=UNLIMITED, burst=UNLIMITED)
        return deployment.token

    def _new(self) -> Deployment:
        deployment = Deployment(self.mode, data_parent=self.data_parent)
        try:
            if self.mode == "production":
                for _ in range(2):  # as the cycle suite's default
                    deployment.start_worker()
        except BaseException:
            deployment.close()
            raise
        return deployment

    @contextlib.contextmanager
    def deployment(self, env: dict[str, str] | None = None) -> Iterator[Deployment]:
        """A deployment whose server runs with ``env`` added to its environment."""
        env = env or {}
        if self.fresh:
            with self._new() as deployment:
                deployment.start_server(workers=self.server_workers, env=env)
                yield deployment
            return
        if self._shared is None:
            self._shared = self._new()
        if self._shared.server is None or self._shared_env != env:
            self._shared.stop_server()
            self._shared.start_server(workers=self.server_workers, env=env)
            self._shared_env = env
        yield self._shared

    def close(self) -> None:
        if self._shared is not None:
            self._shared.close()


@dataclass
class Context:
    """What every scenario gets: the run's sizes, its deployments, where to log, its scratch space."""

    profile: Profile
    backend: str
    servers: Servers
    log: Log
    scratch: Path

    def repo(self, scenario: str) -> str:
        """A repository name of the scenario's own (unique in a shared deployment)."""
        return scenario.replace("-", "")


# ------------------------------------------------------------------------------ wrk

#: wrk's script: the bearer token from the environment (never on a command line), and a count of
#: answers by status, of 503s whose body is not ``unavailable``, printed as one JSON line.
WRK_SCRIPT = r"""
wrk.headers["Authorization"] = "Bearer " .. os.getenv("AGENTGIT_BENCH_TOKEN")
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) statuses = {}; odd_refusals = 0 end
function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  if status == 503 and not string.find(body, '"unavailable"', 1, true) then odd_refusals = odd_refusals + 1 end
end
function done(summary, latency, requests)
  local merged, odd = {}, 0
  for _, thread in ipairs(threads) do
    for status, n in pairs(thread:get("statuses")) do merged[status] = (merged[status] or 0) + n end
    odd = odd + thread:get("odd_refusals")
  end
  local parts = {}
  for status, n in pairs(merged) do table.insert(parts, string.format('"%d": %d', status, n)) end
  local e = summary.errors
  io.write(string.format(
    'AGENTGIT_WRK {"requests": %d, "duration_us": %d, "statuses": {%s}, "odd_refusals": %d, ' ..
    '"socket_errors": %d, "latency_us": {"p50": %d, "p90": %d, "p99": %d, "max": %d}}\n',
    summary.requests, summary.duration, table.concat(parts, ", "), odd,
    e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
"""


def run_wrk(url: str, token: str, *, connections: int, seconds: float, scratch: Path) -> dict[str, Any]:
    """``wrk -t2 -cN`` on one URL for ``seconds``; its summary (latencies: wrk's microsecond
    histogram, by rank)."""
    if shutil.which("wrk") is None:
        raise RuntimeError("wrk is not installed (make wrk)")
    script = scratch / "agentgit.lua"
    script.write_text(WRK_SCRIPT)
    argv = [
        "wrk", "-t2", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "10s",
        "-s", os.fspath(script), url,
    ]  # fmt: skip
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=seconds + 60, env={**os.environ, "AGENTGIT_BENCH_TOKEN": token}
    )
    for line in done.stdout.splitlines():
        if line.startswith("AGENTGIT_WRK "):
            summary: dict[str, Any] = json.loads(line.removeprefix("AGENTGIT_WRK "))
            summary["statuses"] = {int(k): v for k, v in summary["statuses"].items()}
            return summary
    raise RuntimeError(f"wrk printed no summary ({done.returncode}):\n{done.stdout}\n{done.stderr}")


def _wrk_row(scenario: str, backend: str, connections: int, summary: dict[str, Any]) -> Row:
    seconds = summary["duration_us"] / 1e6
    latency = {key: value / 1000 for key, value in summary["latency_us"].items()}
    statuses = summary["statuses"]
    return Row(
        scenario, backend, connections, seconds, "requests", summary["requests"], "request (wrk)", latency,
        details={"statuses": {str(k): v for k, v in sorted(statuses.items())}},
    )  # fmt: skip


def _repo_with_a_head(client: ApiClient, repo: str) -> None:
    client.create_repo(repo)
    base = client.write(repo, None, {"README.md": "load benchmark\n"}, "base")
    client.integrate(repo, client.open_proposal(repo, base)["id"])


# ------------------------------------------------------------------------------ the scenarios


def _wrk_on_a_head(ctx: Context, deployment: Deployment, name: str, connections: int) -> tuple[Row, dict[str, Any]]:
    """wrk with ``connections`` reading the head of a new repository's main; its row and summary."""
    token = ctx.servers.token(deployment)
    repo = ctx.repo(name)
    with ApiClient(deployment.url, token) as client:
        _repo_with_a_head(client, repo)
    with Window(deployment) as window:
        summary = run_wrk(
            f"{deployment.url}/api/v1/repos/{repo}/streams/main",
            token, connections=connections, seconds=ctx.profile.duration_s, scratch=ctx.scratch,
        )  # fmt: skip
    return window.fill(_wrk_row(name, ctx.backend, connections, summary)), summary


#: The ASGI application of the reads scenario's floor (benchmarks/floor_asgi.py).
FLOOR_APPLICATION = "benchmarks.floor_asgi:application"
#: Issue 25's goal: reads at least this share of the floor's throughput, in the same run.
READS_GOAL_OF_FLOOR = 0.20


def reads(ctx: Context) -> list[Row]:
    """32 clients (wrk) reading a stream head: credential check, authorization, one read; then
    the same wrk on a bare ASGI application under the same uvicorn (the floor), in the same run."""
    with ctx.servers.deployment() as deployment:
        row, summary = _wrk_on_a_head(ctx, deployment, "reads", 32)
        floor = _floor(ctx, deployment, 32, row.seconds)
    other = {status: n for status, n in summary["statuses"].items() if status != 200}
    row.failures = {**{f"http_{s}": n for s, n in other.items()}, "socket": summary["socket_errors"]}
    row.failures = {k: v for k, v in row.failures.items() if v}
    if row.failures:
        row.problems.append(f"reads: answers other than 200: {row.failures}")
    if not summary["statuses"].get(200):
        row.problems.append("reads: no request was served")
    if floor.per_s:
        row.details["of_floor"] = round(row.per_s / floor.per_s, 3)
        row.details["goal_of_floor"] = READS_GOAL_OF_FLOOR
    if row.server_cpu_s is not None and row.count:
        row.details["server_cpu_ms_per_read"] = round(1000 * row.server_cpu_s / row.count, 3)
    return [row, floor]


def _floor(ctx: Context, deployment: Deployment, connections: int, seconds: float) -> Row:
    """wrk as :func:`_wrk_on_a_head` runs it, on :data:`FLOOR_APPLICATION` in place of the server
    (which is started again by the next scenario that needs it)."""
    deployment.stop_server()
    try:
        deployment.start_server(workers=ctx.servers.server_workers, application=FLOOR_APPLICATION)
        with Window(deployment) as window:
            summary = run_wrk(
                f"{deployment.url}/api/v1/repos/reads/streams/main", "floor",
                connections=connections, seconds=ctx.profile.duration_s, scratch=ctx.scratch,
            )  # fmt: skip
    finally:
        deployment.stop_server()
    row = window.fill(_wrk_row("reads floor", ctx.backend, connections, summary))
    if row.count and row.server_cpu_s is not None:
        row.details["server_cpu_ms_per_read"] = round(1000 * row.server_cpu_s / row.count, 3)
    return row


def _writers_row(name: str, ctx: Context, result: LoadResult, window: Window, unit: str) -> Row:
    failures: dict[str, int] = {}
    for c in result.failed:
        failures[c.error or "?"] = failures.get(c.error or "?", 0) + 1
    row = Row(
        name, ctx.backend, result.writers, result.elapsed_s, unit, len(result.answered), "whole cycle",
        percentiles([c.total_ms for c in result.answered]), failures, result.cpu_s, result.client_cpu_s,
        details={
            "outcomes": result.outcomes(),
            "integrate_ms": percentiles([c.timings_ms["integrate"] for c in result.answered]),
        },
    )  # fmt: skip
    return window.fill(row)


def _read_back(client: ApiClient, repo: str, result: LoadResult, stream_of: Callable[[int], str]) -> list[str]:
    """Nothing acknowledged lost: each writer's last landed files, read back from its stream."""
    problems = []
    for writer in range(result.writers):
        landed = [c for c in result.cycles if c.writer == writer and c.outcome in ("fast_forward", "merge")]
        if not landed:
            continue
        for path, text in landed[-1].files.items():
            got = client.file(repo, stream_of(writer), path).decode()
            if got != text:
                problems.append(f"writer {writer}: {path} reads {got!r}, its last landing wrote {text!r}")
    return problems


def _outcomes_only(name: str, result: LoadResult, allowed: set[str]) -> list[str]:
    wrong = {k: v for k, v in result.outcomes().items() if not k.startswith("error:") and k not in allowed}
    return [f"{name}: outcomes other than {sorted(allowed)}: {wrong}"] if wrong else []


def _writers(ctx: Context, name: str, scenario: str) -> list[Row]:
    """``streams`` (a stream per writer: fast-forwards) or ``contention`` (all on main, own files)."""
    writers = ctx.profile.writers
    with ctx.servers.deployment() as deployment:
        token = ctx.servers.token(deployment)
        repo = ctx.repo(name)
        with ApiClient(deployment.url, token) as client:
            prepare_repository(client, repo, writers, scenario)
            with Window(deployment) as window:
                result = run_writers(
                    deployment.url, token, repo, writers=writers, scenario=scenario,
                    duration_s=ctx.profile.duration_s, measure_cpu=deployment.cpu_seconds,
                )  # fmt: skip
            row = _writers_row(name, ctx, result, window, "integrations" if scenario == "streams" else "answered")
            stream_of = writer_stream if scenario == "streams" else (lambda writer: "main")
            row.problems += _read_back(client, repo, result, stream_of)
    allowed = {"fast_forward"} if scenario == "streams" else {"fast_forward", "merge"}
    row.problems += _outcomes_only(name, result, allowed)
    return [row]


def streams(ctx: Context) -> list[Row]:
    return _writers(ctx, "streams", "streams")


def contention(ctx: Context) -> list[Row]:
    return _writers(ctx, "contention", "stream")


def _shared_file(writer: int, index: int) -> dict[str, str]:
    return {SHARED_FILE: f"writer {writer} cycle {index}\n"}


def same_file(ctx: Context) -> list[Row]:
    """Every writer changes ``shared.txt`` on the head it read: the first on a head lands, the
    others are told the path conflicts; the file ends as the last landing wrote it."""
    writers = ctx.profile.writers
    with ctx.servers.deployment() as deployment:
        token = ctx.servers.token(deployment)
        repo = ctx.repo("same-file")
        with ApiClient(deployment.url, token) as client:
            prepare_repository(client, repo, writers, "stream")
            with Window(deployment) as window:
                result = run_writers(
                    deployment.url, token, repo, writers=writers, scenario="stream",
                    duration_s=ctx.profile.duration_s, measure_cpu=deployment.cpu_seconds, files=_shared_file,
                )  # fmt: skip
            row = _writers_row("same-file", ctx, result, window, "answered")
            final_head, final_text = client.head(repo), client.file(repo, "main", SHARED_FILE).decode()
    row.problems += _outcomes_only("same-file", result, {"fast_forward", "conflict"})
    unnamed = [c for c in result.answered if c.outcome == "conflict" and c.conflicts != [SHARED_FILE]]
    if unnamed:
        row.problems.append(f"same-file: {len(unnamed)} conflicts not reported as [{SHARED_FILE}]: {unnamed[0]}")
    last = [c for c in result.answered if c.stream_head == final_head and c.outcome == "fast_forward"]
    if last and last[0].files[SHARED_FILE] != final_text:
        row.problems.append(f"same-file: {SHARED_FILE} reads {final_text!r}, its last landing wrote {last[0].files}")
    elif not last and any(c.outcome == "fast_forward" for c in result.answered):
        row.problems.append("same-file: the head of main is no landing the writers were told of")
    return [row]


def fanout(ctx: Context) -> list[Row]:
    """Subscribers (half SSE, half WebSocket) follow a repository while writers integrate: every
    ``stream.integrate`` event to every subscriber once; the lag is receive time - ``created``."""
    subscribers, writers = ctx.profile.subscribers, ctx.profile.writers
    with ctx.servers.deployment() as deployment:
        token = ctx.servers.token(deployment)
        with Window(deployment) as window:
            run = run_fan_out(
                deployment, repo=ctx.repo("fanout"), subscribers=subscribers, writers=writers,
                seconds=ctx.profile.duration_s, token=token,
            )  # fmt: skip
        lags = [
            [1000 * lag for entry_id, lag in entries if isinstance(entry_id, int)]
            for entries in run.seen
        ]  # fmt: skip
        row = Row(
            "fanout", ctx.backend, subscribers, run.seconds, "integrations", run.integrations,
            "event delivery lag", percentiles([lag for one in lags for lag in one]), server_cpu_s=run.server_cpu_s,
            details={
                "subscribers": subscribers,
                "events": len(run.truth),
                "deliveries": sum(len(one) for one in lags),
                "sse_lag_ms": percentiles([lag for one in lags[: run.sse] for lag in one]),
                "websocket_lag_ms": percentiles([lag for one in lags[run.sse :] for lag in one]),
            },
        )  # fmt: skip
        window.fill(row)
    row.problems += run.problems + run.check_exactly_once()
    if run.problems:
        row.failures["writer"] = len(run.problems)
    if not run.truth:
        row.problems.append("fanout: no event to deliver")
    return [row]


def ratelimit(ctx: Context) -> list[Row]:
    """One credential (50/s, burst 100) hammered by 8 closed-loop clients while a second calls
    every 200 ms: the first is admitted what its bucket allows (burst + rate × time, within 1 %)
    and refused ``rate_limited`` otherwise; the second is answered every time."""
    seconds = ctx.profile.duration_s
    with ctx.servers.deployment() as deployment:
        setup_token = steady = ctx.servers.token(deployment)
        hammered = deployment.create_token("hammered", scopes="read", rate=RATE, burst=BURST)
        repo = ctx.repo("ratelimit")
        with ApiClient(deployment.url, setup_token) as client:
            _repo_with_a_head(client, repo)
        path = f"/api/v1/repos/{repo}/streams/main"
        answers: list[list[tuple[float, float, int, str | None]]] = [[] for _ in range(9)]
        gate = threading.Barrier(10)
        deadline: list[float] = [0.0]

        def call(http: httpx.Client, into: list) -> None:
            sent = time.monotonic()
            response = http.get(path)
            code = None if response.status_code == 200 else (response.json().get("error") or {}).get("code")
            into.append((sent, (time.monotonic() - sent) * 1000, response.status_code, code))

        def client_loop(index: int) -> None:
            token, pause = (steady, 0.2) if index == 8 else (hammered, 0.0)
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=deployment.url, headers=headers, timeout=30, trust_env=False) as http:
                gate.wait()
                while time.monotonic() < deadline[0]:
                    call(http, answers[index])
                    if pause:
                        time.sleep(max(0.0, pause - (time.monotonic() - answers[index][-1][0])))

        threads = [threading.Thread(target=client_loop, args=(i,), daemon=True) for i in range(9)]
        for thread in threads:
            thread.start()
        with Window(deployment) as window:
            deadline[0] = time.monotonic() + seconds
            gate.wait()
            for thread in threads:
                thread.join()
    hammer = sorted(answer for one in answers[:8] for answer in one)
    admitted = sum(1 for *_, status, _code in hammer if status == 200)
    allowed = bucket_admits(sorted(sent + ms / 2000 for sent, ms, *_ in hammer), RATE, BURST)
    refusals: dict[str, int] = {}
    for *_, status, code in hammer:
        if status != 200:
            key = f"{status} {code}"
            refusals[key] = refusals.get(key, 0) + 1
    second = answers[8]
    second_ok = sum(1 for *_, status, _code in second if status == 200)
    row = Row(
        "ratelimit", ctx.backend, 9, window.seconds, "requests", len(hammer), "hammered request",
        percentiles([ms for _, ms, *_ in hammer]),
        failures={k: v for k, v in refusals.items() if k != "429 rate_limited"},
        details={
            "admitted": admitted,
            "admitted_per_s": round(admitted / window.seconds, 1),
            "allowed": allowed,
            "burst_plus_rate_x_time": round(BURST + RATE * (hammer[-1][0] - hammer[0][0]), 1),
            "rejected_rate_limited": refusals.get("429 rate_limited", 0),
            "second_answered": f"{second_ok} of {len(second)}",
            "second_ms": percentiles([ms for _, ms, *_ in second]),
        },
    )  # fmt: skip
    window.fill(row)
    # The server took each token somewhere within its request's time, modelled as the middle: the
    # span the bucket refilled over is known to within half the slowest time among the first
    # requests (one a client) and among the last, and as many tokens may differ (a 3 s smoke run
    # on a loaded machine: 238 admitted where the model said 242, with 239.2 = burst + rate × time).
    slowest_first = max((ms for _, ms, *_ in hammer[:8]), default=0.0)
    slowest_last = max((ms for _, ms, *_ in hammer[-8:]), default=0.0)
    uncertain_tokens = RATE * (slowest_first + slowest_last) / 2000
    if abs(admitted - allowed) > max(RATE_TOLERANCE * allowed, uncertain_tokens, 1):
        row.problems.append(
            f"ratelimit: admitted {admitted}, the bucket admits {allowed} "
            f"(within 1 % or {uncertain_tokens:.1f} tokens, the requests' time at the run's ends)"
        )
    if row.failures:
        row.problems.append(f"ratelimit: refusals other than 429 rate_limited: {row.failures}")
    if second_ok != len(second) or not second:
        row.problems.append(f"ratelimit: the second credential was answered {second_ok} of {len(second)} times")
    return [row]


def bucket_admits(arrivals: list[float], rate: float, burst: int) -> int:
    """How many of requests arriving at ``arrivals`` (sorted seconds) a token bucket admits
    (full at the first): burst + rate × time when the clients keep it empty, fewer when they
    cannot (a slow server, a loaded machine)."""
    tokens, last, admitted = float(burst), arrivals[0] if arrivals else 0.0, 0
    for at in arrivals:
        tokens = min(float(burst), tokens + rate * (at - last))
        last = at
        if tokens >= 1 - 1e-9:  # a token refilled in many small steps is still a token
            tokens -= 1
            admitted += 1
    return admitted


def saturation(ctx: Context) -> list[Row]:
    """At most 4 requests at once per server process, 64 readers (wrk): the excess is refused
    ``unavailable`` (503) rather than queued, and the server is ready right after."""
    with ctx.servers.deployment({"AGENTGIT_MAX_CONCURRENT_REQUESTS": "4"}) as deployment:
        row, summary = _wrk_on_a_head(ctx, deployment, "saturation", 64)
        try:
            ready = httpx.get(deployment.url + "/readyz", timeout=5).status_code
        except httpx.HTTPError as error:
            ready = type(error).__name__  # type: ignore[assignment]
    statuses = summary["statuses"]
    row.count = statuses.get(200, 0) + statuses.get(503, 0)
    row.unit = "answered"
    row.details.update(
        {"served": statuses.get(200, 0), "refused_unavailable": statuses.get(503, 0), "ready_after": ready}
    )
    other = {f"http_{s}": n for s, n in statuses.items() if s not in (200, 503)}
    row.failures = {k: v for k, v in {**other, "socket": summary["socket_errors"]}.items() if v}
    if other or summary["odd_refusals"]:
        row.problems.append(f"saturation: refusals other than 503 unavailable: {other}, {summary['odd_refusals']}")
    if summary["socket_errors"]:
        row.problems.append(f"saturation: {summary['socket_errors']} connections failed")
    if ready != 200:
        row.problems.append(f"saturation: /readyz answered {ready} right after")
    if not statuses.get(200):
        row.problems.append("saturation: nothing was served")
    return [row]


def landing(ctx: Context) -> list[Row]:
    """The peer's landing scenario: N agents × changes on main, one change in five a planned
    conflict (it rewrites a line of shared.txt from a stale base), which the server reports with
    its path and the agent leaves (``agentgit_bench resolution`` is the same run with every
    conflict resolved: issue 11). Every other change lands at its first integrate; nothing
    landed is lost (every landed change's file is on main, the last of each agent's read back);
    a planned change either landed (the first to reach the line) or conflicted naming shared.txt
    alone, and shared.txt holds the line of each one that landed. A change that failed is
    counted; unless the server refused it as retryable (``unavailable``, ``aborted``: a busy
    machine), that is a problem too."""
    rows = []
    for agents, guarded in [(agents, guarded) for agents in ctx.profile.landing_agents for guarded in (False, True)]:
        with ctx.servers.deployment() as deployment:
            token = ctx.servers.token(deployment)
            reviewer = None
            if guarded:  # the same run on a main guarded by one approval, given before integrating
                reviewer = deployment.create_token("landing-reviewer", "read,review", rate=UNLIMITED, burst=UNLIMITED)
            with Window(deployment) as window:
                run = run_landing(
                    deployment.url, token, agents=agents, changes=ctx.profile.landing_changes, resolve=False,
                    reviewer_token=reviewer,
                )  # fmt: skip
            with ApiClient(deployment.url, token) as client:
                lost = _landed_changes_lost(client, run)
        summary = run.summary()
        landed = run.landed
        errors: dict[str, int] = {}
        for change in run.changes:
            if change.error:
                code = _error_code(change.error)
                errors[code] = errors.get(code, 0) + 1
        row = Row(
            f"landing {agents}" + (" approvals" if guarded else ""), ctx.backend, agents, run.elapsed_s, "lands",
            len(landed), "change, first call to landed" + (" (less the reviewer's call)" if guarded else ""),
            percentiles([c.elapsed_ms - c.review_ms for c in landed]), errors,
            details={
                "landed": f"{len(landed)} of {len(run.changes)}",
                "conflicted": summary["conflicted"],
                "planned_conflicts": summary["planned_conflicts"],
                "lands_per_min": summary["lands_per_min"],
                # Integrate calls per landed change (a conflicted change's one call is not a land's).
                "attempts_per_land": round(sum(c.attempts for c in landed) / len(landed), 2) if landed else None,
            },
        )  # fmt: skip
        rows.append(window.fill(row))
        row.problems += [f"landing {agents}: {text}" for text in lost]
        final = {k: v for k, v in errors.items() if k not in ("unavailable", "aborted")}
        if final:
            row.problems.append(f"landing {agents}: changes failed other than retryably: {final}; {summary['errors']}")
        row.problems += [
            f"landing {agents}: agent {c.agent} change {c.index} ({'planned' if c.planned_conflict else 'unplanned'})"
            f" conflicted on {c.conflicts}"
            for c in run.conflicted
            if not c.planned_conflict or c.conflicts != [SHARED]
        ]
        planned_landed = sum(1 for c in landed if c.planned_conflict)
        if summary["shared_lines_kept"] != planned_landed:
            row.problems.append(
                f"landing {agents}: {SHARED} holds {summary['shared_lines_kept']} planned lines,"
                f" {planned_landed} planned changes landed"
            )
    return rows


def _error_code(error: str) -> str:
    """The API error code in a failed change's error text (an ApiFailure's), else its first word."""
    match = re.search(r"'code': '([a-z_]+)'", error)
    return match.group(1) if match else error.split(":")[0]


def _landed_changes_lost(client: ApiClient, run: LandingRun) -> list[str]:
    """Each landed change's file missing from main, and each agent's last one read back."""
    lost = []
    for agent in range(run.agents):
        own = [c for c in run.landed if c.agent == agent and not c.planned_conflict]
        if not own:
            continue
        directory = f"agents/{agent:02d}"
        names = {entry["name"] for entry in client.tree(run.repo, "main", directory)}
        lost += [f"{directory}/{c.index}.txt is not on main" for c in own if f"{c.index}.txt" not in names]
        last = own[-1]
        text = client.file(run.repo, "main", f"{directory}/{last.index}.txt").decode()
        if text != f"agent {agent} change {last.index}\n":
            lost.append(f"{directory}/{last.index}.txt reads {text!r}")
    return lost


def _imported(ctx: Context, deployment: Deployment, repos: dict[str, int], writers: int) -> None:
    """Each repository (name: files) built, imported, then all maintained (as served ones are;
    not in the smoke profile: a Django start of seconds), each with a stream per writer at its head."""
    for repo, files in repos.items():
        source = ctx.scratch / f"{repo}.git"
        build_source(source, files)
        deployment.manage("agentgit_import", repo, os.fspath(source), timeout_s=3600)
        shutil.rmtree(source, ignore_errors=True)
    if ctx.profile.maintain:
        deployment.manage("agentgit_maintain", "--force", timeout_s=3600)
    with ApiClient(deployment.url, ctx.servers.token(deployment)) as client:
        for repo in repos:
            head = client.head(repo)
            assert head is not None, f"{repo} was imported without a head"
            for writer in range(writers):
                client.create_stream(repo, writer_stream(writer), head)


def git(ctx: Context) -> list[Row]:
    """Clones of a big repository, 8 at a time over and over, while writers land on their own
    streams of it: every clone has every file of main, every writer's last files read back."""
    files, clones, writers = ctx.profile.git_files, ctx.profile.clones, ctx.profile.writers
    repo = ctx.repo("git")
    with ctx.servers.deployment() as deployment:
        ctx.log(f"git: building and importing a {files}-file repository")
        _imported(ctx, deployment, {repo: files}, writers)
        token = ctx.servers.token(deployment)
        remote = f"http://bench:{token}@{deployment.url.removeprefix('http://')}/git/{repo}.git"
        times_ms: list[float] = []
        broken: list[str] = []
        writes: list[LoadResult] = []
        deadline = time.monotonic() + ctx.profile.duration_s

        def clone_loop(index: int) -> None:
            n = 0
            while not n or time.monotonic() < deadline:
                target = ctx.scratch / f"clone-{index}-{n}"
                started = time.perf_counter()
                try:
                    _git(ctx.scratch, "clone", "-q", "--bare", remote, os.fspath(target))
                    times_ms.append((time.perf_counter() - started) * 1000)
                    names = _git(target, "ls-tree", "-r", "--name-only", "main").stdout.splitlines()
                    if len(names) != files:
                        broken.append(f"clone {index}.{n}: {len(names)} files on main, not {files}")
                except subprocess.CalledProcessError as error:
                    broken.append(f"clone {index}.{n}: {error.stderr.decode(errors='replace')[-300:]}")
                shutil.rmtree(target, ignore_errors=True)
                n += 1

        def write() -> None:
            writes.append(
                run_writers(
                    deployment.url,
                    token,
                    repo,
                    writers=writers,
                    scenario="streams",
                    duration_s=ctx.profile.duration_s,
                )  # fmt: skip
            )

        threads = [threading.Thread(target=clone_loop, args=(i,), daemon=True) for i in range(clones)]
        threads.append(threading.Thread(target=write, daemon=True))
        with Window(deployment) as window:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        with ApiClient(deployment.url, token) as client:
            read_back = _read_back(client, repo, writes[0], writer_stream) if writes else ["git: the writers crashed"]
    written = writes[0] if writes else None
    row = Row(
        "git", ctx.backend, clones, window.seconds, "clones", len(times_ms), f"clone of {files} files",
        percentiles(times_ms), {"clone": len(broken)} if broken else {},
        details={
            "files": files,
            "writers": writers,
            "integrations_per_s": round(written.per_second(), 1) if written else None,
            "writer_failures": len(written.failed) if written else None,
        },
    )  # fmt: skip
    window.fill(row)
    row.problems += broken[:5] + read_back
    return [row]


def big_repo(ctx: Context) -> list[Row]:
    """The streams scenario on a big repository, then on a small one in the same deployment: an
    integration's server CPU on each, and their ratio."""
    writers = ctx.profile.writers
    rows = []
    with ctx.servers.deployment() as deployment:
        sizes = (ctx.profile.big_files, ctx.profile.small_files)
        ctx.log(f"big-repo: building and importing repositories of {' and '.join(map(str, sizes))} files")
        _imported(ctx, deployment, {f"bigrepo{files}": files for files in sizes}, writers)
        token = ctx.servers.token(deployment)
        for files in sizes:
            repo = f"bigrepo{files}"
            with Window(deployment) as window:
                result = run_writers(
                    deployment.url, token, repo, writers=writers, scenario="streams",
                    duration_s=ctx.profile.duration_s, measure_cpu=deployment.cpu_seconds,
                )  # fmt: skip
            row = _writers_row(f"big-repo {files}", ctx, result, window, "integrations")
            with ApiClient(deployment.url, token) as client:
                row.problems += _read_back(client, repo, result, writer_stream)
            row.problems += _outcomes_only(row.scenario, result, {"fast_forward"})
            answered = len(result.answered)
            row.details["files"] = files
            row.details["server_cpu_ms_per_integration"] = (
                round(1000 * row.server_cpu_s / answered, 1) if answered and row.server_cpu_s else None
            )
            rows.append(row)
    big, small = (r.details["server_cpu_ms_per_integration"] for r in rows)
    if small and big:
        rows[0].details["cpu_ratio_to_small"] = round(big / small, 2)
    return rows


def checks(ctx: Context) -> list[Row]:
    """Agents land on a main requiring ``ci/test``, run by ``agentgit runner`` (see
    benchmarks/checks_bench.py), in each landing mode: speculative batching, plain batching and
    one at a time. Its invariants fail the row; the goals (lands/min 10x one at a time, p99 at most
    6 check durations) are reported beside them."""
    runs: list[tuple[str, CheckRun, Window]] = []
    for mode, env in CHECK_MODES.items():
        with ctx.servers.deployment(env) as deployment:
            token = ctx.servers.token(deployment)  # the runner's too (a token of its own: a Django start more)
            with Window(deployment) as window:
                run = run_checks(
                    deployment.url, token, token, repo=f"{ctx.repo('checks')}-{mode.replace(' ', '-')}",
                    agents=ctx.profile.checks_agents, changes=ctx.profile.checks_changes,
                    check_s=ctx.profile.check_s, scratch=ctx.scratch,
                )  # fmt: skip
        runs.append((mode, run, window))
    baseline = runs[-1][1].lands_per_min
    rows = []
    for mode, run, window in runs:
        errors: dict[str, int] = {}
        for change in run.changes:
            if change.error:
                errors[change.error.split(":")[0]] = errors.get(change.error.split(":")[0], 0) + 1
        row = Row(
            f"checks {mode}", ctx.backend, run.agents, run.elapsed_s, "lands", len(run.landed),
            "change, integrate call to landed or refused", percentiles([c.elapsed_ms for c in run.decided]), errors,
            details={
                **run.summary(),
                "x_one_at_a_time": round(run.lands_per_min / baseline, 1) if baseline else None,
                "goal_p99_ms": round(6 * run.check_s * 1000),
            },
        )  # fmt: skip
        rows.append(window.fill(row))
        row.problems += [f"checks {mode}: {problem}" for problem in run.problems]
    return rows


RUNNERS: dict[str, Callable[[Context], list[Row]]] = {
    "reads": reads,
    "streams": streams,
    "contention": contention,
    "same-file": same_file,
    "fanout": fanout,
    "ratelimit": ratelimit,
    "saturation": saturation,
    "landing": landing,
    "checks": checks,
    "git": git,
    "big-repo": big_repo,
}


# ------------------------------------------------------------------------------ the run


def run_load(
    *,
    scenarios: list[str],
    backends: list[str],
    profile: Profile,
    profile_name: str,
    data_parent: str | None = None,
    log: Log = lambda text: None,
    on_scenario: Callable[[str], None] = lambda name: None,
) -> dict[str, Any]:
    """Every scenario on every backend; the report (``rows``, ``problems``, ``conditions``)."""
    conditions = _conditions(profile, profile_name, scenarios, backends, data_parent)
    rows: list[Row] = []
    if not profile.fresh:  # its server restarts with a cap: run it last, restart once
        scenarios = sorted(scenarios, key=lambda name: name == "saturation")
    for backend in backends:
        scratch = Path(tempfile.mkdtemp(prefix="agentgit-load-", dir=data_parent))
        servers = Servers(backend, profile.server_workers, profile.fresh, data_parent)
        try:
            for name in scenarios:
                on_scenario(f"{backend}: {name}")
                ctx = Context(profile, backend, servers, log, scratch)
                started = time.monotonic()
                for row in RUNNERS[name](ctx):
                    rows.append(row)
                    log(_summary_line(row))
                log(f"{backend} {name}: {time.monotonic() - started:.0f} s with its set-up")
        finally:
            servers.close()
            shutil.rmtree(scratch, ignore_errors=True)
    conditions["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return {
        "conditions": conditions,
        "rows": [row.as_dict() for row in rows],
        "problems": [problem for row in rows for problem in row.problems],
    }


def _summary_line(row: Row) -> str:
    p99 = row.latency_ms.get("p99")
    failed = sum(row.failures.values())
    check = "ok" if not row.problems else f"{len(row.problems)} problems"
    p99_text = "-" if p99 is None else f"{p99:.1f} ms"
    return f"{row.backend} {row.scenario}: {row.per_s:.1f} {row.unit}/s, p99 {p99_text}, {failed} failed, {check}"


def profile_with(name: str, workers: int | None, duration_s: float | None) -> Profile:
    """The named profile with ``--workers`` and ``--duration-secs`` applied."""
    profile = PROFILES[name]
    if workers is not None:
        profile = replace(profile, writers=workers)
    if duration_s is not None:
        profile = replace(profile, duration_s=duration_s)
    return profile


def _conditions(
    profile: Profile, name: str, scenarios: list[str], backends: list[str], data_parent: str | None
) -> dict[str, Any]:
    base = cycle.conditions(profile.writers, profile.duration_s)
    wrk = subprocess.run(["wrk", "--version"], capture_output=True, text=True) if shutil.which("wrk") else None
    return {
        **base,
        "profile": name,
        "scenarios": scenarios,
        "backends": backends,
        "server_workers": profile.server_workers,
        "fresh_deployment_per_scenario": profile.fresh,
        "data_parent": data_parent or tempfile.gettempdir(),
        "wrk": (wrk.stdout or wrk.stderr).split(" Copyright", 1)[0].strip() if wrk else None,
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "cpu_model": _cpu_model(),
        **machine_speed(data_parent or tempfile.gettempdir()),
        "kernel": platform.release(),
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def machine_speed(directory: str) -> dict[str, float]:
    """Two probes that tell machines of one name apart (the VMs behind "AMD EPYC" have differed
    2.5× from one session to the next): a fixed pure-Python loop on one core, the best of five,
    and an fsync of a 4 KiB write in ``directory``, the median of twenty."""
    loops = []
    for _ in range(5):
        started = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i
        loops.append(time.perf_counter() - started)
    fd, path = tempfile.mkstemp(prefix="agentgit-fsync-", dir=directory)
    syncs = []
    try:
        for _ in range(20):
            os.write(fd, b"x" * 4096)
            started = time.perf_counter()
            os.fsync(fd)
            syncs.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        os.unlink(path)
    return {"python_loop_ms": round(min(loops) * 1000, 1), "fsync_ms": round(sorted(syncs)[10] * 1000, 2)}


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()
