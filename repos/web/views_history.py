"""History: a changeset with its diff, the compare page, blame and the log."""

from __future__ import annotations

import time

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_safe

from engine.objects import MODE_GITLINK, MODE_TREE

from ..errors import Invalid
from ..services import browse, checks, reads
from ..templatetags.web import when
from . import render as content
from . import tables
from .pages import breadcrumbs, diff_context, remember_layout, repository_page, revision, revision_and_path

#: Changesets per log page.
LOG_PAGE = 50
#: Blame colours: this many steps from the oldest changeset of the file to the newest.
AGE_STEPS = 10


@require_safe
@repository_page
def changeset(request: HttpRequest, repository, oid: str) -> HttpResponse:
    """A changeset: message, provenance, parents, its tree's check results, a diffstat, then its
    diff against its first parent."""
    browse.changeset_or_404(repository, oid)
    info = browse.describe(repository, [oid])[oid]
    context = {
        "repository": repository,
        "changeset": info,
        "checks": checks.results_for(repository, info.tree).values(),
        "provenance": sorted((key, _text(value)) for key, value in info.provenance.items()),
        **diff_context(request, repository, info.parents[0] if info.parents else None, oid),
    }
    return remember_layout(request, render(request, "web/changeset.html", context))


def _text(value: object) -> str:
    return value if isinstance(value, str) else repr(value)


@require_safe
@repository_page
def compare(request: HttpRequest, repository, spec: str = "") -> HttpResponse:
    """The diff between any two revisions: ``/compare/FROM..TO`` (the form fills it in)."""
    if not spec:
        first, second = request.GET.get("from", "").strip(), request.GET.get("to", "").strip()
        if first and second:
            return redirect("web:compare", repository.name, f"{first}..{second}")
        streams = browse.streams(repository)
        return render(request, "web/compare.html", {"repository": repository, "streams": streams, "form_only": True})
    old_name, dots, new_name = spec.partition("..")
    if not dots or not old_name or not new_name:
        raise Invalid("compare two revisions as FROM..TO")
    old, new = revision(repository, old_name), revision(repository, new_name)
    context = {
        "repository": repository,
        "old": old,
        "new": new,
        "streams": browse.streams(repository),
        "base": browse.merge_base(repository, old.id, new.id),
        **diff_context(request, repository, old.id, new.id),
    }
    return remember_layout(request, render(request, "web/compare.html", context))


@require_safe
@repository_page
def blame(request: HttpRequest, repository, rest: str) -> HttpResponse:
    """Each hunk of lines with the changeset that wrote it, its author and age, coloured by age."""
    rev, path = revision_and_path(repository, rest)
    entry = browse.entry_at(repository, rev.id, path) if path else None
    if entry is None or entry.mode == MODE_TREE:
        raise Http404(f"no file {path!r} at {rev.short}")
    context = {"repository": repository, "rev": rev, "path": path, "crumbs": breadcrumbs(path), "blob": entry.id}
    if entry.mode == MODE_GITLINK:  # a commit of another repository: nothing here to read
        return render(request, "web/blame.html", {**context, "kind": "submodule"})
    data = browse.read_blob(repository, entry.id)
    kind = content.classify(path, data)
    context["kind"] = kind
    if kind != "text":
        context["size"] = len(data)
        return render(request, "web/blame.html", context)
    lines = browse.blame(repository, rev.id, path)
    shown = content.text_lines(path, data, entry.id)  # the file's lines, highlighted as its page shows them
    infos = browse.describe(repository, [line["changeset"] for line in lines])
    oldest = min((info.time for info in infos.values()), default=0)
    newest = max((info.time for info in infos.values()), default=0)
    span = newest - oldest
    hunks: list[dict] = []
    parent_has: dict[tuple[str, str], bool] = {}
    for line in lines:
        if not hunks or hunks[-1]["info"].id != line["changeset"] or hunks[-1]["path"] != line["path"]:
            info = infos[line["changeset"]]
            # One moment for all (a file written once): everything is as new as it gets.
            age = round((AGE_STEPS - 1) * (info.time - oldest) / span) if span else AGE_STEPS - 1
            # The path the lines had in that changeset (older than a rename, the old one), and
            # "blame the parent" only where the parent has a file there: the changeset that
            # renamed the file wrote its lines at a path its parent lacks.
            key = (info.parents[0], line["path"]) if info.parents else None
            if key is not None and key not in parent_has:
                parent_has[key] = browse.entry_at(repository, *key) is not None
            parent = info.parents[0] if key is not None and parent_has[key] else None
            hunks.append(
                {"info": info, "age": age, "first": line["number"], "path": line["path"], "parent": parent, "lines": []}
            )
        hunks[-1]["lines"].append((line["number"], shown.lines[line["number"] - 1]))
    context.update(
        hunks=hunks,
        table=tables.blame_table(
            hunks,
            changeset_url=reverse("web:changeset", args=[repository.name, "-"])[:-1],
            blame_url=reverse("web:blame", args=[repository.name, "-"])[:-1],
            when=when,
            highlighted=shown.highlighted,
        ),
        legend=list(range(AGE_STEPS)),
        oldest=oldest,
        newest=newest,
        now=int(time.time()),
    )
    return render(request, "web/blame.html", context)


@require_safe
@repository_page
def log(request: HttpRequest, repository, rest: str = "") -> HttpResponse:
    """The changesets of a stream (or from a changeset), of one path with ``?path=``, a page at a time."""
    rev = revision(repository, rest.strip("/") or repository.default_stream)
    path = browse.check_path(request.GET.get("path", "").strip().strip("/"))
    cursor = request.GET.get("cursor") or None
    page = reads.log(repository, rev.id, path or None, limit=LOG_PAGE, cursor=cursor)
    ids = [item["id"] for item in page["changesets"]]
    infos = browse.describe(repository, ids)
    offset = int(cursor.rpartition("+")[2]) if cursor else 0
    results = checks.results_for_trees(repository, (info.tree for info in infos.values()))
    context = {
        "repository": repository,
        "rev": rev,
        "path": path,
        "crumbs": breadcrumbs(path),
        # Each changeset with the check results of its tree (one query for the page).
        "changesets": [(infos[oid], results.get(infos[oid].tree, [])) for oid in ids],
        "next": page["next"],
        "first": offset + 1,
        "last": offset + len(ids),
        "paged": bool(cursor),
        # Prefixes, not {% url %} per row: reversing costs more than the rest of a row.
        "changeset_url": reverse("web:changeset", args=[repository.name, "-"])[:-1],
        "tree_url": reverse("web:tree", args=[repository.name, "-"])[:-1],
    }
    return render(request, "web/log.html", context)
