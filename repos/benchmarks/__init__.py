"""Benchmarks of AgentGit, runnable as ``manage.py agentgit_bench``.

* ``deployment``   — real deployments (processes, PostgreSQL, Redis) and an API client, for the cycle
  benchmark and the end-to-end tests.
* ``cycle``        — the agent's cycle per second over real HTTP (``agentgit_bench cycle``).
* ``candidates``   — the libraries the engine could have been built on (docs/adr/0001).
* ``engine_bench`` — the engine's hot paths by repository size, each row beside the git binary
  doing the same work on the same objects (the counterpart of the reference's ``ag-bench engine``).
* ``report``       — the results as a text table, JSON and markdown.

Nothing here imports Django: the management command is a thin adapter over these modules.
"""
