"""People's read access to repositories in the web UI: grant, revoke, check.

Agents reach repositories with tokens (``credentials``); people log in with a Django session and
read the repositories they were granted, one :class:`~repos.models.RepositoryAccess` row each.
Superusers read every repository. A repository a user may not read does not exist for them:
:func:`access_repository` raises ``NotFound`` exactly as for a name nobody uses, so a page's
answer never tells the two apart.
"""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from ..errors import NotFound
from ..models import Repository, RepositoryAccess
from .repositories import get_repository


def can_read(user: User | AnonymousUser, repository: Repository) -> bool:
    """Whether ``user`` may read ``repository`` in the web UI."""
    if not user.is_authenticated or not user.is_active:
        return False
    if user.is_superuser:
        return True
    return RepositoryAccess.objects.filter(user=user, repository=repository).exists()


def access_repository(user: User | AnonymousUser, name: str) -> Repository:
    """The repository ``name`` if ``user`` may read it; NotFound otherwise (and if unknown)."""
    repository = get_repository(name)
    if not can_read(user, repository):
        raise NotFound(f"no repository named {name!r}")
    return repository


def readable_repositories(user: User | AnonymousUser) -> QuerySet[Repository]:
    """The repositories ``user`` may read, by name."""
    repositories = Repository.objects.order_by("name")
    if not user.is_authenticated or not user.is_active:
        return repositories.none()
    if user.is_superuser:
        return repositories
    return repositories.filter(access__user=user)


def grant_access(user: User, repository: Repository) -> RepositoryAccess:
    """Let ``user`` read ``repository``; granting twice keeps the first grant."""
    try:
        with transaction.atomic():
            return RepositoryAccess.objects.create(user=user, repository=repository)
    except IntegrityError:
        return RepositoryAccess.objects.get(user=user, repository=repository)


def revoke_access(user: User, repository: Repository) -> bool:
    """Take ``user``'s read access to ``repository`` away; whether there was any."""
    deleted, _ = RepositoryAccess.objects.filter(user=user, repository=repository).delete()
    return deleted > 0
