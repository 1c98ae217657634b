"""A regular expression planned into a trigram query (Russ Cox, "Regular Expression Matching with
a Trigram Index", and google/codesearch's ``index/regexp.go``, ported).

:func:`plan` answers a :class:`Query`: an AND/OR tree of trigrams that every text the
expression matches somewhere contains. It is conservative: it may hold for texts the expression
does not match (the candidates are checked with the real expression afterwards), never the
reverse. Anything the planner does not understand plans to :data:`ALL` (scan everything), so a
pattern can only make a search slower, never wrong.

The trigrams are of characters (Unicode code points), as SQLite's FTS5 ``trigram`` tokenizer
makes them from text decoded as UTF-8. Two characters never appear in a trigram: NUL (FTS5 stops
a document there, so the index writes U+FFFD in its place) and U+FFFD itself (which also stands
for every byte that is not UTF-8).

The syntax tree comes from Python's own parser (``re._parser``), which reads RE2's syntax where
the two agree. Where they do not, the difference must only ever make the plan weaker:

* constructs Python refuses (``\\pL``, ``\\Q…\\E``, ``\\x{…}``, ``\\z``, ``(?U)``…) plan to ALL;
* ``[[:alpha:]]`` means a POSIX class to RE2 but a set of characters and a ``]`` to Python, so a
  pattern with ``[:`` plans to ALL;
* ``x{,3}`` is a literal to RE2 and a repetition to Python: weaker, hence sound;
* case-insensitive literals expand to their whole simple case-folding orbit (``k``, ``K`` and
  KELVIN SIGN), computed from Python's case mappings, a superset of RE2's orbits.
"""

from __future__ import annotations

import functools
import importlib
import re
from dataclasses import dataclass, field
from typing import Any

# Python's own parser of regular expressions (private modules, stable since 3.11).
sre_parse: Any = importlib.import_module("re._parser")
C: Any = importlib.import_module("re._constants")

#: Exact sets are limited to this many strings, prefix and suffix sets to MAX_SET (Cox's values).
MAX_EXACT = 7
MAX_SET = 20
#: A character class larger than this is treated as "any character".
MAX_CLASS = 100
#: Characters no trigram holds (see the module's docstring).
UNINDEXED_CHARS = frozenset("\x00\ufffd")

ALL_OP, NONE_OP, AND_OP, OR_OP = "all", "none", "and", "or"


@dataclass
class Query:
    """A boolean query over trigrams: ``all`` and ``none`` are constants; ``and``/``or`` combine
    ``trigrams`` (sorted) and ``subs``."""

    op: str
    trigrams: list[str] = field(default_factory=list)
    subs: list[Query] = field(default_factory=list)

    def __str__(self) -> str:
        """codesearch's notation: ``+`` all, ``-`` none, ``"abc" "bcd"`` and, ``("a"|"b")`` or."""
        if self.op == NONE_OP:
            return "-"
        if self.op == ALL_OP:
            return "+"
        if not self.subs and len(self.trigrams) == 1:
            return _quote(self.trigrams[0])
        if self.op == AND_OP:
            start, sjoin, end, tjoin = "", " ", "", " "
        else:
            start, sjoin, end, tjoin = "(", ")|(", ")", "|"
        text = start + tjoin.join(_quote(t) for t in self.trigrams)
        if self.subs:
            if self.trigrams:
                text += sjoin
            text += sjoin.join(str(sub) for sub in self.subs)
        return text + end

    def matches(self, has: Any) -> bool:
        """Whether a text whose trigrams ``has(trigram)`` tells satisfies the query."""
        if self.op == ALL_OP:
            return True
        if self.op == NONE_OP:
            return False
        parts = [has(t) for t in self.trigrams] + [sub.matches(has) for sub in self.subs]
        return all(parts) if self.op == AND_OP else any(parts)

    def copy(self) -> Query:
        return Query(self.op, list(self.trigrams), [sub.copy() for sub in self.subs])


