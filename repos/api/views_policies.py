"""A repository's policy, the reviews of a proposal and what the policy would say of it
(repos/services/policies.py; the document's rules: engine/policy.py)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from ..services import policies, proposals
from . import serializers as s
from . import serializers_proposals as sp
from .base import ApiView, json_body, repository, validated
from .schema import id_parameter


@extend_schema(tags=["policies"])
class PolicyView(ApiView):
    scopes = {"PUT": "admin"}

    @extend_schema(summary="Get the repository's policy", responses={200: sp.PolicySerializer, **s.errors(404)})
    def get(self, request, repo):
        """The policy in force and its version (version 0 and no rules: none was ever set)."""
        return Response(sp.PolicySerializer(policies.policy_document(repository(repo))).data)

    @extend_schema(
        summary="Set the repository's policy",
        request=sp.PolicyBody,
        responses={200: sp.PolicySerializer, **s.errors(400, 404)},
    )
    def put(self, request, repo):
        """Store the document as the next version (scope ``admin``); every landing from then on is
        judged by it. The same document again adds no version."""
        validated(sp.PolicyBody, request)
        found = repository(repo)
        policies.set_policy(found, json_body(request), by=request.user.get_username())
        return Response(sp.PolicySerializer(policies.policy_document(found)).data)


@extend_schema(tags=["policies"])
class ReviewsView(ApiView):
    scopes = {"POST": "review"}

    @extend_schema(
        summary="List a proposal's reviews",
        parameters=[id_parameter("proposal_id")],
        responses={200: sp.ReviewListSerializer, **s.errors(404)},
    )
    def get(self, request, repo, proposal_id):
        """Every review, oldest first (withdrawn ones with the time they were withdrawn)."""
        proposal = proposals.get_proposal(repository(repo), proposal_id)
        return Response({"reviews": sp.ReviewSerializer(policies.reviews_of(proposal), many=True).data})

    @extend_schema(
        summary="Review a proposal",
        request=sp.ReviewBody,
        parameters=[id_parameter("proposal_id")],
        responses={201: sp.ReviewSerializer, **s.errors(400, 404, 409)},
    )
    def post(self, request, repo, proposal_id):
        """Approve, reject or comment on the proposal's latest revision (scope ``review``). An
        approval is of the tree it saw; a rejection blocks until withdrawn or replaced by the
        reviewer's later approval. The proposal's authors may only comment (403 otherwise)."""
        body = validated(sp.ReviewBody, request)
        proposal = proposals.get_proposal(repository(repo), proposal_id)
        review = policies.add_review(
            proposal, body["verdict"], body.get("body", ""), user=request.user, credential=request.auth
        )
        return Response(sp.ReviewSerializer(review).data, status=201)


@extend_schema(tags=["policies"])
class ReviewView(ApiView):
    scopes = {"DELETE": "review"}

    @extend_schema(
        summary="Withdraw a review",
        parameters=[id_parameter("proposal_id"), id_parameter("review_id")],
        responses={200: sp.ReviewSerializer, **s.errors(404)},
    )
    def delete(self, request, repo, proposal_id, review_id):
        """Withdraw your review (scope ``review``): it no longer counts, and a rejection no longer
        blocks. Withdrawing twice answers the first withdrawal."""
        proposal = proposals.get_proposal(repository(repo), proposal_id)
        return Response(sp.ReviewSerializer(policies.withdraw_review(proposal, review_id, user=request.user)).data)


@extend_schema(tags=["policies"])
class ExplainView(ApiView):
    @extend_schema(
        summary="What the policy says of integrating a proposal now",
        parameters=[id_parameter("proposal_id")],
        responses={200: sp.ExplainSerializer, **s.errors(404)},
    )
    def get(self, request, repo, proposal_id):
        """Each requirement of the policy for this proposal, met or not, with who or what can meet
        it: plan without trying (``allowed`` is true where the repository has no policy)."""
        proposal = proposals.get_proposal(repository(repo), proposal_id)
        return Response(policies.explain(proposal))
