"""AgentGit settings: one module, configured by environment variables.

With no environment at all it runs locally: SQLite under the data directory,
DEBUG off, loopback hosts only. README.md lists every variable.
"""

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from django.core.exceptions import ImproperlyConfigured

from agentgit_site.secretfile import read_or_create_secret
from engine.store import DEFAULT_TREE_CACHE_ENTRIES

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value is None or not value.strip() else int(value)


def _env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


_DATA_DIR = Path(os.environ.get("AGENTGIT_DATA_DIR") or BASE_DIR / "var").resolve()
_DATA_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)

# AgentGit's own knobs. Code reads them as settings.AGENTGIT["..."].
AGENTGIT: dict[str, Any] = {
    # Everything the server writes lives here: SQLite database, secret key,
    # admin password, repositories. Env: AGENTGIT_DATA_DIR. Default: <repo root>/var.
    "DATA_DIR": _DATA_DIR,
    # One bare git repository per AgentGit repository.
    "REPOS_DIR": _DATA_DIR / "repos",
    # Parsed-tree cache of each repository's object store, in tree entries (~150 bytes each).
    "TREE_CACHE_ENTRIES": _env_int("AGENTGIT_TREE_CACHE_ENTRIES", DEFAULT_TREE_CACHE_ENTRIES),
    # Who commits the merge changesets the server writes.
    "COMMITTER_NAME": os.environ.get("AGENTGIT_COMMITTER_NAME", "AgentGit"),
    "COMMITTER_EMAIL": os.environ.get("AGENTGIT_COMMITTER_EMAIL", "agentgit@localhost"),
    # Requests in progress at once per server process; more are refused with 503 unavailable
    # (retryable) rather than queued. 0: no limit. Probes and event feeds are never refused.
    "MAX_CONCURRENT_REQUESTS": _env_int("AGENTGIT_MAX_CONCURRENT_REQUESTS", 256),
    # Largest request body accepted (blob uploads, changesets); larger ones get 413 too_large.
    "MAX_BODY_BYTES": _env_int("AGENTGIT_MAX_BODY_BYTES", 100 * 1024 * 1024),
    # How long the integrate endpoint waits for its outcome before answering 202 with the operation.
    "INTEGRATE_WAIT_S": float(os.environ.get("AGENTGIT_INTEGRATE_WAIT_S", "30")),
    # How long an Idempotency-Key is remembered (per credential) after its first use, seconds.
    "IDEMPOTENCY_TTL_S": _env_int("AGENTGIT_IDEMPOTENCY_TTL_S", 24 * 3600),
    # The compare-and-swap safety net: attempts, and the longest wait between them.
    "INTEGRATE_ATTEMPTS": _env_int("AGENTGIT_INTEGRATE_ATTEMPTS", 24),
    "INTEGRATE_BACKOFF_MS": _env_int("AGENTGIT_INTEGRATE_BACKOFF_MS", 32),
    # Most queued integrations of one stream landed in one transaction.
    "LANDING_BATCH": _env_int("AGENTGIT_LANDING_BATCH", 32),
    # Required checks: a batch that grows while a prefix of it is under test is tested on top of
    # it at once (Zuul's speculative testing), not after (repos/services/gate.py).
    "SPECULATIVE_CHECKS": _env_bool("AGENTGIT_SPECULATIVE_CHECKS", True),
    # The token bucket of every credential without its own: requests per second (0: no default
    # limit) and bucket size. Buckets live in Redis when REDIS_URL is set, else in a SQLite file
    # in the data directory (repos.services.ratelimit).
    "RATE_LIMIT": float(os.environ.get("AGENTGIT_RATE_LIMIT") or 200),
    "RATE_BURST": _env_int("AGENTGIT_RATE_BURST", 400),
    "RATE_LIMIT_REDIS_URL": os.environ.get("REDIS_URL") or None,
    # Authenticated credentials kept in each server process while the credential generation
    # (a file in the data directory, or a Redis key with REDIS_URL) is unchanged; every change to
    # a credential or a user increments it, so a revocation is seen by the next request in every
    # process (repos.services.credential_cache; off with PostgreSQL and no Redis). An entry is
    # dropped after CREDENTIAL_CACHE_SECONDS whatever the generation says.
    # Env: AGENTGIT_CREDENTIAL_CACHE, AGENTGIT_CREDENTIAL_CACHE_SECONDS.
    "CREDENTIAL_CACHE": _env_bool("AGENTGIT_CREDENTIAL_CACHE", True),
    "CREDENTIAL_CACHE_SECONDS": float(os.environ.get("AGENTGIT_CREDENTIAL_CACHE_SECONDS") or 60),
    # Web UI login attempts allowed per client address and per user name (django-ratelimit's
    # "count/period"); over either the login form answers 429 without checking the password.
    "LOGIN_RATE_ADDRESS": os.environ.get("AGENTGIT_LOGIN_RATE_ADDRESS", "30/m"),
    "LOGIN_RATE_USER": os.environ.get("AGENTGIT_LOGIN_RATE_USER", "10/m"),
    # Where every server and worker process keeps its metrics (prometheus-client's multiprocess
    # files, summed by a scrape); emptied when a deployment starts. Env: PROMETHEUS_MULTIPROC_DIR
    # (prometheus-client's own name). Default: <data dir>/metrics.
    "METRICS_DIR": Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or _DATA_DIR / "metrics").resolve(),
    # Who may read /metrics: "local" (loopback clients only), "open" (anyone), or "scope" (a
    # credential with the metrics scope; admin implies it). Env: AGENTGIT_METRICS_ACCESS.
    "METRICS_ACCESS": os.environ.get("AGENTGIT_METRICS_ACCESS", "local").strip().lower(),
    # One JSON line per request on standard error (0: none). Env: AGENTGIT_ACCESS_LOG.
    "ACCESS_LOG": _env_bool("AGENTGIT_ACCESS_LOG", True),
    # Plain GETs of a repository, stream, changeset, proposal or operation answered before
    # Django's request cycle (repos/api/hot.py; the same answers). Env: AGENTGIT_HOT_READS.
    "HOT_READS": _env_bool("AGENTGIT_HOT_READS", True),
    # Threads per server process answering them. Each takes the GIL from the event loop: on
    # SQLite, whose reads never wait on a network, one served the most (docs/adr/0013); a
    # database over the network leaves a thread waiting on each query. Env: AGENTGIT_HOT_READ_THREADS.
    "HOT_READ_THREADS": _env_int("AGENTGIT_HOT_READ_THREADS", 4 if os.environ.get("DATABASE_URL") else 1),
    # On SQLite, the lane's answers kept while the database file has not changed (its
    # ``data_version``, which every commit of every process changes; repos/api/hot.py,
    # docs/adr/0027). Env: AGENTGIT_HOT_READ_CACHE.
    "HOT_READ_CACHE": _env_bool("AGENTGIT_HOT_READ_CACHE", True),
    # Largest pack a git push may send (repos.git_http.push); past it the push is refused whole.
    "GIT_MAX_PUSH_BYTES": _env_int("AGENTGIT_GIT_MAX_PUSH_BYTES", 2 * 1024 * 1024 * 1024),
    # Maintenance (repos.services.maintenance) repacks a repository with at least this many
    # loose objects or packs.
    "REPACK_LOOSE_OBJECTS": _env_int("AGENTGIT_REPACK_LOOSE_OBJECTS", 256),
    "REPACK_PACKS": _env_int("AGENTGIT_REPACK_PACKS", 16),
    # Every write of objects is a pack; once a repository holds this many, the write asks for a
    # geometric roll-up of the small ones (repos.services.packs). Env: AGENTGIT_ROLL_UP_PACKS.
    "ROLL_UP_PACKS": _env_int("AGENTGIT_ROLL_UP_PACKS", 16),
    # A landing's stream ref is written this long after its commit at most, together with what
    # landed on the stream meanwhile: one ref file for many landings (repos.services.refmirror,
    # docs/adr/0028); 0 writes it at once. Env: AGENTGIT_MIRROR_FOLLOW_S.
    "MIRROR_FOLLOW_S": float(os.environ.get("AGENTGIT_MIRROR_FOLLOW_S") or 0.1),
    # A pack written in a transaction and at most this big is kept in the database's commit
    # instead of fsyncing its file (docs/adr/0023); 0 fsyncs every pack. Env:
    # AGENTGIT_JOURNAL_PACK_BYTES.
    "JOURNAL_PACK_BYTES": _env_int("AGENTGIT_JOURNAL_PACK_BYTES", 1024 * 1024),
    # The event feeds: events a subscriber may have waiting unsent before it is dropped as too
    # far behind (docs/adr/0011). Env: AGENTGIT_EVENT_BUFFER.
    "EVENT_BUFFER": _env_int("AGENTGIT_EVENT_BUFFER", 1000),
    # Outbox rows older than this are pruned. Env: AGENTGIT_EVENT_RETENTION_S. Default: 7 days.
    "EVENT_RETENTION_S": _env_int("AGENTGIT_EVENT_RETENTION_S", 7 * 24 * 3600),
    # How often: by beat (and at worker start) with workers; without (the embedded default), by
    # each server process after an event commits, at most this often. Env:
    # AGENTGIT_EVENT_PRUNE_EVERY_S. Default: an hour.
    "EVENT_PRUNE_EVERY_S": _env_int("AGENTGIT_EVENT_PRUNE_EVERY_S", 3600),
    # A webhook delivery's limit on connecting and on each read of the answer, in seconds
    # (repos.services.webhooks). Env: AGENTGIT_WEBHOOK_TIMEOUT_S.
    "WEBHOOK_TIMEOUT_S": _env_int("AGENTGIT_WEBHOOK_TIMEOUT_S", 10),
    # Count every SQL statement into agentgit_sql_statements_total (GET /metrics), for
    # ``agentgit_bench cost``. Off (the default), nothing is installed and nothing is counted.
    # Env: AGENTGIT_COUNT_STATEMENTS.
    "COUNT_STATEMENTS": _env_bool("AGENTGIT_COUNT_STATEMENTS", False),
    # Code search (repos.services.search): a search past this many seconds answers what it found
    # with "truncated" (Env: AGENTGIT_SEARCH_TIMEOUT_S); blobs larger than this many bytes are
    # not indexed, only read by the searches that reach them (Env: AGENTGIT_SEARCH_INDEX_MAX_BYTES).
    "SEARCH_TIMEOUT_S": float(os.environ.get("AGENTGIT_SEARCH_TIMEOUT_S") or 10),
    "SEARCH_INDEX_MAX_BYTES": _env_int("AGENTGIT_SEARCH_INDEX_MAX_BYTES", 1024 * 1024),
}
if AGENTGIT["METRICS_ACCESS"] not in ("local", "open", "scope"):
    raise ImproperlyConfigured(f"AGENTGIT_METRICS_ACCESS is local, open or scope, not {AGENTGIT['METRICS_ACCESS']!r}")

