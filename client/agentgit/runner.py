"""``agentgit runner``: run a command on each tree the landing queue asks a check of, and report it.

The landing queue of a stream whose policy requires checks asks for them with a
``check.requested`` event ``{"tree", "names", "changeset", "stream", "proposals", "of"}`` and a
``pending`` result per name (repos/services/gate.py). The runner follows the repository's feed
for the requests that name its check and, for each (``--jobs`` at once):

1. skips the tree if it ran it already (its state file) or the server has a final result of its
   name on it (a rebase that kept the tree, another runner);
2. materialises the changeset in a temporary directory with git (the server's smart HTTP serves
   any object by id): fetched into a bare object cache beside the state file, so each fetch
   sends only the objects the cache lacks, then checked out by ``read-tree`` and
   ``checkout-index`` with an index of its own: modes, executable bits and symlinks as git checks
   them out, no ``.git`` in the directory (the tested code cannot reach the cache's hooks), and
   git streams, so memory stays bounded;
3. reports ``pending`` (which restarts the gate's timeout for the run), runs the command there
   in a process group of its own, without a shell, with ``AGENTGIT_CHECK_TREE``,
   ``AGENTGIT_CHECK_CHANGESET`` and ``AGENTGIT_CHECK_NAME`` set and ``AGENTGIT_TOKEN`` removed
   (the tested code must not be able to report its own success), its output merged into a file;
4. reports ``success`` (exit 0), ``failure`` (another exit) or ``error`` (past ``--timeout``: the
   process group is killed; or the tree could not be materialised), with the output's last
   :data:`SUMMARY_BYTES` as the summary.

The state file keeps the feed's position and the trees run. The position is a low-water mark:
the last event id before which every request was finished and reported, so a runner killed in
the middle of a run reads that request again when it restarts and runs the tree again, the run
having never finished (its result is still ``pending``: without the rerun the landing would wait
for the policy's ``check_timeout_s``). A tree whose run finished is never run again. A runner
without a state file reads the feed from its start: requests made before it was started (say,
agents landing before the runner came up) are run, the ones already answered skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._sync import Client
from .errors import AgentGitError, ApiError, Forbidden, NotFound, TransportError, Unauthenticated
from .types import Event

CHECK_REQUESTED = "check.requested"
FINAL_STATES = ("success", "failure", "error")
#: The server's rule for check names (repos/services/checks.py).
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$")
#: The summary is at most this long: the server keeps 64 Ki characters of it.
SUMMARY_BYTES = 64 * 1024
#: The state file remembers this many trees run (the most recent).
REMEMBERED_TREES = 10_000
#: Waits between attempts when the server cannot be reached, growing to the last.
RECONNECT_S = (1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class Settings:
    repo: str
    name: str
    command: tuple[str, ...]
    jobs: int
    timeout_s: float
    state_path: Path
    as_json: bool


def default_state_path(url: str, repo: str, name: str) -> Path:
    """``$XDG_CACHE_HOME/agentgit/runner/<repo>-<name>-<hash>.json`` (``~/.cache`` by default):
    one per server, repository and check."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha256(f"{url}\0{repo}\0{name}".encode()).hexdigest()[:12]
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", f"{repo}-{name}")
    return cache / "agentgit" / "runner" / f"{readable}-{digest}.json"


class State:
    """The state file: ``{"after": event id | null, "trees": {tree: "started" | final state}}``,
    replaced atomically on each change (a crash leaves the old one or the new one)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.after: int | None = None
        self.trees: dict[str, str] = {}
        self._lock = threading.Lock()
        if path.exists():
            doc = json.loads(path.read_text())
            self.after = doc.get("after")
            self.trees = dict(doc.get("trees") or {})

    def finished(self, tree: str) -> bool:
        with self._lock:
            return self.trees.get(tree) in FINAL_STATES

    def record(self, tree: str, state: str) -> None:
        with self._lock:
            self.trees.pop(tree, None)  # re-inserted last: the dict's order is the trees' age
            self.trees[tree] = state
            for old in list(self.trees)[: max(0, len(self.trees) - REMEMBERED_TREES)]:
                del self.trees[old]
            self._save()

    def advance(self, after: int) -> None:
        with self._lock:
            if after != self.after:
                self.after = after
                self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(self.path.name + ".tmp")
        with temporary.open("w") as file:
            json.dump({"after": self.after, "trees": self.trees}, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.path)


class Position:
    """The feed's low-water mark: the greatest id before which every request is finished."""

    def __init__(self, after: int | None) -> None:
        self.seen = after
        self.open: set[int] = set()

    def start(self, event_id: int) -> None:
        self.open.add(event_id)
        self.seen = max(self.seen or 0, event_id)

    def finish(self, event_id: int) -> int | None:
        self.open.discard(event_id)
        return min(self.open) - 1 if self.open else self.seen


