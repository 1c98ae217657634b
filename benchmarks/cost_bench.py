"""What one landing costs the server: ``agentgit_bench cost`` (issue 25).

Lands one-file changes one after another through ``POST .../streams/main/land`` against a fresh
deployment of real processes (tests/deployment.py: ``embedded`` as ``make serve`` runs it,
``production`` with PostgreSQL, Redis and Celery workers) and counts, per landing, from outside
the server:

* **fsync-family calls** (``fsync``, ``fdatasync``, ``sync_file_range``, ``msync``): ``strace -f``
  attached to every process of the deployment (and, in production, the PostgreSQL backends of
  its database), each call attributed to the file it synced (``strace -y``) and ranked;
* **SQL statements**: the server's own counter (``AGENTGIT_COUNT_STATEMENTS=1`` wraps every
  connection's statements into ``agentgit_sql_statements_total``, read from ``GET /metrics``;
  off by default, when nothing is wrapped), less what the scrape itself ran;
* **server CPU**: user + system time of those processes (``/proc/PID/stat``), in units of the
  machine probe (``load.machine_speed``: the best of five 1M-step pure-Python loops), so runs on
  VMs of different speed compare. CPU is measured in a pass without strace, which slows what it
  traces.

Then the 50-agent landing scenario of ``agentgit_bench load`` (``resolution_bench.run_landing``,
planned conflicts reported and left), once under strace for fsyncs and once without for CPU,
per change integrated (landed or conflicted). Every sequential landing must land as a
fast-forward, and every scenario change land, conflict as planned or be refused retryably (as
``agentgit_bench load`` judges it): anything else fails the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.deployment import MODES, ApiClient, Deployment

from .cycle import DEFAULT_SERVER_WORKERS
from .load import UNLIMITED, machine_speed
from .resolution_bench import LandingRun, run_landing
from .side_by_side import cpu_seconds

Log = Callable[[str], None]

#: The system calls that make data durable.
FSYNC_CALLS = ("fsync", "fdatasync", "sync_file_range", "msync")
#: Landings before measuring: the first ones create directories, connections and caches.
WARM_UP = 3
_STATEMENTS = "agentgit_sql_statements_total"


# ------------------------------------------------------------------------------ processes


def database_backends(deployment: Deployment) -> list[int]:
    """The PostgreSQL backend processes connected to the deployment's database (production)."""
    if deployment.database is None:
        return []
    rows = deployment.database.query(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (deployment.database.name,)
    )
    return [pid for (pid,) in rows]


def deployment_pids(deployment: Deployment) -> list[int]:
    """Every live process of the deployment: servers, workers, their database backends."""
    pids = [pid for process in deployment.processes if process.alive for pid in process.group_pids()]
    return pids + database_backends(deployment)


class CpuMeter:
    """CPU of the deployment's processes between :meth:`start` and :meth:`stop`, split by kind.

    A process that starts meanwhile (a new database backend, git) counts from zero; one that
    ends meanwhile is lost (its group leader reaps git's children into cutime, which counts).
    """

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment

    def _sample(self) -> dict[str, dict[int, float]]:
        servers = {
            pid: cpu_seconds(pid)
            for process in self.deployment.processes
            if process.alive
            for pid in process.group_pids()
        }
        database = {pid: cpu_seconds(pid) for pid in database_backends(self.deployment)}
        return {"server": servers, "database": database}

    def start(self) -> None:
        self._before = self._sample()

    def stop(self) -> dict[str, float]:
        after = self._sample()
        return {
            kind: sum(seconds - self._before[kind].get(pid, 0.0) for pid, seconds in after[kind].items())
            for kind in after
        }


# ------------------------------------------------------------------------------ strace


def file_kind(path: str, data_dir: str) -> str:
    """What an fsynced file is, with the run's own names folded: the data directory, object ids,
    temporary names."""
    path = path.replace(data_dir, "DATA")
    path = re.sub(r"/repos/[^/]+\.git", "/repos/REPO.git", path)
    path = re.sub(r"/objects/[0-9a-f]{2}(/|$)", r"/objects/XX\1", path)
    path = re.sub(r"(tmp_\w+?_)\w+$", r"\1*", path)
    path = re.sub(r"pack-[0-9a-f]{40}", "pack-*", path)
    path = re.sub(r"/objects/XX/[0-9a-f]{38}$", "/objects/XX/OBJECT", path)
    if path.startswith("/") and "DATA" not in path:  # PostgreSQL's files (WAL segments are hex)
        path = re.sub(r"[0-9A-F]{8,}|\d+", "N", path)
    return path


