"""``agentgit_bench refs``: many streams in one repository, each figure beside git's own (issue 25).

For each size N (``--streams 1000,100000,1000000``) one repository of a real embedded deployment
(tests.deployment) is filled by one push of N branches, all at one commit (``main`` and
``s/0000001``...), and then measured:

* **the push**: the smart-HTTP exchange of a ``git push`` (the advertisement, then the commands
  and the pack in one POST), sent by this module, beside ``git push`` of the same refs to a local
  bare repository (``file://``, git's own receive-pack). Not stock ``git push`` over HTTP: its
  client turns the glob into one explicit refspec per ref and matches each against every ref
  (``send-pack --stdin``), which is quadratic on the client whatever the server (41 s of a
  10 000-ref push in the client alone here). Up to ``--client-max`` refs, stock ``git push``
  over HTTP is timed as well, as its own row;
* **ls-remote of one ref**: ``git ls-remote URL refs/heads/<one>``. git sends no ``ref-prefix``
  for a pattern (it matches names from their end), so this is a full listing, filtered by the
  client; beside the same against git's packed copy through ``file://`` (the repository the
  branches are pushed from, its refs in one sorted ``packed-refs`` as ``pack-refs`` writes it);
* **one ref as git fetch asks for it**: ``git fetch URL refs/heads/<one>`` into a repository
  that has the commit (``ls-refs`` with ``ref-prefix``, nothing to fetch), beside the same from
  the packed copy;
* **the full ``ls-remote --heads``**, beside git's on the packed copy;
* **a one-file land on main** (``POST .../streams/main/land``), **reading one stream**
  (``GET .../streams/<one>``), **the first page of ``GET .../streams``**, **the web UI's
  repository page** (a logged-in session), and **creating one stream by REST**
  (``POST .../streams``), each the median of three times ``--samples`` requests;
* **maintenance**: ``agentgit_maintain`` after the push (it packs the refs), again with nothing
  changed, and ``agentgit_recover``; the loose ref files left in the repository directory; git's
  own ``pack-refs --all --no-prune`` of the repository it pushed to beside the first;
* the server's peak RSS during the push.

Ratios are taken against the smallest size of the run (the goals compare with 1 000 streams):
the reads are measured sample by sample in turn with the same read of the smallest size's
repository, in the same server at the same moment (this machine's noise is larger than the
goals), the push and maintenance against the smallest size's run;
and against git in the same run. Every size checks its invariants, never a time: every pushed
and REST-created stream exists in the database, ``ls-remote --heads`` lists exactly the
database's streams and heads, and at most 1 % of the refs are loose files after maintenance.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import httpx

from tests.deployment import ApiClient, Deployment, web_session

from .git_bench import _git, _RssSampler
from .report import format_ms, text_table

DEFAULT_SIZES = (1_000, 100_000, 1_000_000)
DEFAULT_SAMPLES = 7
DEFAULT_CLIENT_MAX = 10_000
#: The goals (issue 25): the push per ref against the smallest size, the reads against it.
PUSH_GROWTH_GOAL = 1.3
PUSH_GIT_GOAL = 10.0
READ_GROWTH_GOAL = 2.0
LISTING_GIT_GOAL = 1.5
LOOSE_SHARE_GOAL = 0.01
ZERO = "0" * 40
WEB_USER, WEB_PASSWORD = "refs-bench", "refs-bench-password-1"


@dataclass
class Figure:
    figure: str
    streams: int
    ours_ms: float
    git_ms: float | None = None
    #: Milliseconds per ref, for the rows that do per-ref work (the push).
    per_ref: bool = False
    detail: str = ""
    #: The same on the smallest size's repository, measured interleaved with ``ours``.
    reference_ms: float | None = None

    def ours_per_ref_us(self) -> float:
        return self.ours_ms * 1000 / self.streams

    def git_per_ref_us(self) -> float | None:
        return None if self.git_ms is None else self.git_ms * 1000 / self.streams


@dataclass
class SizeRun:
    streams: int
    figures: list[Figure] = field(default_factory=list)
    checks: dict[str, object] = field(default_factory=dict)


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def _interleaved(samples: int, actions: dict[str, Callable[[], object]]) -> dict[str, float]:
    """The median of each action, sample by sample in turn: what the machine does meanwhile
    weighs on each alike."""
    times: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(samples):
        for name, action in actions.items():
            times[name].append(_timed(action))
    return {name: statistics.median(values) for name, values in times.items()}


@dataclass(frozen=True)
class Target:
    """A filled repository and what its reads use: one stream of it, a repository holding its
    commit (for ``git fetch``), git's own packed copy."""

    repo: str
    one: str
    probe: Path
    copy: Path


