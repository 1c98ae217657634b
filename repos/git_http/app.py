"""Smart HTTP at ``/git/{repo}.git``: an ASGI app in front of Django (agentgit_site/asgi.py).

What is ours and what is git's (DESIGN.md decision 3):

* refs come from the database: the v0 advertisement and protocol v2's ``ls-refs`` are answered
  here, each ``ref-prefix`` an indexed query (repositories.streams_by_prefix);
* packs are git's: a fetch is handed to ``git upload-pack --stateless-rpc`` (pack reuse,
  bitmaps, shallow, filters), a push's pack to ``git index-pack`` (repos.git_http.push);
* both directions stream: the request body is fed to git's stdin as it arrives and git's stdout
  goes out as it is produced, so no pack is ever whole in a Python process.

Authentication, the rate limit, the repository and the scope are checked in one function,
:func:`admit`, before anything else; database work runs in threads (``sync_to_async``, not
thread-sensitive: a push waiting for its integration must not hold Django's request thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import subprocess
import tempfile
import threading
import zlib
from collections import OrderedDict
from collections.abc import AsyncIterator
from functools import cache
from typing import NamedTuple
from urllib.parse import parse_qs

from django.db import connections, router

from agentgit_site.observability import note

from ..errors import ApiError, Forbidden, Invalid, NotFound, Unauthenticated
from ..models import Credential, Repository, Stream
from ..services.admission import BASIC_CHALLENGE, SCOPE_KEY, Admission
from ..services.credentials import require_repository
from ..services.repositories import get_repository, streams_by_prefix
from ..services.stores import repository_path
from . import pktline
from .processes import GitProcess, git_env, in_thread
from .push import receive_pack

logger = logging.getLogger(__name__)

PREFIX = "/git/"
_ROUTE = re.compile(
    r"/git/(?P<repo>[A-Za-z0-9][A-Za-z0-9._-]{0,99}?)(?:\.git)?/(?P<rest>info/refs|git-upload-pack|git-receive-pack)\Z"
)
#: What upload-pack may serve: any object by id (the database, not the mirror, decides what is
#: advertised, so a want may precede the mirror by a moment), partial clones.
UPLOAD_PACK_CONFIG = ("-c", "uploadpack.allowAnySHA1InWant=true", "-c", "uploadpack.allowFilter=true")


class ClientGone(Exception):
    """The client closed the connection before its request was read."""


# ----------------------------------------------------------------------------- admission


def admit(admission: Admission | None, repository_name: str, scopes: tuple[str, ...]) -> tuple[Credential, Repository]:
    """The credential the admission middleware read (Basic with the token as the password, what
    git sends, or Bearer), with one of ``scopes`` and its rate-limit token taken, and the
    repository, if the credential reaches it (else the 404 of a repository that does not
    exist): the one place the git surface admits a request. Raises the API's errors."""
    if admission is None:  # mounted without the middleware: refuse rather than serve unchecked
        raise Unauthenticated("this server reads no credentials on this path")
    credential = admission.admit(*scopes)
    require_repository(credential, repository_name)
    return credential, get_repository(repository_name)


# ----------------------------------------------------------------------------- the ASGI app


