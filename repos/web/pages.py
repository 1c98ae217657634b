"""What every repository page shares: the access check, revisions in URLs, and the diff options.

A repository page is ``@repository_page``: an anonymous visitor is sent to log in; a user who may
not read the repository gets the same 404 as for a name nobody uses; service errors become 404
(not found) or 400 (invalid) pages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render

from ..errors import Invalid, NotFound
from ..models import Repository
from ..services import browse
from ..services.access import access_repository
from . import diffs, tables

#: The cookie that remembers the diff layout a user chose (``unified`` or ``split``).
LAYOUT_COOKIE = "diff_layout"
LAYOUTS = ("unified", "split")


def repository_page(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """``view(request, repository, ...)`` for ``/repos/<repo>/...``, with the access rules applied."""

    @wraps(view)
    def page(request: HttpRequest, repo: str, *args, **kwargs) -> HttpResponseBase:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        try:
            repository = access_repository(request.user, repo)
            return view(request, repository, *args, **kwargs)
        except NotFound as error:
            raise Http404(error.message) from None
        except Invalid as error:
            return render(request, "web/error.html", {"message": error.message}, status=400)

    return page


@dataclass(frozen=True)
class Revision:
    """A revision as a page names it: what the URL said (a stream or an id) and the changeset."""

    #: The stream name or changeset id from the URL.
    name: str
    #: The changeset id it resolves to (the permalink).
    id: str

    @property
    def is_stream(self) -> bool:
        return self.name != self.id

    @property
    def short(self) -> str:
        return self.name if self.is_stream else self.id[:12]


def revision(repository: Repository, name: str) -> Revision:
    return Revision(name, browse.resolve(repository, name))


def revision_and_path(repository: Repository, rest: str) -> tuple[Revision, str]:
    """Split ``<rev>/<path>`` (stream names may hold '/'); the path is '' for ``<rev>`` alone."""
    name, path = browse.split_rev_path(repository, rest)
    return revision(repository, name), browse.check_path(path)


def breadcrumbs(path: str) -> list[tuple[str, str]]:
    """``a/b/c`` → ``[("a", "a"), ("b", "a/b"), ("c", "a/b/c")]``: each name with its path."""
    parts = [part for part in path.split("/") if part]
    return [(part, "/".join(parts[: index + 1])) for index, part in enumerate(parts)]


@dataclass(frozen=True)
class DiffOptions:
    layout: str
    ignore_whitespace: bool

    @property
    def split(self) -> bool:
        return self.layout == "split"


def diff_options(request: HttpRequest) -> DiffOptions:
    """The layout (``?layout=``, else the remembered one) and ``?w=1`` (ignore whitespace)."""
    layout = request.GET.get("layout") or request.COOKIES.get(LAYOUT_COOKIE) or "unified"
    return DiffOptions(layout if layout in LAYOUTS else "unified", request.GET.get("w") == "1")


def remember_layout(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """Keep a layout chosen with ``?layout=`` for the next diff the user opens."""
    chosen = request.GET.get("layout")
    if chosen in LAYOUTS and request.COOKIES.get(LAYOUT_COOKIE) != chosen:
        response.set_cookie(LAYOUT_COOKIE, chosen, max_age=365 * 24 * 3600, samesite="Lax", httponly=True)
    return response


def diff_context(request: HttpRequest, repository, old: str | None, new: str) -> dict:
    """What the diff include needs: the files of ``old`` → ``new`` (``?path=``: one file only)."""
    options = diff_options(request)
    changes = browse.changes(repository, old, new)
    only = request.GET.get("path")
    if only:
        changes = [c for c in changes if only in (c.path, diffs.old_path(c))]
    diff = diffs.build(
        changes,
        browse.blob_reader(repository),
        split=options.split,
        ignore_whitespace=options.ignore_whitespace,
        single_file=bool(only),
    )
    return {
        "diff": diff,
        "options": options,
        "only": only,
        "files_html": tables.diff_files(
            diff.files, split=options.split, layout=options.layout, ignore_whitespace=options.ignore_whitespace
        ),
        "tree_html": tables.file_tree(diffs.file_tree(diff.files)) if len(diff.files) > 5 else "",
    }
