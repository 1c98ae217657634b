"""The code search benchmark (issue 37): ``manage.py agentgit_bench search``.

It builds a generated repository with ``git fast-import`` (``--files`` files of code-like text,
about 5 KB each, then ``--landings`` three-file landings spread over ``--streams`` streams),
indexes it as the server does (engine.search_index, every blob of every head), and times, at
five revisions (stream heads and the import), what issue 37 sets goals for:

* a selective literal, a selective regex and a case-insensitive one (p50 and p95);
* a term found in most files, ``limit=100``;
* a regex with no usable trigram, and ``mode=count`` over everything, beside ``git grep`` at the
  tree and ``rg`` on a checkout of the same revision;
* a three-file landing's indexing, the first full index (time and peak memory), the index's size
  against the unique blob bytes;
* 8 concurrent searches against one;
* exactness: ``--patterns`` generated patterns at the five revisions, each answer equal to a
  scan of every file (no index), and ``git grep -c`` equal where their syntaxes agree.

Searches run in process, through the engine the service calls (file list, index, RE2), warm:
the revision's file list known, as after its landing or a first search. The default is scaled
down to run in a few minutes here; ``--files 100000 --landings 1000 --streams 50`` is the
issue's size.
"""

from __future__ import annotations

import random
import resource
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import re2  # type: ignore[import-untyped]

from engine.search import COUNT, FILES, FileList, Matcher, file_changes, search
from engine.search_index import SearchIndex
from engine.store import DiskStore

from .report import format_ms, text_table

DEFAULT_FILES = 10_000
DEFAULT_LANDINGS = 100
DEFAULT_STREAMS = 5
DEFAULT_PATTERNS = 200
NEEDLES = 300
KEYWORDS = ["def", "return", "import", "class", "self", "if", "else", "for", "in", "while", "None", "True"]


@dataclass
class Row:
    what: str
    goal: str
    ours_p50_ms: float
    ours_p95_ms: float
    git_grep_ms: float | None = None
    rg_ms: float | None = None
    samples: int = 0
    met: bool | None = None


@dataclass
class SearchRun:
    files: int
    landings: int
    streams: int
    corpus_bytes: int = 0
    rows: list[Row] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)
    #: The real repository measured (None: the generated corpus).
    source: str | None = None


def _words(rng: random.Random, count: int) -> list[str]:
    syllables = ["ba", "ko", "ri", "zu", "me", "ta", "lo", "ne", "pi", "sa", "ul", "ox", "en", "dr", "qu", "th"]
    return sorted({"".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(count)})


def _line_pool(rng: random.Random, words: list[str], size: int) -> list[bytes]:
    pool = []
    for _ in range(size):
        indent = "    " * rng.randint(0, 3)
        parts = [rng.choice(KEYWORDS) if rng.random() < 0.3 else rng.choice(words) for _ in range(rng.randint(2, 9))]
        joiner = rng.choice([" ", "_", ".", "(", ", "])
        pool.append(f"{indent}{joiner.join(parts)}\n".encode())
    return pool


def _file(rng: random.Random, pool: list[bytes], needles: dict[int, list[str]], number: int) -> bytes:
    lines = rng.choices(pool, k=max(1, int(rng.lognormvariate(4.2, 0.6))))
    for needle in needles.get(number, []):
        lines.insert(rng.randrange(len(lines) + 1), f"    value = {needle}(x)\n".encode())
    return b"".join(lines)


