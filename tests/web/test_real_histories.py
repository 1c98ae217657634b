"""Every page on what real histories hold: histories written by git itself (``tests/web/oddities``)
are imported as ``agentgit_import`` does, then each page is requested for each oddity and what a
person would see is checked, with git as the oracle for bytes, logs and parents.

A submodule is named with its commit and never read; a symbolic link shows its target; binary,
very large and CRLF files, an empty commit, an octopus merge and a merge of thousands of files
each answer sensibly, never with a 500 (the test client raises on one); messages and names in
ISO-8859-1 are shown re-encoded, and paths that are not UTF-8 are shown in the escaped form with
links that lead back to the same file.
"""

from __future__ import annotations

import html
import re
import subprocess
from urllib.parse import unquote

import pytest
from django.test import Client

from repos.services.access import grant_access
from repos.services.imports import import_repository
from repos.services.repositories import get_repository
from repos.web.diffs import MAX_FILES, MAX_LISTED

from .oddities import (
    BACKSLASH_PATH,
    CRLF,
    ESCAPED_BACKSLASH_PATH,
    ESCAPED_PATH,
    LATIN1_NAME,
    LATIN1_SUMMARY,
    RAW_PATH,
    SUBMODULE_COMMIT,
    WIDE_FILES,
    encoded_history,
    odd_history,
)

pytestmark = pytest.mark.django_db(transaction=True)

MOVED_SUBMODULE = SUBMODULE_COMMIT.replace("deadbeef", "cafebabe")


def _reader(person, name: str) -> Client:
    grant_access(person, get_repository(name))
    client = Client()
    client.force_login(person)
    return client


@pytest.fixture
def odd(person, tmp_path):
    history = odd_history(tmp_path / "odd-source")
    import_repository("odd", str(history.path))
    return _reader(person, "odd"), history


@pytest.fixture
def encoded(person, tmp_path):
    history = encoded_history(tmp_path / "encoded-source")
    import_repository("encoded", str(history.path))
    return _reader(person, "encoded"), history


