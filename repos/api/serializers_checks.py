"""The answers and bodies of check results and webhooks, as DRF serializers (they shape the JSON
and document it; the services validate the bodies)."""

from __future__ import annotations

from rest_framework import serializers

from ..services import checks, webhooks
from ..services.events import KINDS
from . import schema
from .serializers import Body, Choice, Patterned


class PastStateSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=checks.STATES)
    url = serializers.CharField(allow_blank=True)
    changeset = serializers.CharField(allow_null=True)
    reported = serializers.DateTimeField(help_text="When this state was reported.")


class CheckResultSerializer(serializers.Serializer):
    name = serializers.CharField()
    state = serializers.ChoiceField(choices=checks.STATES)
    tree = serializers.CharField(help_text="The tree the result is kept by.")
    changeset = serializers.SerializerMethodField(help_text="The changeset the latest report named, if it named one.")
    url = serializers.SerializerMethodField()
    summary = serializers.CharField(allow_blank=True)
    history = PastStateSerializer(many=True, help_text="The states this one replaced, oldest first.")
    created = serializers.DateTimeField(help_text="The first report of this check on this tree.")
    updated = serializers.DateTimeField(help_text="The latest.")

    def get_changeset(self, obj) -> str | None:
        return obj.changeset or None

    def get_url(self, obj) -> str | None:
        return obj.url or None


class CheckListSerializer(serializers.Serializer):
    tree = serializers.CharField()
    checks = CheckResultSerializer(many=True)


class CheckReport(Body):
    """A check's result on a changeset's tree or on a tree: exactly one of the two."""

    changeset = Patterned(schema.OBJECT_ID, required=False, help_text="A changeset id: its tree …")
    tree = Patterned(schema.OBJECT_ID, required=False, help_text="… or a tree id.")
    name = Patterned(schema.CHECK_NAME)
    state = Choice(choices=checks.STATES)
    url = Patterned(schema.HTTP_URL, required=False, max_length=webhooks.URL_MAX_LENGTH, help_text="Its details.")
    summary = Patterned(
        {**schema.TEXT, "maxLength": checks.SUMMARY_MAX_LENGTH},
        required=False,
        allow_blank=True,
        max_length=checks.SUMMARY_MAX_LENGTH,
        help_text=f"What it found, at most {checks.SUMMARY_MAX_LENGTH} characters.",
    )


class WebhookSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.CharField()
    events = serializers.ListField(child=serializers.CharField())
    created = serializers.DateTimeField()


class WebhookListSerializer(serializers.Serializer):
    webhooks = WebhookSerializer(many=True)


class WebhookCreate(Body):
    """A webhook: where to send which events, and the key that signs them."""

    url = Patterned(schema.HTTP_URL, max_length=webhooks.URL_MAX_LENGTH, help_text="Where deliveries are POSTed.")
    secret = Patterned(
        {**schema.TEXT, "minLength": 1, "maxLength": webhooks.SECRET_MAX_LENGTH},
        min_length=1,
        max_length=webhooks.SECRET_MAX_LENGTH,
        help_text="The HMAC-SHA256 key of X-AgentGit-Signature-256; never shown again.",
    )
    events = serializers.ListField(
        child=Choice(choices=[*KINDS, webhooks.ALL_EVENTS]),
        min_length=1,
        help_text=f"Event kinds; {webhooks.ALL_EVENTS!r}: every kind.",
    )


class AttemptSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    started = serializers.DateTimeField()
    status_code = serializers.IntegerField(allow_null=True, help_text="The answer's HTTP status; null if none came.")
    ok = serializers.BooleanField()
    error = serializers.CharField(allow_blank=True)
    duration_ms = serializers.IntegerField()


class DeliverySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    delivery = serializers.CharField(source="guid", help_text="X-AgentGit-Delivery: the same on every attempt.")
    event = serializers.CharField()
    event_id = serializers.IntegerField(source="event_seq", help_text="The event's id in the repository's feed.")
    state = serializers.ChoiceField(choices=["pending", "delivered", "failed"])
    attempts = AttemptSerializer(source="attempt_log.all", many=True)
    created = serializers.DateTimeField()
    updated = serializers.DateTimeField()


class DeliveryListSerializer(serializers.Serializer):
    deliveries = DeliverySerializer(many=True)
    next = serializers.CharField(allow_null=True, help_text="Pass as ?cursor= for the next page; null on the last.")


class Redelivery(Body):
    """Empty: a redelivery takes no options (``{}``)."""
