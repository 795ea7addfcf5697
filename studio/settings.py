"""Settings for the studio, read from the environment in this one module.

Every value has a safe default, so an empty environment with DJANGO_DEBUG on
gives the embedded setup: SQLite, an in-process channel layer and compactions
without a broker; with DEBUG off the studio needs a secret key of its own.
`.env.example` lists what can be set; a `.env` beside it is read at start
(studio/envfile.py).
"""

import math
import os
import re
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from studio.envfile import env_file_load, env_file_path

BASE_DIR = Path(__file__).resolve().parent.parent

# Before anything reads the environment: `.env` at the project's root (or
# the file STUDIO_ENV_FILE names) fills in what the environment lacks, for
# manage.py, Daphne and Celery alike.
env_file_load(env_file_path(BASE_DIR))


# --- Reading the environment ------------------------------------------------
# Each reader returns `default` for an unset or empty variable and raises
# ImproperlyConfigured, naming the variable and what it accepts, for a value
# it cannot use: a bad setting stops the studio when it starts, not each
# request that reads it.

# Lower-case names here are not settings: Django takes only upper-case ones.
true_words, false_words = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def env_value(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def refuse(name: str, accepts: str, value: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{name} must be {accepts}, not {value!r}.")


def env_bool(name: str, default: bool = False) -> bool:
    value = env_value(name)
    if value is None:
        return default
    if value.lower() not in true_words + false_words:
        raise refuse(name, "1, true, yes or on, or 0, false, no or off", value)
    return value.lower() in true_words


def bounds_phrase(*bounds: tuple[str, float | None]) -> str:
    """The words for (("at least", 1), ("at most", 12)): "at least 1 and at most 12"."""
    return " and ".join(f"{word} {bound}" for word, bound in bounds if bound is not None)


def env_int(name: str, default: int, *, at_least: int | None = None, at_most: int | None = None) -> int:
    value = env_value(name)
    if value is None:
        return default
    bounds = bounds_phrase(("at least", at_least), ("at most", at_most))
    accepts = f"a whole number of {bounds}" if bounds else "a whole number"
    try:
        number = int(value)
    except ValueError:
        raise refuse(name, accepts, value) from None
    if (at_least is not None and number < at_least) or (at_most is not None and number > at_most):
        raise refuse(name, accepts, value)
    return number


def env_float(
    name: str,
    default: float,
    *,
    above: float | None = None,
    at_most: float | None = None,
    below: float | None = None,
) -> float:
    value = env_value(name)
    if value is None:
        return default
    bounds = bounds_phrase(("above", above), ("at most", at_most), ("below", below))
    accepts = f"a number {bounds}" if bounds else "a number"
    try:
        number = float(value)
    except ValueError:
        raise refuse(name, accepts, value) from None
    fits = (
        math.isfinite(number)
        and (above is None or number > above)
        and (at_most is None or number <= at_most)
        and (below is None or number < below)
    )
    if not fits:
        raise refuse(name, accepts, value)
    return number


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = env_value(name)
    if value is None:
        return default
    if value.lower() not in choices:
        raise refuse(name, f"one of {', '.join(choices)}", value)
    return value.lower()


provider_model = re.compile(r"(openai|anthropic):[^\s,]+")


def env_models(name: str) -> bool | frozenset[str]:
    """True (every model) or False (none) for the words env_bool takes, or
    the names in a comma-separated list of provider models."""
    value = env_value(name)
    if value is None or value.lower() in false_words:
        return False
    if value.lower() in true_words:
        return True
    names = [model.strip() for model in value.split(",") if model.strip()]
    if not names or not all(provider_model.fullmatch(model) for model in names):
        accepts = (
            "1 (every model), 0 (none) or a comma-separated list of openai:<model> and "
            "anthropic:<model> names, like openai:llama3.1,anthropic:claude-x"
        )
        raise refuse(name, accepts, value)
    return frozenset(names)


def env_model(name: str) -> str | None:
    """A model string a provider serves (agents/providers' model_check, in
    the settings' terms), or None when unset."""
    value = env_value(name)
    if value is None or value == "scripted" or provider_model.fullmatch(value):
        return value
    raise refuse(name, "scripted, openai:<model> or anthropic:<model> (like openai:gpt-4o-mini)", value)


period_seconds = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60}
period_seconds |= {"h": 3600, "hour": 3600, "d": 86400, "day": 86400}
rate_pattern = re.compile(r"(\d+)\s*/\s*([a-z]+?)s?")


def env_rate(name: str, default: str) -> tuple[int, int]:
    """(count, per seconds) from "100/s", "30/min", "2000/hour", "5/day"."""
    value = env_value(name) or default
    match = rate_pattern.fullmatch(value.lower())
    if not match or int(match[1]) < 1 or match[2] not in period_seconds:
        raise refuse(name, "a count above 0 per s, min, hour or day, like 100/s or 30/min", value)
    return int(match[1]), period_seconds[match[2]]


DEBUG = env_bool("DJANGO_DEBUG", False)

# The development key serves only DEBUG runs (`make run`); with DEBUG off the
# studio does not start on it, nor on a missing or guessable key, so no
# deployment signs sessions and CSRF tokens with a key anyone can read here.
DEVELOPMENT_SECRET_KEY = "django-insecure-studio-development-key"


def secret_key_problem(key: str) -> str | None:
    """Why `key` may not sign a production studio's sessions, or None.
    The rules of Django's own deployment check (security.W009)."""
    if not key:
        return "is not set"
    if key.startswith("django-insecure"):
        return "is a development key"
    if len(key) < 50:
        return f"is {len(key)} characters long"
    if len(set(key)) < 5:
        return f"has {len(set(key))} distinct characters"
    return None


# URL-safe: nothing in it that an .env reader, a shell or a Procfile runner
# would cut at (#) or expand ($).
key_generator = "python -c 'import secrets; print(secrets.token_urlsafe(50))'"

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not DEBUG and (problem := secret_key_problem(SECRET_KEY)):
    raise ImproperlyConfigured(
        f"DJANGO_SECRET_KEY {problem}: with DJANGO_DEBUG off the studio needs a random key of at least "
        f"50 characters, e.g. from `{key_generator}`."
    )
SECRET_KEY = SECRET_KEY or DEVELOPMENT_SECRET_KEY
# Keys being rotated out: what they signed (sessions, password reset links)
# still verifies, while everything new is signed with DJANGO_SECRET_KEY.
SECRET_KEY_FALLBACKS = [
    key.strip() for key in os.environ.get("DJANGO_SECRET_KEY_FALLBACKS", "").split(",") if key.strip()
]
for position, fallback in enumerate(SECRET_KEY_FALLBACKS, start=1):
    if not DEBUG and (problem := secret_key_problem(fallback)):
        raise ImproperlyConfigured(
            f"DJANGO_SECRET_KEY_FALLBACKS key {position} {problem}: each key there must be one a studio "
            "could have run on (50 or more random characters)."
        )

ALLOWED_HOSTS = [
    host.strip()
    for host in os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")
    if host.strip()
]
# Origins (scheme and host) from which page POSTs are accepted besides the
# request's own host: the public address when a proxy forwards another Host.
CSRF_TRUSTED_ORIGINS = [
    origin.strip()
    for origin in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",")
    if origin.strip()
]

