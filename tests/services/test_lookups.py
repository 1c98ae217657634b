"""repos.lookups: a query compiled once answers exactly what the ORM answers, and writes what it writes."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from repos.errors import NotFound
from repos.lookups import Insert, InsertMany, Lookup, Rows, Update, columns, instance
from repos.models import Credential, Event, PathChange, Repository, Stream
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


def test_compiled_rows_with_related_rows_and_a_limit_are_the_orms_columns_in_order():
    repository = create_repository("demo")
    create_stream(repository, "side", None)
    rows = Rows(lambda repo: Stream.objects.select_related("repository").filter(repository=repo).order_by("name"), int)
    for _ in range(2):
        using, found = rows.all(repository.pk, model=Stream)
        streams = [instance(Stream, using, row) for row in found]
        related = [instance(Repository, using, row, len(columns(Stream))) for row in found]
        assert [s.name for s in streams] == ["main", "side"] and {r.name for r in related} == {"demo"}
        assert [(s.pk, s.head, s.version) for s in streams] == list(
            Stream.objects.filter(repository=repository).order_by("name").values_list("pk", "head", "version")
        )
    assert len(rows.all(repository.pk, model=Stream, limit=1)[1]) == 1


def test_an_update_and_an_insert_write_what_save_writes():
    repository = create_repository("demo")
    stream = Stream.objects.get(repository=repository)
    now = timezone.now()
    move = Update(Stream, ("head", "updated"), where=("id", "version"), increment=("version",))
    assert move.run("a" * 40, now, stream.pk, stream.version + 1) == 0  # the version named is not the row's
    assert move.run("a" * 40, now, stream.pk, stream.version) == 1
    moved = Stream.objects.get(pk=stream.pk)
    assert (moved.head, moved.version, moved.updated) == ("a" * 40, stream.version + 1, now)
    event = Insert(Event).run(Event(repository=repository, seq=7, kind="k", payload={"a": [1, "b"]}))
    stored = Event.objects.get(pk=event.pk)
    assert (stored.seq, stored.kind, stored.payload) == (7, "k", {"a": [1, "b"]}) and stored.created == event.created
    with pytest.raises(IntegrityError), transaction.atomic():  # (repository, seq) is unique
        Insert(Event).run(Event(repository=repository, seq=7, kind="k", payload={}))


def test_inserting_many_leaves_out_the_rows_already_there_as_bulk_create_ignoring_conflicts_does():
    repository = create_repository("demo")
    first = PathChange(repository=repository, key=1, generation=1, commit_id="a" * 40)
    InsertMany(PathChange).run([first])
    again = PathChange(repository=repository, key=1, generation=1, commit_id="a" * 40)
    InsertMany(PathChange).run([again, PathChange(repository=repository, key=2, generation=1, commit_id="a" * 40)])
    InsertMany(PathChange).run([])
    assert sorted(PathChange.objects.values_list("key", "generation", "commit_id")) == [
        (1, 1, "a" * 40),
        (2, 1, "a" * 40),
    ]
