"""Repositories, streams, proposals, integration and operations (API.md).

Content (blobs, changesets, tree, files) is in :mod:`.views_content`, history (diff, blame, log)
in :mod:`.views_history`, events in :mod:`.events`.
"""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.response import Response

from ..errors import Forbidden
from ..models import Operation
from ..services import integration, policies, proposals, repositories
from ..services.credentials import require_proposal_stream, require_stream
from . import serializers as s
from .base import PAGE_PARAMETERS, ApiView, page, query_number, repository, validated
from .errors import error_from_dict
from .idempotency import IDEMPOTENCY_KEY, created, idempotent, integration_of
from .schema import id_parameter

#: The longest ``?wait=`` the integrate endpoint honours, seconds.
MAX_INTEGRATE_WAIT_S = 60.0


#: The ``?wait=`` parameter of the endpoints that integrate (integrate, resolve).
WAIT_PARAMETER = OpenApiParameter(
    "wait",
    {"type": "number", "minimum": 0, "maximum": MAX_INTEGRATE_WAIT_S},
    description=f"Seconds to wait for the outcome (default AGENTGIT_INTEGRATE_WAIT_S, at most {MAX_INTEGRATE_WAIT_S:g}).",
)


def integrate_wait(request) -> float:
    """How long to wait for an integration's outcome: ``?wait=``, read before anything is done."""
    default_wait = min(float(settings.AGENTGIT["INTEGRATE_WAIT_S"]), MAX_INTEGRATE_WAIT_S)
    return query_number(request, "wait", default_wait, low=0, high=MAX_INTEGRATE_WAIT_S)


def integration_responses(outcomes: str) -> dict:
    """The schema answers of an endpoint that integrates: the outcome, a pending operation, errors."""
    return {
        200: OpenApiResponse(s.OutcomeSerializer, description=outcomes),
        202: OpenApiResponse(s.OperationQueuedSerializer, description="Not done within the wait: poll it."),
        **s.errors(400, 404, 409, 503),
    }


@extend_schema(tags=["repositories"])
class ReposView(ApiView):
    scopes = {"POST": "admin"}

    @extend_schema(
        operation_id="repos_list",
        summary="List repositories",
        parameters=PAGE_PARAMETERS,
        responses={200: s.RepositoryListSerializer, **s.errors(400)},
    )
    def get(self, request):
        """Repositories by name, a page at a time: those the credential reaches."""
        reach = request.auth.repositories or None
        repos, next_cursor = page(repositories.list_repositories(reach), request, "name")
        return Response({"repos": [s.represent(s.RepositorySerializer, found) for found in repos], "next": next_cursor})

    @extend_schema(
        summary="Create a repository",
        request=s.RepositoryCreate,
        responses={201: s.RepositorySerializer, **s.errors(400, 409)},
    )
    def post(self, request):
        """Create a repository (scope ``admin``); its default stream ``main`` starts empty.
        A name that is taken answers 409 ``already_exists``; an admin held to some repositories
        creates only those (403 ``forbidden`` for any other name)."""
        name = validated(s.RepositoryCreate, request)["name"]
        if request.auth.repositories and name not in request.auth.repositories:
            raise Forbidden(
                f"this credential is held to {', '.join(request.auth.repositories)}: it cannot create {name!r}"
            )
        created = repositories.create_repository(name)
        return Response(s.RepositorySerializer(created).data, status=201)


@extend_schema(tags=["repositories"])
class RepoView(ApiView):
    @extend_schema(summary="Get a repository", responses={200: s.RepositorySerializer, **s.errors(404)})
    def get(self, request, repo):
        """The repository: its name, default stream, object format and creation time."""
        return Response(self.read(repo))

    @staticmethod
    def read(repo):
        return s.represent(s.RepositorySerializer, repository(repo))


@extend_schema(tags=["streams"])
class StreamsView(ApiView):
    @extend_schema(
        operation_id="repos_streams_list",
        summary="List streams",
        parameters=PAGE_PARAMETERS,
        responses={200: s.StreamListSerializer, **s.errors(400, 404)},
    )
    def get(self, request, repo):
        """The repository's streams by name, a page at a time."""
        streams, next_cursor = page(repository(repo).streams.all(), request, "name")
        return Response({"streams": [s.represent(s.StreamSerializer, found) for found in streams], "next": next_cursor})

    @extend_schema(
        summary="Create a stream",
        request=s.StreamCreate,
        responses={201: s.StreamSerializer, **s.errors(400, 404, 409)},
    )
    def post(self, request, repo):
        """Create a stream at the revision ``from`` (empty when omitted or null). A name that is
        taken answers 409 ``already_exists``; an unknown ``from`` 404."""
        body = validated(s.StreamCreate, request)
        require_stream(request.auth, body["name"])
        stream = repositories.create_stream(repository(repo), body["name"], body.get("from"), request.auth)
        return Response(s.StreamSerializer(stream).data, status=201)


@extend_schema(tags=["streams"])
class StreamView(ApiView):
    scopes = {"DELETE": "admin"}

    @extend_schema(summary="Get a stream", responses={200: s.StreamSerializer, **s.errors(404)})
    def get(self, request, repo, stream):
        """The stream's head (null while empty); a stream name may contain '/'."""
        return Response(self.read(repo, stream))

    @staticmethod
    def read(repo, stream):
        return s.represent(s.StreamSerializer, repositories.find_stream(repo, stream))

    @extend_schema(summary="Delete a stream", responses={204: None, **s.errors(404)})
    def delete(self, request, repo, stream):
        """Delete a stream (scope ``admin``; the default stream is refused: 403) with its
        proposals; its changesets stay readable by id."""
        require_stream(request.auth, stream)
        integration.delete_stream(repository(repo), stream, request.auth)
        return Response(status=204)