# --- Behind a proxy that terminates TLS -------------------------------------
# DJANGO_SECURE_PROXY=1: browsers reach the studio over HTTPS at a proxy,
# which forwards over plain HTTP and sets X-Forwarded-Proto (overwriting
# any a client sent: the studio trusts it). A request that came in as HTTPS
# is then secure to Django (CSRF checks its Origin against https://), the
# cookies are sent over HTTPS only, and a request that came in as plain HTTP
# is redirected to HTTPS. Requests through the proxy carry the header, so a
# redirect never loops; the probes a proxy or orchestrator sends straight to
# the web process over HTTP are exempt. Sign-in counts a client by the
# address the proxy appended to X-Forwarded-For (studio/auth/signin.py).
SECURE_PROXY = env_bool("DJANGO_SECURE_PROXY", False)
if SECURE_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
# HSTS: browsers that saw it go to HTTPS by themselves for this long. Sent
# only on HTTPS responses. Subdomains and the browsers' preload list are
# opt-in: the studio cannot know every subdomain speaks HTTPS, and leaving
# the preload list takes months. Left off, Django's reminders of them
# (security.W005, W021) are silenced, so `check --deploy` stays clean.
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 31_536_000 if SECURE_PROXY else 0, at_least=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = [
    check
    for check, chosen in (
        ("security.W005", SECURE_HSTS_INCLUDE_SUBDOMAINS),
        ("security.W021", SECURE_HSTS_PRELOAD),
    )
    if SECURE_HSTS_SECONDS and not chosen
]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "studio",
    "memories",
    "agents",
    "billing",
]

