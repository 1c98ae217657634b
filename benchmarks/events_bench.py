"""``events``: the event feeds' fan-out, over real server processes (tests/deployment.py).

One scenario, used by the benchmark and by the acceptance tests (tests/e2e/test_events.py):
``subscribers`` clients (half SSE, half WebSocket) follow one repository with
``?kinds=stream.integrate`` while ``writers`` threads each integrate on a stream of their own
for ``seconds``. The subscribers run in a child process of their own (:func:`subscribe_main`,
one asyncio loop), so the writers' threads and the subscribers' parsing do not share a GIL.
Some subscribers (``resumers``) disconnect half-way and resume from the last id they saw.

:func:`run_fan_out` returns what each subscriber received (ids, with the delivery lag: the
client's receive time minus the event's server timestamp ``created``) beside the truth read
from the outbox afterwards, the writers' integrations per second and the server's CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx

from tests.deployment import ApiClient, Deployment

KINDS = "stream.integrate"


# ------------------------------------------------------------------------------ subscribers


async def _follow_sse(config: dict, index: int, seen: list, stop: asyncio.Event) -> None:
    """One SSE subscriber: reconnects with Last-Event-ID when the stream ends, as EventSource does.

    HTTP/1.1 spoken over a bare asyncio stream, not httpx: the subscribers share one core with
    the servers and the writers, and httpx's per-chunk machinery (anyio, h11, text decoding) cost
    about a millisecond of this process's CPU per event received, which the writers then lacked.
    """
    last = config["after"]
    resumed = index not in config["resumers"]
    host, port = config["url"].removeprefix("http://").split(":")
    path = f"/api/v1/repos/{config['repo']}/events"
    while not stop.is_set():
        query = urlencode({"kinds": KINDS, "timeout": 300})
        request = (
            f"GET {path}?{query} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {config['token']}\r\n"
            f"Last-Event-ID: {last}\r\nAccept: text/event-stream\r\n\r\n"
        )
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(request.encode())
            status = int((await reader.readline()).split()[1])
            while (await reader.readline()) not in (b"\r\n", b""):
                pass  # the headers: uvicorn streams the body chunked
            if status != 200:
                seen.append(("status", status))
                return
            pending = b""
            while not stop.is_set():
                size = int((await reader.readline()).strip() or b"0", 16)
                if size == 0:
                    break  # the stream ended (its timeout): reconnect
                pending += (await reader.readexactly(size + 2))[:-2]
                received = time.time()
                *blocks, pending = pending.split(b"\n\n")
                for block in blocks:
                    if block.startswith(b": too far behind"):
                        seen.append(("behind", block.decode()))
                    elif block.startswith(b"id: "):
                        last = int(block[4 : block.index(b"\n")])
                        seen.append((last, received - _created(block)))
                if not resumed and time.monotonic() > config["resume_at"]:
                    resumed = True
                    break  # disconnect half-way; the loop resumes from `last`
        finally:
            writer.close()


def _created(block: bytes) -> float:
    """The event's server timestamp (``"created":"...Z"`` in its data), as a Unix time."""
    start = block.index(b'"created":"') + 11
    return datetime.fromisoformat(block[start : block.index(b'"', start)].decode()).timestamp()


async def _follow_ws(config: dict, index: int, seen: list, stop: asyncio.Event) -> None:
    """One WebSocket subscriber; reconnects with ?after= the last id it saw."""
    from websockets.asyncio.client import connect

    last = config["after"]
    resumed = index not in config["resumers"]
    base = config["url"].replace("http://", "ws://")
    while not stop.is_set():
        url = f"{base}/ws/repos/{config['repo']}/events?token={config['token']}&kinds={KINDS}&after={last}"
        async with connect(url, open_timeout=30, max_queue=None) as socket:
            try:
                async for text in socket:
                    message = json.loads(text)
                    created = message["data"]["created"]
                    seen.append((message["id"], time.time() - datetime.fromisoformat(created).timestamp()))
                    last = message["id"]
                    if stop.is_set():
                        return
                    if not resumed and time.monotonic() > config["resume_at"]:
                        resumed = True
                        break
            except Exception as closed:  # a close with a code: the scenario records it
                seen.append(("closed", str(closed)))
                return
            if socket.close_code not in (None, 1000) and not stop.is_set():
                seen.append(("closed", f"{socket.close_code} {socket.close_reason}"))
                return


