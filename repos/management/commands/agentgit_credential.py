"""Create, revoke and list API credentials from the shell.

    manage.py agentgit_credential create --user NAME --scopes read,write,integrate[,admin]
                                         [--name LABEL] [--rate R --burst B]
                                         [--repos a,b] [--streams 'agent/*'] [--paths 'src/**']
    manage.py agentgit_credential revoke --prefix PREFIX
    manage.py agentgit_credential list

``create`` prints the new token alone on its last line, so scripts can take it with
``| tail -n 1``. ``--repos``, ``--streams`` and ``--paths`` (comma-separated) hold the credential to
those repositories, stream patterns and path patterns (README, "Scoped credentials").
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from repos.errors import Invalid
from repos.models import Credential
from repos.services.credentials import create_credential, revoke_credential, user_named


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
        create.add_argument("--repos", default="", help="Comma-separated repository names it reaches (default: all).")
        create.add_argument(
            "--streams", default="", help="Comma-separated stream patterns it may update (default: all)."
        )
        create.add_argument("--paths", default="", help="Comma-separated path patterns it may change (default: all).")
        revoke = actions.add_parser("revoke", help="Revoke the credential whose token starts with PREFIX.")
        revoke.add_argument("--prefix", required=True, help="The token prefix that 'list' shows.")
        actions.add_parser("list", help="List credentials (never their tokens).")

    def handle(self, *args, action: str, **options) -> None:
        getattr(self, f"_{action}")(**options)

    def _create(
        self,
        *,
        user: str,
        scopes: str,
        name: str,
        rate: float | None,
        burst: int | None,
        repos: str,
        streams: str,
        paths: str,
        **_,
    ) -> None:
        try:
            # One transaction: a refused credential leaves no new user behind.
            with transaction.atomic():
                owner = user_named(user)
                credential, token = create_credential(
                    owner,
                    _listed(scopes),
                    name=name,
                    rate=rate,
                    burst=burst,
                    repositories=_listed(repos),
                    streams=_listed(streams),
                    paths=_listed(paths),
                )
        except Invalid as error:
            details = "".join(f"\n  {detail.get('field', '')}: {detail['message']}" for detail in error.details)
            raise CommandError(error.message + details) from None
        self.stdout.write(
            f"Created credential {credential.name or '(unnamed)'} for user {owner.get_username()}"
            f" with scopes {','.join(credential.scopes)} (prefix {credential.token_prefix})."
        )
        for label in ("repositories", "streams", "paths"):
            if getattr(credential, label):
                self.stdout.write(f"Held to the {label} {', '.join(getattr(credential, label))}.")
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
        rows = [("PREFIX", "USER", "NAME", "SCOPES", "REPOS", "STREAMS", "PATHS", "CREATED", "LAST USED", "STATUS")]
        for c in Credential.objects.select_related("user").order_by("created"):
            rows.append(
                (
                    c.token_prefix,
                    c.user.get_username(),
                    c.name or "-",
                    ",".join(c.scopes),
                    ",".join(c.repositories) or "*",
                    ",".join(c.streams) or "*",
                    ",".join(c.paths) or "*",
                    f"{c.created:%Y-%m-%d %H:%M}",
                    f"{c.last_used:%Y-%m-%d %H:%M}" if c.last_used else "never",
                    "revoked" if c.revoked else "active",
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            self.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def _listed(text: str) -> list[str]:
    """A comma-separated option as a list, blanks dropped."""
    return [item.strip() for item in text.split(",") if item.strip()]