# Request bodies: one limit for everything Django reads (the API answers 413 beyond it).
DATA_UPLOAD_MAX_MEMORY_SIZE = AGENTGIT["MAX_BODY_BYTES"]
FILE_UPLOAD_MAX_MEMORY_SIZE = AGENTGIT["MAX_BODY_BYTES"]

# Celery: with a broker (REDIS_URL or CELERY_BROKER_URL) tasks go to `celery -A agentgit_site
# worker` processes; without one they run eagerly, in the server process (the embedded default).
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or os.environ.get("REDIS_URL") or None
CELERY_TASK_ALWAYS_EAGER = CELERY_BROKER_URL is None
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True  # a task whose worker died is delivered again (recovery is idempotent)
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery closes a prefork worker's database connections — its whole connection pool — around
# every task; a new PostgreSQL connection per landing cost more than the landing. Reuse them
# for this many tasks (a lost connection is retried: workers/tasks.py).
CELERY_DB_REUSE_MAX = _env_int("AGENTGIT_DB_REUSE_MAX", 1000)
CELERY_TASK_IGNORE_RESULT = True
# beat's own bookkeeping (last run times) lives in the data directory, not where beat was started.
CELERY_BEAT_SCHEDULE_FILENAME = str(_DATA_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE = {
    "recover-operations": {"task": "workers.tasks.recover", "schedule": _env_int("AGENTGIT_RECOVER_EVERY_S", 30)},
    "maintain-repositories": {"task": "workers.tasks.maintain", "schedule": _env_int("AGENTGIT_MAINTAIN_EVERY_S", 600)},
    "prune-events": {"task": "workers.tasks.prune_events", "schedule": AGENTGIT["EVENT_PRUNE_EVERY_S"]},
    "resume-webhooks": {"task": "workers.tasks.resume_webhooks", "schedule": 300},
}

# The Channels layer carries committed events to every server process's relay (docs/adr/0011):
# with Redis (REDIS_URL, or CHANNELS_REDIS_URL), channels-redis's pub/sub layer, so every process
# on every machine hears at once; without, none, and the relay uses a datagram socket per process.
_CHANNELS_REDIS_URL = os.environ.get("CHANNELS_REDIS_URL") or os.environ.get("REDIS_URL")


def _redis_index(url: str | None) -> str:
    """The database index a Redis URL names (``redis://host:6379/3`` is 3; none is 0)."""
    return urlparse(url or "").path.strip("/") or "0"


CHANNEL_LAYERS = (
    {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            # Pub/sub channels are global to a Redis server, not per database index: the index
            # in the prefix keeps two deployments on one Redis (each with its own index, as the
            # Celery broker already is) from hearing each other's events.
            "CONFIG": {"hosts": [_CHANNELS_REDIS_URL], "prefix": f"agentgit.{_redis_index(_CHANNELS_REDIS_URL)}"},
        }
    }
    if _CHANNELS_REDIS_URL
    else {}
)

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or read_or_create_secret(_DATA_DIR / "secret_key", nbytes=50)
DEBUG = _env_bool("DJANGO_DEBUG")
ALLOWED_HOSTS = _env_list("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Redoc's files, so /api/v1/docs needs no CDN
    "repos",
    # Only for ``manage.py agentgit_bench`` (benchmarks/management/commands): the benchmarks
    # import the server's code, never the reverse (tests/test_architecture.py).
    "benchmarks",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "repos.web.security.SecurityHeadersMiddleware",
    "agentgit_site.staticfiles.StaticFilesMiddleware",
    # Sessions, CSRF, the logged-in user and messages: the web UI's, skipped for /api/.
    "agentgit_site.middleware.WebSessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "agentgit_site.middleware.WebCsrfViewMiddleware",
    "agentgit_site.middleware.WebAuthenticationMiddleware",
    "agentgit_site.middleware.WebMessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Tells the access log (agentgit_site.observability) the request's route and credential.
    "agentgit_site.observability.NoteRequest",
]