# Every middleware here is sync-only (Django's are declared so by the studio
# app, studio/serving/middleware.py): under ASGI the stack then runs in one worker
# thread instead of crossing between the event loop and a thread for every
# hook. Django's keep their own dotted paths, which its deployment checks
# look for.
MIDDLEWARE = [
    # First: every response, redirects and refusals included, carries the
    # request's id, and so does every line logged while it runs.
    "studio.serving.middleware.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Serves /static/ from any web process (Daphne serves no files itself).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "studio.serving.middleware.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "studio.urls"
APPEND_SLASH = False

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

WSGI_APPLICATION = "studio.wsgi.application"
ASGI_APPLICATION = "studio.asgi.application"

# --- Database -------------------------------------------------------------
DATABASE_URL = os.environ.get("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}"
# Connections close at the end of each request (CONN_MAX_AGE 0): under ASGI
# every request runs in a thread of its own, so a connection kept for reuse
# would outlive its thread unused until garbage collection, and 50 busy
# clients ran PostgreSQL out of connections. STUDIO_DB_POOL reuses them.
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
# Read on any database, so a bad value stops the start on SQLite too.
db_pool_on = env_bool("STUDIO_DB_POOL", False)
db_pool = {
    "min_size": env_int("STUDIO_DB_POOL_MIN", 2, at_least=0),
    "max_size": env_int("STUDIO_DB_POOL_MAX", 20, at_least=1),
    # How long a request waits for a free connection before 503.
    "timeout": env_int("STUDIO_DB_POOL_TIMEOUT", 10, at_least=1),
}
if db_pool["max_size"] < db_pool["min_size"]:
    raise ImproperlyConfigured(
        f"STUDIO_DB_POOL_MAX must be at least STUDIO_DB_POOL_MIN ({db_pool['min_size']}), "
        f"not {db_pool['max_size']}."
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE makes every atomic block take SQLite's write lock when it
    # begins, so read-then-write sections (the turn slot, the store cap)
    # cannot interleave; the timeout lets writers queue instead of failing.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / "test-db.sqlite3")}
else:
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    if db_pool_on:
        # A pool of connections per process: under ASGI every request runs
        # in a thread of its own, and a fresh PostgreSQL connection per
        # request costs more than the request. Recommended for production
        # web processes (see docs/operating.md, "Sizing").
        DATABASES["default"]["OPTIONS"] = {"pool": db_pool}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: channel layer and Celery broker -------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")

# Processes on one database share one event namespace in Redis; another
# database (another deployment, a parallel test run) cannot hear them.
CHANNEL_PREFIX = env_value("STUDIO_CHANNEL_PREFIX") or f"studio.{DATABASES['default']['NAME']}"
# A listener's receive is a blocking read on Redis of up to channels-redis's
# `brpop_timeout` (5 s). A socket time-out no longer than that (redis-py 8's
# default is 5 s) cuts the read of every listener that hears nothing, and
# the WebSocket with it (close 1011). Longer, it still ends a read from a
# Redis that stopped answering, instead of waiting on it for ever.
CHANNEL_LAYER_SOCKET_TIMEOUT_SECONDS = 15
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": CHANNEL_LAYER_SOCKET_TIMEOUT_SECONDS}],
                "prefix": CHANNEL_PREFIX,
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "studio.live.channel_layers.InMemoryChannelLayer"}}

# The cache counts rate limits; shared through Redis across processes.
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"
# Like the events, a deployment's compactions are its own: a worker of
# another deployment on this Redis (another database) takes none of them.
CELERY_TASK_DEFAULT_QUEUE = env_value("STUDIO_CELERY_QUEUE") or CHANNEL_PREFIX
# The `beat` process sends the periodic sweep (agents.sweep) this often; a
# sweep not run by then is dropped, the next one does its work.
SWEEP_SECONDS = float(env_int("STUDIO_SWEEP_SECONDS", 30, at_least=1))
# And this often it looks for running compactions whose worker died (their
# lease lapsed), so that one is handed out again within seconds.
COMPACTIONS_LAPSED_SECONDS = 5.0
CELERY_BEAT_SCHEDULE = {
    "sweep": {
        "task": "agents.tasks.sweep_task",
        "schedule": SWEEP_SECONDS,
        "options": {"expires": SWEEP_SECONDS},
    },
    "compactions-lapsed": {
        "task": "agents.tasks.compactions_lapsed_task",
        "schedule": COMPACTIONS_LAPSED_SECONDS,
        "options": {"expires": COMPACTIONS_LAPSED_SECONDS},
    },
}
# With acks_late, a task whose worker died is handed out again once this
# many seconds pass without an ack; compactions are idempotent, so a task
# that was merely slow and runs twice does no harm.
# Workers sweep for such tasks every STUDIO_CELERY_RESTORE_INTERVAL seconds.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("STUDIO_CELERY_VISIBILITY_TIMEOUT", 300, at_least=1),
    "unacked_restore_interval": env_int("STUDIO_CELERY_RESTORE_INTERVAL", 10, at_least=1),
    "unacked_restore_throttle": 1,
}

