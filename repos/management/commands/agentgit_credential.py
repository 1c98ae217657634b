"""Create, revoke and list API credentials from the shell.

    manage.py agentgit_credential create --user NAME --scopes read,write,integrate[,admin]
                                         [--name LABEL] [--rate R --burst B]
    manage.py agentgit_credential revoke --prefix PREFIX
    manage.py agentgit_credential list

``create`` prints the new token alone on its last line, so scripts can take it with
``| tail -n 1``.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from repos.errors import Invalid
from repos.models import Credential
from repos.services.credentials import create_credential, revoke_credential


class Command(BaseCommand):
    help = "Create, revoke or list API credentials (tokens)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="{create,revoke,list}")
        create = actions.add_parser("create", help="Create a credential and print its token (once).")
        create.add_argument("--user", required=True, help="User name; created (without a password) if new.")
        create.add_argument("--scopes", required=True, help=f"Comma-separated, of: {', '.join(Credential.SCOPES)}.")
        create.add_argument("--name", default="", help="A label to tell credentials apart.")
        create.add_argument("--rate", type=float, help="Requests per second for this credential.")
        create.add_argument("--burst", type=int, help="Token bucket size for this credential.")
        revoke = actions.add_parser("revoke", help="Revoke the credential whose token starts with PREFIX.")
        revoke.add_argument("--prefix", required=True, help="The token prefix that 'list' shows.")
        actions.add_parser("list", help="List credentials (never their tokens).")

    def handle(self, *args, action: str, **options) -> None:
        getattr(self, f"_{action}")(**options)

    def _create(self, *, user: str, scopes: str, name: str, rate: float | None, burst: int | None, **_) -> None:
        scope_list = [s.strip() for s in scopes.split(",") if s.strip()]
        try:
            # One transaction: a refused credential leaves no new user behind.
            with transaction.atomic():
                owner = get_user_model().objects.filter(username=user).first()
                if owner is None:
                    owner = get_user_model().objects.create_user(username=user)  # unusable password
                credential, token = create_credential(owner, scope_list, name=name, rate=rate, burst=burst)
        except Invalid as error:
            raise CommandError(error.message) from None
        self.stdout.write(
            f"Created credential {credential.name or '(unnamed)'} for user {owner.get_username()}"
            f" with scopes {','.join(credential.scopes)} (prefix {credential.token_prefix})."
        )
        self.stdout.write("The token is shown only this once:")
        self.stdout.write(token)

    def _revoke(self, *, prefix: str, **_) -> None:
        matches = list(Credential.objects.filter(token_prefix=prefix))
        if not matches:
            raise CommandError(f"no credential with the prefix {prefix!r} (see: agentgit_credential list)")
        if len(matches) > 1:
            raise CommandError(f"{len(matches)} credentials share the prefix {prefix!r}; revoke them in the admin")
        credential = matches[0]
        if credential.revoked is not None:
            self.stdout.write(f"{credential} was already revoked at {credential.revoked:%Y-%m-%d %H:%M:%S}.")
            return
        revoke_credential(credential)
        self.stdout.write(f"Revoked {credential}.")

    def _list(self, **_) -> None:
        rows = [("PREFIX", "USER", "NAME", "SCOPES", "CREATED", "LAST USED", "STATUS")]
        for c in Credential.objects.select_related("user").order_by("created"):
            rows.append(
                (
                    c.token_prefix,
                    c.user.get_username(),
                    c.name or "-",
                    ",".join(c.scopes),
                    f"{c.created:%Y-%m-%d %H:%M}",
                    f"{c.last_used:%Y-%m-%d %H:%M}" if c.last_used else "never",
                    "revoked" if c.revoked else "active",
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            self.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