_CALL = re.compile(r"^(?:\[pid\s+)?(\d+)\]?\s+(\w+)\((\d+)(?:<([^>]*)>)?")


def parse_strace(text: str, data_dir: str) -> Counter[str]:
    """``strace -f -y`` output: how many fsync-family calls per (call, file kind)."""
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        if "resumed>" in line:  # the second half of an interrupted call, counted at its start
            continue
        match = _CALL.match(line)
        if match and match.group(2) in FSYNC_CALLS:
            counts[f"{match.group(2)} {file_kind(match.group(4) or '?', data_dir)}"] += 1
    return counts


class Strace:
    """``strace -f -y -e trace=fsync,...`` attached to processes until :meth:`stop`."""

    def __init__(self, pids: list[int], scratch: Path) -> None:
        self.output = scratch / f"strace-{time.monotonic_ns()}.txt"
        argv = ["strace", "-f", "-qq", "-y", "-e", f"trace={','.join(FSYNC_CALLS)}", "-o", str(self.output)]
        for pid in pids:
            argv += ["-p", str(pid)]
        self.pids = pids
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while not all(self._traced(pid) for pid in pids):  # attached: the tracer shows in /proc
            if self.process.poll() is not None:
                raise RuntimeError(f"strace exited: {self.process.stderr.read().decode()}")  # type: ignore[union-attr]
            if time.monotonic() > deadline:
                raise RuntimeError("strace did not attach within 20 s")
            time.sleep(0.05)

    @staticmethod
    def _traced(pid: int) -> bool:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return True  # gone: nothing to wait for
        return any(line.startswith("TracerPid:") and line.split()[1] != "0" for line in status.splitlines())

    def stop(self, data_dir: str) -> Counter[str]:
        """Detach (strace's SIGINT) and count the calls it saw."""
        self.process.send_signal(signal.SIGINT)
        self.process.wait(timeout=30)
        counts = parse_strace(self.output.read_text(), data_dir)
        self.output.unlink()
        return counts


# ------------------------------------------------------------------------------ the landings


