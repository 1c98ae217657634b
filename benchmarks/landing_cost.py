"""What landing a two-file change costs on the wire: ``agentgit_bench landing``.

Lands the same kind of change (two text files of ``--size`` bytes, a fast-forward each time) the
two ways an agent can: the separate endpoints — upload both blobs (one batch request), write the
changeset, open the proposal, integrate it: four requests — and the one-call landing
(``POST .../streams/{stream}/land`` with the contents inline). For each: requests, bytes sent and
received per landing (HTTP/1.1 request and status lines, headers and bodies, as httpx sends and
receives them) and the median latency, against a fresh embedded deployment or a running server.
"""

from __future__ import annotations

import base64
import statistics
import time
from collections.abc import Callable

import httpx

from tests.deployment import Deployment


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
        raise AssertionError(
            f"{response.request.method} {response.request.url} → {response.status_code} {response.text}"
        )
    return response.json()


def measure(url: str, token: str, landings: int, size: int, log: Callable[[str], None]) -> list[dict]:
    """One row per way: requests, bytes sent and received per landing, median latency."""
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
            log(f"{way}: {landings} landings")
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


def run_landing_cost(
    landings: int, size: int, log: Callable[[str], None], url: str | None = None, token: str | None = None
) -> list[dict]:
    """The rows, against ``url`` or a fresh embedded deployment started here."""
    if url:
        return measure(url, token or "", landings, size, log)
    with Deployment("embedded") as deployment:
        token = deployment.create_token("bench")
        deployment.start_server()
        return measure(deployment.url, token, landings, size, log)


def format_landing_cost(rows: list[dict]) -> str:
    lines = [f"{'way':<28} {'requests':>9} {'bytes sent':>11} {'bytes received':>15} {'median ms':>10}"]
    for row in rows:
        lines.append(
            f"{row['way']:<28} {row['requests']:>9.1f} {row['bytes_sent']:>11.0f} "
            f"{row['bytes_received']:>15.0f} {row['median_ms']:>10.1f}"
        )
    return "\n".join(lines) + "\n"


def landing_cost_markdown(rows: list[dict]) -> str:
    lines = ["| way | requests | bytes sent | bytes received | median ms |", "|---|---|---|---|---|"]
    for row in rows:
        lines.append(
            f"| {row['way']} | {row['requests']:.0f} | {row['bytes_sent']:.0f} | {row['bytes_received']:.0f} | {row['median_ms']:.1f} |"
        )
    return "\n".join(lines) + "\n"
