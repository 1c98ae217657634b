"""``agentgit_bench git``: stock git against the server, each row beside git's own equivalent.

Issue 8's rows, in one run against a real embedded deployment (tests.deployment):

* clone of an N-file repository through ``/git/`` vs ``git clone --no-local`` of the very
  repository directory: time, pack bytes received, and how much the server's Python processes
  grew (RSS, sampled every 10 ms; git's own processes are not counted: their memory is git's);
* incremental fetch after one REST landing, vs ``git fetch`` from the directory after the same;
* ``ls-refs`` with one ``ref-prefix`` among 10 000 streams vs the same among 1 stream;
* push of a commit with 10 000 new files (≈10 000 objects) vs ``git push`` to a plain bare
  repository over ``file://``; and whether the server kept it as one pack.

The repository is built with ``git fast-import`` and brought in with ``agentgit_import``, then
maintained (``agentgit_maintain --force``) as a served repository would be. Cells are medians of
``samples`` runs. No Django here: the processes it starts import Django.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.deployment import ApiClient, Deployment

REPO = "bench"
ONE = "one"
DEFAULT_FILES = 100_000
DEFAULT_STREAMS = 10_000
PUSH_FILES = 10_000


@dataclass
class GitRow:
    row: str
    ours_ms: float
    git_ms: float
    goal: str
    #: What else the row measured (bytes, RSS, packs), as text.
    detail: str = ""

    @property
    def ratio(self) -> float:
        return self.ours_ms / self.git_ms if self.git_ms else float("inf")


def _git(cwd: Path, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "HOME": os.fspath(cwd), "GIT_TERMINAL_PROMPT": "0"})
    env.update({"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com"})
    env.update({"GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"})
    return subprocess.run(["git", *args], cwd=cwd, input=input, capture_output=True, check=True, env=env)


def _timed(function: Callable[[], object]) -> float:
    started = time.perf_counter()
    function()
    return (time.perf_counter() - started) * 1000


def build_source(path: Path, files: int, branches: int = 0) -> None:
    """A repository of ``files`` files (100 per directory) in one commit on ``main``, plus
    ``branches`` more branches at it, written by ``git fast-import``."""
    _git(path.parent, "init", "-q", "--bare", "-b", "main", os.fspath(path))
    stream = [b"commit refs/heads/main\ncommitter bench <bench@example.com> 1700000000 +0000\ndata 5\nbase\n"]
    for n in range(files):
        body = f"file {n}\n" + "content line\n" * 4
        stream.append(b"M 100644 inline d%04d/f%06d.txt\ndata %d\n%s\n" % (n // 100, n, len(body), body.encode()))
    _git(path, "fast-import", "--quiet", input=b"".join(stream))
    if branches:
        head = _git(path, "rev-parse", "main").stdout.decode().strip()
        commands = "".join(f"create refs/heads/agent-{n:05d} {head}\n" for n in range(branches))
        _git(path, "update-ref", "--stdin", input=commands.encode())


def _pack_bytes(git_dir: Path) -> int:
    return sum(pack.stat().st_size for pack in (git_dir / "objects" / "pack").glob("*.pack"))


class _RssSampler:
    """The peak RSS of the server's Python processes while it runs (git children excluded)."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        server = self.deployment.server
        assert server is not None, "the deployment's server is started before its RSS is sampled"
        return server.rss_bytes(python_only=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.01)

    def __enter__(self) -> _RssSampler:
        self.baseline = self.rss()
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def growth(self) -> int:
        return max(0, self.peak - self.baseline)


