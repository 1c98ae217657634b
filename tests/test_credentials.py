"""Credentials: tokens shown once and stored hashed, authentication, scopes, revocation, and the
ways to make them (service, management command, admin, make serve)."""

from __future__ import annotations

import base64
import re
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import RequestFactory
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from repos.api.authentication import BearerTokenAuthentication, TokenBasicAuthentication
from repos.errors import Forbidden, Invalid, NotFound, Unauthenticated
from repos.models import Changeset, Credential, Event, Operation, Proposal, Repository, Stream
from repos.services import credentials as credentials_service
from repos.services.credentials import (
    authenticate_token,
    create_credential,
    hash_token,
    require_paths,
    require_repository,
    require_scope,
    require_stream,
    revoke_credential,
)
from tests.factories import CredentialFactory, UserFactory

TOKEN = re.compile(r"agt_[A-Za-z0-9_-]{43}")


def database_text() -> str:
    """Every row of every table, as text: to prove a token was never written anywhere."""
    rows = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            rows += [repr(row) for row in cursor.fetchall()]
    return "\n".join(rows)


# Service -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_token_is_returned_once_and_only_its_hash_is_stored():
    user = UserFactory()

    credential, token = create_credential(user, ["write", "read"], name="ci", rate=5.0, burst=10)

    assert TOKEN.fullmatch(token)
    stored = Credential.objects.get(pk=credential.pk)
    assert stored.token_hash == hash_token(token) and len(stored.token_hash) == 64
    assert stored.token_prefix == token[:12]
    assert stored.scopes == ["read", "write"]  # canonical order
    assert (stored.name, stored.rate, stored.burst) == ("ci", 5.0, 10)
    assert token not in database_text()
    assert create_credential(user, ["read"])[1] != token


@pytest.mark.django_db
def test_authenticate_returns_the_credential_of_its_token():
    credential = CredentialFactory()

    found = authenticate_token(credential.token)

    assert found == credential and found.user == credential.user


@pytest.mark.django_db
@pytest.mark.parametrize("token", ["", "agt_nope", "not a token at all"])
def test_an_unknown_token_is_unauthenticated(token):
    CredentialFactory()

    with pytest.raises(Unauthenticated, match="invalid or revoked token"):
        authenticate_token(token)


@pytest.mark.django_db
def test_a_revoked_token_is_unauthenticated_with_the_same_message():
    credential = CredentialFactory()

    revoke_credential(credential)
    revoked_at = Credential.objects.get(pk=credential.pk).revoked
    revoke_credential(Credential.objects.get(pk=credential.pk))  # twice: keeps the first time

    assert revoked_at is not None and Credential.objects.get(pk=credential.pk).revoked == revoked_at
    with pytest.raises(Unauthenticated, match="^invalid or revoked token$"):
        authenticate_token(credential.token)


@pytest.mark.django_db
def test_an_inactive_users_token_is_unauthenticated():
    credential = CredentialFactory(user=UserFactory(is_active=False))

    with pytest.raises(Unauthenticated):
        authenticate_token(credential.token)


@pytest.mark.django_db
@pytest.mark.parametrize("scopes", [["read", "push"], [], "read", ["READ"]])
def test_bad_scopes_are_invalid(scopes):
    with pytest.raises(Invalid, match="scope"):
        create_credential(UserFactory(), scopes)
    assert not Credential.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("rate, burst", [(0, None), (-1.0, None), (None, 0)])
def test_bad_rate_or_burst_is_invalid(rate, burst):
    with pytest.raises(Invalid):
        create_credential(UserFactory(), ["read"], rate=rate, burst=burst)


@pytest.mark.django_db
def test_scopes_are_checked_and_admin_implies_all():
    reader = CredentialFactory(scopes=["read"])
    admin_only = CredentialFactory(scopes=["admin"])

    require_scope(reader, "read")
    with pytest.raises(Forbidden, match="'write' scope"):
        require_scope(reader, "write")
    for scope in Credential.SCOPES:
        require_scope(admin_only, scope)
    with pytest.raises(ValueError):
        require_scope(admin_only, "push")


