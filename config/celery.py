"""The Celery app, the time limits of every task, and the worker processes a deployment runs.

Two workers, one per kind of work, so that long replays never hold up alert delivery:

    celery -A config worker -Q default,alerts     # alerts, the replay reclaimer, other short tasks
    celery -A config worker -Q replay             # replay runs (model calls)
    celery -A config beat                         # the periodic tasks (settings.CELERY_BEAT_SCHEDULE)

docker-compose.yml and `manage.py ctxobs_up` start exactly these (core.tasking: WORKER_QUEUES,
worker_argv, beat_argv); apps declare their tasks with core.tasking.project_task.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from fnmatch import fnmatchcase
from typing import Any

from celery import Celery
from celery.signals import before_task_publish

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("ctxobs")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

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


def guard_detached_redis_channels() -> None:
    """Make kombu's Redis channels fail with a connection error, not an AttributeError, once their
    connection has been detached. Idempotent; applied when this module is imported (every worker).

    After the broker goes away, the worker's consumer calls `Connection.collect()`, which closes
    what it can and sets `transport.client = None`. A channel whose close did not complete then (the
    Redis calls of its close failed: deleting its auto-delete fanout queue, restoring the messages
    it holds unacknowledged with late acks) is closed again later — by a consumer step's shutdown
    or its QoS restoring unacked messages — with its connection pool already dropped, so kombu
    builds a new pool from `self.connection.client.hostname` and raises AttributeError: "'NoneType'
    object has no attribute 'hostname'" (kombu issues #582, #970). The consumer recovers from
    connection errors only; an AttributeError is "Unrecoverable" and the worker exits. Raised as
    redis' ConnectionError, the close is ignored like the other errors of a dead connection, the
    worker reconnects, and what that channel held stays in Redis's unacked set until the visibility
    timeout gives it back (the alerts sweeper and the replay reclaimer re-queue their work sooner).
    """
    import redis
    from kombu.transport import redis as kombu_redis

    original: Callable[..., Any] = kombu_redis.Channel._connparams
    if getattr(original, "ctxobs_guarded", False):
        return

    def _connparams(self: Any, asynchronous: bool = False) -> Any:
        transport = self.connection
        if transport is None or transport.client is None:
            raise redis.exceptions.ConnectionError("the broker connection of this channel was closed")
        return original(self, asynchronous=asynchronous)

    _connparams.ctxobs_guarded = True  # type: ignore[attr-defined]
    kombu_redis.Channel._connparams = _connparams  # type: ignore[method-assign]


guard_detached_redis_channels()
