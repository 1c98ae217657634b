"""The regex → trigram planner (engine.trigrams): Russ Cox's test vectors, and soundness.

GOLDEN is google/codesearch's ``index/regexp_test.go`` (``queryTests``), every vector, with its
expected query in codesearch's notation. Soundness is the property every search relies on: a
text the pattern matches always satisfies the pattern's query, whatever the pattern.
"""

from __future__ import annotations

import pytest
import re2  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.search_index import index_text
from engine.trigrams import ALL_OP, fold_orbit, plan

GOLDEN = [
    ("Abcdef", '"Abc" "bcd" "cde" "def"'),
    ("(abc)(def)", '"abc" "bcd" "cde" "def"'),
    ("abc.*(def|ghi)", '"abc" ("def"|"ghi")'),
    ("abc(def|ghi)", '"abc" ("bcd" "cde" "def")|("bcg" "cgh" "ghi")'),
    ("a+hello", '"ahe" "ell" "hel" "llo"'),
    ("(a+hello|b+world)", '("ahe" "ell" "hel" "llo")|("bwo" "orl" "rld" "wor")'),
    ("a*bbb", '"bbb"'),
    ("a?bbb", '"bbb"'),
    ("(bbb)a?", '"bbb"'),
    ("(bbb)a*", '"bbb"'),
    ("^abc", '"abc"'),
    ("abc$", '"abc"'),
    ("ab[cde]f", '("abc" "bcf")|("abd" "bdf")|("abe" "bef")'),
    ("(abc|bac)de", '"cde" ("abc" "bcd")|("acd" "bac")'),
    ("ab[^cde]f", "+"),
    ("ab.f", "+"),
    (".", "+"),
    ("()", "+"),
    ("[^\\s\\S]", "-"),
    ("(abc|abc)", '"abc"'),
    ("(ab|ab)c", '"abc"'),
    ("ab(cab|cat)", '"abc" "bca" ("cab"|"cat")'),
    ("(z*(abc|def)z*)(z*(abc|def)z*)", '("abc"|"def")'),
    ("(z*abcz*defz*)|(z*abcz*defz*)", '"abc" "def"'),
    ("(z*abcz*defz*(ghi|jkl)z*)|(z*abcz*defz*(mno|prs)z*)", '"abc" "def" ("ghi"|"jkl"|"mno"|"prs")'),
    (
        "(z*(abcz*def)|(ghiz*jkl)z*)|(z*(mnoz*prs)|(tuvz*wxy)z*)",
        '("abc" "def")|("ghi" "jkl")|("mno" "prs")|("tuv" "wxy")',
    ),
    ("(z*abcz*defz*)(z*(ghi|jkl)z*)", '"abc" "def" ("ghi"|"jkl")'),
    ("(z*abcz*defz*)|(z*(ghi|jkl)z*)", '("ghi"|"jkl")|("abc" "def")'),
    ("[ab][cd][ef]", '("ace"|"acf"|"ade"|"adf"|"bce"|"bcf"|"bde"|"bdf")'),
    ("ab[cd]e", '("abc" "bce")|("abd" "bde")'),
    ("(a|ab)cde", '"cde" ("abc" "bcd")|("acd")'),
    ("(a|b|c|d)(ef|g|hi|j)", "+"),
    ("(?s).", "+"),
    ("(?i)a~~", '("A~~"|"a~~")'),
    ("(?i)ab~", '("AB~"|"Ab~"|"aB~"|"ab~")'),
    ("(?i)abc", '("ABC"|"ABc"|"AbC"|"Abc"|"aBC"|"aBc"|"abC"|"abc")'),
    (
        "(?i)abc|def",
        '("ABC"|"ABc"|"AbC"|"Abc"|"DEF"|"DEf"|"DeF"|"Def"|"aBC"|"aBc"|"abC"|"abc"|"dEF"|"dEf"|"deF"|"def")',
    ),
    ("(?i)abcd", '("ABC"|"ABc"|"AbC"|"Abc"|"aBC"|"aBc"|"abC"|"abc") ("BCD"|"BCd"|"BcD"|"Bcd"|"bCD"|"bCd"|"bcD"|"bcd")'),
    ("(?i)abc|abc", '("ABC"|"ABc"|"AbC"|"Abc"|"aBC"|"aBc"|"abC"|"abc")'),
    ("\\b", "+"),
    ("\\B", "+"),
    ("\\babc", '"abc"'),
    ("\\Babc", '"abc"'),
    ("abc\\b", '"abc"'),
    ("abc\\B", '"abc"'),
    ("ab\\bc", '"abc"'),
    ("ab\\Bc", '"abc"'),
]


