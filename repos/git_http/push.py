"""``git push`` over smart HTTP: git indexes the pack, the services move every ref.

1. The commands (``old new ref``) are read here, off the request body.
2. The pack that follows streams into ``git index-pack --stdin --fix-thin --strict`` in a
   quarantine directory (``GIT_OBJECT_DIRECTORY``, the repository's objects as alternates), so
   nothing reaches the repository until it is complete, within the size limit
   (``AGENTGIT["GIT_MAX_PUSH_BYTES"]``) and connected (a sparse walk from the new tips down to
   the streams' heads: :func:`_check_connected`); then the pack and its index move into
   ``objects/pack`` (kept as a pack, never exploded into loose objects: audit F7), fsynced.
3. Every command goes through the services, which own the refs (git never updates one):
   ``refs/heads/S`` fast-forwards stream S (``integration.push_fast_forward``), creates it
   (scope ``write``; a push's new streams together, 500 a transaction:
   ``repositories.create_streams``) or deletes it (``admin``; never the default stream); ``refs/for/S`` opens a
   proposal for the pushed head and integrates it (scope ``integrate``). Pushed commits are
   recorded as changesets first (``content.record_commits``), so no ref ever names a commit
   without its row. A credential held to some streams has a ref of any other refused before
   anything is recorded; one held to some paths has the whole push refused, the paths named,
   when its commits change any other (:func:`refuse_paths`).
   With git's ``atomic`` capability (``git push --atomic``) every ``refs/heads/`` command applies
   in one transaction, or none does. Tags are refused: the server's refs are its streams.
4. The answer is git's own report-status, with the outcomes as ``remote:`` lines (side band 2).
5. Then the pushed changesets' operation lists and the heads' derived data (graph, path index)
   are written. Both are functions of the commits, so they need not delay the answer (for
   10 000 new files they cost more than the rest of the push): a reader that comes first
   derives the operations itself and reads without the index meanwhile, and what a crash left
   out is written by maintenance (``content.write_pending_operations``) and recovery
   (``derived.derive_missing``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

from django.conf import settings
from django.db import transaction

from engine.errors import EngineError
from engine.graph import merge_bases
from engine.trees import diff_trees

from ..errors import ApiError, Forbidden, Invalid, PolicyDenied, from_engine
from ..models import Credential, Repository, Stream
from ..services import content, derived, integration, policies, proposals, refmirror, repositories
from ..services.credentials import require_paths, require_stream
from ..services.stores import repository_path, store_for
from . import pktline
from .processes import GitProcess, git_env, in_thread

logger = logging.getLogger(__name__)

FOR = "refs/for/"
HEADS = "refs/heads/"
TAGS = "refs/tags/"
CONTENT_TYPE = "application/x-git-receive-pack-result"


class Command:
    """One ref update the client asked for, and what became of it."""

    def __init__(self, old: str, new: str, ref: str) -> None:
        self.old, self.new, self.ref = old, new, ref
        #: None: accepted; else why not (one line, git shows it after the ref).
        self.refusal: str | None = None

    @property
    def deletes(self) -> bool:
        return self.new == pktline.ZERO_ID


async def receive_pack(credential: Credential, repository: Repository, body: AsyncIterator[bytes], send) -> None:
    reader = pktline.BodyReader(body)
    commands: list[Command] = []
    capabilities: set[str] = set()
    try:
        while (packet := await reader.packet()) != "flush":
            if not isinstance(packet, bytes):
                continue
            line, _, caps = packet.rstrip(b"\n").partition(b"\0")
            if caps:
                capabilities.update(caps.decode().split())
            words = line.decode("utf-8", "replace").split(" ")
            if words[0] == "shallow":
                raise Invalid("pushing from a shallow clone is not supported; fetch --unshallow first")
            if len(words) != 3:
                raise Invalid(f"a malformed push command: {line[:100]!r}")
            commands.append(Command(*words))
    except EOFError:
        if commands:
            raise Invalid("the push ended in the middle of its commands") from None
    except ValueError as error:
        raise Invalid(f"a malformed push: {error}") from None
    if not commands:  # git's probe before a large push ("0000"), or an empty body: answered empty
        await _start(send)
        await send({"type": "http.response.body", "body": b""})
        return
    messages: list[str] = []
    recorded: list[str] = []
    unpack_error = None
    # What the repository is known to hold whole: the streams' heads (the database's, not every
    # ref on disk: reading 10 000 loose refs cost git more than the push itself), read while
    # the pack is being indexed.
    reading_heads = asyncio.ensure_future(in_thread(repositories.stream_heads, repository))
    try:
        if any(not command.deletes for command in commands):
            unpack_error = await _receive_objects(repository, commands, reader.rest(), reading_heads)
    finally:
        complete = await reading_heads
    if unpack_error is None:
        atomic = "atomic" in capabilities
        messages, recorded = await in_thread(apply_commands, credential, repository, commands, complete, atomic)
    else:
        for command in commands:
            command.refusal = "unpacker error"
    await _start(send)
    await send({"type": "http.response.body", "body": report(commands, unpack_error, messages, capabilities)})
    if any(command.refusal is None and not command.deletes for command in commands):
        integration.crash_point("push_answered")
        await _after_answer(repository, recorded)


async def _after_answer(repository: Repository, commits: list[str]) -> None:
    """After the answer: nobody is waiting for this, and nothing is lost if it fails."""
    try:
        await in_thread(_derive_pushed, repository, commits)
    except Exception:
        logger.exception("deriving the data of %d pushed changesets of %s failed", len(commits), repository.name)


def _derive_pushed(repository: Repository, commits: list[str]) -> None:
    content.write_pending_operations(repository, commits)
    derived.derive_missing(in_repository=repository)


async def _start(send) -> None:
    headers = [(b"content-type", CONTENT_TYPE.encode()), (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})


def report(commands: list[Command], unpack_error: str | None, messages: list[str], capabilities: set[str]) -> bytes:
    """git's report-status, on side band 1 with ``messages`` on band 2 when the client asked for it."""
    status = [pktline.pkt(f"unpack {unpack_error or 'ok'}\n")]
    for command in commands:
        if command.refusal is None:
            status.append(pktline.pkt(f"ok {command.ref}\n"))
        else:
            status.append(pktline.pkt(f"ng {command.ref} {' '.join(command.refusal.split())}\n"))
    status_bytes = b"".join(status) + pktline.FLUSH
    if "side-band-64k" not in capabilities and "side-band" not in capabilities:
        return status_bytes
    # Sent even when the client asked for "quiet": that silences progress, and these are
    # outcomes (as a hook's output would be).
    progress = "".join(f"{m}\n" for m in messages).encode()
    return (pktline.sideband(2, progress) if progress else b"") + pktline.sideband(1, status_bytes) + pktline.FLUSH


