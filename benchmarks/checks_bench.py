"""The ``checks`` load scenario: agents land on a stream that requires a check (issue 24).

N agents land ``changes`` changes each on ``main``, whose policy requires ``ci/test``. The check
is the real ``agentgit runner`` (a subprocess, this checkout's client) running
``sh -c 'sleep S; test ! -d bad'``: one change in five writes a file under ``bad/`` and fails it.
A change's time runs from its integrate call to its landing or its refusal. Counted from the
server's record after the run: check runs (the runner's ``finished`` lines), proposals' own
changesets tested, batches (distinct result trees asked for, from the runner's record of each
request) and bisections (a result request whose proposals are a proper prefix of an earlier
one's: a failed batch tested again by halves).

Invariants (a broken one is a problem of the row): every good change landed; no bad change
reached main's history (its log walked, each changeset's tree looked at for ``bad/``); every bad
change was refused with the requirement ``checks``.

No Django here: the server is a :class:`~tests.deployment.Deployment`.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tests.deployment import BASE_DIR, ApiClient, ApiFailure, Process

from .cycle import nearest_rank

CHECK = "ci/test"
#: The server settings of each landing mode, the baseline last.
CHECK_MODES = {
    "speculative": {"AGENTGIT_SPECULATIVE_CHECKS": "1"},
    "batching": {"AGENTGIT_SPECULATIVE_CHECKS": "0"},
    "one at a time": {"AGENTGIT_LANDING_BATCH": "1"},
}
#: Checks the runner runs at once: more than the gate asks of one stream at a time (each queued
#: proposal's own changeset, and a result or two).
RUNNER_JOBS = 64
#: How often a waiting agent asks for its operation: each call is answered at once (``wait=0``)
#: and polled, so 50 waiting agents cost the server 50 reads a second, not 50 held requests
#: polling its database (a decision is seen up to this late, within the figures).
POLL_S = 1.0
#: Times an agent sends a request again after a retryable answer before it gives up.
RESENDS = 5
T = TypeVar("T")


@dataclass
class CheckedChange:
    agent: int
    index: int
    bad: bool
    #: ``fast_forward``/``merge`` (landed) or ``refused``.
    outcome: str | None = None
    #: The unmet requirements of a refusal.
    requirements: list[str] = field(default_factory=list)
    error: str | None = None
    elapsed_ms: float = 0.0
    #: Its changeset (before integration).
    head: str = ""
    #: Requests sent again after a retryable answer.
    resent: int = 0

    @property
    def path(self) -> str:
        return f"{'bad' if self.bad else 'agents'}/{self.agent:02d}-{self.index}.txt"


@dataclass
class CheckRun:
    agents: int
    check_s: float
    elapsed_s: float
    changes: list[CheckedChange]
    runs: int = 0
    #: Requests of a proposal's own changeset (tested beside the results).
    own: int = 0
    batches: int = 0
    bisections: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def landed(self) -> list[CheckedChange]:
        return [c for c in self.changes if c.outcome in ("fast_forward", "merge")]

    @property
    def decided(self) -> list[CheckedChange]:
        """The changes that landed or were refused (not those that failed otherwise)."""
        return [c for c in self.changes if c.outcome is not None]

    @property
    def lands_per_min(self) -> float:
        return len(self.landed) / self.elapsed_s * 60 if self.elapsed_s else 0.0

    def summary(self) -> dict[str, Any]:
        times = sorted(c.elapsed_ms for c in self.decided)
        return {
            "changes": len(self.changes),
            "landed": len(self.landed),
            "refused": sum(1 for c in self.changes if c.outcome == "refused"),
            "bad": sum(1 for c in self.changes if c.bad),
            "check_s": self.check_s,
            "lands_per_min": round(self.lands_per_min, 1),
            "p50_ms": nearest_rank(times, 50),
            "p99_ms": nearest_rank(times, 99),
            "check_runs": self.runs,
            "own_tests": self.own,
            "batches": self.batches,
            "bisections": self.bisections,
            "resent": sum(c.resent for c in self.changes),
        }


def _land(client: ApiClient, repo: str, change: CheckedChange) -> None:
    text = f"agent {change.agent} change {change.index}\n"
    message = f"agent {change.agent} change {change.index}"
    change.head = _again_if_retryable(
        change, lambda: client.write(repo, client.head(repo), {change.path: text}, message)
    )
    proposal = _again_if_retryable(change, lambda: client.open_proposal(repo, change.head)["id"])
    started = time.monotonic()
    while True:
        response = client.request(
            "POST", f"/repos/{repo}/proposals/{proposal}/integrate", json={}, params={"wait": 0},
            expect=(200, 202, 403, 409),
        )  # fmt: skip
        body = response.json()
        if response.status_code == 202:
            body = _settled(client, repo, body["operation"])
        if response.status_code == 409 or body is None:  # aborted (retryable): ask again
            continue
        change.elapsed_ms = (time.monotonic() - started) * 1000
        error = body.get("error") if isinstance(body.get("error"), dict) else None
        if error is None:
            change.outcome = body["outcome"]
        elif error.get("code") == "policy_denied":
            change.outcome = "refused"
            change.requirements = [detail.get("requirement") for detail in error.get("details") or []]
        else:
            change.error = f"{error.get('code')}: {error.get('message')}"[:200]
        return


def _again_if_retryable(change: CheckedChange, call: Callable[[], T]) -> T:
    """``call()``, sent again after a retryable answer (``unavailable``: a database busy past its
    wait), as the client package does; each resend is counted."""
    for attempt in range(RESENDS + 1):
        try:
            return call()
        except ApiFailure as failure:
            if not failure.retryable or attempt == RESENDS:
                raise
            change.resent += 1
            time.sleep(POLL_S)
    raise AssertionError("unreachable")


def _settled(client: ApiClient, repo: str, operation_id: int) -> dict | None:
    """The finished operation's outcome, or ``{"error"}`` when it failed; None when aborted."""
    while True:
        operation = client.operation(repo, operation_id)
        if operation["state"] == "done":
            return operation["outcome"]
        if operation["state"] == "failed":
            error = operation.get("error") or {}
            return None if error.get("retryable") else {"error": error}
        time.sleep(POLL_S)


