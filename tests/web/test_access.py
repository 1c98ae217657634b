"""Who sees what: session login (rate limited), per-repository access, 404 not 403, tokens ignored,
CSRF on forms and the security headers on every page."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from repos.models import RepositoryAccess
from repos.services.access import grant_access, revoke_access
from tests.factories import CredentialFactory, UserFactory
from tests.web.conftest import PASSWORD

pytestmark = pytest.mark.django_db(transaction=True)


def pages(sample) -> list[str]:
    """One URL of every page of the repository ``demo``."""
    r = sample.repository.name
    return [
        f"/repos/{r}/",
        f"/repos/{r}/tree/main",
        f"/repos/{r}/tree/main/src",
        f"/repos/{r}/blob/main/src/app.py",
        f"/repos/{r}/raw/main/src/app.py",
        f"/repos/{r}/blame/main/src/app.py",
        f"/repos/{r}/find/main?q=app",
        f"/repos/{r}/log/main",
        f"/repos/{r}/log/main?path=src/app.py",
        f"/repos/{r}/changeset/{sample.second}",
        f"/repos/{r}/compare/",
        f"/repos/{r}/compare/{sample.base}..main",
        f"/repos/{r}/proposals/",
        f"/repos/{r}/proposals/{sample.conflicted}",
        f"/repos/{r}/activity/",
        f"/repos/{r}/activity/events?after=999999&timeout=0",
    ]


def test_an_anonymous_visitor_is_sent_to_log_in_from_every_page(sample):
    client = Client()
    for url in ["/", *pages(sample)]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/login?next="), url


def test_a_user_without_access_gets_404_like_for_a_repository_that_does_not_exist(sample, stranger):
    for url in pages(sample):
        assert stranger.get(url).status_code == 404, url
    missing = stranger.get("/repos/no-such-repo/")
    assert missing.status_code == 404
    # The two answers cannot be told apart (but for the logout form's fresh CSRF token).
    hidden = stranger.get("/repos/demo/").content.decode()
    assert without_tokens(hidden) == without_tokens(missing.content.decode())
    assert b"demo" not in stranger.get("/").content


def test_a_reader_sees_every_page_and_only_granted_repositories(reader, sample):
    from repos.services.repositories import create_repository

    create_repository("other")
    for url in pages(sample):
        response = reader.get(url)
        assert response.status_code == 200, (url, response.content[:500])
    home = reader.get("/").content.decode()
    assert 'href="/repos/demo/"' in home and "/repos/other/" not in home
    assert reader.get("/repos/other/").status_code == 404


def test_a_superuser_reads_every_repository_without_grants(sample):
    admin = UserFactory(username="root", is_superuser=True, is_staff=True)
    client = Client()
    client.force_login(admin)
    assert client.get("/repos/demo/").status_code == 200
    assert RepositoryAccess.objects.count() == 0


def test_revoking_access_takes_effect_on_the_next_request(reader, person, sample):
    assert reader.get("/repos/demo/").status_code == 200
    assert revoke_access(person, sample.repository) is True
    assert reader.get("/repos/demo/").status_code == 404
    assert revoke_access(person, sample.repository) is False
    first = grant_access(person, sample.repository)
    assert grant_access(person, sample.repository).pk == first.pk  # granting twice keeps one row


def test_a_token_logs_nobody_into_the_web_ui(sample):
    credential = CredentialFactory(scopes=["read", "write", "integrate", "admin"])
    grant_access(credential.user, sample.repository)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {credential.token}")
    assert client.get("/repos/demo/").status_code == 302
    assert client.get("/").status_code == 302


def test_logging_in_with_a_password_starts_a_session_and_logging_out_ends_it(person, sample):
    grant_access(person, sample.repository)
    client = Client(enforce_csrf_checks=True)
    form = client.get("/login?next=/repos/demo/")
    token = csrf_token(form.content.decode())
    wrong = client.post("/login", {"username": "pat", "password": "nope", "csrfmiddlewaretoken": token})
    assert wrong.status_code == 200 and b"Please enter a correct" in wrong.content
    right = client.post(
        "/login", {"username": "pat", "password": PASSWORD, "next": "/repos/demo/", "csrfmiddlewaretoken": token}
    )
    assert right.status_code == 302 and right["Location"] == "/repos/demo/"
    page = client.get("/repos/demo/")
    assert page.status_code == 200
    out = client.post("/logout", {"csrfmiddlewaretoken": csrf_token(page.content.decode())})
    assert out.status_code == 302
    assert client.get("/repos/demo/").status_code == 302


def test_login_and_logout_refuse_a_post_without_the_csrf_token(person):
    client = Client(enforce_csrf_checks=True)
    assert client.post("/login", {"username": "pat", "password": PASSWORD}).status_code == 403
    client.force_login(person)
    assert client.post("/logout").status_code == 403


def test_an_open_redirect_after_login_is_refused(person):
    client = Client()
    response = client.post("/login", {"username": "pat", "password": PASSWORD, "next": "https://evil.example/"})
    assert response.status_code == 302 and response["Location"] == "/"


def test_login_attempts_are_limited_per_user_name(person, settings):
    settings.AGENTGIT = {**settings.AGENTGIT, "LOGIN_RATE_USER": "3/m", "LOGIN_RATE_ADDRESS": "100/m"}
    for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        guess = Client(REMOTE_ADDR=address).post("/login", {"username": "PAT", "password": "guess"})
        assert guess.status_code == 200
    # A fourth address, and even the right password: the name is over its rate.
    blocked = Client(REMOTE_ADDR="10.0.0.4").post("/login", {"username": "pat", "password": PASSWORD})
    assert blocked.status_code == 429 and b"Too many login attempts" in blocked.content
    assert "_auth_user_id" not in blocked.wsgi_request.session


def test_login_attempts_are_limited_per_client_address(person, settings):
    settings.AGENTGIT = {**settings.AGENTGIT, "LOGIN_RATE_USER": "100/m", "LOGIN_RATE_ADDRESS": "3/m"}
    client = Client(REMOTE_ADDR="10.0.0.9")
    for name in ("a", "b", "c"):
        assert client.post("/login", {"username": name, "password": "guess"}).status_code == 200
    assert client.post("/login", {"username": "pat", "password": PASSWORD}).status_code == 429
    assert Client(REMOTE_ADDR="10.0.0.10").post("/login", {"username": "pat", "password": PASSWORD}).status_code == 302


def test_every_page_sends_the_security_headers_and_forms_carry_csrf_tokens(reader, sample):
    for url in ["/", "/login", *pages(sample), "/repos/nothing/"]:
        response = reader.get(url)
        policy = response["Content-Security-Policy"]
        # Scripts from this origin's files only (raw files: none at all, in a sandbox).
        assert "unsafe-inline" not in policy and ("script-src 'self'" in policy or "default-src 'none'" in policy), url
        assert response["X-Content-Type-Options"] == "nosniff", url
        assert response["Referrer-Policy"] == "same-origin", url
        if response.get("Content-Type", "").startswith("text/html"):
            html = response.content.decode()
            assert "<script>" not in html, url  # scripts come as files: <script src=... defer>
            for form in re.findall(r"<form[^>]*method=\"post\"[^>]*>.*?</form>", html, flags=re.S):
                assert 'name="csrfmiddlewaretoken"' in form, url
    raw = reader.get(f"/repos/{sample.repository.name}/raw/main/src/app.py")
    assert raw["Content-Security-Policy"].startswith("sandbox")


def csrf_token(html: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)


def without_tokens(html: str) -> str:
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "", html)
