"""The API's JSON as DRF serializers: answers are shaped by them, request bodies are checked by
them, and both are documented from them in the OpenAPI schema, so the two cannot drift apart.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping

from django.core.validators import ProhibitNullCharactersValidator
from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, PolymorphicProxySerializer, extend_schema_field, inline_serializer
from rest_framework import serializers

from ..errors import ERRORS
from ..models import Credential
from ..services.credentials import MAX_PATTERNS
from . import schema

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


def represent(serializer: type[serializers.Serializer], instance: object) -> dict:
    """``serializer(instance).data``, from one instance of ``serializer`` shared by every request.

    DRF copies and binds a serializer's declared fields for each instance it makes: 139 us for
    a stream's three fields and 0.58 ms for a changeset, against 14 us and 0.06 ms to represent
    them from bound ones. Representing keeps nothing on the serializer when its fields, and its
    ``get_*`` methods, read only the instance (no ``context``: every answer serializer here), so
    each is made once; the result is the same dict (``.data`` only wraps it).
    """
    return _shared(serializer).to_representation(instance)


def check(body: type[serializers.Serializer], data: object) -> dict:
    """``body(data=data)``'s validated data, or its ``ValidationError`` (the same details
    ``is_valid`` gives), from the shared instance: validating, too, keeps nothing on a
    serializer of plain fields whose ``validate`` methods read only their arguments (every
    :class:`Body`). A new one per request body was 0.3-0.6 ms of a write's CPU, its field copies."""
    return _shared(body).run_validation(data)


@functools.cache
def _shared(serializer: type[serializers.Serializer]) -> serializers.Serializer:
    made = serializer()
    made.fields  # noqa: B018  (bound now, before requests share it)
    return made


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


#: The schema of a text answer that may be null.
NULLABLE_TEXT = serializers.CharField(allow_null=True)


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
    decision = serializers.JSONField(
        allow_null=True,
        help_text="Once integrated on a repository with a policy: the decision it landed by "
        "(`allowed`, `policy_version`, `requirements`, `approvals`, `owners`, `bypass`).",
    )
    created = serializers.DateTimeField()
    updated = serializers.DateTimeField()

    @extend_schema_field(NULLABLE_TEXT)
    def get_outcome(self, proposal) -> str | None:
        return proposal.outcome or None

    @extend_schema_field(NULLABLE_TEXT)
    def get_changeset(self, proposal) -> str | None:
        return proposal.result_changeset or None

    @extend_schema_field(NULLABLE_TEXT)
    def get_stream_head(self, proposal) -> str | None:
        return proposal.result_head or None

    @extend_schema_field(NULLABLE_TEXT)
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
    outcome = OutcomeSerializer(required=False, source="outcome_document")
    error = serializers.DictField(required=False)

    def to_representation(self, operation) -> dict:
        data = super().to_representation(operation)
        # As recorded (the integrate endpoint's very answer), and only when there is one.
        for optional, recorded in (("outcome", operation.outcome_document()), ("error", operation.error)):
            data.pop(optional, None)
            if recorded is not None:
                data[optional] = recorded
        return data


class TreeEntrySerializer(serializers.Serializer):
    name = serializers.CharField()
    path = serializers.CharField()
    type = serializers.ChoiceField(choices=["file", "dir", "submodule"])
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
    path = serializers.CharField(
        help_text="The file's path in that changeset: an older path where the file was renamed since "
        "(git blame's filename; blame follows whole-file renames as git blame does)."
    )


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
    proposal = serializers.IntegerField(
        required=False, help_text="`policy_denied` on `/land`, integrate and resolve: the proposal that stays open."
    )
    policy_version = serializers.IntegerField(required=False, help_text="`policy_denied`: the policy judged by.")


class ErrorSerializer(serializers.Serializer):
    error = ErrorBodySerializer()


# --- request bodies ------------------------------------------------------------------------
# They validate what the schema says (types, required fields, patterns, lengths, no unknown
# fields) and document it; the services then check what a schema cannot say (that a blob
# exists, that operations agree, that a name is free).


