"""The Celery app, the time limits of every task, and the worker processes a deployment runs.

Two workers, one per kind of work, so that long replays never hold up alert delivery:

    celery -A config worker -Q default,alerts     # alerts, the replay reclaimer, other short tasks
    celery -A config worker -Q replay             # replay runs (model calls)
    celery -A config beat                         # the periodic tasks (settings.CELERY_BEAT_SCHEDULE)

docker-compose.yml and `manage.py ctxobs_up` start exactly these (see worker_argv, beat_argv).
"""

from __future__ import annotations

import os
import sys
from fnmatch import fnmatchcase
from typing import Any

from celery import Celery
from celery.signals import before_task_publish

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("ctxobs")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Worker service name -> the queues it consumes.
WORKER_QUEUES: dict[str, tuple[str, ...]] = {
    "worker": ("default", "alerts"),
    "worker-replay": ("replay",),
}


def time_limits(task_name: str) -> tuple[float, float]:
    """(soft, hard) seconds for TASK_NAME: the first pattern of settings.CTXOBS_TASK_TIME_LIMITS
    that matches it."""
    from django.conf import settings

    limits: dict[str, tuple[float, float]] = settings.CTXOBS_TASK_TIME_LIMITS
    for pattern, pair in limits.items():
        if fnmatchcase(task_name, pattern):
            return pair
    return limits["*"]


class TaskTimeLimits:
    """A task annotation (settings.CELERY_TASK_ANNOTATIONS) giving every task its time limits."""

    def annotate(self, task: Any) -> dict[str, float]:
        soft, hard = time_limits(task.name)
        return {"soft_time_limit": soft, "time_limit": hard}


def _time_limits_are_the_workers(headers: dict[str, Any] | None = None, **_: Any) -> None:
    # Celery copies the sender's limits into each message, where they override the worker's own:
    # the web process's settings would then bound work that runs under the worker's. Sent without
    # them, a task runs under the limits of the process that runs it (its TaskTimeLimits).
    if headers is not None and "timelimit" in headers:
        headers["timelimit"] = (None, None)


before_task_publish.connect(_time_limits_are_the_workers)


def worker_argv(service: str, *, concurrency: int = 2, hostname: str | None = None) -> list[str]:
    """The command line of worker SERVICE (a key of WORKER_QUEUES)."""
    argv = [sys.executable, "-m", "celery", "-A", "config", "worker",
            "-Q", ",".join(WORKER_QUEUES[service]), "-c", str(concurrency), "-l", "INFO"]
    if hostname:
        argv += ["-n", hostname]
    return argv


def beat_argv(*, schedule_file: str) -> list[str]:
    """The command line of the one beat process; SCHEDULE_FILE keeps when each task last ran."""
    return [sys.executable, "-m", "celery", "-A", "config", "beat", "-l", "INFO", "-s", schedule_file]