def build_source(path: Path, streams: int) -> str:
    """A bare repository of one commit on ``main`` and ``streams - 1`` more branches at it,
    written straight into ``packed-refs`` (git's own format); the commit's id."""
    _git(path.parent, "init", "-q", "--bare", "-b", "main", os.fspath(path))
    readme = b"# many streams\n"
    _git(
        path,
        "fast-import",
        "--quiet",
        input=b"commit refs/heads/main\ncommitter bench <bench@example.com> 1700000000 +0000\ndata 5\nbase\n"
        b"M 100644 inline README.md\ndata %d\n%s\n" % (len(readme), readme),
    )
    head = _git(path, "rev-parse", "main").stdout.decode().strip()
    names = ["main"] + [branch(n) for n in range(1, streams)]
    lines = sorted(f"{head} refs/heads/{name}\n" for name in names)
    (path / "packed-refs").write_text("# pack-refs with: peeled fully-peeled sorted \n" + "".join(lines))
    (path / "refs" / "heads" / "main").unlink(missing_ok=True)
    return head


def branch(n: int) -> str:
    return f"s/{n:07d}"


def _pkt(data: bytes) -> bytes:
    return b"%04x" % (len(data) + 4) + data


def _packets(data: bytes) -> list[bytes]:
    """The payloads of the data packets of ``data`` (flush and the like left out)."""
    found, at = [], 0
    while at + 4 <= len(data):
        length = int(data[at : at + 4], 16)
        if length < 4:
            at += 4
            continue
        found.append(data[at + 4 : at + length])
        at += length
    return found


def push_request(commands: list[tuple[str, str]], pack: bytes) -> bytes:
    """The body of a receive-pack POST: ``(new id, ref)`` creations, then the pack."""
    caps = b"\0report-status side-band-64k quiet agent=agentgit-refs-bench"
    lines = [
        _pkt(f"{ZERO} {new} {ref}".encode() + (caps if i == 0 else b"") + b"\n")
        for i, (new, ref) in enumerate(commands)
    ]
    return b"".join(lines) + b"0000" + pack


def push_report(body: bytes) -> tuple[int, list[str]]:
    """``(refs reported ok, the lines of refs reported not ok)`` of a side-band report-status."""
    status = b"".join(payload[1:] for payload in _packets(body) if payload[:1] == b"\x01")
    lines = [payload.decode(errors="replace").rstrip("\n") for payload in _packets(status)]
    return sum(line.startswith("ok ") for line in lines), [line for line in lines if line.startswith("ng ")]


