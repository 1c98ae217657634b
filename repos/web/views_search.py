"""The search box of every repository page and its results: code search at a revision (the REST
search's service), each line linking to the file at that line, what matched marked."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from ..errors import Invalid
from ..services import search
from .pages import repository_page

#: Lines a results page shows.
PAGE_LINES = 100


@require_safe
@repository_page
def search_page(request: HttpRequest, repository) -> HttpResponse:
    """``?q=`` at ``?rev=`` (default: the default stream), ``i``/``w``/``F`` as git grep's flags,
    ``path`` a glob, a page at a time (``?after=`` the previous page's position)."""
    params = request.GET
    query = params.get("q", "")
    rev = params.get("rev") or repository.default_stream
    options: dict[str, bool] = {
        "fixed": params.get("F") == "1",
        "ignore_case": params.get("i") == "1",
        "word": params.get("w") == "1",
    }
    paths = tuple(p for p in params.getlist("path") if p)
    context = {"repository": repository, "query": query, "rev": rev, "paths": " ".join(paths), **options}
    if not query:
        return render(request, "web/search.html", context)
    cursor = None
    if params.get("at") and params.get("after") is not None:
        after, _, line = params["after"].rpartition(":")
        cursor = search.Cursor(search.resolve_rev(repository, params["at"]), after or None, int(line or 0))
    try:
        answer, resume = search.search_code(
            repository,
            query,
            rev=rev,
            paths=paths,
            limit=PAGE_LINES,
            cursor=cursor,
            fixed=options["fixed"],
            ignore_case=options["ignore_case"],
            word=options["word"],
        )
    except Invalid as error:
        context["error"] = error.message
        return render(request, "web/search.html", context, status=400)
    files: list[dict] = []
    for match in answer["matches"]:
        if not files or files[-1]["path"] != match["path"]:
            files.append({"path": match["path"], "binary": match.get("binary", False), "lines": []})
        if "line" in match:
            pieces = search.highlight(query, match["text"], fixed=options["fixed"], ignore_case=options["ignore_case"])
            files[-1]["lines"].append({"number": match["line"], "pieces": pieces})
    context.update(
        commit=answer["rev"],
        files=files,
        truncated=answer["truncated"],
        next_after=f"{resume.path or ''}:{resume.line}" if resume is not None else None,
    )
    return render(request, "web/search.html", context)
