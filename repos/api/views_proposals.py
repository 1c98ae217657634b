"""A proposal's conflicts and what an agent does about them (API.md, "Proposals and integration",
second table): the conflict package, resolving in one call, revisions, closing and reopening;
and the repository's server-side resolver rules."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from ..services import proposals, resolution
from . import serializers as s
from . import serializers_proposals as sp
from .base import ApiView, repository, validated
from .idempotency import IDEMPOTENCY_KEY, idempotent, integration_of
from .schema import id_parameter
from .views import WAIT_PARAMETER, integrate_wait, integration_responses, operation_answer


def _plain(value):
    """Validated data as plain dicts and lists (what the services take)."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


@extend_schema(tags=["proposals"])
class ConflictsView(ApiView):
    @extend_schema(
        summary="Get a proposal's conflict package",
        parameters=[id_parameter("proposal_id")],
        responses={200: sp.ConflictPackageSerializer, **s.errors(404)},
    )
    def get(self, request, repo, proposal_id):
        """The conflict package: per conflicting path its kind, base/ours/theirs (ours is the
        stream, theirs the proposal) and, for text, a blob with diff3 conflict markers."""
        proposal = proposals.get_proposal(repository(repo), proposal_id)
        stream_head, details = proposals.conflicts_of(proposal)
        body = {
            "proposal": proposal.pk,
            "head": proposal.head,
            "stream_head": stream_head,
            "conflicts": [detail.as_dict() for detail in details],
        }
        return Response(body)


@extend_schema(tags=["proposals"])
class ResolveView(ApiView):
    scopes = {"POST": "integrate"}

    @extend_schema(
        summary="Resolve a conflicted proposal",
        request=sp.ResolveRequest,
        parameters=[id_parameter("proposal_id"), IDEMPOTENCY_KEY, WAIT_PARAMETER],
        responses=integration_responses("merge, or conflict (a new package)"),
    )
    def post(self, request, repo, proposal_id):
        """Resolve the proposal's conflicts in one call: the server builds the merge on
        ``stream_head`` with the resolutions and lands it (scope ``integrate``). A retry with the
        same ``Idempotency-Key`` answers the first resolution's outcome and resolves once."""
        body, wait = _plain(validated(sp.ResolveRequest, request)), integrate_wait(request)
        found = repository(repo)
        proposal = proposals.get_proposal(found, proposal_id)
        return idempotent(
            request,
            lambda: {"operation": resolution.resolve(proposal, body, credential=request.auth).pk},
            lambda record, replayed: operation_answer(integration_of(found, record, replayed, wait)),
        )


@extend_schema(tags=["proposals"])
class RevisionsView(ApiView):
    @extend_schema(
        summary="List a proposal's revisions",
        parameters=[id_parameter("proposal_id")],
        responses={200: sp.RevisionListSerializer, **s.errors(404)},
    )
    def get(self, request, repo, proposal_id):
        """Every revision of the proposal, oldest first, each with its integration outcome."""
        proposal = proposals.get_proposal(repository(repo), proposal_id)
        return Response({"revisions": sp.RevisionSerializer(proposals.revisions(proposal), many=True).data})

    @extend_schema(
        summary="Revise a proposal",
        request=sp.RevisionCreate,
        parameters=[id_parameter("proposal_id")],
        responses={201: s.ProposalSerializer, **s.errors(400, 404, 409)},
    )
    def post(self, request, repo, proposal_id):
        """Give the proposal a new head (its next revision); integrating integrates the latest."""
        body = validated(sp.RevisionCreate, request)
        proposal = proposals.get_proposal(repository(repo), proposal_id)
        revised = proposals.revise(proposal, body["head"], credential=request.auth)
        return Response(s.represent(s.ProposalSerializer, revised), status=201)


@extend_schema(tags=["proposals"])
class CloseView(ApiView):
    @extend_schema(
        summary="Close a proposal",
        request=sp.ProposalAction,
        parameters=[id_parameter("proposal_id")],
        responses={200: s.ProposalSerializer, **s.errors(400, 404, 409)},
    )
    def post(self, request, repo, proposal_id):
        """Close the proposal: it is never integrated while closed."""
        validated(sp.ProposalAction, request)
        return Response(
            s.represent(s.ProposalSerializer, proposals.close(proposals.get_proposal(repository(repo), proposal_id)))
        )


@extend_schema(tags=["proposals"])
class ReopenView(ApiView):
    @extend_schema(
        summary="Reopen a proposal",
        request=sp.ProposalAction,
        parameters=[id_parameter("proposal_id")],
        responses={200: s.ProposalSerializer, **s.errors(400, 404, 409)},
    )
    def post(self, request, repo, proposal_id):
        """Reopen a closed proposal."""
        validated(sp.ProposalAction, request)
        proposal = proposals.get_proposal(repository(repo), proposal_id)
        return Response(s.represent(s.ProposalSerializer, proposals.reopen(proposal)))


@extend_schema(tags=["resolvers"])
class ResolversView(ApiView):
    scopes = {"POST": "admin"}

    @extend_schema(summary="List resolver rules", responses={200: sp.ResolverListSerializer, **s.errors(404)})
    def get(self, request, repo):
        """The repository's resolver rules, in the order they are tried."""
        rules = resolution.list_rules(repository(repo))
        return Response({"resolvers": sp.ResolverSerializer(rules, many=True).data})

    @extend_schema(
        summary="Add a resolver rule",
        request=sp.ResolverCreate,
        responses={201: sp.ResolverSerializer, **s.errors(400, 404, 409)},
    )
    def post(self, request, repo):
        """Add a rule (scope ``admin``): paths matching ``pattern`` merge conflicting content by
        ``rule`` (union, ours, theirs) before anything is reported as a conflict."""
        rule = resolution.add_rule(repository(repo), dict(validated(sp.ResolverCreate, request)))
        return Response(sp.ResolverSerializer(rule).data, status=201)


@extend_schema(tags=["resolvers"])
class ResolverView(ApiView):
    scopes = {"DELETE": "admin"}

    @extend_schema(
        summary="Remove a resolver rule",
        parameters=[id_parameter("rule_id")],
        responses={204: None, **s.errors(404)},
    )
    def delete(self, request, repo, rule_id):
        """Remove a resolver rule (scope ``admin``)."""
        resolution.delete_rule(repository(repo), rule_id)
        return Response(status=204)
