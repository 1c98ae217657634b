"""Landing in one call (API.md, "Landing in one call"): changeset, proposal and integration."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from ..errors import ApiError, PolicyDenied
from ..models import Operation
from ..services import landing
from ..services.credentials import require_scope
from . import serializers as s
from .base import ApiView, query_number, repository, validated
from .idempotency import IDEMPOTENCY_KEY, idempotent, integration_of
from .views import MAX_INTEGRATE_WAIT_S, operation_answer


class LandOutcome(s.OutcomeSerializer):
    changeset = serializers.CharField(help_text="The changeset this call wrote (and proposed).")
    stream_head = serializers.CharField(
        allow_null=True, help_text="The head afterwards: the merge on a merge, unchanged on a conflict."
    )


class LandQueued(serializers.Serializer):
    operation = serializers.IntegerField(help_text="Poll GET .../operations/{id}.")
    # Plain text: a second component with the one-value enum of OperationQueued would collide.
    state = serializers.CharField(help_text="`queued`.")
    changeset = serializers.CharField(help_text="The changeset this call wrote (and proposed).")
    proposal = serializers.IntegerField()


@extend_schema(tags=["proposals"])
class LandView(ApiView):
    # It writes and integrates: the view checks ``write`` itself, the permission ``integrate``.
    scopes = {"POST": "integrate"}

    @extend_schema(
        operation_id="repos_streams_land",
        summary="Land a change in one call",
        request=s.LandCreate,
        parameters=[
            IDEMPOTENCY_KEY,
            OpenApiParameter("wait", float, description=f"As for integrate (at most {MAX_INTEGRATE_WAIT_S:g} s)."),
        ],
        responses={
            200: OpenApiResponse(LandOutcome, description="The integration outcome; a conflict is an outcome."),
            202: OpenApiResponse(LandQueued, description="Not done within the wait: poll the operation."),
            **s.errors(400, 404, 409, 413),
        },
    )
    def post(self, request, repo, stream):
        """Write a changeset on ``parent`` (default: the stream's head), propose it on the stream and
        integrate it, in one call (scopes ``write`` and ``integrate``)."""
        require_scope(request.auth, "write")
        try:
            body = validated(s.LandCreate, request)
            default_wait = min(float(settings.AGENTGIT["INTEGRATE_WAIT_S"]), MAX_INTEGRATE_WAIT_S)
            wait = query_number(request, "wait", default_wait, low=0, high=MAX_INTEGRATE_WAIT_S)
        except Exception:  # a refused body or query (ApiError, DRF's ValidationError)
            repository(repo)  # but an unknown repository is 404 first, as everywhere
            raise

        in_hand: list[Operation] = []  # the operation this request queued (and landed, without workers)

        def act() -> dict:
            landed = landing.land(
                repo,  # read with the stream (docs/adr/0024)
                stream,
                parent=body.get("parent", landing.STREAM_HEAD),
                message=body.get("message", ""),
                operations=body.get("operations"),
                provenance=body.get("provenance"),
                credential=request.auth,
            )
            in_hand.append(landed.operation)
            return {
                "changeset": landed.changeset.commit_id,
                "proposal": landed.proposal.pk,
                "operation": landed.operation.pk,
            }

        def answer(record: dict, replayed: bool) -> Response:
            operation = integration_of(repo, record, replayed, wait, in_hand[0] if in_hand else None)
            ids = {"changeset": record["changeset"], "proposal": record["proposal"]}
            try:
                response = operation_answer(operation)
            except PolicyDenied as error:  # the proposal stands: approve it, then integrate it
                error.extra = {**error.extra, **ids}
                raise
            except ApiError as error:  # aborted: the proposal stands, integrate it again
                error.details = [*error.details, ids]
                raise
            response.data = {**response.data, **ids}
            return response

        return idempotent(request, act, answer)
