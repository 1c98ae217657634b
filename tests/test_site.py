"""The site as served: health check, database durability settings, admin, a real server."""

import os
import subprocess
import sys
import threading
import time

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.sessions.backends.db import SessionStore
from django.core.management import call_command
from django.db import IntegrityError, connection, connections, transaction
from django.http import HttpResponse

from agentgit_site.middleware import (
    WebAuthenticationMiddleware,
    WebCsrfViewMiddleware,
    WebMessageMiddleware,
    WebSessionMiddleware,
)
from tests.deployment import BASE_DIR, POSTGRES_ADMIN_URL, Deployment


def test_healthz_answers_ok_json(client):
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"status": "ok"}


@pytest.mark.parametrize(
    ("middleware", "marked"),
    [
        (WebSessionMiddleware, lambda request: hasattr(request, "session")),
        (WebCsrfViewMiddleware, lambda request: "CSRF_COOKIE" in request.META),
        (WebAuthenticationMiddleware, lambda request: hasattr(request, "user")),
        (WebMessageMiddleware, lambda request: hasattr(request, "_messages")),
    ],
)
def test_the_web_ui_middleware_pass_api_requests_straight_on(middleware, marked, rf):
    def answered(path: str):
        request = rf.get(path)
        request.COOKIES["csrftoken"] = "a" * 32
        if middleware is not WebSessionMiddleware:
            request.session = SessionStore()  # what the auth and messages middleware read
        middleware(lambda request: HttpResponse())(request)
        return request

    assert marked(answered("/repos/"))
    assert not marked(answered("/api/v1/repos/demo/streams/main"))


@pytest.mark.django_db
def test_home_page_sends_an_anonymous_visitor_to_log_in(client):
    response = client.get("/")

    assert response.status_code == 302 and response["Location"] == "/login?next=/"
    assert b'name="csrfmiddlewaretoken"' in client.get("/login").content


@pytest.mark.django_db
def test_sqlite_connection_is_wal_with_full_sync_and_busy_timeout():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite-only settings")
    assert _pragma("journal_mode") == "wal"
    assert _pragma("synchronous") == 2  # FULL
    assert _pragma("busy_timeout") > 0


#: Run by the production settings against PostgreSQL: one statement with a parameter, then what
#: this session holds prepared.
_PREPARED_SCRIPT = """
import django
django.setup()
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("SELECT %s::integer + 1 AS answer", [41])
    assert cursor.fetchone() == (42,)
    cursor.execute("SELECT statement FROM pg_prepared_statements")
    print(sum("answer" in statement for (statement,) in cursor.fetchall()))
"""


@pytest.mark.parametrize("switch, prepared", [(None, "1"), ("0", "0")])
def test_postgresql_statements_are_prepared_unless_switched_off(tmp_path, switch, prepared):
    """With DATABASE_URL, PostgreSQL prepares each statement a connection runs (docs/adr/0030);
    AGENTGIT_DB_PREPARED=0, for a transaction-mode pooler such as pgbouncer, keeps Django's
    client-side binding, which prepares nothing."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AGENTGIT_", "DJANGO_", "DATABASE_", "PROMETHEUS_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="agentgit_site.settings",
        DATABASE_URL=POSTGRES_ADMIN_URL,
        AGENTGIT_DATA_DIR=str(tmp_path),
        **({"AGENTGIT_DB_PREPARED": switch} if switch is not None else {}),
    )
    done = subprocess.run(
        [sys.executable, "-c", _PREPARED_SCRIPT], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == prepared


@pytest.mark.django_db(transaction=True)
def test_sqlite_writers_take_turns_and_a_failed_transaction_lets_the_next_one_in():
    """Write transactions queue on the writer lock (agentgit_site/sqlite); whatever way one ends
    — commit, rollback after an error — the next writer gets in."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite-only backend")
    User = get_user_model()
    order: list[str] = []
    inside = threading.Event()

    def first() -> None:
        with transaction.atomic():
            User.objects.create(username="first")
            inside.set()
            time.sleep(0.3)  # the second writer arrives meanwhile and must wait
            order.append("first committed")
        connections.close_all()

    def second() -> None:
        inside.wait(5)
        with transaction.atomic():
            order.append("second began")
            User.objects.create(username="second")
        connections.close_all()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert order == ["first committed", "second began"]

    with pytest.raises(IntegrityError), transaction.atomic():
        User.objects.create(username="first")  # taken: rolled back
    done = threading.Event()

    def after_rollback() -> None:
        with transaction.atomic():
            User.objects.create(username="third")
        connections.close_all()
        done.set()

    threading.Thread(target=after_rollback).start()
    assert done.wait(5), "the rolled-back transaction kept the writer lock"
    assert set(User.objects.values_list("username", flat=True)) == {"first", "second", "third"}