# ----------------------------------------------------------------------------- the pack


async def _receive_objects(
    repository: Repository, commands: list[Command], pack: AsyncIterator[bytes], heads: Awaitable[set[str]]
) -> str | None:
    """Index the pushed pack in a quarantine, check it is connected, move it into the
    repository; None, or why not (the whole push is then refused and nothing is kept)."""
    git_dir = repository_path(repository.name)
    objects = git_dir / "objects"
    quarantine = Path(tempfile.mkdtemp(prefix="incoming-", dir=objects))
    (quarantine / "pack").mkdir()
    env = git_env(
        GIT_OBJECT_DIRECTORY=os.fspath(quarantine),
        GIT_ALTERNATE_OBJECT_DIRECTORIES=os.fspath(objects),
        GIT_QUARANTINE_PATH=os.fspath(quarantine),
    )
    try:
        error = await _index_pack(git_dir, env, pack)
        if error is None:
            error = await _check_connected(git_dir, env, [c.new for c in commands if not c.deletes], await heads)
        if error is None:
            await asyncio.to_thread(_migrate, quarantine / "pack", objects / "pack")
        return error
    finally:
        shutil.rmtree(quarantine, ignore_errors=True)


async def _index_pack(git_dir: Path, env: dict[str, str], pack: AsyncIterator[bytes]) -> str | None:
    limit = settings.AGENTGIT["GIT_MAX_PUSH_BYTES"]
    process = await GitProcess.start(
        ["git", "--git-dir", os.fspath(git_dir), "index-pack", "--stdin", "--fix-thin", "--strict"], env
    )
    received = 0
    sent = False
    try:
        async for chunk in pack:
            received += len(chunk)
            if limit and received > limit:
                return f"the push is over the limit of {limit} bytes (AGENTGIT_GIT_MAX_PUSH_BYTES); nothing was kept"
            process.stdin.write(chunk)
            await process.stdin.drain()
        process.stdin.close()
        sent = True
    except (BrokenPipeError, ConnectionResetError):
        sent = True  # index-pack stopped reading by itself: its exit status says why
    finally:
        if not sent:  # over the limit, or the client went away: the pack is abandoned
            process.kill()
            await process.wait()
            process.close()
    _out, err = await process.communicate()
    if process.returncode != 0:
        return "index-pack failed: " + " ".join(err.decode(errors="replace").split())[:300]
    return None