@pytest.mark.django_db
def test_last_used_is_recorded_but_not_written_on_every_request(django_assert_num_queries, monkeypatch):
    credential = CredentialFactory()
    assert credential.last_used is None

    first = authenticate_token(credential.token)
    used = Credential.objects.get(pk=credential.pk).last_used
    assert used is not None and first.last_used == used

    with django_assert_num_queries(0):  # kept in the process, and no UPDATE within the minute
        authenticate_token(credential.token)
    assert Credential.objects.get(pk=credential.pk).last_used == used

    later = used + timedelta(minutes=2)
    monkeypatch.setattr(credentials_service.timezone, "now", lambda: later)
    with django_assert_num_queries(1):  # the use is recorded again, from the kept credential
        assert authenticate_token(credential.token).last_used == later
    assert Credential.objects.get(pk=credential.pk).last_used == later
    with django_assert_num_queries(0):  # and the kept one knows it
        authenticate_token(credential.token)


@pytest.mark.django_db
def test_without_the_cache_every_request_looks_its_token_up(settings, django_assert_num_queries):
    settings.AGENTGIT = {**settings.AGENTGIT, "CREDENTIAL_CACHE": False}
    credential = CredentialFactory()
    authenticate_token(credential.token)
    with django_assert_num_queries(1):  # the lookup only: no UPDATE within the minute
        authenticate_token(credential.token)


@pytest.mark.django_db
def test_the_last_used_update_is_conditional():
    """A stale in-memory copy must not write when another request already did."""
    credential = CredentialFactory()
    authenticate_token(credential.token)
    written = Credential.objects.get(pk=credential.pk).last_used
    stale_copy = Credential.objects.get(pk=credential.pk)
    stale_copy.last_used = None

    from repos.services.credentials import _touch

    _touch(stale_copy)

    assert Credential.objects.get(pk=credential.pk).last_used == written


# DRF authentication --------------------------------------------------------------------------


def drf_request(authorization: str | None = None) -> Request:
    headers = {} if authorization is None else {"HTTP_AUTHORIZATION": authorization}
    return Request(APIRequestFactory().get("/api/v1/repos", **headers))


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.django_db
def test_bearer_authentication_gives_the_user_and_the_credential():
    credential = CredentialFactory()

    user, auth = BearerTokenAuthentication().authenticate(drf_request(f"Bearer {credential.token}"))

    assert user == credential.user and auth == credential


@pytest.mark.django_db
def test_basic_authentication_takes_the_token_as_password_with_any_user_name():
    credential = CredentialFactory()

    user, auth = TokenBasicAuthentication().authenticate(drf_request(basic("whoever", credential.token)))

    assert user == credential.user and auth == credential


@pytest.mark.django_db
def test_authentication_leaves_other_schemes_and_no_header_to_others():
    assert BearerTokenAuthentication().authenticate(drf_request()) is None
    assert BearerTokenAuthentication().authenticate(drf_request(basic("u", "agt_x"))) is None
    assert TokenBasicAuthentication().authenticate(drf_request("Bearer agt_x")) is None


@pytest.mark.django_db
@pytest.mark.parametrize(
    "authenticator, header",
    [
        (BearerTokenAuthentication, "Bearer"),
        (BearerTokenAuthentication, "Bearer two words"),
        (BearerTokenAuthentication, "Bearer agt_unknown"),
        (TokenBasicAuthentication, "Basic !!!not-base64"),
        (TokenBasicAuthentication, "Basic " + base64.b64encode(b"no-colon").decode()),
        (TokenBasicAuthentication, "Basic " + base64.b64encode(b"user:").decode()),
        (TokenBasicAuthentication, basic("user", "agt_unknown")),
    ],
)
def test_malformed_or_wrong_credentials_are_unauthenticated_and_leave_the_request_anonymous(authenticator, header):
    request = drf_request(header)

    with pytest.raises(Unauthenticated):
        authenticator().authenticate(request)

    # Marked unauthenticated, so reading request.user later does not authenticate (and raise) again.
    assert request.auth is None
    assert request.user is None or request.user.is_anonymous


