"""Policies: what may land on a stream, judged as a pure function of the facts.

A repository's policy document is a list of rules, each for a set of stream patterns::

    {"rules": [
        {"streams": ["main", "release/*"], "required_approvals": 2, "code_owners": true,
         "deny_paths": [".ci/**"], "direct_update": "admins"},
        {"streams": ["main"], "paths": ["docs/**"], "required_approvals": 1}
    ]}

A rule applies to a landing when one of its ``streams`` patterns matches the target stream and,
if it has ``paths``, when at least one changed path matches them. The rules that apply combine,
the strictest winning: the most approvals, code owners if any asks, every denied path, the
narrowest ``direct_update``. :func:`evaluate` turns a :class:`Facts` (the change, its reviews,
the CODEOWNERS file at the stream's head, who acts) into a :class:`Decision` with one
:class:`Requirement` per thing the policy asks for, met or not, each saying who or what can
meet it. The server gathers the facts and records the decision in the transaction that moves
the stream (repos/services/policies.py); nothing here reads a store or a database.

Patterns:

* stream patterns are globs over the whole name: ``*`` within a ``/``-separated segment, ``**``
  across segments, ``?`` one character (``release/*`` matches ``release/1.0``, not ``release``);
* path patterns (``paths``, ``deny_paths``, CODEOWNERS, a credential's paths) are gitignore's,
  as GitHub's CODEOWNERS uses them: ``*.md`` at any depth, ``/build`` at the root, ``docs/``
  and ``docs/**`` everything below, ``!pattern`` to exclude again (not in CODEOWNERS); the last
  pattern that matches decides. Translated to regular expressions by ``pathspec`` (docs/adr/0014)
  and joined into one expression, so a path costs one match however many patterns there are.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pathspec.patterns.gitignore.spec import GitIgnorePatternError, GitIgnoreSpecPattern

from .errors import InvalidInput

#: ``direct_update``: who may move a stream without a proposal (a git push to refs/heads/S, a
#: stream created or deleted), narrowest first.
DIRECT_UPDATE = ("nobody", "admins", "everyone")
#: At most this many approvals a rule can ask for.
MAX_APPROVALS = 50
MAX_RULES = 200
MAX_PATTERNS = 1000
MAX_PATTERN_LENGTH = 500
#: A decision lists at most this many paths by name (a huge change still counts every path).
MAX_NAMED_PATHS = 20

_RULE_FIELDS = {
    "name", "streams", "paths", "required_approvals", "code_owners", "deny_paths", "direct_update",
    "required_checks", "check_timeout_s",
}  # fmt: skip
#: A check's name (``ci/test``, ``lint``), as check results are reported.
CHECK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,99}\Z")
MAX_CHECKS = 50
#: How long a required check may stay unreported (or pending) before it counts as failed.
DEFAULT_CHECK_TIMEOUT_S = 1800
MAX_CHECK_TIMEOUT_S = 86400


# ----------------------------------------------------------------------------- patterns


def _problem(field_name: str, message: str) -> dict[str, object]:
    return {"field": field_name, "code": "invalid", "message": message}


def _pattern_list(value: object, field_name: str, problems: list[dict[str, object]]) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        problems.append(_problem(field_name, "a list of patterns (strings)"))
        return []
    if len(value) > MAX_PATTERNS:
        problems.append(_problem(field_name, f"at most {MAX_PATTERNS} patterns"))
    for index, pattern in enumerate(value):
        if not pattern or len(pattern) > MAX_PATTERN_LENGTH or "\x00" in pattern or "\n" in pattern:
            problems.append(_problem(f"{field_name}.{index}", f"a pattern of 1-{MAX_PATTERN_LENGTH} characters"))
    return list(value)


def _glob_regex(pattern: str) -> str:
    parts = re.split(r"(\*\*|\*|\?)", pattern)
    wild = {"**": ".*", "*": "[^/]*", "?": "[^/]"}
    return "".join(wild.get(part, re.escape(part)) for part in parts)


class StreamPatterns:
    """Stream-name globs (``main``, ``release/*``, ``agent/**``); empty matches nothing."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = tuple(patterns)
        joined = "|".join(f"(?:{_glob_regex(pattern)})" for pattern in self.patterns)
        self._regex = re.compile(f"(?:{joined})\\Z", re.DOTALL) if self.patterns else None

    def matches(self, name: str) -> bool:
        return self._regex is not None and self._regex.match(name) is not None


def compile_streams(patterns: object, field_name: str = "streams") -> StreamPatterns:
    """Stream patterns from a request or a document; InvalidInput naming each bad one."""
    problems: list[dict[str, object]] = []
    checked = _pattern_list(patterns, field_name, problems)
    if problems:
        raise InvalidInput(f"{field_name}: {problems[0]['message']}", details=problems)
    return StreamPatterns(checked)


class PathPatterns:
    """gitignore-style path patterns, the last match deciding; each pattern may carry a value
    (CODEOWNERS: its owners).

    A pattern anchored at a literal first directory (``/src/``, ``docs/*.md``) can only match
    paths under that directory, so the patterns are grouped by it: a path is tried against one
    regular expression joining, last first, the patterns of its own first directory and those
    anchored nowhere (``*.md``, ``**/build``). 1 000 CODEOWNERS lines, one per directory, cost a
    path two alternatives, not 1 000 (Python's ``re`` tries an alternation's branches in turn).
    """

    def __init__(self, regexes: Sequence[tuple[str, bool, str | None]], values: Sequence[tuple[str, ...]] = ()) -> None:
        self._included = [included for _regex, included, _first in regexes]
        self._values = list(values) or [()] * len(regexes)
        self._branches = [
            f"(?P<p{index}>{regex.replace('(?P<ps_d>', '(?:')})" for index, (regex, _, _) in enumerate(regexes)
        ]
        self._anywhere = [index for index, (_, _, first) in enumerate(regexes) if first is None]
        self._by_first: dict[str, list[int]] = {}
        for index, (_, _, first) in enumerate(regexes):
            if first is not None:
                self._by_first.setdefault(first, []).append(index)
        self._compiled: dict[str | None, re.Pattern[str] | None] = {}

    def _regex(self, first: str | None) -> re.Pattern[str] | None:
        if first not in self._compiled:
            indexes = sorted([*self._anywhere, *self._by_first.get(first or "", ())], reverse=True)
            joined = "|".join(self._branches[index] for index in indexes)
            self._compiled[first] = re.compile(joined, re.DOTALL) if indexes else None
        return self._compiled[first]

    def last_match(self, path: str) -> int | None:
        """The index of the last pattern matching ``path``, if any."""
        first = path.split("/", 1)[0]
        regex = self._regex(first if first in self._by_first else None)
        if regex is None:
            return None
        found = regex.match(path)
        return int(found.lastgroup[1:]) if found is not None and found.lastgroup else None

    def matches(self, path: str) -> bool:
        index = self.last_match(path)
        return index is not None and self._included[index]

    def value(self, path: str) -> tuple[str, ...] | None:
        """The value of the last pattern matching ``path`` (None: no pattern matches)."""
        index = self.last_match(path)
        return None if index is None else self._values[index]

    def matching(self, paths: Iterable[str]) -> list[str]:
        return [path for path in paths if self.matches(path)]


def _path_regex(pattern: str, *, negation: bool = True) -> tuple[str, bool, str | None] | None:
    """The pattern's regular expression, whether it includes (not ``!``), and the literal first
    directory it is anchored under (None: it may match anywhere)."""
    if not negation and pattern.startswith("!"):
        return None
    if pattern.startswith("#"):
        return None
    try:
        regex, included = GitIgnoreSpecPattern.pattern_to_regex(pattern)
        if regex is not None:
            re.compile(regex)  # a range such as [z-a] only fails here
    except (GitIgnorePatternError, re.error):  # e.g. a trailing backslash, escaping nothing
        return None
    if regex is None or included is None:
        return None
    return regex, included, _anchor(pattern.removeprefix("!"))


def _anchor(pattern: str) -> str | None:
    """gitignore: a pattern with a '/' at its start or middle is anchored at the root; its first
    segment, when it is a plain name, is the only top-level entry it can match under."""
    if not (pattern.startswith("/") or "/" in pattern.rstrip("/")):
        return None
    first = pattern.removeprefix("/").split("/", 1)[0]
    return None if not first or any(char in first for char in "*?[\\") else first


def compile_paths(patterns: object, field_name: str = "paths") -> PathPatterns:
    """Path patterns from a request or a document; InvalidInput naming each bad one."""
    problems: list[dict[str, object]] = []
    checked = _pattern_list(patterns, field_name, problems)
    regexes = []
    for index, pattern in enumerate(checked):
        compiled = _path_regex(pattern) if pattern else None
        if compiled is None:
            problems.append(_problem(f"{field_name}.{index}", f"{pattern!r} is not a gitignore-style path pattern"))
        else:
            regexes.append(compiled)
    if problems:
        raise InvalidInput(f"{field_name}: {problems[0]['message']}", details=problems)
    return PathPatterns(regexes)


# ----------------------------------------------------------------------------- CODEOWNERS

_OWNER = re.compile(r"@[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)?|[^@\s]+@[^@\s]+\.[^@\s]+")


class CodeOwnersError(InvalidInput):
    """A CODEOWNERS file that cannot be parsed: one detail per bad line. Never read as "no owners"."""


@dataclass(frozen=True)
class CodeOwners:
    """A parsed CODEOWNERS file: who owns each path (the last matching line wins)."""

    patterns: PathPatterns
    lines: int

    def owners_of(self, path: str) -> tuple[str, ...]:
        """The owners of ``path``: empty when no line matches or the last match names none."""
        return self.patterns.value(path) or ()


def parse_codeowners(text: str) -> CodeOwners:
    """GitHub's CODEOWNERS syntax: ``pattern owner...`` per line, ``#`` comments, owners
    ``@user``, ``@org/team`` (a group) or an e-mail address. Raises CodeOwnersError."""
    regexes: list[tuple[str, bool, str | None]] = []
    values: list[tuple[str, ...]] = []
    problems: list[dict[str, object]] = []
    lines = text.splitlines()
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        # An unescaped '#' starts a comment; '\#' is a literal '#'.
        line = re.split(r"(?<!\\)#", line, maxsplit=1)[0].strip()
        pattern, *owners = re.split(r"(?<!\\)\s+", line)
        compiled = _path_regex(pattern, negation=False)
        if compiled is None:
            problems.append({"line": number, "code": "invalid", "message": f"line {number}: bad pattern {pattern!r}"})
            continue
        bad = [owner for owner in owners if not _OWNER.fullmatch(owner)]
        if bad:
            message = f"line {number}: {', '.join(bad)} is not @user, @org/team or an e-mail address"
            problems.append({"line": number, "code": "invalid", "message": message})
            continue
        regexes.append(compiled)
        values.append(tuple(owners))
    if problems:
        raise CodeOwnersError(f"CODEOWNERS cannot be parsed: {problems[0]['message']}", details=problems)
    return CodeOwners(PathPatterns(regexes, values), len(lines))


# ----------------------------------------------------------------------------- the document


@dataclass(frozen=True)
class Rule:
    streams: StreamPatterns
    paths: PathPatterns | None
    required_approvals: int
    code_owners: bool
    deny_paths: PathPatterns | None
    direct_update: str
    name: str
    required_checks: tuple[str, ...] = ()
    check_timeout_s: int = DEFAULT_CHECK_TIMEOUT_S


@dataclass(frozen=True)
class Policy:
    version: int
    rules: tuple[Rule, ...]
    document: Mapping[str, object]

    def rules_for(self, stream: str) -> list[Rule]:
        return [rule for rule in self.rules if rule.streams.matches(stream)]

    def needs_paths(self, stream: str) -> bool:
        """Whether judging a change landing on ``stream`` reads the paths it changes: a rule of
        the stream has a path condition, denied paths or code owners. Without, the judgment is
        the same for every change, and working the paths out (a merge base, a diff) is skipped."""
        return any(
            rule.paths is not None or rule.deny_paths is not None or rule.code_owners for rule in self.rules_for(stream)
        )

    def checks_for(self, stream: str, paths: Sequence[str]) -> tuple[tuple[str, ...], int]:
        """The checks a change of ``paths`` landing on ``stream`` needs, and the shortest timeout
        among the rules asking for them (none: ``()``)."""
        rules = [rule for rule in _applying(self, stream, paths) if rule.required_checks]
        names = sorted({name for rule in rules for name in rule.required_checks})
        return tuple(names), min((rule.check_timeout_s for rule in rules), default=DEFAULT_CHECK_TIMEOUT_S)


def _applying(policy: Policy, stream: str, paths: Sequence[str]) -> list[Rule]:
    """The rules that apply to a change of ``paths`` landing on ``stream``."""
    return [
        rule
        for rule in policy.rules_for(stream)
        if rule.paths is None or any(rule.paths.matches(path) for path in paths)
    ]


def parse_policy(document: object, version: int = 0) -> Policy:
    """The policy a document describes; InvalidInput with one detail per problem (``field``
    names it, e.g. ``rules.0.required_approvals``)."""
    problems: list[dict[str, object]] = []
    if not isinstance(document, dict):
        raise InvalidInput('a policy is an object: {"rules": [...]}', details=[_problem("", "an object")])
    unknown = sorted(set(document) - {"rules"})
    problems += [_problem(name, "unknown field") for name in unknown]
    raw_rules = document.get("rules", [])
    if not isinstance(raw_rules, list) or len(raw_rules) > MAX_RULES:
        problems.append(_problem("rules", f"a list of at most {MAX_RULES} rules"))
        raw_rules = []
    rules = []
    for index, raw in enumerate(raw_rules):
        at = f"rules.{index}"
        if not isinstance(raw, dict):
            problems.append(_problem(at, "a rule is an object"))
            continue
        problems += [_problem(f"{at}.{name}", "unknown field") for name in sorted(set(raw) - _RULE_FIELDS)]
        rule = _parse_rule(raw, at, problems)
        if rule is not None:
            rules.append(rule)
    if problems:
        raise InvalidInput(
            f"the policy is not valid: {problems[0]['field']}: {problems[0]['message']}", details=problems
        )
    return Policy(version, tuple(rules), document)


def _parse_rule(raw: dict[str, object], at: str, problems: list[dict[str, object]]) -> Rule | None:
    before = len(problems)
    if "streams" not in raw or not raw["streams"]:
        problems.append(_problem(f"{at}.streams", "required: the stream patterns the rule is for"))
    streams = _pattern_list(raw.get("streams", []), f"{at}.streams", problems)

    def paths(name: str) -> PathPatterns | None:
        if name not in raw:
            return None
        try:
            return compile_paths(raw[name], f"{at}.{name}")
        except InvalidInput as error:
            problems.extend(error.details)
            return None

    approvals = raw.get("required_approvals", 0)
    if isinstance(approvals, bool) or not isinstance(approvals, int) or not 0 <= approvals <= MAX_APPROVALS:
        problems.append(_problem(f"{at}.required_approvals", f"an integer from 0 to {MAX_APPROVALS}"))
    code_owners = raw.get("code_owners", False)
    if not isinstance(code_owners, bool):
        problems.append(_problem(f"{at}.code_owners", "true or false"))
    name = raw.get("name", "")
    if not isinstance(name, str) or len(name) > 100:
        problems.append(_problem(f"{at}.name", "a string of at most 100 characters"))
    checks = raw.get("required_checks", [])
    if (
        not isinstance(checks, list)
        or len(checks) > MAX_CHECKS
        or not all(isinstance(check, str) and CHECK_NAME.match(check) for check in checks)
    ):
        message = f"a list of at most {MAX_CHECKS} check names ({CHECK_NAME.pattern.removesuffix(chr(92) + 'Z')})"
        problems.append(_problem(f"{at}.required_checks", message))
    timeout = raw.get("check_timeout_s", DEFAULT_CHECK_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= MAX_CHECK_TIMEOUT_S:
        problems.append(_problem(f"{at}.check_timeout_s", f"an integer from 1 to {MAX_CHECK_TIMEOUT_S} (seconds)"))
    reviewed = bool(approvals) or code_owners is True or bool(checks)
    direct = raw.get("direct_update", "nobody" if reviewed else "everyone")
    if direct not in DIRECT_UPDATE:
        problems.append(_problem(f"{at}.direct_update", f"one of {', '.join(DIRECT_UPDATE)}"))
    path_condition, deny = paths("paths"), paths("deny_paths")
    if len(problems) > before:
        return None
    assert isinstance(approvals, int) and isinstance(code_owners, bool)  # checked above
    assert isinstance(direct, str) and isinstance(name, str) and isinstance(timeout, int)
    assert isinstance(checks, list)
    return Rule(
        StreamPatterns(streams), path_condition, approvals, code_owners, deny, direct, name, tuple(checks), timeout
    )


# ----------------------------------------------------------------------------- judging


@dataclass(frozen=True)
class Facts:
    """What a decision is judged on; gathered by the server in the landing's transaction."""

    stream: str
    #: The paths the change touches (relative to the stream, or to the merge base).
    paths: Sequence[str]
    #: Who acts: a user name, and whether their credential has the admin scope.
    actor: str
    actor_is_admin: bool = False
    #: True for a proposal's integration; False for a direct update (a push to refs/heads/S).
    via_proposal: bool = True
    #: The proposal's author and every user who wrote one of its revisions (their approvals do not count).
    authors: frozenset[str] = frozenset()
    #: The tree of the proposal's latest revision: approvals of another tree do not count.
    tree: str | None = None
    #: Each reviewer's standing verdict: user -> (``approve`` | ``reject``, the tree it saw, review id).
    verdicts: Mapping[str, tuple[str, str, int]] = field(default_factory=dict)
    #: The CODEOWNERS file at the stream's head: parsed, broken, or absent (None).
    codeowners: CodeOwners | CodeOwnersError | None = None
    #: Owners' groups: group name (as written after '@', e.g. ``org/core``) -> member user names;
    #: e-mail owners: address -> user name.
    groups: Mapping[str, frozenset[str]] = field(default_factory=dict)
    emails: Mapping[str, str] = field(default_factory=dict)
    #: An admin's bypass: (who, reason).
    bypass: tuple[str, str] | None = None
    #: The required checks' results on the tree that would land: name -> (state, url, seconds
    #: since the check was requested or last reported). None: not known yet (not judged).
    checks: Mapping[str, tuple[str, str, float]] | None = None
    #: What ``checks`` were run on, when not the result that would land (a refusal says it).
    checked: str = "the result"


