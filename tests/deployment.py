"""Real deployments of AgentGit, for the tests that need real servers and for the cycle benchmark.

:class:`Deployment` starts a fresh data directory and either the embedded default (SQLite, Celery
eager: one ``uvicorn`` process does everything) or the production mode (a fresh PostgreSQL
database, a Redis database index of its own as the Celery broker, ``uvicorn --workers N`` and
``celery -A agentgit_site worker`` processes). Every process runs in its own process group and is
killed with it; ``manage.py migrate`` and ``manage.py agentgit_credential create`` run as
subprocesses with the deployment's environment. :class:`ApiClient` speaks the REST API of API.md.

Why it lives in tests/: it is test machinery (free ports, throwaway databases, lock-file held
Redis indexes, kill-on-teardown), used by the end-to-end tests and by the tests of the site
that need a real server. ``benchmarks/cycle.py`` imports it from here, so the cycle benchmark
measures exactly the deployments the end-to-end tests prove correct; nothing in the server
imports it.

No Django here: the processes it starts import Django, this module does not.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

#: The project root (where manage.py is).
BASE_DIR = Path(__file__).resolve().parent.parent

#: The server the tests and the benchmark create their databases on (trust auth on this machine).
POSTGRES_ADMIN_URL = os.environ.get("AGENTGIT_E2E_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_BASE_URL = os.environ.get("AGENTGIT_E2E_REDIS", "redis://127.0.0.1:6379")
#: Redis database indexes handed out to deployments, one at a time each (a lock file per index),
#: flushed when taken and when given back. 0–7 are left to everything else.
REDIS_DB_INDEXES = range(8, 16)

#: Environment variables of the calling process that must not leak into a deployment.
_SCRUBBED_ENV = (
    "DATABASE_URL",
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "AGENTGIT_CRASH_AT",
    "AGENTGIT_DATA_DIR",
    "AGENTGIT_E2E_KEEP",
    "DJANGO_SETTINGS_MODULE",
    "DJANGO_SECRET_KEY",
    "PROMETHEUS_MULTIPROC_DIR",  # each deployment's metrics live in its own (fresh) data directory
)

MODES = ("embedded", "production")


class DeploymentError(RuntimeError):
    """A process did not start, did not become ready in time, or a command failed."""


# ------------------------------------------------------------------------------ processes


def free_port() -> int:
    """A TCP port nothing listens on right now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Best effort: the child gets SIGKILL when its parent dies (Linux; strictly, when the parent's
    thread that started it ends: start deployments from a thread that outlives them)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Process:
    """A subprocess in a process group of its own, its output in a log file.

    :meth:`stop` ends the whole group (a uvicorn supervisor and its workers, a Celery worker and
    its pool): SIGTERM, a bounded wait, then SIGKILL. :meth:`kill` is SIGKILL at once.
    """

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 (open for the process's lifetime)
        self.popen = subprocess.Popen(
            argv,
            cwd=BASE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: pgid == pid
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        self.pid = self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def wait_for_log(self, pattern: str, timeout_s: float) -> re.Match:
        """Wait until the log matches ``pattern`` (a regex); fail if the process exits first."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        while True:
            match = regex.search(self.log())
            if match:
                return match
            if not self.alive:
                raise DeploymentError(f"{self.name} exited ({self.returncode}) before {pattern!r}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise DeploymentError(f"{self.name}: no {pattern!r} within {timeout_s:.0f} s:\n{self.log_tail()}")
            time.sleep(0.05)

    def wait_exit(self, timeout_s: float) -> int:
        """The exit status once the process has ended (negative: killed by that signal)."""
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise DeploymentError(f"{self.name} still running after {timeout_s:.0f} s:\n{self.log_tail()}") from None

    def group_pids(self) -> list[int]:
        """The processes of this process group that are still there (Linux /proc)."""
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                fields = stat[stat.rindex(")") + 2 :].split()
                if int(fields[2]) == self.pid:  # field 5 of stat: the process group
                    pids.append(int(entry))
        return pids

    def cpu_seconds(self) -> float:
        """User + system CPU of the group's live processes (and the children they reaped)."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in self.group_pids():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{pid}/stat").read_text()
                fields = stat[stat.rindex(")") + 2 :].split()
                total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
        return total / ticks

    def rss_bytes(self, *, python_only: bool = False) -> int:
        """Resident memory of the group's live processes (``python_only``: without git's children)."""
        total = 0
        for pid in self.group_pids():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if python_only and "python" not in Path(f"/proc/{pid}/comm").read_text():
                    continue
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        return total

    def _signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def kill(self) -> None:
        """SIGKILL the whole group, at once."""
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)
        self._close_log()

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the group, wait up to ``timeout_s`` for the leader, then SIGKILL what is left."""
        if self.alive:
            self._signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=timeout_s)
        self.kill()  # the leader's children too, and the leader if it ignored SIGTERM

    def _close_log(self) -> None:
        with contextlib.suppress(Exception):
            self._log.close()


# ------------------------------------------------------------------------------ services


class PostgresDatabase:
    """A fresh PostgreSQL database, ``agentgit_e2e_<pid>_<random>``, dropped by :meth:`drop`.

    The name carries the creating process's id: databases whose process is gone (a test run
    killed before its teardown) are dropped when the next one is created.
    """

    def __init__(self, admin_url: str = POSTGRES_ADMIN_URL, prefix: str = "agentgit_e2e") -> None:
        import psycopg  # prod.txt; only the production mode needs it

        self.admin_url = admin_url
        self.name = f"{prefix}_{os.getpid()}_{secrets.token_hex(6)}"
        try:
            with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as conn:
                _drop_orphans(conn, prefix)
                conn.execute(f'CREATE DATABASE "{self.name}"')
        except psycopg.OperationalError as error:
            raise DeploymentError(f"PostgreSQL is not reachable at {admin_url}: {error}") from None
        base = admin_url.rsplit("/", 1)[0]
        self.url = f"{base}/{self.name}"

    def connect(self):
        import psycopg

        return psycopg.connect(self.url, autocommit=True)

    def query(self, sql: str, params: tuple | dict | None = None) -> list[tuple]:
        with self.connect() as conn:
            return conn.execute(sql, params).fetchall()

    def drop(self) -> None:
        import psycopg

        with contextlib.suppress(psycopg.Error):
            with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def _drop_orphans(conn, prefix: str) -> None:
    """Drop the ``prefix`` databases whose creating process no longer runs on this machine."""
    names = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{prefix}_%",)).fetchall()
    for (name,) in names:
        pid = name[len(prefix) + 1 :].split("_", 1)[0]
        if not pid.isdigit() or _process_alive(int(pid)):
            continue  # an older naming, or a run still going
        with contextlib.suppress(Exception):
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RedisDatabase:
    """A Redis database index of our own for a while: one of :data:`REDIS_DB_INDEXES`, held by an
    exclusive lock on a file in the temp directory (so concurrent test processes, xdist workers
    and benchmark runs on this machine never share one), flushed when taken and when released."""

    def __init__(self, base_url: str = REDIS_BASE_URL, wait_s: float = 120.0) -> None:
        import redis

        self._lock_file = None
        deadline = time.monotonic() + wait_s
        while self._lock_file is None:
            for index in REDIS_DB_INDEXES:
                handle = open(Path(tempfile.gettempdir()) / f"agentgit-e2e-redis-{index}.lock", "w")  # noqa: SIM115 (held as the lock)
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as error:
                    handle.close()
                    if error.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    continue
                self._lock_file, self.index = handle, index
                break
            else:
                if time.monotonic() > deadline:
                    raise DeploymentError(f"every Redis database index in {REDIS_DB_INDEXES} is in use")
                time.sleep(0.5)
        self.url = f"{base_url}/{self.index}"
        try:
            self.client = redis.Redis.from_url(self.url, socket_timeout=10)
            self.client.flushdb()
        except redis.RedisError as error:
            self.release()
            raise DeploymentError(f"Redis is not reachable at {base_url}: {error}") from None

    def release(self) -> None:
        with contextlib.suppress(Exception):
            self.client.flushdb()
            self.client.close()
        if self._lock_file is not None:
            with contextlib.suppress(Exception):
                fcntl.flock(self._lock_file, fcntl.LOCK_UN)
                self._lock_file.close()
            self._lock_file = None


# ------------------------------------------------------------------------------ a deployment


class Deployment:
    """A server with its own data directory, database and broker, started as real processes.

    ``mode="embedded"``: SQLite in the data directory, no broker (Celery eager: integrations land
    in the server process). ``mode="production"``: a fresh PostgreSQL database
    (``DATABASE_URL``) and a Redis database index (``REDIS_URL``, the Celery broker); integrations
    land only in ``celery -A agentgit_site worker`` processes started by :meth:`start_worker`.

    Use as a context manager, or call :meth:`close`: it kills every process it started (by
    process group), drops the database, releases the Redis index and removes the data directory
    (kept, with the process logs in ``logs/``, when ``keep`` or ``AGENTGIT_E2E_KEEP=1``).
    ``data_parent`` is where the data directory is made (default: the temp directory), e.g. a
    memory-backed file system to see how much of a load is the disk's; ``data_dir`` is one to use
    as it is, made if missing and kept (embedded mode: its SQLite database is kept with it).
    """

    def __init__(
        self,
        mode: str = "embedded",
        *,
        env: dict[str, str] | None = None,
        keep: bool = False,
        data_parent: str | os.PathLike[str] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode is one of {MODES}, not {mode!r}")
        if data_dir is not None and mode != "embedded":
            raise ValueError("a reused data directory needs the embedded mode (its database is in it)")
        self.mode = mode
        # A given data directory is the caller's (a benchmark reusing a long import): never removed.
        self.keep = keep or data_dir is not None or os.environ.get("AGENTGIT_E2E_KEEP") == "1"
        self.processes: list[Process] = []
        self.database: PostgresDatabase | None = None
        self.redis: RedisDatabase | None = None
        self.server: Process | None = None
        self.url = ""
        #: A token for the tests or the benchmark to use (set by whoever creates one).
        self.token = ""
        if data_dir is not None:
            self.data_dir = Path(data_dir).resolve()
            self.data_dir.mkdir(parents=True, exist_ok=True)
        else:
            self.data_dir = Path(tempfile.mkdtemp(prefix=f"agentgit-{mode}-", dir=data_parent))
        self.log_dir = self.data_dir / "logs"
        self.log_dir.mkdir(exist_ok=True)
        self._serial = 0
        base = {key: value for key, value in os.environ.items() if key not in _SCRUBBED_ENV}
        base.update(
            {
                "DJANGO_SETTINGS_MODULE": "agentgit_site.settings",
                "AGENTGIT_DATA_DIR": str(self.data_dir),
                "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
                "PYTHONUNBUFFERED": "1",
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        try:
            if mode == "production":
                self.database = PostgresDatabase()
                self.redis = RedisDatabase()
                base["DATABASE_URL"] = self.database.url
                base["REDIS_URL"] = self.redis.url
            base.update(env or {})
            self.env = base
            self.manage("migrate", "--noinput", "-v", "0", timeout_s=180)
        except BaseException:
            self.close()
            raise

    # -- commands ----------------------------------------------------------------------

    def manage(self, *args: str, timeout_s: float = 120, env: dict[str, str] | None = None) -> str:
        """Run ``manage.py ARGS`` with the deployment's environment; its stdout."""
        argv = [sys.executable, "manage.py", *args]
        try:
            done = subprocess.run(
                argv, cwd=BASE_DIR, env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            raise DeploymentError(f"{' '.join(args)}: no answer within {timeout_s:.0f} s") from None
        if done.returncode != 0:
            raise DeploymentError(
                f"manage.py {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
            )
        return done.stdout

    def create_token(self, user: str = "agent", scopes: str = "read,write,integrate,admin", **limits: Any) -> str:
        """A new API token (``agentgit_credential create``: the token is the last line)."""
        args = ["agentgit_credential", "create", "--user", user, "--scopes", scopes]
        for key, value in limits.items():  # rate=, burst=
            args += [f"--{key}", str(value)]
        lines = [line.strip() for line in self.manage(*args).splitlines() if line.strip()]
        if not lines:
            raise DeploymentError("agentgit_credential create printed nothing")
        return lines[-1]

    # -- processes ---------------------------------------------------------------------

    def _next_name(self, kind: str) -> str:
        self._serial += 1
        return f"{kind}-{self._serial}"

    def start_server(
        self,
        workers: int = 1,
        *,
        env: dict[str, str] | None = None,
        timeout_s: float = 60,
        application: str = "agentgit_site.asgi:application",
    ) -> str:
        """``uvicorn --workers N`` on a free loopback port; returns its base URL once /healthz answers.
        ``application``: another ASGI application to serve the same way (the benchmark's floor)."""
        last_error: Exception | None = None
        for _attempt in range(3):  # a free port can be taken between choosing and binding it
            port = free_port()
            name = self._next_name("server")
            argv = [
                sys.executable, "-m", "uvicorn", application,
                "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
                "--lifespan", "off", "--no-access-log", "--timeout-graceful-shutdown", "5",
                "--ws-per-message-deflate", "false",
            ]  # fmt: skip
            process = self._start(name, argv, env)
            url = f"http://127.0.0.1:{port}"
            try:
                self._wait_http(process, url + "/healthz", timeout_s, workers)
            except DeploymentError as error:
                process.kill()
                last_error = error
                if "address already in use" in process.log().lower():
                    continue
                raise
            self.server, self.url = process, url
            return url
        raise DeploymentError(f"the server did not start: {last_error}")

    def _wait_http(self, process: Process, url: str, timeout_s: float, workers: int) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if not process.alive:
                raise DeploymentError(f"{process.name} exited ({process.returncode}):\n{process.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise DeploymentError(
                    f"{process.name}: {url} did not answer within {timeout_s:.0f} s:\n{process.log_tail()}"
                )
            time.sleep(0.1)
        # With --workers N, the first worker answering is not all of them: wait for every one.
        while process.log().count("Started server process") < workers:
            if time.monotonic() > deadline:
                raise DeploymentError(f"{process.name}: fewer than {workers} workers started:\n{process.log_tail()}")
            time.sleep(0.05)

    def stop_server(self) -> None:
        """Stop the server (to start it again with other settings)."""
        if self.server is not None:
            self.server.stop()
            self.server = None

    def start_worker(
        self,
        *,
        env: dict[str, str] | None = None,
        pool: str = "prefork",
        concurrency: int = 1,
        timeout_s: float = 60,
    ) -> Process:
        """``celery -A agentgit_site worker`` (production mode), returned once it says it is ready.

        ``env`` adds variables (``AGENTGIT_CRASH_AT``). Recovery runs when a worker is ready
        (workers/tasks.py), so a worker started after a crash lands what the crash left queued.
        """
        if self.mode != "production":
            raise DeploymentError("workers need the production mode (a broker)")
        name = self._next_name("worker")
        argv = [
            sys.executable, "-m", "celery", "-A", "agentgit_site", "worker",
            "--loglevel", "INFO", "--pool", pool, "--concurrency", str(concurrency),
            "--hostname", f"{name}-{os.getpid()}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        process = self._start(name, argv, env)
        try:
            process.wait_for_log(r"\S+@\S+ ready\.", timeout_s)
        except DeploymentError:
            process.kill()
            raise
        return process

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None) -> Process:
        process = Process(name, argv, {**self.env, **(env or {})}, self.log_dir / f"{name}.log")
        self.processes.append(process)
        return process

    # -- inspection --------------------------------------------------------------------

    def repository_dir(self, repository: str) -> Path:
        """The bare git repository of ``repository`` in the data directory."""
        return self.data_dir / "repos" / f"{repository}.git"

    def cpu_seconds(self) -> float:
        """CPU used so far by every live process of the deployment (server and workers)."""
        return sum(process.cpu_seconds() for process in self.processes if process.alive)

    def logs(self) -> str:
        return "\n".join(f"===== {p.name} ({' '.join(p.argv[2:5])})\n{p.log_tail(60)}" for p in self.processes)

    # -- teardown ----------------------------------------------------------------------

    def close(self) -> None:
        for process in reversed(self.processes):
            process.stop(timeout_s=5)
        if self.database is not None:
            self.database.drop()
        if self.redis is not None:
            self.redis.release()
        if not self.keep:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


# ------------------------------------------------------------------------------ the web UI


@contextlib.contextmanager
def web_session(base_url: str, username: str, password: str, *, timeout_s: float = 120) -> Iterator[httpx.Client]:
    """An httpx client logged in to the web UI (the login form, its CSRF token and the session cookie)."""
    with httpx.Client(base_url=base_url, timeout=timeout_s) as web:
        form = web.get("/login").text
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
        if token is None:
            raise DeploymentError("the login page has no CSRF token")
        login = web.post(
            "/login",
            data={"username": username, "password": password, "csrfmiddlewaretoken": token[1]},
            headers={"referer": f"{base_url}/login"},
        )
        if login.status_code != 302:
            raise DeploymentError(f"logging in to the web UI as {username}: {login.status_code}")
        yield web


# ------------------------------------------------------------------------------ the API


class ApiFailure(Exception):
    """An answer the caller did not expect: its status and JSON body (or text)."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        self.status, self.body = status, body
        error = body.get("error", {}) if isinstance(body, dict) else {}
        self.code = error.get("code") if isinstance(error, dict) else None
        self.retryable = bool(error.get("retryable")) if isinstance(error, dict) else False
        super().__init__(f"{method} {path} → {status} {body!r}"[:2000])


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


class ApiClient:
    """The REST API of API.md (``/api/v1``) with a Bearer token; one httpx connection pool."""

    def __init__(self, base_url: str, token: str, *, timeout_s: float = 120) -> None:
        self.http = httpx.Client(
            base_url=base_url.rstrip("/") + "/api/v1",
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def request(self, method: str, path: str, *, expect: tuple[int, ...] = (200,), **kwargs) -> httpx.Response:
        response = self.http.request(method, path, **kwargs)
        if response.status_code not in expect:
            raise ApiFailure(method, path, response.status_code, _body(response))
        return response

    def get_json(self, url: str, **params) -> Any:
        return self.request("GET", url, params={k: v for k, v in params.items() if v is not None}).json()

    # -- repositories and streams ------------------------------------------------------

    def create_repo(self, name: str) -> dict:
        return self.request("POST", "/repos", json={"name": name}, expect=(201,)).json()

    def create_stream(self, repo: str, name: str, start: str | None) -> dict:
        return self.request("POST", f"/repos/{repo}/streams", json={"name": name, "from": start}, expect=(201,)).json()

    def stream(self, repo: str, name: str) -> dict:
        return self.get_json(f"/repos/{repo}/streams/{name}")

    def head(self, repo: str, stream: str = "main") -> str | None:
        return self.stream(repo, stream)["head"]

    # -- content -----------------------------------------------------------------------

    def upload_blob(self, repo: str, data: bytes) -> str:
        response = self.request(
            "POST", f"/repos/{repo}/blobs", content=data,
            headers={"Content-Type": "application/octet-stream"}, expect=(200, 201),
        )  # fmt: skip
        return response.json()["id"]

    def create_changeset(
        self,
        repo: str,
        parent: str | None,
        operations: list[dict],
        message: str = "change",
        provenance: dict | None = None,
    ) -> dict:
        body = {"parent": parent, "message": message, "operations": operations, "provenance": provenance or {}}
        return self.request("POST", f"/repos/{repo}/changesets", json=body, expect=(201,)).json()

    def write(
        self, repo: str, parent: str | None, files: dict[str, str | None], message: str = "change", **provenance
    ) -> str:
        """A changeset writing ``files`` inline (``None`` deletes the path); its id."""
        operations = [
            {"op": "delete", "path": path} if text is None else {"op": "write", "path": path, "content": text}
            for path, text in files.items()
        ]
        return self.create_changeset(repo, parent, operations, message, provenance or {"agent": "e2e"})["id"]

    # -- proposals and integration -----------------------------------------------------

    def open_proposal(self, repo: str, head: str, stream: str = "main", title: str = "") -> dict:
        body = {"stream": stream, "head": head, **({"title": title} if title else {})}
        return self.request("POST", f"/repos/{repo}/proposals", json=body, expect=(201,)).json()

    def proposal(self, repo: str, proposal_id: int) -> dict:
        return self.get_json(f"/repos/{repo}/proposals/{proposal_id}")

    def integrate_raw(self, repo: str, proposal_id: int, wait: float | None = None) -> httpx.Response:
        """POST …/integrate as it is: 200 outcome, 202 ``{"operation"}``, 409 ``aborted``, …"""
        params = {} if wait is None else {"wait": wait}
        return self.request(
            "POST", f"/repos/{repo}/proposals/{proposal_id}/integrate", json={}, params=params, expect=(200, 202, 409)
        )

    def operation(self, repo: str, operation_id: int | str) -> dict:
        return self.get_json(f"/repos/{repo}/operations/{operation_id}")

    def wait_operation(self, repo: str, operation_id: int | str, timeout_s: float = 60) -> dict:
        """The operation once it is no longer queued (polled); raises after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        pause = 0.01
        while True:
            operation = self.operation(repo, operation_id)
            if operation["state"] != "queued":
                return operation
            if time.monotonic() > deadline:
                raise TimeoutError(f"operation {operation_id} still queued after {timeout_s:.0f} s")
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    def integrate(self, repo: str, proposal_id: int, timeout_s: float = 120) -> dict:
        """The outcome document; a 202 is followed up until the operation is done.

        Raises :class:`ApiFailure` for ``aborted`` (409) and for an operation that failed.
        """
        response = self.integrate_raw(repo, proposal_id)
        body = response.json()
        if response.status_code == 200:
            return body
        if response.status_code == 409:
            raise ApiFailure("POST", f"integrate {proposal_id}", 409, body)
        operation = self.wait_operation(repo, body["operation"], timeout_s)
        if operation["state"] != "done":
            raise ApiFailure(
                "GET", f"operation {body['operation']}", 200, {"error": operation.get("error"), **operation}
            )
        return operation["outcome"]

    # -- reading -----------------------------------------------------------------------

    def file(self, repo: str, rev: str, path: str) -> bytes:
        return self.request("GET", f"/repos/{repo}/files/{rev}/{path}").content

    def file_status(self, repo: str, rev: str, path: str) -> int:
        return self.http.get(f"/repos/{repo}/files/{rev}/{path}").status_code

    def tree(self, repo: str, rev: str, path: str | None = None) -> list[dict]:
        return self.get_json(f"/repos/{repo}/tree/{rev}", path=path)["entries"]

    def diff(self, repo: str, from_rev: str, to_rev: str) -> dict:
        return self.get_json(f"/repos/{repo}/diff", **{"from": from_rev, "to": to_rev})

    def blame(self, repo: str, rev: str, path: str) -> list[dict]:
        return self.get_json(f"/repos/{repo}/blame/{rev}/{path}")["lines"]

    def log(
        self, repo: str, rev: str | None = None, path: str | None = None, limit: int | None = None, cursor=None
    ) -> dict:
        return self.get_json(f"/repos/{repo}/log", rev=rev, path=path, limit=limit, cursor=cursor)

    def history(self, repo: str, rev: str, path: str | None = None, page: int = 500) -> list[str]:
        """Every changeset id of the log from ``rev``, following the cursor to the end."""
        ids: list[str] = []
        answer = self.log(repo, rev, path, limit=page)
        while True:
            ids += [changeset["id"] for changeset in answer["changesets"]]
            if not answer.get("next"):
                return ids
            answer = self.log(repo, None, path, limit=page, cursor=answer["next"])
