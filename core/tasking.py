"""How the apps declare Celery tasks and which worker processes run them: the part of Celery every
app is written against. The Celery app itself (config.celery) is configured from settings and finds
the tasks; nothing here imports it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from celery import shared_task

# Worker service name -> the queues it consumes.
WORKER_QUEUES: dict[str, tuple[str, ...]] = {
    "worker": ("default", "alerts"),
    "worker-replay": ("replay",),
    # Expiry (up to half an hour), partitions and the overview rollup: never ahead of an alert.
    "worker-maintenance": ("maintenance",),
}


P = ParamSpec("P")
R = TypeVar("R")


def project_task(
    name: str, *, bind: bool = False, max_retries: int | None = 3
) -> Callable[[Callable[P, R]], Any]:
    """The project's one way to declare a Celery task, NAME ("app.what"). Everything else comes
    from one place each: its queue from settings.CELERY_TASK_ROUTES, its soft and hard time
    limits from settings.CTXOBS_TASK_TIME_LIMITS (applied by the Celery app, config.celery), late
    acknowledgement and no stored result from the global settings. BIND passes the task itself
    first, for a task that retries itself with `self.retry`; MAX_RETRIES bounds those retries
    (None: the service bounds them itself, as replay runs count their claims)."""

    def declare(fn: Callable[P, R]) -> Any:
        return shared_task(name=name, bind=bind, max_retries=max_retries)(fn)

    return declare


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