ROOT_URLCONF = "agentgit_site.urls"
ASGI_APPLICATION = "agentgit_site.asgi.application"
WSGI_APPLICATION = "agentgit_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

if os.environ.get("DATABASE_URL"):
    # Only prod.txt installs dj-database-url; the embedded default must not need it.
    import dj_database_url

    # Under ASGI every request runs in a thread of its own, so Django's persistent connections
    # (CONN_MAX_AGE > 0) would leave one idle connection per request thread until PostgreSQL
    # runs out ("too many clients"). Connections come from psycopg's pool instead, and are
    # returned at the end of each request.
    DATABASES = {"default": dj_database_url.config(conn_max_age=0)}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": _env_int("AGENTGIT_DB_POOL_MIN", 2),
            "max_size": _env_int("AGENTGIT_DB_POOL_MAX", 20),
            "timeout": 10,
        }
        # Parameters bound by the server, and every statement prepared on a connection the first
        # time it runs there (psycopg keeps each connection's last 100): PostgreSQL then neither
        # parses nor, after a few runs, plans a landing's statements again, a third of its CPU on
        # one (docs/adr/0030). Django leaves both off for transaction-mode poolers such as
        # pgbouncer, which lose a session's prepared statements; psycopg's pool keeps one session
        # per connection. Behind such a pooler, set AGENTGIT_DB_PREPARED=0.
        if _env_bool("AGENTGIT_DB_PREPARED", True):
            DATABASES["default"]["OPTIONS"].update(server_side_binding=True, prepare_threshold=0)
