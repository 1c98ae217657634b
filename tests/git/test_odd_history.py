"""A real-shaped history imported, and every read answered as git answers it on the same repository.

The history (tests/git/odd_history.py) holds what real histories hold: messages in ISO-8859-1
with an ``encoding`` header and in bytes that are not UTF-8, paths that are not UTF-8 or hold a
backslash, a submodule, a symlink, CRLF, binary and large files, an empty commit, odd time
zones, ``gpgsig`` and ``mergetag`` headers, an octopus merge and a merge of 1 200 files. git
itself is the oracle for each answer.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from engine.objects import path_from_bytes
from repos.services import imports

from . import odd_history
from .odd_history import git_bytes

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return odd_history.build(tmp_path_factory.mktemp("odd") / "source.git")


@pytest.fixture
def odd(source, admin, client_for):
    """The odd history, imported as the repository ``odd``, and a reader's client."""
    history = source
    result = imports.import_repository("odd", str(history.git_dir))
    assert (result.created_streams, result.moved_streams) == (["side"], ["main"])  # main: the repository's own
    history.reader = client_for(["read"])
    return history


def get(odd, suffix: str, **params):
    response = odd.reader.get(f"/api/v1/repos/odd{suffix}", params)
    assert response.status_code == 200, (suffix, response.status_code, response.content[:500])
    return response


def test_log_lists_every_commit_in_gits_order_with_messages_and_names_as_git_shows_them(odd):
    log = get(odd, "/log", rev="main", limit=500).json()["changesets"]
    assert [c["id"] for c in log] == git_bytes(odd.git_dir, "rev-list", "main").decode().split()
    for changeset in log:
        shown = git_bytes(odd.git_dir, "show", "-s", "--format=%an%x00%ae%x00%B", changeset["id"])
        name, email, message = shown.decode("utf-8", "replace").split("\x00")
        assert (changeset["author"]["name"], changeset["author"]["email"]) == (name, email)
        assert changeset["message"].rstrip("\n") == message.rstrip("\n")
    by_id = {c["id"]: c for c in log}
    assert by_id[odd.odd["latin1"]]["message"] == "Café crème: édité\n"  # re-encoded, as git shows it
    assert by_id[odd.odd["latin1"]]["author"]["name"] == "José García"
    assert by_id[odd.odd["invalid"]]["message"] == "bytes \ufffd\ufffd that are not UTF-8\n"
    assert len(by_id[odd.odd["octopus"]]["parents"]) == 3
    recorded = get(odd, f"/changesets/{odd.odd['latin1']}").json()
    assert recorded["message"] == "Café crème: édité\n"


@pytest.mark.parametrize(
    "path",
    [b"README.md", b"docs/moved/text.txt", b"vendor/lib", b"run.sh", b"link", odd_history.LATIN1_NAME,
     odd_history.BACKSLASH_NAME, b"many/07", b"arms/1.txt", b"data.bin"],
)  # fmt: skip
def test_log_of_a_path_lists_what_git_log_lists(odd, path):
    log = get(odd, "/log", rev="main", path=path_from_bytes(path), limit=500).json()["changesets"]
    expected = git_bytes(odd.git_dir, "--literal-pathspecs", "log", "--format=%H", "main", "--", path)
    assert [c["id"] for c in log] == expected.decode().split()


def _git_tree(odd, rev: str, path: bytes = b"") -> list[dict]:
    out = git_bytes(odd.git_dir, "ls-tree", "-z", rev + ":" + path.decode("latin-1") if path else rev)
    kinds = {b"blob": "file", b"tree": "dir", b"commit": "submodule"}
    entries = []
    for record in out.split(b"\x00"):
        if record:
            meta, _, name = record.partition(b"\t")
            mode, kind, oid = meta.split()
            entries.append(
                {"name": path_from_bytes(name), "type": kinds[kind], "id": oid.decode(), "mode": mode.decode()}
            )
    return sorted(entries, key=lambda e: e["name"])


@pytest.mark.parametrize("commit", ["root", "invalid", "gitlink", "renamed", "last"])
def test_trees_list_what_git_ls_tree_lists_with_names_escaped_and_submodules_named(odd, commit):
    rev = odd.odd[commit]
    entries = get(odd, f"/tree/{rev}").json()["entries"]
    assert [{k: e[k] for k in ("name", "type", "id", "mode")} for e in entries] == _git_tree(odd, rev)
    assert all(e["path"] == e["name"] for e in entries)


