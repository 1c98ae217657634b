"""Fixtures of the web UI tests: a repository with a small history built through the services,
people with and without access, and logged-in test clients.

Integrations land on commit (Celery eager), hence ``django_db(transaction=True)`` in the tests
that build histories.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.core.cache import caches
from django.test import Client

from repos.services import integration
from repos.services.access import grant_access
from repos.services.content import create_changeset
from repos.services.proposals import open_proposal
from repos.services.repositories import create_repository, create_stream
from tests.factories import UserFactory

PASSWORD = "correct horse battery staple"
#: HTML where text belongs: a file name, its content, a message, provenance and a title hold it.
SCRIPT = "<script>alert(1)</script>"
HOSTILE_NAME = f"{SCRIPT}.txt"
HOSTILE_TEXT = f'<img src=x onerror="alert(2)">{SCRIPT}\n<b>bold?</b>\n'
TEXT = "".join(f"line {n}\n" for n in range(1, 21))


@pytest.fixture(autouse=True)
def _own_repos_dir(settings, tmp_path):
    """Each test's git repositories in its own directory (names repeat across tests)."""
    settings.AGENTGIT = {**settings.AGENTGIT, "REPOS_DIR": tmp_path / "repos"}


@pytest.fixture(autouse=True)
def _fresh_login_counters():
    caches["ratelimit"].clear()


def write(repository, parent, files=None, *, message="change\n", provenance=None, operations=None):
    ops = list(operations or [])
    ops += [{"op": "write", "path": path, "content": text} for path, text in (files or {}).items()]
    return create_changeset(
        repository,
        parent=parent,
        operations=ops,
        message=message,
        provenance=provenance or {"agent": "agent-a", "task": "T-1"},
        credential=None,
    ).commit_id


def land(repository, head, stream="main", title=""):
    proposal = open_proposal(repository, stream=stream, head=head, title=title)
    operation = integration.request_integration(proposal)
    operation.refresh_from_db()
    proposal.refresh_from_db()
    return proposal


@dataclass
class Sample:
    """The sample repository ``demo`` and what its tests point at."""

    repository: object
    base: str
    second: str
    renamed: str
    hostile: str
    conflicted: int
    merged: str
    theirs_head: str


def build_sample(name: str = "demo") -> Sample:
    """A small history: a README, Python code edited twice, a rename, an HTML-laden changeset and
    a conflicted proposal."""
    repository = create_repository(name)
    base = write(
        repository,
        None,
        {
            "README.md": "# Demo\n\nSome *markdown* and <script>alert(3)</script> [a link](https://example.invalid).\n",
            "src/app.py": 'def greet(name):\n    """Say hello."""\n    return "hello " + name\n',
            "notes.txt": TEXT,
        },
        message="base: the first files\n",
    )
    land(repository, base)
    second = write(
        repository,
        base,
        {"src/app.py": 'def greet(name):\n    """Say hello."""\n    return "hello, " + name + "!"\n'},
        message="greet with punctuation\n",
        provenance={"agent": "agent-b", "task": "T-2"},
    )
    land(repository, second)
    renamed = write(
        repository,
        second,
        operations=[{"op": "rename", "from": "notes.txt", "to": "docs/notes.txt"}],
        message="move notes into docs\n",
    )
    land(repository, renamed)
    hostile = write(
        repository,
        renamed,
        {HOSTILE_NAME: HOSTILE_TEXT, "src/app.py": 'def greet(name):\n    return "<b>" + name\n'},
        message=f"{SCRIPT} in a message\n\nbody <i>too</i>\n",
        provenance={"agent": f"agent {SCRIPT}", "task": SCRIPT, "note": "<b>x</b>"},
    )
    land(repository, hostile, title=f"{SCRIPT} title")
    # Two proposals change the same line of notes: the second conflicts.
    ours = write(repository, hostile, {"docs/notes.txt": TEXT.replace("line 5\n", "ours\n")}, message="ours\n")
    merged_proposal = land(repository, ours)
    theirs = write(repository, hostile, {"docs/notes.txt": TEXT.replace("line 5\n", "theirs\n")}, message="theirs\n")
    conflicted = land(repository, theirs, title="a conflicting edit")
    assert conflicted.state == "conflicted", conflicted.outcome
    create_stream(repository, "feature/x", base)
    return Sample(repository, base, second, renamed, hostile, conflicted.pk, merged_proposal.result_head, theirs)


@pytest.fixture
def sample(db):
    return build_sample()


@pytest.fixture
def person(db):
    """A user who logs in with a password and has no access to anything yet."""
    user = UserFactory(username="pat")
    user.set_password(PASSWORD)
    user.save()
    return user


@pytest.fixture
def reader(person, sample):
    """A logged-in client of a user granted read access to ``demo``."""
    grant_access(person, sample.repository)
    client = Client()
    client.force_login(person)
    return client


@pytest.fixture
def stranger(db):
    """A logged-in client of a user without access to any repository."""
    user = UserFactory(username="sam")
    client = Client()
    client.force_login(user)
    return client
