"""The object store contract, run against the memory and the disk store alike."""

from __future__ import annotations

import hashlib
import io
import os

import pytest

from engine.errors import InvalidObjectId, ObjectMissing, WrongObjectType
from engine.objects import BLOB, COMMIT, MODE_FILE, TREE, Commit, Entry, Signature, Tree, check_object_id, hash_object
from engine.store import INDEXES_CHECKED, CacheStats, DiskStore, MemoryStore, boot_id, geometric_split, pack_index

from .conftest import git

HELLO_ID = "ce013625030ba8dba906f756967f9e9ca394464a"  # git hash-object of "hello\n"


def test_an_object_reads_back_under_gits_id(store):
    assert store.add(BLOB, b"hello\n") == HELLO_ID
    assert store.read(HELLO_ID) == (BLOB, b"hello\n")
    assert store.contains(HELLO_ID)


def test_a_missing_object_is_an_error_not_a_none(store):
    with pytest.raises(ObjectMissing) as caught:
        store.read("0" * 40)
    assert caught.value.code == "object_missing"
    assert not store.contains("0" * 40)


def test_reading_a_blob_as_a_tree_is_refused(store):
    oid = store.add(BLOB, b"not a tree")
    with pytest.raises(WrongObjectType):
        store.read_tree(oid)


def test_a_batch_is_stored_whole_and_in_order(store):
    contents = [b"file %d\n" % i for i in range(8 * 4)] + [b"file 1\n"]
    ids = store.add_many((BLOB, data) for data in contents)
    assert ids == [hash_object(BLOB, data) for data in contents]
    assert [store.read_blob(oid) for oid in ids] == contents


def test_trees_round_trip_and_stay_correct_when_the_cache_evicts():
    store = MemoryStore(tree_cache_entries=3)
    blob = store.add(BLOB, b"x")
    trees = [store.add_tree(Tree({f"f{i}": Entry(MODE_FILE, blob), "g": Entry(MODE_FILE, blob)})) for i in range(10)]
    for i, oid in enumerate(trees):
        assert set(store.read_tree(oid)) == {f"f{i}", "g"}


def test_cache_lookups_are_counted_as_hits_and_misses_in_a_shared_count(disk_store):
    stats = CacheStats()
    blob = disk_store.add(BLOB, b"x")
    tree = disk_store.add(TREE, b"".join([b"100644 a\0" + bytes.fromhex(blob)]))
    who = Signature("a", "a@example.com", 0)
    commit = disk_store.add(COMMIT, Commit(tree, (), who, who, "m\n").encode())
    first, second = DiskStore(disk_store.path, cache_stats=stats), DiskStore(disk_store.path, cache_stats=stats)

    for store in (first, first, second):
        store.read_tree(tree)
        store.read_commit(commit)

    # Each store parses once (a miss), then answers from its cache (a hit); one count for both.
    assert stats.snapshot() == {("tree", True): 1, ("tree", False): 2, ("commit", True): 1, ("commit", False): 2}
    assert first.cache_stats is stats and MemoryStore().cache_stats.snapshot()[("tree", True)] == 0


def test_the_commits_and_trees_a_batch_wrote_are_read_from_the_cache_as_git_stored_them(disk_store):
    from engine.objects import decode_commit, decode_tree
    from engine.store import ObjectBatch

    batch = ObjectBatch(disk_store)
    tree = batch.add_tree(Tree({"a": Entry(MODE_FILE, batch.add(BLOB, b"x"))}))
    who = Signature("a b", "a@example.com", 1_700_000_000, -90)
    commit = batch.add_commit(Commit(tree, (), who, who, "subject\n\nbody, café\n"))
    batch.flush()
    misses = disk_store.cache_stats.snapshot()

    read_commit, read_tree = disk_store.read_commit(commit), disk_store.read_tree(tree)

    # The next landing reads the head this one wrote: no libgit2 miss, and what it parses from
    # the pack is the same commit and tree.
    assert disk_store.cache_stats.snapshot()[("commit", True)] == misses[("commit", True)] + 1
    assert disk_store.cache_stats.snapshot()[("tree", True)] == misses[("tree", True)] + 1
    assert read_commit == decode_commit(DiskStore(disk_store.path).read(commit)[1])
    assert read_tree == decode_tree(DiskStore(disk_store.path).read(tree)[1])


@pytest.mark.parametrize("bad", ["", "abc", "G" * 40, "A" * 40, "0" * 39, None, 7])
def test_malformed_ids_are_refused_with_a_stable_code(bad):
    with pytest.raises(InvalidObjectId) as caught:
        check_object_id(bad)
    assert caught.value.code == "invalid_id"


