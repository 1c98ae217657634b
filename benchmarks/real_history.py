"""``agentgit_bench history --source DIR``: a real repository, imported and served, beside git and cgit (issue 35).

On the local git repository DIR (a bare clone of a real project: git.git, Flask) it:

* **imports** it into a real embedded deployment (tests.deployment) with ``manage.py
  agentgit_import`` in a child process, timed beside what git needs to copy and read the same
  history (``git clone --bare --no-local`` plus ``git log --raw`` of the branch), with the child's
  peak RSS (``wait4``'s ``ru_maxrss``: the import process or a git it ran, the larger);
* times each **read** through the REST API of the running server beside git's command on git's copy
  (process start included on git's side), sample by sample in turn, medians: the log's first page
  (50), the ``--path`` log's first page of a few long-lived files, blame (``git blame
  --first-parent``), a diff across 500 first-parent changesets (``git diff -M --patch-with-raw``: our
  endpoint answers the changes and the patch), the root tree (``git ls-tree``) and a file
  (``git cat-file -p REV:PATH``);
* times the **web UI's** log, blame, changeset and tree pages (a logged-in session, through the
  same server) beside cgit's same pages, cgit run as a CGI with no cache (``make cgit``): its binary
  executed with the CGI environment, once per request, as a web server runs a CGI. Both sides are
  timed from the request to the last byte of the page;
* a **clone** over smart HTTP beside ``git clone --no-local`` of git's copy (both ``--bare``: the
  checkout is the client's and the same on both sides), time and the bytes of the received pack;
  a **fetch after a landing** (one one-file landing on each side, then ``git fetch``); a **one-file
  landing** (``POST .../streams/BRANCH/land``) on the imported stream beside the same on a repository
  of about 1 000 commits (the same project's history cut at its first-parent changeset with ~1 000
  ancestors, imported alongside);
* **checks** that every answer equals git's: the log's order, the changed paths with renames,
  file bytes, tree entries; a mismatch fails the row (and the command, after the table). Blame's
  agreement with ``git blame --first-parent`` is reported as a count of lines.

Every read names the branch's tip by its id on both sides, so landings of earlier runs (with
``--data-dir``, which keeps the deployment and its import between runs) do not change what is read.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from engine.objects import path_from_bytes
from tests.deployment import BASE_DIR, ApiClient, Deployment, web_session

from .report import format_ms, text_table

CGIT = Path("/usr/lib/cgit/cgit.cgi")
REPO = "real"
SMALL_REPO = "real-1000"
SMALL_COMMITS = 1_000
DIFF_SPAN = 500
LOG_PAGE = 50
DEFAULT_SAMPLES = 5
DEFAULT_PATHS = 3
WEB_USER = "history-bench"
#: Where a reused data directory keeps the figures of the import it holds.
IMPORT_RECORD = "history-bench-import.json"
TIMEOUT_S = 3600.0

#: The goals of issue 35: ours over the reference, at most.
IMPORT_GOAL = 1.5
READ_GOAL = 1.5
BLAME_GOAL = 1.0
PAGE_GOAL = 1.0
CLONE_GOAL = 1.2
CLONE_BYTES_GOAL = 1.05
LANDING_GOAL = 2.0

Log = Callable[[str], None]


@dataclass
class Row:
    figure: str
    #: What ours is compared with (a git command, a cgit page, the small repository's landing).
    against: str
    ours_ms: float
    theirs_ms: float
    goal: float | None
    samples: int = 1
    detail: str = ""
    #: Why the answer is wrong ("" when it equals git's); a failed row fails the run.
    failure: str = ""

    @property
    def ratio(self) -> float:
        return self.ours_ms / self.theirs_ms if self.theirs_ms else float("inf")

    @property
    def met(self) -> bool | None:
        return None if self.goal is None else self.ratio <= self.goal


@dataclass
class RealRun:
    source: str
    branch: str
    tip: str
    commits: int
    files: int
    rows: list[Row] = field(default_factory=list)
    #: The import: ms, peak RSS, changesets; ``reused`` when it comes from an earlier run's record.
    imported: dict[str, Any] = field(default_factory=dict)
    conditions: dict[str, Any] = field(default_factory=dict)

    @property
    def failures(self) -> list[str]:
        return [f"{row.figure}: {row.failure}" for row in self.rows if row.failure]


# ------------------------------------------------------------------------------ processes


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "HOME": os.fspath(home), "GIT_TERMINAL_PROMPT": "0"})
    env.update({"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com"})
    env.update({"GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"})
    return env


class Git:
    """git on one repository, with a clean environment (no user or system configuration)."""

    def __init__(self, path: Path, home: Path) -> None:
        self.path, self.env = path, _env(home)

    def argv(self, *args: str) -> list[str]:
        return ["git", "--git-dir", os.fspath(self.path), *args]

    def run(self, *args: str, input: bytes | None = None) -> bytes:
        done = subprocess.run(self.argv(*args), input=input, capture_output=True, env=self.env)
        if done.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)}: {done.stderr.decode(errors='replace')}")
        return done.stdout

    def text(self, *args: str) -> str:
        return self.run(*args).decode()


def _timed(action: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = action()
    return (time.perf_counter() - started) * 1000, result


def _alternating(samples: int, actions: dict[str, Callable[[], object]]) -> tuple[dict[str, float], dict[str, Any]]:
    """Each action ``samples`` times, in turn (the machine's noise weighs on each alike): the
    medians, and each action's first answer (what the checks compare)."""
    times: dict[str, list[float]] = {name: [] for name in actions}
    answers: dict[str, Any] = {}
    for _ in range(samples):
        for name, action in actions.items():
            elapsed, answer = _timed(action)
            times[name].append(elapsed)
            answers.setdefault(name, answer)
    return {name: statistics.median(values) for name, values in times.items()}, answers


def _child_with_rusage(argv: list[str], env: dict[str, str], log_path: Path) -> tuple[float, int, int]:
    """Run ``argv`` to its end: (ms, exit status, peak RSS in bytes of it or its largest waited child)."""
    with open(log_path, "ab") as log:
        started = time.perf_counter()
        child = subprocess.Popen(argv, cwd=BASE_DIR, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        _pid, status, usage = os.wait4(child.pid, 0)
        elapsed = (time.perf_counter() - started) * 1000
    child.returncode = os.waitstatus_to_exitcode(status)
    return elapsed, child.returncode, usage.ru_maxrss * 1024  # Linux: kilobytes


# ------------------------------------------------------------------------------ cgit


class Cgit:
    """cgit's CGI binary on git's copy, no cache: one process per page, as a web server runs it."""

    def __init__(self, work: Path, repository: Path) -> None:
        if not os.access(CGIT, os.X_OK):
            raise RuntimeError(f"{CGIT} is missing: `make cgit` installs Debian's cgit")
        self.config = work / "cgitrc"
        # cache-size=0: no cache; every page is computed from the object store.
        self.config.write_text(
            f"cache-size=0\nvirtual-root=/\nenable-blame=1\nrepo.url={REPO}\nrepo.path={repository}\n"
        )
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CGIT_CONFIG": os.fspath(self.config)}

    def page(self, path: str, query: str = "") -> bytes:
        env = {
            **self.env,
            "GATEWAY_INTERFACE": "CGI/1.1",
            "REQUEST_METHOD": "GET",
            "SERVER_NAME": "localhost",
            "SERVER_PORT": "80",
            "SCRIPT_NAME": "/",
            "PATH_INFO": f"/{REPO}/{path}",
            "QUERY_STRING": query,
        }
        out = subprocess.run([os.fspath(CGIT)], env=env, capture_output=True, check=True).stdout
        head, _, body = out.partition(b"\n\n")
        if b"Status:" in head and b"Status: 200" not in head:
            raise RuntimeError(f"cgit {path}?{query}: {head.decode(errors='replace')}")
        return body


# ------------------------------------------------------------------------------ the source


def long_lived_paths(git: Git, tip: str, count: int) -> list[str]:
    """The ``count`` files at ``tip`` changed by the most commits (``git log --name-only``), in
    the escaped form the API names paths with."""
    counts: dict[bytes, int] = {}
    for path in git.run("log", "-z", "--format=", "--name-only", "--no-renames", tip).split(b"\0"):
        if path:
            counts[path] = counts.get(path, 0) + 1
    present = set(git.run("ls-tree", "-r", "-z", "--name-only", tip).split(b"\0"))
    ranked = sorted((path for path in counts if path in present), key=lambda path: (-counts[path], path))
    return [path_from_bytes(path) for path in ranked[:count]]


def commit_with_ancestors(git: Git, tip: str, wanted: int) -> tuple[str, int]:
    """The first-parent ancestor of ``tip`` whose history is the smallest at least ``wanted``
    commits long (bisected on the first-parent line), and that length."""
    line = git.text("rev-list", "--first-parent", "--reverse", tip).split()
    low, high = 0, len(line) - 1
    while low < high:
        middle = (low + high) // 2
        if int(git.text("rev-list", "--count", line[middle])) >= wanted:
            high = middle
        else:
            low = middle + 1
    return line[low], int(git.text("rev-list", "--count", line[low]))


def parse_raw(raw: bytes) -> set[tuple[str, str, str | None]]:
    """``git diff --raw -z -M`` as ``{(status, path, old path or None)}`` in our statuses."""
    fields = raw.split(b"\0")
    found: set[tuple[str, str, str | None]] = set()
    at = 0
    while at < len(fields) - 1:
        letter = fields[at].split()[-1][:1].decode()
        if letter in "RC":
            old, new = path_from_bytes(fields[at + 1]), path_from_bytes(fields[at + 2])
            found.add(("renamed", new, old))
            at += 3
            continue
        path = path_from_bytes(fields[at + 1])
        status = {"A": "added", "D": "deleted"}.get(letter, "modified")  # M, T (a mode change)
        found.add((status, path, None))
        at += 2
    return found


#: git's object types of tree entries as the tree endpoint types them (a symlink is a file).
_TYPES = {"tree": "dir", "commit": "submodule"}


def parse_ls_tree(listing: bytes) -> list[dict[str, str]]:
    """``git ls-tree -z`` as our tree entries' ``name, type, id, mode``."""
    entries = []
    for record in listing.split(b"\0"):
        if not record:
            continue
        meta, _, name = record.partition(b"\t")
        mode, kind, oid = meta.decode().split()
        entries.append({"name": path_from_bytes(name), "type": _TYPES.get(kind, "file"), "id": oid, "mode": mode})
    return sorted(entries, key=lambda entry: entry["name"])


def parse_blame(porcelain: bytes) -> list[str]:
    """The commit of each line of ``git blame --porcelain``."""
    commits = []
    for line in porcelain.split(b"\n"):
        if re.match(rb"^[0-9a-f]{40} \d+ \d+", line):
            commits.append(line[:40].decode())
    return commits


# ------------------------------------------------------------------------------ the benchmark


class Bench:
    def __init__(
        self, deployment: Deployment, work: Path, source: Path, branch: str, samples: int, progress: Log
    ) -> None:
        self.deployment, self.work, self.source, self.branch = deployment, work, source, branch
        self.samples, self.say = samples, progress
        self.home = work / "home"
        self.home.mkdir(exist_ok=True)
        self.copy = Git(work / "git-copy.git", self.home)
        self.serial = iter(range(10**9))
        self.nonce = secrets.token_hex(3)  # landed file names unique across runs on a kept data dir
        #: Whether an earlier run on the kept data directory landed on the imported stream.
        self.landed_before = False

    # -- the import --------------------------------------------------------------------

    def git_copy_and_read(self) -> tuple[float, float]:
        """git's own copy of the history (clone --bare --no-local), then reading all of it."""
        clone_ms, _ = _timed(
            lambda: subprocess.run(
                ["git", "clone", "-q", "--bare", "--no-local", os.fspath(self.source), os.fspath(self.copy.path)],
                check=True,
                env=self.copy.env,
                capture_output=True,
            )  # fmt: skip
        )
        read_ms, _ = _timed(
            lambda: subprocess.run(
                self.copy.argv("log", "--raw", self.branch), check=True, env=self.copy.env, stdout=subprocess.DEVNULL
            )
        )
        return clone_ms, read_ms

    def import_once(self, name: str, source: Path, tip: str, **beside: float) -> dict[str, Any]:
        """Import ``source`` (its branch at ``tip``) as ``name`` unless the data directory holds
        that import already; ``beside`` (git's figures of the same run) is recorded with it."""
        record_path = self.deployment.data_dir / IMPORT_RECORD
        records = json.loads(record_path.read_text()) if record_path.exists() else {}
        key = name
        if records.get(key, {}).get("tip") == tip:
            return {**records[key], "reused": True}
        argv = [sys.executable, "manage.py", "agentgit_import", name, os.fspath(source)]
        elapsed, status, peak = _child_with_rusage(argv, self.deployment.env, self.deployment.log_dir / "import.log")
        if status != 0:
            tail = (self.deployment.log_dir / "import.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"agentgit_import {name} failed ({status}):\n{tail}")
        log = (self.deployment.log_dir / "import.log").read_text(errors="replace")
        recorded = re.findall(r": (?:created, )?(\d+) changeset\(s\) recorded", log)
        changesets = int(recorded[-1]) if recorded else None
        records[key] = {"ms": elapsed, "peak_rss": peak, "changesets": changesets, "tip": tip, **beside}
        record_path.write_text(json.dumps(records, indent=2) + "\n")
        return {**records[key], "reused": False}

    # -- reads -------------------------------------------------------------------------

    def row(
        self,
        figure: str,
        against: str,
        ours: Callable[[], object],
        theirs: Callable[[], object],
        goal: float | None,
        check: Callable[[Any, Any], tuple[str, str]] = lambda ours, theirs: ("", ""),
        *,
        short: bool = True,
    ) -> Row:
        """Time ``ours`` beside ``theirs`` in turn; ``check(our answer, theirs)`` is ``(failure, detail)``.
        A ``short`` read (a few milliseconds) takes three times the samples: this machine's noise
        is larger than the goals' margins there."""
        self.say(f"real history: {figure}")
        samples = self.samples * (3 if short else 1)
        times, answers = _alternating(samples, {"ours": ours, "theirs": theirs})
        failure, detail = check(answers["ours"], answers["theirs"])
        return Row(figure, against, times["ours"], times["theirs"], goal, samples, detail, failure)

    def get(self, api: ApiClient, what: str, **params: object) -> Callable[[], bytes]:
        """A GET of ``/repos/REPO/<what>``: the body as received, to its last byte (parsing the
        JSON is the client's work, as reading git's output is: both stay out of the timing)."""
        url = f"/repos/{REPO}/{what}"

        def get() -> bytes:
            return api.request("GET", url, params=params).content

        return get

    def git_out(self, *args: str) -> Callable[[], bytes]:
        argv, env = self.copy.argv(*args), self.copy.env
        return lambda: subprocess.run(argv, env=env, capture_output=True, check=True).stdout

    def reads(self, api: ApiClient, tip: str, paths: list[str], blame_path: str) -> list[Row]:
        rows = []
        log_ids = self.git_out("log", f"-{LOG_PAGE}", "--format=%H", tip)

        def log_ids_equal(ours, theirs) -> tuple[str, str]:
            mine = [changeset["id"] for changeset in json.loads(ours)["changesets"]]
            return ("" if mine == theirs.decode().split() else "the log's order differs from git's"), ""

        rows.append(
            self.row(
                f"log, first page ({LOG_PAGE})",
                f"git log -{LOG_PAGE}",
                self.get(api, "log", rev=tip, limit=LOG_PAGE),
                log_ids,
                READ_GOAL,
                log_ids_equal,
            )
        )
        for path in paths:
            rows.append(
                self.row(
                    f"log --path {path}, first page",
                    f"git log -{LOG_PAGE} -- PATH",
                    self.get(api, "log", rev=tip, path=path, limit=LOG_PAGE),
                    self.git_out("log", f"-{LOG_PAGE}", "--format=%H", tip, "--", path),
                    READ_GOAL,
                    log_ids_equal,
                )
            )

        def blame_agreement(ours, theirs) -> tuple[str, str]:
            mine, git = [line["changeset"] for line in json.loads(ours)["lines"]], parse_blame(theirs)
            if len(mine) != len(git):
                return f"blame has {len(mine)} lines, git's {len(git)}", ""
            return "", f"agrees with git on {sum(a == b for a, b in zip(mine, git))} of {len(git)} lines"

        rows.append(
            self.row(
                f"blame {blame_path}",
                "git blame --first-parent",
                self.get(api, f"blame/{tip}/{blame_path}"),
                self.git_out("blame", "--first-parent", "--porcelain", tip, "--", blame_path),
                BLAME_GOAL,
                blame_agreement,
                short=False,
            )
        )
        # A history shorter than the span is diffed from its first-parent root.
        span = min(DIFF_SPAN, len(self.copy.text("rev-list", "--first-parent", tip).split()) - 1)
        old = self.copy.text("rev-parse", f"{tip}~{span}").strip()
        git_changes = parse_raw(self.copy.run("diff", "--raw", "-z", "-M", old, tip))

        def same_changes(ours, theirs) -> tuple[str, str]:
            mine = {(c["status"], c["path"], c.get("old_path")) for c in json.loads(ours)["changes"]}
            renames = sum(1 for change in git_changes if change[0] == "renamed")
            detail = f"{len(git_changes)} paths, {renames} renames"
            if mine != git_changes:
                extra, missing = sorted(mine - git_changes)[:3], sorted(git_changes - mine)[:3]
                return f"changed paths differ from git's: ours also {extra}, git's also {missing}", detail
            return "", detail

        rows.append(
            self.row(
                f"diff across {span} changesets (changes and patch)",
                "git diff -M --patch-with-raw",
                self.get(api, "diff", **{"from": old, "to": tip}),
                self.git_out("diff", "-M", "--patch-with-raw", old, tip),
                READ_GOAL,
                same_changes,
                short=False,
            )
        )

        def same_entries(ours, theirs) -> tuple[str, str]:
            entries = json.loads(ours)["entries"]
            mine = sorted(({k: e[k] for k in ("name", "type", "id", "mode")} for e in entries), key=lambda e: e["name"])
            ok = mine == parse_ls_tree(theirs)
            return ("" if ok else "the tree's entries differ from git's"), f"{len(mine)} entries"

        rows.append(
            self.row(
                "tree (the root)",
                "git ls-tree",
                self.get(api, f"tree/{tip}"),
                self.git_out("ls-tree", "-z", tip),
                READ_GOAL,
                same_entries,
            )
        )
        rows.append(
            self.row(
                f"file {blame_path}",
                "git cat-file -p REV:PATH",
                self.get(api, f"files/{tip}/{blame_path}"),
                self.git_out("cat-file", "-p", f"{tip}:{blame_path}"),
                READ_GOAL,
                lambda ours, theirs: (
                    "" if ours == theirs else "the file's bytes differ from git's",
                    f"{len(theirs):,} bytes",
                ),
            )
        )
        return rows

    # -- pages -------------------------------------------------------------------------

    @contextlib.contextmanager
    def web(self) -> Iterator[httpx.Client]:
        """A logged-in session of the web UI (a superuser: reads every repository)."""
        password = secrets.token_urlsafe(16)
        self.deployment.manage(
            "shell",
            "-c",
            "from django.contrib.auth import get_user_model; U = get_user_model(); "
            f"u = U.objects.filter(username={WEB_USER!r}).first() or "
            f"U.objects.create_superuser({WEB_USER!r}, 'bench@example.com', {password!r}); "
            f"u.set_password({password!r}); u.save()",
        )
        with web_session(self.deployment.url, WEB_USER, password, timeout_s=TIMEOUT_S) as web:
            yield web

    def pages(self, web: httpx.Client, cgit: Cgit, tip: str, blame_path: str) -> list[Row]:
        def ours(url: str) -> Callable[[], bytes]:
            def get() -> bytes:
                response = web.get(url)
                if response.status_code != 200:
                    raise RuntimeError(f"{url}: {response.status_code}")
                return response.content

            return get

        base = f"/repos/{REPO}"
        pages = [
            ("log", f"{base}/log/{tip}", ("log/", f"id={tip}")),
            (f"blame {blame_path}", f"{base}/blame/{tip}/{blame_path}", (f"blame/{blame_path}", f"id={tip}")),
            ("changeset (the tip)", f"{base}/changeset/{tip}", ("commit/", f"id={tip}")),
            ("tree (the root)", f"{base}/tree/{tip}", ("tree/", f"id={tip}")),
        ]
        return [
            self.row(
                f"web page: {name}",
                "cgit, CGI, no cache",
                ours(url),
                partial(cgit.page, *where),
                PAGE_GOAL,
                lambda mine, theirs: ("", f"{len(mine) / 1024:.0f} KiB beside cgit's {len(theirs) / 1024:.0f} KiB"),
                short=not name.startswith("blame"),
            )
            for name, url, where in pages
        ]

    # -- git's transport and landings --------------------------------------------------

    def clone_url(self, token: str) -> str:
        return f"http://bench:{token}@{self.deployment.url.removeprefix('http://')}/git/{REPO}.git"

    def clone(self, token: str) -> tuple[Row, Path, Path]:
        """Clones of both; the last sample of each is kept for the fetch."""
        self.say("real history: clone")
        targets = {"ours": self.work / "clone-ours.git", "theirs": self.work / "clone-git.git"}
        sources = {"ours": self.clone_url(token), "theirs": os.fspath(self.copy.path)}
        sizes: dict[str, int] = {}

        def clone(side: str) -> Callable[[], None]:
            def run() -> None:
                shutil.rmtree(targets[side], ignore_errors=True)
                subprocess.run(
                    ["git", "clone", "-q", "--bare", "--no-local", sources[side], os.fspath(targets[side])],
                    check=True, env=self.copy.env, capture_output=True,
                )  # fmt: skip
                sizes[side] = sum(p.stat().st_size for p in (targets[side] / "objects" / "pack").glob("*.pack"))

            return run

        times, _ = _alternating(max(1, self.samples // 2), {"ours": clone("ours"), "theirs": clone("theirs")})
        row = Row(
            "clone (git clone --bare over HTTP)",
            "git clone --bare --no-local",
            times["ours"],
            times["theirs"],
            CLONE_GOAL,
            max(1, self.samples // 2),
            f"pack {sizes['ours'] / 1e6:.1f} MB beside {sizes['theirs'] / 1e6:.1f} MB "
            f"({sizes['ours'] / sizes['theirs']:.3f}×, goal ≤ {CLONE_BYTES_GOAL}×)",
        )
        if sizes["ours"] > CLONE_BYTES_GOAL * sizes["theirs"]:
            row.detail += "; bytes over the goal"
        tips = {side: Git(path, self.home).text("rev-parse", self.branch).strip() for side, path in targets.items()}
        if tips["ours"] != tips["theirs"] and not self.landed_before:
            row.failure = f"the cloned {self.branch} is {tips['ours']}, git's {tips['theirs']}"
        return row, targets["ours"], targets["theirs"]

    def land_ours(self, api: ApiClient, repo: str) -> None:
        n = next(self.serial)
        operations = [{"op": "write", "path": f"bench-landed/{self.nonce}-{n}.txt", "content": f"landing {n}\n"}]
        # The imported stream is named after the branch (the small repository's as well).
        api.request(
            "POST", f"/repos/{repo}/streams/{self.branch}/land", json={"message": f"land {n}", "operations": operations}
        )

    def land_git(self) -> None:
        """A one-file commit on git's copy's branch (fast-import), as a landing there would be."""
        n = next(self.serial)
        data = f"landing {n}\n".encode()
        ref = f"refs/heads/{self.branch}"
        stream = (
            (
                f"commit {ref}\ncommitter bench <bench@example.com> {int(time.time())} +0000\ndata 4\nland\n"
                f"from {ref}^0\nM 100644 inline bench-landed/{self.nonce}-{n}.txt\ndata {len(data)}\n"
            ).encode()
            + data
            + b"\n"
        )
        self.copy.run("fast-import", "--quiet", input=stream)

    def fetch(self, api: ApiClient, ours: Path, theirs: Path) -> Row:
        self.say("real history: fetch after a landing")
        self.land_ours(api, REPO)  # the first landing on the imported stream is not a fetch's cost
        clones = {"ours": Git(ours, self.home), "theirs": Git(theirs, self.home)}
        times: dict[str, list[float]] = {"ours": [], "theirs": []}
        for _ in range(self.samples):
            self.land_ours(api, REPO)
            self.land_git()
            for side, clone in clones.items():
                times[side].append(_timed(partial(clone.run, "fetch", "-q", "origin"))[0])
        return Row(
            "fetch after a one-file landing",
            "git fetch (from git's copy)",
            statistics.median(times["ours"]),
            statistics.median(times["theirs"]),
            None,  # measured, with no goal of its own in issue 35
            self.samples,
        )

    def landing(self, api: ApiClient, small_commits: int) -> Row:
        self.say("real history: one-file landings")
        times, _ = _alternating(
            self.samples * 2,
            {"ours": lambda: self.land_ours(api, REPO), "small": lambda: self.land_ours(api, SMALL_REPO)},
        )
        return Row(
            "one-file landing on the imported stream",
            f"the same on a {small_commits:,}-commit repository",
            times["ours"],
            times["small"],
            LANDING_GOAL,
            self.samples * 2,
        )


def run_real_history(
    source: Path,
    *,
    branch: str | None = None,
    paths: list[str] | None = None,
    blame_path: str | None = None,
    samples: int = DEFAULT_SAMPLES,
    data_dir: Path | None = None,
    progress: Log = lambda text: None,
) -> RealRun:
    """Import ``source`` (or reuse ``data_dir``'s import of it) and measure every row (see the module)."""
    source = source.resolve()
    work = Path(tempfile.mkdtemp(prefix="agentgit-real-history-"))
    try:
        home = work / "home"
        home.mkdir()
        original = Git(source, home)
        if branch is None:
            branch = original.text("symbolic-ref", "--short", "HEAD").strip()
        tip = original.text("rev-parse", f"{branch}^{{commit}}").strip()
        run = RealRun(
            os.fspath(source),
            branch,
            tip,
            int(original.text("rev-list", "--count", tip)),
            len(original.text("ls-tree", "-r", "--name-only", tip).splitlines()),
        )
        with Deployment("embedded", data_dir=data_dir) as deployment:
            bench = Bench(deployment, work, source, branch, samples, progress)
            progress("real history: git clone --bare --no-local and git log --raw")
            clone_ms, read_ms = bench.git_copy_and_read()
            progress(f"real history: importing {source} ({run.commits:,} commits; minutes on a long history)")
            run.imported = bench.import_once(REPO, source, tip, git_clone_ms=clone_ms, git_log_raw_ms=read_ms)
            # A reused import is set beside git's figures of the run that imported (one run).
            git_ms = run.imported.get("git_clone_ms", clone_ms) + run.imported.get("git_log_raw_ms", read_ms)
            run.rows.append(
                Row(
                    "import (agentgit_import)",
                    "git clone --bare --no-local + git log --raw",
                    run.imported["ms"],
                    git_ms,
                    IMPORT_GOAL,
                    detail=f"peak RSS {run.imported['peak_rss'] / 1e6:.0f} MB"
                    + (
                        f"; both timed by the run that imported (git now: {clone_ms + read_ms:.0f} ms)"
                        if run.imported["reused"]
                        else ""
                    ),
                )
            )
            small_tip, small_commits = commit_with_ancestors(bench.copy, tip, SMALL_COMMITS)
            small = work / "small.git"
            subprocess.run(
                ["git", "init", "-q", "--bare", "-b", branch, os.fspath(small)], check=True, env=bench.copy.env
            )
            Git(small, home).run("fetch", "-q", os.fspath(source), f"{small_tip}:refs/heads/{branch}")
            progress(f"real history: importing its first {small_commits:,} commits")
            bench.import_once(SMALL_REPO, small, small_tip)
            bench.landed_before = run.imported["reused"]
            deployment.start_server(workers=1)
            token = deployment.create_token("bench", rate=1_000_000, burst=1_000_000)
            chosen = paths or long_lived_paths(bench.copy, tip, DEFAULT_PATHS)
            blamed = blame_path or chosen[0]
            with ApiClient(deployment.url, token, timeout_s=TIMEOUT_S) as api:
                run.rows += bench.reads(api, tip, chosen, blamed)
                with bench.web() as web:
                    run.rows += bench.pages(web, Cgit(work, bench.copy.path), tip, blamed)
                clone_row, ours, theirs = bench.clone(token)
                run.rows.append(clone_row)
                run.rows.append(bench.fetch(api, ours, theirs))
                run.rows.append(bench.landing(api, small_commits))
            run.conditions = {
                "python": sys.version.split()[0],
                "cpus": os.cpu_count(),
                "git": subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip(),
                "samples": samples,
                "data_dir": os.fspath(deployment.data_dir) if data_dir else None,
                "max_rss_self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            }
        return run
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ------------------------------------------------------------------------------ the report


def format_real(run: RealRun) -> str:
    header = ["figure", "ours (ms)", "reference", "theirs (ms)", "ratio", "goal", "met", "also"]
    lines = [header]
    for row in run.rows:
        lines.append(
            [
                row.figure,
                format_ms(row.ours_ms),
                row.against,
                format_ms(row.theirs_ms),
                f"{row.ratio:.2f}×",
                "" if row.goal is None else f"≤ {row.goal}×",
                "FAILED" if row.failure else {True: "yes", False: "no", None: ""}[row.met],
                row.detail,
            ]
        )
    title = (
        f"{run.source}, {run.branch} at {run.tip[:12]}: {run.commits:,} commits, {run.files:,} files; "
        f"medians of {run.conditions.get('samples')} samples, ours and the reference in turn"
    )
    out = [title, *text_table(lines)]
    if run.failures:
        out += ["", "FAILED:", *run.failures]
    return "\n".join(out) + "\n"


def real_json(run: RealRun) -> dict[str, Any]:
    return {
        **{key: value for key, value in asdict(run).items() if key != "rows"},
        "rows": [{**asdict(row), "ratio": round(row.ratio, 3), "met": row.met} for row in run.rows],
    }
