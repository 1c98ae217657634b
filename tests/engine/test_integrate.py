"""integrate(): fast-forward, merge, conflict and already-integrated, as a pure function over the store."""

from __future__ import annotations

import pytest

from engine.errors import InvalidObjectId, ObjectMissing, WrongObjectType
from engine.integrate import Outcome, integrate
from engine.objects import BLOB

from .conftest import signature

TEXT = "".join(f"line {i}\n" for i in range(1, 11))


def _integrate(build, stream, proposal):
    return integrate(build.store, stream, proposal, committer=signature(99))


def test_an_empty_stream_fast_forwards_to_the_proposal(build):
    head = build.commit({"a": "a\n"})
    result = _integrate(build, None, head)
    assert (result.outcome, result.head, result.changeset) == (Outcome.FAST_FORWARD, head, head)


def test_a_descendant_fast_forwards(build):
    base = build.commit({"a": "a\n"})
    child = build.commit({"b": "b\n"}, parent=base)
    result = _integrate(build, base, child)
    assert (result.outcome, result.head) == (Outcome.FAST_FORWARD, child)


def test_an_ancestor_or_the_head_itself_is_already_integrated(build):
    base = build.commit({"a": "a\n"})
    child = build.commit({"b": "b\n"}, parent=base)
    for proposal in (base, child):
        result = _integrate(build, child, proposal)
        assert (result.outcome, result.head, result.changeset) == (Outcome.ALREADY_INTEGRATED, child, None)


def test_diverged_heads_merge_into_a_changeset_with_both_parents(build):
    base = build.commit({"f.txt": TEXT, "g.txt": "g\n"})
    stream = build.commit({"f.txt": TEXT.replace("line 1\n", "first\n")}, parent=base)
    proposal = build.commit({"f.txt": TEXT.replace("line 10\n", "last\n"), "new.txt": "n\n"}, parent=base)
    result = _integrate(build, stream, proposal)
    assert result.outcome == Outcome.MERGE and result.head == result.changeset
    merge = build.store.read_commit(result.head)
    assert merge.parents == (stream, proposal)
    files = build.files(result.head)
    assert files["f.txt"].startswith(b"first\n") and files["f.txt"].endswith(b"last\n")
    assert files["new.txt"] == b"n\n"
    # The same inputs give the same merge changeset: integrating twice cannot fork history.
    assert _integrate(build, stream, proposal).head == result.head


def test_a_conflict_names_the_paths_and_leaves_the_stream_where_it_was(build):
    base = build.commit({"f.txt": TEXT, "other.txt": "o\n"})
    stream = build.commit({"f.txt": TEXT.replace("line 5", "stream")}, parent=base)
    proposal = build.commit({"f.txt": TEXT.replace("line 5", "proposal"), "other.txt": "changed\n"}, parent=base)
    result = _integrate(build, stream, proposal)
    assert result.outcome == Outcome.CONFLICT
    assert result.head == stream and result.changeset is None
    assert [(c.path, c.kind) for c in result.conflicts] == [("f.txt", "content")]


def test_rename_on_the_stream_and_edit_in_the_proposal_lands_the_edit_at_the_new_path(build):
    base = build.commit({"src/app.py": TEXT})
    stream = build.commit(renames={"src/app.py": "lib/app.py"}, parent=base)
    proposal = build.commit({"src/app.py": TEXT.replace("line 3", "patched")}, parent=base)
    result = _integrate(build, stream, proposal)
    assert result.outcome == Outcome.MERGE
    assert build.files(result.head) == {"lib/app.py": TEXT.replace("line 3", "patched").encode()}


def test_criss_cross_histories_merge_through_a_virtual_base(build):
    base = build.commit({"f.txt": TEXT})
    a1 = build.commit({"a.txt": "a\n"}, parent=base)
    b1 = build.commit({"b.txt": "b\n"}, parent=base)
    a2 = integrate(build.store, a1, b1, committer=signature(50)).head
    b2 = integrate(build.store, b1, a1, committer=signature(51)).head
    a3 = build.commit({"f.txt": TEXT.replace("line 2", "A")}, parent=a2)
    b3 = build.commit({"f.txt": TEXT.replace("line 9", "B")}, parent=b2)
    result = _integrate(build, a3, b3)
    assert result.outcome == Outcome.MERGE
    merged = build.files(result.head)["f.txt"]
    assert b"A\n" in merged and b"B\n" in merged


def test_unrelated_histories_merge_when_their_files_do_not_collide(build):
    one = build.commit({"a.txt": "a\n"})
    other = build.commit({"b.txt": "b\n"})
    result = _integrate(build, one, other)
    assert result.outcome == Outcome.MERGE
    assert build.files(result.head) == {"a.txt": b"a\n", "b.txt": b"b\n"}


def test_bad_heads_are_errors_not_outcomes(build):
    head = build.commit({"a": "a\n"})
    blob = build.store.add(BLOB, b"x")
    with pytest.raises(InvalidObjectId):
        _integrate(build, head, "nope")
    with pytest.raises(ObjectMissing):
        _integrate(build, head, "0" * 40)
    with pytest.raises(WrongObjectType):
        _integrate(build, head, blob)
    with pytest.raises(ObjectMissing):
        _integrate(build, "1" * 40, head)
