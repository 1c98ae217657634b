"""Each repository's object store, opened once per process so its parsed-object caches stay warm."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from django.conf import settings

from engine.objects import Signature
from engine.store import CacheStats, DiskStore

from .gitdir import configure

#: Hits and misses of the parsed-object caches of every store this process opens (reported by
#: repos.services.metrics).
CACHE_STATS = CacheStats()
_stores: dict[Path, DiskStore] = {}
_lock = threading.Lock()


def repository_path(name: str) -> Path:
    """Where the bare git repository of the repository ``name`` lives."""
    return Path(settings.AGENTGIT["REPOS_DIR"]) / f"{name}.git"


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
                    path, tree_cache_entries=settings.AGENTGIT["TREE_CACHE_ENTRIES"], cache_stats=CACHE_STATS
                )
                configure(path)  # git's automatic gc off, for new and existing repositories alike
                _stores[path] = store
    return store


def server_signature() -> Signature:
    """The committer of changesets the server writes itself (merges)."""
    return Signature(settings.AGENTGIT["COMMITTER_NAME"], settings.AGENTGIT["COMMITTER_EMAIL"], int(time.time()))
