"""The served OpenAPI schema against a real server: schemathesis generates requests from
/api/v1/schema and fails on any 5xx and on any answer the schema does not describe.

The server is ``uvicorn`` on a fresh data directory (the harness in tests/deployment.py).
Before the run, a repository ``fuzz`` gets changesets, a landed proposal, an open one, a stream and
blobs, and their ids go into schemathesis dictionaries, so most generated requests name things that
exist and get past 404. Every check runs (``--checks all``: server errors, status codes, content
types, headers, response bodies, and negative and positive data: a request the schema forbids must
be refused, one it allows must not be), in every phase: examples, coverage, fuzzing and stateful
(the schema's links chain create → read → integrate).

Schema-valid requests that only the data can refuse, and that API.md says are 400 ``invalid``,
are listed in :data:`SEMANTIC_400`: bytes that do not hash to the ``id`` they are sent under, and
changesets whose blobs are missing or whose operations contradict each other or the parent.

The run is short for CI (:data:`MAX_EXAMPLES` per operation, a fixed seed). For a longer one:
``AGENTGIT_FUZZ_EXAMPLES=200 AGENTGIT_FUZZ_SEED=random pytest tests/api/test_schema_fuzz.py -s``.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.deployment import BASE_DIR, ApiClient, Deployment
from tests.receiver import Receiver

MAX_EXAMPLES = int(os.environ.get("AGENTGIT_FUZZ_EXAMPLES", "10"))
SEED = os.environ.get("AGENTGIT_FUZZ_SEED", "20261201")
#: The whole run's budget; the CI run takes a fraction of it.
TIMEOUT_S = 240

#: Operations where a request the schema allows can still be 400 ``invalid``, and why.
SEMANTIC_400 = {
    "/api/v1/repos/{repo}/blobs/{blob_id}": "the bytes must hash to the id in the URL",
    "/api/v1/repos/{repo}/blobs/batch": "each blob's bytes must hash to its id",
    "/api/v1/repos/{repo}/changesets": "blobs must exist; operations must agree with each other and the parent",
    "/api/v1/repos/{repo}/streams/{stream}/land": "a changeset's rules: blobs exist, operations agree",
    "/api/v1/repos/{repo}/proposals/{proposal_id}/resolve": "the resolutions name exactly the conflicting paths",
    "/api/v1/repos/{repo}/policy": "each path pattern must parse as gitignore's (an unclosed '[' does not)",
    "/api/v1/repos/{repo}/checks": "exactly one of changeset and tree",
    "/api/v1/repos/{repo}/search": "q must be one line that RE2 accepts as a pattern",
    "/api/v1/repos/{repo}/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver": "409 while still pending",
    "/api/v1/credentials": "path patterns must be gitignore's (a comment, '!' or '[z-a]' is not)",
}


#: Operations that name other resources inside their bodies or queries or depend on a proposal's
#: state (a list of parents; the stream head a resolution was made on; a check's changeset or
#: tree, exactly one of which a report or a listing names; a proposal the run itself closed,
#: reopened, revised, resolved or integrated meanwhile, so that which of them is served depends
#: on the order of the run's requests; a review of a proposal that must be open, by someone who
#: did not write it, and a review's own id): most generated requests answer 404 or 409, which
#: schemathesis reports as "missing test data". Their answers are still checked against the
#: schema; their success paths are tested in tests/api/test_conflicts.py,
#: tests/api/test_scenario.py, tests/api/test_checks.py and tests/api/test_policies.py. Any other
#: operation reported so fails the run.
SPARSE_404 = {
    "POST /api/v1/repos/{repo}/changesets",
    "GET /api/v1/repos/{repo}/checks",
    "POST /api/v1/repos/{repo}/checks",
    "POST /api/v1/repos/{repo}/proposals/{proposal_id}/resolve",
    "POST /api/v1/repos/{repo}/proposals/{proposal_id}/integrate",
    "POST /api/v1/repos/{repo}/proposals/{proposal_id}/reviews",
    "DELETE /api/v1/repos/{repo}/proposals/{proposal_id}/reviews/{review_id}",
    "POST /api/v1/repos/{repo}/proposals/{proposal_id}/close",
    "POST /api/v1/repos/{repo}/proposals/{proposal_id}/reopen",
    "POST /api/v1/repos/{repo}/proposals/{proposal_id}/revisions",
}


def missing_test_data(output: str) -> set[str]:
    """The operations schemathesis's "Missing test data" warning names."""
    start = output.find("Missing test data:")
    if start < 0:
        return set()
    # The block ends where the next warning's begins (each opens with "<Name>: N operations").
    following = re.search(
        r"\n\s*(?!Missing test data)[A-Z][a-z]+(?: [a-z]+)*: \d+ operations?|\n\s*Warnings:", output[start:]
    )
    section = output[start : start + following.start()] if following else output[start:]
    return {
        f"{method} {path}"
        for method, path in re.findall(r"^\s*- (GET|POST|PUT|PATCH|DELETE) (/\S+)\s*$", section, re.M)
    }