def _quote(text: str) -> str:
    out = ['"']
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        else:
            out.append(f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")
    out.append('"')
    return "".join(out)


#: The constants (never mutated: every combination copies first).
ALL = Query(ALL_OP)
NONE = Query(NONE_OP)


def _and(q: Query, r: Query) -> Query:
    return _and_or(q, r, AND_OP)


def _or(q: Query, r: Query) -> Query:
    return _and_or(q, r, OR_OP)


def _and_or(q: Query, r: Query, op: str) -> Query:
    q, r = q.copy(), r.copy()
    if not q.trigrams and len(q.subs) == 1:
        q = q.subs[0]
    if not r.trigrams and len(r.subs) == 1:
        r = r.subs[0]
    # If q implies r, q AND r is q and q OR r is r.
    if _implies(q, r):
        return q if op == AND_OP else r
    if _implies(r, q):
        return r if op == AND_OP else q
    q_atom = len(q.trigrams) == 1 and not q.subs
    r_atom = len(r.trigrams) == 1 and not r.subs
    if q.op == op and (r.op == op or r_atom):
        q.trigrams = _clean(q.trigrams + r.trigrams)
        q.subs = q.subs + r.subs
        return q
    if r.op == op and q_atom:
        r.trigrams = _clean(r.trigrams + q.trigrams)
        return r
    if q_atom and r_atom:
        q.op = op
        q.trigrams = q.trigrams + r.trigrams
        return q
    if q.op == op:
        q.subs.append(r)
        return q
    if r.op == op:
        r.subs.append(q)
        return r
    # An AND of ORs or an OR of ANDs: factor out the trigrams both share.
    common = sorted(set(q.trigrams) & set(r.trigrams))
    if common:
        q.trigrams = [t for t in q.trigrams if t not in common]
        r.trigrams = [t for t in r.trigrams if t not in common]
        rest = _and_or(q, r, op)
        other = OR_OP if op == AND_OP else AND_OP
        return _and_or(Query(other, common), rest, other)
    return Query(op, subs=[q, r])


def _implies(q: Query, r: Query) -> bool:
    """Whether q implies r (false negatives allowed)."""
    if q.op == NONE_OP or r.op == ALL_OP:
        return True
    if q.op == ALL_OP or r.op == NONE_OP:
        return False
    if q.op == AND_OP or (q.op == OR_OP and len(q.trigrams) == 1 and not q.subs):
        return _trigrams_imply(q.trigrams, r)
    return q.op == OR_OP and r.op == OR_OP and bool(q.trigrams) and not q.subs and set(q.trigrams) <= set(r.trigrams)


def _trigrams_imply(trigrams: list[str], q: Query) -> bool:
    if q.op == OR_OP:
        return any(_trigrams_imply(trigrams, sub) for sub in q.subs) or any(t in q.trigrams for t in trigrams)
    if q.op == AND_OP:
        return all(_trigrams_imply(trigrams, sub) for sub in q.subs) and set(q.trigrams) <= set(trigrams)
    return False


def _and_trigrams(q: Query, strings: list[str]) -> Query:
    """q AND the OR, over ``strings``, of the AND of each string's trigrams."""
    if _min_len(strings) < 3:
        return q  # a short string promises no trigram
    either = NONE
    for text in strings:
        trigrams = _clean([text[i : i + 3] for i in range(len(text) - 2)])
        # A trigram holding a character the index never records promises nothing.
        trigrams = [t for t in trigrams if not UNINDEXED_CHARS.intersection(t)]
        either = _or(either, Query(AND_OP, trigrams) if trigrams else ALL)
    return _and(q, either)


def _min_len(strings: list[str]) -> int:
    return min((len(s) for s in strings), default=0)


def _clean(strings: list[str], suffix: bool = False) -> list[str]:
    return sorted(set(strings), key=(lambda s: s[::-1]) if suffix else None)


@dataclass
class _Info:
    """What the analysis knows of a subexpression (Cox's regexpInfo)."""

    can_empty: bool = False
    #: The exact set of strings it matches, or None (then prefix and suffix sets hold).
    exact: list[str] | None = None
    prefix: list[str] = field(default_factory=list)
    suffix: list[str] = field(default_factory=list)
    match: Query = field(default_factory=lambda: ALL)

    def add_exact(self) -> None:
        if self.exact is not None:
            self.match = _and_trigrams(self.match, self.exact)

    def simplify(self, force: bool) -> None:
        if self.exact is not None:
            self.exact = _clean(self.exact)
            n = _min_len(self.exact)
            if len(self.exact) > MAX_EXACT or (n >= 3 and force) or n >= 4:
                self.add_exact()
                for text in self.exact:
                    if len(text) < 3:
                        self.prefix.append(text)
                        self.suffix.append(text)
                    else:
                        self.prefix.append(text[:2])
                        self.suffix.append(text[-2:])
                self.exact = None
        if self.exact is None:
            self.prefix = self._simplify_set(self.prefix, suffix=False)
            self.suffix = self._simplify_set(self.suffix, suffix=True)

    def _simplify_set(self, strings: list[str], *, suffix: bool) -> list[str]:
        kept = _clean(strings, suffix)
        self.match = _and_trigrams(self.match, kept)
        n = 3
        while n == 3 or len(kept) > MAX_SET:
            kept = _clean([(s[-(n - 1) :] if suffix else s[: n - 1]) if len(s) >= n else s for s in kept], suffix)
            n -= 1
        # "ab" as a possible prefix makes "abc" useless.
        out: list[str] = []
        for text in kept:
            if not out or not (text.endswith(out[-1]) if suffix else text.startswith(out[-1])):
                out.append(text)
        return out


def _any_match() -> _Info:
    return _Info(can_empty=True, prefix=[""], suffix=[""])


def _any_char() -> _Info:
    return _Info(prefix=[""], suffix=[""])


def _no_match() -> _Info:
    return _Info(match=NONE)


def _empty_string() -> _Info:
    return _Info(can_empty=True, exact=[""])


def _cross(xs: list[str], ys: list[str], suffix: bool) -> list[str]:
    return _clean([x + y for x in xs for y in ys], suffix)


def _concat(x: _Info, y: _Info) -> _Info:
    xy = _Info(match=_and(x.match, y.match))
    if x.exact is not None and y.exact is not None:
        xy.exact = _cross(x.exact, y.exact, False)
    else:
        if x.exact is not None:
            xy.prefix = _cross(x.exact, y.prefix, False)
        else:
            xy.prefix = list(x.prefix)
            if x.can_empty:
                xy.prefix = _clean(xy.prefix + y.prefix)
        if y.exact is not None:
            xy.suffix = _cross(x.suffix, y.exact, True)
        else:
            xy.suffix = list(y.suffix)
            if y.can_empty:
                xy.suffix = _clean(xy.suffix + x.suffix, True)
    # A string of x's suffixes followed by y's prefixes long enough for a trigram must appear.
    if (
        x.exact is None
        and y.exact is None
        and len(x.suffix) <= MAX_SET
        and len(y.prefix) <= MAX_SET
        and _min_len(x.suffix) + _min_len(y.prefix) >= 3
    ):
        xy.match = _and_trigrams(xy.match, _cross(x.suffix, y.prefix, False))
    xy.simplify(False)
    return xy


def _alternate(x: _Info, y: _Info) -> _Info:
    xy = _Info()
    if x.exact is not None and y.exact is not None:
        xy.exact = _clean(x.exact + y.exact)
    elif x.exact is not None:
        xy.prefix = _clean(x.exact + y.prefix)
        xy.suffix = _clean(x.exact + y.suffix, True)
        x.add_exact()
    elif y.exact is not None:
        xy.prefix = _clean(x.prefix + y.exact)
        xy.suffix = _clean(x.suffix + y.exact, True)
        y.add_exact()
    else:
        xy.prefix = _clean(x.prefix + y.prefix)
        xy.suffix = _clean(x.suffix + y.suffix, True)
    xy.can_empty = x.can_empty or y.can_empty
    xy.match = _or(x.match, y.match)
    xy.simplify(False)
    return xy


@functools.cache
def _fold_orbits() -> dict[str, tuple[str, ...]]:
    """Each cased character's case-folding orbit (a superset of RE2's simple folding)."""
    parent: dict[str, str] = {}

    def find(c: str) -> str:
        while parent.get(c, c) != c:
            c = parent[c]
        return c

    for code in range(0x20000):
        char = chr(code)
        for other in (char.lower(), char.upper(), char.casefold()):
            if len(other) == 1 and other != char:
                a, b = find(char), find(other)
                if a != b:
                    parent[a] = b
                    parent.setdefault(b, b)
    groups: dict[str, list[str]] = {}
    for char in parent:
        groups.setdefault(find(char), []).append(char)
    return {char: tuple(sorted(group)) for group in groups.values() for char in group}


def fold_orbit(char: str) -> tuple[str, ...]:
    """Every character a case-insensitive ``char`` matches, ``char`` included."""
    return _fold_orbits().get(char, (char,))


def _class(chars: set[str] | None) -> _Info:
    """A character class: ``None`` when too large to list."""
    if chars is None:
        return _any_char()
    if not chars:
        return _no_match()
    if chars & UNINDEXED_CHARS:
        return _any_char()
    info = _Info(exact=sorted(chars))
    info.simplify(False)
    return info


def _literal(code: int, fold: bool) -> _Info:
    char = chr(code)
    return _class(set(fold_orbit(char)) if fold else {char})


_COMPLEMENT = {
    C.CATEGORY_DIGIT: C.CATEGORY_NOT_DIGIT,
    C.CATEGORY_NOT_DIGIT: C.CATEGORY_DIGIT,
    C.CATEGORY_SPACE: C.CATEGORY_NOT_SPACE,
    C.CATEGORY_NOT_SPACE: C.CATEGORY_SPACE,
    C.CATEGORY_WORD: C.CATEGORY_NOT_WORD,
    C.CATEGORY_NOT_WORD: C.CATEGORY_WORD,
}


def _class_members(items: list[tuple[Any, Any]], fold: bool) -> set[str] | None:
    negate = False
    chars: set[str] = set()
    categories = {av for op, av in items if op is C.CATEGORY}
    if any(_COMPLEMENT.get(category) in categories for category in categories):
        # [\s\S] and the like: every character, so its negation is none.
        return set() if any(op is C.NEGATE for op, _av in items) else None
    for op, av in items:
        if op is C.NEGATE:
            negate = True
        elif op is C.LITERAL:
            chars.add(chr(av))
        elif op is C.RANGE:
            low, high = av
            if high - low > MAX_CLASS:
                return None
            chars.update(chr(c) for c in range(low, high + 1))
        else:  # a category (\d, \w, \s…): large
            return None
    if negate:
        return None
    if fold:
        chars = {other for char in chars for other in fold_orbit(char)}
    if len(chars) > MAX_CLASS:
        return None
    return chars


def _analyze(pattern: Any, flags: int) -> _Info:
    """The analysis of a sequence (a SubPattern or a list of its items)."""
    info = _empty_string()
    for op, av in pattern:
        info = _concat(info, _analyze_item(op, av, flags))
    return info


def _analyze_item(op: Any, av: Any, flags: int) -> _Info:
    fold = bool(flags & re.IGNORECASE)
    if op is C.LITERAL:
        return _literal(av, fold)
    if op is C.NOT_LITERAL or op is C.ANY:
        return _any_char()
    if op is C.IN:
        return _class(_class_members(av, fold))
    if op is C.AT:
        return _empty_string()
    if op is C.SUBPATTERN:
        _group, add_flags, del_flags, sub = av
        return _analyze(sub, (flags | add_flags) & ~del_flags)
    if op is C.BRANCH:
        branches = av[1]
        info = _no_match()
        for i, branch in enumerate(branches):
            analyzed = _analyze(branch, flags)
            info = analyzed if i == 0 else _alternate(info, analyzed)
        return info
    if op in (C.MAX_REPEAT, C.MIN_REPEAT, getattr(C, "POSSESSIVE_REPEAT", C.MAX_REPEAT)):
        low, high, sub = av
        if high == 0:
            return _empty_string()
        if low == 0:
            if high == 1:  # x? = x|empty
                return _alternate(_analyze(sub, flags), _empty_string())
            return _any_match()
        info = _analyze(sub, flags)
        if info.exact is not None:
            info.prefix, info.suffix, info.exact = info.exact, list(info.exact), None
        info.simplify(False)
        return info
    # Backreferences, lookarounds and the like: RE2 refuses them, and nothing is promised.
    raise _Unplannable(str(op))


class _Unplannable(Exception):
    pass


def plan(pattern: str, *, ignore_case: bool = False, fixed: bool = False) -> Query:
    """The trigram query every text that ``pattern`` matches satisfies (ALL when unplannable)."""
    source = re.escape(pattern) if fixed else pattern
    if not fixed and "[:" in pattern:
        return ALL
    try:
        parsed = sre_parse.parse(source, re.IGNORECASE if ignore_case else 0)
        info = _analyze(parsed, parsed.state.flags)
    except (re.error, _Unplannable, RecursionError, OverflowError, ValueError):
        return ALL
    info.simplify(True)
    info.add_exact()
    return info.match
