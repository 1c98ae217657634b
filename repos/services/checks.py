"""Check results: what outside systems (CI, linters, the runner) say of a tree.

A result is ``(repository, tree, name) → state`` with an optional link and summary. It is kept by
**tree**, not by changeset: a changeset named in a report is resolved to its tree, so a rebase
or a merge that leaves the tree as it was finds the results its tree already has, and the check
need not run again. A new report of the same name on the same tree replaces the state (a
``success`` then a ``pending`` is a re-run); the replaced states stay in the result's history.

Reports of a final state (success, failure, error) are ``check.completed`` events, and
:func:`request_checks` writes ``check.requested``: both in the transaction of the change, so
the feeds and the webhooks (repos/services/webhooks.py) tell outside systems of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from django.db import IntegrityError, transaction

from engine.errors import EngineError
from engine.objects import TREE, ObjectId, is_object_id

from ..errors import Invalid, NotFound
from ..models import CheckResult, Credential, Event, Repository
from .events import CHECK_COMPLETED, CHECK_REQUESTED, append_event, author
from .stores import store_for
from .webhooks import check_url

#: A check's name: ``ci/test``, ``lint``, ``build.linux-x86_64``.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,99}$"
#: The longest summary kept, in characters (a test run's tail, say).
SUMMARY_MAX_LENGTH = 64 * 1024
#: Replaced states a result keeps, newest last.
HISTORY_LENGTH = 50
STATES = tuple(CheckResult.State.values)
#: The states that end a run (a ``check.completed`` event); ``pending`` is a run under way.
COMPLETED = (CheckResult.State.SUCCESS, CheckResult.State.FAILURE, CheckResult.State.ERROR)

_NAME = re.compile(NAME_PATTERN)
_FIELDS = {"changeset", "tree", "name", "state", "url", "summary"}


def report(repository: Repository, body: dict, *, credential: Credential | None = None) -> CheckResult:
    """``POST .../checks``: record ``{"changeset" | "tree", "name", "state", "url"?, "summary"?}``
    on the tree (404 if the tree or changeset is not in the repository)."""
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise Invalid(f"unknown field(s): {', '.join(unknown)}", details=[{"field": f} for f in unknown])
    name, state = check_name(body.get("name")), body.get("state")
    if state not in STATES:
        raise Invalid(f"state is one of {', '.join(STATES)}")
    url = check_url(body["url"], "url") if body.get("url") else ""
    summary = body.get("summary") or ""
    if not isinstance(summary, str) or len(summary) > SUMMARY_MAX_LENGTH or "\x00" in summary:
        raise Invalid(f"summary is text of at most {SUMMARY_MAX_LENGTH} characters")
    changeset, tree = _subject(repository, body.get("changeset"), body.get("tree"))
    with transaction.atomic():
        result, created = _locked_or_created(repository, tree, name)
        if not created:
            result.history = [*result.history, _past(result)][-HISTORY_LENGTH:]
        result.state, result.url, result.summary = state, url, summary
        result.changeset, result.credential = changeset or "", credential
        result.save()
        if state in COMPLETED:
            payload = {
                "tree": tree,
                "changeset": changeset,
                "name": name,
                "state": state,
                "url": url or None,
                "author": author(credential),
            }
            append_event(repository, CHECK_COMPLETED, payload)
    return result


def _subject(repository: Repository, changeset: object, tree: object) -> tuple[ObjectId | None, ObjectId]:
    """The changeset named (if one was) and the tree the result is kept by."""
    if (changeset is None) == (tree is None):
        raise Invalid("give exactly one of changeset (a changeset id) and tree (a tree id)")
    if changeset is not None:
        return _object_id(changeset, "changeset"), tree_of(repository, changeset)
    return None, check_tree(repository, tree)


def _object_id(value: object, field: str) -> ObjectId:
    if not is_object_id(value):
        raise Invalid(f"{field} is a 40-hex object id")
    return value


def tree_of(repository: Repository, changeset: object) -> ObjectId:
    """The tree of a changeset of the repository (404 if it has none of that id)."""
    oid = _object_id(changeset, "changeset")
    try:
        return store_for(repository.name).read_commit(oid).tree
    except EngineError:
        raise NotFound(f"no changeset {oid} in {repository.name}") from None


def check_tree(repository: Repository, tree: object) -> ObjectId:
    """``tree`` if it is a tree of the repository (404 otherwise)."""
    oid = _object_id(tree, "tree")
    if store_for(repository.name).kind(oid) != TREE:
        raise NotFound(f"no tree {oid} in {repository.name}")
    return oid


def check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise Invalid("name is 1-100 letters, digits, '.', '_', '/' or '-', starting with a letter or digit (ci/test)")
    return name


def _locked_or_created(repository: Repository, tree: str, name: str) -> tuple[CheckResult, bool]:
    """The result of ``name`` on ``tree``, locked until the transaction ends, and whether it was
    made now (the first of two concurrent first reports makes it, the second then finds it)."""
    rows = CheckResult.objects.select_for_update().filter(repository=repository, tree=tree, name=name)
    found = rows.first()
    if found is not None:
        return found, False
    try:
        with transaction.atomic():
            return CheckResult.objects.create(repository=repository, tree=tree, name=name, state="pending"), True
    except IntegrityError:  # a concurrent first report: it is there now
        return rows.get(), False


def _past(result: CheckResult) -> dict:
    return {
        "state": result.state,
        "url": result.url,
        "changeset": result.changeset or None,
        "reported": result.updated.isoformat().replace("+00:00", "Z"),
    }


def list_results(repository: Repository, *, changeset: str | None, tree: str | None) -> tuple[str, list[CheckResult]]:
    """``GET .../checks?changeset=`` or ``?tree=``: the tree and its results by name."""
    changeset, tree = changeset or None, tree or None
    _named, found = _subject(repository, changeset, tree)
    return found, list(CheckResult.objects.filter(repository=repository, tree=found).order_by("name"))


def results_for(repository: Repository, tree: str) -> dict[str, CheckResult]:
    """The tree's results by check name (one query): what the landing gate reads."""
    return {
        result.name: result for result in CheckResult.objects.filter(repository=repository, tree=tree).order_by("name")
    }


def results_for_trees(repository: Repository, trees: Iterable[str]) -> dict[str, list[CheckResult]]:
    """Each tree's results, by name (one query for any number of trees): what the log shows."""
    found: dict[str, list[CheckResult]] = {}
    rows = CheckResult.objects.filter(repository=repository, tree__in=set(trees)).order_by("tree", "name")
    for result in rows.only("tree", "name", "state", "url", "updated"):
        found.setdefault(result.tree, []).append(result)
    return found


def request_checks(repository: Repository, tree: str, names: Sequence[str], context: dict) -> Event:
    """Ask for the checks ``names`` on ``tree``: one ``check.requested`` event
    ``{**context, "tree", "names"}`` (the context says what the tree is for, e.g.
    ``{"changeset": the result to test, "stream", "proposals": [ids]}``: a runner materialises
    the changeset), in the caller's transaction if it has one,
    so the request exists exactly when what asked for it committed. The repository's webhooks
    that chose the kind are sent it after the commit (repos/services/webhooks.py)."""
    for name in names:
        check_name(name)
    if not names:
        raise Invalid("request at least one check")
    _object_id(tree, "tree")
    payload = {**context, "tree": tree, "names": list(dict.fromkeys(names))}
    with transaction.atomic():
        return append_event(repository, CHECK_REQUESTED, payload)