@dataclass(frozen=True)
class Requirement:
    requirement: str
    met: bool
    message: str
    #: Unmet for now only: required checks that have not reported yet (the landing waits).
    waiting: bool = False

    def as_dict(self) -> dict[str, object]:
        return {"requirement": self.requirement, "met": self.met, "message": self.message}


@dataclass(frozen=True)
class Decision:
    allowed: bool
    policy_version: int
    requirements: tuple[Requirement, ...]
    #: The approvals counted (user names), and per owned path who satisfied it.
    approvals: tuple[str, ...] = ()
    owners: tuple[dict[str, object], ...] = ()
    bypass: tuple[str, str] | None = None
    #: The checks the change needs on the result that would land, and how long they may take.
    required_checks: tuple[str, ...] = ()
    check_timeout_s: int = DEFAULT_CHECK_TIMEOUT_S

    @property
    def unmet(self) -> list[Requirement]:
        return [requirement for requirement in self.requirements if not requirement.met]

    @property
    def waiting(self) -> bool:
        """Not allowed yet, but only because required checks have not reported: wait, do not refuse."""
        unmet = self.unmet
        return not self.allowed and bool(unmet) and all(requirement.waiting for requirement in unmet)

    def as_dict(self) -> dict[str, object]:
        return {
            "allowed": self.allowed,
            "policy_version": self.policy_version,
            "requirements": [requirement.as_dict() for requirement in self.requirements],
            "approvals": list(self.approvals),
            "owners": list(self.owners),
            "bypass": {"by": self.bypass[0], "reason": self.bypass[1]} if self.bypass else None,
        }


