"""The ``load`` suite's report: a text table, markdown beside the reference's numbers, and an SVG
plot of throughput and p99 by scenario, ours beside the reference's — all from the run's JSON
(benchmarks/load.py), so a saved run can be drawn again (``--from-json``).

The plot is a small hand-written SVG (two panels of paired bars on log scales): no plotting
dependency for two bar charts.
"""

from __future__ import annotations

import html
import math
from typing import Any

from .report import format_ms, text_table

#: The reference's figures (shared/reference/server-under-load.txt, HTTP/JSON rows; 4 cores, the
#: generator on them) and, for ``landing``, the peer's (issue 13: 50 agents on 16 cores). ``per_s``
#: is in the row's unit; ``p99_ms`` is the same latency the row reports, where the reference has it.
REFERENCE: dict[str, dict[str, Any]] = {
    "reads": {"per_s": 5100, "p99_ms": 21.3, "note": "5 100 requests/s, p99 21.3 ms"},
    "reads floor": {"per_s": None, "p99_ms": None, "note": "a bare ASGI app: reads' goal is 20 % of it"},
    "streams": {"per_s": 79.5, "p99_ms": 657, "note": "79.5 integrations/s, cycle p99 657 ms, 0 failures"},
    "contention": {"per_s": 44.1, "p99_ms": 1145, "note": "44.1 answered/s, cycle p99 1 145 ms, 11 % aborted"},
    "same-file": {"per_s": 91.6, "p99_ms": None, "note": "91.6 answered/s, integrate p99 386 ms, 329 landed"},
    "fanout": {"per_s": 51.5, "p99_ms": 287, "note": "51.5 integrations/s, lag p99 287 ms, every event once"},
    "ratelimit": {"per_s": None, "p99_ms": None, "note": "1 100 admitted of 160 256 (55.0/s): the bucket exactly"},
    "saturation": {"per_s": 5104, "p99_ms": None, "note": "5 104 answered/s (45 639 served, 56 525 refused)"},
    "landing 50": {"per_s": 2544 / 60, "p99_ms": 1800, "note": "peer: 1 862-2 544 lands/min, p99 1.5-1.8 s"},
    "landing 100": {"per_s": None, "p99_ms": None, "note": "not measured by the peer"},
    "git": {"per_s": None, "p99_ms": None, "note": "not measured"},
    "big-repo": {"per_s": None, "p99_ms": None, "note": "estimated 0.3-1 s of CPU per integration, not measured"},
}


def reference_for(scenario: str) -> dict[str, Any]:
    """The reference's figures for a row's scenario (``big-repo 100000`` is ``big-repo``)."""
    if scenario in REFERENCE:
        return REFERENCE[scenario]
    return REFERENCE.get(scenario.split(" ")[0], {"per_s": None, "p99_ms": None, "note": ""})


def _cores(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f} %"


def _details(row: dict[str, Any]) -> str:
    """The row's scenario-specific figures, as short text."""
    d = row["details"]
    scenario = row["scenario"]
    if scenario == "ratelimit":
        return (
            f"admitted {d['admitted']} ({d['admitted_per_s']}/s) of {row['count']}, bucket admits {d['allowed']} (burst + rate x time {d['burst_plus_rate_x_time']}); "
            f"{d['rejected_rate_limited']} rate_limited; second credential {d['second_answered']} answered"
        )
    if scenario == "saturation":
        return (
            f"served {d['served']}, refused unavailable {d['refused_unavailable']}, /readyz after: {d['ready_after']}"
        )
    if scenario == "fanout":
        return (
            f"{d['events']} events x {d['subscribers']} subscribers, {d['deliveries']} delivered; lag p99 "
            f"SSE {format_ms(d['sse_lag_ms']['p99'])} / WebSocket {format_ms(d['websocket_lag_ms']['p99'])} ms"
        )
    if scenario.startswith("landing"):
        return (
            f"landed {d['landed']}, {d['conflicted']} conflicted as planned ({d['planned_conflicts']} planned),"
            f" {d['lands_per_min']} lands/min, attempts per land {d['attempts_per_land']}"
        )
    if scenario.startswith("checks"):
        return (
            f"landed {d['landed']} of {d['changes']}, refused {d['refused']} ({d['bad']} bad), check {d['check_s']:g} s:"
            f" {d['lands_per_min']} lands/min ({d['x_one_at_a_time']}x one at a time), p99 {format_ms(d['p99_ms'])} ms"
            f" (goal {d['goal_p99_ms']}); {d['check_runs']} check runs ({d.get('own_tests', 0)} of proposals'"
            f" own changesets), {d['batches']} batches,"
            f" {d['bisections']} bisections; {d.get('resent', 0)} requests sent again after a retryable answer"
        )
    if scenario == "git":
        return (
            f"{d['files']} files; {d['writers']} writers meanwhile: {d['integrations_per_s']} integrations/s,"
            f" {d['writer_failures']} failed"
        )
    if "outcomes" in d:
        text = ", ".join(f"{n} {k}" for k, n in d["outcomes"].items() if not k.startswith("error:"))
        text += f"; integrate p50/p99 {format_ms(d['integrate_ms']['p50'])}/{format_ms(d['integrate_ms']['p99'])} ms"
        if "server_cpu_ms_per_integration" in d:
            text += f"; server CPU {d['server_cpu_ms_per_integration']} ms per integration"
            if "cpu_ratio_to_small" in d:
                text += f" ({d['cpu_ratio_to_small']}x the small repository's)"
        return text
    if "statuses" in d:
        text = "statuses " + ", ".join(f"{k}: {n}" for k, n in d["statuses"].items())
        if "server_cpu_ms_per_read" in d:
            text += f"; server CPU {d['server_cpu_ms_per_read']} ms a request"
        if "of_floor" in d:
            text += f"; {100 * d['of_floor']:.1f} % of the floor's throughput (goal {100 * d['goal_of_floor']:.0f} %)"
        return text
    return ""


