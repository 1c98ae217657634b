"""factory-boy factories for the app's models: one module for all of them."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model
from factory.django import DjangoModelFactory

from repos.models import Credential
from repos.services.credentials import create_credential


class UserFactory(DjangoModelFactory):
    """A user without a usable password (API users log in with tokens)."""

    class Meta:
        model = get_user_model()
        django_get_or_create = ["username"]

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password(None)


class CredentialFactory(DjangoModelFactory):
    """A credential created through the service; its plaintext token is ``credential.token``.

    ``token`` is a plain attribute set on the returned instance only (the database has the
    hash), so a credential fetched again from the database has no token.
        credential = CredentialFactory(scopes=["read"])
        client.get(url, HTTP_AUTHORIZATION=f"Bearer {credential.token}")
    Other fields (e.g. ``revoked=timezone.now()``) are saved after creation.
    """

    class Meta:
        model = Credential

    user = factory.SubFactory(UserFactory)
    name = factory.Sequence(lambda n: f"credential {n}")
    scopes = factory.LazyFunction(lambda: ["read", "write", "integrate"])
    rate = None
    burst = None
    repositories = None
    streams = None
    paths = None

    @classmethod
    def _create(cls, model_class, *args, user, scopes, name, rate, burst, repositories, streams, paths, **extra):
        credential, token = create_credential(
            user, scopes, name=name, rate=rate, burst=burst, repositories=repositories, streams=streams, paths=paths
        )
        if extra:
            for field, value in extra.items():
                setattr(credential, field, value)
            credential.save(update_fields=list(extra))
        credential.token = token
        return credential
