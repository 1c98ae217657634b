"""``manage.py agentgit_landing_cost``: what landing a two-file change costs on the wire.

Lands the same kind of change (two text files of ``--size`` bytes, a fast-forward each time) the
two ways an agent can: the separate endpoints — upload both blobs (one batch request), write the
changeset, open the proposal, integrate it: four requests — and the one-call landing
(``POST .../streams/{stream}/land`` with the contents inline). For each it prints requests,
bytes sent and received per landing (HTTP/1.1 request and status lines, headers and bodies, as
httpx sends and receives them) and the median latency, against a fresh embedded deployment it
starts itself, or a running server with ``--url``/``--token``. ``--json FILE`` writes the rows.
"""

from __future__ import annotations

import base64
import json
import statistics
import time
from pathlib import Path

import httpx
from django.core.management.base import BaseCommand

from repos.benchmarks.deployment import Deployment


class Wire(httpx.HTTPTransport):
    """httpx's transport, counting requests and the bytes of each exchange."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = self.sent = self.received = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        response.read()
        target = request.url.raw_path.decode()
        self.requests += 1
        self.sent += len(f"{request.method} {target} HTTP/1.1\r\n") + _headers(request.headers) + len(request.content)
        status = f"HTTP/1.1 {response.status_code} {response.reason_phrase}\r\n"
        self.received += len(status) + _headers(response.headers) + len(response.content)
        return response


def _headers(headers: httpx.Headers) -> int:
    return sum(len(name) + len(value) + 4 for name, value in headers.raw) + 2


def _text(seed: int, size: int) -> str:
    line = f"line of file {seed}: some source text\n"
    return (line * (size // len(line) + 1))[:size]


def four_requests(http: httpx.Client, repo: str, n: int, size: int, head: str | None) -> str:
    """Upload both blobs (one batch), write the changeset on ``head``, propose, integrate: the new head."""
    files = {f"a{n}.txt": _text(2 * n, size), f"b{n}.txt": _text(2 * n + 1, size)}
    batch = {"blobs": [{"data": base64.b64encode(text.encode()).decode()} for text in files.values()]}
    ids = _ok(http.post(f"/repos/{repo}/blobs/batch", json=batch))["ids"]
    operations = [{"op": "write", "path": path, "blob": blob} for path, blob in zip(files, ids)]
    body = {"parent": head, "message": f"change {n}", "operations": operations}
    changeset = _ok(http.post(f"/repos/{repo}/changesets", json=body))["id"]
    proposal = _ok(http.post(f"/repos/{repo}/proposals", json={"stream": "main", "head": changeset}))["id"]
    outcome = _ok(http.post(f"/repos/{repo}/proposals/{proposal}/integrate", json={}))
    assert outcome["outcome"] == "fast_forward", outcome
    return outcome["stream_head"]


def one_request(http: httpx.Client, repo: str, n: int, size: int, head: str | None) -> str:
    """The same change in one call (the parent defaults to the stream's head): the new head."""
    operations = [
        {"op": "write", "path": f"a{n}.txt", "content": _text(2 * n, size)},
        {"op": "write", "path": f"b{n}.txt", "content": _text(2 * n + 1, size)},
    ]
    body = {"message": f"change {n}", "operations": operations}
    outcome = _ok(http.post(f"/repos/{repo}/streams/main/land", json=body))
    assert outcome["outcome"] == "fast_forward", outcome
    return outcome["stream_head"]


def _ok(response: httpx.Response) -> dict:
    if response.status_code not in (200, 201):
        raise RuntimeError(f"{response.request.method} {response.request.url} → {response.status_code} {response.text}")
    return response.json()


class Command(BaseCommand):
    help = "Requests and bytes per landing of a two-file change: the separate endpoints against one call."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--landings", type=int, default=50, help="Landings per way (default 50).")
        parser.add_argument("--size", type=int, default=1024, help="Bytes per file (default 1024).")
        parser.add_argument("--url", help="A running server (else a fresh embedded deployment is started).")
        parser.add_argument("--token", help="Its token (scopes write, integrate and admin).")
        parser.add_argument("--json", dest="json_file", type=Path, help="Write the rows to this file.")

    def handle(
        self, *args, landings: int, size: int, url: str | None, token: str | None, json_file: Path | None, **options
    ):
        if url:
            rows = self.measure(url, token or "", landings, size)
        else:
            with Deployment("embedded") as deployment:
                token = deployment.create_token("bench")
                deployment.start_server()
                rows = self.measure(deployment.url, token, landings, size)
        self.stdout.write(f"{'way':<28} {'requests':>9} {'bytes sent':>11} {'bytes received':>15} {'median ms':>10}")
        for row in rows:
            self.stdout.write(
                f"{row['way']:<28} {row['requests']:>9.1f} {row['bytes_sent']:>11.0f} "
                f"{row['bytes_received']:>15.0f} {row['median_ms']:>10.1f}"
            )
        if json_file:
            json_file.write_text(json.dumps(rows, indent=2) + "\n")

    def measure(self, url: str, token: str, landings: int, size: int) -> list[dict]:
        rows = []
        for way, land in (("separate (4 requests)", four_requests), ("one call (land)", one_request)):
            wire = Wire()
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=f"{url}/api/v1", headers=headers, transport=wire, timeout=60) as http:
                repo = f"cost-{way.split()[0]}-{int(time.time() * 1000)}"
                _ok(http.post("/repos", json={"name": repo}))
                wire.requests = wire.sent = wire.received = 0
                timings = []
                head = None
                for n in range(landings):
                    started = time.perf_counter()
                    head = land(http, repo, n, size, head)
                    timings.append((time.perf_counter() - started) * 1000)
                    self.stderr.write(f"\r{way}: {n + 1}/{landings}", ending="")
                self.stderr.write("")
            rows.append(
                {
                    "way": way,
                    "requests": wire.requests / landings,
                    "bytes_sent": wire.sent / landings,
                    "bytes_received": wire.received / landings,
                    "median_ms": statistics.median(timings),
                    "landings": landings,
                    "file_bytes": size,
                }
            )
        return rows