# --- Auth, i18n, static ---------------------------------------------------
# Applied wherever Django checks a password (the admin's forms,
# changepassword, interactive createsuperuser), not by create_user.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/studio/login/"
LOGIN_REDIRECT_URL = "/studio/"
LOGOUT_REDIRECT_URL = "/studio/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# `collectstatic` writes hashed, compressed copies and their manifest here;
# pages then link the hashed names, cached for good by browsers and proxies.
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "studio.serving.staticfiles.StaticFilesStorage"},
}
# Serve straight from the apps' static folders too, so a web process works
# before (or without) collectstatic: pages then link the plain names.
WHITENOISE_USE_FINDERS = True

# Request bodies over this are refused with 413, before they are read whole
# (studio/serving/handlers.py), an upload's file included.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("STUDIO_MAX_BODY_BYTES", 2 * 1024 * 1024, at_least=1)

# --- REST API -------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["studio.auth.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["studio.auth.authentication.HasGameKey"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["studio.http.parsers.StrictJSONParser"],
    "EXCEPTION_HANDLER": "studio.errors.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
# A CSRF failure under /api/ answers in the API's error shape, not in HTML.
CSRF_FAILURE_VIEW = "studio.views.csrf_failure"

SPECTACULAR_SETTINGS = {
    "TITLE": "The studio API",
    "DESCRIPTION": (
        "Define LLM-driven characters with memory, send them messages and read "
        "what they did. Every request carries `Authorization: Bearer <api key>`."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "studio.http.api_fields.strict_request_bodies",
        "studio.http.schema.event_streams",
    ],
    "ENUM_NAME_OVERRIDES": {
        "CheckpointKindEnum": ["compaction", "forced"],
        "CostKindEnum": ["model", "memory_access", "compaction"],
        "CompactionTypeEnum": ["summarize", "sliding-window"],
        "EntryTypeEnum": ["message", "tool_call"],
        "WriterEnum": ["agent", "compactor", "import", "file"],
        "FileWriterEnum": ["agent", "compactor", "import"],
        "EndedStatusEnum": ["completed", "cancelled", "failed"],
        "BlockStatusEnum": ["running", "completed", "cancelled", "failed"],
        # A replay's (the name it had when a turn had the same).
        "TurnOutStatusEnum": ["queued", "running", "completed", "cancelled", "failed"],
        "TurnStatusEnum": ["queued", "running", "waiting", "completed", "cancelled", "failed"],
        "ChangeEnum": ["created", "updated", "opened", "closed", "deleted", "dropped", "imported"],
        "MemoryComparedEnum": ["same", "changed", "added", "removed"],
    },
}

