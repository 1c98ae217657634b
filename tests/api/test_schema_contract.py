"""The contract the schema states, held by the server: bodies exactly as documented, opaque
URL-safe cursors, and string patterns that are the server's own checks."""

from __future__ import annotations

import base64
import binascii
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import UnsafePath
from engine.objects import split_path
from repos.api import cursors, schema
from repos.models import Changeset, Proposal, Repository, Stream

from .test_errors import error

pytestmark = pytest.mark.django_db(transaction=True)

WRITE = {"op": "write", "path": "f.txt", "content": "x\n"}


def fields(body: dict) -> list[str]:
    return [detail["field"] for detail in body["details"]]


# Request bodies: required fields are required, unknown fields refused, types as documented.


def test_a_changeset_without_parent_is_refused_not_made_a_root(api):
    body = error(api.post("/changesets", {"message": "m", "operations": [WRITE]}), 400, "invalid")

    assert fields(body) == ["parent"]
    assert Changeset.objects.count() == 0


def test_parent_and_parents_together_or_neither_are_refused(api):
    root = api.write(None, {"a.txt": "a\n"})

    both = error(api.post("/changesets", {"parent": root, "parents": [root], "operations": [WRITE]}), 400, "invalid")
    neither = error(api.post("/changesets", {"operations": [WRITE]}), 400, "invalid")

    assert fields(both) == ["parents"] and fields(neither) == ["parent"]
    landing = error(api.post("/streams/main/land", {"parents": [root], "operations": [WRITE]}), 400, "invalid")
    assert "one parent" in next(d for d in landing["details"] if d["field"] == "parents")["message"]
    assert Changeset.objects.count() == 1


@pytest.mark.parametrize(
    "suffix, body, unknown",
    [
        ("/streams", {"name": "topic", "head": None}, "head"),
        ("/proposals", {"stream": "main", "head": "main", "titel": "typo"}, "titel"),
        ("/proposals/1/integrate", {"force": True}, "force"),
        ("/blobs/batch", {"blobs": [{"data": "", "sha": "x"}]}, "blobs.0.sha"),
        ("/changesets", {"parent": None, "operations": [{**WRITE, "executable": True}]}, "operations.0.executable"),
        (
            "/changesets",
            {"parent": None, "operations": [{"op": "delete", "path": "f.txt", "to": "g"}]},
            "operations.0.to",
        ),
    ],
)
def test_unknown_fields_are_refused_by_name(api, suffix, body, unknown):
    api.land(api.write(None, {"f.txt": "f\n"}))

    refused = error(api.post(suffix, body), 400, "invalid")

    assert unknown in fields(refused)
    assert Stream.objects.count() == 1 and Proposal.objects.count() == 1 and Changeset.objects.count() == 1


def test_an_unknown_field_on_a_repository_is_refused(admin):
    body = error(admin.post("/api/v1/repos", {"name": "demo", "public": True}, format="json"), 400, "invalid")

    assert fields(body) == ["public"] and Repository.objects.count() == 0


@pytest.mark.parametrize(
    "body",
    [
        {"name": "topic", "from": ""},  # minLength 1
        {"name": " topic"},  # not trimmed into a valid name
        {"name": "topic", "from": 5},  # a number is not a revision
    ],
)
def test_streams_are_refused_as_the_schema_says(api, body):
    error(api.post("/streams", body), 400, "invalid")
    assert Stream.objects.count() == 1


def test_numbers_are_not_taken_for_strings(api):
    mode_as_number = {**WRITE, "mode": 100644}
    body = error(api.post("/changesets", {"parent": None, "operations": [mode_as_number]}), 400, "invalid")

    assert fields(body) == ["operations.0.mode"]


@pytest.mark.parametrize(
    "suffix, body, field",
    [
        ("/changesets", {"parent": None, "operations": [WRITE], "message": "a\x00b"}, "message"),
        ("/changesets", {"parent": None, "operations": [WRITE], "provenance": {"task": ["\x00"]}}, "provenance"),
        ("/proposals", {"stream": "main", "head": "main", "title": "\x00"}, "title"),
    ],
)
def test_text_the_database_keeps_holds_no_nul(api, suffix, body, field):
    api.land(api.write(None, {"f.txt": "f\n"}))

    refused = error(api.post(suffix, body), 400, "invalid")  # PostgreSQL would refuse it with a 500

    assert fields(refused) == [field]
    assert Changeset.objects.count() == 1 and Proposal.objects.count() == 1


def test_inline_content_is_kept_byte_for_byte(api):
    text = "  padded \x00 and NUL\n"
    head = api.write(None, {"f.txt": text})

    assert api.file("f.txt", head) == text.encode()