class Text(serializers.CharField):
    """A JSON string as it was sent: a number is not turned into text and nothing is trimmed.

    NUL is not refused here: inline content may hold it, and paths and names are refused by
    their patterns.
    """

    default_error_messages = {"invalid": "Not a string."}

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        self.validators = [v for v in self.validators if not isinstance(v, ProhibitNullCharactersValidator)]

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class Choice(serializers.ChoiceField):
    """One of the given strings, and only a string (DRF would take the number 100644 for "100644")."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid_choice", input=data)
        return super().to_internal_value(data)


class Patterned(Text):
    """A string the schema describes as ``schema`` (repos/api/schema.py), checked the same way."""

    def __init__(self, schema: dict, **kwargs) -> None:
        kwargs.setdefault("help_text", schema.get("description"))
        super().__init__(**kwargs)
        self.schema = schema
        self._whole = re.compile(schema["pattern"].replace("$", r"\Z")) if "pattern" in schema else None
        forbidden = schema.get("not", {}).get("pattern")
        self._forbidden = re.compile(forbidden.replace("$", r"\Z")) if forbidden else None

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        fits = self._whole is None or self._whole.match(value)
        if not fits or (self._forbidden is not None and self._forbidden.search(value)):
            raise serializers.ValidationError(f"not valid: {self.schema['description']}")
        return value


class PatternedExtension(OpenApiSerializerFieldExtension):
    """A :class:`Patterned` field's schema is its ``schema``, nullable if it allows null."""

    target_class = Patterned
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction):
        field = self.target
        described = {**field.schema, "description": field.help_text or field.schema.get("description", "")}
        return {**described, "nullable": True} if field.allow_null else described


class Body(serializers.Serializer):
    """A request body: exactly the declared fields (``additionalProperties: false``); a field
    not declared is refused with 400 ``invalid`` naming it."""

    #: Fields clients send by mistake, and what to do instead.
    hints: dict[str, str] = {}

    def to_internal_value(self, data):
        errors: dict = {}
        if isinstance(data, Mapping):
            for name in sorted(set(data) - set(self.fields)):
                errors[name] = [self.hints.get(name, "unknown field")]
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as error:
            if not isinstance(error.detail, dict):
                raise
            errors = {**error.detail, **errors}
        if errors:
            raise serializers.ValidationError(errors)
        return value


class BodyExtension(OpenApiSerializerExtension):
    target_class = Body
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        return {**schema, "additionalProperties": False}


class RepositoryCreate(Body):
    """A new repository."""

    name = Patterned(schema.REPOSITORY_NAME)


class StreamCreate(Body):
    """A new stream, empty or at a revision."""

    name = Patterned(schema.STREAM_NAME)
    # "from" is a Python keyword: declared below.


StreamCreate._declared_fields["from"] = Patterned(
    schema.REVISION, required=False, allow_null=True, help_text="A revision; omitted or null: the stream starts empty."
)


class BlobBatchItem(Body):
    """One blob of a batch."""

    data = Patterned(  # type: ignore[assignment]  # the metaclass takes fields out of the class
        schema.BASE64, allow_blank=True, help_text="The blob's bytes, base64 (standard alphabet)."
    )
    id = Patterned(schema.OBJECT_ID, required=False, help_text="If given, the bytes must hash to it (else 400).")


class BlobBatch(Body):
    """Blobs to store at once."""

    blobs = serializers.ListField(child=BlobBatchItem())


class WriteOperation(Body):
    """Write a file: from an uploaded blob or from inline text (exactly one of the two)."""

    op = Choice(choices=["write"])
    path = Patterned(schema.REPOSITORY_PATH)
    blob = Patterned(schema.OBJECT_ID, required=False, help_text="An uploaded blob's id, or else `content`.")
    content = Text(required=False, allow_blank=True, help_text="Inline UTF-8 text, or else `blob`.")
    mode = Choice(choices=["100644", "100755", "120000"], required=False, help_text="Default 100644.")


class DeleteOperation(Body):
    """Delete a file."""

    op = Choice(choices=["delete"])
    path = Patterned(schema.REPOSITORY_PATH)


class RenameOperation(Body):
    """Move a file from one path to another."""

    op = Choice(choices=["rename"])


RenameOperation._declared_fields["from"] = Patterned(schema.REPOSITORY_PATH)
RenameOperation._declared_fields["to"] = Patterned(schema.REPOSITORY_PATH)

