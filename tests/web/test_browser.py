"""The web UI in a real browser: headless Chromium (Debian's, ``make chromium``) driven by
Playwright against a real server (uvicorn, a fresh data directory).

A person logs in and follows links from the home page to every kind of page, asserting what
each shows; an integration landed through the API appears on the open activity page without a
reload; HTML planted in a file name, its content, a commit message, provenance and a proposal
title stays text, and no script runs (a dialog fails the test). A screenshot of each page is
saved under ``test-output/web/`` (git ignores it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.deployment import ApiClient, Deployment

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-output" / "web"
PASSWORD = "a long browser password"
SCRIPT = "<script>alert(1)</script>"
TEXT = "".join(f"line {n}\n" for n in range(1, 31))

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium: make chromium")

PEOPLE = f"""
from django.contrib.auth import get_user_model
from repos.services.access import grant_access
from repos.services.repositories import get_repository
user = get_user_model().objects.create_user("robin", password={PASSWORD!r})
grant_access(user, get_repository("demo"))
"""


@pytest.fixture(scope="module")
def server():
    with Deployment("embedded") as deployment:
        token = deployment.create_token("ci")
        deployment.manage("collectstatic", "--noinput", "-v", "0")
        deployment.start_server()
        with ApiClient(deployment.url, token) as api:
            api.create_repo("demo")
            deployment.history = build_history(api)
        deployment.manage("shell", "-c", PEOPLE)
        deployment.api = ApiClient(deployment.url, token)
        yield deployment
        deployment.api.close()
        log = deployment.server.log()
        assert "Traceback" not in log, log


def follow(page, selector: str) -> None:
    """Click ``selector`` and wait until the page it leads to has loaded (a click waits only for
    the navigation to start: on a loaded machine the old page's DOM is still there)."""
    page.click(selector)
    page.wait_for_load_state("load")


def land(api: ApiClient, head: str, title: str = "") -> dict:
    return api.integrate("demo", api.open_proposal("demo", head, title=title)["id"])


def build_history(api: ApiClient) -> dict:
    app = 'def greet(name):\n    """Say hello."""\n    return "hello " + name\n'
    base = api.write("demo", None, {"README.md": "# Demo\n\nA *small* repository.\n", "src/app.py": app,
                                    "notes.txt": TEXT}, "base: the first files", agent="agent-a", task="T-1")  # fmt: skip
    land(api, base)
    second = api.write("demo", base, {"src/app.py": app.replace('"hello " + name', '"hello, " + name + "!"')},
                       "greet with punctuation", agent="agent-b", task="T-2")  # fmt: skip
    land(api, second)
    hostile = api.write(
        "demo", second, {f"{SCRIPT}.txt": f'<img src=x onerror="alert(2)">{SCRIPT}\n', "notes.txt": TEXT + "more\n"},
        f"{SCRIPT} in a message", agent=f"agent {SCRIPT}", task=SCRIPT,
    )  # fmt: skip
    land(api, hostile, title=f"{SCRIPT} title")
    ours = api.write("demo", hostile, {"notes.txt": TEXT.replace("line 5\n", "ours\n") + "more\n"}, "ours")
    land(api, ours)
    theirs = api.write("demo", hostile, {"notes.txt": TEXT.replace("line 5\n", "theirs\n") + "more\n"}, "theirs")
    conflict = land(api, theirs, title="a conflicting edit")
    assert conflict["outcome"] == "conflict"
    return {"base": base, "second": second, "hostile": hostile, "ours": ours, "theirs": theirs}


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)  # overwritten page by page (xdist workers share it)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, server):
    """A logged-in page; any dialog (an injected script's alert) or CSP violation fails the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.dialogs = []
    page.console_errors = []
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    page.on("console", lambda message: message.type == "error" and page.console_errors.append(message.text))
    page.goto(server.url + "/")
    assert "/login" in page.url
    shot(page, "00-login")
    page.fill("#id_username", "robin")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(server.url + "/")
    yield page
    assert page.dialogs == [], "a script ran"
    assert not [e for e in page.console_errors if "Content Security Policy" in e], page.console_errors
    context.close()


def shot(page, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_following_links_from_the_home_page_through_every_kind_of_page(page, server):
    history = server.history
    shot(page, "01-home")
    follow(page, "a[href='/repos/demo/']")
    assert page.locator(".readme h1").inner_text() == "Demo"
    assert page.locator("table.streams").inner_text().count("main") >= 1
    assert "fast_forward" in page.locator("aside").inner_text()
    shot(page, "02-repository")

    follow(page, "table.entries a:text-is('src/')")
    assert page.locator(".crumbs").inner_text() == "demo / src"
    assert page.locator("table.entries").inner_text().split() == ["..", "app.py"]
    shot(page, "02-tree")
    go_to_file = "input[aria-label='Go to file']"  # not the code search box every page has
    page.fill(go_to_file, "app py")
    page.press(go_to_file, "Enter")  # a key press does not wait for the page it submits to
    expect(page.locator("ul.list li")).to_have_text(["src/app.py"])
    shot(page, "02-find")
    follow(page, "ul.list a:text-is('src/app.py')")
    assert page.locator("table.code.hl span.k", has_text="def").count() >= 1  # highlighted
    assert page.locator("tr#L3 td.src").inner_text().startswith("    return")
    follow(page, "tr#L2 td.num a")
    assert page.url.endswith("#L2")
    expect(page.locator("tr#L2.target")).to_have_count(1)  # the page's script marks it after load
    page.goto(page.url.split("#")[0] + "#L1-L3")
    expect(page.locator("tr.target")).to_have_count(3)
    shot(page, "03-file")

    follow(page, "a.button:text-is('Blame')")
    assert page.locator("table.blame td.who").count() == 2  # two hunks: base and second
    assert history["second"][:12] in page.locator("table.blame").inner_text()
    assert page.locator(".legend .swatch").count() == 10
    shot(page, "04-blame")
    page.locator("a.parent").first.click()
    assert history["second"][:12] not in page.locator("table.blame").inner_text()  # the view before it
    assert history["base"][:12] in page.locator("table.blame").inner_text()
    shot(page, "05-blame-parent")

    page.go_back()
    follow(page, "a.button:text-is('History')")
    assert "?path=src/app.py" in page.url
    entries = page.locator("ul.log li").all_inner_texts()
    assert len(entries) == 2 and "greet with punctuation" in entries[0] and "agent-b" in entries[0]
    assert page.locator("ul.log time").first.get_attribute("title").endswith("UTC")
    shot(page, "06-path-log")

    follow(page, "ul.log a.strong:text-is('greet with punctuation')")
    assert "agent-b" in page.locator("dl.facts").inner_text() and "T-2" in page.locator("dl.facts").inner_text()
    follow(page, ".toggle a:text-is('Unified')")
    assert page.locator("table.diff.unified").count() == 1
    assert page.locator("table.diff.unified tr.add .x").count() >= 1  # the changed words
    shot(page, "07-changeset-unified")
    follow(page, ".toggle a:text-is('Split')")
    assert page.locator("table.diff.split").count() == 1
    assert page.locator("table.diff.split td.del").count() == 1 and page.locator("table.diff.split td.add").count() == 1
    shot(page, "08-changeset-split")
    follow(page, "nav.tabs a:text-is('Log')")
    assert page.locator("ul.log li").count() == 4  # the stream's whole history, newest first
    shot(page, "08-stream-log")
    page.locator("ul.log a.strong").last.click()
    assert page.locator("table.diff.split").count() >= 1  # the layout is remembered
    follow(page, ".toggle a:text-is('Unified')")

    follow(page, "nav.tabs a:text-is('Compare')")
    page.fill("input[name=from]", history["base"])
    page.fill("input[name=to]", "main")
    follow(page, "button:text-is('Compare')")
    assert re.search(r"/compare/[0-9a-f]{40}\.\.main$", page.url)
    tools = page.locator(".diff-tools").inner_text()
    assert "3 files changed" in tools
    shot(page, "09-compare")

    follow(page, "nav.tabs a:text-is('Proposals')")
    shot(page, "10-proposals")
    follow(page, ".state-tabs a:text-is('conflicted')")
    follow(page, "ul.log a.strong:has-text('a conflicting edit')")
    conflicts = page.locator("section.conflicts").inner_text()
    assert "notes.txt" in conflicts and "content" in conflicts
    assert page.locator("section.conflicts a[href*='/blob/']").count() >= 2  # both sides' versions
    assert "theirs" in page.locator(".diff-files").inner_text()  # what the proposal brings
    shot(page, "11-conflicted-proposal")


def test_an_integration_appears_on_the_open_activity_page_without_a_reload(page, server):
    follow(page, "a[href='/repos/demo/']")
    follow(page, "nav.tabs a:text-is('Activity')")
    before = page.locator("#activity li").count()
    page.evaluate("window.notReloaded = true")
    api = server.api
    head = api.write("demo", api.head("demo"), {"live.txt": "landed while watching\n"}, "live landing")
    outcome = land(api, head)
    assert outcome["outcome"] == "fast_forward"
    landed = page.locator("#activity li.fresh", has=page.locator(".kind", has_text="stream.integrate"))
    landed.wait_for(timeout=15_000)
    assert outcome["stream_head"][:12] in landed.inner_text() and "fast_forward" in landed.inner_text()
    assert page.evaluate("window.notReloaded") is True
    assert page.locator("#activity li").count() >= before + 2  # proposal.opened and stream.integrate
    shot(page, "12-activity-live")


GRANT = """
from django.contrib.auth import get_user_model
from repos.services.access import grant_access
from repos.services.repositories import get_repository
grant_access(get_user_model().objects.get(username="robin"), get_repository("policed"))
"""


def test_approving_a_proposal_on_its_page_turns_the_policys_checklist_met(page, server):
    api = server.api
    api.create_repo("policed")
    server.manage("shell", "-c", GRANT)
    land_on = "/repos/policed"
    api.request("PUT", f"{land_on}/policy", json={"rules": [{"streams": ["main"], "required_approvals": 1}]})
    head = api.write("policed", None, {"a.txt": "reviewed\n"}, "a change to review")
    proposal = api.open_proposal("policed", head, title="please review")["id"]

    page.goto(f"{server.url}/repos/policed/proposals/{proposal}")
    approvals = page.locator("ul.checklist li[data-requirement=approvals]")
    assert approvals.get_attribute("class") == "unmet" and "needs 1 approval" in approvals.inner_text()
    assert "not allowed yet" in page.locator("section.policy h2").inner_text()
    shot(page, "30-proposal-under-review")

    page.fill("#review-body", f"looks right {SCRIPT}")
    follow(page, "button[value=approve]")
    assert page.url.endswith(f"/proposals/{proposal}#reviews")
    assert "recorded" in page.locator("ul.messages").inner_text()
    assert approvals.get_attribute("class") == "met"
    assert "ready to integrate" in page.locator("section.policy h2").inner_text()
    row = page.locator("section.reviews tr.review").first
    assert "robin" in row.inner_text() and f"looks right {SCRIPT}" in row.inner_text()  # text, not markup
    shot(page, "31-proposal-approved")
    assert api.request("POST", f"{land_on}/proposals/{proposal}/integrate", json={}).json()["outcome"] == "fast_forward"


def test_html_in_names_contents_messages_provenance_and_titles_stays_text(page, server):
    hostile = server.history["hostile"]
    visits = {
        "/repos/demo/tree/main": "<script>alert(1)<",  # a directory: the "/" of "</script>" splits the name
        "/repos/demo/blob/main/%3Cscript%3Ealert(1)%3C/script%3E.txt": '<img src=x onerror="alert(2)">',
        "/repos/demo/blame/main/%3Cscript%3Ealert(1)%3C/script%3E.txt": SCRIPT,
        "/repos/demo/log/main": f"{SCRIPT} in a message",
        f"/repos/demo/changeset/{hostile}": f"agent {SCRIPT}",
        "/repos/demo/proposals/": f"{SCRIPT} title",
        "/repos/demo/activity/": f"{SCRIPT} title",
    }
    for number, (url, text) in enumerate(visits.items()):
        page.goto(server.url + url)
        assert page.get_by_text(text, exact=False).count() >= 1, url  # shown as the text it is
        assert page.locator("main script, main img[src=x]").count() == 0, url  # not as markup
        shot(page, f"2{number}-escaping")
    assert page.dialogs == []


def _marker_boxes(page) -> list[tuple[float, float, float, float]]:
    """(row top, row bottom, marker top, marker bottom) of each diff line's ``::before`` marker,
    read from Chromium's layout through the DevTools protocol (a script cannot measure a
    pseudo-element)."""
    cdp = page.context.new_cdp_session(page)
    found = []

    def walk(node: dict, row: dict | None) -> None:
        row = node if node.get("localName") == "tr" else row
        if node.get("localName") == "td" and row is not None:
            for pseudo in node.get("pseudoElements", []):
                if pseudo.get("pseudoType") == "before":
                    row_box = cdp.send("DOM.getBoxModel", {"nodeId": row["nodeId"]})["model"]["border"]
                    marker = cdp.send("DOM.getBoxModel", {"nodeId": pseudo["nodeId"]})["model"]["border"]
                    found.append((row_box[1], row_box[5], marker[1], marker[5]))
        for child in node.get("children", []):
            walk(child, row)

    walk(cdp.send("DOM.getDocument", {"depth": -1})["root"], None)
    cdp.detach()
    return found


def test_the_marker_of_an_empty_added_or_removed_line_sits_on_its_row(page, server):
    api = server.api
    api.create_repo("blank")
    server.manage("shell", "-c", GRANT.replace('"policed"', '"blank"'))
    old = api.write("blank", None, {"a.py": "def f():\n\n    return 1\n\nx = 2\n"}, "base")
    new = api.write("blank", old, {"a.py": "def f():\n    return 1\n\n\nx = 2\n\n"}, "move the blank lines")
    page.goto(f"{server.url}/repos/blank/changeset/{new}?layout=unified")
    rows = page.locator("table.diff.unified tr.add, table.diff.unified tr.del")
    assert rows.all_inner_texts() == ["2\t\t", "\t4\t", "\t6\t"]  # three empty lines: one removed, two added
    boxes = _marker_boxes(page)
    assert len(boxes) == 3
    for row_top, row_bottom, top, bottom in boxes:
        assert row_top <= top and bottom <= row_bottom, (row_top, row_bottom, top, bottom)
    shot(page, "13-diff-empty-lines")


def test_diffs_and_blame_are_highlighted_by_the_stylesheet_with_changed_words_marked(page, server):
    second = server.history["second"]
    page.goto(f"{server.url}/repos/demo/changeset/{second}?layout=unified")
    added = page.locator("table.diff.unified.hl tr.add td.src")
    keyword = added.locator("span.k", has_text="return")
    # Coloured by pygments.css (a stylesheet of this origin: the CSP refuses inline styles).
    assert keyword.evaluate("k => getComputedStyle(k).color") == "rgb(0, 128, 0)"
    assert added.locator(".x").inner_text().startswith(", ")  # the changed words, inside the string
    assert added.inner_text() == '    return "hello, " + name + "!"'
    shot(page, "14-diff-highlighted")
    follow(page, ".toggle a:text-is('Split')")
    assert page.locator("table.diff.split.hl td.add span.k", has_text="return").count() == 1
    page.goto(f"{server.url}/repos/demo/blame/main/src/app.py")
    assert page.locator("table.blame.hl tr#L1 span.k").inner_text() == "def"
    shot(page, "15-blame-highlighted")