async def _subscribe(config: dict) -> dict:
    stop = asyncio.Event()
    seen: list[list] = [[] for _ in range(config["sse"] + config["ws"])]
    tasks = [asyncio.ensure_future(_follow_sse(config, index, seen[index], stop)) for index in range(config["sse"])]
    tasks += [
        asyncio.ensure_future(_follow_ws(config, index, seen[index], stop))
        for index in range(config["sse"], config["sse"] + config["ws"])
    ]
    await asyncio.sleep(1.0)  # every subscriber connected (they catch up from `after`)
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    line = await loop.run_in_executor(None, sys.stdin.readline)  # the last id to wait for
    until = int(line)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(
        any(entry[0] == until for entry in entries[-5:]) or (entries and isinstance(entries[-1][0], str))
        for entries in seen
    ):
        await asyncio.sleep(0.05)
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"seen": seen}


def subscribe_main() -> None:
    """The subscribers' process: config as JSON on argv[2]; prints ``ready``, reads the last id
    to wait for on stdin, then prints what every subscriber received as one JSON line."""
    config = json.loads(sys.argv[2])
    config["resume_at"] = time.monotonic() + config["resume_after_s"]
    config["resumers"] = set(config["resumers"])
    print(json.dumps(asyncio.run(_subscribe(config))), flush=True)


# ------------------------------------------------------------------------------ the scenario


@dataclass
class FanOut:
    """What one run measured."""

    truth: list[int]
    seen: list[list]
    sse: int
    integrations: int
    seconds: float
    server_cpu_s: float
    problems: list[str] = field(default_factory=list)
    #: CPU the subscribers' own process used meanwhile (it shares the machine with the servers).
    client_cpu_s: float = 0.0

    @property
    def lags_ms(self) -> list[float]:
        return sorted(1000 * lag for entries in self.seen for entry_id, lag in entries if isinstance(entry_id, int))

    def check_exactly_once(self) -> list[str]:
        """Every subscriber saw every event of the truth once, in order: what is wrong, if anything."""
        problems = []
        for index, entries in enumerate(self.seen):
            ids = [entry[0] for entry in entries if isinstance(entry[0], int)]
            other = [entry for entry in entries if not isinstance(entry[0], int)]
            if ids != self.truth:
                missing = sorted(set(self.truth) - set(ids))[:5]
                twice = len(ids) - len(set(ids))
                problems.append(
                    f"subscriber {index} ({'sse' if index < self.sse else 'ws'}): {len(ids)} of {len(self.truth)}"
                    f" events, missing {missing}, {twice} twice, in order: {ids == sorted(ids)}; {other[:2]}"
                )
        return problems


def percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(share * len(values)))]


def _writer(url: str, token: str, repo: str, index: int, deadline: float, counts: list[int], errors: list) -> None:
    stream = f"w{index}"
    with ApiClient(url, token) as api:
        try:
            head = api.head(repo)
            api.create_stream(repo, stream, head)
            n = 0
            while time.monotonic() < deadline:
                n += 1
                head = api.write(repo, head, {f"{stream}/f{n % 10}.txt": f"{n}\n"})
                proposal = api.open_proposal(repo, head, stream=stream)
                outcome = api.integrate(repo, proposal["id"])
                head = outcome["stream_head"]
                counts[index] += 1
        except Exception as error:  # reported by the scenario
            errors.append(f"writer {index}: {error}")