def _named(paths: Sequence[str]) -> str:
    shown = ", ".join(paths[:MAX_NAMED_PATHS])
    return shown + (f" and {len(paths) - MAX_NAMED_PATHS} more" if len(paths) > MAX_NAMED_PATHS else "")


def owner_names(owners: Iterable[str]) -> set[str]:
    """The group names (without '@') among CODEOWNERS owners: what the server looks up."""
    return {owner[1:] for owner in owners if owner.startswith("@")}


def evaluate(policy: Policy, facts: Facts) -> Decision:
    """The decision on landing the change ``facts`` describes under ``policy``."""
    rules = _applying(policy, facts.stream, facts.paths)
    requirements: list[Requirement] = []
    if not rules:
        return Decision(True, policy.version, (), bypass=facts.bypass)
    direct = min((rule.direct_update for rule in rules), key=DIRECT_UPDATE.index)
    if not facts.via_proposal:
        allowed = direct == "everyone" or (direct == "admins" and facts.actor_is_admin)
        who = {"nobody": "nobody", "admins": "only admins", "everyone": "everyone"}[direct]
        message = (
            f"{facts.actor} may update {facts.stream} directly"
            if allowed
            else f"{who} may update {facts.stream} without a proposal: push to refs/for/{facts.stream} "
            f"or open a proposal (POST .../proposals) and have it approved"
        )
        requirements.append(Requirement("direct_update", allowed, message))
    denied = sorted({path for rule in rules if rule.deny_paths for path in rule.deny_paths.matching(facts.paths)})
    if any(rule.deny_paths for rule in rules):
        message = (
            f"{_named(denied)} may not be changed on {facts.stream}: leave them out or land on another stream"
            if denied
            else f"no denied path is changed on {facts.stream}"
        )
        requirements.append(Requirement("paths", not denied, message))
    approvals: tuple[str, ...] = ()
    owners: tuple[dict[str, object], ...] = ()
    if facts.via_proposal:
        approvals, review_requirements, owners = _reviews(rules, facts)
        requirements += review_requirements
    checks, timeout_s = policy.checks_for(facts.stream, facts.paths)
    if checks:
        requirements.append(_checks(checks, timeout_s, facts))
    allowed = all(requirement.met for requirement in requirements) or facts.bypass is not None
    return Decision(allowed, policy.version, tuple(requirements), approvals, owners, facts.bypass, checks, timeout_s)


