"""Run by tests/test_parallel.py in a parallel pytest run (`-n 2 --dist each`): each worker notes
the PostgreSQL database and the Redis database its tests use, and marks its Redis database."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import redis
from django.conf import settings
from django.db import connection

from config.celery import app
from core.env import redis_client_url


def test_note_the_databases_of_this_worker(db: Any) -> None:
    worker = os.environ["PYTEST_XDIST_WORKER"]
    r = redis.Redis.from_url(redis_client_url(settings.REDIS_URL))
    r.set("ctxobs:parallel-probe", worker, ex=600)
    with connection.cursor() as cur:
        cur.execute("SELECT current_database()")
        row = cur.fetchone()
    assert row is not None
    note = {
        "worker": worker,
        "database": row[0],
        "redis_url": settings.REDIS_URL,
        "environ_redis_url": os.environ["REDIS_URL"],
        "broker_url": app.conf.broker_url,
    }
    Path(os.environ["CTXOBS_PROBE_OUT"], f"{worker}.json").write_text(json.dumps(note))