def seed_repository(api: ApiClient, receiver_url: str) -> dict[str, list]:
    """A repository ``fuzz`` with some history; the values the run draws names and ids from."""
    api.create_repo("fuzz")
    hook = api.request(
        "POST", "/repos/fuzz/webhooks", json={"url": receiver_url, "secret": "fuzz", "events": ["*"]}, expect=(201,)
    ).json()
    blob = api.upload_blob("fuzz", b"blob bytes\n")
    root = api.write("fuzz", None, {"a.txt": "a\n", "dir/b.txt": "b\n"}, "root")
    landed = api.open_proposal("fuzz", root)
    outcome = api.integrate("fuzz", landed["id"])
    child = api.write("fuzz", root, {"a.txt": "a, changed\n", "dir/c.txt": "c\n"}, "child")
    api.create_stream("fuzz", "topic", root)
    api.create_stream("fuzz", "team/work", child)
    # Several open proposals: the run closes, reopens and revises the ones it draws.
    waiting = [api.open_proposal("fuzz", child, stream=stream) for stream in ("topic", "topic", "team/work")]
    note = api.request(
        "POST", f"/repos/fuzz/proposals/{waiting[0]['id']}/reviews", json={"verdict": "comment"}, expect=(201,)
    ).json()
    trees = [api.get_json(f"/repos/fuzz/changesets/{rev}")["tree"] for rev in (root, child)]
    check = {"changeset": root, "name": "ci/test", "state": "success"}
    api.request("POST", "/repos/fuzz/checks", json=check, expect=(201,))
    deliveries = delivered(api, hook["id"])
    return {
        "repos": ["fuzz"],
        "revisions": [root, child, "main", "topic", "team/work"],
        "changesets": [root, child],
        "streams": ["main", "topic", "team/work"],
        "blobs": [blob],
        "paths": ["a.txt", "dir/b.txt", "dir/c.txt"],
        "dirs": ["dir"],
        "proposals": [landed["id"], *(proposal["id"] for proposal in waiting)],
        "operations": [outcome["operation"]],
        "reviews": [note["id"]],
        "trees": trees,
        "webhooks": [hook["id"]],
        "deliveries": [delivery["id"] for delivery in deliveries],
    }


