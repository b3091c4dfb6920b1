"""The product's real processes for tests: gunicorn serving config.wsgi, Celery workers per queue
group and beat, on the test database and a Redis (the test one, or one a test owns).

Every process runs in its own process group, so that a kill -9 takes a worker's pool children
with it, and writes its output to a log file under the harness's log directory. Tests that own a
harness keep those logs in the artifacts folder (CTXOBS_TEST_ARTIFACTS) when they fail.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit

import httpx

from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]


def artifacts_dir() -> Path:
    """Where test runs leave logs and screenshots (git-ignored); created on first use."""
    path = Path(os.environ.get("CTXOBS_TEST_ARTIFACTS") or ROOT / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tests_database_url() -> str:
    """The URL of the database pytest-django created, for processes started by a test."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    host = str(db["HOST"])
    if host.startswith("/"):
        return f"postgresql://{db['USER']}:{db['PASSWORD']}@/{db['NAME']}?host={host}"
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgresql://{db['USER']}:{db['PASSWORD']}@{host}{port}/{db['NAME']}"


def process_env(*, redis_url: str | None = None, **extra: str) -> dict[str, str]:
    """This environment with the test database and Redis (REDIS_URL, else the test one) and EXTRA."""
    from django.conf import settings

    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["DATABASE_URL"] = tests_database_url()
    env["REDIS_URL"] = redis_url or settings.REDIS_URL
    env.update(extra)
    return env


def keep_logs_on_failure(request: Any, log_dir: Path) -> None:
    """Copy LOG_DIR to the artifacts folder when REQUEST's test failed (see tests/conftest.py)."""
    report = getattr(request.node, "rep_call", None)
    if report is None or not report.failed or not log_dir.exists():
        return
    dest = artifacts_dir() / "failed" / re.sub(r"[^\w.-]+", "_", request.node.nodeid)
    shutil.copytree(log_dir, dest, dirs_exist_ok=True)


class Processes:
    """Starts, stops and kills the product's processes; each writes LOG_DIR/<name>.log."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []
        self._starts = 0

    def log(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def spawn(
        self, name: str, argv: list[str], *, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        fh = self.log(name).open("ab")
        proc = subprocess.Popen(
            argv, env={**self.env, **(env or {})}, stdout=fh, stderr=subprocess.STDOUT, cwd=str(ROOT),
            start_new_session=True,
        )
        self.procs.append((proc, fh))
        return proc

    def web(
        self,
        *,
        port: int | None = None,
        threads: int = 4,
        env: dict[str, str] | None = None,
        name: str = "web",
    ) -> tuple[subprocess.Popen[bytes], str]:
        """gunicorn serving config.wsgi on 127.0.0.1:PORT (a free one by default), once /healthz
        answers; returns the process and its base URL."""
        port = port or free_port()
        url = f"http://127.0.0.1:{port}"
        proc = self.spawn(
            name,
            [sys.executable, "-m", "gunicorn", "config.wsgi:application", "-b", f"127.0.0.1:{port}",
             "-w", "1", "--threads", str(threads), "--timeout", "60"],
            env=env,
        )

        def answers() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"the web server exited early; see {self.log(name)}")
            try:
                return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(answers, 90, f"the web server to answer (log: {self.log(name)})", interval=0.2)
        return proc, url

    def worker(
        self, service: str = "worker", *, concurrency: int = 2, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """`celery worker` for SERVICE's queues (config.celery.WORKER_QUEUES), once it logs that it is
        ready (read from its log, so this works whatever broker the worker was given)."""
        from core.tasking import worker_argv

        self._starts += 1
        hostname = f"{service}-{os.getpid()}-{self._starts}@ctxobs-test"
        proc = self.spawn(service, worker_argv(service, concurrency=concurrency, hostname=hostname), env=env)
        log = self.log(service)

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"celery worker {hostname} exited early; see {log}")
            return "ready." in log.read_text(errors="replace").split(f"{hostname}")[-1]

        wait_until(ready, 90, f"celery worker {hostname} to be ready (log: {log})", interval=0.2)
        return proc

    def beat(self, *, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """`celery beat`, with a schedule file of its own."""
        from core.tasking import beat_argv

        self._starts += 1
        schedule = self.log_dir / f"celerybeat-{os.getpid()}-{self._starts}"
        return self.spawn("beat", beat_argv(schedule_file=str(schedule)), env=env)

    def task_finished(self, service: str, task_id: str) -> bool:
        """Whether SERVICE's worker logged TASK_ID as finished (succeeded, failed or retried): with
        late acknowledgement, the broker has its ack by then."""
        text = self.log(service).read_text(errors="replace")
        return any(f"[{task_id}] {outcome}" in text for outcome in ("succeeded", "raised", "retry"))

    def tasks_finished(self, service: str, task_name: str) -> int:
        """How many TASK_NAME tasks SERVICE's worker logged as succeeded."""
        text = self.log(service).read_text(errors="replace")
        return len(re.findall(rf"Task {re.escape(task_name)}\[[^\]]+\] succeeded", text))

    def kill9(self, proc: subprocess.Popen[bytes]) -> None:
        """kill -9 PROC and its process group (a worker's pool children) at once."""
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)

    def stop(self, proc: subprocess.Popen[bytes], *, sig: int = signal.SIGTERM) -> None:
        """Stop PROC with SIG (SIGQUIT: gunicorn's quick shutdown), kill -9 after 20 s."""
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill9(proc)

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
        self.procs = []


def celery_idle(*queues: str) -> bool:
    """Whether QUEUES hold no message and no worker holds a task (running, reserved or scheduled):
    everything sent before has been consumed and acknowledged."""
    from config.celery import app

    with app.connection_for_write() as conn:
        channel = conn.default_channel
        for queue in queues:
            try:
                if channel.queue_declare(queue, passive=True).message_count:
                    return False
            except conn.channel_errors:
                pass  # Redis drops an emptied list: a queue that is not found holds nothing
    inspect = app.control.inspect(timeout=1.0)
    for reply in (inspect.active(), inspect.reserved(), inspect.scheduled()):
        if not reply or any(reply.values()):
            return False  # no worker answered, or one holds a task
    return True


# The tests' Redis databases (tests/conftest.py gives each parallel worker its own).
def redis_url_database(url: str, db: int) -> str:
    """URL (a `redis://`, `rediss://` or `redis+socket://` URL as Celery takes it) on database DB."""
    if url.startswith("redis+socket://"):
        # urlunsplit would drop the empty host's `//`.
        path, _, query = url.partition("?")
        kept = [(k, v) for k, v in parse_qsl(query) if k != "virtual_host"]
        return f"{path}?{urlencode([*kept, ('virtual_host', str(db))])}"
    return urlunsplit(urlsplit(url)._replace(path=f"/{db}"))


def redis_url_database_number(url: str) -> int:
    """The database number URL names (0 when it names none)."""
    parts = urlsplit(url)
    if parts.scheme == "redis+socket":
        value = parse_qs(parts.query).get("virtual_host", ["0"])[-1]
    else:
        value = parts.path.strip("/") or "0"
    return int(value) if value.isdigit() else 0
