"""``agentgit runner`` end to end: a real server whose main requires ``ci/test``, the runner as a
subprocess, agents landing through the client. The command records each tree it runs on (in
``$RUNS``, outside the checkout) so the tests count runs exactly."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from agentgit import Client, PolicyDenied, write
from tests.deployment import Process

#: Fails when the tree has a BAD file; checks the checkout's modes and symlink first.
CHECK = 'echo "$AGENTGIT_CHECK_TREE" >> "$RUNS"; test -x tool.sh && test -L link && test ! -e BAD'


@pytest.fixture
def guarded(server, repo):
    """``repo`` with a first changeset (an executable, a symlink, a nested file) on main and a
    policy requiring ``ci/test`` on main and dev; the agent's client."""
    client = Client(server.url, server.token)
    client.land(
        repo,
        "main",
        [
            write("tool.sh", "#!/bin/sh\necho tool\n", mode="100755"),
            write("link", "tool.sh", mode="120000"),
            write("src/deep/file.txt", "deep\n"),
        ],
        "base",
    )
    client.create_stream(repo, "dev", client.get_stream(repo, "main").head)
    rule = {"streams": ["main", "dev"], "required_checks": ["ci/test"], "check_timeout_s": 300}
    client.set_policy(repo, {"rules": [rule]})
    yield client
    client.close()


class RunnerProcess:
    """``agentgit runner`` as a subprocess (its own process group), its stderr in a log."""

    def __init__(self, server, repo: str, tmp_path: Path, *args: str, command: str = CHECK, tag: str = "") -> None:
        script = Path(sys.executable).parent / "agentgit"
        self.state = tmp_path / "state.json"
        self.runs = tmp_path / "runs"
        env = {
            "AGENTGIT_URL": server.url,
            "AGENTGIT_TOKEN": server.token_for("read,checks"),
            "AGENTGIT_REPO": repo,
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "RUNS": str(self.runs),
            "SYNC": str(tmp_path / "sync"),
        }
        if "PYTHONPATH" in os.environ:  # the client package under test, where it is not the one installed
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        argv = [str(script), "runner", "--name", "ci/test", "--state", str(self.state), "--json", *args]
        self.process = Process(f"runner{tag}", [*argv, "--", "sh", "-c", command], env, tmp_path / f"runner{tag}.log")
        self.process.wait_for_log(r'"event": "following"', 60)

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.process.log().splitlines() if line.startswith("{")]

    def ran(self) -> list[str]:
        """The trees the command ran on, in order."""
        return self.runs.read_text().split() if self.runs.exists() else []

    def stop(self) -> None:
        self.process.stop()


@pytest.fixture
def start_runner(server, repo, tmp_path):
    started: list[RunnerProcess] = []

    def start(*args: str, **options) -> RunnerProcess:
        runner = RunnerProcess(server, repo, tmp_path, *args, tag=str(len(started)), **options)
        started.append(runner)
        return runner

    yield start
    for runner in started:
        runner.stop()


def land_in_thread(client: Client, repo: str, stream: str, path: str) -> tuple[threading.Thread, list]:
    """Land a change writing ``path`` from a thread; the list gets its Landing or its error."""
    into: list = []

    def run() -> None:
        try:
            into.append(client.land(repo, stream, [write(path, f"{stream} {path}\n")], f"write {path}"))
        except Exception as error:  # the test reads it
            into.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, into


