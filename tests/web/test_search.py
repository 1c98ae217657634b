"""The web UI's code search: a box on every repository page, results linking to the file at the
line, what matched marked, HTML kept as text, paging, and the access rules of every page."""

from __future__ import annotations

import re
import time

import pytest
from django.test import Client

from repos.services import search
from repos.web import views_search
from tests.factories import UserFactory

from .conftest import SCRIPT, TEXT, land, write

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_repository_page_has_the_search_box(reader, sample):
    for page in ("/repos/demo/", "/repos/demo/blob/main/src/app.py", "/repos/demo/log/", "/repos/demo/proposals/"):
        html = reader.get(page).content.decode()
        assert 'action="/repos/demo/search/"' in html and 'name="q"' in html, page


def test_results_link_to_the_file_at_the_line_with_the_match_marked(reader, sample):
    response = reader.get("/repos/demo/search/", {"q": "line 1[0-2]"})
    html = response.content.decode()
    head = sample.repository.streams.get(name="main").head

    assert response.status_code == 200
    assert f'href="/repos/demo/blob/{head}/docs/notes.txt#L11"' in html
    assert "<mark>line 11</mark>" in html and "<mark>line 12</mark>" in html and "line 13" not in html


def test_html_in_a_matching_line_is_text(reader, sample):
    html = reader.get("/repos/demo/search/", {"q": "onerror", "rev": sample.hostile}).content.decode()

    assert SCRIPT not in html and "&lt;img src=x <mark>onerror</mark>=" in html


def test_flags_revisions_and_an_invalid_pattern(reader, sample):
    assert "docs/notes.txt" in reader.get("/repos/demo/search/", {"q": "LINE 3$", "i": "1"}).content.decode()
    assert "no line matches" in reader.get("/repos/demo/search/", {"q": "LINE 3$"}).content.decode()
    at_base = reader.get("/repos/demo/search/", {"q": "line 3", "rev": sample.base}).content.decode()
    assert f"/repos/demo/blob/{sample.base}/notes.txt#L3" in at_base
    refused = reader.get("/repos/demo/search/", {"q": "("})
    assert refused.status_code == 400 and "invalid pattern" in refused.content.decode()


def test_pages_follow_each_other(reader, sample, monkeypatch):
    monkeypatch.setattr(views_search, "PAGE_LINES", 7)
    seen, url, params = [], "/repos/demo/search/", {"q": "^line", "path": "docs"}
    while True:
        html = reader.get(url, params).content.decode()
        seen += [int(n) for n in re.findall(r'notes.txt#L(\d+)"', html)]
        more = re.search(r'href="(\?[^"]+)" rel="next"', html)
        if not more:
            break
        url, params = "/repos/demo/search/" + more.group(1).replace("&amp;", "&"), {}
    expected = [
        n for n, line in enumerate(TEXT.replace("line 5\n", "ours\n").splitlines(), 1) if line.startswith("line")
    ]
    assert seen == expected


def test_a_stranger_gets_the_404_of_a_repository_nobody_has(stranger, sample):
    assert stranger.get("/repos/demo/search/", {"q": "line"}).status_code == 404


def test_a_landing_is_searchable_at_once(reader, sample):
    head = sample.repository.streams.get(name="main").head
    land(sample.repository, write(sample.repository, head, {"new.txt": "fresh_words_here\n"}))

    assert "new.txt" in reader.get("/repos/demo/search/", {"q": "fresh_words"}).content.decode()


def test_admin_shows_the_index_and_starts_indexing(sample):
    admin = Client()
    admin.force_login(UserFactory(username="root", is_superuser=True, is_staff=True))
    url = f"/admin/repos/repository/{sample.repository.pk}/change/"
    search.forget_index("demo")
    search.index_path("demo").unlink()

    before = admin.get(url).content.decode()
    assert "0 blob(s) indexed" in before and "at main: 4 file(s), 4 blob(s) not indexed yet" in before
    answer = admin.post(
        "/admin/repos/repository/", {"action": "index_for_search", "_selected_action": [sample.repository.pk]}
    )
    assert answer.status_code == 302
    deadline = time.monotonic() + 10
    while "0 blob(s) not indexed yet" not in admin.get(url).content.decode() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "at main: 4 file(s), 0 blob(s) not indexed yet" in admin.get(url).content.decode()
