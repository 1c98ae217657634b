"""The answers and bodies of a proposal's conflict endpoints and of resolver rules, as DRF
serializers (they shape the JSON and document it; the services validate the bodies)."""

from __future__ import annotations

from rest_framework import serializers

from . import schema
from .serializers import Body, Choice, ConflictSerializer, Patterned, Text


class VersionSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="Where this side has the file (for a rename: base is its source).")
    mode = serializers.CharField(help_text="Octal, as git writes it: 100644, 100755, 120000.")
    blob = serializers.CharField(help_text="The blob id of this side's content.")


class ConflictDetailSerializer(ConflictSerializer):
    base = VersionSerializer(required=False, help_text="Absent for a path the base did not have.")
    ours = VersionSerializer(required=False, help_text="The stream's side; absent where it deleted the file.")
    theirs = VersionSerializer(required=False, help_text="The proposal's side; absent where it deleted the file.")
    marked = serializers.CharField(
        required=False,
        help_text="Text conflicts: the blob id of the file with diff3 conflict markers "
        "(what `git merge-file --diff3` writes), labelled stream, base and proposal.",
    )


class ConflictPackageSerializer(serializers.Serializer):
    proposal = serializers.IntegerField()
    head = serializers.CharField(help_text="The proposal head that was merged.")
    stream_head = serializers.CharField(allow_null=True, help_text="The stream head it was merged against.")
    conflicts = ConflictDetailSerializer(many=True)


class RevisionSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    head = serializers.CharField()
    kind = serializers.ChoiceField(choices=["opened", "revised", "resolved"])
    outcome = serializers.JSONField(allow_null=True, help_text="This revision's integration outcome, if any.")
    created = serializers.DateTimeField()


class RevisionListSerializer(serializers.Serializer):
    revisions = RevisionSerializer(many=True)


class ResolverSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    pattern = serializers.CharField()
    rule = serializers.ChoiceField(choices=["union", "ours", "theirs"])
    created = serializers.DateTimeField()


class ResolverListSerializer(serializers.Serializer):
    resolvers = ResolverSerializer(many=True)


class ResolutionItem(Body):
    """One conflicting path's resolution: exactly one of content, blob or delete."""

    path = Patterned(schema.REPOSITORY_PATH)
    content = Text(required=False, allow_blank=True, help_text="The resolved text (utf-8) …")
    blob = Patterned(schema.OBJECT_ID, required=False, help_text="… or an uploaded blob id …")
    delete = serializers.BooleanField(required=False, help_text="… or true: the path is removed.")


class ResolveRequest(Body):
    """The stream head the conflicts were resolved against, and each conflicting path's resolution."""

    stream_head = Patterned(schema.REVISION, help_text="The stream head the conflicts were resolved against.")
    resolutions = serializers.ListField(child=ResolutionItem(), min_length=1)
    message = Patterned(schema.TEXT, required=False, allow_blank=True, help_text="The merge's commit message.")
    provenance = serializers.DictField(required=False, help_text='{"agent", …}: who resolved')


class RevisionCreate(Body):
    """The proposal's next head."""

    head = Patterned(schema.REVISION, help_text="A revision: the proposal's new head.")


class ProposalAction(Body):
    """Empty: closing and reopening take no options (``{}``)."""


class ResolverCreate(Body):
    """A resolver rule."""

    pattern = Patterned(
        {**schema.TEXT, "minLength": 1, "maxLength": 200},
        help_text="A glob: without '/' it matches the file name at any depth (CHANGELOG.md, *.lock).",
    )
    rule = Choice(choices=["union", "ours", "theirs"])
