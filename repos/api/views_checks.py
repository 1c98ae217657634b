"""Check results on trees and the repository's webhooks, with their delivery logs."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from ..services import checks, integration, webhooks
from . import schema
from . import serializers as s
from . import serializers_checks as sc
from .base import PAGE_PARAMETERS, ApiView, page, repository, validated
from .schema import id_parameter


@extend_schema(tags=["checks"])
class ChecksView(ApiView):
    scopes = {"POST": "checks"}

    @extend_schema(
        summary="List the check results of a tree",
        parameters=[
            OpenApiParameter("changeset", schema.OBJECT_ID, description="A changeset: its tree's results …"),
            OpenApiParameter("tree", schema.OBJECT_ID, description="… or a tree's (give exactly one)."),
        ],
        responses={200: sc.CheckListSerializer, **s.errors(400, 404)},
    )
    def get(self, request, repo):
        """The results kept for the tree (of the changeset, or given), by check name."""
        params = request.query_params
        tree, results = checks.list_results(
            repository(repo), changeset=params.get("changeset"), tree=params.get("tree")
        )
        return Response({"tree": tree, "checks": sc.CheckResultSerializer(results, many=True).data})

    @extend_schema(
        summary="Report a check result",
        request=sc.CheckReport,
        responses={201: sc.CheckResultSerializer, **s.errors(400, 404)},
    )
    def post(self, request, repo):
        """Record a check's state on a tree, or on a changeset's tree (scope ``checks``); a new
        report of the same name on the same tree replaces the state. Final states are
        ``check.completed`` events."""
        body = validated(sc.CheckReport, request)
        found = repository(repo)
        result = checks.report(found, dict(body), credential=request.auth)
        if result.state in checks.COMPLETED:
            integration.wake_for_checks(found)  # a landing waiting for this result may go on
        return Response(sc.CheckResultSerializer(result).data, status=201)


@extend_schema(tags=["webhooks"])
class WebhooksView(ApiView):
    scopes = {"GET": "admin", "POST": "admin"}

    @extend_schema(summary="List webhooks", responses={200: sc.WebhookListSerializer, **s.errors(404)})
    def get(self, request, repo):
        """The repository's webhooks (scope ``admin``); their secrets are never shown."""
        found = webhooks.list_webhooks(repository(repo))
        return Response({"webhooks": sc.WebhookSerializer(found, many=True).data})

    @extend_schema(
        summary="Add a webhook",
        request=sc.WebhookCreate,
        responses={201: sc.WebhookSerializer, **s.errors(400, 404)},
    )
    def post(self, request, repo):
        """Send the repository's events of the kinds chosen, from the next one on, to ``url``
        signed with ``secret`` (scope ``admin``)."""
        body = validated(sc.WebhookCreate, request)
        hook = webhooks.create_webhook(repository(repo), {**body, "events": list(body["events"])})
        return Response(sc.WebhookSerializer(hook).data, status=201)


@extend_schema(tags=["webhooks"])
class WebhookView(ApiView):
    scopes = {"GET": "admin", "DELETE": "admin"}

    @extend_schema(
        summary="Get a webhook",
        parameters=[id_parameter("webhook_id")],
        responses={200: sc.WebhookSerializer, **s.errors(404)},
    )
    def get(self, request, repo, webhook_id):
        """One webhook (scope ``admin``), without its secret."""
        return Response(sc.WebhookSerializer(webhooks.get_webhook(repository(repo), webhook_id)).data)

    @extend_schema(
        summary="Remove a webhook",
        parameters=[id_parameter("webhook_id")],
        responses={204: None, **s.errors(404)},
    )
    def delete(self, request, repo, webhook_id):
        """Remove a webhook and its delivery log (scope ``admin``)."""
        webhooks.delete_webhook(repository(repo), webhook_id)
        return Response(status=204)


@extend_schema(tags=["webhooks"])
class DeliveriesView(ApiView):
    scopes = {"GET": "admin"}

    @extend_schema(
        summary="List a webhook's deliveries",
        parameters=[id_parameter("webhook_id"), *PAGE_PARAMETERS],
        responses={200: sc.DeliveryListSerializer, **s.errors(400, 404)},
    )
    def get(self, request, repo, webhook_id):
        """The delivery log, newest first, each delivery with its attempts (scope ``admin``)."""
        hook = webhooks.get_webhook(repository(repo), webhook_id)
        rows, next_cursor = page(webhooks.deliveries(hook), request, "id", descending=True, cursor_type=int)
        return Response({"deliveries": sc.DeliverySerializer(rows, many=True).data, "next": next_cursor})


@extend_schema(tags=["webhooks"])
class RedeliverView(ApiView):
    scopes = {"POST": "admin"}

    @extend_schema(
        summary="Redeliver",
        request=sc.Redelivery,
        parameters=[id_parameter("webhook_id"), id_parameter("delivery_id")],
        responses={202: sc.DeliverySerializer, **s.errors(400, 404, 409)},
    )
    def post(self, request, repo, webhook_id, delivery_id):
        """Send a delivery again as it was, with the same ``X-AgentGit-Delivery`` (scope
        ``admin``); 409 ``wrong_state`` while it is still pending. Answers at once: the attempts
        appear in its log."""
        validated(sc.Redelivery, request)
        hook = webhooks.get_webhook(repository(repo), webhook_id)
        delivery = webhooks.redeliver(webhooks.get_delivery(hook, delivery_id))
        return Response(sc.DeliverySerializer(delivery).data, status=202)
