"""History: diff, blame and log (API.md, "History")."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from ..services import reads
from ..services.repositories import split_rev_path
from . import serializers as s
from .base import ApiView, repository, required_query


@extend_schema(tags=["history"])
class DiffView(ApiView):
    @extend_schema(
        parameters=[OpenApiParameter("from", str, required=True), OpenApiParameter("to", str, required=True)],
        responses={200: s.DiffSerializer, **s.errors(400, 404)},
    )
    def get(self, request, repo):
        """The changes between two revisions, renames detected, with a unified patch."""
        return Response(reads.diff(repository(repo), required_query(request, "from"), required_query(request, "to")))


@extend_schema(tags=["history"])
class BlameView(ApiView):
    @extend_schema(responses={200: s.BlameSerializer, **s.errors(400, 404)})
    def get(self, request, repo, rev, path):
        """Each line of a file with the changeset that last changed it."""
        found = repository(repo)
        rev, path = split_rev_path(found, f"{rev}/{path}")
        return Response({"path": path, "lines": reads.blame(found, rev, path)})


@extend_schema(tags=["history"])
class LogView(ApiView):
    @extend_schema(
        parameters=[
            OpenApiParameter("rev", str, description="Where the walk starts (default: the default stream)."),
            OpenApiParameter("path", str, description="Only changesets that touch this path."),
            OpenApiParameter("limit", int, description=f"1-{reads.MAX_LOG_LIMIT} (default {reads.DEFAULT_LOG_LIMIT})."),
            OpenApiParameter("cursor", str, description="The previous page's `next` (then `rev` is ignored)."),
        ],
        responses={200: s.LogSerializer, **s.errors(400, 404)},
    )
    def get(self, request, repo):
        """Changesets newest first, a page at a time."""
        params = request.query_params
        return Response(
            reads.log(
                repository(repo),
                params.get("rev") or None,
                params.get("path") or None,
                limit=params.get("limit"),
                cursor=params.get("cursor") or None,
            )
        )
