"""Oracle tests: the real git binary answers the same questions on the same objects.

Histories are written by our engine into a bare repository (``DiskStore``), ``main`` is pointed
at the head with ``git update-ref``, and ``git merge-base``, ``git blame`` and ``git log`` must
agree with :mod:`engine.graph` and :mod:`engine.history`. ``git fsck --strict`` must accept
every repository.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.graph import is_ancestor, merge_bases
from engine.history import MemoryPathIndex, blame, derive, log
from engine.objects import ObjectId
from engine.store import DiskStore

from .conftest import commit_on, git, git_blame, run_git

ORACLE = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Repo:
    """A bare repository written by the engine, plus the git commands the tests compare with."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.store = DiskStore(path)

    def commit(self, parents: Sequence[ObjectId], files: dict[str, str | None], time: int) -> ObjectId:
        """A commit on ``parents[0]``'s tree with ``files`` written (None deletes), at ``time``."""
        return commit_on(self.store, parents, files, time=time, message=f"at {time}\n")

    def point_main(self, head: ObjectId) -> None:
        run_git(self.path, "update-ref", "refs/heads/main", head)

    def fsck(self) -> None:
        run_git(self.path, "fsck", "--strict")

    def merge_bases(self, a: ObjectId, b: ObjectId) -> list[ObjectId]:
        # Exit code 1 with no output means "no merge base".
        return sorted(run_git(self.path, "merge-base", "--all", a, b, ok=(0, 1)).stdout.decode().split())

    def is_ancestor(self, a: ObjectId, b: ObjectId) -> bool:
        return run_git(self.path, "merge-base", "--is-ancestor", a, b, ok=(0, 1)).returncode == 0

    def blame(self, path: str, *options: str) -> list[ObjectId]:
        """The commit git blames for each line of ``path`` at main, in line order."""
        return git_blame(self.path, "main", path, *options)

    def log(self, *paths: str) -> list[ObjectId]:
        return git(self.path, "log", "--format=%H", "main", "--", *paths).split()