class GitHttp:
    """Serves ``/git/…``; everything else goes to ``app`` (Django)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        try:
            await self._serve(scope, receive, send)
        except ClientGone:
            pass
        except ApiError as error:
            await _answer_error(send, error)
        except Exception:
            # Never expected; the answer may have started already, so this can only try.
            logger.exception("git request %s %s failed", scope["method"], scope["path"])
            with contextlib.suppress(Exception):
                await _answer_error(send, ApiError("internal error; the server log has the details"))

    async def _serve(self, scope, receive, send) -> None:
        route = _ROUTE.match(scope["path"])
        if route is None:
            raise NotFound(f"no git endpoint at {scope['path']}; clone {PREFIX}<repository>.git")
        headers = dict(scope.get("headers", []))
        repo, rest = route["repo"], route["rest"]
        method = scope["method"]
        if rest == "info/refs":
            if method not in ("GET", "HEAD"):
                raise Invalid("info/refs is read with GET")
            service = parse_qs(scope.get("query_string", b"").decode()).get("service", [""])[0]
            if service not in ("git-upload-pack", "git-receive-pack"):
                raise Forbidden("only the smart protocol is served: ?service=git-upload-pack or git-receive-pack")
        else:
            if method != "POST":
                raise Invalid(f"{rest} takes a POST")
            service = rest
        pushing = service == "git-receive-pack"
        scopes = ("write", "integrate") if pushing else ("read",)
        credential, repository = await in_thread(admit, scope.get(SCOPE_KEY), repo, scopes)
        note(scope, route=f"{PREFIX}{{repo}}.git/{rest}", credential=credential)
        version2 = b"version=2" in headers.get(b"git-protocol", b"")
        if rest == "info/refs":
            body = await in_thread(advertisement, repository, service, version2)
            await _respond(send, f"application/x-{service}-advertisement", body)
        elif pushing:
            await receive_pack(credential, repository, request_body(receive, headers), send)
        else:
            await upload_pack(repository, version2, request_body(receive, headers), send)


async def request_body(receive, headers: dict) -> AsyncIterator[bytes]:
    """The request body as it arrives, gunzipped when git compressed it."""
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if headers.get(b"content-encoding") == b"gzip" else None
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        if chunk:
            yield inflate.decompress(chunk) if inflate else chunk
        if not message.get("more_body", False):
            if inflate:
                yield inflate.flush()
            return


async def _respond(send, content_type: str, body: bytes) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": _headers(content_type)})
    await send({"type": "http.response.body", "body": body})


def _headers(content_type: str) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", content_type.encode()), (b"cache-control", b"no-cache, max-age=0, must-revalidate")]


async def _answer_error(send, error: ApiError) -> None:
    """A plain-text answer (git shows it to the user as ``remote: …``), with the challenge on 401."""
    status, body = error.git_answer()
    headers = [(b"content-type", b"text/plain; charset=utf-8")]
    if status == 401:
        headers.append((b"www-authenticate", BASIC_CHALLENGE.encode()))
    if error.retry_after_ms is not None:
        headers.append((b"retry-after", str(max(1, (error.retry_after_ms + 999) // 1000)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# ----------------------------------------------------------------------------- refs


def advertisement(repository: Repository, service: str, version2: bool) -> bytes:
    """The ``info/refs`` answer: protocol v2's capabilities, or the v0 refs from the database."""
    head = pktline.pkt(f"# service={service}\n") + pktline.FLUSH
    if version2 and service == "git-upload-pack":
        return head + _v2_capabilities()
    listing = every_stream(repository)
    default = repository.default_stream
    caps = _v0_capabilities(service)
    if service == "git-upload-pack":
        caps += f" symref=HEAD:refs/heads/{default}"
        if listing.default_head:  # HEAD first, with the capabilities; then every stream
            return head + pktline.pkt(f"{listing.default_head} HEAD\0{caps}\n") + listing.packets + pktline.FLUSH
    if listing.first is None:
        return head + pktline.pkt(f"{pktline.ZERO_ID} capabilities^{{}}\0{caps}\n") + pktline.FLUSH
    name, oid = listing.first  # the first stream carries the capabilities, in place of its packet
    first = pktline.pkt(f"{oid} refs/heads/{name}\0{caps}\n")
    return head + first + listing.packets[len(_ref_packet(name, oid)) :] + pktline.FLUSH


class Listing(NamedTuple):
    """Every non-empty stream of a repository as git's ref lines, by name."""

    #: Which state of which repository (a primary key can come back after a rolled-back one).
    version: tuple[int, object]
    #: ``<oid> refs/heads/<name>\n`` of each stream, framed: the body of a v0 advertisement
    #: and of an ``ls-refs`` for every stream.
    packets: bytes
    #: The first stream by name, and the default stream's head (None: empty).
    first: tuple[str, str] | None
    default_head: str | None


def _ref_packet(name: str, oid: str) -> bytes:
    return pktline.pkt(f"{oid} refs/heads/{name}\n")


