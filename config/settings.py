"""ctxobs settings. Every value comes from the environment through core.env."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

from config import embedded
from core.env import (  # noqa: F401
    ctxobs_home,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_str,
    env_url,
    local_secret,
    redis_client_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent
# A wheel carries templates/ and static/ inside config/ (see setup.py); a checkout has them at the top.
_SHIPPED = Path(__file__).resolve().parent
TEMPLATES_DIR = _SHIPPED / "templates" if (_SHIPPED / "templates").is_dir() else BASE_DIR / "templates"
STATIC_DIR = _SHIPPED / "static" if (_SHIPPED / "static").is_dir() else BASE_DIR / "static"

# --- core -------------------------------------------------------------------
DEBUG = env_bool("CTXOBS_DEBUG", False)
# Set it in production; a single-machine install gets a random one kept in CTXOBS_HOME.
SECRET_KEY = env_str("CTXOBS_SECRET_KEY") or local_secret("secret-key")
ALLOWED_HOSTS = env_list("CTXOBS_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CTXOBS_CSRF_TRUSTED_ORIGINS", [])
# Field encryption for provider keys; derived from SECRET_KEY unless set explicitly.
CTXOBS_ENCRYPTION_KEY = env_str("CTXOBS_ENCRYPTION_KEY")

# ModelAdmin[Model] and the other generic classes, subscriptable as the type stubs write them.
django_stubs_ext.monkeypatch()

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    # Installed for its static files: /api/v1/docs loads Swagger UI from here, not from a CDN.
    "ninja",
    "core",
    "ingest",
]
# The optional apps, in dependency order, and what each needs installed too.
OPTIONAL_APPS: dict[str, tuple[str, ...]] = {
    "insights": (),
    "replay": (),
    "alerts": ("insights",),
    "experiments": ("insights", "replay"),
}
CTXOBS_APPS = env_list("CTXOBS_APPS", list(OPTIONAL_APPS))
for _app in CTXOBS_APPS:
    if _app not in OPTIONAL_APPS:
        raise ImproperlyConfigured(
            f"CTXOBS_APPS: unknown app {_app!r}; the optional apps are {', '.join(OPTIONAL_APPS)}"
        )
    _missing = [need for need in OPTIONAL_APPS[_app] if need not in CTXOBS_APPS]
    if _missing:
        raise ImproperlyConfigured(f"CTXOBS_APPS: {_app} needs {', '.join(_missing)} too")
INSTALLED_APPS += [app for app in OPTIONAL_APPS if app in CTXOBS_APPS]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "config.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [TEMPLATES_DIR],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

STATIC_URL = "/static/"
STATICFILES_DIRS = [STATIC_DIR]
STATIC_ROOT = Path(env_str("CTXOBS_STATIC_ROOT") or (BASE_DIR / "staticfiles"))
CTXOBS_SERVE_STATIC = env_bool("CTXOBS_SERVE_STATIC", True)

# Ingest bodies are read and size-checked by the API itself (see ctxobs.wire.LIMITS).
DATA_UPLOAD_MAX_MEMORY_SIZE = None

# --- sign-in ----------------------------------------------------------------
# Every sign-in form goes through the throttle (core.signin): failures per account and per
# client address in a window; past either limit sign-ins are refused until the window ends.
AUTHENTICATION_BACKENDS = ["core.signin.ThrottledModelBackend"]
CTXOBS_SIGNIN_MAX_FAILURES_ACCOUNT = env_int("CTXOBS_SIGNIN_MAX_FAILURES_ACCOUNT", 5)
CTXOBS_SIGNIN_MAX_FAILURES_IP = env_int("CTXOBS_SIGNIN_MAX_FAILURES_IP", 20)
CTXOBS_SIGNIN_WINDOW = env_int("CTXOBS_SIGNIN_WINDOW", 15 * 60)
# Proxies (addresses or networks) whose X-Forwarded-For names the client; nobody else's is believed.
CTXOBS_TRUSTED_PROXIES = env_list("CTXOBS_TRUSTED_PROXIES", [])
for _proxy in CTXOBS_TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy, strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"CTXOBS_TRUSTED_PROXIES: {_proxy!r} is not an address or network (like 10.0.0.0/8)"
        ) from None
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# --- HTTPS ------------------------------------------------------------------
# CTXOBS_HTTPS=1: the server is reached over HTTPS through a reverse proxy that terminates TLS
# and sets X-Forwarded-Proto (it must overwrite any value the client sent). Cookies are sent
# over HTTPS only, browsers are told to use HTTPS (HSTS), and plain HTTP is redirected, except
# /healthz, which load balancers and the compose health check call over plain HTTP.
CTXOBS_HTTPS = env_bool("CTXOBS_HTTPS", False)
if CTXOBS_HTTPS:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = env_int("CTXOBS_HSTS_SECONDS", 365 * 24 * 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("CTXOBS_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("CTXOBS_HSTS_PRELOAD", True)


# --- database ---------------------------------------------------------------
def _database_from_url(url: str) -> dict[str, object]:
    parsed = urlparse(url)
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    host = unquote(parsed.hostname or "") or query.pop("host", "")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
        "USER": unquote(parsed.username or "") or "postgres",
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": host,
        "PORT": str(parsed.port or ""),
        "CONN_MAX_AGE": env_int("CTXOBS_DB_CONN_MAX_AGE", 60),
        "CONN_HEALTH_CHECKS": True,
        # JIT compilation off: the pages' queries are short, and once a table's size pushes a
        # plan's estimated cost past PostgreSQL's JIT threshold, compiling it costs more than
        # the query (docs/scale.md). An `options` in DATABASE_URL's query replaces this.
        # Prepared statements only where the code asks for them (`prepare=True`: the ingest store's
        # per-batch lookups, whose planning over the day partitions cost more than running them);
        # psycopg's automatic preparation never reaches this threshold. CTXOBS_DB_PREPARED=0 turns
        # them off for a connection pooler in transaction mode that does not keep them.
        "OPTIONS": {"connect_timeout": env_int("CTXOBS_DB_CONNECT_TIMEOUT", 5), "options": "-c jit=off",
                    "prepare_threshold": (1 << 31) - 1 if env_bool("CTXOBS_DB_PREPARED", True) else None,
                    **query},
        "TEST": {"NAME": env_str("CTXOBS_TEST_DB_NAME") or None},
    }


DATABASE_URL = env_str("DATABASE_URL") or embedded.ensure_database()
DATABASES = {"default": _database_from_url(DATABASE_URL)}

# --- redis / celery ---------------------------------------------------------
REDIS_URL = env_str("REDIS_URL") or embedded.ensure_redis()


CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
# Every task is safe to run twice (it locks its row and skips finished work), so a message is
# acknowledged only once its task has returned: a worker that dies mid-task loses nothing.
CELERY_TASK_ACKS_LATE = True
# ...and when a pool process dies under a live worker (OOM, a crash, a kill) the message goes
# back to the queue instead of being acknowledged as failed. Replay runs bound the repeats
# themselves (CTXOBS_REPLAY_MAX_ATTEMPTS claims per run).
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# With late acks a worker holds at most one message per pool process, running ones included: the
# rest stay in Redis, where another worker can take them if this one dies.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "default"
# Replays (model calls of up to minutes) have their own queue and worker service, so that they
# never hold up alert delivery; the reclaimer runs on the default queue so that it still runs
# when every replay worker is busy or dead.
CELERY_TASK_ROUTES = {
    "replay.runs_reclaim": {"queue": "default"},
    "replay.*": {"queue": "replay"},
    "alerts.*": {"queue": "alerts"},
    # Maintenance by role: expiry, partitions and the overview rollup have their own worker.
    "ingest.*": {"queue": "maintenance"},
    "insights.*": {"queue": "default"},
    # Summaries for a strategy are model calls: they wait with the replays, not with alerts.
    "experiments.prepare": {"queue": "replay"},
    "experiments.*": {"queue": "default"},
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# Time limits of every task, (soft, hard) seconds, by task name pattern (the first match wins):
# config.celery.TaskTimeLimits applies them. At the soft limit the task gets an exception it can
# record; at the hard one its pool process is killed.
# A replay run makes one completion and at most one embedding call, each bounded by the
# endpoint's timeout (at most 600 s per read), plus rendering and storing.
CTXOBS_REPLAY_TIME_LIMIT_S = env_float("CTXOBS_REPLAY_TIME_LIMIT_S", 1260.0)
CTXOBS_TASK_TIME_LIMITS: dict[str, tuple[float, float]] = {
    "replay.runs_reclaim": (60.0, 90.0),
    "replay.*": (CTXOBS_REPLAY_TIME_LIMIT_S, CTXOBS_REPLAY_TIME_LIMIT_S + 60.0),
    # Each summary is one bounded model call; an experiment's preparation resumes where it stopped.
    "experiments.prepare": (CTXOBS_REPLAY_TIME_LIMIT_S, CTXOBS_REPLAY_TIME_LIMIT_S + 60.0),
    # Checks on every answer of an experiment: milliseconds each, 500 items x samples x arms.
    "experiments.finalize": (600.0, 660.0),
    # Sweeps read a bounded page of ids and queue tasks (or lock a bounded page of incidents): a
    # minute means the database or the broker is stuck, and the next sweep starts over.
    "alerts.sweep": (60.0, 90.0),
    "alerts.incidents_sweep": (60.0, 90.0),
    "insights.sweep": (60.0, 90.0),
    # A webhook or SMTP send is bounded by the channel's timeout (at most 30 s).
    "alerts.*": (120.0, 150.0),
    # Expiry deletes in bounded batches; a run cut short goes on at the next tick.
    "ingest.expire": (1800.0, 1860.0),
    "*": (120.0, 150.0),
}
CELERY_TASK_SOFT_TIME_LIMIT, CELERY_TASK_TIME_LIMIT = CTXOBS_TASK_TIME_LIMITS["*"]
CELERY_TASK_ANNOTATIONS = ["config.celery.TaskTimeLimits"]

# The broker's own backstop: Redis hands an unacknowledged message to another worker after this
# long. It must outlast the longest hard time limit and retry countdown, or a healthy long task
# would run twice; dead workers' replay runs are reclaimed far sooner through their leases.
# Message priorities (replay.models.QueuePriority): Redis keeps a list per step in each queue and
# a worker takes from the lowest step that holds a message, so a person's replay goes ahead of
# the calls of an experiment queued before it. A message without a priority is at step 0.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": max(3600.0, max(hard for _, hard in CTXOBS_TASK_TIME_LIMITS.values()) + 600.0),
    "priority_steps": [0, 3, 6, 9],
}

# A replay run holds a lease while its model call is under way, renewed every third of it; a run
# whose lease ran out (its worker died) is re-queued by replay.runs_reclaim, which beat runs
# every CTXOBS_REPLAY_RECLAIM_EVERY_S seconds. A dead worker's runs resume within about
# lease + reclaim interval.
CTXOBS_REPLAY_LEASE_S = env_float("CTXOBS_REPLAY_LEASE_S", 60.0)
CTXOBS_REPLAY_RECLAIM_EVERY_S = env_float("CTXOBS_REPLAY_RECLAIM_EVERY_S", 30.0)
# One beat process carries every periodic task.
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    # A tick no worker took up in time is dropped, not piled up behind a stopped worker.
    "replay-runs-reclaim": {
        "task": "replay.runs_reclaim",
        "schedule": CTXOBS_REPLAY_RECLAIM_EVERY_S,
        "options": {"expires": CTXOBS_REPLAY_RECLAIM_EVERY_S},
    },
}

# --- ctxobs -----------------------------------------------------------------
CTXOBS_HOME = ctxobs_home()
# Where people reach the dashboard: the links in alert webhooks and e-mails start with it.
CTXOBS_BASE_URL = env_url("CTXOBS_BASE_URL", "http://localhost:8000")
# Requests per second per ingest key (a token bucket in Redis, ingest.ratelimit); 0 disables the
# limit. BURST is the bucket's size: how many requests may come at once after a quiet spell.
CTXOBS_INGEST_RATE_LIMIT = env_float("CTXOBS_INGEST_RATE_LIMIT", 200.0)
CTXOBS_INGEST_RATE_BURST = env_int("CTXOBS_INGEST_RATE_BURST", 400)
CTXOBS_DB_RETRY_AFTER = env_int("CTXOBS_DB_RETRY_AFTER", 5)
# Replays: attempts per variant on transient provider errors (429, 5xx, timeouts), first backoff.
CTXOBS_REPLAY_MAX_ATTEMPTS = env_int("CTXOBS_REPLAY_MAX_ATTEMPTS", 5)
CTXOBS_REPLAY_RETRY_BASE_S = env_float("CTXOBS_REPLAY_RETRY_BASE_S", 1.0)
# Alerts: how long evaluation waits for a session's earlier turns that arrive late; first backoff of a
# failed delivery (doubling each attempt).
CTXOBS_ALERT_LATENESS_SECONDS = env_float("CTXOBS_ALERT_LATENESS_SECONDS", 30.0)
CTXOBS_ALERT_RETRY_BASE_SECONDS = env_float("CTXOBS_ALERT_RETRY_BASE_SECONDS", 1.0)
# Insights: run the contamination lint on new turns (docs/insights.md); off stores no new findings.
CTXOBS_LINT = env_bool("CTXOBS_LINT", True)
# scripts/up (manage.py ctxobs_up): where its web server listens, and its gunicorn workers.
CTXOBS_HOST = env_str("CTXOBS_HOST", "127.0.0.1")
CTXOBS_PORT = env_int("CTXOBS_PORT", 8000)
CTXOBS_WEB_WORKERS = env_int("CTXOBS_WEB_WORKERS", 2)
# Each web process keeps freed memory for the next request body (core.allocator).
CTXOBS_WEB_MALLOC_TUNE = env_bool("CTXOBS_WEB_MALLOC_TUNE", True)

# --- alerts -----------------------------------------------------------------
# The sweeper (Celery beat runs `alerts.sweep` this often) queues again the evaluations and
# deliveries that the normal path has not finished GRACE seconds after they were due: those
# whose task was never queued (broker down at commit) or was lost with a killed worker.
CTXOBS_ALERT_SWEEP_SECONDS = env_float("CTXOBS_ALERT_SWEEP_SECONDS", 30.0)
CTXOBS_ALERT_SWEEP_GRACE_SECONDS = env_float("CTXOBS_ALERT_SWEEP_GRACE_SECONDS", 60.0)
# A delivery attempt is leased for its channel's timeouts plus this margin; past the lease a
# delivery whose worker died mid-send is attempted again.
CTXOBS_ALERT_DELIVERY_LEASE_SECONDS = env_float("CTXOBS_ALERT_DELIVERY_LEASE_SECONDS", 30.0)
CELERY_BEAT_SCHEDULE["alerts.sweep"] = {
    "task": "alerts.sweep",
    "schedule": CTXOBS_ALERT_SWEEP_SECONDS,
    # A sweep queued while no worker ran is worthless once the next one is due.
    "options": {"expires": CTXOBS_ALERT_SWEEP_SECONDS},
}

# Incidents (docs/alerts.md, "Incidents"): unmute those whose mute has passed, resolve those quiet
# for their project's quiet period, and send the messages a channel's hourly limit held.
CTXOBS_INCIDENT_SWEEP_SECONDS = env_float("CTXOBS_INCIDENT_SWEEP_SECONDS", 60.0)
CELERY_BEAT_SCHEDULE["alerts.incidents_sweep"] = {
    "task": "alerts.incidents_sweep",
    "schedule": CTXOBS_INCIDENT_SWEEP_SECONDS,
    "options": {"expires": CTXOBS_INCIDENT_SWEEP_SECONDS},
}

CELERY_BEAT_SCHEDULE["insights.sweep"] = {
    "task": "insights.sweep",
    "schedule": 60.0,
    "options": {"expires": 60.0},
}

# Token counts: each model family's own tokenizer, where one can be had offline (docs/insights.md,
# "Token counts"): a JSON object {"family prefix": "llama.cpp server URL or tokenizer.json path"}.
CTXOBS_TOKENIZERS = env_str("CTXOBS_TOKENIZERS", "")

# --- storage upkeep ----------------------------------------------------------
# Day partitions of the snapshot tables are created this often, a week ahead (ingest.partitions);
# expiry (ingest.retention) removes what each project's retention has passed.
CTXOBS_PARTITIONS_EVERY_S = env_float("CTXOBS_PARTITIONS_EVERY_S", 3600.0)
CTXOBS_EXPIRE_EVERY_S = env_float("CTXOBS_EXPIRE_EVERY_S", 3600.0)
# After each batch of deletes, expiry rests this many times the batch's own duration, leaving the
# database to ingest (1.0: at most half its time; 0: no rest).
CTXOBS_EXPIRE_PAUSE = env_float("CTXOBS_EXPIRE_PAUSE", 1.0)
CELERY_BEAT_SCHEDULE["ingest.partitions_ensure"] = {
    "task": "ingest.partitions_ensure",
    "schedule": CTXOBS_PARTITIONS_EVERY_S,
    "options": {"expires": CTXOBS_PARTITIONS_EVERY_S},
}
# The overview's daily rollup is brought up to date this often; a page view does it itself only
# while that is cheap (ingest.dashboard.INLINE_REFRESH_MAX_TURNS).
CTXOBS_OVERVIEW_REFRESH_S = env_float("CTXOBS_OVERVIEW_REFRESH_S", 30.0)
CELERY_BEAT_SCHEDULE["ingest.overview_refresh"] = {
    "task": "ingest.overview_refresh",
    "schedule": CTXOBS_OVERVIEW_REFRESH_S,
    "options": {"expires": CTXOBS_OVERVIEW_REFRESH_S},
}
CELERY_BEAT_SCHEDULE["ingest.expire"] = {
    "task": "ingest.expire",
    "schedule": CTXOBS_EXPIRE_EVERY_S,
    "options": {"expires": CTXOBS_EXPIRE_EVERY_S},
}
# Only the periodic tasks of installed apps: a worker has no task of an app left out.
CELERY_BEAT_SCHEDULE = {
    k: v for k, v in CELERY_BEAT_SCHEDULE.items() if str(v["task"]).split(".")[0] in ("ingest", *CTXOBS_APPS)
}

# --- e-mail -----------------------------------------------------------------
EMAIL_BACKEND = env_str("CTXOBS_EMAIL_BACKEND") or (
    "django.core.mail.backends.smtp.EmailBackend"
    if env_str("CTXOBS_SMTP_HOST")
    else "django.core.mail.backends.console.EmailBackend"
)
EMAIL_HOST = env_str("CTXOBS_SMTP_HOST", "localhost")
EMAIL_PORT = env_int("CTXOBS_SMTP_PORT", 25)
EMAIL_HOST_USER = env_str("CTXOBS_SMTP_USER")
EMAIL_HOST_PASSWORD = env_str("CTXOBS_SMTP_PASSWORD")
EMAIL_USE_TLS = env_bool("CTXOBS_SMTP_TLS", False)
# smtplib waits forever by default; a bounded send is what lets a delivery's lease be bounded.
EMAIL_TIMEOUT = env_float("CTXOBS_SMTP_TIMEOUT", 10.0)
DEFAULT_FROM_EMAIL = env_str("CTXOBS_EMAIL_FROM", "ctxobs@localhost")

# --- logging ----------------------------------------------------------------
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("CTXOBS_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