@pytest.fixture
def pooled():
    """This test database's raw SQLite connection, just closed into the pool (a request's end)."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite-only backend")
    connection.ensure_connection()
    raw = connection.connection
    connection.close()
    return raw


@pytest.mark.django_db(transaction=True)
def test_sqlite_connections_are_reused_unless_closed_inside_a_transaction(pooled):
    first = pooled
    connection.ensure_connection()
    assert connection.connection is first  # the pooled one: no new file open, no setup again

    # A connection left inside a transaction (a request that died half-way) is not reused.
    first.execute("BEGIN IMMEDIATE")
    first.execute("INSERT INTO auth_group (name) VALUES ('never committed')")
    connection.close()
    connection.ensure_connection()
    assert connection.connection is not first
    assert not Group.objects.filter(name="never committed").exists()


@pytest.mark.django_db(transaction=True)
def test_a_forked_child_opens_its_own_sqlite_connection(pooled):
    """Celery's prefork workers fork: a child must never use a connection of its parent's pool."""
    parents = pooled
    pid = os.fork()
    if pid == 0:  # the child
        try:
            connection.ensure_connection()
            own = connection.connection is not parents
            own = own and Group.objects.count() >= 0  # and it works
            os._exit(0 if own else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    connection.ensure_connection()
    assert connection.connection is parents  # the parent's pool is still its own


def _pragma(name: str):
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA {name}")
        return cursor.fetchone()[0]


def test_admin_login_page_renders_with_static_css(client):
    response = client.get("/admin/login/")

    assert response.status_code == 200
    assert b'name="password"' in response.content
    assert b'href="/static/admin/css/base.css"' in response.content
    assert client.get("/static/admin/css/base.css").status_code == 200


@pytest.mark.django_db
def test_serve_info_creates_admin_once_and_prints_its_login(settings, tmp_path, capsys):
    settings.AGENTGIT = {**settings.AGENTGIT, "DATA_DIR": tmp_path}

    call_command("agentgit_serve_info", "--port", "8123")
    first = capsys.readouterr().out
    call_command("agentgit_serve_info", "--port", "8123")
    second = capsys.readouterr().out

    password_file = tmp_path / "admin-password"
    password = password_file.read_text().strip()
    assert password_file.stat().st_mode & 0o777 == 0o600
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.check_password(password)
    assert first == second
    assert "http://127.0.0.1:8123/admin/" in first
    assert f"admin / {password}" in first


@pytest.mark.django_db
def test_serve_info_says_when_the_stored_password_is_stale(settings, tmp_path, capsys):
    settings.AGENTGIT = {**settings.AGENTGIT, "DATA_DIR": tmp_path}
    get_user_model().objects.create_superuser("admin", password="set-by-hand")

    call_command("agentgit_serve_info")

    out = capsys.readouterr().out
    assert "no longer matches" in out
    assert (tmp_path / "admin-password").read_text().strip() not in out


def test_uvicorn_serves_healthz_and_static_files_over_http():
    with Deployment("embedded") as server:  # migrates a fresh data directory, then starts uvicorn
        server.manage("collectstatic", "--noinput", "-v", "0")
        server.start_server()
        answer = httpx.get(f"{server.url}/healthz", timeout=10, trust_env=False)
        css = httpx.get(f"{server.url}/static/admin/css/base.css", timeout=10, trust_env=False)
        missing = httpx.get(f"{server.url}/static/admin/css/no-such.css", timeout=10, trust_env=False)
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert b"body" in css.content
    assert missing.status_code == 404
