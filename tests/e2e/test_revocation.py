"""A revoked token is refused by the very next request, in every server process.

Each server process keeps the credentials it authenticated (repos/services/credential_cache.py)
while the credential generation is unchanged: a file mapped by every process (embedded), a Redis
key (production). Here ``uvicorn --workers 4`` serves a token from several processes (each
request on a new connection, so the kernel spreads them), the token is revoked — through the
credentials API, answered by one of those processes, or by ``manage.py agentgit_credential
revoke``, a process of its own — and every request after the revocation returns is refused.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from .support import ApiClient, Deployment

READS = 48
#: At most this many rounds of READS until the kernel has spread them over two processes.
ROUNDS = 10


@pytest.fixture(scope="module", params=["embedded", "production"])
def servers(request):
    with Deployment(request.param) as deployment:
        deployment.start_server(workers=4)
        yield deployment


def read(url: str, token: str) -> int:
    """A GET of the repository (a read the hot-read lane answers) on a new connection: its status."""
    with httpx.Client(timeout=30, trust_env=False) as http:
        return http.get(url, headers={"Authorization": f"Bearer {token}"}).status_code


def served_by(servers: Deployment, path: str, expected: int) -> list[dict]:
    """The access lines of ``path`` (waiting until there are ``expected``: a line is written just
    after its answer)."""
    deadline = time.monotonic() + 10
    while True:
        lines = [json.loads(line) for line in servers.server.log().splitlines() if line.startswith('{"time"')]
        found = [line for line in lines if line["path"] == path]
        if len(found) >= expected or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


@pytest.mark.parametrize("revoked_by", ["api", "command"])
def test_a_revoked_token_is_refused_by_the_next_request_in_every_process(servers, revoked_by):
    admin = servers.create_token("admin", scopes="admin")
    reader = servers.create_token("reader", scopes="read")
    repo = f"revoked{revoked_by}"
    with ApiClient(servers.url, admin) as client:
        client.create_repo(repo)
    path = f"/api/v1/repos/{repo}"

    # The kernel hands each connection to whichever process accepts first: on a quiet machine
    # one process can take a whole round, so read in rounds until two processes have served.
    for rounds in range(1, ROUNDS + 1):
        assert [read(servers.url + path, reader) for _ in range(READS)] == [200] * READS
        before = served_by(servers, path, rounds * READS)
        processes_before = {line["pid"] for line in before}
        if len(processes_before) >= 2:
            break
    assert len(processes_before) >= 2, f"the kernel gave every read to one process: {processes_before}"
    credential_id = before[0]["credential"]

    if revoked_by == "api":
        with httpx.Client(timeout=30, trust_env=False) as http:
            answer = http.delete(
                f"{servers.url}/api/v1/credentials/{credential_id}", headers={"Authorization": f"Bearer {admin}"}
            )
        assert answer.status_code == 204, answer.text
    else:
        servers.manage("agentgit_credential", "revoke", "--prefix", reader[:12])

    served_before = len(before)
    for rounds in range(1, ROUNDS + 1):
        assert [read(servers.url + path, reader) for _ in range(READS)] == [401] * READS
        after = served_by(servers, path, served_before + rounds * READS)[served_before:]
        if {line["pid"] for line in after} & processes_before:
            break
    # Processes that had the credential kept refused it: none of them looked it up again first.
    assert {line["pid"] for line in after} & processes_before
    assert {line["status"] for line in after} == {401}