def build_corpus(git_dir: Path, files: int, landings: int, streams: int, seed: int = 37) -> dict[str, str]:
    """The generated repository; answers each stream's head (``import`` is the first commit)."""
    rng = random.Random(seed)
    words = _words(rng, 3000)
    pool = _line_pool(rng, words, 20_000)
    needles: dict[int, list[str]] = {}
    for k in range(NEEDLES):
        for number in rng.sample(range(files), 3):
            needles.setdefault(number, []).append(f"needle_{k}_zq")
    paths = [f"src/d{n % 97}/m{n % 13}/file_{n}.py" for n in range(files)]
    subprocess.run(["git", "init", "-q", "--bare", str(git_dir)], check=True)
    stream = subprocess.Popen(["git", f"--git-dir={git_dir}", "fast-import", "--quiet"], stdin=subprocess.PIPE)
    assert stream.stdin is not None
    out = stream.stdin

    def data(raw: bytes) -> None:
        out.write(b"data %d\n" % len(raw) + raw + b"\n")

    mark = 0
    out.write(b"commit refs/heads/main\nmark :1\ncommitter A <a@a> 1700000000 +0000\n")
    data(b"import\n")
    for number, path in enumerate(paths):
        out.write(b"M 100644 inline " + path.encode() + b"\n")
        data(_file(rng, pool, needles, number))
    mark = 1
    heads = {"main": ":1"}
    names = ["main"] + [f"stream-{k}" for k in range(1, streams)]
    for k in range(landings):
        name = names[k % len(names)]
        mark += 1
        out.write(f"commit refs/heads/{name}\nmark :{mark}\ncommitter A <a@a> {1700000001 + k} +0000\n".encode())
        data(f"landing {k}\n".encode())
        out.write(f"from {heads.get(name, ':1')}\n".encode())
        for number in rng.sample(range(files), 3):
            out.write(b"M 100644 inline " + paths[number].encode() + b"\n")
            data(_file(rng, pool, needles, number) + f"landed_{k}_token = {k}\n".encode())
        heads[name] = f":{mark}"
    out.close()
    assert stream.wait() == 0
    refs = subprocess.run(
        ["git", f"--git-dir={git_dir}", "for-each-ref", "--format=%(refname:short) %(objectname)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = dict(zip(refs[::2], refs[1::2]))
    found["import"] = subprocess.run(
        ["git", f"--git-dir={git_dir}", "rev-list", "--max-parents=0", "main"], capture_output=True, text=True
    ).stdout.strip()
    return found


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return (time.perf_counter() - start) * 1000


def _git_grep_ms(git_dir: Path, tree: str, *args: str) -> float:
    return _timed(
        lambda: subprocess.run(["git", f"--git-dir={git_dir}", "grep", "-E", *args, tree], capture_output=True)
    )


def _rg_ms(checkout: Path, *args: str) -> float | None:
    if shutil.which("rg") is None:
        return None
    return _timed(lambda: subprocess.run(["rg", "--no-config", *args, str(checkout)], capture_output=True))


@dataclass
class Workload:
    """What the rows search for: chosen from the corpus."""

    literals: list[str]
    regexes: list[str]
    common: str
    count_term: str
    words: list[str]


def _generated_workload(rng: random.Random) -> Workload:
    needles = rng.sample(range(NEEDLES), 10)
    return Workload(
        [f"needle_{k}_zq" for k in needles],
        [f"needle_{k}[0-9]_zq" for k in range(1, 6)] + [f"(?i)NEEDLE_{k}[0-9]_ZQ" for k in range(1, 6)],
        "return",
        "self",
        _words(random.Random(37), 3000),
    )


def _real_workload(store: DiskStore, files: FileList, rng: random.Random) -> Workload:
    """Identifiers of a real repository: rare ones for the selective rows, the commonest for the
    others (from a sample of its files)."""
    counts: dict[str, int] = {}
    for blob in rng.sample(files.blobs, min(400, len(files.blobs))):
        for word in set(_IDENTIFIER.findall(store.read_blob(blob.hex()))):
            counts[word.decode()] = counts.get(word.decode(), 0) + 1
    rare = sorted(word for word, seen in counts.items() if seen == 1 and len(word) >= 10)
    literals = rng.sample(rare, 10)
    regexes = [re2.escape(word[:7]) + "[A-Za-z0-9_]+" for word in literals[:5]]
    regexes += ["(?i)" + re2.escape(word.upper()) for word in literals[5:]]
    common = sorted(counts, key=lambda word: -counts[word])
    return Workload(literals, regexes, common[0], common[1], sorted(counts))


_IDENTIFIER = re2.compile(rb"[A-Za-z_][A-Za-z0-9_]{3,}")


def _real_revisions(git_dir: Path) -> dict[str, str]:
    """The default branch's head and first-parent ancestors 50, 200, 1 000 and 5 000 back."""
    line = subprocess.run(
        ["git", f"--git-dir={git_dir}", "rev-list", "--first-parent", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    picked = [line[min(back, len(line) - 1)] for back in (0, 50, 200, 1000, 5000)]
    return {f"r{number}": commit for number, commit in enumerate(dict.fromkeys(picked))}


def run_search_benchmark(
    files: int = DEFAULT_FILES,
    landings: int = DEFAULT_LANDINGS,
    streams: int = DEFAULT_STREAMS,
    patterns: int = DEFAULT_PATTERNS,
    log: Callable[[str], None] = lambda _text: None,
    source: str | None = None,
) -> SearchRun:
    """The benchmark on a generated corpus, or on a copy of the repository at ``source``."""
    run = SearchRun(files, landings, streams, source=source)
    with tempfile.TemporaryDirectory(prefix="agentgit-search-") as scratch:
        root = Path(scratch)
        git_dir = root / "repo.git"
        rng = random.Random(7)
        if source is None:
            log(f"generating {files} files, {landings} landings on {streams} streams")
            heads = build_corpus(git_dir, files, landings, streams)
            revisions = [heads["import"]] + [heads[name] for name in sorted(heads) if name != "import"][:4]
        else:
            log(f"copying {source}")
            subprocess.run(["git", "clone", "--quiet", "--bare", "--local", source, str(git_dir)], check=True)
            heads = _real_revisions(git_dir)
            revisions = list(heads.values())
        store = DiskStore(git_dir)
        trees = [store.read_commit(commit).tree for commit in revisions]

        log("first full index")
        index = SearchIndex(str(root / "search.sqlite3"))
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        lists = [FileList.of_tree(store, tree) for tree in trees]
        run.files = len(lists[0])
        for name in sorted(heads):
            listed = FileList.of_tree(store, store.read_commit(heads[name]).tree)
            for offset in range(0, len(missing := index.missing(listed.blobs)), 500):
                index.add((blob, store.read_blob(blob.hex())) for blob in missing[offset : offset + 500])
        index.optimize()
        run.figures["first_index_s"] = time.perf_counter() - start
        run.figures["first_index_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        run.figures["rss_growth_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
        stats = index.stats()
        run.corpus_bytes = stats.blob_bytes
        run.figures["unique_blob_mb"] = stats.blob_bytes / 1e6
        run.figures["index_mb"] = stats.file_bytes / 1e6
        run.figures["index_share_of_blobs"] = stats.file_bytes / max(stats.blob_bytes, 1)
        work = _generated_workload(rng) if source is None else _real_workload(store, lists[0], rng)

        def read(blob: bytes) -> bytes:
            return store.read_blob(blob.hex())

        def ours(revision: int, pattern: str, **options: object) -> float:
            matcher_options = {key: options.pop(key) for key in ("fixed", "ignore_case") if key in options}
            return _timed(lambda: search(lists[revision], Matcher(pattern, **matcher_options), read, index, **options))  # type: ignore[arg-type]

        log("checking out the revisions for rg")
        checkouts = []
        for number, commit in enumerate(revisions[:2]):
            target = root / f"checkout{number}"
            target.mkdir()
            archive = subprocess.run(
                ["git", f"--git-dir={git_dir}", "archive", commit], capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
            checkouts.append(target)

        def row(
            what: str, goal: str, cases: list[tuple[str, dict]], goal_ms: tuple[float, float] | None, git_args, rg_args
        ) -> None:
            samples = [ours(r, pattern, **dict(options)) for pattern, options in cases for r in range(len(revisions))]
            git = [_git_grep_ms(git_dir, trees[r], *git_args) for r in range(2)] if git_args else []
            rg = [t for r in range(2) if (t := _rg_ms(checkouts[r], *rg_args)) is not None] if rg_args else []
            p50, p95 = statistics.median(samples), _percentile(samples, 0.95)
            met = None
            if goal_ms is not None:
                met = p50 <= goal_ms[0] and p95 <= goal_ms[1]
            elif rg:
                met = p50 <= statistics.median(rg)
            run.rows.append(
                Row(
                    what,
                    goal,
                    p50,
                    p95,
                    statistics.median(git) if git else None,
                    statistics.median(rg) if rg else None,
                    len(samples),
                    met,
                )
            )
            log(f"{what}: p50 {p50:.2f} ms")

        literal, regex = work.literals[0], work.regexes[0]
        # Warm: each revision searched once, as after its landing (a process's first search at
        # a revision maps its files' blobs; that cost is the cold row).
        cold = [ours(r, work.literals[-1]) for r in range(len(revisions))]
        run.figures["first_search_at_a_revision_p50_ms"] = statistics.median(cold)
        row(
            "selective literal",
            "p50 ≤ 10, p95 ≤ 50 ms",
            [(word, {}) for word in work.literals],
            (10, 50),
            ["-n", "-e", literal],
            ["-n", literal],
        )
        row(
            "selective regex (half with (?i))",
            "p50 ≤ 50, p95 ≤ 150 ms",
            [(pattern, {}) for pattern in work.regexes],
            (50, 150),
            ["-n", "-e", regex],
            ["-n", regex],
        )
        row(
            "term in most files, limit=100",
            "≤ 50 ms",
            [(work.common, {"limit": 100})],
            (50, 50),
            ["-n", "-e", work.common],
            ["-n", work.common],
        )
        row(
            "no usable trigram",
            "not slower than rg",
            [(r"\d\d\d\d\d", {"limit": 100})],
            None,
            ["-n", "-e", r"[0-9]{5}"],
            ["-n", r"\d\d\d\d\d"],
        )
        row(
            "mode=count over everything",
            "not slower than rg",
            [(work.count_term, {"mode": COUNT})],
            None,
            ["-c", "-e", work.count_term],
            ["-c", work.count_term],
        )

        log("a three-file landing")
        base = revisions[-1]
        landing_ms = []
        for k in range(5):
            new = subprocess.run(
                ["git", f"--git-dir={git_dir}", "fast-import", "--quiet"],
                input=_landing_stream(base, lists[-1].paths, k),
                capture_output=True,
                check=True,
            )
            del new
            head = subprocess.run(
                ["git", f"--git-dir={git_dir}", "rev-parse", f"refs/heads/bench-{k}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()

            def index_landing() -> None:
                # What the landing's job does (repos.services.search.index_head): the head's list
                # from its parent's, its new blobs indexed; the list saved for one head in 16.
                tree = store.read_commit(head).tree
                listed = lists[-1].changed(tree, file_changes(store, trees[-1], tree))
                index.add((blob, store.read_blob(blob.hex())) for blob in index.missing(listed.blobs))

            landing_ms.append(_timed(index_landing))
        run.figures["index_3_file_landing_p50_ms"] = statistics.median(landing_ms)

        log("8 concurrent searches")
        single = [ours(k % len(revisions), work.literals[k % len(work.literals)]) for k in range(40)]
        concurrent: list[float] = []
        lock = threading.Lock()

        def worker(offset: int) -> None:
            for k in range(10):
                took = ours((offset + k) % len(revisions), work.literals[(offset + k) % len(work.literals)])
                with lock:
                    concurrent.append(took)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        run.figures["single_p95_ms"] = _percentile(single, 0.95)
        run.figures["concurrent_8_p95_ms"] = _percentile(concurrent, 0.95)

        log(f"exactness: {patterns} patterns at {len(revisions)} revisions")
        _exactness(run, store, index, lists, git_dir, trees, generated_patterns(patterns, 37, work.words))
    return run


def _landing_stream(base: str, paths: list[str], k: int) -> bytes:
    parts = [f"commit refs/heads/bench-{k}\ncommitter A <a@a> 1800000000 +0000\ndata 4\nland\nfrom {base}\n".encode()]
    for n in range(3):
        raw = f"def landed_bench_{k}_{n}():\n    return {k * 3 + n}\n".encode()
        parts.append(b"M 100644 inline " + paths[(k * 7919 + n * 104729) % len(paths)].encode() + b"\n")
        parts.append(b"data %d\n" % len(raw) + raw + b"\n")
    return b"".join(parts)


def generated_patterns(count: int, seed: int, words: list[str]) -> list[str]:
    """Literals, (?i), anchors, classes, alternation, word boundaries and repetition over ``words``."""
    rng = random.Random(seed)
    shapes = [
        lambda w, v: w,
        lambda w, v: f"(?i){w.upper()}",
        lambda w, v: f"^ +{w}",
        lambda w, v: f"{w}$",
        lambda w, v: f"{w}[._ (]{v}",
        lambda w, v: f"({w}|{v})\\(",
        lambda w, v: f"\\b{w[:3]}\\w*{v[-2:]}\\b",
        lambda w, v: f"needle_{rng.randrange(NEEDLES)}_zq",
        lambda w, v: f"{w[:2]}.{w[3:]}",
        lambda w, v: f"[A-Z]{w[1:]}",
        lambda w, v: f"{w}{{2,}}",
    ]
    return [rng.choice(shapes)(rng.choice(words), rng.choice(words)) for _ in range(count)]


def _exactness(
    run: SearchRun,
    store: DiskStore,
    index: SearchIndex,
    lists: list[FileList],
    git_dir: Path,
    trees: list[str],
    patterns: list[str],
) -> None:
    """Each pattern's per-file counts with the index equal those of reading every file."""

    class Everything:
        def candidates(self, query, files):
            return None

    # Each blob read once: the scans read every file of five revisions per pattern.
    contents: dict[bytes, bytes] = {}

    def read(blob: bytes) -> bytes:
        found = contents.get(blob)
        if found is None:
            found = contents[blob] = store.read_blob(blob.hex())
        return found

    checked = 0
    for number, pattern in enumerate(patterns):
        matcher = Matcher(pattern)
        for revision, files in enumerate(lists):
            indexed = search(files, matcher, read, index, mode=FILES, limit=10**7)
            scanned = search(files, matcher, read, Everything(), mode=FILES, limit=10**7)
            got = [(hit.path, hit.count) for hit in indexed.files]
            if got != [(hit.path, hit.count) for hit in scanned.files]:
                run.differences.append(f"{pattern!r} at revision {revision}: index and scan differ")
            checked += 1
            if (
                number % 10 == 0
                and "." not in pattern
                and "(?i)" not in pattern
                and "\\b" not in pattern
                and "\\w" not in pattern
            ):
                grep = subprocess.run(
                    ["git", f"--git-dir={git_dir}", "grep", "-c", "-E", "-e", pattern, trees[revision]],
                    capture_output=True,
                    text=True,
                ).stdout.splitlines()
                expected = [(line.split(":")[1], int(line.split(":")[2])) for line in grep]
                if got != expected:
                    run.differences.append(f"{pattern!r} at revision {revision}: git grep -c differs")
    run.figures["exactness_checks"] = checked


def format_search(run: SearchRun) -> str:
    header = ["search", "goal", "ours p50 ms", "ours p95 ms", "git grep (tree) ms", "rg (checkout) ms", "met"]
    rows = [header] + [
        [
            row.what,
            row.goal,
            format_ms(row.ours_p50_ms),
            format_ms(row.ours_p95_ms),
            format_ms(row.git_grep_ms),
            format_ms(row.rg_ms),
            "" if row.met is None else ("yes" if row.met else "NO"),
        ]
        for row in run.rows
    ]
    f = run.figures
    rows += [
        [
            "first search at a revision (process cold for it)",
            "",
            format_ms(f["first_search_at_a_revision_p50_ms"]),
            "",
            "",
            "",
            "",
        ],
        [
            "3-file landing indexed",
            "≤ 30 ms",
            format_ms(f["index_3_file_landing_p50_ms"]),
            "",
            "",
            "",
            _yes(f["index_3_file_landing_p50_ms"] <= 30),
        ],
        [
            "first full index",
            "≤ 120 s, ≤ 300 MB",
            f"{f['first_index_s']:.1f} s",
            f"peak RSS {f['first_index_peak_rss_mb']:.0f} MB",
            "",
            "",
            _yes(f["first_index_s"] <= 120 and f["first_index_peak_rss_mb"] <= 300),
        ],
        [
            "index size",
            "≤ 30 % of blobs (real code)",
            f"{f['index_mb']:.1f} MB",
            f"{100 * f['index_share_of_blobs']:.0f} % of {f['unique_blob_mb']:.0f} MB",
            "",
            "",
            "",
        ],
        [
            "8 concurrent searches",
            "p95 ≤ 4× one",
            format_ms(f["concurrent_8_p95_ms"]),
            f"one: {format_ms(f['single_p95_ms'])}",
            "",
            "",
            _yes(f["concurrent_8_p95_ms"] <= 4 * f["single_p95_ms"]),
        ],
        [
            "exactness",
            "0 differences",
            f"{len(run.differences)} differences",
            f"{int(f['exactness_checks'])} checks",
            "",
            "",
            _yes(not run.differences),
        ],
    ]
    if run.source:
        corpus = f"{run.source}: {run.files} files at the newest of five revisions"
    else:
        corpus = f"{run.files} files, {run.landings} landings on {run.streams} streams"
    title = f"search: {corpus} ({run.corpus_bytes / 1e6:.0f} MB of unique blobs)\n"
    return title + "\n".join(text_table(rows)) + "\n"


def _yes(value: bool) -> str:
    return "yes" if value else "NO"


def to_json(run: SearchRun) -> dict:
    return asdict(run)
