"""Typed results: one frozen dataclass per answer of the API (API.md), each keeping ``raw``,
the answer as the server sent it (the CLI's ``--json`` prints it).

And the operations of a change: :func:`write`, :func:`delete`, :func:`rename`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Generic, Self, TypeVar

T = TypeVar("T")


class _FromApi:
    """A result built from its API document: its fields by name, ``raw`` the document itself."""

    @classmethod
    def from_api(cls, doc: dict) -> Self:
        return _build(cls, doc)


def _build(cls: type[T], doc: dict, **converted: Any) -> T:
    """``cls`` from an API document: its fields by name (absent ones None), ``raw`` the document."""
    names = [f.name for f in dataclasses.fields(cls) if f.name != "raw"]  # type: ignore[arg-type]
    values = {name: converted[name] if name in converted else doc.get(name) for name in names}
    return cls(**values, raw=doc)  # type: ignore[call-arg]


@dataclass(frozen=True)
class Repository(_FromApi):
    name: str
    default_stream: str
    object_format: str
    created: str
    raw: dict = field(repr=False, compare=False)


@dataclass(frozen=True)
class Stream(_FromApi):
    name: str
    head: str | None
    updated: str | None
    raw: dict = field(repr=False, compare=False)


@dataclass(frozen=True)
class Changeset(_FromApi):
    id: str
    parents: list[str]
    tree: str
    message: str
    operations: list[dict]
    provenance: dict
    created: str | None
    raw: dict = field(repr=False, compare=False)


@dataclass(frozen=True)
class Conflict(_FromApi):
    """A path changed incompatibly on both sides; ``kind``: content, add/add, modify/delete, …"""

    path: str
    kind: str
    old_path: str | None
    raw: dict = field(repr=False, compare=False)


class _Integrated:
    outcome: str

    @property
    def conflicted(self) -> bool:
        """Whether the integration stopped at conflicts (``conflicts`` names them)."""
        return self.outcome == "conflict"


def _conflicts(doc: dict) -> list[Conflict]:
    return [Conflict.from_api(item) for item in doc.get("conflicts") or []]


@dataclass(frozen=True)
class Proposal(_FromApi):
    id: int
    stream: str
    head: str
    title: str
    state: str
    outcome: str | None
    changeset: str | None
    stream_head: str | None
    conflicts: list[Conflict]
    author: str | None
    created: str
    updated: str
    #: Once integrated on a repository with a policy: the decision it landed by (``allowed``,
    #: ``policy_version``, ``requirements``, ``approvals``, ``owners``, ``bypass``); else None.
    decision: dict | None
    raw: dict = field(repr=False, compare=False)

    @classmethod
    def from_api(cls, doc: dict) -> Proposal:
        return _build(cls, doc, conflicts=_conflicts(doc))


@dataclass(frozen=True)
class Outcome(_Integrated, _FromApi):
    """An integration's result: ``fast_forward``, ``merge``, ``conflict`` or ``already_integrated``."""

    outcome: str
    #: The changeset the stream moved to (null on conflict).
    changeset: str | None
    stream_head: str | None
    conflicts: list[Conflict]
    operation: int | None
    proposal: int | None
    raw: dict = field(repr=False, compare=False)

    @classmethod
    def from_api(cls, doc: dict) -> Outcome:
        return _build(cls, doc, conflicts=_conflicts(doc))


@dataclass(frozen=True)
class Landing(_Integrated, _FromApi):
    """A one-call landing's result: the outcome, and the changeset and proposal it made."""

    outcome: str
    #: The changeset the landing wrote and proposed (on a merge, ``stream_head`` is the merge).
    changeset: str
    proposal: int
    operation: int | None
    stream_head: str | None
    conflicts: list[Conflict]
    raw: dict = field(repr=False, compare=False)

    @classmethod
    def from_api(cls, doc: dict) -> Landing:
        return _build(cls, doc, conflicts=_conflicts(doc))


@dataclass(frozen=True)
class Operation(_FromApi):
    """An integration operation: ``queued``, ``done`` (with ``outcome``) or ``failed`` (``error``)."""

    id: int
    state: str
    proposal: int
    stream: str
    attempts: int
    outcome: Outcome | None
    error: dict | None
    raw: dict = field(repr=False, compare=False)

    @classmethod
    def from_api(cls, doc: dict) -> Operation:
        outcome = Outcome.from_api(doc["outcome"]) if doc.get("outcome") else None
        return _build(cls, doc, outcome=outcome)


