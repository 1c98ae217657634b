"""Required checks gate the landing queue: the stream moves only to a result whose tree passed
every required check; a failure refuses its proposal (it stays open); a batch that fails is
bisected and its good part lands; a check that never reports fails after the policy's timeout.

The tests play the CI system: they read the ``check.requested`` events and report results on the
trees asked for, as a runner would."""

from __future__ import annotations

import pytest

from engine.trees import lookup
from repos.models import CheckResult, Event, Operation, Proposal, Stream
from repos.services import integration
from repos.services.stores import store_for

from .conftest import ALL_BUT_ADMIN, Api, client_with

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def repo(admin, monkeypatch):
    """``demo`` with a first changeset on main; an agent, an admin and a CI client; landing
    wake-ups (a pending check's timeout) recorded instead of run on a timer thread."""
    assert admin.post("/api/v1/repos", {"name": "demo"}, format="json").status_code == 201
    agent = Api(client_with(ALL_BUT_ADMIN), "demo")
    agent.land(agent.write(None, {"README.md": "hello\n"}))
    wakes: list[tuple[int, float]] = []
    monkeypatch.setattr(integration, "_wake_later", lambda stream, delay: wakes.append((stream, delay)))
    ci = Api(client_with(["read", "checks"]), "demo")
    ci.wakes = wakes
    return agent, Api(admin, "demo"), ci


def guard(admin: Api, **rule) -> None:
    document = {"rules": [{"streams": ["main"], "required_checks": ["ci/test"], **rule}]}
    response = admin.client.put(admin.url("/policy"), document, format="json")
    assert response.status_code == 200, response.content


def requested() -> list[dict]:
    return [event.payload for event in Event.objects.filter(kind="check.requested").order_by("seq")]


def report(ci: Api, tree: str, state: str, name: str = "ci/test", url: str = "https://ci.example/run/1") -> None:
    response = ci.post("/checks", {"tree": tree, "name": name, "state": state, "url": url})
    assert response.status_code == 201, response.content


def run_ci(ci: Api, *, bad: str = "bad") -> int:
    """Report every pending check: failure on a tree that has a ``bad`` directory, else success;
    until none is pending. How many were reported."""
    store = store_for("demo")
    reported = 0
    while True:
        pending = list(CheckResult.objects.filter(state="pending").values_list("tree", "name"))
        if not pending:
            return reported
        for tree, name in pending:
            report(ci, tree, "failure" if lookup(store, tree, bad) is not None else "success", name)
            reported += 1


def test_a_landing_waits_for_its_check_and_lands_when_it_passes(repo):
    agent, admin, ci = repo
    guard(admin)
    before = agent.head()
    body = {"message": "m", "operations": [{"op": "write", "path": "a.txt", "content": "a\n"}]}
    waiting = agent.post("/streams/main/land", body, wait=0)
    assert waiting.status_code == 202, waiting.content
    assert agent.head() == before
    [asked] = requested()
    assert (
        asked["stream"] == "main"
        and asked["names"] == ["ci/test"]
        and asked["proposals"] == [waiting.json()["proposal"]]
    )
    result = agent.get(f"/changesets/{asked['changeset']}").json()
    assert result["tree"] == asked["tree"]  # the runner materialises the changeset it is told of
    assert ci.wakes and ci.wakes[-1][1] > 1700  # looked at again by the timeout (default 1800 s)

    report(ci, asked["tree"], "success")

    assert agent.head() == asked["changeset"]
    proposal = agent.get(f"/proposals/{waiting.json()['proposal']}").json()
    assert proposal["state"] == "integrated"
    checks = next(item for item in proposal["decision"]["requirements"] if item["requirement"] == "checks")
    assert checks["met"] is True and asked["tree"] in checks["message"]
    assert proposal["decision"]["checks"] == {"tree": asked["tree"], "names": ["ci/test"]}