async def _check_connected(git_dir: Path, env: dict[str, str], tips: list[str], complete: set[str]) -> str | None:
    """Every object the new tips reach is in the repository or the pack, down to what the
    streams already reach (what receive-pack checks, against the database's heads).

    The walk is ``pack-objects --revs --sparse`` writing to nowhere, not receive-pack's
    ``rev-list --objects``: to leave out what a head reaches, rev-list reads the head's whole
    tree (80 ms of a 100 000-file repository, for every push, whatever its size), while the
    sparse walk descends only the paths the new commits changed. pack-objects reads every object
    it walks to write it, so a missing one fails it as it fails rev-list; its sparse walk may take
    in a few objects the heads reach as well, which only makes the check wider. No deltas are
    searched (``--window=0``): the pack is thrown away. No bitmaps either: with two heads, a walk
    through them cost 120 ms where the sparse walk costs 40."""
    argv = ["git", "--git-dir", os.fspath(git_dir), "pack-objects", "--revs", "--sparse", "--no-use-bitmap-index"]
    argv += ["--thin", "--window=0", "--stdout", "-q"]
    process = await GitProcess.start(argv, env, stdout=subprocess.DEVNULL)
    _out, err = await process.communicate(_walk_input(tips, complete).encode())
    if process.returncode != 0:
        return "missing necessary objects: " + " ".join(err.decode(errors="replace").split())[:300]
    return None


def _migrate(source: Path, target: Path) -> None:
    """Move the indexed pack in: data first, index last (readers see a pack once its index is
    there), each file fsynced, then the directory."""
    names = sorted(os.listdir(source), key=lambda name: name.endswith(".idx"))
    for name in names:
        path = source / name
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(path, target / name)
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- the commands


def apply_commands(
    credential: Credential, repository: Repository, commands: list[Command], complete: set[str], atomic: bool = False
) -> tuple[list[str], list[str]]:
    """Record the pushed commits (their operations later), then apply each command through the
    services; the lines to show the client, and the commits recorded. A refused command gets its
    ``refusal``; the others still apply, unless the push is ``atomic``: then all or none do."""
    for command in commands:
        command.refusal = _refused_by_name(command.ref) or _refused_by_reach(credential, command.ref)
    if atomic and any(command.refusal for command in commands):
        return _refuse_all(commands), []
    if credential.paths:
        refused = refuse_paths(credential, repository, commands)
        if refused:
            return refused, []
    tips = sorted({command.new for command in commands if not command.deletes and command.refusal is None})
    new: list[str] = []
    if tips:
        new = _new_commits(repository, tips, complete)
        for tip in tips:
            refmirror.protect_changeset(repository.name, tip)  # before any row names them
        provenance = {"source": "git push", "credential": credential.name or credential.token_prefix}
        content.record_commits(repository, new, credential=credential, provenance=provenance, operations_later=True)
    if atomic:
        return _apply_all_or_none(credential, repository, commands), new
    messages: list[str] = []
    creations = _new_streams(credential, repository, commands)
    for command in commands:
        if command.refusal is not None or command.ref in creations:
            continue
        try:
            messages += _apply(credential, repository, command)
        except PolicyDenied as error:  # each unmet requirement on a remote: line of its own
            messages += error.git_lines()
            command.refusal = "refused by the repository's policy; see the remote: lines"
        except _REFUSALS as error:
            command.refusal = _reason(error)
    if creations:
        messages += _create_streams(repository, creations)
    return messages, new


#: Up to this many streams created by one push are named one a line in its answer; more are
#: counted in one line (a push of a million branches would print a million otherwise).
NAMED_CREATIONS = 20


def _new_streams(credential: Credential, repository: Repository, commands: list[Command]) -> dict[str, Command]:
    """The commands that create a stream that does not exist yet, by ref: created together
    (repositories.create_streams: a few statements per 500 streams, not a few per stream)."""
    if not credential.has_scope("write"):
        return {}  # each is refused on its own, with the reason
    # A stream the policy guards is judged as it is created, one by one (repositories.create_stream).
    policy = policies.policy_of(repository)
    wanted: dict[str, Command] = {}
    for command in commands:
        if command.refusal is None and command.ref.startswith(HEADS) and command.old == pktline.ZERO_ID:
            name = command.ref.removeprefix(HEADS)
            guarded = policy is not None and bool(policy.rules_for(name))
            if not command.deletes and repositories.is_stream_name(name) and not guarded:
                wanted[name] = command
    names = list(wanted)
    for start in range(0, len(names), repositories.CREATE_BATCH):
        chunk = names[start : start + repositories.CREATE_BATCH]
        for taken in Stream.objects.filter(repository=repository, name__in=chunk).values_list("name", flat=True):
            del wanted[taken]  # an existing (empty) stream: pushing to it is a fast-forward
    return {HEADS + name: command for name, command in wanted.items()}