@pytest.mark.parametrize("pattern, query", GOLDEN)
def test_coxs_test_vectors(pattern, query):
    assert str(plan(pattern)) == query


def trigrams(text: str) -> set[str]:
    indexed = index_text(text.encode("utf-8", "surrogatepass"))
    return {indexed[i : i + 3] for i in range(len(indexed) - 2)}


@pytest.mark.parametrize(
    "pattern",
    [
        r"\pLfoo",  # RE2's Unicode class: Python refuses it
        r"[[:alpha:]]foo",  # a POSIX class to RE2, a set and a ']' to Python
        r"\Qa.b\E",
        r"\x{263a}abc",
        r"(?U)abc",
        r"foo\z",
    ],
)
def test_syntax_python_reads_otherwise_plans_to_everything(pattern):
    assert plan(pattern).op == ALL_OP


def test_case_folding_reaches_the_whole_orbit():
    assert set(fold_orbit("k")) == {"k", "K", "\u212a"}
    assert set(fold_orbit("s")) >= {"s", "S", "\u017f"}
    query = plan("(?i)kelvin")
    assert query.matches(trigrams("\u212aELVIN").__contains__)
    assert plan("kelvin", ignore_case=True).matches(trigrams("KeLvIn").__contains__)


def test_fixed_strings_plan_their_own_trigrams():
    assert str(plan("a.b(c)", fixed=True)) == '"(c)" ".b(" "a.b" "b(c"'


def test_nul_and_replacement_characters_promise_nothing():
    """The index writes U+FFFD for NUL and for bytes that are not UTF-8."""

    def indexed(data: bytes) -> set[str]:
        text = index_text(data)
        return {text[i : i + 3] for i in range(len(text) - 2)}

    assert str(plan("ab\x00cd")) == "+"
    assert plan("ab\x00cdef").matches(indexed(b"ab\x00cdef").__contains__)
    assert plan("ab\ufffdcdef").matches(indexed(b"ab\xffcdef").__contains__)
    assert not plan("abcdef").matches(indexed(b"ab\xffcdef").__contains__)


ALPHABET = [
    "a",
    "b",
    "c",
    "A",
    "B",
    "k",
    "K",
    "\u212a",
    "s",
    "\u017f",
    "\u00e9",
    "\u00c9",
    "\u00df",
    "\u1e9e",
    "_",
    " ",
    "\x00",
    "\ufffd",
]


def _pattern_strategy():
    atom = st.one_of(
        st.sampled_from(ALPHABET).map(lambda c: re2.escape(c) if c not in ("\x00", "\ufffd") else c),
        st.just("."),
        st.sets(st.sampled_from(ALPHABET[:11]), min_size=1, max_size=4).map(lambda cs: "[" + "".join(sorted(cs)) + "]"),
        st.just(r"\w"),
        st.just(r"\b"),
        st.just("^"),
        st.just("$"),
    )
    return st.recursive(
        st.lists(atom, min_size=1, max_size=6).map("".join),
        lambda inner: st.one_of(
            st.tuples(inner, inner).map(lambda p: f"(?:{p[0]}|{p[1]})"),
            st.tuples(inner, st.sampled_from(["*", "+", "?", "{2}", "{1,3}"])).map(lambda p: f"(?:{p[0]}){p[1]}"),
            st.tuples(inner, inner).map("".join),
            inner.map(lambda p: f"(?i:{p})"),
        ),
        max_leaves=6,
    )


@settings(max_examples=400, deadline=None)
@given(
    pattern=_pattern_strategy(),
    text=st.text(alphabet=st.sampled_from(ALPHABET + ["\n"]), max_size=24),
    ignore_case=st.booleans(),
)
def test_a_text_the_pattern_matches_satisfies_its_query(pattern, text, ignore_case):
    options = re2.Options()
    options.case_sensitive = not ignore_case
    try:
        compiled = re2.compile(pattern.encode(), options)
    except re2.error:
        return
    data = text.encode()
    if not any(compiled.search(line) for line in data.split(b"\n")):
        return
    assert plan(pattern, ignore_case=ignore_case).matches(trigrams(text).__contains__)
