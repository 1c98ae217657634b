"""Content: blobs (single, by id, in batch) and changesets."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable

from django.db import transaction

from engine import changeset as engine_changeset
from engine.errors import EngineError, ObjectMissing
from engine.objects import BLOB, MODE_EXECUTABLE, MODE_FILE, MODE_SYMLINK, Signature, check_object_id, hash_object

from ..errors import Invalid, NotFound, from_engine
from ..lookups import InsertUnlessPresent
from ..models import Changeset, Credential, Repository
from . import derived, gitdiff, refmirror
from .credentials import require_paths
from .packs import roll_up_when_due
from .repositories import resolve_rev
from .stores import repository_path, store_for

#: File modes a changeset may write, as the API spells them.
_MODES = {"100644": MODE_FILE, "100755": MODE_EXECUTABLE, "120000": MODE_SYMLINK}


def upload_blob(repository: Repository, data: bytes, expected_id: str | None = None) -> tuple[str, bool]:
    """Store ``data`` durably; returns ``(id, created)``. With ``expected_id`` the bytes must hash to it."""
    oid = hash_object(BLOB, data)
    if expected_id is not None and expected_id != oid:
        raise Invalid(f"the bytes hash to {oid}, not {expected_id}")
    store = store_for(repository.name)
    if store.contains(oid):
        return oid, False
    with transaction.atomic(savepoint=False):  # its pack journaled in the commit (docs/adr/0023)
        store.add(BLOB, data)
        roll_up_when_due(repository.name, store)
    return oid, True


def upload_blobs(repository: Repository, contents: list[bytes]) -> list[str]:
    """Store several blobs as one batch (one pack on disk, journaled in one commit)."""
    store = store_for(repository.name)
    with transaction.atomic(savepoint=False):
        ids = store.add_many((BLOB, data) for data in contents)
        roll_up_when_due(repository.name, store)
    return ids


def read_blob(repository: Repository, oid: str) -> bytes:
    return store_for(repository.name).read_blob(check_object_id(oid))


def has_blob(repository: Repository, oid: str) -> bool:
    return store_for(repository.name).kind(check_object_id(oid)) == BLOB


def blob_id(data: bytes) -> str:
    """The git blob id of ``data`` (what an upload of it is stored under)."""
    return hash_object(BLOB, data)


def parse_operations(raw: object) -> tuple[list[engine_changeset.Operation], list[bytes], list[dict]]:
    """API operation dicts → engine operations, the inline contents they carry, and normalized JSON.

    Every malformed operation is reported in the error's ``details`` (index, code, message).
    """
    if not isinstance(raw, list):
        raise Invalid("operations must be a list")
    operations: list[engine_changeset.Operation] = []
    contents: list[bytes] = []
    normalized: list[dict] = []
    problems: list[dict] = []
    for index, op in enumerate(raw):
        try:
            operation, content, record = _parse_operation(op)
        except Invalid as error:
            problems.append({"index": index, "code": "invalid", "message": error.message})
            continue
        operations.append(operation)
        normalized.append(record)
        if content is not None:
            contents.append(content)
    if problems:
        raise Invalid(f"{len(problems)} malformed operation(s); the first: {problems[0]['message']}", details=problems)
    return operations, contents, normalized


def _parse_operation(op: object) -> tuple[engine_changeset.Operation, bytes | None, dict]:
    if not isinstance(op, dict):
        raise Invalid("an operation is an object")
    kind = op.get("op")
    if kind == "write":
        path = _text(op, "path")
        mode = _MODES.get(str(op.get("mode", "100644")))
        if mode is None:
            raise Invalid(f"mode must be one of {sorted(_MODES)}")
        if ("blob" in op) == ("content" in op):
            raise Invalid("a write names exactly one of 'blob' (an uploaded blob id) or 'content' (utf-8 text)")
        if "content" in op:
            content = _text(op, "content", allow_empty=True).encode("utf-8")
            blob = hash_object(BLOB, content)
        else:
            content, blob = None, _text(op, "blob")
        record = {"op": "write", "path": path, "blob": blob, "mode": f"{mode:o}"}
        return engine_changeset.Write(path, blob, mode), content, record
    if kind == "delete":
        path = _text(op, "path")
        return engine_changeset.Delete(path), None, {"op": "delete", "path": path}
    if kind == "rename":
        source, target = _text(op, "from"), _text(op, "to")
        return engine_changeset.Rename(source, target), None, {"op": "rename", "from": source, "to": target}
    raise Invalid(f"unknown op {kind!r}: use write, delete or rename")


def paths_of(operations: list[dict]) -> list[str]:
    """Every path parsed operations change: a write's or delete's, a rename's source and target."""
    return [op[key] for op in operations for key in ("path", "from", "to") if key in op]


def _text(op: dict, key: str, *, allow_empty: bool = False) -> str:
    value = op.get(key)
    if not isinstance(value, str) or (not value and not allow_empty):
        raise Invalid(f"{key!r} must be a{'' if allow_empty else ' non-empty'} string")
    return value


