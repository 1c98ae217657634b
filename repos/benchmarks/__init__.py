"""Benchmarks of AgentGit, runnable as ``manage.py agentgit_bench``.

* ``engine_bench`` — the engine's hot paths by repository size, each row beside the git binary
  doing the same work on the same objects (the counterpart of the reference's ``ag-bench engine``).
* ``report``       — the results as a text table, JSON and markdown.

Nothing here imports Django: the management command is a thin adapter over these modules.
"""
