"""One deployment of the checkout in the working directory, for ``agentgit_bench cost --against``.

Run as a script, with the working directory a checkout of AgentGit (this one, or another:
an earlier commit's worktree), so that ``tests.deployment`` and the server are that checkout's:
``python benchmarks/side_by_side.py MODE``. It starts the deployment as ``agentgit_bench cost``
does (four server processes; production with two Celery workers), prints one JSON line with its
URL and a token, then answers each line read from stdin with one JSON line: the CPU seconds so
far of the deployment's processes and of its database's backends, per process. It imports
nothing else of this checkout's (its own code may differ from the other one's) and stops when
stdin closes.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far, its reaped children's included (0 if it is
    gone): also ``cost_bench``'s, which imports it from here."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        return sum(int(field) for field in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return 0.0


def main(mode: str, server_workers: int) -> None:
    sys.path.insert(0, os.getcwd())
    from tests.deployment import Deployment

    with Deployment(mode) as deployment:
        for _ in range(2 if mode == "production" else 0):
            deployment.start_worker()
        deployment.start_server(workers=server_workers)
        token = deployment.create_token("bench", rate=1_000_000, burst=1_000_000)  # never the limit
        print(json.dumps({"url": deployment.url, "token": token}), flush=True)
        for _line in sys.stdin:
            servers = [pid for process in deployment.processes if process.alive for pid in process.group_pids()]
            database = []
            if deployment.database is not None:
                rows = deployment.database.query(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                    (deployment.database.name,),
                )
                database = [pid for (pid,) in rows]
            sample = {
                "server": {str(pid): cpu_seconds(pid) for pid in servers},
                "database": {str(pid): cpu_seconds(pid) for pid in database},
            }
            print(json.dumps(sample), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