else:
    DATABASES = {
        "default": {
            "ENGINE": "agentgit_site.sqlite",
            "NAME": str(_DATA_DIR / "agentgit.sqlite3"),
            "OPTIONS": {
                # Run on every new connection. WAL lets readers proceed during a write;
                # FULL fsyncs each commit, so a moved stream head survives power loss.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;",
                # Take the write lock at BEGIN: a deferred transaction that later upgrades
                # to writing fails with SQLITE_BUSY at once instead of waiting its turn.
                "transaction_mode": "IMMEDIATE",
                # Seconds to wait for another connection's write lock (busy timeout).
                "timeout": 20,
            },
            # A file, not Django's in-memory default, so tests see WAL and fsync as served.
            "TEST": {"NAME": _DATA_DIR / "test.sqlite3"},
        }
    }

# Logs go to stderr, each record with secrets redacted (tokens, token= in query strings, the
# credentials of an Authorization header or a URL): agentgit_site.redaction.RedactSecrets.
# The access log is ours, one JSON line per request written to stderr by
# agentgit_site.observability (redacted there, not through logging: it is every request's);
# uvicorn's own is switched off here as well as by --no-access-log, since it prints query strings.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact": {"()": "agentgit_site.redaction.RedactSecrets"}},
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
    },
    "handlers": {
        "stderr": {"class": "logging.StreamHandler", "formatter": "text", "filters": ["redact"]},
    },
    "root": {"handlers": ["stderr"], "level": "WARNING"},
    "loggers": {
        # Errors only: every 4xx is in the access log already.
        "django": {"handlers": ["stderr"], "level": "ERROR", "propagate": False},
        "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        "uvicorn.error": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
        "repos": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        "workers": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
    },
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Compressed but not hashed names: pages render even before collectstatic has run.
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# The web UI: people log in with a session (repos/web/auth.py); agents' tokens never do.
LOGIN_URL = "web:login"
LOGIN_REDIRECT_URL = "web:home"
CSRF_COOKIE_HTTPONLY = True  # no script reads it: forms carry the token
# Login attempt counters (django-ratelimit) must be shared by every server process: in Redis
# when REDIS_URL is set, else in files under the data directory (the processes of one machine;
# file increments are not atomic, so two racing attempts may count once).
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "ratelimit": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": os.environ["REDIS_URL"]}
        if os.environ.get("REDIS_URL")
        else {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": _DATA_DIR / "ratelimit-cache",
        }
    ),
}
RATELIMIT_USE_CACHE = "ratelimit"

