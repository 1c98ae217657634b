"""repos.lookups: a lookup compiled once answers exactly what the ORM answers."""

from __future__ import annotations

import pytest
from django.utils import timezone

from repos.errors import NotFound
from repos.lookups import Lookup
from repos.models import Credential, Stream
from repos.services.repositories import create_repository, create_stream, find_stream, get_stream
from tests.factories import CredentialFactory

pytestmark = pytest.mark.django_db

FIELDS = [field.attname for field in Credential._meta.concrete_fields]


def test_an_instance_comes_back_with_every_field_converted_as_the_orm_converts_it():
    made = CredentialFactory(scopes=["read", "write"], rate=2.5, burst=7, revoked=timezone.now())
    lookup = Lookup(Credential, "token_hash", extra=("user__is_active", "user__username"))
    for _ in range(2):  # compiled by the first call, reused by the second
        found, (active, username) = lookup.get(made.token_hash)
        expected = Credential.objects.get(pk=made.pk)
        assert [getattr(found, name) for name in FIELDS] == [getattr(expected, name) for name in FIELDS]
        assert found.scopes == ["read", "write"] and found.revoked.tzinfo is not None
        assert active is True and username == made.user.username
    assert lookup.get("no such hash") is None


def test_several_fields_select_the_one_row_matching_them_all():
    one, two = create_repository("one"), create_repository("two")
    create_stream(one, "side", None)
    lookup = Lookup(Stream, "repository", "name")
    found, extra = lookup.get(one.pk, "side")
    assert (found.repository_id, found.name, extra) == (one.pk, "side", ())
    assert lookup.get(two.pk, "side") is None
    assert lookup.get(two.pk, "main")[0].pk == Stream.objects.get(repository=two, name="main").pk


def test_a_field_through_a_relation_joins_in_the_same_query(django_assert_num_queries):
    one, two = create_repository("one"), create_repository("two")
    create_stream(one, "side", None)
    lookup = Lookup(Stream, "repository__name", "name")
    lookup.get("one", "side")  # compiled
    with django_assert_num_queries(1):
        found, extra = lookup.get("one", "side")
    assert (found.pk, extra) == (Stream.objects.get(repository=one, name="side").pk, ())
    assert lookup.get("two", "side") is None and lookup.get("one", "main")[0].repository_id == one.pk
    assert lookup.get("three", "main") is None and lookup.get("two", "main")[0].repository_id == two.pk


def test_finding_a_stream_by_names_answers_as_get_stream_and_get_repository_do(django_assert_num_queries):
    one = create_repository("one")
    find_stream("one", "main")  # compiled
    with django_assert_num_queries(1):
        found = find_stream("one", "main")
    assert found.pk == get_stream(one, "main").pk
    with pytest.raises(NotFound, match="no stream named 'side' in one"):
        find_stream("one", "side")
    for repository_name in ("two", "o\x00ne"):
        with pytest.raises(NotFound, match="no repository named"):
            find_stream(repository_name, "main")
    with pytest.raises(NotFound, match="no stream named"):
        find_stream("one", "ma\x00in")
