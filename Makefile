# make serve: run the server.  make test: run the test suite.  make lint: the lint and type gate.
# make clean: start over.

PORT ?= 8000
HOST ?= 127.0.0.1
# Server processes: one runs Python on one core at a time, and waits for disk and locks part of
# the time, so two per core (docs/adr/0002).
WORKERS ?= $(shell echo $$(( 2 * $$(nproc 2>/dev/null || echo 1) )))
VENV := .venv
PY := $(VENV)/bin/python
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
# Named after the requirements' content (and the client package's, client/pyproject.toml): an
# edited requirements file reinstalls, a merely touched one (checkout, clone) does not.
INSTALLED := $(VENV)/.installed-$(shell cat requirements/*.txt client/pyproject.toml | sha256sum | cut -c1-16)

.PHONY: serve test lint clean setup git chromium wrk strace cgit rg

# The metrics directory is emptied before the servers start (every process adds its counters
# there). --no-access-log: the server writes its own access log, with secrets redacted
# (uvicorn's prints query strings, where WebSocket clients put their token).
# --ws-per-message-deflate false: compressing each event frame once per subscriber took 5-13 % of
# the servers' busy time under fan-out, for frames of small JSON (docs/adr/0011).
serve: setup
	$(PY) manage.py collectstatic --noinput --verbosity 0
	$(PY) manage.py agentgit_recover
	$(PY) manage.py agentgit_maintain
	$(PY) manage.py agentgit_metrics_reset
	$(PY) manage.py agentgit_serve_info --host $(HOST) --port $(PORT)
	exec $(PY) -m uvicorn agentgit_site.asgi:application --host $(HOST) --port $(PORT) --workers $(WORKERS) --lifespan off --no-access-log --ws-per-message-deflate false

test: setup chromium wrk strace cgit rg
	$(PY) -m pytest -n 2
	$(PY) manage.py agentgit_bench engine --sizes 1000 --samples 3
	$(PY) manage.py agentgit_bench load --profile smoke

# The lint and type gate (CI runs it before the tests): ruff's rules and mypy's configuration,
# with the engine at --strict and the ratchet of the rest, are in pyproject.toml (docs/adr/0006).
lint: $(INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) var staticfiles

setup: git $(INSTALLED)
	$(PY) manage.py migrate --noinput

# git serves clones and pushes (DESIGN.md, decision 3) and is the oracle of the engine tests.
git:
	@command -v git >/dev/null || { $(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends git; }

# The web UI's browser tests (tests/web/) drive Debian's chromium through Playwright;
# Playwright's own browser download cannot work here.
chromium:
	@command -v chromium >/dev/null || { $(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; }

# The load benchmark (benchmarks/load.py) drives the read-only scenarios with Debian's wrk: Python
# clients cannot saturate the read path.
wrk:
	@command -v wrk >/dev/null || { $(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends wrk; }

# agentgit_bench cost (benchmarks/cost_bench.py) counts the server's fsyncs from outside with strace.
strace:
	@command -v strace >/dev/null || { $(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends strace; }

# agentgit_bench history --source (benchmarks/real_history.py) times the web pages beside Debian's
# cgit, its CGI binary run with no cache.
cgit:
	@test -x /usr/lib/cgit/cgit.cgi || { $(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends cgit; }

# agentgit_bench search (benchmarks/search_bench.py) sets code search beside ripgrep on a checkout.
rg:
	@command -v rg >/dev/null || { $(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ripgrep; }

# The client, CLI and MCP server (client/, a distribution of its own) are installed editable:
# their tests (tests/client) run from the work tree.
$(INSTALLED):
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements/dev.txt
	$(PY) -m pip install --quiet -e 'client[mcp]'
	rm -f $(VENV)/.installed-*
	touch $@