def statements_so_far(url: str) -> int:
    """The server's statement counter (every process), from ``GET /metrics``."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    for line in text.splitlines():
        if line.startswith(_STATEMENTS + " ") or line.startswith(_STATEMENTS + "{"):
            return int(float(line.rsplit(" ", 1)[1]))
    raise AssertionError(f"{_STATEMENTS} is not in /metrics: is AGENTGIT_COUNT_STATEMENTS on?")


class Lander:
    """One-file changes landed on ``main`` one after another through the one-call endpoint."""

    def __init__(self, url: str, token: str, repo: str) -> None:
        self.http = httpx.Client(base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=120)
        self.repo = repo
        self.landed = 0
        response = self.http.post("/repos", json={"name": repo})
        assert response.status_code == 201, response.text

    def land(self, count: int) -> None:
        for _ in range(count):
            n = self.landed
            body = {"message": f"change {n}", "operations": [{"op": "write", "path": f"f{n}.txt", "content": f"{n}\n"}]}
            response = self.http.post(f"/repos/{self.repo}/streams/main/land", json=body)
            assert response.status_code == 200, f"landing {n}: {response.status_code} {response.text}"
            outcome = response.json()
            assert outcome["outcome"] == "fast_forward", f"landing {n}: {outcome}"
            self.landed += 1

    def close(self) -> None:
        self.http.close()


def _sequential(deployment: Deployment, token: str, landings: int, scratch: Path, log: Log) -> dict[str, Any]:
    """Per landing: statements and CPU (one pass), fsyncs (a second pass, under strace)."""
    url, data_dir = deployment.url, str(deployment.data_dir)
    lander = Lander(url, token, f"cost-{int(time.time() * 1000)}")
    try:
        lander.land(WARM_UP)
        first = statements_so_far(url)
        scrape = statements_so_far(url) - first  # what one scrape runs
        meter = CpuMeter(deployment)
        meter.start()
        lander.land(landings)
        time.sleep(0.2)  # anything the last landing left to finish after its answer
        cpu = meter.stop()
        statements = statements_so_far(url) - first - 2 * scrape
        log(f"{deployment.mode}: {landings} landings, CPU and statements measured")
        trace = Strace(deployment_pids(deployment), scratch)
        lander.land(landings)
        time.sleep(0.2)
        fsyncs = trace.stop(data_dir)
        log(f"{deployment.mode}: {landings} landings under strace")
        with ApiClient(url, token) as client:
            history = client.history(lander.repo, "main")
        expected = WARM_UP + 2 * landings
        assert len(history) == expected, f"main has {len(history)} changesets, not {expected}"
    finally:
        lander.close()
    return {
        "landings": landings,
        "statements": statements / landings,
        "cpu_s": {kind: seconds / landings for kind, seconds in cpu.items()},
        "fsyncs": sum(fsyncs.values()) / landings,
        "fsyncs_by_file": {name: count / landings for name, count in fsyncs.most_common()},
    }


def _scenario(deployment: Deployment, token: str, agents: int, changes: int, scratch: Path, log: Log) -> dict[str, Any]:
    """The landing scenario twice: CPU per change integrated, then fsyncs under strace."""
    meter = CpuMeter(deployment)
    meter.start()
    plain = run_landing(deployment.url, token, agents=agents, changes=changes, resolve=False)
    cpu = meter.stop()
    log(f"{deployment.mode}: {agents} agents x {changes} changes, CPU measured")
    trace = Strace(deployment_pids(deployment), scratch)
    traced = run_landing(deployment.url, token, agents=agents, changes=changes, resolve=False)
    time.sleep(0.2)
    fsyncs = trace.stop(str(deployment.data_dir))
    log(f"{deployment.mode}: {agents} agents x {changes} changes under strace")
    integrated, traced_integrated = _integrated(plain), _integrated(traced)
    return {
        "agents": agents,
        "changes": agents * changes,
        "landed": len(plain.landed),
        "conflicted": len(plain.conflicted),
        "refused_retryably": agents * changes - integrated,
        "cpu_s": {kind: seconds / integrated for kind, seconds in cpu.items()},
        "fsyncs": sum(fsyncs.values()) / traced_integrated,
        "fsyncs_by_file": {name: count / traced_integrated for name, count in fsyncs.most_common()},
    }


_RETRYABLE = re.compile(r"'code': '(unavailable|aborted)'")


def _integrated(run: LandingRun, where: str = "landing scenario") -> int:
    """The changes of a scenario run that were integrated (landed or conflicted), once the run is
    judged as `agentgit_bench load` judges it: a change refused retryably (503 unavailable: the
    SQLite write lock waited for too long on a starved machine; 409 aborted) is counted, any
    other failure or an unplanned conflict fails the run."""
    failed = [c.error for c in run.changes if c.error and not _RETRYABLE.search(c.error)]
    assert not failed, f"{where}: {len(failed)} changes failed: {failed[:3]}"
    wrong = [c for c in run.conflicted if not c.planned_conflict]
    assert not wrong, f"{where}: {len(wrong)} unplanned changes conflicted"
    integrated = len(run.landed) + len(run.conflicted)
    assert integrated, f"{where}: nothing integrated"
    return integrated


def run_cost(
    *,
    modes: list[str],
    landings: int,
    agents: int,
    changes: int,
    server_workers: int = DEFAULT_SERVER_WORKERS,
    celery_workers: int = 2,
    log: Log = lambda text: None,
) -> dict[str, Any]:
    """Every mode's sequential landings and (``agents`` > 0) its landing scenario, with the probe."""
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"mode is one of {MODES}")
    scratch = Path(tempfile.mkdtemp(prefix="agentgit-cost-"))
    probe = {**machine_speed(str(scratch)), "cpu_loop_ms": cpu_probe_ms()}
    log(
        f"machine probe: a 1M-step Python loop {probe['cpu_loop_ms']} ms of CPU ({probe['python_loop_ms']} ms of "
        f"wall time), an fsync {probe['fsync_ms']} ms"
    )
    rows = []
    for mode in modes:
        with Deployment(mode, env={"AGENTGIT_COUNT_STATEMENTS": "1"}) as deployment:
            for _ in range(celery_workers if mode == "production" else 0):
                deployment.start_worker()
            deployment.start_server(workers=server_workers)
            token = deployment.create_token("bench", rate=UNLIMITED, burst=UNLIMITED)
            log(f"{mode}: started ({server_workers} server processes)")
            row: dict[str, Any] = {"mode": mode, "sequential": _sequential(deployment, token, landings, scratch, log)}
            if agents:
                row["scenario"] = _scenario(deployment, token, agents, changes, scratch, log)
            rows.append(row)
    with contextlib.suppress(OSError):
        scratch.rmdir()
    return {"probe": probe, "server_workers": server_workers, "rows": rows}


