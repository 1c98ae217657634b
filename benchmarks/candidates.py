"""The libraries the engine could have been built on, measured on the same repository.

Reproduces the table of docs/adr/0001: for each operation, our engine beside dulwich and pygit2
(libgit2) doing the same work on the same bare repository, written by our engine with the
synthetic layout of the engine benchmark. Each cell asserts what it measured (the changed file
found, the merge clean, every line blamed), so a library that answers differently fails loudly
rather than looking fast. "ours (cold)" uses a fresh store, so every tree is read and parsed;
"ours" is the steady state of a server whose store has seen the trees before.

No Django here, like the engine benchmark.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.changeset import Write, create_changeset
from engine.history import blame
from engine.merge import merge_trees
from engine.objects import BLOB, Signature
from engine.store import DiskStore, ObjectBatch
from engine.trees import diff_trees

from .engine_bench import EPOCH, file_content, file_path

CANDIDATES = ("ours (cold)", "ours", "dulwich", "pygit2")
OPERATIONS = ("ingest", "read 1 000 blobs", "tree diff 1 file", "merge_trees 1 file each side", "blame 20 changesets")
BLAME_PATH = "src/target.txt"


@dataclass
class Cell:
    operation: str
    files: int
    candidate: str
    median_ms: float
    samples: int


def _median_ms(call: Callable[[], object], samples: int) -> float:
    times = []
    for _ in range(samples):
        start = time.perf_counter_ns()
        call()
        times.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(times)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def run_candidates(sizes: list[int], *, samples: int = 5, on_cell: Callable[[Cell], None] | None = None) -> list[Cell]:
    """Measure every candidate on every operation at every size; returns the cells."""
    cells: list[Cell] = []
    for files in sizes:
        with tempfile.TemporaryDirectory(prefix="agentgit-candidates-") as tmp:
            for cell in _measure_size(Path(tmp), files, samples):
                cells.append(cell)
                if on_cell:
                    on_cell(cell)
    return cells


def _measure_size(tmp: Path, files: int, samples: int):
    import pygit2
    from dulwich.annotate import annotate_lines
    from dulwich.diff_tree import tree_changes
    from dulwich.merge import three_way_merge
    from dulwich.objects import Blob
    from dulwich.repo import Repo

    contents = [file_content(i) for i in range(files)]

    def cell(operation: str, candidate: str, call: Callable[[], object], n: int = samples) -> Cell:
        return Cell(operation, files, candidate, _median_ms(call, n), n)

    # Ingest: every blob of the import into a fresh repository, each library its own way.
    def ours_ingest() -> None:
        DiskStore(tmp / "ingest-ours.git").add_many((BLOB, data) for data in contents)

    def pygit2_ingest() -> None:
        odb = pygit2.init_repository(str(tmp / "ingest-pygit2.git"), bare=True).odb
        for data in contents:
            odb.write(pygit2.enums.ObjectType.BLOB, data)

    def dulwich_ingest() -> None:
        repo = Repo.init_bare(str(tmp / "ingest-dulwich.git"), mkdir=True)
        repo.object_store.add_objects([(Blob.from_string(data), None) for data in contents])

    for candidate, call in (("ours", ours_ingest), ("pygit2", pygit2_ingest), ("dulwich", dulwich_ingest)):
        yield cell("ingest", candidate, call, 1)

    # One repository for everything else: the import, one change on each side, a blamed file.
    path = tmp / "repo.git"
    store = DiskStore(path)
    ids = store.add_many((BLOB, data) for data in contents)
    author = Signature("Bench", "bench@example.com", EPOCH)
    lines = [b"line %d\n" % i for i in range(200)]
    target = store.add(BLOB, b"".join(lines))
    base = create_changeset(
        store,
        None,
        [Write(file_path(i), ids[i]) for i in range(files)] + [Write(BLAME_PATH, target)],
        message="import\n",
        author=author,
    )
    ours = create_changeset(
        store, base, [Write(file_path(1), store.add(BLOB, b"ours\n"))], message="o\n", author=author
    )
    theirs = create_changeset(
        store, base, [Write(file_path(files - 2), store.add(BLOB, b"theirs\n"))], message="t\n", author=author
    )
    head = base
    for step in range(1, 21):
        lines[step * 9] = b"changed by %d\n" % step
        blob = store.add(BLOB, b"".join(lines))
        head = create_changeset(store, head, [Write(BLAME_PATH, blob)], message=f"{step}\n", author=author)
    trees = {name: store.read_commit(c).tree for name, c in (("base", base), ("ours", ours), ("theirs", theirs))}

    repo = pygit2.Repository(str(path))
    dulwich_store = Repo(str(path)).object_store
    sample_ids = ids[:: max(1, files // 1000)][:1000]

    def fresh() -> DiskStore:
        return DiskStore(path)

    def ours_diff(on: DiskStore) -> None:
        _check(len(diff_trees(on, trees["base"], trees["ours"])) == 1, "ours: diff")

    def ours_merge(on: DiskStore) -> None:
        _check(merge_trees(ObjectBatch(on), trees["base"], trees["ours"], trees["theirs"]).clean, "ours: merge")

    def ours_blame(on: DiskStore) -> None:
        _check(len(blame(on, head, BLAME_PATH)) == 200, "ours: blame")

    warm = fresh()
    for name, operation in (
        ("tree diff 1 file", ours_diff),
        ("merge_trees 1 file each side", ours_merge),
        ("blame 20 changesets", ours_blame),
    ):
        yield cell(name, "ours (cold)", lambda: operation(fresh()))
        operation(warm)
        yield cell(name, "ours", lambda: operation(warm))

    yield cell("read 1 000 blobs", "pygit2", lambda: [repo.odb.read(oid) for oid in sample_ids])
    yield cell("read 1 000 blobs", "dulwich", lambda: [dulwich_store[oid.encode()].data for oid in sample_ids])

    def dulwich_diff() -> None:
        changes = list(tree_changes(dulwich_store, trees["base"].encode(), trees["ours"].encode()))
        _check(len(changes) == 1, "dulwich: diff")

    def pygit2_diff() -> None:
        _check(len(repo.get(trees["base"]).diff_to_tree(repo.get(trees["ours"]))) == 1, "pygit2: diff")

    def dulwich_merge() -> None:
        commit = lambda oid: dulwich_store[oid.encode()]  # noqa: E731
        _, conflicts = three_way_merge(dulwich_store, commit(base), commit(ours), commit(theirs))
        _check(not conflicts, "dulwich: merge")

    def pygit2_merge() -> None:
        index = repo.merge_trees(repo.get(trees["base"]), repo.get(trees["ours"]), repo.get(trees["theirs"]))
        _check(not index.conflicts, "pygit2: merge")
        index.write_tree(repo)

    def dulwich_blame() -> None:
        _check(len(annotate_lines(dulwich_store, head.encode(), BLAME_PATH.encode())) == 200, "dulwich: blame")

    def pygit2_blame() -> None:
        _check(len(list(repo.blame(BLAME_PATH, newest_commit=head))) > 0, "pygit2: blame")

    slow = min(samples, 3)
    yield cell("tree diff 1 file", "dulwich", dulwich_diff)
    yield cell("tree diff 1 file", "pygit2", pygit2_diff)
    yield cell("merge_trees 1 file each side", "dulwich", dulwich_merge, slow)
    yield cell("merge_trees 1 file each side", "pygit2", pygit2_merge, slow)
    yield cell("blame 20 changesets", "dulwich", dulwich_blame, slow)
    yield cell("blame 20 changesets", "pygit2", pygit2_blame, slow)
    shutil.rmtree(path)


def format_candidates(cells: list[Cell]) -> str:
    """One table per size: operations down, candidates across, median milliseconds."""
    out = []
    for files in sorted({c.files for c in cells}):
        by_key = {(c.operation, c.candidate): c for c in cells if c.files == files}
        header = f"| {files} files | " + " | ".join(CANDIDATES) + " |"
        out += [header, "|" + "---|" * (len(CANDIDATES) + 1)]
        for operation in OPERATIONS:
            values = [by_key.get((operation, candidate)) for candidate in CANDIDATES]
            out.append(f"| {operation} | " + " | ".join(f"{v.median_ms:.3g}" if v else "" for v in values) + " |")
        out.append("")
    return "\n".join(out)