OPERATIONS: dict[str, type[Body]] = {
    "write": WriteOperation,
    "delete": DeleteOperation,
    "rename": RenameOperation,
}
_BY_OP: dict[str, serializers.Serializer | type[serializers.Serializer]] = dict(OPERATIONS)  # the schema's mapping
#: One instance of each, shared: a serializer copies its fields when it is made, which costs
#: more than checking an operation, and checking leaves nothing behind on the instance.
_OPERATION_CHECKS = {kind: body() for kind, body in OPERATIONS.items()}


@extend_schema_field(
    PolymorphicProxySerializer(component_name="ChangesetOperation", serializers=_BY_OP, resource_type_field_name="op")
)
class OperationField(serializers.Field):
    """One changeset operation, checked by the serializer its ``op`` names."""

    default_error_messages = {"invalid": "An operation is an object."}

    def to_internal_value(self, data):
        if not isinstance(data, Mapping):
            self.fail("invalid")
        kind = data.get("op")
        body = _OPERATION_CHECKS.get(kind) if isinstance(kind, str) else None
        if body is None:
            raise serializers.ValidationError({"op": [f"unknown op {kind!r}: use write, delete or rename"]})
        return dict(body.run_validation(data))

    def to_representation(self, value):
        return value


class ChangesetCreate(Body):
    """A new changeset: its parent, message, operations and provenance."""

    parent = Patterned(  # type: ignore[assignment]  # the metaclass takes fields out of the class
        schema.REVISION,
        required=False,
        allow_null=True,
        help_text="A revision, or null for a root changeset (required unless parents is given).",
    )
    parents = serializers.ListField(
        child=Patterned(schema.REVISION),
        required=False,
        min_length=1,
        max_length=16,
        help_text="Instead of parent: several revisions (an agent's own merge); the operations apply to the first.",
    )
    message = Patterned(schema.TEXT, required=False, allow_blank=True, help_text="The commit message (no NUL).")
    operations = serializers.ListField(child=OperationField())
    provenance = serializers.DictField(
        required=False, allow_null=True, help_text='{"agent", "task", ...}: any JSON object whose text holds no NUL.'
    )

    def validate_provenance(self, value):
        if value is not None and _holds_nul(value):
            raise serializers.ValidationError("text in provenance must not hold NUL")
        return value

    def validate(self, attrs):
        if "parent" in attrs and "parents" in attrs:
            raise serializers.ValidationError({"parents": ["give either parent (one revision) or parents, not both"]})
        if "parent" not in attrs and "parents" not in attrs and self.requires_parent:
            raise serializers.ValidationError({"parent": ["This field is required."]})
        return attrs

    #: A changeset names its parent(s); a landing may leave it to the stream's head.
    requires_parent = True


class LandCreate(ChangesetCreate):
    """A landing in one call: a changeset's fields, with ``parent`` optional (the stream's head)."""

    hints = {"parents": "a landing has one parent: name it as 'parent'"}
    parents = None  # type: ignore[assignment]
    requires_parent = False

    parent = Patterned(  # type: ignore[assignment]
        schema.REVISION,
        required=False,
        allow_null=True,
        help_text="A revision; omitted: the stream's head; null: a root changeset.",
    )


def _holds_nul(value: object) -> bool:
    """Whether a JSON value has NUL in any of its strings, keys included (PostgreSQL's jsonb refuses it)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    return False


class ProposalCreate(Body):
    """A proposal to land a changeset on a stream."""

    stream = Text()
    head = Patterned(schema.REVISION, help_text="A revision: the changeset to land.")
    title = Patterned(
        schema.TEXT, required=False, allow_blank=True, max_length=300, help_text="At most 300 characters."
    )


class Integrate(Body):
    """Integrating takes one option: an admin's ``bypass`` of the repository's policy."""

    bypass = Text(
        required=False,
        min_length=1,
        max_length=500,
        help_text="Scope `admin` only: land whatever the policy says, for this reason (recorded in the "
        "decision and as a `policy.bypass` event).",
    )


# --- credentials ----------------------------------------------------------------------------


class Number(serializers.FloatField):
    """A finite JSON number, and only a number (DRF would take the string "1.5", or true)."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)) or not math.isfinite(data):
            self.fail("invalid")
        return super().to_internal_value(data)


