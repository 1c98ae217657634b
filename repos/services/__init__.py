"""Use cases: the one waist between the outside (REST views, admin, management commands, Celery
tasks, the git bridge) and the engine.

* ``repositories`` — repositories and streams: create, look up, resolve a revision.
* ``content``      — blobs (single and batch) and changesets.
* ``proposals``    — opening and listing proposals.
* ``integration``  — the landing queue: the only code that moves a stream head.
* ``reads``        — tree, file, diff, blame and log.
* ``browse``       — what the web UI reads beyond those: entries, file changes, commit descriptions,
                     merge bases, path search, recent events, remembered blames.
* ``access``       — people's read access to repositories in the web UI: grant, revoke, check.
* ``derived``      — graph nodes and the path index: written with each landing, read by log.
* ``credentials``  — API tokens: create, authenticate, revoke, scopes.
* ``ratelimit``    — a token bucket per credential, shared by every server process.
* ``admission``    — a request's credential, authenticated once; its scope, then its token bucket.
* ``events``       — the outbox: events written in the transaction that caused them, read in order.
* ``dispatch``     — after-commit jobs: to the worker pool by name, or in process; retried alike.
* ``stores``       — the object store of each repository (one per process, caches kept warm).

Services own their transactions and raise ``repos.errors.ApiError``, or let an engine error
propagate; whoever answers a caller translates either with ``repos.errors.api_error``. Services
import neither the API nor the workers (tests/test_architecture.py).
"""
