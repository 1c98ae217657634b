"""``agentgit``: the command line, on the Python client.

    agentgit [--url URL] [--token TOKEN] <noun> <verb> [--json] ...

``--json`` (on every command, or once before it) prints the API's answer as JSON (one event per
line for ``events``); otherwise tables. The server and token come from ``--url``/``--token`` or
``AGENTGIT_URL``/``AGENTGIT_TOKEN``; the repository of repository commands from ``-r`` or
``AGENTGIT_REPO``.

Exit codes: 0 ok, 1 an error, 2 a usage error, 3 a conflict (its paths printed), 4 the token was
refused (unauthenticated, or it lacks the scope), 5 refused by the repository's policy (each
unmet requirement printed, and the proposal that waits for them).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from . import runner as check_runner
from ._sync import Client
from .errors import AgentGitError, ApiError, Forbidden, PolicyDenied, Unauthenticated
from .types import Edit, Landing, Outcome, Review, delete, rename, write

EXIT_ERROR, EXIT_USAGE, EXIT_CONFLICT, EXIT_AUTH, EXIT_POLICY = 1, 2, 3, 4, 5
#: Transfers at least this large show a progress bar (on a terminal).
PROGRESS_FROM_BYTES = 1024 * 1024


@dataclass
class State:
    url: str | None = None
    token: str | None = None
    json: bool = False
    client: Client | None = None

    def connect(self) -> Client:
        if self.client is None:
            self.client = Client(self.url, self.token)
        return self.client


class AgentGitGroup(click.Group):
    """A group whose commands' client errors become the documented exit codes."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PolicyDenied as error:
            _refused(error)
        except (Unauthenticated, Forbidden) as error:
            _fail(error, EXIT_AUTH)
        except AgentGitError as error:
            _fail(error, EXIT_ERROR)
        finally:
            state = ctx.find_object(State)
            if state is not None and state.client is not None and ctx.parent is None:
                state.client.close()


def _fail(error: AgentGitError, code: int) -> None:
    message = str(error)
    if isinstance(error, ApiError):
        for detail in error.details[:10]:
            message += "\n  " + ", ".join(f"{k}: {v}" for k, v in detail.items())
    click.echo(f"agentgit: {message}", err=True)
    sys.exit(code)


def _refused(error: PolicyDenied) -> None:
    """A policy's refusal: each unmet requirement on its own line, and the proposal that waits."""
    click.echo("agentgit: refused by the repository's policy; unmet:", err=True)
    for item in error.requirements:
        click.echo(f"  {item.get('requirement')}: {item.get('message')}", err=True)
    if error.proposal is not None:
        click.echo(
            f"proposal {error.proposal} waits for that (agentgit proposal policy {error.proposal}); "
            f"once met: agentgit proposal integrate {error.proposal}",
            err=True,
        )
    sys.exit(EXIT_POLICY)


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(State).json = True


json_option = click.option(
    "--json", "as_json", is_flag=True, expose_value=False, callback=_set_json, help="Print the API's JSON answer."
)
repo_option = click.option("-r", "--repo", envvar="AGENTGIT_REPO", required=True, help="Repository (AGENTGIT_REPO).")


def _state() -> State:
    return click.get_current_context().ensure_object(State)


def _client() -> Client:
    return _state().connect()