# ------------------------------------------------------------------------------ the report


def cpu_probe_ms() -> float:
    """The machine probe in CPU time: the best of five 1M-step pure-Python loops, timed by this
    thread's CPU clock, so other people's work on a shared machine does not inflate it (the
    wall-clock probe of ``load.machine_speed`` is reported beside it)."""
    loops = []
    for _ in range(5):
        started = time.thread_time()
        total = 0
        for i in range(1_000_000):
            total += i
        loops.append(time.thread_time() - started)
    return round(min(loops) * 1000, 1)


def _probes(seconds: float, probe: dict[str, float]) -> float:
    return seconds * 1000 / probe["cpu_loop_ms"]


def format_cost(data: dict[str, Any]) -> str:
    """The table: one line per mode and kind of run, then each run's fsyncs by file."""
    probe = data["probe"]
    lines = [
        f"machine probe: a 1M-step Python loop {probe['cpu_loop_ms']} ms of CPU ({probe['python_loop_ms']} ms of "
        f"wall time), an fsync {probe['fsync_ms']} ms; {data['server_workers']} server processes",
        "",
        f"{'mode':<11} {'run':<22} {'fsyncs':>7} {'statements':>11} {'server CPU ms':>14} {'in probes':>10} {'all CPU ms':>11} {'in probes':>10}",
    ]
    for row in data["rows"]:
        runs = [("sequential", row["sequential"])]
        if "scenario" in row:
            runs.append((f"{row['scenario']['agents']} agents", row["scenario"]))
        for name, run in runs:
            server = run["cpu_s"]["server"]
            every = sum(run["cpu_s"].values())
            statements = f"{run['statements']:.1f}" if "statements" in run else "-"
            lines.append(
                f"{row['mode']:<11} {name:<22} {run['fsyncs']:>7.2f} {statements:>11} {server * 1000:>14.1f} "
                f"{_probes(server, probe):>10.3f} {every * 1000:>11.1f} {_probes(every, probe):>10.3f}"
            )
    lines.append("")
    lines.append("fsync-family calls per landing, by file:")
    for row in data["rows"]:
        runs = [("sequential", row["sequential"])] + ([("scenario", row["scenario"])] if "scenario" in row else [])
        for name, run in runs:
            lines.append(f"  {row['mode']} {name}:")
            lines += [f"    {count:6.2f}  {file}" for file, count in run["fsyncs_by_file"].items()]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ side by side


def run_side_by_side(
    checkouts: list[Path],
    *,
    mode: str,
    rounds: int,
    batch: int,
    agents: int = 0,
    server_workers: int = DEFAULT_SERVER_WORKERS,
    log: Log = lambda text: None,
) -> dict[str, Any]:
    """CPU per sequential landing of each checkout, measured at the same time on the same machine;
    with ``agents``, per change of the landing scenario instead (a batch is ``agents`` agents of
    ``batch`` changes each, as ``_scenario`` runs them).

    Each checkout (this one, an earlier commit's worktree) runs a deployment of its own, started
    together (``side_by_side.py`` in each checkout's directory); the landings alternate between
    them in batches of ``batch``, the order reversed every round, so that whatever else the
    machine does falls on each alike: the ratio between checkouts is good where two runs one
    after the other differ by 1.5× (docs/performance.md). The deployments are started in the
    order given for the first half of the rounds and again, in the reverse order, for the second:
    the one started first cost about 10 % more whatever its tree (trees running the same code
    measured 0.85–0.96 of each other when started second), so each checkout takes each place alike."""
    tallies = [_Tally() for _ in checkouts]
    first_half = (rounds + 1) // 2
    indexes = list(range(len(checkouts)))
    for order, numbers in ((indexes, range(first_half)), (indexes[::-1], range(first_half, rounds))):
        if numbers:
            _side_by_side_rounds(
                [(checkouts[i], tallies[i]) for i in order],
                mode=mode,
                rounds=numbers,
                in_all=rounds,
                batch=batch,
                agents=agents,
                server_workers=server_workers,
                log=log,
            )
    return {
        "mode": mode,
        "rounds": rounds,
        "batch": batch,
        "agents": agents,
        "probe": {"cpu_loop_ms": cpu_probe_ms()},
        "checkouts": [
            {
                "checkout": str(checkout),
                "cpu_s": {kind: seconds / tally.done for kind, seconds in tally.cpu.items()},
                "batches_s": tally.batches,
            }
            for checkout, tally in zip(checkouts, tallies, strict=True)
        ],
    }


