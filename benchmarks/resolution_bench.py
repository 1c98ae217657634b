"""The landing scenario with resolution: ``manage.py agentgit_bench resolution``.

Agents land changes on one stream at once (issue 11's acceptance: 50 agents x 5 changes, 20 %
planned to conflict). A *planned conflict* rewrites the same line of ``shared.txt`` from the
stale base every agent started from, so once one of them landed every other one conflicts on
that line. Such an agent reads the conflict package, keeps both lines (its own and the stream's,
from the diff3 marker blob) and resolves in one call; if the stream moved meanwhile and touched
that line again, the answer is a new package and it resolves again. Every other change writes
the agent's own file on the head it just read. The run checks that every change landed (the
peer, which cannot resolve, lands 200 of 250) and that ``shared.txt`` ends with every planned
line; it reports lands per minute, attempts per land (integrate and resolve calls) and the p99
of a change's time from its first integrate to its landing.

No Django here: the server is a :class:`~tests.deployment.Deployment` (real processes) or ``--url``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.deployment import ApiClient, ApiFailure, Deployment

from .cycle import nearest_rank

SHARED = "shared.txt"
#: The line every planned conflict rewrites.
CONTESTED = "status: initial"
#: A change that neither lands nor conflicts after this many calls fails the run.
MAX_ATTEMPTS = 50
#: The approvals-only policy of the landing scenario's guarded variant (issue 23): one approval,
#: given by a reviewer before the agent integrates.
APPROVALS_POLICY = {"rules": [{"streams": ["main"], "required_approvals": 1}]}


@dataclass
class Change:
    agent: int
    index: int
    planned_conflict: bool
    attempts: int = 0
    resolutions: int = 0
    outcome: str | None = None
    error: str | None = None
    elapsed_ms: float = 0.0
    #: The reviewer's approval call inside ``elapsed_ms`` (the guarded variant): not the agent's time.
    review_ms: float = 0.0
    #: The paths a ``conflict`` outcome named (the scenario without resolution ends there).
    conflicts: list[str] = field(default_factory=list)


@dataclass
class LandingRun:
    agents: int
    changes_per_agent: int
    elapsed_s: float
    changes: list[Change] = field(default_factory=list)
    shared_lines_kept: int = 0
    #: The repository the agents landed in.
    repo: str = ""

    @property
    def landed(self) -> list[Change]:
        return [c for c in self.changes if c.outcome in ("fast_forward", "merge")]

    @property
    def conflicted(self) -> list[Change]:
        """The changes left with a ``conflict`` outcome (only when the agents do not resolve)."""
        return [c for c in self.changes if c.outcome == "conflict"]

    def summary(self) -> dict[str, Any]:
        landed = self.landed
        times = sorted(c.elapsed_ms - c.review_ms for c in landed)
        attempts = sum(c.attempts for c in self.changes)
        planned = [c for c in self.changes if c.planned_conflict]
        return {
            "agents": self.agents,
            "changes": len(self.changes),
            "landed": len(landed),
            "conflicted": len(self.conflicted),
            "planned_conflicts": len(planned),
            "resolved_in_calls": sum(c.resolutions for c in planned),
            "shared_lines_kept": self.shared_lines_kept,
            "elapsed_s": round(self.elapsed_s, 2),
            "lands_per_min": round(len(landed) / self.elapsed_s * 60, 1) if self.elapsed_s else 0.0,
            "attempts_per_land": round(attempts / len(landed), 2) if landed else None,
            "p50_ms": nearest_rank(times, 50),
            "p99_ms": nearest_rank(times, 99),
            "errors": sorted({c.error for c in self.changes if c.error}),
        }


def keep_both(marked: bytes) -> str:
    """An agent's resolution of a diff3-marked text: in each conflict, the stream's lines and then
    its own, without the base section and the markers."""
    out: list[str] = []
    section = None
    for line in marked.decode().splitlines(keepends=True):
        if line.startswith("<<<<<<< "):
            section = "ours"
        elif line.startswith("||||||| ") and section == "ours":
            section = "base"
        elif line == "=======\n" and section in ("ours", "base"):
            section = "theirs"
        elif line.startswith(">>>>>>> ") and section == "theirs":
            section = None
        elif section != "base":
            out.append(line)
    return "".join(out)


def _land_change(
    client: ApiClient, repo: str, change: Change, stale_base: str, resolve: bool, reviewer: ApiClient | None = None
) -> None:
    """One change from its changeset to its landing, resolving conflicts as they come (or, if
    not ``resolve``, ending at the first conflict with the paths it named). With a ``reviewer``,
    the proposal is approved before it is integrated (the time of that call is kept apart)."""
    started = time.monotonic()
    if change.planned_conflict:
        text = f"status: agent {change.agent} change {change.index}\n"
        head = client.write(repo, stale_base, {SHARED: text}, f"agent {change.agent} planned conflict")
    else:
        parent = client.head(repo)
        files: dict[str, str | None] = {
            f"agents/{change.agent:02d}/{change.index}.txt": f"agent {change.agent} change {change.index}\n"
        }
        head = client.write(repo, parent, files, f"agent {change.agent} change {change.index}")
    proposal = client.open_proposal(repo, head)["id"]
    if reviewer is not None:
        asked = time.monotonic()
        reviewer.request(
            "POST", f"/repos/{repo}/proposals/{proposal}/reviews", json={"verdict": "approve"}, expect=(201,)
        )
        change.review_ms = (time.monotonic() - asked) * 1000
    response = client.integrate_raw(repo, proposal, wait=60)
    while change.attempts < MAX_ATTEMPTS:
        change.attempts += 1
        outcome = _outcome(client, repo, response)
        if outcome is None:  # aborted (retryable): ask again
            response = client.integrate_raw(repo, proposal, wait=60)
            continue
        if outcome["outcome"] != "conflict" or not resolve:
            change.outcome = outcome["outcome"]
            change.conflicts = [conflict["path"] for conflict in outcome.get("conflicts") or []]
            change.elapsed_ms = (time.monotonic() - started) * 1000
            return
        package = client.get_json(outcome["package"].removeprefix("/api/v1"))
        resolutions = []
        for conflict in package["conflicts"]:
            marked = client.request("GET", f"/repos/{repo}/blobs/{conflict['marked']}").content
            resolutions.append({"path": conflict["path"], "content": keep_both(marked)})
        change.resolutions += 1
        body = {
            "stream_head": package["stream_head"],
            "resolutions": resolutions,
            "provenance": {"agent": f"a{change.agent}"},
        }
        response = client.request(
            "POST",
            f"/repos/{repo}/proposals/{proposal}/resolve",
            json=body,
            params={"wait": 60},
            expect=(200, 202, 409),
        )
    change.error = f"not landed after {MAX_ATTEMPTS} calls"


def _outcome(client: ApiClient, repo: str, response) -> dict | None:
    """The outcome of an integrate or resolve answer (a 202 polled to the end); None if aborted."""
    body = response.json()
    if response.status_code == 409:
        return None
    if response.status_code == 202:
        operation = client.wait_operation(repo, body["operation"], timeout_s=120)
        if operation["state"] != "done":
            if operation.get("error", {}).get("retryable"):
                return None
            raise ApiFailure("GET", f"operation {body['operation']}", 200, operation)
        return operation["outcome"]
    return body


def run_landing(
    base_url: str,
    token: str,
    *,
    agents: int,
    changes: int,
    conflict_every: int = 5,
    resolve: bool = True,
    on_change: Callable[[Change], None] | None = None,
    reviewer_token: str | None = None,
) -> LandingRun:
    """Drive ``agents`` threads, ``changes`` each, against a running server; one change in
    ``conflict_every`` (20 % by default) is a planned conflict, which the agent resolves (or, if
    not ``resolve``, leaves conflicted: the peer's scenario). ``on_change`` is told of each
    change once it landed, conflicted or failed (from the agents' threads). With
    ``reviewer_token`` (a user other than ``token``'s, scope review), main is guarded by
    :data:`APPROVALS_POLICY` and each proposal approved before it is integrated."""
    repo = f"landing-{int(time.time() * 1000)}"
    with ApiClient(base_url, token) as setup:
        setup.create_repo(repo)
        base_text = f"# shared\n{CONTESTED}\n# end\n"
        stale = setup.write(repo, None, {SHARED: base_text}, "base")
        setup.integrate(repo, setup.open_proposal(repo, stale)["id"])
        if reviewer_token is not None:
            setup.request("PUT", f"/repos/{repo}/policy", json=APPROVALS_POLICY)
    plan = [
        [Change(agent, index, (agent * changes + index) % conflict_every == 0) for index in range(changes)]
        for agent in range(agents)
    ]

    def agent_loop(own: list[Change]) -> None:
        reviewer = ApiClient(base_url, reviewer_token) if reviewer_token is not None else None
        with ApiClient(base_url, token) as client:
            for change in own:
                try:
                    _land_change(client, repo, change, stale, resolve, reviewer)
                except (ApiFailure, OSError, TimeoutError) as error:
                    change.error = f"{type(error).__name__}: {error}"[:200]
                if on_change is not None:
                    on_change(change)
        if reviewer is not None:
            reviewer.close()

    threads = [threading.Thread(target=agent_loop, args=(own,), daemon=True) for own in plan]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run = LandingRun(agents, changes, time.monotonic() - started, [c for own in plan for c in own], repo=repo)
    with ApiClient(base_url, token) as check:
        shared = check.request("GET", f"/repos/{repo}/files/main/{SHARED}").text
    planned_lines = {f"status: agent {c.agent} change {c.index}" for c in run.changes if c.planned_conflict}
    run.shared_lines_kept = len(planned_lines & set(shared.splitlines()))
    return run


def run_landing_benchmark(
    *,
    agents: int,
    changes: int,
    conflict_every: int = 5,
    server_workers: int = 1,
    url: str | None = None,
    token: str = "",
    on_change: Callable[[Change], None] | None = None,
) -> dict[str, Any]:
    """The scenario against a new embedded deployment (or ``url``); the summary, checked:
    ``failures`` lists what did not hold (a change that did not land, a planned line lost)."""
    shape = {"agents": agents, "changes": changes, "conflict_every": conflict_every, "on_change": on_change}
    if url:
        run = run_landing(url, token, **shape)  # type: ignore[arg-type]
    else:
        with Deployment("embedded") as deployment:
            base_url = deployment.start_server(workers=server_workers)
            token = deployment.create_token("landing", rate=100_000, burst=100_000)
            run = run_landing(base_url, token, **shape)  # type: ignore[arg-type]
    summary = run.summary()
    failures = []
    if summary["landed"] != summary["changes"]:
        failures.append(f"{summary['landed']} of {summary['changes']} changes landed; errors: {summary['errors']}")
    if summary["shared_lines_kept"] != summary["planned_conflicts"]:
        failures.append(f"{SHARED} kept {summary['shared_lines_kept']} of {summary['planned_conflicts']} planned lines")
    return {**summary, "server_workers": server_workers, "failures": failures}


def format_landing(data: dict[str, Any]) -> str:
    """The summary as a two-column table."""
    rows = [
        ("landed", f"{data['landed']} of {data['changes']} ({data['agents']} agents)"),
        ("planned conflicts", f"{data['planned_conflicts']} (resolve calls: {data['resolved_in_calls']})"),
        (f"{SHARED} lines kept", str(data["shared_lines_kept"])),
        ("lands per minute", str(data["lands_per_min"])),
        ("attempts per land", str(data["attempts_per_land"])),
        ("p50 / p99 ms", f"{_ms(data['p50_ms'])} / {_ms(data['p99_ms'])}"),
        ("elapsed s", str(data["elapsed_s"])),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows) + "\n"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"
