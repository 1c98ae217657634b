"""Ensure an admin account exists, then print where to browse and how to log in.

``make serve`` runs this just before starting the server, so the login is on
screen every time, with an API token of the admin (credential "make serve") to try the
API with. Tokens are stored hashed, so the plaintext is kept in a 0600 file under the data
directory, like the admin password; a token that no longer works is replaced.
"""

from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from agentgit_site.secretfile import read_or_create_secret, write_secret
from repos.errors import Unauthenticated
from repos.models import Credential
from repos.services.credentials import authenticate_token, create_credential

ADMIN_USERNAME = "admin"
TOKEN_NAME = "make serve"


class Command(BaseCommand):
    help = "Create the admin superuser on first run and print the URLs and login."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args, host: str, port: int, **options) -> None:
        password_file = settings.AGENTGIT["DATA_DIR"] / "admin-password"
        password = self._ensure_admin(password_file)
        token = self._ensure_token(settings.AGENTGIT["DATA_DIR"] / "serve-token")
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
            f"Token:     {token}",
            f'Try:       curl -H "Authorization: Bearer {token}" {base}/api/v1/repos',
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

    def _ensure_token(self, token_file: Path) -> str:
        """Return the token in ``token_file`` if it still authenticates the admin with every
        scope; otherwise create a new credential and store its token there."""
        try:
            token = token_file.read_text().strip()
            credential = authenticate_token(token)
            if credential.user.get_username() == ADMIN_USERNAME and credential.has_scope("admin"):
                return token
        except (FileNotFoundError, Unauthenticated):
            pass
        admin = get_user_model().objects.get(username=ADMIN_USERNAME)
        _credential, token = create_credential(admin, list(Credential.SCOPES), name=TOKEN_NAME)
        write_secret(token_file, token)
        return token