def _create_streams(repository: Repository, creations: dict[str, Command]) -> list[str]:
    created, refused = repositories.create_streams(
        repository, [(ref.removeprefix(HEADS), command.new) for ref, command in creations.items()]
    )
    for name, reason in refused.items():
        creations[HEADS + name].refusal = reason
    if len(created) <= NAMED_CREATIONS:
        return [f"created stream {name} at {creations[HEADS + name].new}" for name in created]
    return [f"created {len(created)} streams, {created[0]} to {created[-1]}"]


#: What a command's service call raises when it refuses it (anything else is a server error).
_REFUSALS = (ApiError, EngineError, integration.NotFastForward)


def _reason(error: Exception) -> str:
    if isinstance(error, EngineError):
        error = from_engine(error)
    return error.message if isinstance(error, ApiError) else str(error)


def _refused_by_name(ref: str) -> str | None:
    """Why a ref cannot be pushed at all, before anything is recorded for it; None if it may be."""
    if ref.startswith(TAGS):
        return f"tags are not kept here: the refs are the streams ({HEADS}<stream>); push the commit to a stream"
    if not ref.startswith((HEADS, FOR)):
        return f"only {HEADS}<stream> and {FOR}<stream> can be pushed, not {ref}"
    return None


def _refused_by_reach(credential: Credential, ref: str) -> str | None:
    """Why the credential may not update the ref's stream; None if it may."""
    try:
        require_stream(credential, _stream_of(ref))
    except Forbidden as refused:
        return refused.message
    return None


def _stream_of(ref: str) -> str:
    return ref.removeprefix(HEADS) if ref.startswith(HEADS) else ref.removeprefix(FOR)


def refuse_paths(credential: Credential, repository: Repository, commands: list[Command]) -> list[str]:
    """Refuse the whole push when its commits change paths outside the credential's paths: the
    lines naming them, each command's refusal set; nothing when every path is within them."""
    store = store_for(repository.name)
    changed: set[str] = set()
    for command in commands:
        if command.refusal is None and not command.deletes:
            try:
                changed.update(_changed_paths(store, repository, command))
            except EngineError as error:  # not a commit: refused on its own, as its service would
                command.refusal = _reason(error)
    try:
        require_paths(credential, changed)
    except Forbidden as refused:
        for command in commands:
            command.refusal = command.refusal or refused.message
        return [f"push refused: {refused.message}", *(f"  outside: {detail['path']}" for detail in refused.details)]
    return []


def _changed_paths(store, repository: Repository, command: Command) -> list[str]:
    """The paths the pushed head changes where it would land: from the stream's head for
    refs/heads/S of an existing stream; else from its merge base with the target stream
    (refs/for/S: S; a new stream, or S unknown: the default stream). Every path when there is
    no base."""
    name = _stream_of(command.ref)
    heads = dict(
        Stream.objects.filter(repository=repository, name__in=[name, repository.default_stream]).values_list(
            "name", "head"
        )
    )
    if command.ref.startswith(HEADS) and name in heads:
        base = heads[name]
    else:
        target = heads[name] if command.ref.startswith(FOR) and name in heads else heads.get(repository.default_stream)
        bases = merge_bases(store, target, command.new) if target else []
        base = bases[0] if bases else None
    old_tree = store.read_commit(base).tree if base else None
    return [change.path for change in diff_trees(store, old_tree, store.read_commit(command.new).tree)]


def _apply_all_or_none(credential: Credential, repository: Repository, commands: list[Command]) -> list[str]:
    """git's ``atomic`` push: every command through its service in one transaction, or none.
    (The services write the ref mirror once their change commits: here, once all of them have.)"""
    current = None
    try:
        with transaction.atomic():
            messages: list[str] = []
            # One order of the streams' row locks for every atomic push: two cannot deadlock.
            for current in sorted(commands, key=lambda command: command.ref):
                if current.ref.startswith(FOR):
                    raise Invalid(f"{FOR} cannot be part of an atomic push (its integration lands on its own)")
                messages += _apply(credential, repository, current)
    except _REFUSALS as error:
        assert current is not None  # raised by a command's service call
        current.refusal = _reason(error)
        reasons = error.git_lines() if isinstance(error, PolicyDenied) else []
        return reasons + _refuse_all(commands)
    return messages


