"""engine/policy.py: patterns (git itself is the oracle of gitignore matching), CODEOWNERS, the
document's validation and the judgment as a pure function of the facts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from engine.errors import InvalidInput
from engine.policy import (
    CodeOwnersError,
    Facts,
    compile_paths,
    compile_streams,
    evaluate,
    parse_codeowners,
    parse_policy,
)

PATTERNS = ["*.md", "/build", "docs/", "src/vendor/**", "**/tmp", "a/*/c", "!README.md", "/top/*.txt", "lib/**/x.py"]
PATHS = [
    "README.md", "x/README.md", "notes.md", "build", "build/out.o", "src/build", "docs/a", "src/docs/b",
    "src/vendor/lib/q.c", "vendor/lib/q.c", "tmp", "a/b/tmp/f", "a/b/c", "a/b/d/c", "top/x.txt",
    "top/sub/x.txt", "lib/x.py", "lib/a/b/x.py", "libx/x.py",
]  # fmt: skip


def test_path_patterns_match_as_git_check_ignore_does(tmp_path: Path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("\n".join(PATTERNS) + "\n")
    done = subprocess.run(
        ["git", "-C", str(tmp_path), "check-ignore", "--no-index", "--stdin"],
        input="\n".join(PATHS) + "\n",
        capture_output=True,
        text=True,
    )
    ignored_by_git = set(done.stdout.split())
    matcher = compile_paths(PATTERNS)
    assert {path for path in PATHS if matcher.matches(path)} == ignored_by_git


def test_stream_globs():
    streams = compile_streams(["main", "release/*", "agent/**", "v?"])
    assert [
        name
        for name in ["main", "mainx", "release/1", "release/1/2", "agent/a/b", "v1", "v10"]
        if streams.matches(name)
    ] == [
        "main",
        "release/1",
        "agent/a/b",
        "v1",
    ]
    with pytest.raises(InvalidInput) as refused:
        compile_streams(["", "x\x00"])
    assert [detail["field"] for detail in refused.value.details] == ["streams.0", "streams.1"]


def test_codeowners_the_last_matching_line_wins_among_many():
    lines = ["* @everyone"] + [f"/d{index:04d}/ @team{index}" for index in range(1000)] + ["/d0007/special/ @alice"]
    owners = parse_codeowners("\n".join(lines) + "\n# a comment\n\n*.lock   # nobody owns lock files\n")
    assert owners.owners_of("d0007/a.py") == ("@team7",)
    assert owners.owners_of("d0007/special/a.py") == ("@alice",)
    assert owners.owners_of("elsewhere.txt") == ("@everyone",)
    assert owners.owners_of("d0003/x.lock") == ()  # the last match names no owner: unowned


def test_a_broken_codeowners_names_each_bad_line():
    with pytest.raises(CodeOwnersError) as broken:
        parse_codeowners("ok/ @fine\nbad[ @x\nfine.txt someone\n!negated @y\n")
    assert [detail["line"] for detail in broken.value.details] == [2, 3, 4]


def test_the_document_is_checked_field_by_field():
    with pytest.raises(InvalidInput) as refused:
        parse_policy({"rules": [{"streams": [], "required_approvals": True, "direct_update": "all"}], "x": 1})
    fields = {detail["field"] for detail in refused.value.details}
    assert fields == {"x", "rules.0.streams", "rules.0.required_approvals", "rules.0.direct_update"}


def _facts(**overrides) -> Facts:
    values = {"stream": "main", "paths": ["src/a.py"], "actor": "bob", "authors": frozenset({"bob"}), "tree": "t1"}
    return Facts(**{**values, **overrides})


def test_approvals_count_of_the_current_tree_and_not_the_authors():
    policy = parse_policy({"rules": [{"streams": ["main"], "required_approvals": 2}]}, 4)
    verdicts = {"alice": ("approve", "t1", 1), "bob": ("approve", "t1", 2), "carol": ("approve", "t0", 3)}
    decision = evaluate(policy, _facts(verdicts=verdicts))
    assert not decision.allowed and decision.approvals == ("alice",) and decision.policy_version == 4
    verdicts["dave"] = ("approve", "t1", 4)
    assert evaluate(policy, _facts(verdicts=verdicts)).allowed
    verdicts["erin"] = ("reject", "t0", 5)  # a rejection of any tree blocks
    blocked = evaluate(policy, _facts(verdicts=verdicts))
    assert [requirement.requirement for requirement in blocked.unmet] == ["rejected"]


def test_rules_combine_the_strictest_winning_and_a_bypass_is_recorded():
    policy = parse_policy(
        {
            "rules": [
                {"streams": ["**"], "required_approvals": 1},
                {"streams": ["main"], "paths": ["src/**"], "required_approvals": 3, "deny_paths": ["secrets/**"]},
            ]
        }
    )
    assert "needs 3 approvals" in evaluate(policy, _facts()).unmet[0].message
    assert "needs 1 approval" in evaluate(policy, _facts(paths=["docs/x"])).unmet[0].message
    # The second rule applies (a changed path is under src/), so its denied path counts.
    denied = evaluate(policy, _facts(paths=["src/a.py", "secrets/key"], verdicts={"a": ("approve", "t1", 1)}))
    assert [item.requirement for item in denied.unmet] == ["paths", "approvals"]
    assert evaluate(policy, _facts(paths=["secrets/key"], verdicts={"a": ("approve", "t1", 1)})).allowed
    bypassed = evaluate(policy, _facts(bypass=("root", "outage")))
    assert bypassed.allowed and bypassed.unmet and bypassed.as_dict()["bypass"] == {"by": "root", "reason": "outage"}


def test_direct_updates_follow_direct_update_and_skip_reviews_but_not_denied_paths():
    policy = parse_policy(
        {"rules": [{"streams": ["main"], "required_approvals": 1, "direct_update": "admins", "deny_paths": [".ci/**"]}]}
    )
    direct = {"via_proposal": False, "authors": frozenset()}
    assert not evaluate(policy, _facts(**direct)).allowed
    assert evaluate(policy, _facts(**direct, actor_is_admin=True)).allowed
    ci = evaluate(policy, _facts(**direct, actor_is_admin=True, paths=[".ci/run"]))
    assert [item.requirement for item in ci.unmet] == ["paths"]
    # A rule without reviews lets anyone push directly unless it says otherwise.
    plain = parse_policy({"rules": [{"streams": ["main"], "deny_paths": [".ci/**"]}]})
    assert evaluate(plain, _facts(**direct)).allowed


def test_code_owners_groups_and_emails():
    policy = parse_policy({"rules": [{"streams": ["main"], "code_owners": True}]})
    owners = parse_codeowners("src/ @org/core\ndocs/ writer@example.com\n")
    facts = {"codeowners": owners, "groups": {"org/core": frozenset({"dana"})}, "emails": {"writer@example.com": "wes"}}
    paths = ["src/a.py", "docs/b.md", "free.txt"]
    unmet = evaluate(policy, _facts(paths=paths, **facts))
    assert unmet.unmet[0].message == (
        "src/a.py needs an approval from @org/core; docs/b.md needs an approval from writer@example.com"
    )
    approved = {"dana": ("approve", "t1", 1), "wes": ("approve", "t1", 2)}
    assert evaluate(policy, _facts(paths=paths, verdicts=approved, **facts)).allowed
    broken = evaluate(policy, _facts(codeowners=CodeOwnersError("CODEOWNERS cannot be parsed: line 1: x")))
    assert not broken.allowed and "fix CODEOWNERS on main" in broken.unmet[0].message