#: The last listing of the repositories most recently listed in full, by primary key, up to
#: ``_LISTINGS_KEPT`` of them and ``_LISTINGS_BYTES`` in all (a million streams' listing is about
#: 70 MB; the newest is kept whatever its size).
_LISTINGS: OrderedDict[int, Listing] = OrderedDict()
_LISTINGS_KEPT = 16
_LISTINGS_BYTES = 256 << 20
_LISTINGS_LOCK = threading.Lock()
#: ``<oid> refs/heads/`` and the packet's length and newline around a name.
_FRAMING = 4 + 40 + 1 + len("refs/heads/") + 1


def every_stream(repository: Repository) -> Listing:
    """The repository's streams as :class:`Listing`, read again only when its refs changed.

    Listing 10 000 streams costs 20–40 ms (the rows and their framing), and a clone and a push
    each ask for it. Every change of a stream (a head moved, a stream created or deleted)
    appends an event in its transaction, which advances the repository's ``event_seq``; the
    repository row is read before the streams, so a listing is at least as new as the
    ``event_seq`` it is kept under, and one kept under an older value is never served.

    The rows are read with one cursor and framed as they come (a million streams: no model
    instances, no list of them kept)."""
    with _LISTINGS_LOCK:
        kept = _LISTINGS.get(repository.pk)
    version = (repository.event_seq, repository.created)
    if kept is not None and kept.version == version:
        return kept
    default = repository.default_stream
    first: tuple[str, str] | None = None
    default_head = None
    parts: list[str] = []
    with connections[router.db_for_read(Stream)].cursor() as cursor:
        cursor.execute(_EVERY_STREAM, [repository.pk])
        while rows := cursor.fetchmany(10_000):
            if first is None:
                first = rows[0]
            parts += [f"{_FRAMING + len(name):04x}{head} refs/heads/{name}\n" for name, head in rows]
            default_head = default_head or next((head for name, head in rows if name == default), None)
    listing = Listing(version, "".join(parts).encode(), first, default_head)
    with _LISTINGS_LOCK:
        _LISTINGS[repository.pk] = listing
        _LISTINGS.move_to_end(repository.pk)
        while len(_LISTINGS) > 1 and (
            len(_LISTINGS) > _LISTINGS_KEPT or sum(len(kept.packets) for kept in _LISTINGS.values()) > _LISTINGS_BYTES
        ):
            _LISTINGS.popitem(last=False)
    return listing


#: Stream names are ASCII (repositories.check_stream_name), so a character is a byte in the framing.
_EVERY_STREAM = (
    f"SELECT name, head FROM {Stream._meta.db_table} WHERE repository_id = %s AND head IS NOT NULL ORDER BY name"
)


@cache
def _v2_capabilities() -> bytes:
    """git's own v2 capability advertisement (once per process, from an empty repository)."""
    return _ask_git_empty_repository("upload-pack", {"GIT_PROTOCOL": "version=2"})


@cache
def _v0_capabilities(service: str) -> str:
    """The capabilities git advertises for ``service`` in protocol v0 (once per process)."""
    out = _ask_git_empty_repository(service.removeprefix("git-"), {})
    reader = pktline.Reader()
    reader.feed(out)
    first = reader.next()
    caps = first.split(b"\0", 1)[1].decode().strip() if isinstance(first, bytes) and b"\0" in first else ""
    # Not offered: push options (not read).
    refused = ("push-options",)
    return " ".join(cap for cap in caps.split() if cap not in refused and not cap.startswith("symref="))


def _ask_git_empty_repository(command: str, env: dict[str, str]) -> bytes:
    with tempfile.TemporaryDirectory(prefix="agentgit-caps-") as directory:
        subprocess.run(["git", "init", "-q", "--bare", directory], check=True, env=git_env())
        done = subprocess.run(
            ["git", *UPLOAD_PACK_CONFIG, command, "--advertise-refs", "--stateless-rpc", directory],
            capture_output=True,
            check=True,
            env={**git_env(), **env},
        )
    return done.stdout


