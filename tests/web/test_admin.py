"""Django admin: repository access is granted and revoked there, through the access service;
credentials list their scopes as words; webhooks are added and removed through their service,
and check results and the delivery log are read-only (deliveries can be redelivered)."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client
from django.utils import timezone

from repos.models import CheckResult, RepositoryAccess, Webhook, WebhookAttempt, WebhookDelivery
from repos.services import webhooks
from repos.services.access import can_read
from repos.services.repositories import create_repository
from repos.services.webhooks import create_webhook
from tests.factories import CredentialFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client():
    client = Client()
    client.force_login(UserFactory(username="root", is_superuser=True, is_staff=True))
    return client


def test_access_is_granted_and_revoked_in_the_admin(admin_client, settings, tmp_path):
    settings.AGENTGIT = {**settings.AGENTGIT, "REPOS_DIR": tmp_path / "repos"}
    repository = create_repository("demo")
    person = UserFactory(username="pat")
    added = admin_client.post("/admin/repos/repositoryaccess/add/", {"user": person.pk, "repository": repository.pk})
    assert added.status_code == 302, added.content[:2000]
    assert can_read(person, repository)
    again = admin_client.post("/admin/repos/repositoryaccess/add/", {"user": person.pk, "repository": repository.pk})
    assert again.status_code == 200 and RepositoryAccess.objects.count() == 1  # refused: it exists
    listing = admin_client.get("/admin/repos/repositoryaccess/?q=pat").content.decode()
    assert "pat" in listing and "demo" in listing
    access = RepositoryAccess.objects.get()
    revoked = admin_client.post(
        "/admin/repos/repositoryaccess/", {"action": "revoke", "_selected_action": [access.pk]}, follow=True
    )
    assert b"Revoked 1 grant" in revoked.content
    assert not can_read(person, repository)
    assert admin_client.get(f"/admin/repos/repositoryaccess/{access.pk}/change/").status_code in (302, 404)


def test_credentials_show_their_scopes_as_words(admin_client):
    CredentialFactory(scopes=["read", "write"], name="ci")
    listing = admin_client.get("/admin/repos/credential/").content.decode()
    assert "read, write" in listing and "[&#x27;read&#x27;" not in listing


def test_a_credential_is_shown_read_only_and_never_edited_by_a_raw_save(admin_client):
    credential = CredentialFactory(scopes=["read"], name="ci")
    page = admin_client.get(f"/admin/repos/credential/{credential.pk}/change/").content.decode()
    assert "read" in page and 'name="scopes"' not in page and 'name="_save"' not in page
    refused = admin_client.post(
        f"/admin/repos/credential/{credential.pk}/change/", {"name": "renamed", "scopes": ["read", "admin"]}
    )
    assert refused.status_code == 403
    credential.refresh_from_db()
    assert credential.name == "ci" and credential.scopes == ["read"]


def test_webhooks_are_added_through_the_service_and_never_show_their_secret(admin_client, settings, tmp_path):
    settings.AGENTGIT = {**settings.AGENTGIT, "REPOS_DIR": tmp_path / "repos"}
    repository = create_repository("demo")
    form = {"repository": repository.pk, "url": "https://ci.example/hook", "secret": "s3cr3t-value", "events": ["*"]}
    refused = admin_client.post("/admin/repos/webhook/add/", {**form, "url": "ftp://ci.example/hook"})
    assert refused.status_code == 200 and not Webhook.objects.exists()
    added = admin_client.post("/admin/repos/webhook/add/", form)
    assert added.status_code == 302, added.content[:2000]
    hook = Webhook.objects.get()
    assert hook.secret == "s3cr3t-value" and hook.events == ["*"]
    repository.refresh_from_db()
    assert repository.webhooks == 1 and hook.cursor == repository.event_seq
    for page in (f"/admin/repos/webhook/{hook.pk}/change/", "/admin/repos/webhook/"):
        shown = admin_client.get(page).content.decode()
        assert "ci.example/hook" in shown and "s3cr3t-value" not in shown
    removed = admin_client.post(f"/admin/repos/webhook/{hook.pk}/delete/", {"post": "yes"})
    assert removed.status_code == 302
    repository.refresh_from_db()
    assert repository.webhooks == 0 and not Webhook.objects.exists()


def test_check_results_and_deliveries_are_listed_read_only(admin_client, settings, tmp_path):
    settings.AGENTGIT = {**settings.AGENTGIT, "REPOS_DIR": tmp_path / "repos"}
    repository = create_repository("demo")
    CheckResult.objects.create(repository=repository, tree="a" * 40, name="ci/<b>test</b>", state="failure")
    listing = admin_client.get("/admin/repos/checkresult/").content.decode()
    assert "ci/&lt;b&gt;test&lt;/b&gt;" in listing and "failure" in listing
    assert admin_client.get("/admin/repos/checkresult/add/").status_code == 403
    assert admin_client.get("/admin/repos/webhookdelivery/").status_code == 200


def test_a_failed_delivery_is_redelivered_from_the_admin(admin_client, settings, tmp_path):
    settings.AGENTGIT = {**settings.AGENTGIT, "REPOS_DIR": tmp_path / "repos"}
    repository = create_repository("demo")
    hook = create_webhook(repository, {"url": "https://ci.example/hook", "secret": "s", "events": ["*"]})
    failed = WebhookDelivery.objects.create(
        webhook=hook, guid=uuid.uuid4(), event_seq=1, event="repository.created", body="{}", state="failed",
        attempts=1, last_attempt=1,
    )  # fmt: skip
    WebhookAttempt.objects.create(
        delivery=failed, number=1, status_code=410, ok=False, error="answered 410 Gone", duration_ms=3,
        started=timezone.now(),
    )  # fmt: skip
    page = admin_client.get(f"/admin/repos/webhookdelivery/{failed.pk}/change/").content.decode()
    assert "answered 410 Gone" in page
    done = admin_client.post(
        "/admin/repos/webhookdelivery/", {"action": "redeliver", "_selected_action": [failed.pk]}, follow=True
    )
    assert b"Redelivering 1; 0 still pending." in done.content
    failed.refresh_from_db()
    assert failed.state == "pending" and failed.last_attempt == 1 + webhooks.ATTEMPTS