def test_a_failing_check_refuses_the_proposal_naming_the_check_and_its_link(repo):
    agent, admin, ci = repo
    guard(admin)
    before = agent.head()
    proposal = agent.propose(agent.write(before, {"bad/x.txt": "broken\n"}))
    assert agent.post(f"/proposals/{proposal}/integrate", {}, wait=0).status_code == 202
    [asked] = requested()
    report(ci, asked["tree"], "failure", url="https://ci.example/run/7")

    assert agent.head() == before
    operation = Operation.objects.filter(proposal_id=proposal).get()
    assert operation.state == "failed" and operation.error["code"] == "policy_denied"
    [detail] = operation.error["details"]
    assert detail["requirement"] == "checks" and "ci/test failed (https://ci.example/run/7)" in detail["message"]
    assert Proposal.objects.get(pk=proposal).state == "open"  # open for a revision
    refused = agent.integrate(proposal)  # asking again: the same tree, the same known failure
    assert refused.status_code == 403 and refused.json()["error"]["details"][0]["requirement"] == "checks"


def test_a_proposal_whose_own_changeset_fails_is_refused_at_once_and_holds_nothing(repo):
    agent, admin, ci = repo
    guard(admin)
    base = agent.head()
    proposals = [agent.propose(agent.write(base, {f"{name}.txt": f"{name}\n"})) for name in ("one", "bad/two", "three")]
    for proposal in proposals:
        assert agent.post(f"/proposals/{proposal}/integrate", {}, wait=0).status_code == 202
    # The first's result; the others' own changesets, beside it (the first's result is its own).
    asked = requested()
    assert [(event["of"], event["proposals"]) for event in asked] == [
        ("result", proposals[:1]),
        ("proposal", proposals[1:2]),
        ("proposal", proposals[2:]),
    ]
    bad_own = asked[1]
    report(ci, bad_own["tree"], "failure", url="https://ci.example/run/2")

    operation = Operation.objects.get(proposal_id=proposals[1])
    assert operation.state == "failed" and operation.error["code"] == "policy_denied"
    [detail] = operation.error["details"]
    assert detail["requirement"] == "checks"
    assert (
        f"ci/test failed (https://ci.example/run/2) on the proposal's own changeset {bad_own['changeset']}"
        in (detail["message"])
    )
    assert Proposal.objects.get(pk=proposals[1]).state == "open"

    run_ci(ci)

    assert [Proposal.objects.get(pk=p).state for p in proposals] == ["integrated", "open", "integrated"]
    assert agent.file("three.txt") == b"three\n" and agent.file("one.txt") == b"one\n"
    # The bad one cost its own test; the results tested never held it.
    results = [event for event in requested() if event["of"] == "result"]
    assert all(proposals[1] not in event["proposals"] for event in results)


@pytest.mark.parametrize("speculative", [True, False])
def test_a_batch_whose_changes_break_each_other_is_bisected_and_its_good_part_lands(repo, settings, speculative):
    """Each change passes alone; ``left`` and ``right`` together fail (the CI fails a tree with
    both): the batch of all fails, bisection lands the part before ``right`` and refuses it."""
    settings.AGENTGIT = {**settings.AGENTGIT, "SPECULATIVE_CHECKS": speculative}
    agent, admin, ci = repo
    guard(admin)
    base = agent.head()
    files = ["one", "two", "left", "three", "right", "four"]
    proposals = [agent.propose(agent.write(base, {f"{name}.txt": f"{name}\n"})) for name in files]
    for proposal in proposals:
        assert agent.post(f"/proposals/{proposal}/integrate", {}, wait=0).status_code == 202
    assert Operation.objects.filter(state="queued").count() == 6
    store = store_for("demo")

    def broken(tree: str) -> bool:
        return lookup(store, tree, "left.txt") is not None and lookup(store, tree, "right.txt") is not None

    # The own changesets first (the first proposal's result among them), as a runner would.
    for event in requested():
        report(ci, event["tree"], "failure" if broken(event["tree"]) else "success")
    if speculative:  # each change passed alone: the whole queue behind the first is asked for at once
        assert [len(event["proposals"]) for event in requested() if event["of"] == "result"][-1] == 5
    while CheckResult.objects.filter(state="pending").exists():
        for tree in CheckResult.objects.filter(state="pending").values_list("tree", flat=True):
            report(ci, tree, "failure" if broken(tree) else "success")

    states = {proposal: Proposal.objects.get(pk=proposal).state for proposal in proposals}
    right = proposals[4]
    assert states.pop(right) == "open"
    assert set(states.values()) == {"integrated"}
    refused = Operation.objects.get(proposal_id=right)
    assert refused.error["details"][0]["requirement"] == "checks"
    history = agent.get("/log", rev="main", limit=100).json()["changesets"]
    assert not any(broken(agent.get(f"/changesets/{c['id']}").json()["tree"]) for c in history)
    for name in ("one", "two", "left", "three", "four"):
        assert agent.file(f"{name}.txt") == f"{name}\n".encode()
    # Bisection asked for a few prefixes, not one per proposal after the failure.
    assert len([event for event in requested() if event["of"] == "result"]) <= 8


