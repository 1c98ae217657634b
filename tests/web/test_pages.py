"""What the pages show, through the Django test client: content, escaping, diffs, blame, log,
proposals, and the limits that keep large inputs usable."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from django.test import Client

from repos.services.browse import describe
from tests.factories import CredentialFactory, UserFactory
from tests.web.conftest import HOSTILE_NAME, SCRIPT, land, write

pytestmark = pytest.mark.django_db(transaction=True)

ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def test_html_in_names_contents_messages_and_provenance_is_text_on_every_page(reader, sample):
    r = sample.repository.name
    name = quote(HOSTILE_NAME)
    urls = {
        f"/repos/{r}/tree/main": "the name",
        f"/repos/{r}/blob/main/{name}": "the content",
        f"/repos/{r}/blame/main/{name}": "content and message",
        f"/repos/{r}/log/main": "the message",
        f"/repos/{r}/log/main?path={name}": "the message",
        f"/repos/{r}/changeset/{sample.hostile}": "message, provenance, name, diff",
        f"/repos/{r}/compare/{sample.renamed}..{sample.hostile}": "the diff",
        f"/repos/{r}/proposals/": "the title",
        f"/repos/{r}/activity/": "the title",
        f"/repos/{r}/find/main?q=script": "the name",
        f"/repos/{r}/": "the README",
    }
    for url, what in urls.items():
        html = reader.get(url).content.decode()
        assert SCRIPT not in html and "<script>alert" not in html, (url, what)
        # The name is a directory "<script>alert(1)<" holding "script>.txt" (a "/" is in "</script>").
        assert ESCAPED in html or "&lt;script&gt;alert(3)" in html or "&lt;script&gt;alert(1)&lt;" in html, (url, what)
        assert "onerror=" not in html.replace("onerror=&quot;", ""), (url, what)


def test_the_readme_is_rendered_markdown_without_scripts(reader, sample):
    html = reader.get("/repos/demo/").content.decode()
    assert "<h1>Demo</h1>" in html and "<em>markdown</em>" in html
    assert 'rel="noopener noreferrer nofollow"' in html
    assert "alert(3)" not in html.replace("&lt;script&gt;alert(3)&lt;/script&gt;", "")


def test_the_repository_home_lists_streams_integrations_and_proposals(reader, sample):
    html = reader.get("/repos/demo/").content.decode()
    assert "feature/x" in html and sample.base[:12] in html  # the stream and its head
    assert (
        "fast_forward" in html and f"#{sample.conflicted}" not in html.split("Recent integrations")[1].split("Open")[0]
    )
    assert "git clone http://testserver/git/demo.git" in html  # the clone URL of the git endpoint


def test_a_file_is_highlighted_with_line_anchors_and_links(reader, sample):
    html = reader.get("/repos/demo/blob/main/src/app.py").content.decode()
    assert '<tr id="L1">' in html and 'href="#L2"' in html
    assert '<span class="k">def</span>' in html  # Pygments' keyword class
    assert f"/repos/demo/raw/{sample.merged}/src/app.py" in html  # the permalink changeset's raw file
    assert "/repos/demo/blame/main/src/app.py" in html and "?path=src/app.py" in html


def test_binary_files_and_images_are_not_shown_as_text(reader, sample):
    image = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))
    from repos.services.content import upload_blob

    blob, _ = upload_blob(sample.repository, image)
    head = write(sample.repository, sample.merged, operations=[
        {"op": "write", "path": "logo.png", "blob": blob},
        {"op": "write", "path": "data.bin", "blob": upload_blob(sample.repository, b"\x00\x01" * 500)[0]},
    ])  # fmt: skip
    land(sample.repository, head)
    png = reader.get("/repos/demo/blob/main/logo.png").content.decode()
    assert '<img src="/repos/demo/raw/' in png
    raw = reader.get("/repos/demo/raw/main/logo.png")
    assert raw["Content-Type"] == "image/png" and raw.content == image
    binary = reader.get("/repos/demo/blob/main/data.bin").content.decode()
    assert "Binary, 1000 bytes." in binary
    diff = reader.get(f"/repos/demo/changeset/{head}").content.decode()
    assert "Binary file, 1,000 bytes." in diff and f"Binary file, {len(image)} bytes." in diff


def test_a_large_file_and_a_megabyte_line_are_cut_with_a_link_to_raw(reader, sample):
    huge = "x = 1\n" * 200_000  # 1.2 MB
    line = "y" * 1_000_000 + "\nshort\n"
    head = write(sample.repository, sample.merged, {"big.py": huge, "long.txt": line})
    land(sample.repository, head)
    big = reader.get("/repos/demo/blob/main/big.py").content.decode()
    assert "too large to show here" in big and "View raw" in big and len(big) < 50_000
    long = reader.get("/repos/demo/blob/main/long.txt").content.decode()
    assert "very long line cut" in long and len(long) < 50_000 and "short" in long
    diff = reader.get(f"/repos/demo/changeset/{head}").content.decode()
    assert "File too large to compare here" in diff and len(diff) < 100_000


def test_a_diff_of_thousands_of_files_lists_them_all_and_compares_a_bounded_number(reader, sample):
    files = {f"gen/{n // 100}/f{n}.txt": f"{n}\n" for n in range(1500)}
    head = write(sample.repository, sample.merged, files)
    html = reader.get(f"/repos/demo/changeset/{head}").content.decode()
    assert "1500 files changed" in html
    assert "500 not compared on this page" in html  # 1 000 compared, the rest listed with a link
    assert html.count('class="diff-file box"') == 1500
    assert 'class="file-tree box"' in html  # the changed-files tree
    one = reader.get(f"/repos/demo/changeset/{head}?path=gen/14/f1499.txt").content.decode()
    assert "1 file changed" in one and "1499" in one


def test_diff_layouts_word_highlighting_renames_and_whitespace(reader, sample):
    url = f"/repos/demo/changeset/{sample.second}"
    unified = reader.get(url + "?layout=unified").content.decode()
    assert 'class="diff unified hl"' in unified  # highlighted by the file's lexer
    # The changed words marked, inside the highlighted string (the tags nest).
    assert '<tr class="add">' in unified and '<span class="x"><span class="s2">, &quot;</span>' in unified
    split = reader.get(url + "?layout=split")
    assert 'class="diff split hl"' in split.content.decode()
    assert split.cookies["diff_layout"].value == "split"
    assert 'class="diff split hl"' in reader.get(url).content.decode()  # remembered
    renamed = reader.get(f"/repos/demo/changeset/{sample.renamed}").content.decode()
    assert "notes.txt → docs/notes.txt" in renamed and "100% similar" in renamed
    spaced = write(sample.repository, sample.merged, {"src/app.py": 'def greet(name):\n    return   "<b>" +   name\n'})
    assert "Only whitespace changed." in reader.get(f"/repos/demo/changeset/{spaced}?w=1").content.decode()
    assert '<tr class="add">' in reader.get(f"/repos/demo/changeset/{spaced}?layout=unified").content.decode()


def test_blame_attributes_hunks_colours_them_by_age_and_blames_the_parent(reader, sample):
    html = reader.get("/repos/demo/blame/main/src/app.py").content.decode()
    info = describe(sample.repository, [sample.hostile])[sample.hostile]
    assert sample.hostile[:12] in html and "age-9" in html and 'class="legend"' in html
    assert f"/repos/demo/blame/{info.parents[0]}/src/app.py#L2" in html  # blame the parent, at the hunk
    parent = reader.get(f"/repos/demo/blame/{info.parents[0]}/src/app.py").content.decode()
    assert sample.second[:12] in parent and sample.base[:12] in parent


def test_the_log_pages_and_filters_by_path(reader, sample):
    page = reader.get("/repos/demo/log/main").content.decode()
    assert "greet with punctuation" in page and "move notes into docs" in page
    assert "<time datetime=" in page and 'title="20' in page  # relative time, exact on hover
    only = reader.get("/repos/demo/log/main?path=src/app.py").content.decode()
    assert "greet with punctuation" in only and "move notes into docs" not in only
    for n in range(55):
        write(sample.repository, sample.merged, {"n.txt": f"{n}\n"})
    parent = sample.merged
    for n in range(55):
        parent = write(sample.repository, parent, {"n.txt": f"{n}\n"}, message=f"step {n}\n")
    land(sample.repository, parent)
    first = reader.get("/repos/demo/log/main").content.decode()
    assert "step 54" in first and "Changesets 1–50" in first and "cursor=" in first
    cursor = first.split("cursor=")[1].split('"')[0].split("&amp;")[0]
    second = reader.get(f"/repos/demo/log/main?cursor={cursor}").content.decode()
    assert "Changesets 51–" in second and "step 4\n" not in second and "step 3<" in second


def test_a_conflicted_proposal_shows_its_paths_both_sides_and_its_diff(reader, sample):
    html = reader.get(f"/repos/demo/proposals/{sample.conflicted}").content.decode()
    assert "conflicted" in html and "a conflicting edit" in html
    assert "docs/notes.txt" in html and ">content<" in html
    assert f"/repos/demo/blob/{sample.merged}/docs/notes.txt" in html  # ours: the stream head
    assert "theirs" in html  # the diff the proposal brings (its line)
    both = reader.get(f"/repos/demo/compare/{sample.merged}..{sample.theirs_head}?path=docs/notes.txt").content.decode()
    assert "1 file changed" in both and "ours" in both and "theirs" in both  # the two sides, line by line
    assert f"/repos/demo/compare/{sample.merged}..{sample.theirs_head}?path=docs/notes.txt" in html
    listed = reader.get("/repos/demo/proposals/?state=conflicted").content.decode()
    assert "a conflicting edit" in listed and "title</a>" not in listed


def test_a_conflicted_proposal_shows_its_conflict_markers_and_its_revisions(reader, sample):
    html = reader.get(f"/repos/demo/proposals/{sample.conflicted}").content.decode()
    # The conflict package's marked-up text, as the agent would edit it (escaped, diff3 style).
    marked = html[html.index('<pre class="marked">') :]
    assert "&lt;&lt;&lt;&lt;&lt;&lt;&lt; stream" in marked and "||||||| base" in marked
    assert "&gt;&gt;&gt;&gt;&gt;&gt;&gt; proposal" in marked
    revisions = html[html.index('class="box revisions"') :]
    assert "opened" in revisions and ">conflict<" in revisions  # revision 1 and its outcome


def test_go_to_file_and_trees_at_streams_with_slashes(reader, sample):
    found = reader.get("/repos/demo/find/main?q=app py").content.decode()
    assert "/repos/demo/blob/main/src/app.py" in found
    feature = reader.get("/repos/demo/tree/feature/x").content.decode()
    assert "notes.txt" in feature and "docs/" not in feature
    assert reader.get("/repos/demo/tree/main/nothing-here").status_code == 404
    assert reader.get("/repos/demo/blob/main/../etc/passwd").status_code in (400, 404)


# ------------------------------------------------------------------------------ reviews and the policy


def _under_review(sample, *, author=None, title="needs a review"):
    """A proposal on main of a repository whose policy asks one approval (authored by ``author``'s
    credential when given)."""
    from repos.services import policies
    from repos.services.proposals import open_proposal

    policies.set_policy(sample.repository, {"rules": [{"streams": ["main"], "required_approvals": 1}]}, by="admin")
    head = write(sample.repository, sample.merged, {"review.txt": "please look\n"})
    credential = CredentialFactory(user=author) if author is not None else None
    return open_proposal(sample.repository, stream="main", head=head, title=title, credential=credential)


def test_a_proposal_shows_the_policys_checklist_and_the_review_forms(reader, sample):
    proposal = _under_review(sample)
    html = reader.get(f"/repos/demo/proposals/{proposal.pk}").content.decode()
    assert "Policy version 1" in html and "not allowed yet" in html
    checklist = html[html.index('<ul class="checklist">') :]
    assert '<li class="unmet" data-requirement="approvals">' in checklist and "needs 1 approval" in checklist
    form = html[html.index('class="review-form"') :]
    assert 'name="csrfmiddlewaretoken"' in form
    assert all(f'name="verdict" value="{verdict}"' in form for verdict in ("approve", "reject", "comment"))
    assert "No reviews yet." in html


def test_approving_through_the_page_turns_the_checklist_met(reader, sample, person):
    proposal = _under_review(sample)
    url = f"/repos/demo/proposals/{proposal.pk}"
    answer = reader.post(f"{url}/reviews", {"verdict": "approve", "body": f"fine {SCRIPT}"})
    assert answer.status_code == 302 and answer["Location"] == f"{url}#reviews"
    html = reader.get(url).content.decode()
    assert "Your approve of revision 1 is recorded." in html
    assert '<li class="met" data-requirement="approvals">' in html and "ready to integrate" in html
    reviews = html[html.index('id="reviews"') :]
    assert "pat" in reviews and "verdict-approve" in reviews and ESCAPED in reviews and SCRIPT not in html
    from repos.models import Review

    review = Review.objects.get(proposal=proposal)
    assert review.user == person and review.credential is None and review.body == f"fine {SCRIPT}"

    # Withdrawn from the page, it no longer counts.
    withdraw = f"{url}/reviews/{review.pk}/withdraw"
    assert f'action="{withdraw}"' in html
    assert reader.post(withdraw).status_code == 302
    html = reader.get(url).content.decode()
    assert "is withdrawn." in html and '<li class="unmet" data-requirement="approvals">' in html
    assert 'class="review withdrawn"' in html and f'action="{withdraw}"' not in html


def test_an_authors_approval_is_a_message_on_the_page_not_an_error(reader, sample, person):
    proposal = _under_review(sample, author=person)
    url = f"/repos/demo/proposals/{proposal.pk}"
    refused = reader.post(f"{url}/reviews", {"verdict": "approve"}, follow=True)
    assert refused.status_code == 200
    html = refused.content.decode()
    assert '<li class="message error">' in html and "would not count" in html
    assert reader.post(f"{url}/reviews", {"verdict": "merge"}, follow=True).status_code == 200  # invalid: a message
    assert proposal.reviews.count() == 0
    # Another user's review cannot be withdrawn by pat.
    from repos.services import policies

    other = policies.add_review(proposal, "comment", "mine", user=UserFactory(username="kim"))
    gone = reader.post(f"{url}/reviews/{other.pk}/withdraw", follow=True).content.decode()
    assert "only they can withdraw it" in gone
    other.refresh_from_db()
    assert other.withdrawn is None


def test_reviewing_needs_csrf_a_login_read_access_and_a_post(reader, stranger, sample, person):
    proposal = _under_review(sample)
    url = f"/repos/demo/proposals/{proposal.pk}/reviews"
    guarded = Client(enforce_csrf_checks=True)
    guarded.force_login(person)
    assert guarded.post(url, {"verdict": "approve"}).status_code == 403  # no CSRF token
    assert stranger.post(url, {"verdict": "approve"}).status_code == 404  # no access: as if none
    assert Client().post(url, {"verdict": "approve"}).status_code == 302  # anonymous: to the login
    assert reader.get(url).status_code == 405
    assert reader.post("/repos/demo/proposals/999999/reviews", {"verdict": "approve"}).status_code == 404
    assert proposal.reviews.count() == 0


def test_an_integrated_proposal_shows_the_decision_and_its_bypass(reader, sample):
    from repos.services import integration

    proposal = _under_review(sample)
    integration.request_integration(proposal, bypass={"by": "root", "reason": "hotfix <b>now</b>"})
    proposal.refresh_from_db()
    assert proposal.state == "integrated"
    html = reader.get(f"/repos/demo/proposals/{proposal.pk}").content.decode()
    assert "Landed by policy version 1" in html and "bypassed" in html
    assert "by root: hotfix &lt;b&gt;now&lt;/b&gt;" in html
    assert '<li class="unmet" data-requirement="approvals">' in html  # what was bypassed
    assert 'class="review-form"' not in html  # it takes no more reviews


def test_check_results_show_on_the_changeset_the_proposal_and_the_log_escaped_with_safe_links(reader, sample):
    from repos.models import CheckResult, Proposal
    from repos.services.checks import report

    proposal = Proposal.objects.get(pk=sample.conflicted)
    tree = describe(sample.repository, [proposal.head])[proposal.head].tree
    report(sample.repository, {"changeset": proposal.head, "name": "ci/test", "state": "failure",
                               "url": "https://ci.example/run/7", "summary": f"{SCRIPT} failed"})  # fmt: skip
    report(sample.repository, {"tree": tree, "name": "lint", "state": "success"})
    # A row no report would make (the API refuses such a link): the page still never links it.
    CheckResult.objects.create(
        repository=sample.repository, tree=tree, name="sneaky", state="pending", url="javascript:alert(4)"
    )
    pages = {
        "changeset": reader.get(f"/repos/demo/changeset/{proposal.head}").content.decode(),
        "proposal": reader.get(f"/repos/demo/proposals/{sample.conflicted}").content.decode(),
        "log": reader.get(f"/repos/demo/log/{proposal.head}").content.decode(),
    }
    for page, html in pages.items():
        assert 'href="https://ci.example/run/7"' in html, page
        assert 'class="check check-failure"' in html and 'class="check check-success"' in html, page
        assert "javascript:" not in html and SCRIPT not in html, page
    assert ESCAPED + " failed" in pages["changeset"] and ESCAPED + " failed" in pages["proposal"]
    untested = reader.get(f"/repos/demo/changeset/{sample.base}").content.decode()
    assert "No check has reported on this tree." in untested


def test_a_highlighted_diff_keeps_code_as_text_and_stops_highlighting_past_the_pages_budget(reader, sample):
    from repos.web.diffs import HIGHLIGHT_CHARS

    code = "".join(f'value_{n} = "<script>alert({n})</script>"\n' for n in range(40))
    # Each file shows a hunk of 7 lines a side (~550 characters): more files than the budget lexes.
    files = {f"gen/m{n:03}.py": code for n in range(HIGHLIGHT_CHARS // 500 + 2)}
    base = write(sample.repository, sample.merged, files)
    head = write(sample.repository, base, {path: code.replace("alert(7)", "alert(8)") for path in files})
    html = reader.get(f"/repos/demo/changeset/{head}?layout=unified").content.decode()
    assert "<script>" not in html and "&lt;script&gt;alert(" in html
    tables = re.findall(r'<table class="diff unified( hl)?">', html)
    assert tables[0] == " hl" and tables[-1] == ""  # the first files highlighted, the last plain
    assert '<span class="x"><span class="s2">8</span></span>' in html  # the changed word, inside the string
    last = sorted(files)[-1]
    alone = reader.get(f"/repos/demo/changeset/{head}?path={last}&layout=unified").content.decode()
    assert '<table class="diff unified hl">' in alone  # a file's own diff has a budget of its own
    # Compared files are remembered: the page looks the same when viewed again.
    again = reader.get(f"/repos/demo/changeset/{head}?layout=unified").content.decode()
    assert again[again.index('class="diff-files"') :] == html[html.index('class="diff-files"') :]


def test_a_changeset_names_the_credential_that_wrote_it_and_its_user(reader, sample):
    from repos.services.content import create_changeset

    writer = CredentialFactory(name="ci-bot", user=UserFactory(username="robot-owner"))
    oid = create_changeset(
        sample.repository, parent=sample.hostile, operations=[{"op": "write", "path": "x.txt", "content": "x\n"}],
        message="by the bot\n", provenance={"agent": "bot"}, credential=writer,
    ).commit_id  # fmt: skip
    page = reader.get(f"/repos/demo/changeset/{oid}").content.decode()
    assert f"ci-bot ({writer.token_prefix}…) of robot-owner" in page
    assert "Credential" not in reader.get(f"/repos/demo/changeset/{sample.hostile}").content.decode()
    infos = describe(sample.repository, [oid, sample.hostile])
    assert infos[oid].provenance == {"agent": "bot"} and infos[sample.hostile].credential == ""