def _refuse_all(commands: list[Command]) -> list[str]:
    """An atomic push with a refused command: the others are refused with it, as git does."""
    refused = next(command for command in commands if command.refusal is not None)
    for command in commands:
        if command.refusal is None:
            command.refusal = "atomic push failed"
    return [f"atomic push: nothing was applied, because {refused.ref} was refused"]


def _new_commits(repository: Repository, tips: list[str], complete: set[str]) -> list[str]:
    """The pushed commits no stream reached before, parents first (record_commits skips those
    already recorded)."""
    out = refmirror.git(
        repository_path(repository.name), "rev-list", "--reverse", "--topo-order", "--ignore-missing", "--stdin",
        input=_walk_input(tips, complete),
    )  # fmt: skip
    return out.split()


def _walk_input(tips: list[str], complete: set[str]) -> str:
    """``rev-list --stdin`` lines: from the tips, not into what the streams reach."""
    return "".join(f"{tip}\n" for tip in tips) + "".join(f"^{head}\n" for head in sorted(complete))


def _need(credential: Credential, scope: str, what: str) -> None:
    if not credential.has_scope(scope):
        raise Forbidden(f"{what} needs the {scope!r} scope")


def _apply(credential: Credential, repository: Repository, command: Command) -> list[str]:
    ref = command.ref
    if ref.startswith(FOR):
        return _propose(credential, repository, ref.removeprefix(FOR), command)
    name = repositories.check_stream_name(ref.removeprefix(HEADS))
    stream = Stream.objects.filter(repository=repository, name=name).select_related("repository").first()
    if command.deletes:
        _need(credential, "admin", "deleting a stream")
        integration.delete_stream(repository, name, credential)
        return [f"deleted stream {name}"]
    _need(credential, "write", "pushing to a stream")
    if stream is None:
        if command.old != pktline.ZERO_ID:
            raise Invalid(f"stale: there is no stream {name} now; fetch and push again")
        repositories.create_stream(repository, name, command.new, credential)
        return [f"created stream {name} at {command.new}"]
    expected = None if command.old == pktline.ZERO_ID else command.old
    outcome = integration.push_fast_forward(stream, expected, command.new, credential, derive=False)
    return [f"{name} fast-forwarded to {outcome['stream_head']}"]


def _propose(credential: Credential, repository: Repository, name: str, command: Command) -> list[str]:
    _need(credential, "integrate", "pushing to refs/for/")
    if command.deletes:
        raise Invalid("refs/for/ takes a commit to integrate; there is nothing to delete")
    title = f"git push to refs/for/{name}"
    proposal = proposals.open_proposal(repository, stream=name, head=command.new, title=title, credential=credential)
    operation = integration.request_integration(proposal)
    operation = integration.wait_for(operation, settings.AGENTGIT["INTEGRATE_WAIT_S"])
    lines = [f"proposal {proposal.pk} opened on {name}"]
    if operation.state == operation.State.QUEUED:
        lines.append(
            f"integration queued as operation {operation.pk}: GET /api/v1/repos/{repository.name}/operations/{operation.pk}"
        )
        return lines
    if operation.state == operation.State.FAILED:
        error = operation.error or {}
        if error.get("code") == PolicyDenied.code:
            # The proposal is open and waits for what the policy asks: the push itself succeeded.
            lines.append(f"proposal {proposal.pk} awaits approval before it lands on {name}:")
            lines += [f"  {detail['requirement']}: {detail['message']}" for detail in error.get("details", [])]
            return lines
        raise Invalid(f"integration failed: {error.get('message', error)}")
    outcome = operation.outcome_document()
    assert outcome is not None  # a done operation has its outcome
    kind = outcome["outcome"]
    if kind == "conflict":
        lines.append(f"conflict: proposal {proposal.pk} is not merged; {name} stays at {outcome['stream_head']}")
        lines += [f"  {conflict['kind']}: {conflict['path']}" for conflict in outcome["conflicts"]]
        command.refusal = f"conflict in {len(outcome['conflicts'])} path(s); see the remote: lines"
        return lines
    if kind == "merge":
        lines.append(f"merged into {name} as changeset {outcome['changeset']}")
    elif kind == "fast_forward":
        lines.append(f"{name} fast-forwarded to {outcome['changeset']}")
    else:
        lines.append(f"already integrated: {name} is at {outcome['stream_head']}")
    return lines
