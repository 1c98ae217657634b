"""A landing's pack kept in its database commit instead of fsynced (docs/adr/0023): what a
power loss takes is written back at the next start, and a roll-up lets the journal forget."""

from __future__ import annotations

import gc
import os
import subprocess

import pytest
from django.core.management import call_command

from engine.store import INDEXES_CHECKED, TORN_PACKS
from repos.models import PackJournal
from repos.services import dispatch, search, stores

pytestmark = pytest.mark.django_db(transaction=True)


def _land(api, path: str, text: str, parent: object = ...) -> dict:
    body: dict = {"message": f"write {path}\n", "operations": [{"op": "write", "path": path, "content": text}]}
    if parent is not ...:
        body["parent"] = parent
    response = api.post("/streams/main/land", body)
    assert response.status_code == 200, response.content
    return response.json()


def _git(git_dir, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True, check=True).stdout


def _power_loss(git_dir, damage: str) -> None:
    """What a power loss may do to files written without an fsync: the journaled packs gone,
    cut short or zeros, their indexes with them; then a new boot, in a new process."""
    # The process stops: its threads too (a landing's detached jobs, such as code search's
    # indexing, which read the packs), before the files are damaged and a new process starts.
    assert dispatch.wait_for_detached(timeout_s=30)
    pack_dir = git_dir / "objects" / "pack"
    for name in PackJournal.objects.values_list("name", flat=True):
        pack, index = pack_dir / f"{name}.pack", pack_dir / f"{name}.idx"
        index.unlink(missing_ok=True)
        if damage == "missing":
            pack.unlink()
        else:
            whole = pack.read_bytes()
            pack.chmod(0o644)
            pack.write_bytes(whole[: len(whole) // 2] if damage == "truncated" else bytes(len(whole)))
    (git_dir / INDEXES_CHECKED).write_text("a-boot-before-the-power-loss")
    stores._stores.clear()  # a new process: no store opened yet
    # ... and none left open anywhere: libgit2 shares an open pack by its path between object
    # databases, so one still alive (code search's caches keep readers) would serve the old file.
    search.forget_index("demo")
    gc.collect()


@pytest.mark.parametrize("damage", ["missing", "truncated", "zeroed"])
def test_landings_whose_packs_a_power_loss_took_are_whole_after_the_next_start(api, settings, damage):
    settings.AGENTGIT = {**settings.AGENTGIT, "ROLL_UP_PACKS": 1000}  # no roll-up: the journal keeps all
    base = _land(api, "a.txt", "one\n")["changeset"]
    _land(api, "b.txt", "two\n")
    merged = _land(api, "c.txt", "three\n", parent=base)  # on an older parent: the server's merge
    assert merged["outcome"] == "merge"
    head = api.head()
    journaled = PackJournal.objects.count()
    assert journaled == 4  # three changesets and the merge, each its own pack in its own commit

    git_dir = stores.repository_path("demo")
    _power_loss(git_dir, damage)
    call_command("agentgit_recover", verbosity=0)  # what every start runs first

    assert api.head() == head
    assert [api.file(path) for path in ("a.txt", "b.txt", "c.txt")] == [b"one\n", b"two\n", b"three\n"]
    _git(git_dir, "fsck", "--strict", "--no-dangling")
    assert _git(git_dir, "rev-list", "--count", head).strip() == "4"
    assert not (git_dir / TORN_PACKS).exists()  # everything torn came back from the journal


def test_a_torn_pack_that_no_commit_named_is_moved_aside_and_the_repository_still_opens(api):
    _land(api, "a.txt", "one\n")
    assert dispatch.wait_for_detached(timeout_s=30)  # the process stops: its threads too
    git_dir = stores.repository_path("demo")
    # A pack written without an fsync by a transaction that never committed (no row keeps
    # it), left as zeros by the power loss.
    torn = git_dir / "objects" / "pack" / ("pack-" + "ab" * 20 + ".pack")
    torn.write_bytes(bytes(200))
    (git_dir / INDEXES_CHECKED).write_text("a-boot-before-the-power-loss")
    stores._stores.clear()

    assert api.file("a.txt") == b"one\n"
    assert not torn.exists() and (git_dir / TORN_PACKS / torn.name).read_bytes() == bytes(200)
    _git(git_dir, "fsck", "--strict", "--no-dangling")


def test_a_roll_up_syncs_the_journaled_packs_and_forgets_them(api, settings):
    settings.AGENTGIT = {**settings.AGENTGIT, "ROLL_UP_PACKS": 4}
    for n in range(3):
        _land(api, f"f{n}.txt", f"{n}\n")
    assert PackJournal.objects.count() == 3
    _land(api, "f3.txt", "3\n")  # the fourth pack: the roll-up after this commit

    assert PackJournal.objects.count() == 0
    assert [api.file(f"f{n}.txt") for n in range(4)] == [b"%d\n" % n for n in range(4)]
    git_dir = stores.repository_path("demo")
    assert len([name for name in os.listdir(git_dir / "objects" / "pack") if name.endswith(".pack")]) < 4


def test_an_upload_is_journaled_in_its_own_commit_and_a_pack_past_the_bound_is_fsynced(api, settings):
    settings.AGENTGIT = {**settings.AGENTGIT, "JOURNAL_PACK_BYTES": 1000}
    small = api.blob(b"uploaded\n")
    assert PackJournal.objects.count() == 1
    big = api.blob(os.urandom(4000))  # its pack is past the bound: fsynced, not journaled
    assert PackJournal.objects.count() == 1

    _power_loss(stores.repository_path("demo"), "missing")
    call_command("agentgit_recover", verbosity=0)

    assert api.get(f"/blobs/{small}").content == b"uploaded\n"
    assert api.get(f"/blobs/{big}").status_code == 200
