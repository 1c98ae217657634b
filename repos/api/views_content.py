"""Content: blobs (raw, by id, in batch), changesets, trees and files (API.md, "Content")."""

from __future__ import annotations

import base64
import binascii

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.response import Response

from ..errors import Invalid, NotFound
from ..services import content, reads
from ..services.repositories import split_rev_path
from . import schema
from . import serializers as s
from .base import ApiView, read_body, repository, validated
from .idempotency import IDEMPOTENCY_KEY, created
from .schema import BLOB_ID, FILE_PATH, REV

RAW_BODY = {"application/octet-stream": OpenApiTypes.BINARY}
OCTET_STREAM = "application/octet-stream"


def raw_response(data: bytes, etag: str | None = None) -> HttpResponse:
    response = HttpResponse(data, content_type=OCTET_STREAM)
    if etag:
        response["ETag"] = f'"{etag}"'
    return response


@extend_schema(tags=["content"])
class BlobsView(ApiView):
    @extend_schema(summary="Upload a blob", request=RAW_BODY, responses={201: s.BlobIdSerializer, **s.errors(404, 413)})
    def post(self, request, repo):
        """Store the body's bytes as a blob; answers its id."""
        oid, created = content.upload_blob(repository(repo), read_body(request))
        return Response({"id": oid, "created": created}, status=201)


@extend_schema(tags=["content"])
class BlobBatchView(ApiView):
    @extend_schema(
        summary="Upload blobs in a batch",
        request=s.BlobBatch,
        responses={201: s.BlobIdsSerializer, **s.errors(400, 404, 413)},
    )
    def post(self, request, repo):
        """Store several blobs at once (one pack, one fsync); all or nothing. 400 ``invalid``
        (with the index of each in ``details``) when some bytes do not hash to their ``id``."""
        blobs = decode_batch(validated(s.BlobBatch, request)["blobs"])
        return Response({"ids": content.upload_blobs(repository(repo), blobs)}, status=201)


def decode_batch(raw: object) -> list[bytes]:
    """The batch's contents, each checked against its ``id`` when given; Invalid with ``details``."""
    if not isinstance(raw, list):
        raise Invalid('blobs must be a list of {"data": base64, "id"?: blob id}')
    contents: list[bytes] = []
    problems: list[dict] = []
    for index, item in enumerate(raw):
        try:
            contents.append(_decode_item(item))
        except Invalid as error:
            problems.append({"index": index, "code": "invalid", "message": error.message})
    if problems:
        raise Invalid(f"{len(problems)} malformed blob(s); the first: {problems[0]['message']}", details=problems)
    return contents


def _decode_item(item: object) -> bytes:
    if not isinstance(item, dict) or not isinstance(item.get("data"), str):
        raise Invalid('a blob is {"data": base64, "id"?: blob id}')
    try:
        data = base64.b64decode(item["data"], validate=True)
    except (binascii.Error, ValueError):
        raise Invalid("data is not valid base64") from None
    expected = item.get("id")
    if expected is not None and expected != content.blob_id(data):
        raise Invalid(f"the bytes hash to {content.blob_id(data)}, not {expected}")
    return data


@extend_schema(tags=["content"])
class BlobView(ApiView):
    @extend_schema(summary="Download a blob", parameters=[BLOB_ID], responses={**s.BINARY, **s.errors(400, 404)})
    def get(self, request, repo, blob_id):
        """The blob's raw bytes."""
        return raw_response(content.read_blob(repository(repo), blob_id), etag=blob_id)

    @extend_schema(
        summary="Check that a blob exists",
        parameters=[BLOB_ID],
        responses={200: OpenApiResponse(description="The blob exists."), **s.errors(400, 404)},
    )
    def head(self, request, repo, blob_id):
        """Whether the blob exists (200) or not (404), without its bytes."""
        if not content.has_blob(repository(repo), blob_id):
            raise NotFound(f"no blob {blob_id} in {repo}")
        return HttpResponse(content_type=OCTET_STREAM)

    @extend_schema(
        summary="Upload a blob under its id",
        parameters=[BLOB_ID],
        request=RAW_BODY,
        responses={
            201: OpenApiResponse(s.BlobIdSerializer, description="Stored."),
            200: OpenApiResponse(s.BlobIdSerializer, description="Stored already."),
            **s.errors(400, 404, 413),
        },
    )
    def put(self, request, repo, blob_id):
        """Store the body as the blob ``id``: 400 ``invalid`` unless the bytes hash to it."""
        oid, created = content.upload_blob(repository(repo), read_body(request), expected_id=blob_id)
        return Response({"id": oid, "created": created}, status=201 if created else 200)


@extend_schema(tags=["content"])
class ChangesetsView(ApiView):
    @extend_schema(
        summary="Write a changeset",
        request=s.ChangesetCreate,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: s.ChangesetSerializer, **s.errors(400, 404, 413)},
    )
    def post(self, request, repo):
        """Write a changeset from a parent (null: a root changeset; ``parents``: a merge) and operations; nothing is
        written if anything is refused. Beyond the schema, 400 ``invalid`` (with ``details``) when
        a blob is missing, a write names both or neither of ``blob`` and ``content``, or the
        operations contradict each other or the parent's tree; 404 when the parent is unknown."""
        body = validated(s.ChangesetCreate, request)

        def write() -> dict:
            changeset = content.create_changeset(
                repository(repo),
                parent=content.parents_of(body),
                operations=body["operations"],
                message=body.get("message", ""),
                provenance={} if body.get("provenance") is None else body["provenance"],
                credential=request.auth,
            )
            return s.represent(s.ChangesetSerializer, changeset)

        return created(request, write)


@extend_schema(tags=["content"])
class ChangesetView(ApiView):
    @extend_schema(
        summary="Get a changeset",
        parameters=[OpenApiParameter("changeset_id", schema.OBJECT_ID, location=OpenApiParameter.PATH)],
        responses={200: s.ChangesetSerializer, **s.errors(400, 404)},
    )
    def get(self, request, repo, changeset_id):
        """The changeset: parents, tree, message, and for those written here the operations and provenance."""
        return Response(self.read(repo, changeset_id))

    @staticmethod
    def read(repo, changeset_id):
        return s.represent(s.ChangesetSerializer, content.get_changeset(repository(repo), changeset_id))


@extend_schema(tags=["content"])
class TreeView(ApiView):
    @extend_schema(
        summary="List a directory",
        parameters=[
            REV,
            OpenApiParameter("path", schema.READ_PATH, description="A directory; the root when omitted."),
        ],
        responses={200: s.TreeSerializer, **s.errors(400, 404)},
    )
    def get(self, request, repo, rev):
        """The entries of a directory at a revision."""
        return Response(self.read(repo, rev, request.query_params.get("path") or ""))

    @staticmethod
    def read(repo, rev, path=""):
        # The root, asked with no query, is answered by the hot-read lane (repos/api/hot.py).
        return {"path": path, "entries": reads.tree(repository(repo), rev, path)}


@extend_schema(tags=["content"])
class FileView(ApiView):
    @extend_schema(summary="Download a file", parameters=[REV, FILE_PATH], responses={**s.BINARY, **s.errors(400, 404)})
    def get(self, request, repo, rev, path):
        """The raw bytes of a file at a revision (a stream name may contain '/')."""
        found = repository(repo)
        rev, path = split_rev_path(found, f"{rev}/{path}")
        return raw_response(reads.read_file(found, rev, path))