# Cursors: opaque, URL-safe, keyset paging.


def test_log_cursors_are_url_safe_and_work_pasted_unencoded(api):
    head = None
    for number in range(5):
        head = api.write(head, {"f.txt": f"{number}\n"})
    api.land(head)

    first = api.get("/log", limit=2).json()
    assert re.fullmatch(r"[A-Za-z0-9_-]+", first["next"])
    pasted = api.client.get(api.url(f"/log?limit=2&cursor={first['next']}"))  # no encoding

    assert pasted.status_code == 200
    ids = [c["id"] for c in first["changesets"] + pasted.json()["changesets"]]
    assert len(ids) == len(set(ids)) == 4


def test_list_cursors_are_opaque_keyset_positions(admin):
    for name in ["a", "b", "c"]:
        admin.post("/api/v1/repos", {"name": name}, format="json")
    first = admin.get("/api/v1/repos", {"limit": 1}).json()
    admin.post("/api/v1/repos", {"name": "0-before-the-cursor"}, format="json")

    rest = admin.get(f"/api/v1/repos?limit=5&cursor={first['next']}").json()

    assert first["next"] != "a" and re.fullmatch(r"[A-Za-z0-9_-]+", first["next"])
    assert [r["name"] for r in rest["repos"]] == ["b", "c"]  # a row added before it shifts nothing


@pytest.mark.parametrize("suffix", ["/streams", "/proposals", "/log"])
@pytest.mark.parametrize("cursor", ["a+b", "x", "MTIz=", "%%"])
def test_malformed_cursors_are_invalid(api, suffix, cursor):
    error(api.get(suffix, cursor=cursor), 400, "invalid")


def test_a_cursor_from_elsewhere_names_a_position_not_an_error(api):
    other = cursors.encode_key("zzz")

    assert api.get("/streams", cursor=other).json() == {"streams": [], "next": None}
    assert api.get("/log", cursor=cursors.encode(b"\x01" * 24)).status_code == 404  # no such start


# The schema's patterns are the server's checks (the autouse fixtures of conftest.py do not
# matter to these: no database, no repository).
patterns = settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=300)


def _matches(pattern: dict, text: str) -> bool:
    return bool(
        re.match(pattern["pattern"].replace("$", r"\Z"), text)
        and not re.search(pattern["not"]["pattern"].replace("$", r"\Z"), text)
    )


@patterns
@given(
    st.text(alphabet=st.sampled_from("ab./\\\x00Ggx0e9"), max_size=12)
    # A lone surrogate cannot travel in UTF-8 JSON or a URL: the engine refuses it, no schema can.
    | st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=8)
)
def test_the_path_patterns_are_the_engine_check(path):
    try:
        split_path(path)
        accepted = True
    except UnsafePath:
        accepted = False

    assert accepted == _matches(schema.READ_PATH, path)
    # What a changeset may write: a path without a backslash (no escape: a new name is UTF-8).
    assert _matches(schema.REPOSITORY_PATH, path) == (accepted and "\\" not in path)


@pytest.mark.parametrize(
    "path, accepted",
    [("caf\\xe9.txt", True), ("back\\\\slash", True), ("d/\\xff\\xfe/f", True), ("caf\\xc3\\xa9", False),
     ("a\\b", False), ("a\\x4", False)],
)  # fmt: skip
def test_escaped_names_read_as_the_schema_says_except_escapes_of_valid_utf8(path, accepted):
    assert _matches(schema.READ_PATH, path) == (path != "a\\b" and path != "a\\x4")
    try:
        split_path(path)
        assert accepted
    except UnsafePath:
        assert not accepted


@patterns
@given(st.text(alphabet=st.sampled_from("QUJD+/=a_-"), max_size=10))
def test_every_string_of_the_base64_pattern_decodes(text):
    # The serializer checks the pattern first, so the server takes exactly the pattern's strings;
    # Python's decoder alone takes a few more (surplus padding: "DDDD=").
    pattern = re.compile(schema.BASE64["pattern"].replace("$", r"\Z"))
    try:
        base64.b64decode(text, validate=True)
        decodes = True
    except (binascii.Error, ValueError):
        decodes = False

    assert decodes or not pattern.match(text)


@patterns
@given(st.text(alphabet=st.sampled_from("AZaz09-_+/="), max_size=40))
def test_every_cursor_of_the_pattern_decodes(text):
    if re.fullmatch(cursors.PATTERN.strip("^$"), text):
        cursors.decode_key(text, str), cursors.decode_key(text, int)
    if re.fullmatch(cursors.LOG_PATTERN.strip("^$"), text):
        assert re.fullmatch(r"[0-9a-f]{40}\+\d+", cursors.decode_log(text))