@extend_schema(tags=["proposals"])
class ProposalsView(ApiView):
    @extend_schema(
        operation_id="repos_proposals_list",
        summary="List proposals",
        parameters=[
            OpenApiParameter("state", str, enum=["open", "integrated", "conflicted", "closed"]),
            OpenApiParameter("stream", str, description="Only proposals to land on this stream."),
            *PAGE_PARAMETERS,
        ],
        responses={200: s.ProposalListSerializer, **s.errors(400, 404)},
    )
    def get(self, request, repo):
        """Proposals, newest first, a page at a time."""
        params = request.query_params
        found = proposals.list_proposals(repository(repo), state=params.get("state"), stream=params.get("stream"))
        rows, next_cursor = page(found.select_related("author__user"), request, "id", descending=True, cursor_type=int)
        return Response({"proposals": s.ProposalSerializer(rows, many=True).data, "next": next_cursor})

    @extend_schema(
        summary="Open a proposal",
        request=s.ProposalCreate,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: s.ProposalSerializer, **s.errors(400, 404)},
    )
    def post(self, request, repo):
        """Open a proposal to land ``head`` on ``stream`` (404 if either is unknown)."""
        body = validated(s.ProposalCreate, request)

        def open_one() -> dict:
            proposal = proposals.open_proposal(
                repository(repo),
                stream=body["stream"],
                head=body["head"],
                title=body.get("title", ""),
                credential=request.auth,
            )
            return s.represent(s.ProposalSerializer, proposal)

        return created(request, open_one)


@extend_schema(tags=["proposals"])
class ProposalView(ApiView):
    @extend_schema(
        summary="Get a proposal",
        parameters=[id_parameter("proposal_id")],
        responses={200: s.ProposalSerializer, **s.errors(404)},
    )
    def get(self, request, repo, proposal_id):
        """The proposal: its state, head, and once integrated its outcome and resulting changeset."""
        return Response(self.read(repo, proposal_id))

    @staticmethod
    def read(repo, proposal_id):
        return s.ProposalSerializer(proposals.get_proposal(repository(repo), proposal_id)).data


@extend_schema(tags=["proposals"])
class IntegrateView(ApiView):
    scopes = {"POST": "integrate"}

    @extend_schema(
        summary="Integrate a proposal",
        request=s.Integrate,
        parameters=[
            id_parameter("proposal_id"),
            IDEMPOTENCY_KEY,
            WAIT_PARAMETER,
        ],
        responses=integration_responses("fast_forward, merge, conflict, already_integrated"),
    )
    def post(self, request, repo, proposal_id):
        """Integrate the proposal (scope ``integrate``); asking again answers the first outcome.
        409 ``aborted`` (retryable) when the stream kept moving; 202 when the outcome is not
        there within ``?wait=``: poll the operation. 403 ``policy_denied`` when the repository's
        policy refuses it, one ``details`` entry per unmet requirement; the proposal stays open.
        An admin's ``{"bypass": "reason"}`` lands it anyway and records why."""
        bypass = policies.check_bypass(validated(s.Integrate, request).get("bypass"), request.auth)
        wait = integrate_wait(request)
        found = repository(repo)
        proposal = proposals.get_proposal(found, proposal_id)
        require_proposal_stream(request.auth, proposal)
        in_hand: list[Operation] = []  # the operation this request queued (or landed)

        def act() -> dict:
            in_hand.append(integration.request_integration(proposal, bypass=bypass))
            return {"operation": in_hand[0].pk}

        return idempotent(
            request,
            act,
            lambda record, replayed: operation_answer(
                integration_of(found, record, replayed, wait, in_hand[0] if in_hand else None)
            ),
        )


def operation_answer(operation: Operation) -> Response:
    """The integrate endpoint's answer: the outcome (200), a pending operation (202), or its error.

    A conflict's outcome links to the proposal's conflict package (``"package"``)."""
    if operation.state == Operation.State.QUEUED:
        location = reverse("api:operation", args=[operation.repository.name, operation.pk])
        body = {"operation": operation.pk, "state": operation.state}
        return Response(body, status=202, headers={"Location": location})
    if operation.state == Operation.State.FAILED:
        raise error_from_dict(operation.error or {})
    outcome = operation.outcome_document() or {}
    if outcome.get("outcome") == "conflict":
        outcome["package"] = reverse("api:proposal-conflicts", args=[operation.repository.name, operation.proposal_id])
    return Response(outcome)


@extend_schema(tags=["proposals"])
class OperationView(ApiView):
    @extend_schema(
        summary="Get an operation",
        parameters=[id_parameter("operation_id")],
        responses={200: s.OperationSerializer, **s.errors(404)},
    )
    def get(self, request, repo, operation_id):
        """An integration operation: queued, done (with ``outcome``) or failed (with ``error``)."""
        return Response(self.read(repo, operation_id))

    @staticmethod
    def read(repo, operation_id):
        return s.OperationSerializer(integration.get_operation(repository(repo), operation_id)).data
