"""Ensure an admin account exists, then print where to browse and how to log in.

``make serve`` runs this just before starting the server, so the login is on
screen every time. The API token shown to a first-time user belongs in the same
summary once credentials exist.
"""

from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from agentgit_site.secretfile import read_or_create_secret

ADMIN_USERNAME = "admin"


class Command(BaseCommand):
    help = "Create the admin superuser on first run and print the URLs and login."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args, host: str, port: int, **options) -> None:
        password_file = settings.AGENTGIT["DATA_DIR"] / "admin-password"
        password = self._ensure_admin(password_file)
        # A bare IPv6 address needs brackets inside a URL.
        base = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        if password:
            login = f"{ADMIN_USERNAME} / {password}"
        else:
            login = (
                f"{ADMIN_USERNAME} (the password in {password_file} no longer matches;"
                f" set one with: manage.py changepassword {ADMIN_USERNAME})"
            )
        lines = [
            f"AgentGit:  {base}/",
            f"Admin:     {base}/admin/",
            f"Login:     {login}",
        ]
        self.stdout.write("\n".join(lines))

    def _ensure_admin(self, password_file: Path) -> str | None:
        """Return the admin password from ``password_file``, or None if it no longer works."""
        User = get_user_model()
        password = read_or_create_secret(password_file, nbytes=18)
        user = User.objects.filter(username=ADMIN_USERNAME).first()
        if user is None:
            User.objects.create_superuser(ADMIN_USERNAME, email="", password=password)
            return password
        return password if user.check_password(password) else None