# Local development is plain http, where secure cookies would never be sent back.
SESSION_COOKIE_SECURE = _env_bool("DJANGO_SECURE_COOKIES")
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

# The REST API (repos/api/): token authentication, a scope per method, JSON only, one error
# shape (statuses chosen in repos/api/errors.py), an OpenAPI schema at /api/v1/schema.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "repos.api.authentication.BearerTokenAuthentication",
        "repos.api.authentication.TokenBasicAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["repos.api.permissions.HasScope"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "repos.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    "UNAUTHENTICATED_TOKEN": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "AgentGit API",
    "VERSION": "1",
    "DESCRIPTION": (
        "A version-control server for coding agents: upload blobs, write changesets, open proposals and "
        "let the server integrate them (fast-forward, merge or conflict). Every call needs "
        "`Authorization: Bearer <token>` with the scope its method asks for: read (GET), write (blobs, "
        "changesets, proposals, streams), integrate, admin (repositories). Errors are "
        '`{"error": {"code", "message", "retryable", ...}}`.\n\n'
        "Request bodies are exactly as documented: a missing required field, a field of the wrong type or "
        "pattern and a field not documented are refused with 400 `invalid`, one entry per field in "
        "`details`. An optional query parameter sent empty (`?path=`) is as if it was not sent. List "
        "cursors (`next`) are opaque and URL-safe: pass them back as they are.\n\n"
        "The repository's events come as Server-Sent Events (`GET /api/v1/repos/{repo}/events`) and "
        "over a WebSocket at `/ws/repos/{repo}/events`; both are described under that operation."
    ),
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "REDOC_DIST": "SIDECAR",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "repos.api.schema.postprocess",
    ],
}
