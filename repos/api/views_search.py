"""Code search (API.md, "Search")."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from ..errors import Invalid
from ..models import Repository
from ..services import search
from ..services.repositories import resolve_rev
from . import cursors, schema
from . import serializers as s
from .base import ApiView, query_number, repository, required_query

_BOOLEAN = {"type": "string", "enum": ["1", "0", "true", "false"]}
_TRUE, _FALSE = ("1", "true"), ("0", "false", "")


def flag(request, name: str) -> bool:
    """A boolean query parameter: 1/true or 0/false (absent: false)."""
    raw = request.query_params.get(name, "")
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise Invalid(f"?{name}= is 1, 0, true or false, not {raw[:100]!r}")


def _flag_parameter(name: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(name, _BOOLEAN, description=description)


@extend_schema(tags=["search"])
class SearchView(ApiView):
    @extend_schema(
        summary="Search code at a revision",
        parameters=[
            OpenApiParameter(
                "q",
                {"type": "string", "minLength": 1},
                required=True,
                description="An RE2 regular expression, matched line by line as `git grep -E` matches.",
            ),
            OpenApiParameter("rev", schema.REVISION, description="Where to search (default: the default stream)."),
            _flag_parameter("fixed", "Take `q` literally (`git grep -F`)."),
            _flag_parameter("ignore_case", "Ignore case (`-i`); `(?i)` in `q` does the same."),
            _flag_parameter("word", "Match whole words only (`-w`)."),
            OpenApiParameter(
                "path", {"type": "string"}, many=True, description="Keep paths matching this glob (repeatable)."
            ),
            OpenApiParameter(
                "exclude", {"type": "string"}, many=True, description="Drop paths matching this glob (repeatable)."
            ),
            OpenApiParameter(
                "context",
                {"type": "integer", "minimum": 0, "maximum": search.MAX_CONTEXT},
                description="Lines before and after each match (default 0).",
            ),
            OpenApiParameter(
                "mode",
                {"type": "string", "enum": list(search.MODES)},
                description="`content` (lines), `files` (files with their counts) or `count` (matching lines).",
            ),
            OpenApiParameter(
                "target",
                {"type": "string", "enum": list(search.TARGETS)},
                description="`paths`: match `q` against file paths instead of content.",
            ),
            OpenApiParameter(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": search.MAX_LIMIT},
                description=f"Lines (or files) a page carries, 1-{search.MAX_LIMIT} (default {search.DEFAULT_LIMIT}).",
            ),
            OpenApiParameter(
                "cursor",
                {"type": "string", "pattern": cursors.SEARCH_PATTERN},
                description="The previous page's `next`, as it is (then `rev` is ignored).",
            ),
        ],
        responses={200: s.SearchSerializer, **s.errors(400, 404)},
    )
    def get(self, request, repo):
        """Lines, files or a count of what matches, at any revision; exact, a page at a time."""
        params = request.query_params
        return Response(
            answer(
                repository(repo),
                required_query(request, "q"),
                cursor=params.get("cursor") or None,
                rev=params.get("rev") or None,
                fixed=flag(request, "fixed"),
                ignore_case=flag(request, "ignore_case"),
                word=flag(request, "word"),
                paths=tuple(params.getlist("path")),
                exclude=tuple(params.getlist("exclude")),
                context=int(query_number(request, "context", 0, low=0, high=search.MAX_CONTEXT, kind=int)),
                mode=params.get("mode") or search.CONTENT,
                target=params.get("target") or "content",
                limit=int(query_number(request, "limit", search.DEFAULT_LIMIT, low=1, high=search.MAX_LIMIT, kind=int)),
            )
        )


def answer(found: Repository, q: str, *, cursor: str | None = None, **options: Any) -> dict:
    """The search's answer with its ``next`` cursor (the REST view's and the MCP tool's)."""
    position = None
    if cursor:
        commit, path, line = cursors.decode_search(cursor)
        position = search.Cursor(resolve_rev(found, commit), path, line)
    found_answer, resume = search.search_code(found, q, cursor=position, **options)
    if "count" not in found_answer:
        found_answer["next"] = resume and cursors.encode_search(resume.commit, resume.path, resume.line)
    return found_answer
