"""Browsing content: the repository list, a repository's home, directories, files, raw bytes and
the "go to file" search."""

from __future__ import annotations

import posixpath
from urllib.parse import quote

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_safe

from engine.objects import MODE_EXECUTABLE, MODE_GITLINK, MODE_SYMLINK, MODE_TREE, is_binary, path_from_bytes

from ..errors import Invalid, NotFound
from ..models import Proposal
from ..services import browse, proposals, reads
from ..services.access import readable_repositories
from ..services.events import STREAM_INTEGRATE
from . import render as content
from . import tables
from .pages import breadcrumbs, repository_page, revision, revision_and_path

#: Most matches the "go to file" search lists.
FIND_LIMIT = 200


@require_safe
@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The repositories this user may read."""
    return render(request, "web/home.html", {"repositories": list(readable_repositories(request.user))})


@require_safe
@repository_page
def repository_home(request: HttpRequest, repository) -> HttpResponse:
    """Streams with heads and ages, recent integrations, open proposals and the README."""
    streams = browse.streams(repository, browse.STREAMS_SHOWN + 1)  # one more: are there more?
    more = len(streams) > browse.STREAMS_SHOWN + 1
    streams = streams[: browse.STREAMS_SHOWN + 1]
    default = next((s for s in streams if s.name == repository.default_stream), None)
    readme = None
    entries = []
    if default is not None and default.head:
        entries = sorted(reads.tree(repository, default.head), key=lambda e: (e["type"] != "dir", e["name"]))
        readme = _readme(repository, default.head, entries)
    integrations = browse.recent_events(repository, [STREAM_INTEGRATE], limit=10)
    open_proposals = list(proposals.list_proposals(repository, state=Proposal.State.OPEN)[:10])
    heads = browse.describe(repository, [s.head for s in streams if s.head])
    context = {
        "repository": repository,
        "streams": [(stream, heads.get(stream.head or "")) for stream in streams],
        "more_streams": more,
        "default": default,
        "entries": entries,
        "readme": readme,
        "integrations": integrations,
        "open_proposals": open_proposals,
    }
    return render(request, "web/repository.html", context)


def _readme(repository, head: str, entries: list[dict]) -> dict | None:
    # Files only: a submodule's commit is another repository's, a link's bytes are a path.
    names = {entry["name"]: entry for entry in entries if entry["mode"] in ("100644", "100755")}
    for candidate in content.README_NAMES:
        entry = names.get(candidate)
        if entry is None:
            continue
        data = browse.read_blob(repository, entry["id"])
        if is_binary(data) or len(data) > content.MAX_README_BYTES:
            return {"name": candidate, "html": None}
        text = data.decode("utf-8", "replace")
        if candidate.lower().endswith((".md", ".markdown")):
            return {"name": candidate, "html": content.markdown_html(text)}
        return {"name": candidate, "text": text}
    return None


@require_safe
@repository_page
def tree(request: HttpRequest, repository, rest: str = "") -> HttpResponse:
    """A directory at a stream or changeset, with breadcrumbs."""
    if not rest:
        return redirect("web:tree", repository.name, repository.default_stream)
    rev, path = revision_and_path(repository, rest)
    entry = browse.entry_at(repository, rev.id, path)
    if entry is None:
        raise Http404(f"no {path!r} at {rev.short}")
    if entry.mode != MODE_TREE:
        return redirect("web:file", repository.name, f"{rev.name}/{path}")
    entries = reads.tree(repository, rev.id, path or None)
    entries.sort(key=lambda e: (e["type"] != "dir", e["name"]))
    # Each entry's link from a prefix, encoded as reverse() encodes it: a {% url %} per entry
    # was 40 % of the page on a root of 560 entries.
    prefixes = {kind: reverse(f"web:{kind}", args=[repository.name, f"{rev.name}/-"])[:-1] for kind in ("tree", "file")}
    for listed in entries:
        kind = "tree" if listed["type"] == "dir" else "file"
        listed["href"] = prefixes[kind] + quote(listed["path"], safe=_URL_SAFE)
    context = {
        "repository": repository,
        "rev": rev,
        "path": path,
        "crumbs": breadcrumbs(path),
        "parent": path.rpartition("/")[0],
        "entries": entries,
        "head": browse.describe(repository, [rev.id])[rev.id],
        "streams": browse.streams(repository),
    }
    return render(request, "web/tree.html", context)


#: What reverse() leaves unquoted in a URL's path (django.urls.resolvers: RFC 3986's
#: sub-delimiters and "/~:@").
_URL_SAFE = "!$&'()*+,;=/~:@"


@require_safe
@repository_page
def file(request: HttpRequest, repository, rest: str) -> HttpResponse:
    """A file: highlighted lines with anchors, or an image, or "binary, N bytes"."""
    rev, path = revision_and_path(repository, rest)
    entry = browse.entry_at(repository, rev.id, path) if path else None
    if entry is None:
        raise Http404(f"no file {path!r} at {rev.short}")
    if entry.mode == MODE_TREE:
        return redirect("web:tree", repository.name, f"{rev.name}/{path}")
    context = {"repository": repository, "rev": rev, "path": path, "crumbs": breadcrumbs(path), "blob": entry.id}
    if entry.mode == MODE_GITLINK:
        # A commit of another repository: named, never read (it is not in this one).
        return render(request, "web/file.html", {**context, "kind": "submodule"})
    data = browse.read_blob(repository, entry.id)
    kind = "symlink" if entry.mode == MODE_SYMLINK else content.classify(path, data)
    context.update(kind=kind, size=len(data), executable=entry.mode == MODE_EXECUTABLE)
    if kind == "symlink":
        target = path_from_bytes(data)  # a path, in the escaped form names are shown in
        context.update(target=target, target_path=_link_target(repository, rev.id, path, target))
    elif kind == "text":
        shown = content.text_lines(path, data, entry.id)
        context.update(lines=shown.lines, table=tables.code_table(shown.lines, shown.highlighted), cut=shown.cut)
    return render(request, "web/file.html", context)


def _link_target(repository, commit_id: str, path: str, target: str) -> str | None:
    """The repository path a symbolic link points at, when it stays inside the repository and
    something is there; None otherwise (an absolute or outside target: shown, not linked)."""
    if target.startswith("/"):
        return None
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if resolved in (".", "") or resolved.startswith("../") or resolved == "..":
        return None
    try:
        found = browse.entry_at(repository, commit_id, browse.check_path(resolved))
    except (NotFound, Invalid):
        return None
    return resolved if found is not None else None


@require_safe
@repository_page
def raw(request: HttpRequest, repository, rest: str) -> HttpResponse:
    """A file's bytes: text as text/plain, images as images, anything else as a download.

    Served from the UI's own origin, so it runs under a sandbox policy: an HTML or SVG file
    opened raw can never run a script with the user's session.
    """
    rev, path = revision_and_path(repository, rest)
    entry = browse.entry_at(repository, rev.id, path) if path else None
    if entry is None or entry.mode == MODE_TREE:
        raise NotFound(f"no file {path!r} at {rev.short}")
    if entry.mode == MODE_GITLINK:
        raise NotFound(f"{path!r} is a submodule at commit {entry.id}: its content is in another repository")
    data = browse.read_blob(repository, entry.id)
    image = content.image_type(path)
    if image:
        media = image
    elif is_binary(data):
        media = "application/octet-stream"
    else:
        media = "text/plain; charset=utf-8"
    response = HttpResponse(data, content_type=media)
    response["Content-Security-Policy"] = "sandbox; default-src 'none'; img-src 'self'"
    name = path.rsplit("/", 1)[-1]
    disposition = "inline" if media.startswith(("text/", "image/")) else "attachment"
    response["Content-Disposition"] = f"{disposition}; filename*=UTF-8''{quote(name, safe='')}"
    return response


@require_safe
@repository_page
def find(request: HttpRequest, repository, rest: str) -> HttpResponse:
    """ "Go to file": every file whose path contains the words typed, at a stream or changeset."""
    rev = revision(repository, rest.strip("/"))
    query = request.GET.get("q", "").strip()
    matches, more = browse.find_files(repository, rev.id, query, FIND_LIMIT) if query else ([], False)
    context = {"repository": repository, "rev": rev, "query": query, "matches": matches, "more": more}
    return render(request, "web/find.html", context)