def start_runner(url: str, token: str, repo: str, check_s: float, scratch: Path) -> Process:
    """``agentgit runner`` for ``repo``, this checkout's client (not whichever is installed)."""
    env = {
        "AGENTGIT_URL": url,
        "AGENTGIT_TOKEN": token,
        "AGENTGIT_REPO": repo,
        "PATH": "/usr/bin:/bin",
        "HOME": str(scratch),
        "PYTHONPATH": str(BASE_DIR / "client"),
    }
    argv = [
        sys.executable, "-c", "from agentgit.cli import main; main()", "runner", "--name", CHECK,
        "--jobs", str(RUNNER_JOBS), "--state", str(scratch / f"{repo}.state.json"), "--json",
        "--", "sh", "-c", f"sleep {check_s:g}; test ! -d bad",
    ]  # fmt: skip
    runner = Process(f"runner-{repo}", argv, env, scratch / f"{repo}.runner.log")
    runner.wait_for_log(r'"event": "following"', 60)
    return runner


def run_checks(
    url: str, token: str, runner_token: str, *, repo: str, agents: int, changes: int, check_s: float, scratch: Path
) -> CheckRun:
    """The scenario on a running server (see the module's docstring), checked."""
    with ApiClient(url, token) as setup:
        setup.create_repo(repo)
        base = setup.write(repo, None, {"README.md": "checks scenario\n"}, "base")
        setup.integrate(repo, setup.open_proposal(repo, base)["id"])
        policy = {"rules": [{"streams": ["main"], "required_checks": [CHECK], "check_timeout_s": 3600}]}
        setup.request("PUT", f"/repos/{repo}/policy", json=policy)
    plan = [
        # One in five, at a different place in each agent's sequence: every wave of changes
        # (the agents' first ones, their second ones, ...) has its share of bad ones.
        [CheckedChange(agent, index, (agent + index) % 5 == 0) for index in range(changes)]
        for agent in range(agents)
    ]
    runner = start_runner(url, runner_token, repo, check_s, scratch)
    try:

        def agent_loop(own: list[CheckedChange]) -> None:
            with ApiClient(url, token) as client:
                for change in own:
                    try:
                        _land(client, repo, change)
                    except (ApiFailure, OSError, TimeoutError) as error:
                        change.error = f"{type(error).__name__}: {error}"[:200]

        threads = [threading.Thread(target=agent_loop, args=(own,), daemon=True) for own in plan]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
    finally:
        runner.stop()
    run = CheckRun(agents, check_s, elapsed, [c for own in plan for c in own])
    log = runner.log()
    run.runs = sum(1 for line in log.splitlines() if line.startswith("{") and '"finished"' in line)
    requests = _requests(log)
    run.own = len({request["tree"] for request in requests if request.get("of") == "proposal"})
    requests = [request for request in requests if request.get("of") != "proposal"]
    with ApiClient(url, token) as client:
        run.batches = len({request["tree"] for request in requests})
        run.bisections = _bisections(requests)
        run.problems = _broken(client, repo, run)
    return run


def _requests(runner_log: str) -> list[dict]:
    """The runner's record of each ``check.requested`` it took up (started or skipped), in order:
    ``of`` says whether it was a result (a batch) or a proposal's own changeset."""
    records = [json.loads(line) for line in runner_log.splitlines() if line.startswith("{")]
    return [record for record in records if record["event"] in ("started", "skipped")]


def _bisections(requests: list[dict]) -> int:
    """Requests whose proposals are a proper prefix of an earlier request's."""
    seen: list[list[int]] = []
    count = 0
    for request in requests:
        proposals = request.get("proposals") or []
        if any(len(proposals) < len(earlier) and earlier[: len(proposals)] == proposals for earlier in seen):
            count += 1
        seen.append(proposals)
    return count


def _broken(client: ApiClient, repo: str, run: CheckRun) -> list[str]:
    problems = []
    good = [c for c in run.changes if not c.bad]
    unlanded = [c for c in good if c not in run.landed]
    if unlanded:
        first = unlanded[0]
        problems.append(
            f"{len(unlanded)} of {len(good)} good changes did not land; the first: {first.path}"
            f" {first.outcome or first.error} {first.requirements}"
        )
    history = client.history(repo, "main")
    reached = [changeset for changeset in history if _has_bad(client, repo, changeset)]
    control = next((c for c in run.changes if c.bad and c.head), None)
    if control is not None and not _has_bad(client, repo, control.head):  # the probe itself works
        problems.append(f"the probe for bad/ does not find it in a bad change's own changeset {control.head}")
    if reached:
        problems.append(f"bad/ is in {len(reached)} of main's {len(history)} changesets, the first {reached[0]}")
    unrefused = [c for c in run.changes if c.bad and (c.outcome != "refused" or c.requirements != ["checks"])]
    if unrefused:
        first = unrefused[0]
        problems.append(
            f"{len(unrefused)} bad changes were not refused for checks alone; the first: {first.path}"
            f" {first.outcome or first.error} {first.requirements}"
        )
    return problems


def _has_bad(client: ApiClient, repo: str, changeset: str) -> bool:
    answer = client.request("GET", f"/repos/{repo}/tree/{changeset}", params={"path": "bad"}, expect=(200, 404))
    return answer.status_code == 200
