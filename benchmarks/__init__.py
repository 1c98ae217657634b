"""AgentGit's benchmarks, run as ``manage.py agentgit_bench SUITE`` (one subcommand per suite).

Performance goals live here, never in timed tests: each suite prints a table (and writes JSON
and markdown), and every row checks what it measured, so a wrong answer fails instead of
looking fast.

* ``suites``        — the command line: every suite's options, what it runs, the registry.
* ``engine_bench``  — ``engine``: the engine's hot paths by repository size, each row beside the
  git binary doing the same work on the same objects (the reference's ``ag-bench engine``);
  ``report`` formats it as a text table, JSON and markdown.
* ``candidates``    — ``candidates``: the libraries the engine could have been built on (docs/adr/0001).
* ``cycle``         — ``cycle``: the agent's cycle per second over real HTTP, against real server and
  worker processes started by the test harness (tests/deployment.py), or a running server.
* ``history_bench`` — ``history``: reads over long histories with and without the derived data
  (needs Django: it goes through the services, in a throwaway repository).

Only ``history_bench`` imports Django (lazily, when it runs); the rest measure the engine or
talk HTTP to processes they start.
"""
