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


# --- policies and reviews (repos/services/policies.py, engine/policy.py) ----------------------

#: A stream or path pattern in a policy rule.
PATTERN = {
    "type": "string",
    "minLength": 1,
    "maxLength": 500,
    "pattern": r"^[^\x00\n]*$",
    "description": "A pattern without NUL or newline.",
}


class PolicyRuleBody(Body):
    """One rule: for the streams its patterns match, and (with ``paths``) only for changes that
    touch a matching path. The rules that apply combine, the strictest winning."""

    name = Patterned({**schema.TEXT, "maxLength": 100}, required=False, allow_blank=True, help_text="A label.")
    streams = serializers.ListField(
        child=Patterned(PATTERN),
        min_length=1,
        max_length=1000,
        help_text="Stream globs: `*` within a `/` segment, `**` across, `?` one character (`main`, `release/*`).",
    )
    paths = serializers.ListField(
        child=Patterned(PATTERN),
        required=False,
        max_length=1000,
        help_text="gitignore-style path patterns (`docs/**`, `*.md`, `!keep.md`): the rule applies only "
        "when a changed path matches.",
    )
    required_approvals = serializers.IntegerField(
        required=False, min_value=0, max_value=50, help_text="Approvals of the latest revision's tree (default 0)."
    )
    code_owners = serializers.BooleanField(
        required=False,
        help_text="Each changed path that the CODEOWNERS file at the root of the stream's head owns needs "
        "an approval from one of its owners (default false).",
    )
    deny_paths = serializers.ListField(
        child=Patterned(PATTERN),
        required=False,
        max_length=1000,
        help_text="gitignore-style path patterns no change landing on these streams may touch.",
    )
    required_checks = serializers.ListField(
        child=Patterned(
            {
                "type": "string",
                "pattern": r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$",
                "description": "A check's name (ci/test).",
            }
        ),
        required=False,
        max_length=50,
        help_text="Checks that must report `success` on the tree of the result that would land (the "
        "fast-forward head or the merge) before the stream moves: the landing queue asks for them "
        "(`check.requested`), batches the queued proposals and bisects a batch that fails.",
    )
    check_timeout_s = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=86400,
        help_text="Seconds a required check may stay unreported or pending before it counts as failed (default 1800).",
    )
    direct_update = Choice(
        choices=["nobody", "admins", "everyone"],
        required=False,
        help_text="Who may move the stream without a proposal (a git push to refs/heads/S, a stream "
        "created at a head or deleted). Default: nobody when the rule asks for approvals, code owners "
        "or checks, else everyone.",
    )


class PolicyBody(Body):
    """A repository's policy document."""

    rules = serializers.ListField(child=PolicyRuleBody(), max_length=200)


class PolicySerializer(serializers.Serializer):
    version = serializers.IntegerField(help_text="Starts at 1; 0 while no policy was ever set.")
    rules = serializers.ListField(child=serializers.DictField())
    changed_by = serializers.CharField(allow_null=True, help_text="Who set this version.")
    updated = serializers.DateTimeField(allow_null=True)


class RequirementSerializer(serializers.Serializer):
    requirement = serializers.ChoiceField(
        choices=["direct_update", "paths", "rejected", "approvals", "code_owners", "checks"]
    )
    met = serializers.BooleanField()
    message = serializers.CharField(help_text="What it asks for and who or what can meet it.")


class OwnedPathSerializer(serializers.Serializer):
    path = serializers.CharField()
    owners = serializers.ListField(child=serializers.CharField())
    approved_by = serializers.ListField(child=serializers.CharField())


class ExplainSerializer(serializers.Serializer):
    allowed = serializers.BooleanField(help_text="Whether integrating now would be allowed.")
    policy_version = serializers.IntegerField()
    requirements = RequirementSerializer(many=True)
    approvals = serializers.ListField(child=serializers.CharField(), required=False, help_text="Approvals that count.")
    owners = OwnedPathSerializer(many=True, required=False, help_text="Owned paths (at most 20) and who approved.")


class ReviewBody(Body):
    """A review of the proposal's latest revision."""

    verdict = Choice(choices=["approve", "reject", "comment"])
    body = Text(required=False, allow_blank=True, max_length=65536)


class ReviewSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    reviewer = serializers.CharField(source="user.username")
    verdict = serializers.ChoiceField(choices=["approve", "reject", "comment"])
    body = serializers.CharField(allow_blank=True)
    revision = serializers.IntegerField(help_text="The revision reviewed.")
    tree = serializers.CharField(help_text="The tree it saw: an approval counts while the proposal's tree is this one.")
    withdrawn = serializers.DateTimeField(allow_null=True)
    created = serializers.DateTimeField()


class ReviewListSerializer(serializers.Serializer):
    reviews = ReviewSerializer(many=True)
