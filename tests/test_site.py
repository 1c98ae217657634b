"""The site as served: health check, database durability settings, admin, a real server."""

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def test_healthz_answers_ok_json(client):
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"status": "ok"}


def test_home_page_links_to_admin(client):
    response = client.get("/")

    assert response.status_code == 200
    assert b'href="/admin/"' in response.content


@pytest.mark.django_db
def test_sqlite_connection_is_wal_with_full_sync_and_busy_timeout():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite-only settings")
    assert _pragma("journal_mode") == "wal"
    assert _pragma("synchronous") == 2  # FULL
    assert _pragma("busy_timeout") > 0


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_uvicorn_serves_healthz_over_http(tmp_path):
    env = {
        **os.environ,
        "AGENTGIT_DATA_DIR": str(tmp_path / "data"),
        "DJANGO_SETTINGS_MODULE": "agentgit_site.settings",
    }
    env.pop("DATABASE_URL", None)
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert migrate.returncode == 0, migrate.stderr
    port = _free_port()
    log = tmp_path / "uvicorn.log"
    with log.open("wb") as log_file:
        server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "agentgit_site.asgi:application",
             "--host", "127.0.0.1", "--port", str(port), "--lifespan", "off"],
            cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT,
        )
    try:
        body = _get_when_up(f"http://127.0.0.1:{port}/healthz", server, log, deadline_s=30)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    assert body == b'{"status": "ok"}'


def _get_when_up(url: str, server: subprocess.Popen, log: Path, deadline_s: float) -> bytes:
    """GET ``url`` once the server accepts connections; fail with its log otherwise."""
    # Bypass any http_proxy from the environment: the server is on loopback.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + deadline_s
    while True:
        if server.poll() is not None:
            pytest.fail(f"server exited with {server.returncode}:\n{log.read_text()}")
        try:
            with opener.open(url, timeout=2) as response:
                return response.read()
        except urllib.error.HTTPError:
            raise
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"no answer within {deadline_s}s:\n{log.read_text()}")
            time.sleep(0.1)
