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
import base64
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
import uvloop

from tests.deployment import ApiClient, Deployment

KINDS = "stream.integrate"


# ------------------------------------------------------------------------------ subscribers


async def _follow_sse(config: dict, index: int, seen: list, stop: asyncio.Event) -> None:
    """One SSE subscriber: reconnects with Last-Event-ID when the stream ends, as EventSource does.

    HTTP/1.1 spoken over a bare asyncio stream, not httpx: the subscribers share the machine with
    the servers and the writers, and httpx's per-chunk machinery (anyio, h11, text decoding) cost
    about a millisecond of this process's CPU per event received, which the writers then lacked.
    The body is read as it comes, a segment at a time, and its chunks taken apart in the buffer.
    """
    last = config["after"]
    resumed = index not in config["resumers"]
    while not stop.is_set():
        query = urlencode({"kinds": KINDS, "timeout": 300})
        opened = await _open(
            config,
            seen,
            f"GET /api/v1/repos/{config['repo']}/events?{query}",
            f"Authorization: Bearer {config['token']}\r\nLast-Event-ID: {last}\r\nAccept: text/event-stream\r\n",
            expect=200,
        )
        if opened is None:
            return
        reader, writer = opened
        try:
            body, pending, ended = b"", b"", False
            while not ended and not stop.is_set():
                data = await reader.read(1 << 16)
                if not data:
                    break
                received = time.time()
                chunks, body, ended = _dechunk(body + data)  # ended: the stream's timeout; reconnect
                *blocks, pending = (pending + chunks).split(b"\n\n")
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


async def _open(
    config: dict, seen: list, request_line: str, headers: str, *, expect: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """A connection to the server with the request sent and its answer's head read; None (and
    the status noted in ``seen``) if the answer is not ``expect``."""
    host, port = config["url"].removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"{request_line} HTTP/1.1\r\nHost: {host}:{port}\r\n{headers}\r\n".encode())
    status = int((await reader.readline()).split()[1])
    while (await reader.readline()) not in (b"\r\n", b""):
        pass  # the headers: uvicorn streams an SSE body chunked
    if status != expect:
        seen.append(("status", status))
        writer.close()
        return None
    return reader, writer


def _dechunk(buffer: bytes) -> tuple[bytes, bytes, bool]:
    """HTTP/1.1 chunked transfer coding: (the data of the whole chunks in ``buffer``, the rest,
    whether the last chunk came)."""
    data: list[bytes] = []
    position = 0
    while (line_end := buffer.find(b"\r\n", position)) >= 0:
        size = int(buffer[position:line_end], 16)
        if size == 0:
            return b"".join(data), b"", True
        end = line_end + 2 + size
        if len(buffer) < end + 2:
            break
        data.append(buffer[line_end + 2 : end])
        position = end + 2
    return b"".join(data), buffer[position:], False


def _created(block: bytes) -> float:
    """The event's server timestamp (``"created":"...Z"`` in its data), as a Unix time."""
    start = block.index(b'"created":"') + 11
    return datetime.fromisoformat(block[start : block.index(b'"', start)].decode()).timestamp()


async def _follow_ws(config: dict, index: int, seen: list, stop: asyncio.Event) -> None:
    """One WebSocket subscriber; reconnects with ?after= the last id it saw.

    RFC 6455 spoken over a bare asyncio stream, as the SSE subscriber speaks HTTP: the
    ``websockets`` client's machinery (its protocol object, a message queue, UTF-8 decoding, then
    ``json.loads``) cost this process more per event than the server spent sending it. The
    server's frames are unmasked and whole (uvicorn does not fragment a text message)."""
    last = config["after"]
    resumed = index not in config["resumers"]
    while not stop.is_set():
        query = urlencode({"token": config["token"], "kinds": KINDS, "after": last})
        key = base64.b64encode(os.urandom(16)).decode()
        opened = await _open(
            config,
            seen,
            f"GET /ws/repos/{config['repo']}/events?{query}",
            f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n",
            expect=101,
        )
        if opened is None:
            return
        reader, writer = opened
        try:
            buffer = b""
            while not stop.is_set():
                data = await reader.read(1 << 16)
                if not data:
                    if not stop.is_set():
                        seen.append(("closed", "the connection ended without a close frame"))
                    return
                received = time.time()
                frames, buffer = _frames(buffer + data)
                for opcode, payload in frames:
                    if opcode == 0x1:  # a text message: one event, {"id":N,"event":...,"data":{...}}
                        last = int(payload[payload.index(b":") + 1 : payload.index(b",")])
                        seen.append((last, received - _created(payload)))
                    elif opcode == 0x9:  # uvicorn's heartbeat: answered, or it closes the socket
                        writer.write(_client_frame(0xA, payload))
                    elif opcode == 0x8:
                        code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
                        if code != 1000 and not stop.is_set():
                            seen.append(("closed", f"{code} {payload[2:].decode()}"))
                        return
                if not resumed and time.monotonic() > config["resume_at"]:
                    resumed = True
                    writer.write(_client_frame(0x8, (1000).to_bytes(2, "big")))
                    break  # disconnect half-way; the loop resumes from `last`
        finally:
            writer.close()


def _frames(buffer: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """The whole server frames in ``buffer`` as (opcode, payload), and the rest."""
    frames, position = [], 0
    while len(buffer) - position >= 2:
        size, start = buffer[position + 1] & 0x7F, position + 2
        if size >= 126:
            width = 2 if size == 126 else 8
            if len(buffer) < start + width:
                break
            size, start = int.from_bytes(buffer[start : start + width], "big"), start + width
        if len(buffer) < start + size:
            break
        frames.append((buffer[position] & 0x0F, buffer[start : start + size]))
        position = start + size
    return frames, buffer[position:]


def _client_frame(opcode: int, payload: bytes) -> bytes:
    """One final client frame (masked, as RFC 6455 requires of a client) of a short payload."""
    mask = os.urandom(4)
    masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked


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
    # uvloop, as the servers run: a socket's wake-up costs the subscribers' loop less than asyncio's.
    seen = uvloop.run(_subscribe(config))
    # A run's line was once cut at exactly 256 KiB (a CI run of 2026-12-04): the way a write of
    # a pipe ends early is EAGAIN on a descriptor left non-blocking, so it is made blocking.
    os.set_blocking(sys.stdout.fileno(), True)
    print(json.dumps(seen), flush=True)


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
