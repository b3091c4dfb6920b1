"""A parallel run (pytest-xdist: `scripts/test -n 2`) gives each worker its own PostgreSQL
database and its own Redis database (tests/conftest.py), and runs every test that starts the
product's processes in one worker, one after the other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis
from django.conf import settings

from core.env import redis_client_url
from tests.processes import ROOT, redis_url_database, redis_url_database_number, tests_database_url


def test_each_worker_of_a_parallel_run_has_its_own_postgres_and_redis_database(tmp_path: Path) -> None:
    # The probe run's workers start from database 13 (14 and 15 for gw0 and gw1): clear of the
    # databases of the run this test is part of.
    base = redis_url_database(settings.REDIS_URL, 13)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CTXOBS_TEST_DB_NAME"))}
    env.update(
        DATABASE_URL=tests_database_url(),
        REDIS_URL=base,
        CTXOBS_TEST_DB_NAME=f"test_probe_{uuid.uuid4().hex[:8]}",
        CTXOBS_PROBE_OUT=str(tmp_path),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/parallel_probe.py", "-n", "2", "--dist", "each",
         "-p", "no:cacheprovider", "-q", "--create-db"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    notes = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("gw*.json")}
    assert sorted(notes) == ["gw0", "gw1"]
    assert notes["gw0"]["database"] != notes["gw1"]["database"]
    dbs = {w: redis_url_database_number(n["redis_url"]) for w, n in notes.items()}
    assert dbs == {"gw0": 14, "gw1": 15}
    for worker, note in notes.items():
        # The worker's Celery broker and the processes its tests start use the same database.
        assert note["broker_url"] == note["environ_redis_url"] == note["redis_url"]
        # Each database holds its own worker's mark: they are apart on the server, not only in name.
        r = redis.Redis.from_url(redis_client_url(note["redis_url"]))
        assert r.get("ctxobs:parallel-probe") == worker.encode()
        r.delete("ctxobs:parallel-probe")


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/2", "redis://:pw@host:6380", "rediss://h/0?ssl_cert_reqs=none",
                                 "redis+socket:///tmp/r.sock", "redis+socket:///tmp/r.sock?virtual_host=3"])
def test_a_redis_url_moves_to_another_database_in_both_spellings(url: str) -> None:
    moved = redis_url_database(url, 7)
    assert redis_url_database_number(moved) == 7
    client = redis.Redis.from_url(redis_client_url(moved))
    assert client.connection_pool.connection_kwargs["db"] == 7
    assert moved.split("://")[0] == url.split("://")[0]