@dataclass
class _Tally:
    """One checkout's side-by-side totals: CPU by kind of process, per-batch CPU, work done."""

    cpu: Counter[str] = field(default_factory=Counter)
    batches: list[float] = field(default_factory=list)
    done: int = 0


def _side_by_side_rounds(
    started: list[tuple[Path, _Tally]],
    *,
    mode: str,
    rounds: range,
    in_all: int,
    batch: int,
    agents: int,
    server_workers: int,
    log: Log,
) -> None:
    """The ``rounds`` (numbered from 0, of ``in_all``) of :func:`run_side_by_side` with the
    checkouts' deployments started in the order of ``started``, each adding to its tally."""
    script = Path(__file__).with_name("side_by_side.py")
    children: list[dict[str, Any]] = []
    try:
        for checkout, tally in started:
            process = subprocess.Popen(
                [sys.executable, str(script), mode, str(server_workers)],
                cwd=checkout,
                env={**os.environ, "PYTHONPATH": str(checkout)},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            up = json.loads(process.stdout.readline() or "null")  # type: ignore[union-attr]
            if up is None:
                raise RuntimeError(f"{checkout}: the deployment did not start")
            lander = Lander(up["url"], up["token"], f"side-{int(time.time() * 1000)}")
            children.append({"checkout": checkout, "process": process, "lander": lander, "tally": tally, **up})
            log(f"{checkout}: started ({mode})")
        for child in children:
            child["lander"].land(WARM_UP)
        for round_number in rounds:
            for child in children if round_number % 2 == 0 else children[::-1]:
                before = _ask(child["process"])
                if agents:
                    run = run_landing(child["url"], child["token"], agents=agents, changes=batch, resolve=False)
                    done = _integrated(run, str(child["checkout"]))
                else:
                    child["lander"].land(batch)
                    done = batch
                time.sleep(0.2)  # anything the last landing left to finish after its answer
                spent = {kind: _spent(before[kind], after) for kind, after in _ask(child["process"]).items()}
                tally = child["tally"]
                tally.cpu.update(spent)
                tally.done += done
                tally.batches.append(sum(spent.values()) / done)
            log(f"round {round_number + 1} of {in_all}")
    finally:
        for child in children:
            child["lander"].close()
            child["process"].stdin.close()  # type: ignore[union-attr]
            child["process"].wait(timeout=120)


def _ask(process: subprocess.Popen) -> dict[str, dict[str, float]]:
    process.stdin.write("cpu\n")  # type: ignore[union-attr]
    process.stdin.flush()  # type: ignore[union-attr]
    return json.loads(process.stdout.readline())  # type: ignore[union-attr]


def _spent(before: dict[str, float], after: dict[str, float]) -> float:
    """CPU between two samples of one kind of process (one that started meanwhile counts from 0)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def format_side_by_side(data: dict[str, Any]) -> str:
    probe = data["probe"]
    first = sum(data["checkouts"][0]["cpu_s"].values())
    lines = [
        f"{data['mode']}: {data['rounds']} rounds of {_batch_of(data)} per checkout, side by side; "
        f"machine probe {probe['cpu_loop_ms']} ms; CPU per {'change' if data.get('agents') else 'landing'}",
        "",
        f"{'checkout':<40} {'server ms':>10} {'database ms':>12} {'all ms':>8} {'in probes':>10} {'vs first':>9}",
    ]
    for row in data["checkouts"]:
        cpu = row["cpu_s"]
        every = sum(cpu.values())
        lines.append(
            f"{row['checkout'][-40:]:<40} {cpu.get('server', 0) * 1000:>10.2f} {cpu.get('database', 0) * 1000:>12.2f} "
            f"{every * 1000:>8.2f} {_probes(every, probe):>10.3f} {every / first if first else 0:>9.2f}"
        )
    return "\n".join(lines) + "\n"


def _batch_of(data: dict[str, Any]) -> str:
    if data.get("agents"):
        return f"{data['agents']} agents x {data['batch']} changes"
    return f"{data['batch']} landings"
