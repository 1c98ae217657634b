"""Credentials over the API (README, "Scoped credentials"): list, create (the token shown once),
revoke. Scope ``admin``, of a credential held to no repositories: one held to some is an admin
of those, not of the server's credentials (403)."""

from __future__ import annotations

from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from ..errors import Forbidden, NotFound
from ..models import Credential
from ..services import credentials
from . import serializers as s
from .base import PAGE_PARAMETERS, ApiView, page, validated
from .schema import id_parameter


class _CredentialsApiView(ApiView):
    scopes = {"GET": "admin", "POST": "admin", "DELETE": "admin"}

    def initial(self, request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)
        if request.auth.repositories:
            raise Forbidden("a credential held to some repositories cannot manage credentials")


@extend_schema(tags=["credentials"])
class CredentialsView(_CredentialsApiView):
    @extend_schema(
        operation_id="credentials_list",
        summary="List credentials",
        parameters=PAGE_PARAMETERS,
        responses={200: s.CredentialListSerializer, **s.errors(400)},
    )
    def get(self, request):
        """Every credential, newest first, a page at a time: its prefix, scopes and reach, never
        its token or hash (scope ``admin``)."""
        rows, next_cursor = page(
            Credential.objects.select_related("user"), request, "id", descending=True, cursor_type=int
        )
        return Response({"credentials": s.CredentialSerializer(rows, many=True).data, "next": next_cursor})

    @extend_schema(
        summary="Create a credential",
        request=s.CredentialCreate,
        responses={201: s.CredentialCreatedSerializer, **s.errors(400)},
    )
    def post(self, request):
        """Create a credential (scope ``admin``), held to ``repositories``, ``streams`` and
        ``paths`` when given; the answer holds its token, shown this once."""
        body = validated(s.CredentialCreate, request)
        with transaction.atomic():  # a refused credential leaves no new user behind
            credential, token = credentials.create_credential(
                credentials.user_named(body["user"]),
                body["scopes"],
                name=body.get("name", ""),
                rate=body.get("rate"),
                burst=body.get("burst"),
                repositories=body.get("repositories"),
                streams=body.get("streams"),
                paths=body.get("paths"),
            )
        return Response({**s.CredentialSerializer(credential).data, "token": token}, status=201)


@extend_schema(tags=["credentials"])
class CredentialView(_CredentialsApiView):
    @extend_schema(
        summary="Revoke a credential",
        parameters=[id_parameter("credential_id")],
        responses={204: None, **s.errors(404)},
    )
    def delete(self, request, credential_id):
        """Revoke the credential (scope ``admin``): its token is refused from now on; revoking
        a revoked one changes nothing."""
        try:
            number = int(credential_id)
        except ValueError:
            number = 0
        found = Credential.objects.filter(pk=number).first() if 0 < number < 2**63 else None
        if found is None:
            raise NotFound(f"no credential {credential_id}")
        credentials.revoke_credential(found)
        return Response(status=204)