#: The most parents a changeset may name (git has no limit; an octopus of 16 is plenty).
MAX_PARENTS = 16


def parents_of(body: dict) -> str | list | None:
    """A changeset body's parents: ``"parent"`` (one revision or null) or ``"parents"`` (a list,
    for a merge); naming both is refused."""
    if "parent" in body and "parents" in body:
        raise Invalid("give either 'parent' (one revision) or 'parents' (a list), not both")
    return body["parents"] if "parents" in body else body.get("parent")


def create_changeset(
    repository: Repository,
    *,
    parent: str | list | None,
    operations: object,
    message: str,
    provenance: dict,
    credential: Credential | None,
    protect: bool = True,
) -> Changeset:
    """Write a changeset (a commit) and record it; nothing is written if anything is refused.

    ``parent`` is one revision, None (a root), or a list of revisions: a merge changeset whose
    operations apply to the first one's tree. ``protect=False``: no protection ref in the ref
    mirror (repos.services.refmirror), for a caller that lands the changeset in this
    transaction, so the stream's ref names it once it commits, and protects it itself if not.
    """
    if not isinstance(message, str):
        raise Invalid("message must be a string")
    if not isinstance(provenance, dict):
        raise Invalid("provenance must be an object")
    engine_ops, contents, normalized = parse_operations(operations)
    require_paths(credential, paths_of(normalized))
    if isinstance(parent, list):
        if not parent or len(parent) > MAX_PARENTS or not all(isinstance(p, str) for p in parent):
            raise Invalid(f"parents is a list of 1 to {MAX_PARENTS} revisions")
        parent_ids = [resolve_rev(repository, p) for p in parent]
        if len(set(parent_ids)) != len(parent_ids):
            raise Invalid("parents names one changeset twice")
    else:
        parent_ids = [resolve_rev(repository, parent)] if parent is not None else []
    author = author_signature(provenance, credential)
    # One transaction (none of its own inside a caller's): the objects' pack is journaled in
    # the commit that records the changeset, instead of fsynced (docs/adr/0023).
    with transaction.atomic(savepoint=False):
        store = store_for(repository.name)
        try:
            commit_id = engine_changeset.create_changeset(
                store,
                parent_ids[0] if parent_ids else None,
                engine_ops,
                message=message,
                author=author,
                blobs=contents,
                merged=parent_ids[1:],
            )
        except ObjectMissing as error:
            # A blob the caller's operations name is missing: their input is wrong (400), not a
            # resource they asked for (404).
            raise from_engine(error, missing=Invalid) from None
        commit = store.read_commit(commit_id)
        if protect:
            refmirror.protect_changeset(repository.name, commit_id)  # before its row names it
        roll_up_when_due(repository.name, store)
        row = Changeset(
            repository=repository,
            commit_id=commit_id,
            parents=list(commit.parents),
            tree=commit.tree,
            message=message,
            operations=normalized,
            provenance=provenance,
            credential=credential,
        )
        recorded = _INSERT_CHANGESET.run(row)
        if recorded is None:  # the same changeset again (same parent, operations, message, author and second)
            return Changeset.objects.get(repository=repository, commit_id=commit_id)
        return recorded


_INSERT_CHANGESET = InsertUnlessPresent(Changeset)


def get_changeset(repository: Repository, commit_id: str) -> Changeset:
    """The recorded changeset, or one described from its commit (made by a merge or a git push)."""
    check_object_id(commit_id)
    found = Changeset.objects.filter(repository=repository, commit_id=commit_id).first()
    if found is not None:
        if found.operations is None:  # recorded by a push whose operations are not written yet
            _write_operations(repository, [found])
        return found
    try:
        commit = store_for(repository.name).read_commit(commit_id)
    except EngineError:
        raise NotFound(f"no changeset {commit_id} in {repository.name}") from None
    return Changeset(
        repository=repository,
        commit_id=commit_id,
        parents=list(commit.parents),
        tree=commit.tree,
        message=commit.message,
    )


def author_signature(provenance: dict, credential: Credential | None) -> Signature:
    """Who wrote a changeset, as git records it: the provenance's agent (else the credential's
    user) and the user's e-mail address, now."""
    user = credential.user if credential is not None else None
    agent = provenance.get("agent")
    name = agent if isinstance(agent, str) and agent else (user.get_username() if user else "agentgit")
    email = user.email if user and user.email else f"{user.get_username() if user else 'agent'}@agentgit.invalid"
    name = "".join(c for c in name if c not in "<>\n\x00")[:100] or "agent"
    email = "".join(c for c in email if c not in "<>\n\x00 ")[:100]
    return Signature(name, email, int(time.time()))


#: Commits recorded per query and bulk insert by :func:`record_commits`.
RECORD_CHUNK = 500


