"""``agentgit_bench refs`` in small: one push of 100 and of 1 000 branches to a real server
(tests/deployment.py) creates every stream, ``ls-remote --heads`` lists exactly the database's
streams, and maintenance leaves at most 1 % of the refs as loose files. Never a timing."""

from __future__ import annotations

import io
import json

from django.core.management import call_command

from benchmarks.refs_bench import push_report, push_request
from repos.git_http.pktline import pkt


def test_the_push_request_and_its_report_are_git_s_own_framing():
    body = push_request([("a" * 40, "refs/heads/x"), ("b" * 40, "refs/heads/y")], b"PACK")
    assert body[4:].startswith(b"0" * 40 + b" " + b"a" * 40 + b" refs/heads/x\0")
    assert pkt(b"0" * 40 + b" " + b"b" * 40 + b" refs/heads/y\n") + b"0000PACK" in body
    assert b"\0report-status side-band-64k" in body and body.count(b"\0") == 1
    assert body.endswith(b"0000PACK")
    # report-status inside side band 1, cut across two side-band packets mid-line.
    status = b"".join(pkt(line) for line in (b"unpack ok\n", b"ok refs/heads/x\n", b"ng refs/heads/y no\n")) + b"0000"
    sideband = b"".join(b"%04x" % (len(part) + 5) + b"\x01" + part for part in (status[:20], status[20:])) + b"0000"
    assert push_report(sideband) == (1, ["ng refs/heads/y no"])


def test_every_pushed_stream_is_created_listed_and_packed(tmp_path):
    json_path = tmp_path / "refs.json"
    out = io.StringIO()

    call_command(
        "agentgit_bench", "refs", "--streams", "100,1000", "--samples", "1", "--client-max", "100",
        "--json", str(json_path), stdout=out, stderr=io.StringIO(),
    )  # fmt: skip

    data = json.loads(json_path.read_text())
    for run in data["runs"]:
        checks = run["checks"]
        assert checks["pushed_ok"] == run["streams"]
        # the pushed streams and the ones created by REST, all of them listed by git
        assert checks["streams_in_database"] == checks["listed"] > run["streams"]
        assert checks["loose_refs"] <= 0.01 * checks["refs"]
    figures = {row["figure"] for row in data["rows"]}
    assert {"push, per ref (µs)", "full ls-remote --heads", "web UI repository page"} <= figures
    assert "stock git push over HTTP, per ref (µs)" in figures  # at 100 streams, under --client-max
    assert "1 000" in out.getvalue()