@dataclass(frozen=True)
class Request:
    event: int
    tree: str
    changeset: str
    #: The queued proposals the tree is the result of, in order (what the gate said).
    proposals: tuple[int, ...] = ()
    #: ``result`` (what would land) or ``proposal`` (a queued proposal's own changeset).
    of: str = "result"


class Runner:
    """Follows the feed and runs the checks (``run`` returns only when stopped)."""

    def __init__(self, client: Client, settings: Settings, echo: Callable[[str], None]) -> None:
        self.client, self.settings, self._echo = client, settings, echo
        self.state = State(settings.state_path)
        self.position = Position(self.state.after)
        self.cache = settings.state_path.with_name(settings.state_path.name + ".objects")
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._running: dict[str, int] = {}  # tree -> event id, while it runs
        self._groups: set[int] = set()  # the commands' process groups
        self._feed = Client(client.config.url, client.config.token, retries=client.config.retries)

    # -- the feed ------------------------------------------------------------------------

    def run(self) -> None:
        self._init_cache()
        with ThreadPoolExecutor(max_workers=self.settings.jobs, thread_name_prefix="check") as pool:
            try:
                failures = 0
                while not self.stopping.is_set():
                    try:
                        for event in self._events():
                            failures = 0
                            self._dispatch(pool, event)
                    except (TransportError, ApiError) as error:
                        if isinstance(error, (Unauthenticated, Forbidden, NotFound)):
                            raise
                        if not self._resume_after_pruned(error):
                            wait = RECONNECT_S[min(failures, len(RECONNECT_S) - 1)]
                            failures += 1
                            self.progress("feed", error=str(error), retry_in_s=wait)
                            self.stopping.wait(wait)
            finally:
                self.stop()
                pool.shutdown(wait=True, cancel_futures=True)
                self._feed.close()

    def _events(self):
        with self._lock:
            after = self.position.seen
        return self._feed.events(self.settings.repo, after=after, kinds=[CHECK_REQUESTED])

    def _resume_after_pruned(self, error: AgentGitError) -> bool:
        """The feed's position was pruned (400 with ``first_available``): go on from there."""
        first = next(
            (d.get("first_available") for d in getattr(error, "details", []) or [] if isinstance(d, dict)), None
        )
        if not isinstance(first, int):
            return False
        with self._lock:
            self.position.seen = first - 1
        self.progress("feed", error=f"events up to {first - 1} were pruned: resuming from {first}")
        return True

    def _dispatch(self, pool: ThreadPoolExecutor, event: Event) -> None:
        data = event.data
        names, tree, changeset = data.get("names") or [], data.get("tree"), data.get("changeset")
        with self._lock:
            self.position.start(event.id)
        if self.settings.name not in names or not isinstance(tree, str) or not isinstance(changeset, str):
            self._finish(event.id)
            return
        proposals = tuple(p for p in data.get("proposals") or [] if isinstance(p, int))
        of = data.get("of") if data.get("of") in ("result", "proposal") else "result"
        pool.submit(self._guarded, Request(event.id, tree, changeset, proposals, of))

    def _finish(self, event_id: int) -> None:
        with self._lock:
            after = self.position.finish(event_id)
        if after is not None:
            self.state.advance(after)

    def stop(self) -> None:
        """Stop: no new run, the running commands killed, nothing more reported."""
        self.stopping.set()
        with self._lock:
            groups = list(self._groups)
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)

    # -- one check -------------------------------------------------------------------------

    def _guarded(self, request: Request) -> None:
        try:
            finished = self._check(request)
        except Exception as error:  # a runner outlives one check's surprise: said, and reported
            text = f"{type(error).__name__}: {error}"
            self.progress("crashed", request, error=text)
            with contextlib.suppress(AgentGitError):
                self._report(request, "error", f"the runner failed: {text}"[:SUMMARY_BYTES])
            finished = True
        if finished and not self.stopping.is_set():
            self._finish(request.event)

    def _check(self, request: Request) -> bool:
        """Run the check on the request's tree unless it ran; whether the request is finished."""
        if self.stopping.is_set():
            return False
        with self._lock:
            if request.tree in self._running:  # asked again while it runs: that run answers
                return True
            self._running[request.tree] = request.event
        try:
            if self.state.finished(request.tree):
                self.progress("skipped", request, reason="ran it already")
                return True
            known = self._known_state(request)
            if known in FINAL_STATES:
                self.state.record(request.tree, known)
                self.progress("skipped", request, reason=f"already {known}")
                return True
            self.state.record(request.tree, "started")
            state, summary, exit_code, seconds = self._execute(request)
            if self.stopping.is_set():
                return False
            self._report(request, state, summary)
            self.state.record(request.tree, state)
            self.progress("finished", request, state=state, exit=exit_code, seconds=round(seconds, 2))
            return True
        finally:
            with self._lock:
                self._running.pop(request.tree, None)

    def _known_state(self, request: Request) -> str | None:
        answer = self._with_retries(
            lambda: self.client.api("GET", f"/repos/{self.settings.repo}/checks", params={"tree": request.tree})
        )
        for result in answer.get("checks") or []:
            if result.get("name") == self.settings.name:
                return result.get("state")
        return None

    def _execute(self, request: Request) -> tuple[str, str, int | None, float]:
        """(state, summary, exit code, seconds) of the command on the request's tree."""
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="agentgit-check-") as scratch:
            workdir = Path(scratch) / "tree"
            try:
                self._materialise(request.changeset, Path(scratch))
            except subprocess.CalledProcessError as error:
                detail = (error.stderr or b"").decode("utf-8", "replace")[-SUMMARY_BYTES // 2 :]
                self.progress("started", request)
                return "error", f"could not check out {request.changeset}:\n{detail}", None, time.monotonic() - started
            self._report(request, "pending", f"running {' '.join(self.settings.command)}"[:1000])
            self.progress("started", request)
            log_path = Path(scratch) / "output"
            with log_path.open("w+b") as log:
                exit_code, timed_out = self._run_command(request, workdir, log)
                seconds = time.monotonic() - started
                if timed_out:
                    head = f"timed out after {self.settings.timeout_s:g} s: the process group was killed"
                    return "error", summarise(head, log), exit_code, seconds
                state = "success" if exit_code == 0 else "failure"
                return state, summarise(f"exit {exit_code} after {seconds:.1f} s", log), exit_code, seconds

    def _run_command(self, request: Request, workdir: Path, log: Any) -> tuple[int | None, bool]:
        env = {k: v for k, v in os.environ.items() if k != "AGENTGIT_TOKEN"}
        env.update(
            AGENTGIT_CHECK_TREE=request.tree,
            AGENTGIT_CHECK_CHANGESET=request.changeset,
            AGENTGIT_CHECK_NAME=self.settings.name,
        )
        try:
            process = subprocess.Popen(
                self.settings.command,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, killed whole on the timeout
            )
        except OSError as error:
            log.write(f"cannot run {self.settings.command[0]}: {error}\n".encode())
            return 127, False
        with self._lock:
            self._groups.add(process.pid)
        try:
            try:
                return process.wait(timeout=self.settings.timeout_s), False
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                return process.wait(), True
        finally:
            with self._lock:
                self._groups.discard(process.pid)
            # What the command left behind in its group (a background job) goes with it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)

    # -- git -------------------------------------------------------------------------------

    def _git_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env["GIT_TERMINAL_PROMPT"] = "0"
        token = self.client.config.token
        if token:  # in the environment, not on a command line others can read
            env.update(
                GIT_CONFIG_COUNT="1",
                GIT_CONFIG_KEY_0="http.extraHeader",
                GIT_CONFIG_VALUE_0=f"Authorization: Bearer {token}",
            )
        return env

    def _git(self, *args: str, env: dict[str, str] | None = None) -> None:
        subprocess.run(
            ["git", f"--git-dir={self.cache}", *args],
            env={**self._git_env(), **(env or {})},
            check=True,
            capture_output=True,
            stdin=subprocess.DEVNULL,
        )

    def _init_cache(self) -> None:
        if not (self.cache / "HEAD").exists():
            self.cache.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "init", "--bare", "-q", str(self.cache)], check=True, capture_output=True)

    def git_url(self) -> str:
        base = self.client.config.url.removesuffix("/api/v1")
        return f"{base}/git/{self.settings.repo}.git"

    def _materialise(self, changeset: str, scratch: Path) -> None:
        """The changeset's tree in ``scratch/tree`` (see the module's docstring)."""
        ref = f"refs/runner/{changeset}"
        self._git("fetch", "-q", "--no-tags", "--no-write-fetch-head", self.git_url(), f"+{changeset}:{ref}")
        workdir = scratch / "tree"
        workdir.mkdir()
        index = {"GIT_INDEX_FILE": str(scratch / "index")}
        self._git(f"--work-tree={workdir}", "read-tree", changeset, env=index)
        self._git(f"--work-tree={workdir}", "checkout-index", "--all", "--quiet", env=index)
        # One ref keeps the objects fetched last, the next fetch's "have"; a concurrent update
        # losing its lock loses nothing.
        with contextlib.suppress(subprocess.CalledProcessError):
            self._git("update-ref", "refs/runner/last", changeset)
        with contextlib.suppress(subprocess.CalledProcessError):
            self._git("update-ref", "-d", ref)

    # -- the server ------------------------------------------------------------------------

    def _report(self, request: Request, state: str, summary: str) -> None:
        body = {"changeset": request.changeset, "name": self.settings.name, "state": state, "summary": summary}
        self._with_retries(lambda: self.client.api("POST", f"/repos/{self.settings.repo}/checks", json=body))

    def _with_retries(self, call: Callable[[], Any]) -> Any:
        """``call()``, again while the server cannot be reached (the client's own retries spent),
        until it answers or the runner stops."""
        failures = 0
        while True:
            try:
                return call()
            except AgentGitError as error:
                retryable = isinstance(error, TransportError) or (isinstance(error, ApiError) and error.retryable)
                if not retryable or self.stopping.is_set():
                    raise
                wait = RECONNECT_S[min(failures, len(RECONNECT_S) - 1)]
                failures += 1
                self.stopping.wait(wait)

    # -- progress --------------------------------------------------------------------------

    def progress(self, what: str, request: Request | None = None, **facts: Any) -> None:
        """One line on standard error: text, or a JSON object with ``--json``."""
        record: dict[str, Any] = {"event": what, "name": self.settings.name}
        if request is not None:
            record.update(
                tree=request.tree,
                changeset=request.changeset,
                request=request.event,
                proposals=list(request.proposals),
                of=request.of,
            )
        record.update(facts)
        if self.settings.as_json:
            self._echo(json.dumps(record, sort_keys=True))
            return
        text = f"{what} {self.settings.name}"
        if request is not None:
            text += f" tree {request.tree[:12]} changeset {request.changeset[:12]}"
        text += "".join(f" {key} {value}" for key, value in facts.items())
        self._echo(text)