def emit(raw: Any, rows: Sequence[Sequence[Any]] | None = None, headers: Sequence[str] = (), text: str = "") -> None:
    """``raw`` as JSON with ``--json``; else a table of ``rows`` (or ``text``)."""
    if _state().json:
        click.echo(json.dumps(raw, indent=2, sort_keys=True))
    elif rows is not None:
        click.echo(table(rows, headers))
    else:
        click.echo(text)


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """Columns padded to their widest cell."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def short(oid: str | None) -> str:
    return oid[:12] if oid else "-"


def on_terminal() -> bool:
    """Whether a person watches standard error (progress bars are drawn only for them)."""
    return sys.stderr.isatty()


@contextmanager
def progress_bar(label: str) -> Iterator[Callable[[int, int | None], None] | None]:
    """A progress callback drawing a bar on standard error, for transfers of at least
    PROGRESS_FROM_BYTES watched on a terminal (None elsewhere: pipes and agents get no noise)."""
    if not on_terminal():
        yield None
        return
    drawn = False

    def update(done: int, total: int | None) -> None:
        nonlocal drawn
        if total is not None and total < PROGRESS_FROM_BYTES:
            return
        drawn = True
        click.echo("\r" + bar_line(label, done, total), nl=False, err=True)

    try:
        yield update
    finally:
        if drawn:
            click.echo(err=True)


def bar_line(label: str, done: int, total: int | None, width: int = 30) -> str:
    """``uploading [#########.....]  31%  0.6/2.0 MiB`` (no bar when the size is unknown)."""
    mib = done / 2**20
    if not total:
        return f"{label} {mib:.1f} MiB"
    filled = width * done // total
    return (
        f"{label} [{'#' * filled}{'.' * (width - filled)}] {100 * done // total:3d}%  {mib:.1f}/{total / 2**20:.1f} MiB"
    )


@click.group(cls=AgentGitGroup)
@click.option("--url", envvar="AGENTGIT_URL", help="Server URL (AGENTGIT_URL; default http://127.0.0.1:8000).")
@click.option("--token", envvar="AGENTGIT_TOKEN", help="API token (AGENTGIT_TOKEN).")
@json_option
@click.pass_context
def cli(ctx: click.Context, url: str | None, token: str | None) -> None:
    """AgentGit from the command line. Exit codes: 0 ok, 1 error, 2 usage, 3 conflict, 4 token refused,
    5 refused by the policy."""
    state = ctx.ensure_object(State)
    state.url, state.token = url, token


# ------------------------------------------------------------------------------ repositories


@cli.group()
def repo() -> None:
    """Repositories."""


@repo.command("list")
@click.option("--limit", type=int)
@click.option("--cursor")
@json_option
def repo_list(limit: int | None, cursor: str | None) -> None:
    """Repositories by name, a page at a time."""
    page = _client().list_repos(limit=limit, cursor=cursor)
    emit(page.raw, [(r.name, r.default_stream, r.created) for r in page.items], ("NAME", "DEFAULT", "CREATED"))
    _more(page.next)


@repo.command("create")
@click.argument("name")
@json_option
def repo_create(name: str) -> None:
    """Create a repository (scope admin)."""
    made = _client().create_repo(name)
    emit(made.raw, text=f"created {made.name} (default stream {made.default_stream})")


@cli.group()
def stream() -> None:
    """Streams (branches)."""


@stream.command("list")
@repo_option
@click.option("--limit", type=int)
@click.option("--cursor")
@json_option
def stream_list(repo: str, limit: int | None, cursor: str | None) -> None:
    page = _client().list_streams(repo, limit=limit, cursor=cursor)
    emit(page.raw, [(s.name, short(s.head), s.updated) for s in page.items], ("NAME", "HEAD", "UPDATED"))
    _more(page.next)


@stream.command("create")
@repo_option
@click.argument("name")
@click.option("--from", "start", help="The revision it starts at (empty when omitted).")
@json_option
def stream_create(repo: str, name: str, start: str | None) -> None:
    made = _client().create_stream(repo, name, start)
    emit(made.raw, text=f"created {made.name} at {short(made.head)}")


def _more(cursor: str | None) -> None:
    if cursor and not _state().json:
        click.echo(f"(more: --cursor {cursor})", err=True)


# ------------------------------------------------------------------------------ landing


@cli.command()
@repo_option
@click.option("-s", "--stream", "stream_name", default="main", show_default=True)
@click.option("-m", "--message", required=True)
@click.option("--parent", help="The revision the change is on (default: the stream's head).")
@click.option(
    "--write",
    "writes",
    multiple=True,
    metavar="PATH[=FILE]",
    help="Write PATH from the file PATH in the working directory, or from FILE ('-': stdin).",
)
@click.option("--delete", "deletes", multiple=True, metavar="PATH")
@click.option("--rename", "renames", multiple=True, metavar="FROM=TO")
@click.option("--agent", help="Provenance: the agent's name.")
@click.option("--task", help="Provenance: the task id.")
@json_option
def land(
    repo: str,
    stream_name: str,
    message: str,
    parent: str | None,
    writes: tuple[str, ...],
    deletes: tuple[str, ...],
    renames: tuple[str, ...],
    agent: str | None,
    task: str | None,
) -> None:
    """Land a change in one call: write, delete and rename files, propose and integrate.

    Exit code 3 when it conflicts, with the conflicting paths printed.
    """
    edits: list[Edit | dict] = [_write(spec) for spec in writes]
    edits += [delete(path) for path in deletes]
    for spec in renames:
        source, sep, target = spec.partition("=")
        if not sep or not source or not target:
            raise click.BadParameter(f"{spec!r}: use FROM=TO", param_hint="--rename")
        edits.append(rename(source, target))
    if not edits:
        raise click.UsageError("nothing to land: give --write, --delete or --rename")
    provenance = {k: v for k, v in {"agent": agent, "task": task}.items() if v}
    extra: dict[str, Any] = {} if parent is None else {"parent": parent}
    with progress_bar("uploading") as progress:
        landed = _client().land(
            repo, stream_name, edits, message, provenance=provenance or None, progress=progress, **extra
        )
    _report(landed)


def _write(spec: str) -> Edit:
    path, sep, source = spec.partition("=")
    if not path:
        raise click.BadParameter(f"{spec!r}: use PATH or PATH=FILE", param_hint="--write")
    if sep and source == "-":
        return write(path, sys.stdin.buffer.read())
    local = Path(source if sep else path)
    if not local.is_file():
        raise click.BadParameter(f"no file {str(local)!r}", param_hint="--write")
    return write(path, local, mode="100755" if local.stat().st_mode & 0o111 else None)


def _report(result: Landing | Outcome) -> None:
    """The outcome; a conflict's paths (and exit code 3)."""
    emit(result.raw, text=f"{result.outcome}: {result.stream_head or '-'}")
    if result.conflicted:
        if not _state().json:
            click.echo(table([(c.path, c.kind) for c in result.conflicts], ("CONFLICT", "KIND")))
        sys.exit(EXIT_CONFLICT)


# ------------------------------------------------------------------------------ proposals


@cli.group()
def proposal() -> None:
    """Proposals and their integration."""


@proposal.command("list")
@repo_option
@click.option("--state", type=click.Choice(["open", "integrated", "conflicted", "closed"]))
@click.option("--stream", "stream_name")
@click.option("--limit", type=int)
@click.option("--cursor")
@json_option
def proposal_list(repo: str, state: str | None, stream_name: str | None, limit: int | None, cursor: str | None) -> None:
    page = _client().list_proposals(repo, state=state, stream=stream_name, limit=limit, cursor=cursor)
    rows = [(p.id, p.state, p.stream, short(p.head), p.title) for p in page.items]
    emit(page.raw, rows, ("ID", "STATE", "STREAM", "HEAD", "TITLE"))
    _more(page.next)


@proposal.command("show")
@repo_option
@click.argument("proposal_id", type=int)
@json_option
def proposal_show(repo: str, proposal_id: int) -> None:
    found = _client().get_proposal(repo, proposal_id)
    rows = [(k, found.raw.get(k)) for k in ("id", "state", "stream", "head", "title", "outcome", "stream_head")]
    rows += [("conflict", f"{c.path} ({c.kind})") for c in found.conflicts]
    emit(found.raw, rows, ("FIELD", "VALUE"))


@proposal.command("integrate")
@repo_option
@click.argument("proposal_id", type=int)
@click.option("--bypass", metavar="REASON", help="Land it whatever the policy says (scope admin); recorded.")
@json_option
def proposal_integrate(repo: str, proposal_id: int, bypass: str | None) -> None:
    """Integrate a proposal; exit code 3 when it conflicts, 5 when the policy refuses it."""
    _report(_client().integrate(repo, proposal_id, bypass=bypass))


@proposal.command("policy")
@repo_option
@click.argument("proposal_id", type=int)
@json_option
def proposal_policy(repo: str, proposal_id: int) -> None:
    """What the policy says of integrating the proposal now: each requirement, met or not."""
    found = _client().explain(repo, proposal_id)
    rows = [(item.requirement, "yes" if item.met else "NO", item.message) for item in found.requirements]
    if not _state().json:
        verdict = "allowed" if found.allowed else "not allowed"
        click.echo(f"proposal {proposal_id}: {verdict} now (policy version {found.policy_version})")
        if not rows:
            click.echo("the policy asks nothing of it")
            return
    emit(found.raw, rows, ("REQUIREMENT", "MET", "MESSAGE"))


# ------------------------------------------------------------------------------ reviews and policies


@cli.group()
def review() -> None:
    """Reviews of proposals (scope review)."""


def _review_command(verdict: str, summary: str) -> None:
    @review.command(verdict, help=summary)
    @repo_option
    @click.argument("proposal_id", type=int)
    @click.option("-m", "--message", "body", default="", help="The review's text.")
    @json_option
    def command(repo: str, proposal_id: int, body: str) -> None:
        made = _client().review(repo, proposal_id, verdict, body)
        emit(made.raw, text=f"review {made.id}: {made.verdict} of proposal {proposal_id} revision {made.revision}")


_review_command("approve", "Approve the proposal's latest revision (its authors cannot).")
_review_command("reject", "Reject the proposal: it cannot land until you withdraw it or approve.")
_review_command("comment", "Comment on the proposal (it neither approves nor rejects).")


def _review_rows(reviews: Sequence[Review]) -> list[tuple[Any, ...]]:
    return [
        (
            r.id,
            r.reviewer,
            r.verdict,
            r.revision,
            "withdrawn" if r.withdrawn else "",
            r.body.splitlines()[0] if r.body else "",
        )
        for r in reviews
    ]


@review.command("list")
@repo_option
@click.argument("proposal_id", type=int)
@json_option
def review_list(repo: str, proposal_id: int) -> None:
    """Every review of the proposal, oldest first."""
    found = _client().reviews(repo, proposal_id)
    emit(
        {"reviews": [r.raw for r in found]},
        _review_rows(found),
        ("ID", "REVIEWER", "VERDICT", "REVISION", "WITHDRAWN", "BODY"),
    )


@review.command("withdraw")
@repo_option
@click.argument("proposal_id", type=int)
@click.argument("review_id", type=int)
@json_option
def review_withdraw(repo: str, proposal_id: int, review_id: int) -> None:
    """Withdraw your review: it no longer counts (a rejection no longer blocks)."""
    found = _client().withdraw_review(repo, proposal_id, review_id)
    emit(found.raw, text=f"review {found.id} withdrawn")


@cli.group()
def policy() -> None:
    """The repository's policy: what may land on which stream."""


@policy.command("show")
@repo_option
@json_option
def policy_show(repo: str) -> None:
    """The policy in force (JSON; version 0 and no rules: none was ever set)."""
    click.echo(json.dumps(_client().policy(repo).raw, indent=2, sort_keys=True))


@policy.command("set")
@repo_option
@click.argument("source", type=click.File("r"), metavar="FILE|-")
@json_option
def policy_set(repo: str, source: Any) -> None:
    """Set the policy from a JSON document ({"rules": [...]}; '-': stdin) (scope admin)."""
    try:
        document = json.loads(source.read())
    except ValueError as error:
        raise click.BadParameter(f"not JSON: {error}", param_hint="FILE") from None
    stored = _client().set_policy(repo, document)
    emit(stored.raw, text=f"policy version {stored.version} in force ({len(stored.rules)} rules)")


# ------------------------------------------------------------------------------ reading


@cli.command()
@repo_option
@click.argument("rev", required=False)
@click.option("--path", help="Only changesets that touch this path.")
@click.option("--limit", type=int, default=20, show_default=True)
@click.option("--cursor")
@json_option
def log(repo: str, rev: str | None, path: str | None, limit: int, cursor: str | None) -> None:
    """History, newest first, a page at a time."""
    page = _client().log(repo, rev, path=path, limit=limit, cursor=cursor)
    rows = [
        (short(e.id), e.author.get("name"), e.message.strip().splitlines()[0] if e.message.strip() else "")
        for e in page.items
    ]
    emit(page.raw, rows, ("CHANGESET", "AUTHOR", "MESSAGE"))
    _more(page.next)


@cli.command()
@repo_option
@click.argument("from_rev")
@click.argument("to_rev")
@click.option("--stat", is_flag=True, help="Only the changed paths, not the patch.")
@json_option
def diff(repo: str, from_rev: str, to_rev: str, stat: bool) -> None:
    """The changes between two revisions."""
    found = _client().diff(repo, from_rev, to_rev)
    rows = [(c.status, f"{c.old_path} -> {c.path}" if c.old_path else c.path) for c in found.changes]
    if stat or _state().json:
        emit(found.raw, rows, ("STATUS", "PATH"))
    else:
        click.echo(found.patch, nl=False)


@cli.command()
@repo_option
@click.argument("rev")
@click.argument("path")
@json_option
def blame(repo: str, rev: str, path: str) -> None:
    """Each line of a file with the changeset that last changed it."""
    lines = _client().blame(repo, rev, path)
    emit({"path": path, "lines": [line.raw for line in lines]}, [(short(x.changeset), x.number, x.text) for x in lines])


@cli.command()
@repo_option
@click.argument("pattern")
@click.option("--rev", help="A stream or changeset id (default: the default stream).")
@click.option("-i", "--ignore-case", is_flag=True, help="Ignore case.")
@click.option("-F", "--fixed-strings", "fixed", is_flag=True, help="Take PATTERN literally.")
@click.option("-w", "--word-regexp", "word", is_flag=True, help="Match whole words only.")
@click.option("-l", "--files-with-matches", "files", is_flag=True, help="Only the paths of files that match.")
@click.option("-c", "--count", is_flag=True, help="Matching lines per file.")
@click.option("-C", "--context", type=click.IntRange(0, 100), default=0, help="Lines of context around each match.")
@click.option("--path", "paths", multiple=True, help="Only paths matching this glob (repeatable).")
@click.option("--exclude", multiple=True, help="Not paths matching this glob (repeatable).")
@click.option("--paths-only", is_flag=True, help="Match PATTERN against file paths, not contents.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True, help="Per page.")
@click.option("--cursor", help="Resume where a previous page stopped.")
@click.option("--all", "every_page", is_flag=True, help="Follow every page to the end.")
@json_option
def search(
    repo: str,
    pattern: str,
    rev: str | None,
    ignore_case: bool,
    fixed: bool,
    word: bool,
    files: bool,
    count: bool,
    context: int,
    paths: tuple[str, ...],
    exclude: tuple[str, ...],
    paths_only: bool,
    limit: int,
    cursor: str | None,
    every_page: bool,
) -> None:
    """Search code at any revision, as git grep -n -E (RE2 syntax) prints it."""
    mode = "files" if files or count else "content"
    printer = _GrepPrinter(count=count, paths_only=paths_only or files, context=context > 0)
    while True:
        found = _client().search(
            repo, pattern, rev=rev, fixed=fixed, ignore_case=ignore_case, word=word, paths=list(paths),
            exclude=list(exclude), context=context or None, mode=mode, target="paths" if paths_only else None,
            limit=limit, cursor=cursor,
        )  # fmt: skip
        if _state().json:
            click.echo(json.dumps(found, indent=2, sort_keys=True))
        else:
            for line in printer.feed(found):
                click.echo(line)
        cursor = found.get("next")
        if not (every_page and cursor):
            break
    for line in printer.flush():
        click.echo(line)
    _more(cursor)


class _GrepPrinter:
    """git grep's output from pages of answers: ``path:line:text``, ``path-line-text`` for context
    and ``--`` between groups. A file's lines are printed once the next file starts (a page may
    end inside one): a match (":") wins over the same line as another's context ("-")."""

    def __init__(self, *, count: bool, paths_only: bool, context: bool) -> None:
        self.count, self.paths_only, self.context = count, paths_only, context
        self.path: str | None = None
        self.lines: dict[int, tuple[str, str]] = {}
        self.binary = False
        self.last: int | None = None  # the last line number printed, -1 after another file

    def feed(self, found: dict) -> Iterator[str]:
        if "files" in found:
            for hit in found["files"]:
                yield f"{hit['path']}:{hit['matches']}" if self.count else hit["path"]
            return
        for hit in found["matches"]:
            if hit["path"] != self.path:
                yield from self.flush()
                self.path = hit["path"]
            if hit.get("binary"):
                self.binary = True
                continue
            before, after = hit.get("before", []), hit.get("after", [])
            for number, text in [*enumerate(before, hit["line"] - len(before)), *enumerate(after, hit["line"] + 1)]:
                self.lines.setdefault(number, ("-", text))
            self.lines[hit["line"]] = (":", hit["text"])

    def flush(self) -> Iterator[str]:
        if self.path is None:
            return
        if self.binary:
            yield f"Binary file {self.path} matches"
        for number in sorted(self.lines):
            if self.context and self.last is not None and number != self.last + 1:
                yield "--"
            marker, text = self.lines[number]
            yield f"{self.path}{marker}{number}{marker}{text}"
            self.last = number
        if self.lines and self.context:
            self.last = -1  # another file: a separator before its first line
        self.path, self.lines, self.binary = None, {}, False


@cli.command()
@repo_option
@click.argument("rev")
@click.argument("path")
@click.option("-o", "--output", type=click.File("wb"), help="Write to this file instead of stdout.")
def cat(repo: str, rev: str, path: str, output: Any) -> None:
    """A file's bytes at a revision (raw: --json does not apply)."""
    sink = output or sys.stdout.buffer
    with progress_bar("downloading") as progress:
        _client().download_file(repo, rev, path, sink, progress=progress)
    sink.flush()


@cli.command()
@repo_option
@click.argument("rev")
@click.argument("path", required=False, default="")
@json_option
def tree(repo: str, rev: str, path: str) -> None:
    """The entries of a directory at a revision."""
    entries = _client().tree(repo, rev, path)
    raw = {"path": path.strip("/"), "entries": [e.raw for e in entries]}
    emit(raw, [(e.mode, e.type, short(e.id), e.path) for e in entries], ("MODE", "TYPE", "ID", "PATH"))


@cli.command()
@repo_option
@click.option("--after", type=int, help="Resume after this event id.")
@click.option("--kinds", help="Comma-separated kinds, e.g. stream.integrate,proposal.conflict.")
@click.option("--stream", "stream_name")
@click.option("--follow/--no-follow", default=True, help="Keep waiting for new events (reconnecting).")
@click.option("--timeout", type=float, help="Seconds each feed stays open (the server's default otherwise).")
@json_option
def events(
    repo: str, after: int | None, kinds: str | None, stream_name: str | None, follow: bool, timeout: float | None
) -> None:
    """The repository's events; JSON Lines with --json."""
    wanted = [k for k in (kinds or "").split(",") if k] or None
    feed = _client().events(repo, after=after, kinds=wanted, stream=stream_name, timeout_s=timeout, reconnect=follow)
    for event in feed:
        if _state().json:
            click.echo(json.dumps(event.as_dict(), sort_keys=True))
        else:
            click.echo(f"{event.id}\t{event.kind}\t{json.dumps(event.data, sort_keys=True)}")
        sys.stdout.flush()


@cli.command(context_settings={"allow_interspersed_args": False})
@repo_option
@click.option("--name", required=True, help="The check it runs, as the policy requires it (ci/test).")
@click.option("--jobs", type=int, default=1, show_default=True, help="Checks run at once.")
@click.option(
    "--timeout", "timeout_s", type=float, default=600, show_default=True, help="Seconds a run may take (then: error)."
)
@click.option(
    "--state",
    "state_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Its position in the feed and the trees it ran (default: under ~/.cache/agentgit/runner).",
)
@json_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- COMMAND...")
def runner(
    repo: str, name: str, jobs: int, timeout_s: float, state_path: Path | None, command: tuple[str, ...]
) -> None:
    """Run COMMAND on every tree the landing queue asks NAME of, and report the result.

    COMMAND runs without a shell (write sh -c '...' for one) in a fresh checkout of the tree:
    exit 0 reports success, another exit failure, past --timeout error; the output's tail is
    the summary. Progress goes to stderr, a line per check (JSON lines with --json).
    """
    problem = check_runner.check_settings(name, jobs, timeout_s, command)
    if problem:
        raise click.UsageError(problem)
    client = _client()
    settings = check_runner.Settings(
        repo=repo,
        name=name,
        command=command,
        jobs=jobs,
        timeout_s=timeout_s,
        state_path=state_path or check_runner.default_state_path(client.config.url, repo, name),
        as_json=_state().json,
    )
    worker = check_runner.Runner(client, settings, check_runner.echo_stderr)
    check_runner.install_stop_signals(worker)
    worker.progress("following", repo=repo, jobs=jobs, state=str(settings.state_path))
    worker.run()


@cli.command()
@click.argument("method")
@click.argument("path")
@click.option("-d", "--data", help="A JSON body, @FILE, or - for stdin.")
def api(method: str, path: str, data: str | None) -> None:
    """Any endpoint: ``agentgit api GET /repos/demo``; prints its answer."""
    body = None
    if data is not None:
        text = sys.stdin.read() if data == "-" else Path(data[1:]).read_text() if data.startswith("@") else data
        try:
            body = json.loads(text)
        except ValueError as error:
            raise click.BadParameter(f"not JSON: {error}", param_hint="--data") from None
    answer = _client().api(method, path, json=body)
    if isinstance(answer, bytes):
        sys.stdout.buffer.write(answer)
    else:
        click.echo(json.dumps(answer, indent=2, sort_keys=True))


@cli.command()
@click.option("--read-only", is_flag=True, help="Only the tools that change nothing.")
@click.option("--tools", help="Comma-separated tool names to serve (default: all).")
def mcp(read_only: bool, tools: str | None) -> None:
    """Serve the AgentGit tools to an agent over MCP (stdio); needs the extra agentgit[mcp]."""
    try:
        from .mcp_server import build_server
    except ImportError as error:
        raise click.UsageError(f"the MCP server needs the mcp package (pip install 'agentgit[mcp]'): {error}") from None
    from ._async import AsyncClient

    state = _state()
    selected = [name for name in (tools or "").split(",") if name] or None
    try:
        server = build_server(AsyncClient(state.url, state.token), read_only=read_only, tools=selected)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--tools") from None
    server.run("stdio")


def main() -> None:
    """The console script."""
    cli(prog_name="agentgit")
