"""What the API answers, as DRF serializers: they shape the JSON and document it in the schema.

Request bodies are validated by the services (their messages and ``details`` are the contract);
the request serializers here only document them for the OpenAPI schema.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema_field, inline_serializer
from rest_framework import serializers

from ..errors import ERRORS

# --- answers -------------------------------------------------------------------------------


class RepositorySerializer(serializers.Serializer):
    name = serializers.CharField()
    default_stream = serializers.CharField()
    object_format = serializers.CharField()
    created = serializers.DateTimeField()


class RepositoryListSerializer(serializers.Serializer):
    repos = RepositorySerializer(many=True)
    next = serializers.CharField(allow_null=True, help_text="Pass as ?cursor= for the next page; null on the last.")


class StreamSerializer(serializers.Serializer):
    name = serializers.CharField()
    head = serializers.CharField(allow_null=True, help_text="The stream's changeset; null while empty.")
    updated = serializers.DateTimeField()


class StreamListSerializer(serializers.Serializer):
    streams = StreamSerializer(many=True)
    next = serializers.CharField(allow_null=True)


class BlobIdSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The git blob id (SHA-1 of the blob object).")
    created = serializers.BooleanField(help_text="False when the blob was stored already.")


class BlobIdsSerializer(serializers.Serializer):
    ids = serializers.ListField(child=serializers.CharField(), help_text="In the order of the request's blobs.")


class ChangesetSerializer(serializers.Serializer):
    id = serializers.CharField(source="commit_id")
    parents = serializers.ListField(child=serializers.CharField())
    tree = serializers.CharField()
    message = serializers.CharField(allow_blank=True)
    operations = serializers.ListField(
        child=serializers.DictField(),
        help_text="As written, normalized (blob ids for inline contents); empty for merges.",
    )
    provenance = serializers.DictField()
    created = serializers.DateTimeField(
        allow_null=True, help_text="Null for changesets the server did not record (merges, pushes)."
    )


class ConflictSerializer(serializers.Serializer):
    path = serializers.CharField()
    kind = serializers.CharField(
        help_text="content, rename/rename, rename/delete, modify/delete, add/add, mode, binary, file/directory"
    )
    old_path = serializers.CharField(required=False)


class ProposalSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    stream = serializers.CharField(source="stream.name")
    head = serializers.CharField()
    title = serializers.CharField(allow_blank=True)
    state = serializers.ChoiceField(choices=["open", "integrated", "conflicted", "closed"])
    outcome = serializers.SerializerMethodField()
    changeset = serializers.SerializerMethodField()
    stream_head = serializers.SerializerMethodField()
    conflicts = ConflictSerializer(many=True)
    author = serializers.SerializerMethodField()
    created = serializers.DateTimeField()
    updated = serializers.DateTimeField()

    @extend_schema_field(OpenApiTypes.STR)
    def get_outcome(self, proposal) -> str | None:
        return proposal.outcome or None

    @extend_schema_field(OpenApiTypes.STR)
    def get_changeset(self, proposal) -> str | None:
        return proposal.result_changeset or None

    @extend_schema_field(OpenApiTypes.STR)
    def get_stream_head(self, proposal) -> str | None:
        return proposal.result_head or None

    @extend_schema_field(OpenApiTypes.STR)
    def get_author(self, proposal) -> str | None:
        credential = proposal.author
        return credential.user.get_username() if credential is not None else None


class ProposalListSerializer(serializers.Serializer):
    proposals = ProposalSerializer(many=True)
    next = serializers.CharField(allow_null=True)


class OutcomeSerializer(serializers.Serializer):
    outcome = serializers.ChoiceField(choices=["fast_forward", "merge", "conflict", "already_integrated"])
    changeset = serializers.CharField(allow_null=True, help_text="The changeset the stream moved to; null on conflict.")
    stream_head = serializers.CharField(allow_null=True, help_text="The head afterwards (unchanged on conflict).")
    conflicts = ConflictSerializer(many=True)
    resolved = serializers.ListField(
        child=inline_serializer("ResolvedByRule", {"path": serializers.CharField(), "rule": serializers.CharField()}),
        help_text="Paths a resolver rule merged (union, ours, theirs); never silently.",
    )
    package = serializers.CharField(required=False, help_text="On conflict: the URL of the conflict package.")
    resolution = serializers.CharField(
        required=False, help_text="After a resolve call: the merge changeset built from the resolutions."
    )
    operation = serializers.IntegerField()
    proposal = serializers.IntegerField()


class OperationQueuedSerializer(serializers.Serializer):
    operation = serializers.IntegerField(help_text="Poll GET .../operations/{id}.")
    state = serializers.ChoiceField(choices=["queued"])


class OperationSerializer(serializers.Serializer):
    """An integration operation; ``outcome`` only when done, ``error`` only when failed."""

    id = serializers.IntegerField()
    state = serializers.ChoiceField(choices=["queued", "done", "failed"])
    proposal = serializers.IntegerField(source="proposal_id")
    stream = serializers.CharField(source="stream.name")
    attempts = serializers.IntegerField()
    created = serializers.DateTimeField()
    finished = serializers.DateTimeField(allow_null=True)
    outcome = OutcomeSerializer(required=False)
    error = serializers.DictField(required=False)

    def to_representation(self, operation) -> dict:
        data = super().to_representation(operation)
        # As recorded (the integrate endpoint's very answer), and only when there is one.
        for optional in ("outcome", "error"):
            data.pop(optional, None)
            if getattr(operation, optional) is not None:
                data[optional] = getattr(operation, optional)
        return data


class TreeEntrySerializer(serializers.Serializer):
    name = serializers.CharField()
    path = serializers.CharField()
    type = serializers.ChoiceField(choices=["file", "dir"])
    id = serializers.CharField()
    mode = serializers.CharField()


class TreeSerializer(serializers.Serializer):
    path = serializers.CharField(allow_blank=True)
    entries = TreeEntrySerializer(many=True)


class ChangeSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["added", "modified", "deleted", "renamed"])
    path = serializers.CharField()
    old_path = serializers.CharField(required=False)
    similarity = serializers.IntegerField(required=False, help_text="Percent, for renames.")


class DiffSerializer(serializers.Serializer):
    changes = ChangeSerializer(many=True)
    patch = serializers.CharField(allow_blank=True, help_text="Unified diff, git style.")


class BlameLineSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    changeset = serializers.CharField()
    text = serializers.CharField(allow_blank=True)


class BlameSerializer(serializers.Serializer):
    path = serializers.CharField()
    lines = BlameLineSerializer(many=True)


class LogEntrySerializer(serializers.Serializer):
    id = serializers.CharField()
    message = serializers.CharField(allow_blank=True)
    parents = serializers.ListField(child=serializers.CharField())
    author = inline_serializer("LogAuthor", {"name": serializers.CharField(), "email": serializers.CharField()})
    time = serializers.IntegerField(help_text="Committer time, seconds since the epoch.")


class LogSerializer(serializers.Serializer):
    changesets = LogEntrySerializer(many=True)
    next = serializers.CharField(allow_null=True, help_text="Pass as ?cursor= for the next page; null on the last.")


class ErrorBodySerializer(serializers.Serializer):
    code = serializers.ChoiceField(choices=list(ERRORS))  # the error table's codes (repos/errors.py)
    message = serializers.CharField()
    retryable = serializers.BooleanField()
    details = serializers.ListField(child=serializers.DictField(), required=False)
    retry_after_ms = serializers.IntegerField(required=False)


class ErrorSerializer(serializers.Serializer):
    error = ErrorBodySerializer()


# --- request bodies (documentation only) ---------------------------------------------------

RepositoryCreate = inline_serializer("RepositoryCreate", {"name": serializers.CharField()})

StreamCreate = inline_serializer(
    "StreamCreate",
    {
        "name": serializers.CharField(help_text="Segments of [A-Za-z0-9._-] separated by '/'."),
        "from": serializers.CharField(required=False, allow_null=True, help_text="A revision; omitted or null: empty."),
    },
)

BlobBatch = inline_serializer(
    "BlobBatch",
    {
        "blobs": serializers.ListField(
            child=inline_serializer(
                "BlobBatchItem",
                {
                    "data": serializers.CharField(help_text="The blob's bytes, base64 (standard alphabet)."),
                    "id": serializers.CharField(required=False, help_text="If given, the bytes must hash to it."),
                },
            )
        )
    },
)

ChangesetOperation = inline_serializer(
    "ChangesetOperation",
    {
        "op": serializers.ChoiceField(choices=["write", "delete", "rename"]),
        "path": serializers.CharField(required=False, help_text="write, delete"),
        "blob": serializers.CharField(required=False, help_text="write: an uploaded blob id …"),
        "content": serializers.CharField(required=False, help_text="write: … or inline UTF-8 text"),
        "mode": serializers.ChoiceField(choices=["100644", "100755", "120000"], required=False),
        "from": serializers.CharField(required=False, help_text="rename"),
        "to": serializers.CharField(required=False, help_text="rename"),
    },
)

ChangesetCreate = inline_serializer(
    "ChangesetCreate",
    {
        "parent": serializers.CharField(
            required=False, allow_null=True, help_text="A revision, or null for a root changeset."
        ),
        "parents": serializers.ListField(
            child=serializers.CharField(),
            required=False,
            help_text="Instead of parent: several revisions (a merge); the operations apply to the first.",
        ),
        "message": serializers.CharField(required=False, allow_blank=True),
        "operations": serializers.ListField(child=ChangesetOperation),
        "provenance": serializers.DictField(required=False, help_text='{"agent", "task", …}'),
    },
)

ProposalCreate = inline_serializer(
    "ProposalCreate",
    {
        "stream": serializers.CharField(),
        "head": serializers.CharField(help_text="A revision: the changeset to land."),
        "title": serializers.CharField(required=False, allow_blank=True),
    },
)

EmptyBody = inline_serializer("IntegrateRequest", {})

# --- shared schema helpers -----------------------------------------------------------------

#: What a client should know about a code beyond the table's status and retryable flag.
_HINTS = {"rate_limited": "`retry_after_ms` and `Retry-After` say when"}


def _error_text(status: int) -> str:
    """The codes answered with ``status``, from the error table: ``aborted (retryable)``, …"""
    texts = []
    for code, cls in ERRORS.items():
        if cls.status == status:
            notes = ["retryable"] * cls.retryable + ([_HINTS[code]] if code in _HINTS else [])
            texts.append(f"{code} ({'; '.join(notes)})" if notes else code)
    return " or ".join(texts)


def errors(*statuses: int) -> dict:
    """Schema responses for the given error statuses (401, 403, 429 and 503 are added: every call
    is scoped, rate-limited and may be shed when the server is saturated)."""
    return {
        status: OpenApiResponse(ErrorSerializer, description=_error_text(status))
        for status in sorted({401, 403, 429, 503, *statuses})
    }


BINARY = {(200, "application/octet-stream"): OpenApiTypes.BINARY}
