"""``events --transports``: the relay's transport candidates alone (docs/adr/0011-event-relay.md).

Each candidate carries pushes from one publishing process to ``listeners`` listening processes
(as many as ``make serve`` runs), with nothing else in the way: no landing, no subscriber. The
publisher sends ``pushes`` pushes at ``rate`` a second, each one event of a realistic size
stamped with its send time; every listener reports each push's delay (receive time minus send
time) and its own CPU, first while pushes arrive, then idle for ``idle_s``.

* ``socket``: the embedded default's datagram socket per process (repos.services.transports.SocketTransport);
* ``redis``: production's Channels layer, channels-redis pub/sub (repos.services.transports.LayerTransport);
* ``notify``: PostgreSQL ``LISTEN``/``NOTIFY`` (:class:`NotifyTransport` below; not a transport
  the server offers, only measured);
* ``poll``: one outbox poll per process every ``relay.POLL_S`` (the delay is the poll's; its idle
  cost is its queries, counted from the poll interval rather than run).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CANDIDATES = ("socket", "redis", "notify")
CHANNEL = "agentgit_events"


class NotifyTransport:
    """PostgreSQL ``NOTIFY agentgit_events, '<repository>\\n<events as JSON lines>'`` from the
    publisher, one ``LISTEN`` connection per listening process (payloads are capped at 8 000
    bytes: a larger batch would be split, or sent as ids to read from the outbox)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._sender: Any = None

    def send(self, repository_id: int, messages: list[dict]) -> None:
        import psycopg

        if self._sender is None:
            self._sender = psycopg.connect(self.url, autocommit=True)
        payload = f"{repository_id}\n" + "\n".join(json.dumps(m, separators=(",", ":")) for m in messages)
        self._sender.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))

    async def listen(self, deliver: Callable[[int, list[dict]], None]) -> None:
        import psycopg

        listener = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        await listener.execute(f"LISTEN {CHANNEL}")
        async for notice in listener.notifies():
            head, *lines = notice.payload.split("\n")
            deliver(int(head), [json.loads(line) for line in lines])

    async def follow(self, repository_id: int) -> None:
        pass


def _transport(candidate: str, config: dict) -> Any:
    from repos.services import transports

    if candidate == "socket":
        return transports.SocketTransport(Path(config["relay_dir"]))
    if candidate == "redis":
        return transports.LayerTransport()
    return NotifyTransport(config["database"])


def _cpu() -> float:
    return time.process_time()


def listen_main() -> None:
    """A listening process: prints ``ready``, then one JSON line: delays (ms) and CPU seconds."""
    import django

    django.setup()
    candidate, config = sys.argv[2], json.loads(sys.argv[3])
    delays: list[float] = []
    done = asyncio.Event()

    def deliver(_repository: int, messages: list[dict]) -> None:
        now = time.time()
        for message in messages:
            if message.get("last"):
                done.set()
            elif "sent" in message:  # not the warm-up push
                delays.append(1000 * (now - message["sent"]))

    async def main() -> dict:
        transport = _transport(candidate, config)
        listening = asyncio.ensure_future(transport.listen(deliver))
        await transport.follow(1)
        await asyncio.sleep(0.5)  # listening (the socket bound, the subscription made)
        print("ready", flush=True)
        started = _cpu()
        await asyncio.wait_for(done.wait(), config["timeout_s"])
        busy = _cpu() - started
        idle_from = _cpu()
        await asyncio.sleep(config["idle_s"])
        idle = _cpu() - idle_from
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
        return {"delays": delays, "busy_cpu_s": busy, "idle_cpu_s": idle}

    print(json.dumps(asyncio.run(main())), flush=True)


def publish_main() -> None:
    """The publishing process: sends the pushes, then prints its CPU seconds."""
    import django

    django.setup()
    candidate, config = sys.argv[2], json.loads(sys.argv[3])
    transport = _transport(candidate, config)
    event = {"event": "stream.integrate", "data": {"stream": "w1", "paths": [f"w1/f{i}.txt" for i in range(10)]}}
    transport.send(1, [{"id": 0, "warm-up": True}])  # connected: the first push pays no setup
    time.sleep(0.2)
    cpu_before = _cpu()
    started = time.monotonic()
    for n in range(config["pushes"]):
        time.sleep(max(0.0, started + n / config["rate"] - time.monotonic()))
        transport.send(1, [{"id": n + 1, **event, "sent": time.time()}])
    transport.send(1, [{"id": config["pushes"] + 1, "last": True}])
    print(json.dumps({"cpu_s": _cpu() - cpu_before}), flush=True)