class Integer(serializers.IntegerField):
    """A JSON integer (``2.0`` is one, as JSON Schema says), and only a number."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)) or not float(data).is_integer():
            self.fail("invalid")
        return super().to_internal_value(int(data))


class CredentialSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    user = serializers.CharField(source="user.username")
    name = serializers.CharField(allow_blank=True)
    token_prefix = serializers.CharField(help_text="The token's first characters (never the token).")
    scopes = serializers.ListField(child=serializers.CharField())
    repositories = serializers.ListField(child=serializers.CharField(), help_text="Empty: every repository.")
    streams = serializers.ListField(child=serializers.CharField(), help_text="Empty: every stream.")
    paths = serializers.ListField(child=serializers.CharField(), help_text="Empty: every path.")
    rate = serializers.FloatField(allow_null=True, help_text="Requests per second; null: the default.")
    burst = serializers.IntegerField(allow_null=True, help_text="Token bucket size; null: the default.")
    created = serializers.DateTimeField()
    last_used = serializers.DateTimeField(allow_null=True)
    revoked = serializers.DateTimeField(allow_null=True)


class CredentialCreatedSerializer(CredentialSerializer):
    token = serializers.CharField(help_text="The token: shown in this answer only, never again.")


class CredentialListSerializer(serializers.Serializer):
    credentials = CredentialSerializer(many=True)
    next = serializers.CharField(allow_null=True)


def _reach_list(item: dict, what: str) -> serializers.ListField:
    return serializers.ListField(
        child=Patterned(item), required=False, max_length=MAX_PATTERNS, help_text=f"{what} Omitted or empty: no limit."
    )


class CredentialCreate(Body):
    """A new credential for a user (created, without a password, if new)."""

    user = Patterned(schema.USER_NAME, help_text="The user's name; a new name creates the user (no password).")
    scopes = serializers.ListField(child=Choice(choices=list(Credential.SCOPES)), min_length=1)
    name = Patterned(schema.TEXT, required=False, allow_blank=True, max_length=100, help_text="A label.")
    repositories = _reach_list(schema.REPOSITORY_NAME, "The repositories it reaches (others are 404 to it).")
    streams = _reach_list(schema.REACH_PATTERN, "Stream patterns (`agent/*`) it may update.")
    paths = _reach_list(schema.REACH_PATTERN, "gitignore-style path patterns (`src/**`) its changes may touch.")
    rate = Number(required=False, allow_null=True, min_value=0.001, max_value=1e6, help_text="Requests per second.")
    burst = Integer(required=False, allow_null=True, min_value=1, max_value=1_000_000, help_text="Bucket size.")


# --- shared schema helpers -----------------------------------------------------------------

#: What a client should know about a code beyond the table's status and retryable flag.
_HINTS = {
    "rate_limited": "`retry_after_ms` and `Retry-After` say when",
    "policy_denied": "the repository's policy refuses it: one `details` entry `{requirement, message}` per unmet "
    "requirement (approvals, code_owners, rejected, paths, direct_update), `policy_version`, and on integrate "
    "and land the `proposal` that stays open",
}


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


# ----------------------------------------------------------------------------- search


class SearchMatchSerializer(serializers.Serializer):
    path = serializers.CharField()
    line = serializers.IntegerField(required=False, help_text="From 1; absent for a binary file.")
    column = serializers.IntegerField(required=False, help_text="The match's byte offset in the line, plus 1.")
    text = serializers.CharField(required=False, allow_blank=True, help_text="The line, without its newline.")
    before = serializers.ListField(child=serializers.CharField(allow_blank=True), required=False)
    after = serializers.ListField(child=serializers.CharField(allow_blank=True), required=False)
    binary = serializers.BooleanField(required=False, help_text='A binary file that matches ("Binary file … matches").')


class SearchFileSerializer(serializers.Serializer):
    path = serializers.CharField()
    matches = serializers.IntegerField(required=False, help_text="Lines that match (mode=files).")
    binary = serializers.BooleanField(required=False)


class SearchSerializer(serializers.Serializer):
    rev = serializers.CharField(help_text="The changeset searched (pages of one search keep it).")
    matches = SearchMatchSerializer(many=True, required=False, help_text="mode=content.")
    files = SearchFileSerializer(many=True, required=False, help_text="mode=files, or target=paths.")
    count = serializers.IntegerField(required=False, help_text="mode=count: lines that match.")
    truncated = serializers.BooleanField(help_text="More exist than this page holds, or the time limit came first.")
    next = serializers.CharField(
        allow_null=True, required=False, help_text="Pass as ?cursor= for the next page; null on the last."
    )