# --- The memory engine ----------------------------------------------------
STUDIO = {
    # The hard cap on an agent's memory store: UTF-8 bytes of
    # name + description + content over all of its memories.
    "STORE_CAP_BYTES": env_int("STUDIO_STORE_CAP_BYTES", 1_048_576, at_least=1),
    # Model steps (calls) one turn may take; past them, and past the tool
    # calls it may run in one step and in all, the model is asked once more
    # with no tools (what a model returns is bounded: docs/api.md, "Bounds").
    "MAX_MODEL_STEPS": env_int("STUDIO_MAX_MODEL_STEPS", 16, at_least=1),
    "MAX_TOOL_CALLS_PER_STEP": env_int("STUDIO_MAX_TOOL_CALLS_PER_STEP", 16, at_least=1),
    "MAX_TOOL_CALLS_PER_TURN": env_int("STUDIO_MAX_TOOL_CALLS_PER_TURN", 64, at_least=1),
    # Events and answers carry a tool call's result and its arguments' text
    # up to this many characters each (the rest marked cut; the block has
    # it whole), and each agent's event buffer keeps at most this many bytes.
    # Game tools (a definition's `tools`): how many an agent may have, how
    # long the game has to answer a call (a tool's own timeoutSeconds, up to
    # the most), and the longest answer it may give.
    "MAX_GAME_TOOLS": env_int("STUDIO_MAX_GAME_TOOLS", 32, at_least=0),
    "TOOL_TIMEOUT_SECONDS": env_int("STUDIO_TOOL_TIMEOUT_SECONDS", 60, at_least=1),
    "MAX_TOOL_TIMEOUT_SECONDS": env_int("STUDIO_MAX_TOOL_TIMEOUT_SECONDS", 3600, at_least=1),
    "MAX_TOOL_RESULT_CHARS": env_int("STUDIO_MAX_TOOL_RESULT_CHARS", 65536, at_least=100),
    "SHOWN_TEXT_MAX_CHARS": env_int("STUDIO_SHOWN_TEXT_MAX_CHARS", 4000, at_least=100),
    "EVENT_BUFFER_BYTES": env_int("STUDIO_EVENT_BUFFER_BYTES", 2 * 1024 * 1024, at_least=65536),
    # How long a send waits for the agent's earlier sends before giving up.
    "SEND_WAIT_SECONDS": env_int("STUDIO_SEND_WAIT_SECONDS", 300, at_least=0),
    # Sends one agent may have waiting behind its running turn (429 past it).
    "MAX_QUEUED_SENDS": env_int("STUDIO_MAX_QUEUED_SENDS", 8, at_least=0),
    # Per game: agents (403 quota_exceeded past it, forks and imports
    # included), and turns live at once across its agents (429 game_busy).
    "MAX_AGENTS_PER_GAME": env_int("STUDIO_MAX_AGENTS_PER_GAME", 1000, at_least=1),
    "MAX_LIVE_TURNS_PER_GAME": env_int("STUDIO_MAX_LIVE_TURNS_PER_GAME", 64, at_least=1),
    # No turn lives longer than this from its send: it is ended as failed.
    "TURN_DEADLINE_SECONDS": env_int("STUDIO_TURN_DEADLINE_SECONDS", 600, at_least=1),
    # On SIGTERM, how long a web process lets its requests and turns finish
    # before it ends what is left (turns fail with code `shutdown`) and exits.
    "SHUTDOWN_GRACE_SECONDS": env_int("STUDIO_SHUTDOWN_GRACE_SECONDS", 30, at_least=0),
    # A turn whose process stops renewing its lease this long is taken as
    # dead, so the agent's next send can go ahead.
    "TURN_LEASE_SECONDS": env_int("STUDIO_TURN_LEASE_SECONDS", 30, at_least=1),
    # Blocks of verbatim history after which a forced checkpoint is written.
    "FORCED_CHECKPOINT_BLOCKS": env_int("STUDIO_FORCED_CHECKPOINT_BLOCKS", 200, at_least=1),
    # A compaction is queued when the context passes this share of maxTokens
    # and keeps the newest blocks that fit in KEEP share of it.
    "COMPACTION_SOFT_RATIO": env_float("STUDIO_COMPACTION_SOFT_RATIO", 0.75, above=0, at_most=1),
    "COMPACTION_KEEP_RATIO": env_float("STUDIO_COMPACTION_KEEP_RATIO", 0.3, above=0, below=1),
    # A summary may take at most this share of maxTokens.
    "COMPACTION_SUMMARY_RATIO": env_float("STUDIO_COMPACTION_SUMMARY_RATIO", 0.2, above=0, below=1),
    # A checkpoint's listing of closed memories may take at most this share
    # of maxTokens; the rest are counted, not listed.
    "MEMORY_HEADINGS_RATIO": env_float("STUDIO_MEMORY_HEADINGS_RATIO", 0.1, above=0, below=1),
    # How long a send that would overflow maxTokens waits for a compaction.
    "COMPACTION_WAIT_SECONDS": env_int("STUDIO_COMPACTION_WAIT_SECONDS", 60, at_least=0),
    "COMPACTION_MAX_ATTEMPTS": env_int("STUDIO_COMPACTION_MAX_ATTEMPTS", 5, at_least=1),
    # Longer than a model call with all its retries can take (timeout ×
    # (retries + 1) plus backoff), so a slow compaction is not run twice.
    "COMPACTION_LEASE_SECONDS": env_int("STUDIO_COMPACTION_LEASE_SECONDS", 300, at_least=1),
    # Real providers: seconds before a model call times out, and how many
    # times the studio retries a 408/409/429, a 5xx, a timeout or a dropped
    # connection (with backoff; each attempt the provider bills is charged).
    "MODEL_TIMEOUT_SECONDS": env_float("STUDIO_MODEL_TIMEOUT_SECONDS", 60.0, above=0),
    "MODEL_MAX_RETRIES": env_int("STUDIO_MODEL_MAX_RETRIES", 2, at_least=0),
    "MODEL_MAX_OUTPUT_TOKENS": env_int("STUDIO_MODEL_MAX_OUTPUT_TOKENS", 4096, at_least=1),
    # A model's output is read with bounds: a tool call's arguments of more
    # UTF-8 bytes than this are not read (the store cap: no memory write
    # needs more), nor any JSON it sends (arguments, a compactor's answer)
    # nested deeper than MAX_OUTPUT_DEPTH levels.
    "MAX_TOOL_ARGUMENTS_BYTES": env_int("STUDIO_MAX_TOOL_ARGUMENTS_BYTES", 1_048_576, at_least=1),
    "MAX_OUTPUT_DEPTH": env_int("STUDIO_MAX_OUTPUT_DEPTH", 32, at_least=1),
    # A compaction may rewrite every open memory: it gets more room.
    "COMPACTION_MAX_OUTPUT_TOKENS": env_int("STUDIO_COMPACTION_MAX_OUTPUT_TOKENS", 8192, at_least=1),
    # How often a WebSocket listener joins its groups again (so it hears
    # events again after Redis restarts without reconnecting).
    "WS_REJOIN_SECONDS": env_float("STUDIO_WS_REJOIN_SECONDS", 30.0, above=0),
    # A server-sent event answer with nothing to say sends a comment line
    # this often, so a proxy (or a client's read time-out) does not take it
    # for dead — whatever Redis or the database do meanwhile.
    "SSE_KEEP_ALIVE_SECONDS": env_float("STUDIO_SSE_KEEP_ALIVE_SECONDS", 15.0, above=0),
    # A key in a WebSocket's URL (`?key=`) ends up in proxies' logs: refused
    # unless this is on (the key goes as the `bearer.<key>` subprotocol).
    "WS_QUERY_KEYS": env_bool("STUDIO_WS_QUERY_KEYS"),
    # Live streams one game may hold open: WebSockets and server-sent event
    # answers together, across every web process (studio/runtime/slots.py).
    "MAX_STREAMS_PER_GAME": env_int("STUDIO_MAX_STREAMS_PER_GAME", 200, at_least=1),
    # Sends per API key, (count, per seconds) from e.g. "100/s", "2000/min"
    # (429 past it).
    "SEND_RATE": env_rate("STUDIO_SEND_RATE", "100/s"),
    # Definitions that write a config revision (a new agent, a changed
    # config, a fork, an import) per game (429 past it); one that changes
    # nothing is not counted.
    "DEFINITION_RATE": env_rate("STUDIO_DEFINITION_RATE", "600/min"),
    # Failed sign-ins (the studio's and the admin's forms) within the window
    # per username from one client address, per address, and per username
    # from every address together; past any, 429 (studio/auth/signin.py).
    "SIGNIN_FAILURES_PER_USERNAME_AND_ADDRESS": env_int(
        "STUDIO_SIGNIN_FAILURES_PER_USERNAME_AND_ADDRESS", 5, at_least=1
    ),
    "SIGNIN_FAILURES_PER_ADDRESS": env_int("STUDIO_SIGNIN_FAILURES_PER_ADDRESS", 20, at_least=1),
    "SIGNIN_FAILURES_PER_USERNAME": env_int("STUDIO_SIGNIN_FAILURES_PER_USERNAME", 100, at_least=1),
    "SIGNIN_WINDOW_SECONDS": env_int("STUDIO_SIGNIN_WINDOW_SECONDS", 900, at_least=1),
    # The offline `scripted` model plays scripts written into the player's
    # message, with no model behind it: it is for the demo, tests and
    # benchmarks, and a production studio does not offer it.
    "ALLOW_SCRIPTED_MODEL": env_bool("STUDIO_ALLOW_SCRIPTED_MODEL") or DEBUG,
    # Off: a model can be defined only once it has a price row of its own,
    # so no agent is billed at the catch-all `*` price by accident. True
    # lets every model be, a set of names only those.
    "ALLOW_UNPRICED_MODELS": env_models("STUDIO_ALLOW_UNPRICED_MODELS"),
    # The model of a definition that names none, when its game has no default
    # of its own; unset, `scripted` where it is offered, else none (such a
    # definition is then refused).
    "DEFAULT_MODEL": env_model("STUDIO_DEFAULT_MODEL"),
    # A delay on every call of the `scripted` model (benchmarks).
    "SCRIPTED_LATENCY_MS": env_int("STUDIO_SCRIPTED_LATENCY_MS", 0, at_least=0),
    # The longest a `scripted` sleep step (or a reply's pauses) waits. The
    # test suite raises it, so a turn meant to run until it is cancelled
    # still runs when a loaded machine takes long to cancel it.
    "SCRIPTED_SLEEP_MAX_SECONDS": env_float("STUDIO_SCRIPTED_SLEEP_MAX_SECONDS", 10.0, above=0),
    # Retention (`manage.py prune`, agents/retention.py): days each kind of
    # record is kept once it is past keeping; 0 keeps it for good. Folded
    # history: folded blocks with their turns, and the checkpoints only they
    # were given. Memory changes: those made in folded blocks (the store
    # they left is kept in their place). Turns: ended turns that never
    # played a block (transient sends, sends ended before they started).
    # Cost lines: those whose turn is gone, and compactions' (their sum is
    # carried forward on the account, so the ledger still balances). Each
    # default keeps what a designer can look at; the operator gives it up.
    "RETAIN_HISTORY_DAYS": env_int("STUDIO_RETAIN_HISTORY_DAYS", 0, at_least=0),
    "RETAIN_MEMORY_CHANGES_DAYS": env_int("STUDIO_RETAIN_MEMORY_CHANGES_DAYS", 0, at_least=0),
    "RETAIN_TURNS_DAYS": env_int("STUDIO_RETAIN_TURNS_DAYS", 0, at_least=0),
    "RETAIN_COST_LINES_DAYS": env_int("STUDIO_RETAIN_COST_LINES_DAYS", 0, at_least=0),
    # Budget records `prune` deletes past this many days (never kept for
    # good: a game refused in a loop would grow them without end): refused
    # sends' counts, and alert deliveries.
    "RETAIN_REFUSALS_DAYS": env_int("STUDIO_RETAIN_REFUSALS_DAYS", 30, at_least=1),
    "RETAIN_ALERT_DELIVERIES_DAYS": env_int("STUDIO_RETAIN_ALERT_DELIVERIES_DAYS", 30, at_least=1),
    # Budget alerts (billing/alerts.py): webhooks and e-mails are tried with
    # backoff doubling from ALERT_RETRY_SECONDS until delivered or
    # ALERT_MAX_ATTEMPTS are spent; one attempt waits WEBHOOK_TIMEOUT_SECONDS
    # at most. A game's admin sets its webhook: it may reach loopback and
    # private addresses only where the operators allow it (never link-local).
    "ALERT_MAX_ATTEMPTS": env_int("STUDIO_ALERT_MAX_ATTEMPTS", 8, at_least=1),
    "ALERT_RETRY_SECONDS": env_float("STUDIO_ALERT_RETRY_SECONDS", 30.0, above=0),
    "WEBHOOK_TIMEOUT_SECONDS": env_float("STUDIO_WEBHOOK_TIMEOUT_SECONDS", 10.0, above=0, at_most=60),
    "WEBHOOK_ALLOW_PRIVATE": env_bool("STUDIO_WEBHOOK_ALLOW_PRIVATE"),
    # Alerts go by e-mail too once the studio can send mail (EMAIL_HOST, or
    # EMAIL_BACKEND, is set).
    "EMAIL_ALERTS": bool(env_value("EMAIL_HOST") or env_value("EMAIL_BACKEND")),
    # Ended replays (with what they kept of their copies: rows, store, cost).
    "RETAIN_REPLAYS_DAYS": env_int("STUDIO_RETAIN_REPLAYS_DAYS", 0, at_least=0),
    # An agent's config revisions kept (by `prune`, and as a definition
    # writes one): its newest this many, and every one a block was played
    # with (0: every one, for good).
    "KEEP_REVISIONS": env_int("STUDIO_KEEP_REVISIONS", 50, at_least=0),
    # /metrics shows the balance of this many games, those with the lowest
    # balances (a series per game: bounded, whatever the number of games); 0: none.
    "METRICS_GAMES": env_int("STUDIO_METRICS_GAMES", 20, at_least=0),
    # Who runs compactions: "celery" (a worker, when REDIS_URL is set),
    # "thread" (in this process, the embedded default) or "inline" (right
    # after commit, in the caller — for tests and scripts) or "none" (only
    # queued: something else calls agents.compaction.compaction_run).
    "COMPACTION_RUNNER": env_choice(
        "STUDIO_COMPACTION_RUNNER",
        "celery" if REDIS_URL else "thread",
        ("celery", "thread", "inline", "none"),
    ),
}
# A compaction keeps less of the window than it takes to queue one, or the
# context it leaves would queue the next at once.
if STUDIO["COMPACTION_KEEP_RATIO"] >= STUDIO["COMPACTION_SOFT_RATIO"]:
    raise ImproperlyConfigured(
        f"STUDIO_COMPACTION_KEEP_RATIO must be below STUDIO_COMPACTION_SOFT_RATIO "
        f"({STUDIO['COMPACTION_SOFT_RATIO']}), not {STUDIO['COMPACTION_KEEP_RATIO']}."
    )