def test_a_file_read_by_its_escaped_name_is_gits_bytes_and_a_submodule_is_not_a_file(odd):
    rev = odd.odd["last"]
    for name, entry in [(e["name"], e) for e in get(odd, f"/tree/{rev}").json()["entries"]]:
        if entry["type"] != "file":
            continue
        raw = get(odd, f"/files/{rev}/{quote(name)}").content
        assert raw == git_bytes(odd.git_dir, "cat-file", "blob", entry["id"]), name
    assert get(odd, f"/files/{rev}/link").content == b"docs/moved/text.txt"  # a symlink: its target
    submodule = odd.reader.get(f"/api/v1/repos/odd/files/{rev}/vendor/lib")
    assert submodule.status_code == 404
    assert submodule.json()["error"]["code"] == "not_found"
    assert "submodule" in submodule.json()["error"]["message"]
    malformed = odd.reader.get("/api/v1/repos/odd/files/main/" + quote("caf\\x41.txt"))
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == "invalid"


def _git_changes(odd, old: str, new: str) -> list[tuple[str, ...]]:
    out = git_bytes(odd.git_dir, "diff", "-M", "--name-status", "-z", old, new).split(b"\x00")
    changes = []
    status_names = {"A": "added", "M": "modified", "D": "deleted", "T": "modified", "R": "renamed"}
    while out and out[0]:
        status = out.pop(0).decode()[0]
        path = path_from_bytes(out.pop(0))
        if status == "R":  # the old path, then the new one
            changes.append(("renamed", path_from_bytes(out.pop(0)), path))
        else:
            changes.append((status_names[status], path))
    return sorted(changes)


@pytest.mark.parametrize(
    "old, new",
    [("root", "latin1"), ("latin1", "invalid"), ("invalid", "empty"), ("empty", "gitlink"), ("gitlink", "signed"),
     ("signed", "renamed"), ("renamed", "octopus"), ("octopus", "huge"), ("root", "last")],
)  # fmt: skip
def test_diffs_change_the_paths_git_diff_changes_with_its_renames(odd, old, new):
    answer = get(odd, "/diff", **{"from": odd.odd[old], "to": odd.odd[new]}).json()
    ours = sorted(
        (c["status"], c["path"], c["old_path"]) if c["status"] == "renamed" else (c["status"], c["path"])
        for c in answer["changes"]
    )
    assert ours == _git_changes(odd, odd.odd[old], odd.odd[new])
    if (old, new) == ("renamed", "octopus"):
        assert len(answer["changes"]) == 3
    if (old, new) == ("gitlink", "signed"):
        assert "old mode 100755\nnew mode 100644\n" in answer["patch"]
    if (old, new) == ("empty", "gitlink"):
        assert f"+Subproject commit {odd_history.SUBMODULE_COMMIT}\n" in answer["patch"]


def test_imported_changesets_carry_operations_with_escaped_paths(odd):
    added = get(odd, f"/changesets/{odd.odd['invalid']}").json()["operations"]
    assert sorted(op["path"] for op in added) == ["back\\\\slash.txt", "caf\\xe9.txt"]
    assert get(odd, f"/changesets/{odd.odd['empty']}").json()["operations"] == []
    huge = get(odd, f"/changesets/{odd.odd['huge']}").json()
    assert len(huge["operations"]) == odd_history.MANY_FILES
    assert get(odd, f"/changesets/{odd.odd['gitlink']}").json()["operations"] == [
        {"op": "write", "path": "vendor/lib", "blob": odd_history.SUBMODULE_COMMIT, "mode": "160000"}
    ]


@pytest.mark.parametrize(
    "path", [b"README.md", b"win.txt", b"no-newline.txt", b"big.txt", odd_history.LATIN1_NAME, b"run.sh"]
)
def test_blame_attributes_each_line_as_git_blame_first_parent_does(odd, path):
    lines = get(odd, f"/blame/main/{quote(path_from_bytes(path))}").json()["lines"]
    porcelain = git_bytes(odd.git_dir, "blame", "--first-parent", "--porcelain", "main", "--", path)
    expected = []
    for line in porcelain.split(b"\n"):
        fields = line.split(b" ")
        if len(fields) >= 3 and len(fields[0]) == 40 and not line.startswith(b"\t"):
            expected.append(fields[0].decode())
    assert [line["changeset"] for line in lines] == expected
    if path == b"win.txt":
        assert lines[0]["text"] == "one\r"  # only \n ends a line, as in git


def test_the_import_runs_again_as_a_no_op_and_a_landing_moves_the_imported_stream(odd, client_for):
    again = imports.import_repository("odd", str(odd.git_dir))
    assert (again.changesets, again.created_streams, again.moved_streams) == (0, [], [])
    writer = client_for(["read", "write", "integrate"])
    head = get(odd, "/streams/main").json()["head"]
    landed = writer.post(
        "/api/v1/repos/odd/streams/main/land",
        {
            "parent": head,
            "message": "after the import\n",
            "operations": [{"op": "write", "path": "new.txt", "content": "x\n"}],
        },
        format="json",
    )
    assert landed.status_code == 200, landed.content
    assert landed.json()["outcome"] == "fast_forward"
    tree = {e["name"]: e for e in get(odd, "/tree/main").json()["entries"]}
    assert tree["caf\\xe9.txt"]["type"] == "file" and tree["vendor"]["type"] == "dir"