def summarise(head: str, log: Any) -> str:
    """``head`` and the output's tail, within :data:`SUMMARY_BYTES` (NULs, which the server
    refuses, shown as U+FFFD)."""
    room = SUMMARY_BYTES - len(head.encode()) - 64
    size = log.seek(0, os.SEEK_END)
    log.seek(max(0, size - room))
    tail = log.read(room).decode("utf-8", "replace").replace("\x00", "\ufffd")
    cut = f" (the last {room} of {size} bytes)" if size > room else ""
    return f"{head}; output{cut}:\n{tail}" if size else f"{head}; no output"


def check_settings(name: str, jobs: int, timeout_s: float, command: Sequence[str]) -> str | None:
    """What is wrong with the options, if anything."""
    if not NAME_PATTERN.match(name):
        return f"--name {name!r}: 1-100 letters, digits, '.', '_', '/' or '-', starting with a letter or digit"
    if jobs < 1:
        return "--jobs is at least 1"
    if timeout_s <= 0:
        return "--timeout is a positive number of seconds"
    if not command:
        return "give the command after --: agentgit runner ... -- make test"
    if shutil.which("git") is None:
        return "the runner checks trees out with git, which is not installed"
    return None


def install_stop_signals(runner: Runner) -> None:
    """SIGTERM and SIGINT stop the runner: its commands killed, their requests left for a restart."""

    def stop(signum: int, _frame: Any) -> None:
        runner.stop()
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)


def echo_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