if STUDIO["DEFAULT_MODEL"] == "scripted" and not STUDIO["ALLOW_SCRIPTED_MODEL"]:
    raise ImproperlyConfigured(
        "STUDIO_DEFAULT_MODEL is 'scripted', the test model, which this studio does not offer: name "
        "openai:<model> or anthropic:<model>, or set STUDIO_ALLOW_SCRIPTED_MODEL=1 for a test or demo setup."
    )

# Celery's broker is Redis: without it no worker could receive a compaction
# (the embedded default runs them in a thread instead).
if STUDIO["COMPACTION_RUNNER"] == "celery" and not REDIS_URL:
    raise ImproperlyConfigured(
        "STUDIO_COMPACTION_RUNNER=celery needs REDIS_URL, Celery's broker: set REDIS_URL, "
        "or choose thread, inline or none."
    )

# --- Mail: budget alerts by e-mail (Django's own settings) -----------------
# Unset EMAIL_HOST (and EMAIL_BACKEND): no e-mail is sent. EMAIL_BACKEND
# may name another of Django's backends (console, for trying it).
EMAIL_BACKEND = env_value("EMAIL_BACKEND") or "django.core.mail.backends.smtp.EmailBackend"
EMAIL_HOST = env_value("EMAIL_HOST") or "localhost"
EMAIL_PORT = env_int("EMAIL_PORT", 587, at_least=1, at_most=65535)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
# One or the other: TLS from the first byte (port 465), or STARTTLS (587).
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", not EMAIL_USE_SSL)
if EMAIL_USE_SSL and EMAIL_USE_TLS:
    raise ImproperlyConfigured(
        "EMAIL_USE_TLS and EMAIL_USE_SSL are both on: set EMAIL_USE_SSL=1 for port 465, or leave it off "
        "for STARTTLS (EMAIL_USE_TLS, on by default)."
    )
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = env_value("DEFAULT_FROM_EMAIL") or "studio@localhost"