def path_indexes(store: DiskStore, ids: Sequence[ObjectId]) -> Iterator[tuple[str, MemoryPathIndex]]:
    """Indexes a log may be given, all of which must leave its answer unchanged: the whole
    history derived (answered at once, or one generation window at a time); only the older
    half derived; every changeset too big to index."""
    everything = derive(store, ids[-1], lambda oid: False)
    for window in (None, 1):
        index = MemoryPathIndex(window=window)
        index.add(everything)
        yield f"window={window}", index
    older = MemoryPathIndex(window=2)
    older.add(derive(store, ids[len(ids) // 2], lambda oid: False))
    yield "older half", older
    unindexed = MemoryPathIndex()
    unindexed.add(derive(store, ids[-1], lambda oid: False, max_paths=0))
    yield "too big to index", unindexed


def assert_log_matches_git(repo: Repo, ids: Sequence[ObjectId], paths: Sequence[str]) -> None:
    """``log`` equals ``git log`` for each path, with and without each kind of path index."""
    for path in paths:
        expected = repo.log(path)
        assert log(repo.store, ids[-1], path) == expected, path
        for name, index in path_indexes(repo.store, ids):
            assert log(repo.store, ids[-1], path, index=index) == expected, (path, name)
    assert log(repo.store, ids[-1]) == repo.log()


def assert_blame_matches(repo: Repo, ids: Sequence[ObjectId], path: str, expected: list[ObjectId]) -> None:
    """``blame`` at the last of ``ids`` gives ``expected``, with and without each kind of path index."""
    assert [line.changeset for line in blame(repo.store, ids[-1], path)] == expected
    for name, index in path_indexes(repo.store, ids):
        assert [line.changeset for line in blame(repo.store, ids[-1], path, index=index)] == expected, name


@contextmanager
def fresh_repo() -> Iterator[Repo]:
    """A new repository per hypothesis example (function-scoped fixtures are shared by examples)."""
    with tempfile.TemporaryDirectory() as directory:
        yield Repo(Path(directory) / "r.git")


def build_dag(repo: Repo, parents: Sequence[Sequence[int]]) -> list[ObjectId]:
    """Commit ``i`` has parents ``parents[i]`` (indexes) and adds file ``c{i}``; times increase."""
    ids: list[ObjectId] = []
    for index, parent_indexes in enumerate(parents):
        ids.append(repo.commit([ids[p] for p in parent_indexes], {f"c{index}": f"{index}\n"}, index))
    return ids


# ---------------------------------------------------------------------------- merge bases

CRISS_CROSS = [[], [0], [0], [1, 2], [2, 1], [3], [4]]
#: Two unrelated roots (0 and 3), joined by merge 6; an octopus merge 7; a re-merge 8.
MIXED = [[], [0], [1], [], [3], [1, 4], [2, 5], [6, 4, 0], [7, 5]]


def test_merge_bases_and_ancestry_match_git_for_every_pair(tmp_path):
    repo = Repo(tmp_path / "r.git")
    for history in (CRISS_CROSS, MIXED):
        ids = build_dag(repo, history)
        for a in ids:
            for b in ids:
                assert merge_bases(repo.store, a, b) == repo.merge_bases(a, b), (a, b)
                assert is_ancestor(repo.store, a, b) == repo.is_ancestor(a, b), (a, b)
    repo.point_main(ids[-1])
    repo.fsck()


@st.composite
def dags(draw, max_size: int = 10) -> list[list[int]]:
    """Random histories: mostly single-parent commits, some roots and two- or three-way merges."""
    size = draw(st.integers(2, max_size))
    history: list[list[int]] = [[]]
    for index in range(1, size):
        count = min(index, draw(st.sampled_from([0, 1, 1, 1, 1, 2, 2, 3])))
        history.append(draw(st.lists(st.integers(0, index - 1), min_size=count, max_size=count, unique=True)))
    return history


@ORACLE
@given(history=dags(), data=st.data())
def test_merge_bases_match_git_on_random_histories(history, data):
    with fresh_repo() as repo:
        ids = build_dag(repo, history)
        for _ in range(4):
            a = data.draw(st.sampled_from(ids))
            b = data.draw(st.sampled_from(ids))
            assert merge_bases(repo.store, a, b) == repo.merge_bases(a, b)
            assert is_ancestor(repo.store, a, b) == repo.is_ancestor(a, b)


# ---------------------------------------------------------------------------- blame


def test_blame_matches_git_on_a_history_of_edits(tmp_path):
    repo = Repo(tmp_path / "r.git")
    versions = [
        "a\nb\nc\n",
        "a\nB\nc\n",
        None,  # a changeset that touches another file only
        "a\nB\nc\nd\n",
        "x\na\nB\nc\nd\n",
        "x\na\nB\nd\n",
        "x\na\nB\nd\ne\nf\n",
    ]
    history: list[ObjectId] = []
    for time, text in enumerate(versions):
        files = {"other.txt": f"{time}\n"} if text is None else {"dir/f.txt": text}
        history.append(repo.commit(history[-1:], files, time))
    repo.point_main(history[-1])
    repo.fsck()
    assert_blame_matches(repo, history, "dir/f.txt", repo.blame("dir/f.txt"))


def test_blame_matches_git_first_parent_across_merges(tmp_path):
    repo = Repo(tmp_path / "r.git")
    base = repo.commit([], {"f.txt": "a\nb\nc\n"}, 0)
    side = repo.commit([base], {"f.txt": "a\nb\nc\nside\n"}, 1)
    main = repo.commit([base], {"f.txt": "main\na\nb\nc\n"}, 2)
    merged = repo.commit([main, side], {"f.txt": "main\na\nb\nc\nside\n"}, 3)
    after = repo.commit([merged], {"f.txt": "main\na\nB\nc\nside\n"}, 4)
    repo.point_main(after)
    repo.fsck()
    ours = [line.changeset for line in blame(repo.store, after, "f.txt")]
    assert ours == repo.blame("f.txt", "--first-parent")
    assert ours == [main, base, after, base, merged]
    assert_blame_matches(repo, [base, side, main, merged, after], "f.txt", ours)


#: A modest alphabet of distinct lines: each version holds a line at most once and edits never
#: move a line, so the line matching is unambiguous and any diff algorithm agrees. (A deleted
#: line may come back in a later changeset: that is new to its parent, not a move.)
ALPHABET = [f"line {i}: {'x' * (i % 7)}\n" for i in range(40)]


@st.composite
def linear_edits(draw) -> list[list[str] | None]:
    """Successive versions of one file (None: the changeset leaves the file alone)."""
    current = draw(st.lists(st.sampled_from(ALPHABET), max_size=8, unique=True))
    versions: list[list[str] | None] = [list(current)]
    for _ in range(draw(st.integers(1, 7))):
        if draw(st.integers(0, 5)) == 0:
            versions.append(None)
            continue
        before = set(current)
        for _ in range(draw(st.integers(1, 3))):
            # Never a line of the parent version: deleting and re-adding it would be a move.
            unused = [line for line in ALPHABET if line not in current and line not in before]
            kind = draw(st.sampled_from(["insert", "delete", "replace"] if current else ["insert"]))
            if kind == "insert":
                current.insert(draw(st.integers(0, len(current))), draw(st.sampled_from(unused)))
            elif kind == "delete":
                del current[draw(st.integers(0, len(current) - 1))]
            else:
                current[draw(st.integers(0, len(current) - 1))] = draw(st.sampled_from(unused))
        versions.append(list(current))
    return versions


@ORACLE
@given(versions=linear_edits())
def test_blame_equals_git_blame_on_random_linear_histories(versions):
    with fresh_repo() as repo:
        history: list[ObjectId] = []
        for time, lines in enumerate(versions):
            files = {"other.txt": f"unrelated {time}\n"} if lines is None else {"src/f.txt": "".join(lines)}
            history.append(repo.commit(history[-1:], files, time))
        repo.point_main(history[-1])
        assert_blame_matches(repo, history, "src/f.txt", repo.blame("src/f.txt"))


# ---------------------------------------------------------------------------- log


def test_log_matches_git_on_a_linear_history(tmp_path):
    repo = Repo(tmp_path / "r.git")
    steps = [
        {"f.txt": "1\n", "d/g.txt": "1\n"},
        {"d/g.txt": "2\n"},
        {"f.txt": "2\n"},
        {"f.txt": None},
        {"d/h.txt": "1\n"},
        {"f.txt": "3\n"},
    ]
    history: list[ObjectId] = []
    for time, files in enumerate(steps):
        history.append(repo.commit(history[-1:], files, time))
    repo.point_main(history[-1])
    repo.fsck()
    assert_log_matches_git(repo, history, ("f.txt", "d", "d/g.txt", "d/h.txt", "nothing.txt"))


def test_log_matches_git_on_merges(tmp_path):
    repo = Repo(tmp_path / "r.git")
    base = repo.commit([], {"f": "base\n", "g": "base\n"}, 0)
    main1 = repo.commit([base], {"f": "main\n"}, 1)
    side1 = repo.commit([base], {"f": "side\n", "g": "side\n"}, 2)
    keep_main = repo.commit([main1, side1], {"g": "side\n"}, 3)  # f from main, g from side
    side2 = repo.commit([side1], {"g": "side2\n"}, 4)
    resolved = repo.commit([keep_main, side2], {"g": "resolved\n"}, 5)  # g differs from both
    side3 = repo.commit([side2], {"f": "side3\n"}, 6)
    take_side = repo.commit([resolved, side3], {"f": "side3\n"}, 7)  # f from the side
    revert = repo.commit([side3], {"f": "side3\n", "g": "resolved\n"}, 8)
    both_same = repo.commit([take_side, revert], {}, 9)  # f and g equal on both sides
    repo.point_main(both_same)
    repo.fsck()
    history = [base, main1, side1, keep_main, side2, resolved, side3, take_side, revert, both_same]
    assert_log_matches_git(repo, history, ("f", "g"))


@st.composite
def histories_with_files(draw) -> list[tuple[list[int], dict[str, str | None], int]]:
    """Random histories as ``(parents, files, time)``, editing ``f`` and ``d/g``.

    ``files`` is the content of every path written (None: deleted) on top of the first
    parent. Merges often take a path from one of their parents, so treesame merges of every
    kind appear; a small value alphabet makes unrelated commits write identical content;
    committer times clash and go backwards, so git's date order and tie-breaks are exercised.
    """
    shape = draw(dags(max_size=9))
    states: list[dict[str, str | None]] = []
    commits = []
    for index, parents in enumerate(shape):
        state = dict(states[parents[0]]) if parents else {}
        for path in ("f", "d/g"):
            choice = draw(st.sampled_from(["keep", "keep", "write", "from-parent"]))
            if choice == "from-parent" and parents:
                state[path] = states[draw(st.sampled_from(parents))].get(path)
            elif choice != "keep" or not parents:
                state[path] = draw(st.sampled_from(["v0\n", "v1\n", "v2\n", None]))
        state[f"c{index}"] = "x\n"  # every commit changes something
        states.append(state)
        commits.append((parents, state, draw(st.integers(0, 4))))
    return commits


@ORACLE
@given(history=histories_with_files())
def test_log_equals_git_log_on_random_histories(history):
    with fresh_repo() as repo:
        ids: list[ObjectId] = []
        for parents, files, time in history:
            ids.append(repo.commit([ids[p] for p in parents], files, time))
        repo.point_main(ids[-1])
        assert_log_matches_git(repo, ids, ("f", "d", "d/g"))
