"""AgentGit's version-control engine: pure Python, framework-free, over git objects (SHA-1).

Every function takes the object store first. The modules, from the bottom up:

* ``errors``    — the error tree (each error has a stable ``code``); conflicts are not errors.
* ``objects``   — ids, blobs, trees, commits, byte-for-byte as git writes them; path rules.
* ``store``     — the ObjectStore port: MemoryStore, DiskStore (a bare git repository).
* ``trees``     — path lookup, file walks and the pruned tree diff.
* ``changeset`` — operation lists (write / delete / rename) applied along changed paths.
* ``renames``   — rename detection from change lists (exact, then similarity ≥ 50 %).
* ``merge``     — line-level text merge and the rename-aware three-way tree merge.
* ``graph``     — generation numbers, ancestry and merge bases.
* ``history``   — blame of one file and the log of a path.
* ``integrate`` — fast-forward | merge | conflict, as a pure function over the store.

Nothing here imports Django, Celery or the rest of the server (tests/test_architecture.py).
"""