# Model providers (the SDKs also read these themselves).
OPENAI_API_KEY = os.environ.get("OPENAI_API_KEY", "")
OPENAI_BASE_URL = os.environ.get("OPENAI_BASE_URL", "")
ANTHROPIC_API_KEY = os.environ.get("ANTHROPIC_API_KEY", "")
ANTHROPIC_BASE_URL = os.environ.get("ANTHROPIC_BASE_URL", "")

# --- Operations: metrics and logs ------------------------------------------
# Set: GET /metrics asks for `Authorization: Bearer <token>` (401 without).
STUDIO_METRICS_TOKEN = os.environ.get("STUDIO_METRICS_TOKEN", "")
# One directory shared by every web process and worker of the host, so a
# scrape sums them (prometheus-client's multiprocess mode, which reads the
# variable itself); unset, each process serves its own metrics.
PROMETHEUS_MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
if not PROMETHEUS_MULTIPROC_DIR:
    # Set but empty, prometheus-client would still count in files, in the
    # working directory.
    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)

# "text" (plain lines: level, logger, message) or "json": one JSON object
# per line with the time, level, logger, message, request_id and the game,
# agent, turn and compaction ids.
STUDIO_LOG_FORMAT = os.environ.get("STUDIO_LOG_FORMAT", "text").strip().lower() or "text"
if STUDIO_LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"STUDIO_LOG_FORMAT must be 'text' or 'json', not '{STUDIO_LOG_FORMAT}'.")
# The studio's access log (one line per request, with its id), written
# whatever STUDIO_LOG_LEVEL says; off when another server (nginx) keeps one.
STUDIO_ACCESS_LOG = env_bool("STUDIO_ACCESS_LOG", True)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "studio.ops.logs.ContextFilter"}},
    "formatters": {
        "text": {"format": "%(levelname)s %(name)s: %(message)s"},
        "json": {"()": "studio.ops.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["context"],
            "formatter": STUDIO_LOG_FORMAT,
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("STUDIO_LOG_LEVEL", "WARNING")},
    "loggers": {"studio.access": {"level": "INFO"}},
}