def _reviews(
    rules: list[Rule], facts: Facts
) -> tuple[tuple[str, ...], list[Requirement], tuple[dict[str, object], ...]]:
    requirements = []
    rejecting = sorted(
        (user, review) for user, (verdict, _tree, review) in facts.verdicts.items() if verdict == "reject"
    )
    if rejecting:
        names = ", ".join(f"{user} (review {review})" for user, review in rejecting)
        message = f"rejected by {names}: the reviewer withdraws it (DELETE .../reviews/ID) or reviews again"
        requirements.append(Requirement("rejected", False, message))
    approvers = tuple(
        sorted(
            user
            for user, (verdict, tree, _review) in facts.verdicts.items()
            if verdict == "approve" and tree == facts.tree and user not in facts.authors
        )
    )
    needed = max(rule.required_approvals for rule in rules)
    if needed:
        have = f"has {len(approvers)}" + (f" ({', '.join(approvers)})" if approvers else "")
        excluded = f" other than {', '.join(sorted(facts.authors))}" if facts.authors else ""
        message = f"needs {needed} approval{'s' if needed > 1 else ''} of its latest revision, {have}" + (
            "" if len(approvers) >= needed else f": anyone with the review scope{excluded} can approve"
        )
        requirements.append(Requirement("approvals", len(approvers) >= needed, message))
    owners: tuple[dict[str, object], ...] = ()
    if any(rule.code_owners for rule in rules):
        requirement, owners = _code_owners(facts, set(approvers))
        requirements.append(requirement)
    return approvers, requirements, owners