class Bench:
    def __init__(self, deployment: Deployment, work: Path, samples: int, client_max: int, progress) -> None:
        self.deployment = deployment
        self.work = work
        self.samples = samples
        self.client_max = client_max
        self.progress = progress
        self.token = deployment.create_token("bench", rate=1_000_000, burst=1_000_000)
        #: The smallest size's repository, read beside each larger one.
        self.reference: Target | None = None
        self.serial = iter(range(10**9))
        self.host = deployment.url.removeprefix("http://")
        deployment.manage(
            "shell",
            "-c",
            "from django.contrib.auth import get_user_model; "
            f"get_user_model().objects.create_superuser({WEB_USER!r}, 'bench@example.com', {WEB_PASSWORD!r})",
        )

    def url(self, repo: str) -> str:
        return f"http://bench:{self.token}@{self.host}/git/{repo}.git"

    def run(self, streams: int) -> SizeRun:
        run = SizeRun(streams)
        repo = f"refs-{streams}"
        work = self.work / repo
        work.mkdir()
        say = lambda step: self.progress(f"{streams} streams: {step}")  # noqa: E731
        say("building the pushed repository")
        source = work / "source.git"
        head = build_source(source, streams)
        names = ["main"] + [branch(n) for n in range(1, streams)]
        one = branch(streams // 2) if streams > 1 else "main"

        say("git's own push to a local bare repository")
        pushed = work / "git-pushed.git"
        _git(work, "init", "-q", "--bare", os.fspath(pushed))
        git_push = _timed(lambda: _git(source, "push", "-q", f"file://{pushed}", "refs/heads/*:refs/heads/*"))
        # What our maintenance does to refs, git's way: one packed-refs of every ref (without
        # removing git's loose ones: that alone took 63 s at 100 000 and over 20 min at 1 000 000).
        git_pack_refs = _timed(lambda: _git(pushed, "pack-refs", "--all", "--no-prune"))
        copy = source  # git's packed copy of the same refs: one packed-refs, as pack-refs writes it

        say("our push (the smart-HTTP exchange of git push)")
        with ApiClient(self.deployment.url, self.token) as api:
            api.create_repo(repo)
        pack = subprocess.run(
            ["git", "--git-dir", os.fspath(source), "pack-objects", "--stdout", "--revs", "-q"],
            input=b"main\n",
            capture_output=True,
            check=True,
        ).stdout
        body = push_request([(head, f"refs/heads/{name}") for name in names], pack)
        auth = ("bench", self.token)
        base = f"http://{self.host}/git/{repo}.git"
        with httpx.Client(auth=auth, timeout=None) as http, _RssSampler(self.deployment) as rss:
            started = time.perf_counter()
            http.get(f"{base}/info/refs", params={"service": "git-receive-pack"}).raise_for_status()
            answer = http.post(
                f"{base}/git-receive-pack",
                content=body,
                headers={"content-type": "application/x-git-receive-pack-request"},
            )
            ours_push = (time.perf_counter() - started) * 1000
        answer.raise_for_status()
        ok, refused = push_report(answer.content)
        run.checks["pushed_ok"] = ok
        assert ok == streams and not refused, f"{streams} streams: {ok} refs pushed ok, refused: {refused[:5]}"
        run.figures.append(
            Figure(
                "push, per ref (µs)",
                streams,
                ours_push,
                git_push,
                per_ref=True,
                detail=f"server Python RSS +{rss.growth / 1e6:.0f} MB",
            )
        )
        if streams <= self.client_max:
            say("stock git push over HTTP")
            stock_repo = f"stock-{streams}"
            with ApiClient(self.deployment.url, self.token) as api:
                api.create_repo(stock_repo)
            stock = _timed(lambda: _git(source, "push", "-q", self.url(stock_repo), "refs/heads/*:refs/heads/*"))
            run.figures.append(Figure("stock git push over HTTP, per ref (µs)", streams, stock, git_push, per_ref=True))

        say("waiting for the server to finish what follows the push")
        quiet_after = self._wait_quiet()
        run.checks["server_busy_after_push_s"] = round(quiet_after, 1)
        say("reads, each interleaved with the same on the smallest size's repository")
        probe = work / "probe.git"
        self._fill(probe, source)
        here = Target(repo, one, probe, copy)
        reference = self.reference or here
        self.reference = reference
        pushed_listing = _git(work, "ls-remote", "--heads", self.url(repo)).stdout  # before any landing
        with ApiClient(self.deployment.url, self.token) as api:
            reads: dict[str, tuple[Callable[[Target], object], Callable[[Target], object] | None]] = {
                "one ref as git fetch asks (ls-refs ref-prefix)": (
                    lambda t: _git(t.probe, "fetch", "-q", self.url(t.repo), f"refs/heads/{t.one}"),
                    lambda t: _git(t.probe, "fetch", "-q", f"file://{t.copy}", f"refs/heads/{t.one}"),
                ),
                "full ls-remote --heads": (
                    lambda t: _git(work, "ls-remote", "--heads", self.url(t.repo)),
                    lambda t: _git(work, "ls-remote", "--heads", f"file://{t.copy}"),
                ),
                "ls-remote of one ref (a full listing: git sends no prefix)": (
                    lambda t: _git(work, "ls-remote", self.url(t.repo), f"refs/heads/{t.one}"),
                    lambda t: _git(work, "ls-remote", f"file://{t.copy}", f"refs/heads/{t.one}"),
                ),
                "read one stream (GET .../streams/{name})": (lambda t: api.stream(t.repo, t.one), None),
                "first page of GET .../streams": (lambda t: api.get_json(f"/repos/{t.repo}/streams"), None),
                "one-file land on main (POST .../streams/main/land)": (lambda t: self._land(api, t.repo), None),
                "create one stream (POST .../streams)": (
                    lambda t: api.create_stream(t.repo, f"rest/{next(self.serial):06d}", head),
                    None,
                ),
            }
            with self._web(here.repo) as web_here, self._web(reference.repo) as web_reference:
                pages = {here.repo: web_here, reference.repo: web_reference}
                reads["web UI repository page"] = (lambda t: pages[t.repo](), None)
                for target in {here.repo: here, reference.repo: reference}.values():
                    self._land(api, target.repo)  # the first landing on the pushed commit derives its data
                for figure, (ours, theirs) in reads.items():
                    actions: dict[str, Callable[[], object]] = {"ours": partial(ours, here)}
                    if reference != here:
                        actions["reference"] = partial(ours, reference)
                    if theirs is not None:
                        actions["git"] = partial(theirs, here)
                    # A REST request is a few milliseconds: more samples for the same confidence.
                    times = _interleaved(self.samples * (1 if theirs else 3), actions)
                    run.figures.append(
                        Figure(figure, streams, times["ours"], times.get("git"), reference_ms=times.get("reference"))
                    )

        say("maintenance")
        maintain, again = self._maintain(repo), self._maintain(repo)
        start_up = _timed(lambda: self.deployment.manage("shell", "-c", "pass"))
        recover = _timed(lambda: self.deployment.manage("agentgit_recover", timeout_s=7200)) - start_up
        run.figures += [
            Figure(
                "agentgit_maintain after the push (git: pack-refs --all --no-prune)", streams, maintain, git_pack_refs
            ),
            Figure("agentgit_maintain again, nothing changed", streams, again),
            Figure(
                "agentgit_recover, less manage.py's start-up", streams, recover, detail=f"start-up {start_up:.0f} ms"
            ),
        ]

        say("checking")
        self._check(run, repo, names, head, pushed_listing)
        return run

    def _wait_quiet(self, timeout_s: float = 3600) -> float:
        """Wait until the server uses less than a tenth of a core over a second (after a push
        it relays the new streams' events and derives the pushed changesets' data): the reads
        measure the reads, not that. Seconds waited."""
        server = self.deployment.server
        assert server is not None, "the server is started before the benchmark waits for it"
        started = time.monotonic()
        used = server.cpu_seconds()
        while time.monotonic() - started < timeout_s:
            time.sleep(1)
            now = server.cpu_seconds()
            if now - used < 0.1:
                break
            used = now
        return time.monotonic() - started

    def _maintain(self, repo: str) -> float:
        """One ``agentgit_maintain`` of ``repo``: the run's own time as it reports it (ms)."""
        out = self.deployment.manage("agentgit_maintain", repo, timeout_s=7200)
        reported = re.search(r": \w+ in ([0-9.]+) s;", out)
        assert reported, f"agentgit_maintain said: {out}"
        return float(reported[1]) * 1000

    def _fill(self, target: Path, source: Path) -> None:
        """A repository with ``main`` of ``source``: it has the commit every stream names."""
        _git(self.work, "init", "-q", "--bare", os.fspath(target))
        _git(target, "fetch", "-q", f"file://{source}", "refs/heads/main:refs/heads/main")

    def _land(self, api: ApiClient, repo: str) -> None:
        n = next(self.serial)
        operations = [{"op": "write", "path": f"landed/{n}.txt", "content": f"landing {n}\n"}]
        api.request("POST", f"/repos/{repo}/streams/main/land", json={"message": f"land {n}", "operations": operations})

    @contextlib.contextmanager
    def _web(self, repo: str):
        """A logged-in session of the web UI; yields a function that loads the repository's page."""
        with web_session(self.deployment.url, WEB_USER, WEB_PASSWORD) as web:

            def page() -> None:
                response = web.get(f"/repos/{repo}/")
                assert response.status_code == 200, f"the repository page: {response.status_code}"

            page()
            yield page

    def _check(self, run: SizeRun, repo: str, names: list[str], head: str, listing: bytes) -> None:
        database = sqlite3.connect(self.deployment.data_dir / "agentgit.sqlite3")
        try:
            rows = database.execute(
                "SELECT s.name, s.head FROM repos_stream s JOIN repos_repository r ON s.repository_id = r.id "
                "WHERE r.name = ? AND s.head IS NOT NULL",
                (repo,),
            ).fetchall()
        finally:
            database.close()
        in_database = dict(rows)
        missing = set(names) - set(in_database)
        assert not missing, f"{run.streams} streams: {len(missing)} not in the database, e.g. {sorted(missing)[:3]}"
        listed = _listed(listing)
        # The listing was taken before the landings and the REST creations: compare with what
        # was pushed (main has moved since).
        pushed = {name: head for name in names}
        assert listed == pushed, f"{run.streams} streams: ls-remote --heads differs from the pushed streams"
        listed_now = _listed(_git(self.work, "ls-remote", "--heads", self.url(repo)).stdout)
        assert listed_now == in_database, f"{run.streams} streams: ls-remote --heads is not the database"
        directory = self.deployment.repository_dir(repo)
        loose = sum(
            1 for _root, _dirs, files in os.walk(directory / "refs") for name in files if not name.endswith(".lock")
        )
        refs = len(_git(directory, "for-each-ref").stdout.splitlines())
        run.checks.update(
            {"streams_in_database": len(in_database), "listed": len(listed_now), "refs": refs, "loose_refs": loose}
        )
        assert loose <= LOOSE_SHARE_GOAL * refs, (
            f"{run.streams} streams: {loose} loose refs of {refs} after maintenance"
        )


def _listed(listing: bytes) -> dict[str, str]:
    """``ls-remote --heads`` output as ``{stream: head}``."""
    streams = {}
    for line in listing.decode().splitlines():
        oid, _, ref = line.partition("\t")
        streams[ref.removeprefix("refs/heads/")] = oid
    return streams


def run_refs_benchmark(
    sizes: list[int], samples: int = DEFAULT_SAMPLES, client_max: int = DEFAULT_CLIENT_MAX, progress=lambda step: None
) -> list[SizeRun]:
    work = Path(tempfile.mkdtemp(prefix="agentgit-refs-bench-"))
    try:
        with Deployment("embedded") as deployment:
            deployment.start_server(workers=1)
            bench = Bench(deployment, work, samples, client_max, progress)
            runs: list[SizeRun] = []
            for streams in sizes:
                runs.append(bench.run(streams))
                progress(format_table(runs))  # a long run's sizes so far, should a later one fail
            return runs
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _value(figure: Figure) -> float:
    return figure.ours_per_ref_us() if figure.per_ref else figure.ours_ms


def _git_value(figure: Figure) -> float | None:
    return figure.git_per_ref_us() if figure.per_ref else figure.git_ms


def _vs_smallest(figure: Figure, first: Figure | None) -> float | None:
    """Ours over the same on the smallest size: measured interleaved where it could be."""
    if figure.reference_ms:
        return round(figure.ours_ms / figure.reference_ms, 3)
    return None if first is None else round(_value(figure) / _value(first), 3)


def rows(runs: list[SizeRun]) -> list[dict]:
    """Every figure of every size: ours, git's, ours over git's, ours over the smallest size's."""
    base = {figure.figure: figure for figure in runs[0].figures} if runs else {}
    found = []
    for run in runs:
        for figure in run.figures:
            ours, theirs = _value(figure), _git_value(figure)
            first = base.get(figure.figure)
            found.append(
                {
                    **asdict(figure),
                    "ours": round(ours, 3),
                    "git": None if theirs is None else round(theirs, 3),
                    "unit": "µs per ref" if figure.per_ref else "ms",
                    "vs_git": None if not theirs else round(ours / theirs, 3),
                    "vs_smallest": _vs_smallest(figure, first),
                }
            )
    return found


def format_table(runs: list[SizeRun]) -> str:
    header = ["figure", "streams", "ours", "git", "ours/git", f"vs {runs[0].streams if runs else ''}", "also"]
    lines = [header]
    for row in sorted(rows(runs), key=lambda row: (row["figure"], row["streams"])):
        lines.append(
            [
                row["figure"],
                f"{row['streams']:,}".replace(",", " "),
                format_ms(row["ours"]),
                format_ms(row["git"]),
                "" if row["vs_git"] is None else f"{row['vs_git']:.2f}×",
                "" if row["vs_smallest"] is None else f"{row['vs_smallest']:.2f}×",
                row["detail"],
            ]
        )
    checks = [f"{run.streams} streams: " + ", ".join(f"{k} {v}" for k, v in run.checks.items()) for run in runs]
    return "\n".join(text_table(lines)) + "\n\n" + "\n".join(checks) + "\n"