def record_commits(
    repository: Repository,
    commit_ids: list[str],
    *,
    credential: Credential | None,
    provenance: dict,
    progress: Callable[[int], None] | None = None,
    operations_later: bool = False,
    derive: bool = False,
) -> int:
    """Record commits that arrived by git (a push, an import), parents first, as changesets;
    returns how many were new.

    Each one's operation list is its diff against its first parent as git computes it, renames
    found by git (repos.services.gitdiff; a rename that also changed the content carries the
    new ``blob``). With ``operations_later`` the rows are written without it (``operations``
    NULL: a push records its commits before its refs move and derives their operations after
    its answer, with :func:`write_pending_operations`); a list is a function of the commit and
    its parent, so whoever reads one first (:func:`get_changeset`) or maintenance writes it if
    that never ran. With ``derive`` (an import) each chunk also records its derived data from
    the same diff (repos.services.derived.derive_recorded), so no tree is read twice.
    The caller has protected the commits in the ref mirror; rows already there are left as they
    are. A chunk commits whole or not at all, so a failed run leaves whole chunks, and running
    it again continues after them. ``progress(n)`` is told of every ``n`` commits done.
    """
    new = 0
    # A push's commits wait for their operations (no git process on its way to the answer).
    described = bool(commit_ids) and (not operations_later or derive)
    stream = gitdiff.FirstParentChanges(repository_path(repository.name), commit_ids) if described else None
    with stream or contextlib.nullcontext():
        changes = iter(stream or ())
        for start in range(0, len(commit_ids), RECORD_CHUNK):
            chunk = commit_ids[start : start + RECORD_CHUNK]
            # In step with git: its changes come in the order of ``commit_ids``.
            chunk_changes = dict(itertools.islice(changes, len(chunk)))
            with transaction.atomic():
                new += _record_chunk(repository, chunk, chunk_changes, credential, provenance, operations_later, derive)
            if progress is not None:
                progress(len(chunk))
    return new


def _record_chunk(
    repository: Repository,
    commit_ids: list[str],
    changes: dict[str, list[gitdiff.Change]],
    credential: Credential | None,
    provenance: dict,
    operations_later: bool,
    derive: bool,
) -> int:
    store = store_for(repository.name)
    known = set(
        Changeset.objects.filter(repository=repository, commit_id__in=commit_ids).values_list("commit_id", flat=True)
    )
    commits = {}
    for commit_id in commit_ids:
        if commit_id in known:
            continue
        try:
            commits[commit_id] = store.read_commit(commit_id)
        except EngineError as error:  # a commit git accepted and we cannot read: name it, record nothing of it
            raise Invalid(f"commit {commit_id} cannot be recorded: {error.message}") from None
        if commit_id not in changes and (derive or not operations_later):
            raise Invalid(f"git did not describe commit {commit_id}")
    rows = [
        Changeset(
            repository=repository,
            commit_id=commit_id,
            parents=list(commit.parents),
            tree=commit.tree,
            message=commit.message,
            operations=None if operations_later else gitdiff.operations(changes[commit_id]),
            provenance=provenance,
            credential=credential,
        )
        for commit_id, commit in commits.items()
    ]
    Changeset.objects.bulk_create(rows, ignore_conflicts=True)
    if derive and commits:
        derived.derive_recorded(
            repository,
            store,
            [
                (oid, commit.parents, commit.committer.time, gitdiff.changed_paths(changes[oid]))
                for oid, commit in commits.items()
            ],
        )
    return len(rows)


def write_pending_operations(repository: Repository, commit_ids: list[str] | None = None) -> int:
    """Write the operation lists recorded changesets of ``repository`` lack (of ``commit_ids``,
    or all of them: maintenance's catch-up after a crash); returns how many it wrote."""
    pending = (
        Changeset.objects.filter(repository=repository, operations__isnull=True).only("pk", "commit_id").order_by("pk")
    )
    if commit_ids is None:
        groups = [pending]
    else:  # a bounded IN list per query, as record_commits reads them
        groups = [
            pending.filter(commit_id__in=commit_ids[start : start + RECORD_CHUNK])
            for start in range(0, len(commit_ids), RECORD_CHUNK)
        ]
    written = 0
    for group in groups:
        after = 0
        # Pages read whole before writing: SQLite does not isolate a cursor from its own writes.
        while rows := list(group.filter(pk__gt=after)[:RECORD_CHUNK]):
            _write_operations(repository, rows)
            written += len(rows)
            after = rows[-1].pk
    return written


def _write_operations(repository: Repository, rows: list[Changeset]) -> None:
    """Derive recorded changesets' operation lists (one git process) and store each, unless
    another process did first."""
    changes = gitdiff.first_parent_changes(repository_path(repository.name), [row.commit_id for row in rows])
    for row in rows:
        row.operations = gitdiff.operations(changes[row.commit_id])
        Changeset.objects.filter(pk=row.pk, operations__isnull=True).update(operations=row.operations)