def test_disk_batches_are_one_pack_that_git_reads_and_fsck_accepts(disk_store):
    pack_dir = os.path.join(disk_store.path, "objects", "pack")
    ids = disk_store.add_many((BLOB, b"blob %d\n" % i) for i in range(100))
    packs = sorted(os.listdir(pack_dir))
    assert [name.rsplit(".", 1)[1] for name in packs] == ["idx", "pack"]
    assert git(disk_store.path, "cat-file", "-p", ids[42]) == "blob 42\n"
    git(disk_store.path, "fsck", "--strict")


def test_disk_writes_are_one_pack_each_and_leave_no_temporaries(disk_store):
    oid = disk_store.add(BLOB, b"hello\n")
    objects = os.path.join(disk_store.path, "objects")
    assert disk_store.packs() == 1
    assert sorted(os.listdir(os.path.join(objects, "pack")))[0].endswith(".idx")
    leftovers = [name for _, _, names in os.walk(objects) for name in names if name.startswith("tmp_")]
    assert leftovers == []
    assert git(disk_store.path, "cat-file", "-t", oid) == "blob\n"


def test_a_second_store_on_the_same_repository_sees_new_packs(disk_store):
    reader = DiskStore(disk_store.path)
    assert not reader.contains(HELLO_ID)
    ids = disk_store.add_many((BLOB, b"%d\n" % i) for i in range(8))
    disk_store.add(BLOB, b"hello\n")
    assert reader.contains(ids[-1]) and reader.read_blob(HELLO_ID) == b"hello\n"


def test_objects_written_by_git_are_readable(disk_store):
    oid = git(disk_store.path, "hash-object", "-w", "--stdin", input=b"from git\n").strip()
    assert disk_store.read_blob(oid) == b"from git\n"
    tree = git(disk_store.path, "mktree", input=f"100644 blob {oid}\tname.txt\n".encode()).strip()
    assert disk_store.read_tree(tree) == {"name.txt": Entry(MODE_FILE, oid)}
    assert disk_store.read(tree)[0] == TREE


def test_the_kind_of_an_object_is_known_without_its_content(store):
    blob = store.add(BLOB, b"some bytes\n")
    tree = store.add_tree(Tree({"f": Entry(MODE_FILE, blob)}))
    assert (store.kind(blob), store.kind(tree), store.kind("0" * 40)) == (BLOB, TREE, None)


@pytest.mark.parametrize(
    "offsets",
    [[12, 40, 90], [12, 2**31 - 1, 2**31, 2**33 + 5]],  # the second: offsets past 2 GiB (the 8-byte table)
)
def test_a_pack_index_is_byte_for_byte_dulwichs(offsets):
    from dulwich.pack import write_pack_index_v2

    entries = [(hashlib.sha1(b"%d" % n).digest(), offset, n * 7919) for n, offset in enumerate(offsets)]
    checksum = hashlib.sha1(b"pack").digest()
    expected = io.BytesIO()
    write_pack_index_v2(expected, sorted(entries), checksum)
    assert pack_index(entries, checksum) == expected.getvalue()


def test_a_big_batch_is_one_pack_git_verifies(disk_store):
    ids = disk_store.add_many((BLOB, b"blob %d\n" % n) for n in range(300))
    [index] = [name for name in os.listdir(os.path.join(disk_store.path, "objects", "pack")) if name.endswith(".idx")]
    assert "ok" in git(disk_store.path, "verify-pack", "-v", os.path.join("objects", "pack", index))
    assert disk_store.read_blob(ids[123]) == b"blob 123\n"