def delivered(api: ApiClient, webhook_id: int) -> list[dict]:
    """The seeded webhook's deliveries once they are all delivered (the sender is in the background)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = api.get_json(f"/repos/fuzz/webhooks/{webhook_id}/deliveries")["deliveries"]
        if found and all(delivery["state"] == "delivered" for delivery in found):
            return found
        time.sleep(0.1)
    raise AssertionError(f"the seeded webhook's deliveries never arrived: {found}")


def config(values: dict[str, list], cache: Path) -> str:
    """The run's schemathesis.toml: the checks, the phases, and where known values go."""
    lines = [
        f"seed = {SEED}" if SEED.isdigit() else "",
        'hooks = "tests.api.fuzz_hooks"',
        # One worker: with two threads, Hypothesis's ast.parse of a filter's lambda hits CPython
        # 3.11.7's "AST constructor recursion depth mismatch" (fixed in later 3.11 releases).
        "workers = 1",
        # Its cache (what `st replay ID` replays) in the test's directory, not the work tree.
        "[cache]",
        f"directory = {json.dumps(str(cache))}",
        "[generation]",
        f"max-examples = {MAX_EXAMPLES}",
        "[phases.stateful]",
        "max-steps = 12",
        # Only the schema's own links: inferred ones lead to requests whose 404 is about another
        # resource named in the request, which the created-resource check takes for a lost one.
        "[phases.stateful.inference]",
        "algorithms = []",
        "[checks]",
        "enabled = true",
    ]
    for name, items in values.items():
        lines += [f"[dictionaries.{name}]", f"values = {json.dumps(items)}"]
    bindings = {
        "path.repo": ("repos", 0.9),
        "path.rev": ("revisions", 0.7),
        "path.stream": ("streams", 0.7),
        "path.changeset_id": ("changesets", 0.7),
        "path.blob_id": ("blobs", 0.5),
        "path.path": ("paths", 0.7),
        "path.proposal_id": ("proposals", 0.7),
        "path.operation_id": ("operations", 0.7),
        "path.review_id": ("reviews", 0.7),
        "path.webhook_id": ("webhooks", 0.7),
        "path.delivery_id": ("deliveries", 0.7),
        "query.rev": ("revisions", 0.5),
        "query.from": ("revisions", 0.7),
        "query.to": ("revisions", 0.7),
        "query.stream": ("streams", 0.5),
        "query.path": ("paths", 0.5),
        "body.parent": ("changesets", 0.5),
        "body.head": ("revisions", 0.7),
        "body.stream_head": ("revisions", 0.7),
        "body.from": ("revisions", 0.5),
        "body.stream": ("streams", 0.7),
        "body.changeset": ("changesets", 0.5),
        "body.tree": ("trees", 0.5),
        "query.changeset": ("changesets", 0.5),
        "query.tree": ("trees", 0.5),
    }
    lines.append("[parameters]")
    for key, (dictionary, probability) in bindings.items():
        lines.append(f'"{key}" = {{ dictionary = "{dictionary}", probability = {probability} }}')
    lines += [
        # HTTP headers the API does not know are ignored, as HTTP intends (proxies add them); the
        # events operation is the one that declares a header, which makes the run send others.
        "[[operations]]",
        'include-path = "/api/v1/repos/{repo}/events"',
        "[operations.generation]",
        "allow-extra-parameters = false",
        # A directory to list rather than a file.
        "[[operations]]",
        'include-path = "/api/v1/repos/{repo}/tree/{rev}"',
        "[operations.parameters]",
        '"query.path" = { dictionary = "dirs", probability = 0.7 }',
    ]
    lines += [
        # Deleting a seeded stream takes its proposals with it, and every later request naming
        # them answers 404 ("missing test data"); tests/api/test_conflicts.py covers the delete.
        "[[operations]]",
        'include-name = "DELETE /api/v1/repos/{repo}/streams/{stream}"',
        "enabled = false",
        # Likewise the seeded webhook and its deliveries; tests/api/test_webhooks.py covers it.
        "[[operations]]",
        'include-name = "DELETE /api/v1/repos/{repo}/webhooks/{webhook_id}"',
        "enabled = false",
        # Revoking a credential by a generated id revokes the run's own token sooner or later,
        # and every later request answers 401; tests/api/test_scoped_credentials.py covers it.
        "[[operations]]",
        'include-name = "DELETE /api/v1/credentials/{credential_id}"',
        "enabled = false",
    ]
    for path, why in SEMANTIC_400.items():
        lines += [
            "[[operations]]",
            f'include-path = "{path}"',
            f"# {why}",
            "[operations.checks.positive_data_acceptance]",
            'expected-statuses = ["2XX", 400, 401, 403, 404, 409, 429]',
        ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def server():
    with Deployment("embedded", env={"AGENTGIT_RATE_LIMIT": "0"}) as deployment:
        deployment.token = deployment.create_token("fuzz")
        deployment.start_server()
        yield deployment


def run_schemathesis(server: Deployment, tmp_path: Path) -> tuple[subprocess.CompletedProcess, float, float]:
    """The run's result, its wall time and its CPU time (the schemathesis process's), in seconds."""
    receiver = Receiver()
    with ApiClient(server.url, server.token) as api:
        values = seed_repository(api, receiver.url)
    config_file = tmp_path / "schemathesis.toml"
    config_file.write_text(config(values, tmp_path / "schemathesis-cache"))
    argv = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(config_file), "--no-color",
        "run", f"{server.url}/api/v1/schema?format=json", "--url", server.url,
        "--header", f"Authorization: Bearer {server.token}", "--checks", "all",
    ]  # fmt: skip
    started, cpu_before = time.monotonic(), _children_cpu()
    try:
        done = subprocess.run(
            argv,
            cwd=BASE_DIR,  # the hooks module is imported from here
            env={**os.environ, "PYTHONPATH": str(BASE_DIR)},
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    finally:
        receiver.close()
    return done, time.monotonic() - started, _children_cpu() - cpu_before


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test_the_server_answers_as_its_schema_says(server, tmp_path):
    done, seconds, cpu_seconds = run_schemathesis(server, tmp_path)

    summary = re.search(r"(\d+) generated.*", done.stdout)
    print(done.stdout[done.stdout.find("=== SUMMARY") :], f"schemathesis ran {seconds:.1f} s ({cpu_seconds:.1f} s CPU)")
    assert done.returncode == 0, f"schemathesis found disagreements:\n{done.stdout[-20000:]}\n{done.stderr[-3000:]}"
    assert summary and int(summary.group(1)) > 200, done.stdout[-3000:]  # the run did reach the API
    assert missing_test_data(done.stdout) <= SPARSE_404, done.stdout[-5000:]  # ids from the seeded repository