@dataclass(frozen=True)
class Review(_FromApi):
    """A verdict on a proposal (``approve``, ``reject`` or ``comment``) of the revision it saw;
    ``withdrawn`` is when its author withdrew it (None: it stands)."""

    id: int
    reviewer: str
    verdict: str
    body: str
    revision: int
    tree: str
    withdrawn: str | None
    created: str
    raw: dict = field(repr=False, compare=False)


@dataclass(frozen=True)
class Requirement(_FromApi):
    """One thing a policy asks of a landing (``approvals``, ``code_owners``, ``rejected``,
    ``paths``, ``direct_update``, ``checks``), whether it is met, and who or what can meet it."""

    requirement: str
    met: bool
    message: str
    raw: dict = field(repr=False, compare=False)


@dataclass(frozen=True)
class Explanation(_FromApi):
    """What the repository's policy says of integrating a proposal now (nothing is tried)."""

    allowed: bool
    #: The policy version judged by (0: the repository has no policy).
    policy_version: int
    requirements: list[Requirement]
    #: The approvals that count (user names).
    approvals: list[str]
    raw: dict = field(repr=False, compare=False)

    @classmethod
    def from_api(cls, doc: dict) -> Explanation:
        requirements = [Requirement.from_api(item) for item in doc.get("requirements") or []]
        return _build(cls, doc, requirements=requirements, approvals=list(doc.get("approvals") or []))

    @property
    def unmet(self) -> list[Requirement]:
        return [requirement for requirement in self.requirements if not requirement.met]


@dataclass(frozen=True)
class Policy(_FromApi):
    """A repository's policy document and its version (0 and no rules: none was ever set)."""

    version: int
    rules: list[dict]
    changed_by: str | None
    updated: str | None
    raw: dict = field(repr=False, compare=False)

    @property
    def document(self) -> dict:
        """The document as ``set_policy`` takes it."""
        return {"rules": self.rules}


@dataclass(frozen=True)
class TreeEntry(_FromApi):
    name: str
    path: str
    type: str
    id: str
    mode: str
    raw: dict = field(repr=False, compare=False)


@dataclass(frozen=True)
class Change(_FromApi):
    status: str
    path: str
    old_path: str | None
    similarity: int | None
    raw: dict = field(repr=False, compare=False)


@dataclass(frozen=True)
class Diff(_FromApi):
    changes: list[Change]
    patch: str
    raw: dict = field(repr=False, compare=False)

    @classmethod
    def from_api(cls, doc: dict) -> Diff:
        return _build(cls, doc, changes=[Change.from_api(c) for c in doc.get("changes") or []])


@dataclass(frozen=True)
class BlameLine(_FromApi):
    number: int
    changeset: str
    text: str
    raw: dict = field(repr=False, compare=False)


@dataclass(frozen=True)
class LogEntry(_FromApi):
    id: str
    message: str
    parents: list[str]
    author: dict
    time: int
    raw: dict = field(repr=False, compare=False)


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list; ``next`` is the cursor of the following page (None on the last)."""

    items: list[T]
    next: str | None
    raw: dict = field(repr=False, compare=False)


@dataclass(frozen=True)
class Event:
    """One event of the feed: ``id`` (monotonic per repository), ``kind``, ``data``."""

    id: int
    kind: str
    data: dict

    def as_dict(self) -> dict:
        return {"id": self.id, "event": self.kind, "data": self.data}


# ------------------------------------------------------------------------------ changes

#: What a write's content may be: text, bytes, a path to read, or an open binary file.
Content = str | bytes | Path | IO[bytes]


@dataclass(frozen=True)
class Write:
    path: str
    content: Content
    mode: str | None = None


@dataclass(frozen=True)
class Delete:
    path: str


@dataclass(frozen=True)
class Rename:
    source: str
    target: str


#: One operation of a change.
Edit = Write | Delete | Rename


def write(path: str, content: Content, mode: str | None = None) -> Write:
    """Write ``content`` at ``path`` (``mode`` ``100755`` for an executable, ``120000`` a symlink)."""
    return Write(path, content, mode)


def delete(path: str) -> Delete:
    return Delete(path)


def rename(source: str, target: str) -> Rename:
    return Rename(source, target)
