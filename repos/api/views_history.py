"""History: diff, blame and log (API.md, "History")."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from ..services import reads
from ..services.repositories import split_rev_path
from . import cursors, schema
from . import serializers as s
from .base import ApiView, repository, required_query
from .schema import FILE_PATH, REV


@extend_schema(tags=["history"])
class DiffView(ApiView):
    @extend_schema(
        summary="Diff two revisions",
        parameters=[
            OpenApiParameter("from", schema.REVISION, required=True, description="The old side: a revision."),
            OpenApiParameter("to", schema.REVISION, required=True, description="The new side: a revision."),
        ],
        responses={200: s.DiffSerializer, **s.errors(400, 404)},
    )
    def get(self, request, repo):
        """The changes between two revisions, renames detected, with a unified patch."""
        return Response(reads.diff(repository(repo), required_query(request, "from"), required_query(request, "to")))


@extend_schema(tags=["history"])
class BlameView(ApiView):
    @extend_schema(
        summary="Blame a file", parameters=[REV, FILE_PATH], responses={200: s.BlameSerializer, **s.errors(400, 404)}
    )
    def get(self, request, repo, rev, path):
        """Each line of a file with the changeset that last changed it."""
        found = repository(repo)
        rev, path = split_rev_path(found, f"{rev}/{path}")
        return Response({"path": path, "lines": reads.blame(found, rev, path)})


@extend_schema(tags=["history"])
class LogView(ApiView):
    @extend_schema(
        summary="List changesets (the log)",
        parameters=[
            OpenApiParameter(
                "rev", schema.REVISION, description="Where the walk starts (default: the default stream)."
            ),
            OpenApiParameter("path", schema.READ_PATH, description="Only changesets that touch this path."),
            OpenApiParameter(
                "limit",
                {"type": "integer", "minimum": 1, "maximum": reads.MAX_LOG_LIMIT},
                description=f"1-{reads.MAX_LOG_LIMIT} (default {reads.DEFAULT_LOG_LIMIT}).",
            ),
            OpenApiParameter(
                "cursor",
                {"type": "string", "pattern": cursors.LOG_PATTERN},
                description="The previous page's `next`, as it is (then `rev` is ignored).",
            ),
        ],
        responses={200: s.LogSerializer, **s.errors(400, 404)},
    )
    def get(self, request, repo):
        """Changesets newest first, a page at a time."""
        params = request.query_params
        cursor = params.get("cursor")
        answer = reads.log(
            repository(repo),
            params.get("rev") or None,
            params.get("path") or None,
            limit=params.get("limit"),
            cursor=cursors.decode_log(cursor) if cursor else None,
        )
        return Response({**answer, "next": answer["next"] and cursors.encode_log(answer["next"])})