def run_git_benchmark(
    files: int = DEFAULT_FILES,
    streams: int = DEFAULT_STREAMS,
    samples: int = 3,
    progress: Callable[[str], None] = lambda step: None,
) -> list[GitRow]:
    work = Path(tempfile.mkdtemp(prefix="agentgit-git-bench-"))
    try:
        with Deployment("embedded") as deployment:
            return _run(deployment, work, files, streams, samples, progress)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(deployment: Deployment, work: Path, files: int, streams: int, samples: int, progress) -> list[GitRow]:
    progress(f"building a {files}-file repository and one of {streams} branches")
    build_source(work / "source.git", files, branches=streams)
    build_source(work / "one.git", 10)
    progress("importing them")
    deployment.manage("agentgit_import", REPO, os.fspath(work / "source.git"), timeout_s=3600)
    deployment.manage("agentgit_import", ONE, os.fspath(work / "one.git"), timeout_s=600)
    deployment.manage("agentgit_maintain", "--force", timeout_s=3600)
    deployment.start_server(workers=1)
    token = deployment.create_token("bench", rate=1_000_000, burst=1_000_000)
    host = deployment.url.removeprefix("http://")

    def url(repo: str) -> str:
        return f"http://bench:{token}@{host}/git/{repo}.git"

    directory = deployment.repository_dir(REPO)
    rows = []

    # A first clone warms the server process up (imports, connections, git's capabilities), so
    # the RSS growth measured is the clone's, not the process's first request.
    _git(work, "clone", "-q", "--bare", url(REPO), os.fspath(work / "warm-up"))
    progress("clone")
    ours, theirs, growth, ours_bytes, git_bytes = [], [], 0, 0, 0
    for sample in range(samples):
        target, plain = work / f"clone-{sample}", work / f"plain-{sample}"
        with _RssSampler(deployment) as rss:
            ours.append(_timed(lambda: _git(work, "clone", "-q", "--bare", url(REPO), os.fspath(target))))  # noqa: B023
        growth = max(growth, rss.growth)
        theirs.append(
            _timed(lambda: _git(work, "clone", "-q", "--bare", "--no-local", os.fspath(directory), os.fspath(plain)))
        )  # noqa: B023
        ours_bytes, git_bytes = _pack_bytes(target), _pack_bytes(plain)
    rows.append(
        GitRow(
            f"clone, {files} files",
            statistics.median(ours),
            statistics.median(theirs),
            "≤ 1.2× time, ≤ 1.05× bytes, ≤ 50 MB RSS",
            f"pack {ours_bytes / 1e6:.1f} MB vs {git_bytes / 1e6:.1f} MB ({ours_bytes / max(1, git_bytes):.2f}×); "
            f"server Python RSS +{growth / 1e6:.0f} MB",
        )
    )

    progress("incremental fetch")
    ours, theirs = [], []
    with ApiClient(deployment.url, token) as rest:
        for sample in range(samples):
            head = rest.write(REPO, rest.head(REPO), {f"fetch/{sample}.txt": f"landing {sample}\n"}, "one landing")
            rest.integrate(REPO, rest.open_proposal(REPO, head)["id"])
            ours.append(
                _timed(lambda: _git(work / "clone-0", "fetch", "-q", url(REPO), "+refs/heads/main:refs/heads/main"))
            )
            theirs.append(
                _timed(
                    lambda: _git(
                        work / "plain-0", "fetch", "-q", os.fspath(directory), "+refs/heads/main:refs/heads/main"
                    )
                )
            )
    rows.append(
        GitRow("incremental fetch after one landing", statistics.median(ours), statistics.median(theirs), "≤ 1.5×")
    )

    progress("ls-refs")
    # `git fetch URL refs/heads/X` sends ref-prefix refs/heads/X (and a few more); the commit is
    # there already, so the request is ls-refs alone. (`git ls-remote URL pattern` sends no
    # prefix: its patterns match ref names from the end, so it lists every ref.)
    # Both fetching repositories have one ref, so only the server's side differs.
    _git(work, "clone", "-q", "--bare", url(ONE), os.fspath(work / "one-clone"))
    _git(work, "clone", "-q", "--bare", "--single-branch", url(REPO), os.fspath(work / "many-clone"))
    # Interleaved, so whatever else the machine (or the server, deriving the landings above) does
    # weighs on both columns alike.
    agent = f"refs/heads/agent-{streams // 2:05d}"
    many, one = [], []
    for _ in range(samples * 3):
        many.append(_timed(lambda: _git(work / "many-clone", "fetch", "-q", url(REPO), agent)))
        one.append(_timed(lambda: _git(work / "one-clone", "fetch", "-q", url(ONE), "refs/heads/main")))
    listing = statistics.median(_timed(lambda: _git(work, "ls-remote", url(REPO))) for _ in range(samples))
    rows.append(
        GitRow(
            f"ls-refs, one prefix among {streams} streams",
            statistics.median(many),
            statistics.median(one),
            "≤ 1.2× (vs 1 stream)",
            f"git column: the same among 1 stream; listing all {streams} (ls-remote): {listing:.0f} ms",
        )
    )

    progress("push")
    ours, theirs, packs_added, loose_added = [], [], [], []
    for sample in range(samples):
        checkout = work / f"push-{sample}"
        _git(work, "clone", "-q", "--no-checkout", url(REPO), os.fspath(checkout))
        stream = [
            b"commit refs/heads/main\ncommitter bench <bench@example.com> 1700000000 +0000\ndata 5\npush\nfrom refs/heads/main^0\n"
        ]
        for n in range(PUSH_FILES):
            body = f"pushed {sample} {n}\n"
            stream.append(
                b"M 100644 inline new%d/d%03d/f%05d.txt\ndata %d\n%s\n"
                % (sample, n // 100, n, len(body), body.encode())
            )
        _git(checkout, "fast-import", "--quiet", input=b"".join(stream))
        bare = work / f"bare-{sample}.git"
        _git(work, "clone", "-q", "--bare", "--no-local", os.fspath(directory), os.fspath(bare))
        before = {p.name for p in (directory / "objects" / "pack").glob("*.pack")}
        loose_before = _loose(directory)
        # git's first: what the server does after its answer (the operation lists, the derived
        # data) must not run beside git's push; the next sample's setup outlasts it.
        theirs.append(_timed(lambda: _git(checkout, "push", "-q", f"file://{bare}", "main:refs/heads/main")))  # noqa: B023
        ours.append(_timed(lambda: _git(checkout, "push", "-q", url(REPO), "main:refs/heads/main")))  # noqa: B023
        packs_added.append(len({p.name for p in (directory / "objects" / "pack").glob("*.pack")} - before))
        loose_added.append(_loose(directory) - loose_before)
    rows.append(
        GitRow(
            f"push of {PUSH_FILES} new files",
            statistics.median(ours),
            statistics.median(theirs),
            "≤ 1.5×, kept as one pack",
            f"packs added {max(packs_added)}, loose objects added {max(loose_added)}",
        )
    )
    return rows


def _loose(directory: Path) -> int:
    return int(_git(directory, "count-objects").stdout.split()[0])


def format_rows(rows: list[GitRow]) -> str:
    header = ("row", "ours ms", "git ms", "ratio", "goal", "also")
    table = [header] + [
        (r.row, f"{r.ours_ms:.0f}", f"{r.git_ms:.0f}", f"{r.ratio:.2f}×", r.goal, r.detail) for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() + "\n" for line in table
    )


def rows_json(rows: list[GitRow]) -> list[dict]:
    return [{**asdict(row), "ratio": round(row.ratio, 3)} for row in rows]