def _child(role: str, candidate: str, config: dict, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.relay_transports", role, candidate, json.dumps(config)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "agentgit_site.settings", **env},
        cwd=Path(__file__).resolve().parent.parent,
    )


def _last_line(child: subprocess.Popen, timeout_s: float) -> dict:
    return json.loads(child.communicate(timeout=timeout_s)[0].strip().splitlines()[-1])


def measure(candidate: str, *, env: dict[str, str], config: dict, listeners: int) -> dict:
    """One candidate: ``listeners`` processes hearing ``config["pushes"]`` pushes."""
    children = [_child("listen", candidate, config, env) for _ in range(listeners)]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        publisher = _child("publish", candidate, config, env)
        children.append(publisher)
        publisher_cpu = _last_line(publisher, config["timeout_s"])["cpu_s"]
        results = [_last_line(child, config["timeout_s"] + config["idle_s"]) for child in children[:listeners]]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    pushes = config["pushes"]
    delays = sorted(delay for result in results for delay in result["delays"])
    return {
        "candidate": candidate,
        "listeners": listeners,
        "pushes": pushes,
        "heard": len(delays) / (pushes * listeners),
        **{f"p{int(q * 100)}_ms": _at(delays, q) for q in (0.5, 0.99)},
        "max_ms": _at(delays, 1.0),
        "cpu_us_per_push": 1e6 * (publisher_cpu + sum(r["busy_cpu_s"] for r in results)) / pushes,
        "idle_cores": sum(r["idle_cpu_s"] for r in results) / config["idle_s"],
    }


def _at(values: list[float], share: float) -> float:
    return values[min(len(values) - 1, int(share * len(values)))] if values else float("nan")


def run_candidates(
    *, listeners: int, pushes: int, rate: float, idle_s: float, log: Callable[[str], None]
) -> list[dict]:
    """Every candidate, each against fresh services (a Redis index, a PostgreSQL database)."""
    from tests.deployment import PostgresDatabase, RedisDatabase

    rows = []
    with tempfile.TemporaryDirectory(prefix="ag-relay-") as relay_dir:
        database, redis = PostgresDatabase(), RedisDatabase()
        try:
            config = {
                "relay_dir": relay_dir,
                "database": database.url,
                "pushes": pushes,
                "rate": rate,
                "timeout_s": pushes / rate + 30,
                "idle_s": idle_s,
            }
            for candidate in CANDIDATES:
                env = {"CHANNELS_REDIS_URL": redis.url} if candidate == "redis" else {}
                rows.append(measure(candidate, env=env, config=config, listeners=listeners))
                log(f"transport {candidate}: p99 {rows[-1]['p99_ms']:.1f} ms")
        finally:
            database.drop()
            redis.release()
    from repos.services.relay import POLL_S

    rows.append(
        {
            "candidate": "poll",
            "listeners": listeners,
            "pushes": pushes,
            "heard": 1.0,
            "p50_ms": 1000 * POLL_S / 2,
            "p99_ms": 1000 * POLL_S * 0.99,
            "max_ms": 1000 * POLL_S,
            "cpu_us_per_push": float("nan"),
            "idle_cores": float("nan"),
            "idle_queries_per_s": listeners / POLL_S,
        }
    )
    return rows


def format_candidates(rows: list[dict]) -> str:
    lines = [f"{'transport':<10}{'heard':>7}{'p50':>8}{'p99':>8}{'max':>8}{'us/push':>9}{'idle cores':>11}"]
    for row in rows:
        idle = f"{row['idle_queries_per_s']:.0f} q/s" if "idle_queries_per_s" in row else f"{row['idle_cores']:.4f}"
        lines.append(
            f"{row['candidate']:<10}{row['heard']:>7.0%}{row['p50_ms']:>8.2f}{row['p99_ms']:>8.2f}{row['max_ms']:>8.2f}"
            f"{row['cpu_us_per_push']:>9.0f}{idle:>11}"
        )
    lines.append(
        f"{rows[0]['listeners']} listening processes, {rows[0]['pushes']} pushes of one event; delay in ms (receive -"
        " send); us/push: publisher + listeners' CPU per push; poll: by construction (a query per process per"
        " interval), not run"
    )
    return "\n".join(lines) + "\n"


if __name__ == "__main__" and sys.argv[1:2] == ["listen"]:
    listen_main()
if __name__ == "__main__" and sys.argv[1:2] == ["publish"]:
    publish_main()