def _code_owners(facts: Facts, approvers: set[str]) -> tuple[Requirement, tuple[dict[str, object], ...]]:
    if isinstance(facts.codeowners, CodeOwnersError):
        message = f"{facts.codeowners.message}; fix CODEOWNERS on {facts.stream} first"
        return Requirement("code_owners", False, message), ()
    if facts.codeowners is None:
        return Requirement("code_owners", True, f"{facts.stream} has no CODEOWNERS file: no path is owned"), ()
    missing: dict[tuple[str, ...], list[str]] = {}
    record: list[dict[str, object]] = []
    for path in facts.paths:
        owners = facts.codeowners.owners_of(path)
        if not owners:
            continue
        satisfied = sorted(user for user in approvers if any(_owns(owner, user, facts) for owner in owners))
        if len(record) < MAX_NAMED_PATHS:
            record.append({"path": path, "owners": list(owners), "approved_by": satisfied})
        if not satisfied:
            missing.setdefault(owners, []).append(path)
    if not missing:
        return Requirement("code_owners", True, "every owned path has an approval from one of its owners"), tuple(
            record
        )
    message = "; ".join(
        f"{_named(paths)} needs an approval from {' or '.join(owners)}" for owners, paths in missing.items()
    )
    return Requirement("code_owners", False, message), tuple(record)


