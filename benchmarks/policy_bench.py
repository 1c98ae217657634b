"""``agentgit_bench policy``: what judging a landing by the repository's policy costs the server.

Two repositories of the same content on one embedded server (``--files`` files in directories of
100, and a CODEOWNERS file of ``--owners-lines`` lines, one per directory plus ``*``), filled by
one ``git push``. One has no policy; the other asks one approval and the code owners' approval
(``required_approvals: 1, code_owners: true``). Then ``--landings`` one-file changes land on each,
interleaved in rounds so that drift of the machine touches both alike: write the changeset, open
the proposal, approve it (on the guarded repository; not measured), and integrate it. The
server's CPU (every process of the deployment, from /proc) is read around each integrate call
alone, and summed per repository: its difference per landing is what the judgment costs (the
merge base and the changed paths, the reviews and the authors read, CODEOWNERS looked up for each
changed path, the decision written). A landing of the guarded repository must record a decision
with its owner's approval, or the run fails.

The goal (issue 23): at most 1 ms of server CPU per landing at 100 000 files and 1 000
CODEOWNERS lines. The CPU counters tick every 10 ms, so the figure is a sum over many landings.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.deployment import ApiClient, Deployment

DEFAULT_FILES = 100_000
DEFAULT_OWNERS_LINES = 1000
DEFAULT_LANDINGS = 200
#: Landings per repository in a round (the two alternate round after round).
ROUND = 10
#: Landings per repository before the measured ones.
WARM_UP = ROUND
REVIEWER = "owner"
POLICY = {"rules": [{"streams": ["main"], "required_approvals": 1, "code_owners": True}]}


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise AssertionError(f"git {' '.join(args[:2])} failed: {done.stderr[-2000:]}")
    return done.stdout


def build_content(work: Path, files: int, owners_lines: int) -> Path:
    """A git work tree with ``files`` files (100 per directory) and a CODEOWNERS file."""
    tree = work / "content"
    tree.mkdir()
    directories = max(1, files // 100)
    for index in range(files):
        folder = tree / f"d{index % directories:05d}"
        if index < directories:
            folder.mkdir()
        (folder / f"f{index // directories}.txt").write_text(f"file {index}\n")
    lines = [f"* @{REVIEWER}"] + [f"/d{index % directories:05d}/ @{REVIEWER}" for index in range(owners_lines - 1)]
    (tree / "CODEOWNERS").write_text("\n".join(lines) + "\n")
    _git(tree, "init", "-q", "-b", "main")
    _git(tree, "add", "-A")
    _git(tree, "-c", "user.name=Bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m", "content")
    return tree


def run_policy_benchmark(
    *, files: int, owners_lines: int, landings: int, log: Callable[[str], None] = lambda text: None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch, Deployment("embedded") as deployment:
        log(f"building {files} files and {owners_lines} CODEOWNERS lines")
        content = build_content(Path(scratch), files, owners_lines)
        base_url = deployment.start_server(workers=1)
        admin_token = deployment.create_token("bench-admin", rate=100_000, burst=100_000)
        agent_token = deployment.create_token("bench-agent", "read,write,integrate", rate=100_000, burst=100_000)
        reviewer_token = deployment.create_token(REVIEWER, "read,review", rate=100_000, burst=100_000)
        repos = {"no policy": "plain", "approvals and code owners": "guarded"}
        with ApiClient(base_url, admin_token) as admin:
            for name in repos.values():
                admin.create_repo(name)
                log(f"pushing the content to {name}")
                host = base_url.removeprefix("http://")
                _git(content, "push", "-q", f"http://bench:{admin_token}@{host}/git/{name}.git", "HEAD:refs/heads/main")
            admin.request("PUT", "/repos/guarded/policy", json=POLICY)
        log("waiting for the server to be idle (the pushes' derived data)")
        _wait_idle(deployment)
        cpu = dict.fromkeys(repos.values(), 0.0)
        done = dict.fromkeys(repos.values(), 0)
        directories = max(1, files // 100)
        started = time.monotonic()
        with ApiClient(base_url, agent_token) as agent, ApiClient(base_url, reviewer_token) as reviewer:
            # A round each first, not counted: every process has compiled its queries and read its caches.
            while min(done.values()) < landings + WARM_UP:
                for name in repos.values():
                    for _ in range(min(ROUND, landings + WARM_UP - done[name])):
                        number = done[name]
                        path = f"d{(number * 7) % directories:05d}/f0.txt"
                        head = agent.write(name, agent.head(name), {path: f"change {number}\n"}, f"change {number}")
                        proposal = agent.open_proposal(name, head)["id"]
                        if name == "guarded":
                            reviewer.request(
                                "POST", f"/repos/{name}/proposals/{proposal}/reviews", json={"verdict": "approve"},
                                expect=(201,),
                            )  # fmt: skip
                        before = deployment.cpu_seconds()
                        outcome = agent.integrate(name, proposal)
                        if number >= WARM_UP:
                            cpu[name] += deployment.cpu_seconds() - before
                        if outcome["outcome"] != "fast_forward":
                            raise AssertionError(f"{name}: change {number} answered {outcome}")
                        if name == "guarded":
                            _check_decision(agent.proposal(name, proposal), path)
                        done[name] += 1
                log(f"{min(done.values())} of {landings} landings each")
        elapsed = time.monotonic() - started
    per_landing = {name: cpu[name] / landings * 1000 for name in repos.values()}
    added = per_landing["guarded"] - per_landing["plain"]
    return {
        "files": files,
        "owners_lines": owners_lines,
        "landings": landings,
        "elapsed_s": round(elapsed, 1),
        "rows": [
            {"repository": label, "server_cpu_ms_per_landing": round(per_landing[name], 2)}
            for label, name in repos.items()
        ],
        "judgment_cpu_ms_per_landing": round(added, 2),
        "goal_ms": 1.0,
    }


def _wait_idle(deployment: Deployment, timeout_s: float = 300) -> None:
    """Until the deployment's processes use less than 2 % of a core over a second."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = deployment.cpu_seconds()
        time.sleep(1.0)
        if deployment.cpu_seconds() - before < 0.02:
            return


def _check_decision(proposal: dict, path: str) -> None:
    decision = proposal.get("decision") or {}
    owned = {item["path"]: item["approved_by"] for item in decision.get("owners", [])}
    if not decision.get("allowed") or decision.get("approvals") != [REVIEWER] or owned.get(path) != [REVIEWER]:
        raise AssertionError(f"proposal {proposal['id']} landed without the decision it needs: {decision}")


def format_policy(data: dict[str, Any]) -> str:
    width = max(len(row["repository"]) for row in data["rows"])
    lines = [
        f"{data['files']} files, {data['owners_lines']} CODEOWNERS lines, {data['landings']} landings each",
        f"{'repository':<{width}}  server CPU per landing (integrate call)",
    ]
    lines += [f"{row['repository']:<{width}}  {row['server_cpu_ms_per_landing']:.2f} ms" for row in data["rows"]]
    lines.append(
        f"the judgment adds {data['judgment_cpu_ms_per_landing']:.2f} ms per landing (goal: at most {data['goal_ms']:g} ms)"
    )
    return "\n".join(lines) + "\n"