def ls_refs(repository: Repository, arguments: list[bytes]) -> bytes:
    """Protocol v2 ``ls-refs`` from the database: ``ref-prefix`` pushed down to the index."""
    prefixes: list[str] = []
    symrefs = unborn = False
    for argument in arguments:
        text = argument.decode("utf-8", "replace").rstrip("\n")
        if text.startswith("ref-prefix "):
            prefixes.append(text.removeprefix("ref-prefix "))
        elif text == "symrefs":
            symrefs = True
        elif text == "unborn":
            unborn = True
    heads = "refs/heads/"
    if not prefixes:
        stream_prefixes: list[str] | None = None
    elif any(heads.startswith(prefix) for prefix in prefixes):
        stream_prefixes = None  # refs/, refs/heads/, "r": every stream was asked for
    else:
        stream_prefixes = [p.removeprefix(heads) for p in prefixes if p.startswith(heads)]
    lines: list[bytes] = []
    if not prefixes or any("HEAD".startswith(prefix) for prefix in prefixes):
        default = repository.default_stream
        found = streams_by_prefix(repository, [default])
        head = next((oid for name, oid in found if name == default), None)
        target = f" symref-target:{heads}{default}" if symrefs else ""
        if head:
            lines.append(pktline.pkt(f"{head} HEAD{target}\n"))
        elif unborn and symrefs:
            lines.append(pktline.pkt(f"unborn HEAD{target}\n"))
    if stream_prefixes is None:
        return b"".join(lines) + every_stream(repository).packets + pktline.FLUSH
    lines += [_ref_packet(name, oid) for name, oid in streams_by_prefix(repository, stream_prefixes)]
    return b"".join(lines) + pktline.FLUSH


# ----------------------------------------------------------------------------- fetch


async def upload_pack(repository: Repository, version2: bool, body: AsyncIterator[bytes], send) -> None:
    """A fetch: ``ls-refs`` answered from the database, everything else streamed through git."""
    content_type = "application/x-git-upload-pack-result"
    first, rest = b"", body
    if version2:
        reader = pktline.BodyReader(body)
        try:
            command = await reader.packet()
            if command == b"command=ls-refs\n":
                arguments = []
                while (packet := await reader.packet()) != "flush":
                    if isinstance(packet, bytes):
                        arguments.append(packet)
                await _respond(send, content_type, await in_thread(ls_refs, repository, arguments))
                return
        except (EOFError, ValueError) as error:
            raise Invalid(f"a malformed protocol v2 request: {error}") from None
        # Anything else (fetch, object-info) is git's: handed over whole.
        first, rest = bytes(reader.consumed), body
    argv = ["git", *UPLOAD_PACK_CONFIG, "upload-pack", "--stateless-rpc", os.fspath(repository_path(repository.name))]
    env = git_env(**({"GIT_PROTOCOL": "version=2"} if version2 else {}))
    await stream_through(argv, env, first, rest, send, content_type)


async def stream_through(
    argv: list[str], env: dict[str, str], first: bytes, rest: AsyncIterator[bytes], send, content_type: str
) -> None:
    """Run ``argv`` with ``first`` + ``rest`` as its stdin and stream its stdout as the answer."""
    process = await GitProcess.start(argv, env)
    stdin, stdout = process.stdin, process.stdout
    assert stdout is not None  # started with a pipe

    async def feed() -> None:
        try:
            if first:
                stdin.write(first)
                await stdin.drain()
            async for chunk in rest:
                stdin.write(chunk)
                await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with contextlib.suppress(Exception):
                stdin.close()

    feeder = asyncio.create_task(feed())
    errors = asyncio.create_task(process.stderr.read(64 * 1024))
    started = False
    try:
        while True:
            chunk = await stdout.read(64 * 1024)
            if not chunk:
                break
            if not started:
                await send({"type": "http.response.start", "status": 200, "headers": _headers(content_type)})
                started = True
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        code = await process.wait()
        await feeder
        if code != 0:
            logger.warning("%s exited %s: %s", argv[-2], code, (await errors).decode(errors="replace").strip())
        if not started:
            if code != 0:
                raise Invalid(f"git {argv[-3]} refused the request: {(await errors).decode(errors='replace').strip()}")
            await send({"type": "http.response.start", "status": 200, "headers": _headers(content_type)})
        await send({"type": "http.response.body", "body": b""})
    finally:
        feeder.cancel()
        errors.cancel()
        if process.returncode is None:
            process.kill()
            await process.wait()
        process.close()