def test_the_good_change_lands_and_the_bad_one_is_refused_naming_the_check(guarded, repo, start_runner):
    runner = start_runner()
    good = guarded.land(repo, "main", [write("good.txt", "good\n")], "good")
    assert good.outcome == "fast_forward"
    with pytest.raises(PolicyDenied) as refused:
        guarded.land(repo, "main", [write("BAD", "bad\n")], "bad")
    [unmet] = refused.value.requirements
    assert unmet["requirement"] == "checks" and "ci/test" in unmet["message"]
    assert guarded.get_stream(repo, "main").head == good.stream_head
    tested = guarded.api("GET", f"/repos/{repo}/checks", params={"changeset": good.stream_head})
    [result] = tested["checks"]
    assert result["name"] == "ci/test" and result["state"] == "success"
    finished = {r["tree"]: r for r in runner.records() if r["event"] == "finished"}
    assert finished[tested["tree"]]["state"] == "success" and finished[tested["tree"]]["exit"] == 0
    assert [r["state"] for r in finished.values()] == ["success", "failure"]
    assert sorted(runner.ran()) == sorted(finished)
    failed = guarded.api("GET", f"/repos/{repo}/checks", params={"tree": runner.ran()[1]})["checks"][0]
    assert failed["state"] == "failure" and failed["summary"].startswith("exit 1 after")


def test_a_killed_runner_resumes_without_running_a_tree_twice(guarded, repo, start_runner, tmp_path):
    first = start_runner()
    assert guarded.land(repo, "main", [write("one.txt", "1\n")], "one").outcome == "fast_forward"
    first.process.wait_for_log(r'"event": "finished"', 60)
    first.process.kill()
    thread, landed = land_in_thread(guarded, repo, "main", "two.txt")  # asked while no runner runs
    second = start_runner()
    thread.join(120)
    assert landed and landed[0].outcome == "fast_forward", landed
    assert len(second.ran()) == 2 and len(set(second.ran())) == 2  # one.txt's tree was not run again
    assert [r["event"] for r in second.records() if "tree" in r] == ["started", "finished"]
    second.stop()
    # A runner with no record of them reads the feed from its start: both trees are final, skipped.
    (tmp_path / "state.json").unlink()
    third = start_runner()
    third.process.wait_for_log(r'(?s)"skipped".*"skipped"', 60)
    assert len(third.ran()) == 2
    assert {r["reason"] for r in third.records() if r["event"] == "skipped"} == {"already success"}


def test_two_jobs_run_two_checks_at_once(guarded, repo, start_runner, tmp_path):
    (tmp_path / "sync").mkdir()
    # Each run waits (at most a minute) until two runs have started: one at a time, both fail.
    together = (
        'touch "$SYNC/$AGENTGIT_CHECK_TREE"; i=0; '
        'while [ "$(ls "$SYNC" | wc -l)" -lt 2 ]; do i=$((i+1)); [ $i -gt 600 ] && exit 1; sleep 0.1; done'
    )
    start_runner("--jobs", "2", command=together)
    landings = [land_in_thread(guarded, repo, stream, f"{stream}.txt") for stream in ("main", "dev")]
    for thread, _ in landings:
        thread.join(120)
    assert [into[0].outcome for _, into in landings] == ["fast_forward", "fast_forward"], landings


def test_a_command_past_the_timeout_is_killed_with_its_group_and_reported_as_error(
    guarded, repo, start_runner, tmp_path
):
    pid_file = tmp_path / "sleeper"  # written at once; 5 s leave room for a loaded machine
    runner = start_runner("--timeout", "5", command=f"sleep 600 & echo $! > {pid_file}; wait")
    with pytest.raises(PolicyDenied) as refused:
        guarded.land(repo, "main", [write("slow.txt", "slow\n")], "slow")
    assert refused.value.requirements[0]["requirement"] == "checks"
    # The runner reports the error before it writes its own record of the run: wait for the record.
    deadline = time.monotonic() + 30
    while not (finished_runs := [r for r in runner.records() if r["event"] == "finished"]):
        assert time.monotonic() < deadline, runner.records()
        time.sleep(0.1)
    [finished] = finished_runs
    assert finished["state"] == "error" and finished["exit"] == -9
    [result] = guarded.api("GET", f"/repos/{repo}/checks", params={"tree": finished["tree"]})["checks"]
    assert result["state"] == "error" and result["summary"].startswith("timed out after 5 s")
    assert not alive(int(pid_file.read_text()))  # the command's background child went with it


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie, killed and not yet reaped by init, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