def _cells(row: dict[str, Any]) -> list[str]:
    latency = row["latency_ms"]
    failures = ", ".join(f"{n} {k}" for k, n in row["failures"].items()) or "0"
    return [
        row["scenario"],
        row["backend"],
        str(row["clients"]),
        f"{row['per_s']:.1f} {row['unit']}/s",
        " / ".join(format_ms(latency[k]) or "-" for k in ("p50", "p90", "p99", "max")),
        failures,
        _cores(row["server_cores"]),
        _cores(row["generator_cores"]),
        "-" if row["peak_rss_mib"] is None else f"{row['peak_rss_mib']:.0f}",
        _cores(row.get("machine_busy")),
        "ok" if not row["problems"] else "FAILED",
    ]


HEADER = [
    "scenario", "backend", "clients", "throughput", "p50 / p90 / p99 / max ms", "failures",
    "server CPU", "generator CPU", "peak RSS MiB", "machine busy", "invariants",
]  # fmt: skip


def _conditions_line(data: dict[str, Any]) -> str:
    c = data["conditions"]
    return (
        f"profile {c['profile']}, {c['writers']} writers, {c['duration_s']:g} s a scenario, server "
        f"uvicorn x{c['server_workers']}; {c['cpu_count']} CPUs ({c['cpu_model']}{_speed(c)}), {c['memory_gib']} GiB, Linux "
        f"{c['kernel']}, Python {c['python']}, {c['wrk']}; commit {c['commit'] or '?'}, {c['started']}; "
        f"load average before {c['load_average_before']}, after {c.get('load_average_after')}; data in "
        f"{c['data_parent']}. CPU in % of one core; machine busy: all its CPUs, everyone's load; latency by nearest rank (wrk's histogram for wrk rows)."
    )


def _speed(c: dict[str, Any]) -> str:
    """The machine's probes (benchmarks.load.machine_speed), in runs that have them."""
    if "python_loop_ms" not in c:
        return ""
    return f"; a 1M-step Python loop {c['python_loop_ms']} ms, an fsync {c['fsync_ms']} ms"


def format_load(data: dict[str, Any]) -> str:
    """The text table, a line of details per row, and the problems."""
    lines = [_conditions_line(data), ""]
    lines += text_table([HEADER] + [_cells(row) for row in data["rows"]])
    lines.append("")
    lines += [f"{row['backend']} {row['scenario']}: {_details(row)}" for row in data["rows"]]
    for row in data["rows"]:
        lines += [f"PROBLEM {problem}" for problem in row["problems"]]
    return "\n".join(lines) + "\n"


def load_markdown(data: dict[str, Any]) -> str:
    """Markdown: the table with the reference beside each row, then each row's details."""
    rows = [[*HEADER, "reference (server-under-load.txt)"]]
    for row in data["rows"]:
        rows.append([*_cells(row), reference_for(row["scenario"])["note"]])
    out = [_conditions_line(data), "", *text_table(rows), ""]
    out += [f"- **{row['scenario']}** ({row['backend']}): {_details(row)}" for row in data["rows"]]
    problems = [problem for row in data["rows"] for problem in row["problems"]]
    if problems:
        out += ["", "Problems:", *[f"- {problem}" for problem in problems]]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------ the plot