def _checks(names: tuple[str, ...], timeout_s: int, facts: Facts) -> Requirement:
    """Every required check ``success`` on the tree that would land. A failure, an error or a
    check pending past the timeout refuses; a check not reported yet waits (a proposal's landing
    waits for it; a direct update, which cannot wait, is refused with what to run)."""
    results = facts.checks or {}
    failed, waiting = [], []
    for name in names:
        state, url, age_s = results.get(name, ("", "", 0.0))
        link = f" ({url})" if url else ""
        if state in ("failure", "error"):
            failed.append(f"{name} {'failed' if state == 'failure' else 'errored'}{link}")
        elif state != "success" and age_s > timeout_s:
            failed.append(f"{name} did not report within {timeout_s} s{link}")
        elif state != "success":
            waiting.append(f"{name} {'is running' if state == 'pending' else 'has not reported'}{link}")
    if failed:
        message = "; ".join(failed) + f" on {facts.checked}: revise the proposal (POST .../revisions) with a fix"
        return Requirement("checks", False, message)
    if waiting:
        if not facts.via_proposal:
            message = "; ".join(waiting) + f" on this tree: report {', '.join(names)} success on it, then update again"
            return Requirement("checks", False, message)
        return Requirement("checks", False, "; ".join(waiting) + " on the result: the landing waits for it", True)
    return Requirement("checks", True, f"{', '.join(names)} passed on the result")


def _owns(owner: str, user: str, facts: Facts) -> bool:
    if owner.startswith("@"):
        name = owner[1:]
        return name == user or user in facts.groups.get(name, frozenset())
    return facts.emails.get(owner.lower()) == user