def page(client: Client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, (url, response.status_code)
    return response.content.decode()


def git_bytes(source, *args: str | bytes) -> bytes:
    return subprocess.run(["git", *args], cwd=source, capture_output=True, check=True).stdout


def hrefs(text: str) -> list[str]:
    return [html.unescape(href) for href in re.findall(r'href="([^"]*)"', text)]


def shown_ids(text: str) -> list[str]:
    """The changesets a log page lists, in its order."""
    return list(dict.fromkeys(re.findall(r'class="sha" href="/repos/\w+/changeset/([0-9a-f]{40})"', text)))


def test_a_submodule_is_named_with_its_commit_and_never_read(odd):
    client, history = odd
    vendor = page(client, "/repos/odd/tree/main/vendor")
    assert f'lib @ <span class="sha">{MOVED_SUBMODULE[:12]}</span>' in vendor
    assert not [href for href in hrefs(vendor) if href.endswith("/vendor/lib")]  # no link into this repository
    shown = page(client, "/repos/odd/blob/main/vendor/lib")
    assert f'Submodule at commit <span class="sha">{MOVED_SUBMODULE}</span>' in shown
    assert "/raw/" not in shown and "/blame/" not in shown
    assert "in another repository" in page(client, "/repos/odd/blame/main/vendor/lib")
    assert client.get("/repos/odd/raw/main/vendor/lib").status_code == 404  # no bytes to give
    assert f"Submodule at commit {SUBMODULE_COMMIT}." in page(client, f"/repos/odd/changeset/{history.base}")
    swapped = page(client, f"/repos/odd/changeset/{history.swap}")  # a file out, a submodule in: no rename
    assert f"Submodule at commit {SUBMODULE_COMMIT}." in swapped and "2 files changed" in swapped
    moved = f"Submodule moved from commit {SUBMODULE_COMMIT} to {MOVED_SUBMODULE}."
    assert moved in page(client, f"/repos/odd/changeset/{history.edit}")
    assert moved in page(client, f"/repos/odd/compare/{history.base}..{history.edit}")
    by_git = git_bytes(history.path, "log", "--format=%H", "main", "--", "vendor/lib").decode().split()
    assert shown_ids(page(client, "/repos/odd/log/main?path=vendor/lib")) == by_git == [history.edit, history.base]


def test_a_symbolic_link_shows_its_target(odd):
    client, history = odd
    shown = page(client, "/repos/odd/blob/main/link")
    assert 'Symbolic link to <a href="/repos/odd/blob/main/src/app.py" class="mono">src/app.py</a>' in shown
    assert client.get("/repos/odd/raw/main/link").content == git_bytes(history.path, "cat-file", "blob", "main:link")
    assert "src/app.py" in page(client, "/repos/odd/blame/main/link")
    root = page(client, "/repos/odd/tree/main")
    assert 'href="/repos/odd/blob/main/link">link</a> <span class="muted" title="A symbolic link">' in root


def test_binary_and_very_large_files_are_described_not_shown(odd):
    client, history = odd
    binary = git_bytes(history.path, "cat-file", "blob", "main:data.bin")
    big = git_bytes(history.path, "cat-file", "blob", "main:big.txt")
    assert f"Binary, {len(binary)} bytes." in page(client, "/repos/odd/blob/main/data.bin")
    assert "nothing to blame line by line" in page(client, "/repos/odd/blame/main/data.bin")
    large = page(client, "/repos/odd/blob/main/big.txt")
    assert f"({len(big)} bytes), too large to show here" in large and len(large) < 20_000
    assert f"Too large to blame here ({len(big)} bytes)" in page(client, "/repos/odd/blame/main/big.txt")
    assert client.get("/repos/odd/raw/main/data.bin").content == binary
    assert client.get("/repos/odd/raw/main/big.txt").content == big
    base = page(client, f"/repos/odd/changeset/{history.base}")
    assert (
        f"Binary file, {len(binary):,} bytes." in base
        and f"File too large to compare here ({len(big):,} bytes)" in base
    )
    assert len(base) < 100_000


def test_crlf_lines_show_without_their_carriage_returns(odd):
    client, history = odd
    shown = page(client, "/repos/odd/blob/main/crlf.txt")
    assert "3 lines" in shown and "\r" not in shown  # a CR in the page is a line break of its own
    assert '<td class="src">first line</td>' in shown and '<td class="src">2nd line</td>' in shown
    assert "\r" not in page(client, "/repos/odd/blame/main/crlf.txt")
    assert client.get("/repos/odd/raw/main/crlf.txt").content == CRLF.replace("second", "2nd").encode()
    diff = page(client, f"/repos/odd/changeset/{history.edit}?layout=unified")
    assert "\r" not in diff
    crlf_box = diff[diff.index("crlf.txt") : diff.index("</details>", diff.index("crlf.txt"))]
    assert re.search(r'<tr class="del">.*?<td class="src"><span class="x">second</span> line</td>', crlf_box)
    assert re.search(r'<tr class="add">.*?<td class="src"><span class="x">2nd</span> line</td>', crlf_box)


def test_an_empty_commit_has_no_changes_and_is_in_the_log(odd):
    client, history = odd
    empty = page(client, f"/repos/odd/changeset/{history.empty}")
    assert "an empty commit" in empty and "0 files changed" in empty and "No changes." in empty
    by_git = git_bytes(history.path, "log", "--format=%H", "main").decode().split()
    assert shown_ids(page(client, "/repos/odd/log/main")) == by_git
    assert history.empty in by_git


def test_an_octopus_merge_lists_every_parent_and_its_diff_against_the_first(odd):
    client, history = odd
    shown = page(client, f"/repos/odd/changeset/{history.octopus}")
    parents = git_bytes(history.path, "rev-list", "--parents", "-n", "1", history.octopus).decode().split()[1:]
    assert parents == history.octopus_parents and len(parents) == 4
    facts = shown[shown.index("<dt>Parents</dt>") : shown.index("</dd>", shown.index("<dt>Parents</dt>"))]
    assert re.findall(r"/changeset/([0-9a-f]{40})", facts) == parents
    names = git_bytes(history.path, "diff", "--name-only", parents[0], history.octopus).decode().split()
    assert names == ["leg0.txt", "leg1.txt", "leg2.txt"] and "3 files changed" in shown
    assert (
        f'A merge of 4 parents: the diff below is against the first, <a class="sha" href="/repos/odd/changeset/{parents[0]}">'
        in shown
    )
    assert all(name in shown for name in names)


def test_a_merge_of_thousands_of_files_keeps_its_page_bounded(odd):
    client, history = odd
    shown = page(client, f"/repos/odd/changeset/{history.wide_merge}")
    first_parent = git_bytes(history.path, "rev-parse", f"{history.wide_merge}^1").decode().strip()
    changed = git_bytes(history.path, "diff", "--name-only", first_parent, history.wide_merge).decode().split()
    assert len(changed) == WIDE_FILES
    assert f"{WIDE_FILES} files changed" in shown
    assert shown.count('class="diff-file box"') == MAX_LISTED
    assert f"({WIDE_FILES - MAX_LISTED} not listed: a page lists the first {MAX_LISTED})" in shown
    assert f"({MAX_LISTED - MAX_FILES} not compared on this page)" in shown
    assert len(shown) < 2_000_000
    compare = page(client, f"/repos/odd/compare/{history.base}..main")
    assert compare.count('class="diff-file box"') == MAX_LISTED


def test_every_page_answers_every_oddity(odd):
    client, history = odd
    paths = ["src/app.py", "crlf.txt", "data.bin", "big.txt", "link", "vendor/lib", "leg1.txt", "wide/d7/f7.txt"]
    for rev in ("main", history.octopus):
        for path in paths:
            for kind in ("blob", "blame"):
                page(client, f"/repos/odd/{kind}/{rev}/{path}")
            assert client.get(f"/repos/odd/raw/{rev}/{path}").status_code == (404 if path == "vendor/lib" else 200)
            page(client, f"/repos/odd/log/{rev}?path={path}")
        for directory in ("", "/vendor", "/wide", "/wide/d7", "/src"):
            page(client, f"/repos/odd/tree/{rev}{directory}")
    for commit in (history.base, history.edit, history.empty, history.swap, history.wide_merge, history.octopus):
        page(client, f"/repos/odd/changeset/{commit}?layout=split")
    page(client, f"/repos/odd/compare/{history.empty}..{history.octopus}")
    home = page(client, "/repos/odd/")  # a submodule named README is listed, not read as one
    assert f'README @ <span class="sha">{SUBMODULE_COMMIT[:12]}</span>' in home and 'class="box readme"' not in home


# ------------------------------------------------------------------------------ encodings


def test_messages_and_names_in_iso_8859_1_are_shown_re_encoded(encoded):
    client, history = encoded
    log = page(client, "/repos/encoded/log/main")
    assert LATIN1_SUMMARY in log and LATIN1_NAME in log
    assert "bytes \ufffd\ufffd that are not UTF-8" in log  # invalid bytes: replacement characters
    shown = page(client, f"/repos/encoded/changeset/{history.latin1}")
    assert LATIN1_SUMMARY in shown and "Mit Umlauten: äöü." in shown and f"{LATIN1_NAME} &lt;j@example.com&gt;" in shown
    by_git = git_bytes(history.path, "log", "--format=%s", "main").decode("utf-8", "replace")
    assert LATIN1_SUMMARY in by_git and "bytes \ufffd\ufffd that" in by_git  # what git shows, read as UTF-8
    blame = page(client, f"/repos/encoded/blame/{history.latin1}/notes.txt")
    assert LATIN1_SUMMARY in blame and LATIN1_NAME in blame


def test_paths_that_are_not_utf8_are_shown_escaped_and_their_links_lead_back_to_them(encoded):
    client, history = encoded
    root = page(client, "/repos/encoded/tree/main")
    for raw, escaped in ((RAW_PATH, ESCAPED_PATH), (BACKSLASH_PATH, ESCAPED_BACKSLASH_PATH)):
        assert f">{escaped}</a>" in root
        (link,) = [href for href in hrefs(root) if "/blob/" in href and unquote(href).endswith("/" + escaped)]
        shown = page(client, link)
        content = git_bytes(history.path, "cat-file", "blob", f"main:{raw.decode('latin-1')}".encode("latin-1"))
        assert html.escape(content.decode().strip()) in shown
        raw_links = [href for href in hrefs(shown) if "/raw/" in href]
        assert raw_links and client.get(raw_links[0]).content == content
        for follow in [href for href in hrefs(shown) if "/blame/" in href or "?path=" in href]:
            page(client, follow)
    (directory,) = [href for href in hrefs(root) if "/tree/" in href and unquote(href).endswith("/dir\\xff")]
    (inner,) = [href for href in hrefs(page(client, directory)) if "/blob/" in href and href.endswith("inner.txt")]
    assert "in an odd directory" in page(client, inner)
    link = page(client, "/repos/encoded/blob/main/to-cafe")
    (target,) = [href for href in hrefs(link) if "/blob/main/" in href and not href.endswith("to-cafe")]
    assert (
        "Symbolic link to <a href=" in link
        and f">{ESCAPED_PATH}</a>" in link
        and "latin-1 name" in page(client, target)
    )
    changeset = page(client, f"/repos/encoded/changeset/{history.paths}")
    assert "4 files changed" in changeset and ESCAPED_PATH in changeset and ESCAPED_BACKSLASH_PATH in changeset
    for one in [href for href in hrefs(changeset) if "path=" in href and "layout" in href]:
        assert "1 file changed" in page(client, f"/repos/encoded/changeset/{history.paths}{one}")
    compare = page(client, f"/repos/encoded/compare/{history.latin1}..main")
    assert "5 files changed" in compare and ESCAPED_PATH in compare and "dir\\xff/inner.txt" in compare


def test_blame_links_lines_older_than_a_rename_to_the_parent_at_their_old_path(person, tmp_path):
    from tests.git.odd_history import build

    history = build(tmp_path / "renamed-source")
    import_repository("renamed", str(history.git_dir))
    client = _reader(person, "renamed")

    text = page(client, "/repos/renamed/blame/main/docs/moved/text.txt")

    parents = [href for href in hrefs(text) if "/blame/" in href]
    assert any(href.split("#")[0].endswith("/src/text.txt") for href in parents)  # before the move
    for href in {href.split("#")[0] for href in parents}:
        page(client, href)  # every "blame the parent" link answers
