"""``agentgit_bench load``: the parts that decide a scenario's verdict, without starting a server.

The scenarios themselves run against real servers in ``make test`` (``--profile smoke``), which
fails when an invariant does not hold. Here: the token bucket the rate-limit scenario checks
against, wrk's script (against a real HTTP server of the standard library), and the command's
handling of a run: tables, markdown and plot from its JSON, and a failed invariant failing it.
"""

from __future__ import annotations

import io
import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from benchmarks import load, load_report


def test_the_bucket_admits_burst_plus_rate_times_time_when_kept_empty():
    arrivals = [i / 1000 for i in range(10_001)]  # 1 000 requests a second from 0 to 10 s
    assert load.bucket_admits(arrivals, rate=50, burst=100) == 100 + 50 * 10

    sparse = [i * 0.5 for i in range(40)]  # 2 a second: never more than the bucket refills
    assert load.bucket_admits(sparse, rate=50, burst=100) == 40
    assert load.bucket_admits([], rate=50, burst=100) == 0


class _Handler(BaseHTTPRequestHandler):
    """200 for the token wrk must send, 503 ``unavailable`` or 503 something else otherwise."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.headers.get("Authorization") != "Bearer secret-token":
            status, body = 401, b'{"error": {"code": "unauthenticated"}}'
        elif self.path == "/ok":
            status, body = 200, b"{}"
        elif self.path == "/shed":
            status, body = 503, b'{"error": {"code": "unavailable"}}'
        else:
            status, body = 503, b"<html>bad gateway</html>"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        pass  # wrk drops its connections when its time is up


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is installed by make test (make wrk)")
@pytest.mark.parametrize(("path", "statuses", "odd"), [("/ok", {200}, 0), ("/shed", {503}, 0), ("/other", {503}, None)])
def test_wrk_sends_the_token_and_counts_statuses_and_refusals_that_are_not_unavailable(tmp_path, path, statuses, odd):
    server = _QuietServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}{path}"
        summary = load.run_wrk(url, "secret-token", connections=2, seconds=1, scratch=tmp_path)
    finally:
        server.shutdown()
    assert set(summary["statuses"]) == statuses
    assert sum(summary["statuses"].values()) == summary["requests"] > 0
    assert summary["odd_refusals"] == (summary["requests"] if odd is None else 0)
    assert 0 < summary["latency_us"]["p50"] <= summary["latency_us"]["p99"] <= summary["latency_us"]["max"]


def _row(scenario: str, per_s: float, p99: float, problems: list[str]) -> dict:
    row = load.Row(scenario, "sqlite", 16, 10.0, "requests", int(per_s * 10), "request", {}, {}, 5.0, 1.0, 100.0)
    row.latency_ms = load.percentiles([p99 / 2, p99])
    row.details = {"statuses": {"200": row.count}}
    row.problems = problems
    return row.as_dict()


def _saved_run(tmp_path, problems: list[str]) -> str:
    conditions = load._conditions(load.PROFILES["smoke"], "smoke", ["reads", "streams"], ["sqlite"], None)
    rows = [_row("reads", 2000.0, 30.0, problems), _row("streams", 90.0, 400.0, [])]
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"conditions": conditions, "rows": rows, "problems": problems}))
    return str(path)


def test_a_saved_run_is_reported_as_a_table_markdown_beside_the_reference_and_a_plot(tmp_path):
    out = io.StringIO()
    markdown, plot = tmp_path / "run.md", tmp_path / "run.svg"

    call_command(
        "agentgit_bench", "load", "--from-json", _saved_run(tmp_path, []),
        "--markdown", str(markdown), "--plot", str(plot), stdout=out, stderr=io.StringIO(),
    )  # fmt: skip

    assert "| reads " in out.getvalue() and "2000.0 requests/s" in out.getvalue()
    assert load_report.REFERENCE["reads"]["note"] in markdown.read_text()
    svg = plot.read_text()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    # Two panels, each with ours and the reference's bar for both scenarios.
    assert svg.count(f'fill="{load_report.OURS}"><title>') == 4
    assert svg.count(f'fill="{load_report.THEIRS}"><title>') == 4


def test_a_failed_invariant_fails_the_command_after_the_table_and_writes_no_result(tmp_path):
    out = io.StringIO()
    json_path, plot = tmp_path / "again.json", tmp_path / "run.svg"

    with pytest.raises(CommandError, match="reads: answers other than 200"):
        call_command(
            "agentgit_bench", "load", "--from-json", _saved_run(tmp_path, ["reads: answers other than 200: {}"]),
            "--json", str(json_path), "--plot", str(plot), stdout=out, stderr=io.StringIO(),
        )  # fmt: skip

    assert "FAILED" in out.getvalue()
    assert not json_path.exists() and not plot.exists()