def truth(url: str, token: str, repo: str, after: int) -> list[int]:
    """The ids of the repository's stream.integrate events after ``after``, from the outbox."""
    params: dict[str, Any] = {"kinds": KINDS, "timeout": 0.5, "after": after}
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, timeout=120, trust_env=False) as http:
        body = http.get(f"/api/v1/repos/{repo}/events", params=params, headers=headers).text
    return [int(line[4:]) for line in body.splitlines() if line.startswith("id: ")]


def run_fan_out(
    deployment: Deployment,
    *,
    repo: str,
    subscribers: int,
    writers: int,
    seconds: float,
    resumers: int = 0,
    token: str | None = None,
) -> FanOut:
    """Writers integrate for ``seconds`` while ``subscribers`` follow ``repo`` (created if new)."""
    token = token or deployment.token
    with ApiClient(deployment.url, token) as api:
        with contextlib.suppress(Exception):
            api.create_repo(repo)
        after = max(truth(deployment.url, token, repo, 0) or [0])
    sse = subscribers // 2
    config = {
        "url": deployment.url,
        "token": token,
        "repo": repo,
        "sse": sse,
        "ws": subscribers - sse,
        "after": after,
        "resume_after_s": seconds / 2 + 1.0,
        "resumers": random.Random(subscribers).sample(range(subscribers), resumers) if resumers else [],
    }
    child = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.events_bench", "subscribe", json.dumps(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    try:
        if subscribers:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        counts = [0] * writers
        errors: list[str] = []
        cpu_before = deployment.cpu_seconds()
        client_before = _cpu_seconds(child.pid)
        started = time.monotonic()
        threads = [
            threading.Thread(
                target=_writer, args=(deployment.url, token, repo, i, started + seconds, counts, errors), daemon=True
            )
            for i in range(writers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if not writers:  # idle subscribers: what they cost by themselves
            time.sleep(seconds)
        elapsed = time.monotonic() - started
        cpu = deployment.cpu_seconds() - cpu_before
        client_cpu = _cpu_seconds(child.pid) - client_before
        ids = truth(deployment.url, token, repo, after)
        out, _ = child.communicate(f"{ids[-1] if ids else after}\n", timeout=120)
        seen = json.loads(out.strip().splitlines()[-1])["seen"] if subscribers else []
    finally:
        if child.poll() is None:
            child.kill()
    return FanOut(ids, seen, sse, sum(counts), elapsed, cpu, errors, client_cpu)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of one live process so far (Linux /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------ the benchmark

#: The reference's delivery lag p99 at 100 subscribers (shared/reference/server-under-load.txt).
REFERENCE_P99_MS = 287.0
GOAL_P99_MS = 100.0
GOAL_WRITER_COST = 0.10
GOAL_IDLE_CORES = 0.05


def run_events_benchmark(
    *,
    modes: list[str],
    subscribers: list[int],
    writers: int,
    duration_s: float,
    idle_s: float,
    server_workers: int,
    log: Callable[[str], None],
) -> dict:
    """Per mode: each number of subscribers between two runs of the writers alone (their cost
    is measured against the mean of the two, so a load that comes or goes on this shared
    machine meanwhile is halved rather than counted), then 100 idle subscribers."""
    rows = []
    for mode in modes:
        log(f"{mode}: starting the deployment")
        with Deployment(mode) as deployment:
            deployment.token = deployment.create_token(rate=100000, burst=100000)
            deployment.start_server(workers=server_workers)
            if mode == "production":
                deployment.start_worker(concurrency=2)
            alone = [run_fan_out(deployment, repo="alone0", subscribers=0, writers=writers, seconds=duration_s)]
            rows.append(_row(mode, 0, writers, alone[0], alone))
            log(f"{mode}: {rows[-1]['integrations_per_s']:.1f} integrations/s with no subscribers")
            for count in subscribers:
                run = run_fan_out(
                    deployment, repo=f"fan{count}", subscribers=count, writers=writers, seconds=duration_s
                )
                alone.append(
                    run_fan_out(
                        deployment, repo=f"alone{len(alone)}", subscribers=0, writers=writers, seconds=duration_s
                    )
                )
                rows.append(_row(mode, count, writers, run, alone[-2:]))
                log(f"{mode}: {count} subscribers: p99 {rows[-1]['p99_ms']:.1f} ms, cost {rows[-1]['writer_cost']:.0%}")
            idle = run_fan_out(deployment, repo="idle", subscribers=100, writers=0, seconds=idle_s)
            rows.append(_row(mode, 100, 0, idle, alone))
            log(f"{mode}: 100 idle subscribers: {rows[-1]['server_cores']:.3f} of a core")
    return {"rows": rows, "reference_p99_ms": REFERENCE_P99_MS}


def _row(mode: str, subscribers: int, writers: int, run: FanOut, alone: list[FanOut]) -> dict:
    """One run's figures; ``alone``: the runs of the writers without subscribers to compare with."""
    lags = run.lags_ms
    rate = run.integrations / run.seconds if writers else 0.0
    alone_rate = sum(other.integrations / other.seconds for other in alone) / len(alone)
    # The server CPU each delivery (one event to one subscriber) added beyond the landing's own.
    alone_cpu = sum(other.server_cpu_s for other in alone) / max(1, sum(other.integrations for other in alone))
    deliveries = len(run.truth) * subscribers
    extra_cpu = run.server_cpu_s - alone_cpu * run.integrations
    problems = run.problems + (run.check_exactly_once() if subscribers and writers else [])
    return {
        "mode": mode,
        "subscribers": subscribers,
        "writers": writers,
        "integrations_per_s": rate,
        "writer_cost": (1 - rate / alone_rate) if writers and subscribers and alone_rate else 0.0,
        **{f"p{int(q * 100)}_ms": percentile(lags, q) for q in (0.5, 0.9, 0.99)},
        "max_ms": percentile(lags, 1.0),
        "server_cores": run.server_cpu_s / run.seconds,
        "client_cores": run.client_cpu_s / run.seconds,
        # With a few subscribers the deliveries' CPU is lost in the noise of the landings'.
        "delivery_us": 1e6 * extra_cpu / deliveries if writers and subscribers >= 10 and deliveries else float("nan"),
        "exactly_once": not problems,
        "problems": problems[:3],
    }


def format_report(data: dict) -> str:
    """The table, with each goal checked beside its figure."""
    lines = [
        f"{'mode':<11}{'subs':>6}{'writers':>8}{'integ/s':>9}{'cost':>7}{'p50':>8}{'p90':>8}{'p99':>8}"
        f"{'max':>8}{'cores':>7}{'client':>7}{'us/dlv':>7}  exactly once",
    ]
    for row in data["rows"]:
        lines.append(
            f"{row['mode']:<11}{row['subscribers']:>6}{row['writers']:>8}{row['integrations_per_s']:>9.1f}"
            f"{row['writer_cost']:>7.0%}{row['p50_ms']:>8.1f}{row['p90_ms']:>8.1f}{row['p99_ms']:>8.1f}"
            f"{row['max_ms']:>8.1f}{row['server_cores']:>7.3f}{row['client_cores']:>7.3f}{row['delivery_us']:>7.0f}"
            f"  {'yes' if row['exactly_once'] else row['problems']}"
        )
    lines.append(
        f"lag in ms (client receive time - the event's server timestamp); goals: p99 <= {GOAL_P99_MS:g} ms at 100"
        f" subscribers with 16 writers (reference: {REFERENCE_P99_MS:g} ms), writer cost < {GOAL_WRITER_COST:.0%},"
        f" 100 idle subscribers < {GOAL_IDLE_CORES} of a core; cores: the servers' (and workers') and the"
        f" subscribers' client process's; us/dlv: server CPU per event delivered to one subscriber, beyond the"
        f" writers' own"
    )
    return "\n".join(lines) + "\n"


if __name__ == "__main__" and sys.argv[1:2] == ["subscribe"]:
    subscribe_main()