OURS, THEIRS = "#1f77b4", "#bbbbbb"


def _log_bars(
    title: str, unit: str, pairs: list[tuple[str, float | None, float | None]], top: float, width: float
) -> list[str]:
    """One panel: for each label a bar of ours and one of the reference's, on a log scale."""
    values = [v for _, a, b in pairs for v in (a, b) if v]
    low = 10 ** math.floor(math.log10(min(values))) if values else 1.0
    high = 10 ** math.ceil(math.log10(max(values))) if values else 10.0
    if high <= low:
        high = low * 10
    left, plot_h, plot_w = 60.0, 180.0, width - 80
    base_y = top + 30 + plot_h

    def y(value: float) -> float:
        return base_y - plot_h * (math.log10(value) - math.log10(low)) / (math.log10(high) - math.log10(low))

    out = [f'<text x="{left}" y="{top + 18}" font-size="14" font-weight="bold">{html.escape(title)}</text>']
    decade = low
    while decade <= high * 1.0001:
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(decade):.1f}" y2="{y(decade):.1f}" stroke="#eee"/>')
        out.append(
            f'<text x="{left - 6}" y="{y(decade) + 4:.1f}" font-size="10" text-anchor="end">{_tick(decade)}</text>'
        )
        decade *= 10
    out.append(
        f'<text x="14" y="{top + 30 + plot_h / 2}" font-size="10" transform="rotate(-90 14 {top + 30 + plot_h / 2})"'
        f' text-anchor="middle">{html.escape(unit)} (log)</text>'
    )
    slot = plot_w / max(1, len(pairs))
    bar = min(18.0, slot / 3)
    for i, (label, ours, theirs) in enumerate(pairs):
        x = left + i * slot + slot / 2 - bar
        for offset, value, colour in ((0.0, ours, OURS), (bar, theirs, THEIRS)):
            if value:
                top_y = y(max(value, low))
                out.append(
                    f'<rect x="{x + offset:.1f}" y="{top_y:.1f}" width="{bar:.1f}" height="{base_y - top_y:.1f}"'
                    f' fill="{colour}"><title>{html.escape(label)}: {value:.4g}</title></rect>'
                )
        first, _, second = label.partition(" ")  # "big-repo 100000": two lines under its bars
        centre = left + i * slot + slot / 2
        out.append(
            f'<text x="{centre:.1f}" y="{base_y + 14}" font-size="10" text-anchor="middle">{html.escape(first)}'
            f'<tspan x="{centre:.1f}" dy="12">{html.escape(second)}</tspan></text>'
        )
    return out


def _tick(value: float) -> str:
    """A decade as a label: 0.1, 10, 100 000."""
    return f"{value:g}" if value < 1 else f"{value:,.0f}".replace(",", " ")


def load_svg(data: dict[str, Any]) -> str:
    """Throughput and p99 by scenario, ours beside the reference's, as an SVG document."""
    rows = data["rows"]
    width = max(640.0, 70.0 * len(rows) + 80)
    labels = [
        f"{row['scenario']}" + (f" ({row['backend']})" if len(data["conditions"]["backends"]) > 1 else "")
        for row in rows
    ]
    throughput = [(label, row["per_s"], reference_for(row["scenario"])["per_s"]) for label, row in zip(labels, rows)]
    p99 = [
        (label, row["latency_ms"]["p99"], reference_for(row["scenario"])["p99_ms"]) for label, row in zip(labels, rows)
    ]
    c = data["conditions"]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="560" font-family="sans-serif">',
        f'<rect width="{width:.0f}" height="560" fill="white"/>',
        *_log_bars("Throughput by scenario (per second, in each row's unit)", "per second", throughput, 0, width),
        *_log_bars("p99 latency by scenario (each row's own latency)", "ms", p99, 250, width),
        f'<rect x="60" y="520" width="12" height="12" fill="{OURS}"/>',
        f'<text x="78" y="531" font-size="11">ours: commit {html.escape(c["commit"] or "?")}, {c["cpu_count"]} CPUs,'
        f" profile {html.escape(c['profile'])}</text>",
        f'<rect x="60" y="540" width="12" height="12" fill="{THEIRS}"/>',
        '<text x="78" y="551" font-size="11">reference: server-under-load.txt, 4 CPUs (landing: the peer, 16)</text>',
        "</svg>",
    ]
    return "\n".join(parts) + "\n"
