"""Each repository's object store, opened once per process so its parsed-object caches stay warm,
and the journal that keeps a landing's small pack in its database commit (docs/adr/0023)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from django.conf import settings
from django.db import connection

from engine.objects import Signature
from engine.store import CacheStats, DiskStore, PackJournal

from ..models import PackJournal as JournaledPack
from ..models import Repository
from .gitdir import configure

#: Hits and misses of the parsed-object caches of every store this process opens (reported by
#: repos.services.metrics).
CACHE_STATS = CacheStats()
_stores: dict[Path, DiskStore] = {}
_lock = threading.Lock()


def repository_path(name: str) -> Path:
    """Where the bare git repository of the repository ``name`` lives."""
    return Path(settings.AGENTGIT["REPOS_DIR"]) / f"{name}.git"


class DatabaseJournal(PackJournal):
    """The packs of repository ``name`` kept in the database (docs/adr/0023): in the caller's
    transaction, whose commit is the one that names their objects. A write outside a
    transaction (an upload in autocommit) is fsynced instead: its answer comes before any
    commit would."""

    _INSERT = (
        f"INSERT INTO {JournaledPack._meta.db_table} (repository_id, name, pack) "
        f"SELECT id, %s, %s FROM {Repository._meta.db_table} WHERE name = %s"
    )

    def __init__(self, repository: str) -> None:
        self.repository = repository

    def record(self, name: str, pack: bytes) -> bool:
        if not connection.in_atomic_block or len(pack) > settings.AGENTGIT["JOURNAL_PACK_BYTES"]:
            return False
        with connection.cursor() as cursor:
            # One statement: the repository's id by its name, as a repository deleted and made
            # again under the name has another (the store outlives its row).
            cursor.execute(self._INSERT, [name, pack, self.repository])
            return cursor.rowcount == 1

    def recorded(self) -> list[tuple[str, bytes]]:
        rows = JournaledPack.objects.filter(repository__name=self.repository).order_by("pk")
        return [(name, bytes(pack)) for name, pack in rows.values_list("name", "pack")]


def checkpoint(name: str) -> int:
    """Sync the files of the packs the journal keeps for repository ``name`` and forget them:
    run by whoever repacks it (its roll-ups, maintenance) while holding its repack lock, when
    most of them were just folded into a pack git synced. How many were forgotten. Plain SQL, as
    the journal's insert: it runs after every roll-up, where the ORM's query and its deletion
    collector cost a landing more than the statements."""
    with connection.cursor() as cursor:
        cursor.execute(_JOURNALED, [name])
        rows = cursor.fetchall()
        if rows:
            store_for(name).sync_packs(pack for _pk, pack in rows)
            cursor.execute(_FORGET.format(", ".join(["%s"] * len(rows))), [pk for pk, _pack in rows])
    return len(rows)


_JOURNALED = (
    f"SELECT j.id, j.name FROM {JournaledPack._meta.db_table} j"
    f" JOIN {Repository._meta.db_table} r ON r.id = j.repository_id WHERE r.name = %s"
)
_FORGET = f"DELETE FROM {JournaledPack._meta.db_table} WHERE id IN ({{}})"


def restore_journaled() -> int:
    """Open the store of every repository the journal keeps packs for, so that after a power
    loss each writes its lost packs back before anything reads it (once per boot: see
    ``DiskStore``); the repositories. Run at every start (integration.recover)."""
    names = list(
        Repository.objects.filter(pk__in=JournaledPack.objects.values("repository")).values_list("name", flat=True)
    )
    for name in names:
        store_for(name)
    return len(names)


def store_for(name: str) -> DiskStore:
    """The (created if needed) object store of repository ``name``, shared by this process."""
    path = repository_path(name)
    store = _stores.get(path)
    if store is None:
        with _lock:
            store = _stores.get(path)
            if store is None:
                path.parent.mkdir(parents=True, exist_ok=True)
                store = DiskStore(
                    path,
                    tree_cache_entries=settings.AGENTGIT["TREE_CACHE_ENTRIES"],
                    cache_stats=CACHE_STATS,
                    journal=DatabaseJournal(name),
                )
                configure(path)  # git's automatic gc off, for new and existing repositories alike
                _stores[path] = store
    return store


def server_signature() -> Signature:
    """The committer of changesets the server writes itself (merges)."""
    return Signature(settings.AGENTGIT["COMMITTER_NAME"], settings.AGENTGIT["COMMITTER_EMAIL"], int(time.time()))
