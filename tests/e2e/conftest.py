"""End-to-end tests: the server as it is deployed, as real processes, over real HTTP.

Each module starts its own deployment (tests/e2e/support.py): a fresh data directory and, for
the production mode, a fresh PostgreSQL database and Redis database index, a ``uvicorn`` server
and ``celery`` workers; everything is killed and dropped at the end of the module. They need
PostgreSQL on 127.0.0.1:5432 (user ``postgres``, trust) and Redis on 127.0.0.1:6379, which this
machine and CI start; without them the tests fail and say what is missing (they do not skip:
the production mode must not go untested silently). ``-m "not e2e"`` leaves them out.

When a test fails, the tail of every process log of the deployments it used is added to the report.
"""

from __future__ import annotations

import pytest

from .support import Deployment


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/e2e/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.e2e)


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: end-to-end tests against real server and worker processes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for value in getattr(item, "funcargs", {}).values():
            if isinstance(value, Deployment):
                report.sections.append((f"{value.mode} deployment logs ({value.data_dir})", value.logs()))


@pytest.fixture(scope="module")
def production() -> Deployment:
    """PostgreSQL + Redis + ``uvicorn --workers 2``; no Celery worker (tests start their own)."""
    yield from _served("production", workers=2)


@pytest.fixture(scope="module")
def embedded() -> Deployment:
    """The embedded default: SQLite, Celery eager, one ``uvicorn`` process."""
    yield from _served("embedded", workers=1)


def _served(mode: str, workers: int):
    with Deployment(mode) as deployment:
        deployment.start_server(workers=workers)
        deployment.token = deployment.create_token("agent", rate=100_000, burst=100_000)
        yield deployment