def test_a_check_that_never_reports_fails_after_the_timeout(repo, monkeypatch):
    agent, admin, ci = repo
    guard(admin, check_timeout_s=1)
    before = agent.head()
    proposal = agent.propose(agent.write(before, {"slow.txt": "s\n"}))
    assert agent.post(f"/proposals/{proposal}/integrate", {}, wait=0).status_code == 202
    stream, delay = ci.wakes[-1]
    assert 1 <= delay <= 3  # woken by the timeout, not only by a report
    CheckResult.objects.update(updated=CheckResult.objects.get().updated.replace(year=2000))  # long ago

    integration.land_stream(stream)  # what the timer runs

    operation = Operation.objects.get(proposal_id=proposal)
    assert operation.state == "failed" and "did not report within 1 s" in operation.error["details"][0]["message"]
    assert agent.head() == before


def test_a_tree_that_passed_before_lands_without_asking_again(repo):
    agent, admin, ci = repo
    guard(admin)
    base = agent.head()
    first = agent.write(base, {"same.txt": "same\n"})
    tree = agent.get(f"/changesets/{first}").json()["tree"]
    report(ci, tree, "success")  # tested earlier (on another branch, say)
    landed = agent.integrate(agent.propose(agent.write(base, {"same.txt": "same\n"}, message="again\n")))
    assert landed.status_code == 200 and landed.json()["outcome"] == "fast_forward"
    assert requested() == []


def test_an_admin_bypass_lands_without_the_checks(repo):
    agent, admin, ci = repo
    guard(admin)
    proposal = agent.propose(agent.write(agent.head(), {"hotfix.txt": "fix\n"}))
    landed = admin.post(f"/proposals/{proposal}/integrate", {"bypass": "CI is down"})
    assert landed.status_code == 200, landed.content
    assert requested() == []


def test_a_direct_update_needs_the_checks_passed_on_its_tree_already(repo):
    agent, admin, ci = repo
    document = {"rules": [{"streams": ["release/*"], "required_checks": ["ci/test"], "direct_update": "everyone"}]}
    assert admin.client.put(admin.url("/policy"), document, format="json").status_code == 200
    refused = agent.post("/streams", {"name": "release/1", "from": "main"})
    assert refused.status_code == 403
    [detail] = refused.json()["error"]["details"]
    assert detail["requirement"] == "checks" and "has not reported" in detail["message"]
    report(ci, agent.get(f"/changesets/{agent.head()}").json()["tree"], "success")
    assert agent.post("/streams", {"name": "release/1", "from": "main"}).status_code == 201


def test_a_report_looks_once_at_each_stream_that_waits_whatever_its_queue(repo, monkeypatch):
    agent, admin, ci = repo
    guard(admin)
    base = agent.head()
    for name in ("one", "two", "three"):
        proposal = agent.propose(agent.write(base, {f"{name}.txt": f"{name}\n"}))
        assert agent.post(f"/proposals/{proposal}/integrate", {}, wait=0).status_code == 202
    looks: list[tuple] = []
    real = integration.after_commit

    def after_commit(job, *args):
        looks.append((job.name, *args))
        real(job, *args)

    monkeypatch.setattr(integration, "after_commit", after_commit)
    report(ci, requested()[0]["tree"], "success")
    main = Stream.objects.get(name="main").pk
    assert looks == [(integration.LAND_STREAM.name, main)]  # one look at main, not one per queued operation