@pytest.mark.parametrize("damage", ["missing", "truncated", "zeroed"])
def test_a_pack_whose_index_a_power_loss_tore_is_readable_once_the_next_boot_opens_it(tmp_path, damage):
    # The index is written without an fsync (docs/adr/0020): after a power loss it may be gone,
    # short or zeros. A store opened in a new boot (the marker names another) rebuilds it.
    path = tmp_path / "repo.git"
    ids = DiskStore(path).add_many([(BLOB, b"kept %d\n" % n) for n in range(50)])
    [index] = [name for name in os.listdir(path / "objects" / "pack") if name.endswith(".idx")]
    index_path = path / "objects" / "pack" / index
    whole = index_path.read_bytes()
    if damage == "missing":
        index_path.unlink()
    else:
        index_path.chmod(0o644)
        index_path.write_bytes(whole[: len(whole) // 2] if damage == "truncated" else bytes(len(whole)))
    (path / INDEXES_CHECKED).write_text("a-boot-before-the-power-loss")

    store = DiskStore(path)

    assert index_path.read_bytes() == whole
    assert [store.read_blob(oid) for oid in ids] == [b"kept %d\n" % n for n in range(50)]
    assert "ok" in git(path, "verify-pack", "-v", os.path.join("objects", "pack", index))
    git(path, "fsck", "--strict")
    assert (path / INDEXES_CHECKED).read_text() == boot_id()


def test_a_store_opened_again_in_the_same_boot_does_not_check_the_indexes_again(tmp_path):
    path = tmp_path / "repo.git"
    DiskStore(path).add(BLOB, b"x\n")
    [index] = [name for name in os.listdir(path / "objects" / "pack") if name.endswith(".idx")]
    (path / "objects" / "pack" / index).unlink()  # no power loss did this: the check must not run
    DiskStore(path)
    assert not (path / "objects" / "pack" / index).exists()
    assert DiskStore(path).repair_pack_indexes() == [index.replace(".idx", ".pack")]


# ------------------------------------------------------------------------------ roll-ups


def _packs(path) -> list[str]:
    return sorted(name[:-5] for name in os.listdir(os.path.join(path, "objects", "pack")) if name.endswith(".pack"))


def _git_deltified_pack(path) -> str:
    """A pack written by git, as a push leaves one: similar blobs, stored as deltas."""
    text = "".join(f"line {n}\n" for n in range(400))
    ids = [git(path, "hash-object", "-w", "--stdin", input=(text + f"change {n}\n").encode()).strip() for n in range(4)]
    name = "pack-" + git(path, "pack-objects", "-q", "objects/pack/pack", input="\n".join(ids).encode() + b"\n").strip()
    assert "chain length = 1" in git(path, "verify-pack", "-v", f"objects/pack/{name}.idx")
    return name


@pytest.mark.parametrize(
    ("weights", "folded"),
    [([1, 1, 1, 1], 4), ([1, 2, 4, 8], 0), ([1, 1, 16], 2), ([1, 1, 3], 3), ([5], 0), ([], 0)],
)
def test_a_roll_up_chooses_packs_as_gits_geometric_repack_does(weights, folded):
    assert geometric_split(weights) == folded


def test_a_roll_up_folds_the_small_packs_into_one_that_git_verifies(disk_store):
    reader = DiskStore(disk_store.path)  # another process's store, which listed the old packs
    ids = [disk_store.add_many([(BLOB, b"blob %d\n" % n), (BLOB, b"shared\n")]) for n in range(10)]
    assert [reader.read_blob(pair[0]) for pair in ids[:3]] == [b"blob 0\n", b"blob 1\n", b"blob 2\n"]

    assert disk_store.roll_up() == 10

    [pack] = _packs(disk_store.path)
    listing = git(disk_store.path, "verify-pack", "-v", f"objects/pack/{pack}.idx")
    assert "non delta: 11 objects" in listing  # the shared blob once
    assert [reader.read_blob(pair[0]) for pair in ids] == [b"blob %d\n" % n for n in range(10)]
    assert disk_store.read_blob(ids[9][1]) == b"shared\n"
    git(disk_store.path, "fsck", "--strict")
    assert disk_store.roll_up() == 0  # one pack: nothing to fold


def test_a_roll_up_leaves_the_packs_of_gits_multi_pack_index_and_gits_deltas(disk_store):
    deltified = _git_deltified_pack(disk_store.path)
    indexed = [disk_store.add(BLOB, b"indexed %d\n" % n) for n in range(3)]
    git(disk_store.path, "multi-pack-index", "write")
    covered = set(_packs(disk_store.path))
    new = [disk_store.add(BLOB, b"new %d\n" % n) for n in range(5)]

    assert disk_store.roll_up() == 5

    assert covered < set(_packs(disk_store.path)) and len(_packs(disk_store.path)) == len(covered) + 1
    assert deltified in covered
    git(disk_store.path, "multi-pack-index", "verify")
    assert [disk_store.read_blob(oid) for oid in indexed + new] == [b"indexed %d\n" % n for n in range(3)] + [
        b"new %d\n" % n for n in range(5)
    ]
    git(disk_store.path, "fsck", "--strict")


def test_a_roll_up_folds_its_own_packs_beside_a_deltified_one_and_an_empty_one(disk_store):
    ours = [disk_store.add(BLOB, b"ours %d\n" % n) for n in range(6)]
    deltified = _git_deltified_pack(disk_store.path)
    git(disk_store.path, "pack-objects", "-q", "objects/pack/pack", input=b"")  # a push that brought nothing new

    assert disk_store.roll_up() == 7

    assert deltified in _packs(disk_store.path) and len(_packs(disk_store.path)) == 2
    assert [disk_store.read_blob(oid) for oid in ours] == [b"ours %d\n" % n for n in range(6)]
    git(disk_store.path, "fsck", "--strict")