@pytest.mark.django_db
def test_the_api_answers_401_with_a_challenge_and_accepts_bearer_and_basic(client):
    credential = CredentialFactory(scopes=["read"])

    missing = client.get("/api/v1/repos")
    wrong = client.get("/api/v1/repos", HTTP_AUTHORIZATION="Bearer agt_wrong")
    bearer = client.get("/api/v1/repos", HTTP_AUTHORIZATION=f"Bearer {credential.token}")
    basic_auth = client.get("/api/v1/repos", HTTP_AUTHORIZATION=basic("git", credential.token))

    for response in (missing, wrong):
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == 'Bearer realm="agentgit"'
        assert response.json()["error"]["code"] == "unauthenticated"
    assert wrong.json()["error"]["message"] == "invalid or revoked token"
    assert bearer.status_code == 200 and basic_auth.status_code == 200


def test_authenticate_header_names_the_realm():
    request = drf_request()
    assert BearerTokenAuthentication().authenticate_header(request) == 'Bearer realm="agentgit"'
    assert TokenBasicAuthentication().authenticate_header(request).startswith('Basic realm="agentgit"')


# Management command --------------------------------------------------------------------------


def run(*args: str) -> str:
    out = StringIO()
    call_command("agentgit_credential", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_create_command_prints_the_token_alone_on_its_last_line():
    out = run(
        "create",
        "--user",
        "robot",
        "--scopes",
        "read, write,integrate",
        "--name",
        "ci",
        "--rate",
        "2.5",
        "--burst",
        "5",
    )

    token = out.splitlines()[-1]
    assert TOKEN.fullmatch(token)
    credential = authenticate_token(token)
    assert credential.user.username == "robot" and not credential.user.has_usable_password()
    assert (credential.name, credential.scopes, credential.rate, credential.burst) == (
        "ci",
        ["read", "write", "integrate"],
        2.5,
        5,
    )
    assert "robot" in out and credential.token_prefix in out


@pytest.mark.django_db
def test_create_command_reuses_an_existing_user():
    user = UserFactory(username="alice")

    token = run("create", "--user", "alice", "--scopes", "admin").splitlines()[-1]

    assert authenticate_token(token).user == user
    assert get_user_model().objects.filter(username="alice").count() == 1


@pytest.mark.django_db
def test_create_command_rejects_bad_scopes_and_creates_nothing():
    with pytest.raises(CommandError, match="unknown scope 'push'"):
        run("create", "--user", "robot", "--scopes", "read,push")

    assert not Credential.objects.exists()
    assert not get_user_model().objects.filter(username="robot").exists()


@pytest.mark.django_db
def test_revoke_and_list_commands():
    keep, gone = CredentialFactory(name="keep"), CredentialFactory(name="gone")

    assert "Revoked" in run("revoke", "--prefix", gone.token_prefix)
    assert "already revoked" in run("revoke", "--prefix", gone.token_prefix)
    with pytest.raises(CommandError, match="no credential"):
        run("revoke", "--prefix", "agt_missing")
    listing = run("list")

    with pytest.raises(Unauthenticated):
        authenticate_token(gone.token)
    assert authenticate_token(keep.token) == keep
    lines = listing.splitlines()
    assert lines[0].startswith("PREFIX")
    assert any(keep.token_prefix in line and "active" in line for line in lines)
    assert any(gone.token_prefix in line and "revoked" in line for line in lines)
    assert keep.token not in listing


@pytest.mark.django_db
def test_create_command_holds_the_credential_to_repositories_streams_and_paths():
    out = run(
        "create", "--user", "robot", "--scopes", "read,write", "--repos", "a, b",
        "--streams", "agent/*", "--paths", "src/**,!src/gen/**",
    )  # fmt: skip

    credential = authenticate_token(out.splitlines()[-1])
    assert (credential.repositories, credential.streams, credential.paths) == (
        ["a", "b"],
        ["agent/*"],
        ["src/**", "!src/gen/**"],
    )
    assert "Held to the repositories a, b." in out and "Held to the paths src/**, !src/gen/**." in out
    listing = run("list")
    assert "REPOS" in listing.splitlines()[0]
    row = next(line for line in listing.splitlines() if credential.token_prefix in line)
    assert "a,b" in row and "agent/*" in row and "src/**,!src/gen/**" in row
    unscoped = CredentialFactory()
    row = next(line for line in run("list").splitlines() if unscoped.token_prefix in line)
    assert re.search(r"integrate\s+\*\s+\*\s+\*\s", row)  # held to nothing: everything


@pytest.mark.django_db
def test_create_command_refuses_a_bad_reach_naming_each_entry_and_creates_nothing():
    with pytest.raises(CommandError) as refused:
        run("create", "--user", "robot", "--scopes", "read", "--repos", "ok,../up", "--paths", "#comment")

    assert "repositories.1" in str(refused.value) and "paths.0" in str(refused.value)
    assert not get_user_model().objects.filter(username="robot").exists()


# Reach ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_empty_reach_is_no_limit():
    credential = CredentialFactory()

    require_repository(credential, "any")
    require_stream(credential, "any/stream")
    require_paths(credential, ["any/path"])
    assert (credential.repositories, credential.streams, credential.paths) == ([], [], [])


@pytest.mark.django_db
def test_the_reach_is_checked_and_stored_as_given():
    credential = CredentialFactory(repositories=["a", "b", "a"], streams=["agent/*"], paths=["src/"])

    stored = Credential.objects.get(pk=credential.pk)
    assert (stored.repositories, stored.streams, stored.paths) == (["a", "b"], ["agent/*"], ["src/"])
    with pytest.raises(Invalid) as refused:
        create_credential(UserFactory(), ["read"], repositories="a", streams=["ok", ""], paths=[3])
    assert [detail["field"] for detail in refused.value.details] == ["repositories", "streams.1", "paths"]


@pytest.mark.django_db
def test_a_repository_out_of_reach_is_not_found_with_the_message_of_a_missing_one():
    credential = CredentialFactory(repositories=["a"])

    require_repository(credential, "a")
    with pytest.raises(NotFound, match="^no repository named 'b'$"):
        require_repository(credential, "b")


@pytest.mark.django_db
def test_streams_and_paths_out_of_reach_are_forbidden_naming_them():
    credential = CredentialFactory(streams=["agent/*", "release/**"], paths=["src/**", "!src/vendor/**", "*.md"])

    require_stream(credential, "agent/one")
    require_stream(credential, "release/1/2")
    with pytest.raises(Forbidden, match="'agent': its streams are agent/\\*, release/\\*\\*"):
        require_stream(credential, "agent")
    require_paths(credential, ["src/a.py", "docs/README.md"])
    with pytest.raises(Forbidden) as refused:
        require_paths(credential, ["src/vendor/x", "src/ok", "bin/run"])
    assert [detail["path"] for detail in refused.value.details] == ["bin/run", "src/vendor/x"]
    assert "bin/run, src/vendor/x" in refused.value.message


@pytest.mark.django_db
def test_the_patterns_are_compiled_once_per_list_not_per_request():
    credentials_service._path_patterns.cache_clear()
    first, second = CredentialFactory(paths=["src/**"]), CredentialFactory(paths=["src/**"])

    for credential in (first, second, authenticate_token(first.token)):
        require_paths(credential, ["src/a"])

    assert credentials_service._path_patterns.cache_info().misses == 1


# make serve ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_serve_info_prints_a_working_admin_token_kept_in_a_private_file(settings, tmp_path):
    settings.AGENTGIT = {**settings.AGENTGIT, "DATA_DIR": tmp_path}

    first = StringIO()
    call_command("agentgit_serve_info", "--port", "8123", stdout=first)
    token_file = tmp_path / "serve-token"
    token = token_file.read_text().strip()
    second = StringIO()
    call_command("agentgit_serve_info", "--port", "8123", stdout=second)

    assert token_file.stat().st_mode & 0o777 == 0o600
    assert f"Token:     {token}" in first.getvalue()
    assert f'-H "Authorization: Bearer {token}" http://127.0.0.1:8123/api/v1/repos' in first.getvalue()
    assert second.getvalue() == first.getvalue()
    credential = authenticate_token(token)
    assert credential.user.username == "admin" and credential.name == "make serve"
    assert credential.scopes == list(Credential.SCOPES)
    assert Credential.objects.count() == 1


@pytest.mark.django_db
def test_serve_info_replaces_a_revoked_token(settings, tmp_path):
    settings.AGENTGIT = {**settings.AGENTGIT, "DATA_DIR": tmp_path}
    call_command("agentgit_serve_info", stdout=StringIO())
    old = (tmp_path / "serve-token").read_text().strip()
    revoke_credential(authenticate_token(old))

    out = StringIO()
    call_command("agentgit_serve_info", stdout=out)

    new = (tmp_path / "serve-token").read_text().strip()
    assert new != old and f"Token:     {new}" in out.getvalue()
    assert authenticate_token(new).name == "make serve"
    assert (tmp_path / "serve-token").stat().st_mode & 0o777 == 0o600


# Admin ---------------------------------------------------------------------------------------


@pytest.fixture
def admin_client(client, db):
    client.force_login(get_user_model().objects.create_superuser("boss", password="x"))
    return client


def test_admin_add_creates_a_credential_and_shows_its_token_once(admin_client):
    owner = UserFactory(username="agent-7")

    response = admin_client.post(
        "/admin/repos/credential/add/",
        {"user": owner.pk, "name": "agent", "scopes": ["write", "read"], "rate": "", "burst": "3"},
        follow=True,
    )

    assert response.status_code == 200 and response.redirect_chain
    tokens = TOKEN.findall(response.content.decode())
    assert len(set(tokens)) == 1
    credential = authenticate_token(tokens[0])
    assert (credential.user, credential.name, credential.scopes, credential.rate, credential.burst) == (
        owner,
        "agent",
        ["read", "write"],
        None,
        3,
    )
    again = admin_client.get(response.redirect_chain[-1][0])  # the same page, loaded again
    assert again.status_code == 200
    assert tokens[0] not in again.content.decode()
    assert tokens[0] not in database_text()


def test_admin_add_holds_the_credential_to_its_reach_and_lists_it(admin_client):
    owner = UserFactory(username="agent-8")
    form = {"user": owner.pk, "name": "held", "scopes": ["read"], "rate": "", "burst": ""}

    refused = admin_client.post(
        "/admin/repos/credential/add/", {**form, "repositories": "ok\n../up", "streams": "", "paths": "#x"}
    )
    response = admin_client.post(
        "/admin/repos/credential/add/",
        {**form, "repositories": "a\n b \n", "streams": "agent/*", "paths": "src/**\n!src/gen/**"},
        follow=True,
    )

    assert refused.status_code == 200 and "does not end in" in refused.content.decode()
    assert "not a gitignore-style path pattern" in refused.content.decode()
    token = TOKEN.findall(response.content.decode())[0]
    credential = authenticate_token(token)
    assert (credential.repositories, credential.streams, credential.paths) == (
        ["a", "b"],
        ["agent/*"],
        ["src/**", "!src/gen/**"],
    )
    listing = admin_client.get("/admin/repos/credential/").content.decode()
    assert "repositories: a, b; streams: agent/*; paths: src/**, !src/gen/**" in listing


def test_admin_add_form_has_scope_checkboxes_and_refuses_no_scope(admin_client):
    page = admin_client.get("/admin/repos/credential/add/").content.decode()
    for scope in Credential.SCOPES:
        assert f'type="checkbox" name="scopes" value="{scope}"' in page
    assert 'name="token_hash"' not in page

    response = admin_client.post("/admin/repos/credential/add/", {"user": UserFactory().pk, "name": "x"})

    assert response.status_code == 200  # the form again, with the error
    assert not Credential.objects.exists()


def test_admin_change_page_does_not_offer_the_hash(admin_client):
    credential = CredentialFactory()

    page = admin_client.get(f"/admin/repos/credential/{credential.pk}/change/").content.decode()

    assert credential.token_prefix in page
    assert credential.token_hash not in page


def test_admin_revoke_action_revokes(admin_client):
    first, second, untouched = CredentialFactory(), CredentialFactory(), CredentialFactory()

    response = admin_client.post(
        "/admin/repos/credential/",
        {"action": "revoke", "_selected_action": [first.pk, second.pk]},
        follow=True,
    )

    assert response.status_code == 200 and "Revoked 2 credential(s)." in response.content.decode()
    for credential in (first, second):
        with pytest.raises(Unauthenticated):
            authenticate_token(credential.token)
    assert authenticate_token(untouched.token) == untouched


def test_admin_credential_list_and_search(admin_client):
    CredentialFactory(name="findme", user=UserFactory(username="searcher"))
    CredentialFactory(name="other")

    page = admin_client.get("/admin/repos/credential/", {"q": "searcher"}).content.decode()

    assert "findme" in page and "other" not in page


def test_admin_creates_repositories_through_the_service(admin_client):
    response = admin_client.post("/admin/repos/repository/add/", {"name": "demo"}, follow=True)

    assert response.status_code == 200
    repository = Repository.objects.get(name="demo")
    assert list(repository.streams.values_list("name", flat=True)) == ["main"]
    assert Event.objects.filter(repository=repository).exists()

    bad = admin_client.post("/admin/repos/repository/add/", {"name": "../escape"})
    assert bad.status_code == 200 and "repository name" in bad.content.decode()
    assert Repository.objects.count() == 1


@pytest.mark.parametrize("model", [Stream, Proposal, Operation, Event, Changeset])
def test_history_models_are_read_only_in_the_admin(admin_client, model):
    request = RequestFactory().get("/admin/")
    request.user = get_user_model().objects.get(username="boss")
    model_admin = admin.site._registry[model]

    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert not model_admin.has_delete_permission(request)
    assert model_admin.has_view_permission(request)
    url = f"/admin/repos/{model._meta.model_name}/"
    assert admin_client.get(url).status_code == 200
    assert admin_client.get(url + "add/").status_code == 403


def test_history_lists_render_with_rows(admin_client):
    from repos.services.repositories import create_repository

    create_repository("listed")

    for model in (Repository, Stream, Event):
        page = admin_client.get(f"/admin/repos/{model._meta.model_name}/").content.decode()
        assert "listed" in page


@pytest.mark.django_db
def test_a_kept_credential_is_looked_up_again_after_any_change_to_a_credential_or_user():
    credential = CredentialFactory(scopes=["read", "write"])
    assert authenticate_token(credential.token).scopes == ["read", "write"]  # now kept

    stored = Credential.objects.get(pk=credential.pk)
    stored.scopes = ["read"]
    stored.save()  # as the admin's form does
    assert authenticate_token(credential.token).scopes == ["read"]

    user = stored.user
    user.is_active = False
    user.save()
    with pytest.raises(Unauthenticated):
        authenticate_token(credential.token)


@pytest.mark.django_db
def test_an_unreadable_generation_means_every_request_looks_its_token_up(settings, django_assert_num_queries, caplog):
    settings.AGENTGIT = {**settings.AGENTGIT, "RATE_LIMIT_REDIS_URL": "redis://127.0.0.1:1/0"}
    credential = CredentialFactory()
    authenticate_token(credential.token)
    with django_assert_num_queries(1):
        authenticate_token(credential.token)
    assert "credential generation unreadable" in caplog.text
