"""`manage.py ctxobs_up`: the whole product on one machine, with embedded defaults.

This process owns the embedded PostgreSQL and Redis (started by config.settings when
DATABASE_URL / REDIS_URL are unset) and passes their URLs to the processes it starts:
the web server, the Celery workers (alerts and replays apart, see core.tasking), beat and the
local model server (the one an installed app registered in core.registry). It supervises the
web server, the workers and beat: one that exits is restarted, after a pause that doubles with
each quick failure (RESTART_BACKOFF_S up to RESTART_BACKOFF_MAX_S), with a line on standard error
each time. Ctrl-C (or SIGTERM)
stops them all within STOP_GRACE_S seconds: each child runs in a process group of its own (a
gunicorn master with its workers, a Celery worker with its pool), asked to stop, then killed with
its group once the time is up.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from core import registry
from core.models import SCOPE_INGEST, SCOPE_REPLAY, Membership, Project
from core.services import ingest_key_create, project_create
from core.tasking import WORKER_QUEUES, beat_argv, worker_argv

DEMO_PROJECT = "demo"
DEMO_USER = "demo"
# Seconds a stopping child gets before it is killed with its process group: Ctrl-C ends
# everything within about this (Celery's warm shutdown would wait for a running replay; tasks are
# acknowledged late and safe to run twice, so a killed one loses nothing).
STOP_GRACE_S = 5.0


# A supervised child that exits is started again after RESTART_BACKOFF_S, doubled for each
# exit in a row that came sooner than RESTART_STABLE_S after its start, up to RESTART_BACKOFF_MAX_S.
RESTART_BACKOFF_S = 1.0
RESTART_BACKOFF_MAX_S = 30.0
RESTART_STABLE_S = 60.0


@dataclass
class _Child:
    """A supervised process: how to start it again, and its restart state."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes]
    started: float
    quick_exits: int = 0
    restart_at: float | None = None


class _Stop(Exception):
    """SIGTERM, raised in the main thread so that the stop runs there, not inside the handler."""


def _raise_stop(*_: object) -> None:
    raise _Stop


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _wait_http(url: str, timeout: float) -> bool:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return False


def _popen(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("a") as fh:
        # A process group of its own: Ctrl-C reaches this command only, which stops the children
        # itself, and a stop or a crash can end a child's own children (workers, pool) with it.
        return subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                cwd=str(settings.BASE_DIR), process_group=0)


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """SIG to PROC's process group (PROC leads it); nothing when the group is gone."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _secret_file(path: Path, make: Callable[[], str]) -> str:
    """A local secret for the demo (key, password) kept 0600 under CTXOBS_HOME, reused on rerun."""
    if path.exists():
        return path.read_text().strip()
    value = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(value + "\n")
    return value


def web_argv(*, host: str, port: int, workers: int) -> list[str]:
    """The web server's command line. As in docker-compose.yml: uvicorn serving config.asgi, so that
    a slow client holds a coroutine, not a view thread (tests/test_slow_clients.py attacks both)."""
    return [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", host,
            "--port", str(port), "--workers", str(workers), "--timeout-keep-alive", "5",
            "--no-proxy-headers", "--no-server-header"]


class Command(BaseCommand):
    help = "Start ctxobs (web, workers, beat, local model, demo data) with embedded PostgreSQL and Redis."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=settings.CTXOBS_HOST)
        parser.add_argument("--port", type=int, default=settings.CTXOBS_PORT)
        parser.add_argument("--workers", type=int, default=settings.CTXOBS_WEB_WORKERS)
        parser.add_argument("--no-model", action="store_true", help="do not start the local model server")
        parser.add_argument("--no-demo", action="store_true", help="do not run the example agent")
        parser.add_argument("--demo-sessions", type=int, default=4)
        parser.add_argument("--demo-turns", type=int, default=10)
        parser.add_argument("--check", action="store_true",
                            help="start everything, verify it answers, then stop (used by tests)")

    def handle(self, *args: Any, **opts: Any) -> None:
        self.children: list[_Child] = []
        self.demo_proc: subprocess.Popen[bytes] | None = None
        self.stopping = threading.Event()
        self.demo_lock = threading.Lock()
        self._model: registry.LocalModel | None = None
        signal.signal(signal.SIGTERM, _raise_stop)
        try:
            self._run(opts)
        except (KeyboardInterrupt, _Stop):
            self.stdout.write("ctxobs: stopping")
        finally:
            # A second Ctrl-C does not cut the stop short (it is bounded by STOP_GRACE_S).
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self._stop()

    def _run(self, opts: dict[str, Any]) -> None:
        home = Path(settings.CTXOBS_HOME)
        home.mkdir(parents=True, exist_ok=True)
        logs = home / "logs"
        logs.mkdir(exist_ok=True)

        self.stdout.write(f"ctxobs: data under {home}")
        call_command("migrate", interactive=False, verbosity=0)
        project, key, password = self._demo_project(home)
        env = dict(os.environ)
        env["DATABASE_URL"] = settings.DATABASE_URL
        env["REDIS_URL"] = settings.REDIS_URL
        env.setdefault("CTXOBS_SERVE_STATIC", "1")

        host, port = opts["host"], opts["port"]
        if not _port_free(host, port):
            self.stderr.write(f"ctxobs: port {port} on {host} is taken; pass --port or set CTXOBS_PORT")
            sys.exit(2)
        base_url = f"http://{host}:{port}"
        # Alert links point at this server unless CTXOBS_BASE_URL says where people reach it.
        env.setdefault("CTXOBS_BASE_URL", base_url)

        model_base: str | None = None
        if not opts["no_model"]:
            model_base = self._start_model(project, env, logs)
        model_file = self._model.model_file if self._model is not None else None
        if model_file is not None:
            # The workers count Gemma prompts with the local model's own vocabulary, read from its
            # file (docs/insights.md): the server itself is busy answering the agent.
            env.setdefault("CTXOBS_TOKENIZERS", json.dumps({"gemma": str(model_file)}))

        # One worker per queue group, so that alerts go out while replays run; one beat.
        for service in WORKER_QUEUES:
            self._spawn(service, worker_argv(service, concurrency=2, hostname=f"{service}@%h"), env, logs)
        self._spawn("beat", beat_argv(schedule_file=str(home / "celerybeat-schedule")), env, logs)
        self._spawn("web", web_argv(host=host, port=port, workers=opts["workers"]), env, logs)
        if not _wait_http(f"{base_url}/healthz", 60):
            self.stderr.write(f"ctxobs: the web server did not come up; see {logs / 'web.log'}")
            sys.exit(1)

        self.stdout.write("")
        self.stdout.write(f"  ctxobs is running at {base_url}/")
        self.stdout.write(f"  UI login:            {DEMO_USER} / {password}")
        self.stdout.write(f"  demo ingest key:     {key}")
        self.stdout.write(f"  API docs:            {base_url}/api/v1/docs")
        if model_base:
            self.stdout.write(f"  local model (OpenAI-compatible): {model_base}")
        self.stdout.write(f"  logs:                {logs}")
        self.stdout.write("")

        demo_thread: threading.Thread | None = None
        if not opts["no_demo"] and model_base and not registry.project_has_data(project):
            demo_thread = threading.Thread(
                target=self._run_demo_agent,
                args=(model_base, base_url, key, opts["demo_sessions"], opts["demo_turns"], logs),
                daemon=True,
            )
            demo_thread.start()

        if opts["check"]:
            if demo_thread is not None:
                demo_thread.join(timeout=900)
            return
        while True:
            self._supervise()
            time.sleep(0.5)

    # --- parts ----------------------------------------------------------------
    def _demo_project(self, home: Path) -> tuple[Project, str, str]:
        project = Project.objects.filter(name=DEMO_PROJECT).first()
        key_file = home / "demo-ingest-key"
        # The demo key may also start replays: they run on the local model, which costs nothing.
        scopes = (SCOPE_INGEST, SCOPE_REPLAY)
        if project is None:
            project, raw = project_create(name=DEMO_PROJECT, scopes=scopes)
            key_file.unlink(missing_ok=True)
            key = _secret_file(key_file, lambda: raw)
        else:
            key = _secret_file(
                key_file, lambda: ingest_key_create(project=project, name="demo", scopes=scopes)[1]
            )
        if not project.allow_private_endpoints:
            # The embedded model server listens on loopback.
            project.allow_private_endpoints = True
            project.save(update_fields=["allow_private_endpoints"])
        password = _secret_file(home / "demo-password", lambda: secrets.token_urlsafe(9))
        user_model = get_user_model()
        user = user_model.objects.filter(username=DEMO_USER).first()
        if user is None:
            user = user_model.objects.create_user(DEMO_USER, password=password)
        elif not user.check_password(password):
            user.set_password(password)
            user.save(update_fields=["password"])
        Membership.objects.get_or_create(project=project, user=user, defaults={"role": Membership.Role.ADMIN})
        return project, key, password

    def _start_model(self, project: Project, env: dict[str, str], logs: Path) -> str | None:
        start = registry.local_model_starter()
        if start is None:
            self.stderr.write("ctxobs: no local model (replay is not installed); "
                              "replays need a configured endpoint")
            return None
        try:
            model = start(project=project, log_path=logs / "model.log")
        except Exception as exc:  # noqa: BLE001 - the rest of the product still works
            self.stderr.write(f"ctxobs: {exc}" if isinstance(exc, registry.StartupFailed)
                              else f"ctxobs: the local model server did not start: {exc}")
            return None
        self._model = model
        return model.base_url

    def _run_demo_agent(self, model_base: str, base_url: str, key: str, sessions: int, turns: int,
                        logs: Path) -> None:
        root = Path(settings.BASE_DIR)
        cmd = [sys.executable, str(root / "examples" / "agent_loop.py"), "--base-url", model_base,
               "--sessions", str(sessions), "--turns", str(turns)]
        env = dict(os.environ, CTXOBS_ENDPOINT=base_url, CTXOBS_API_KEY=key)
        with (logs / "demo-agent.log").open("w") as fh, self.demo_lock:
            if self.stopping.is_set():
                return
            proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=str(root),
                                    process_group=0)
            self.demo_proc = proc
        rc = proc.wait()
        if self.stopping.is_set():
            return
        if rc == 0:
            self.stdout.write(f"ctxobs: the example agent filled the demo project ({sessions} sessions)")
            project = Project.objects.get(name=DEMO_PROJECT)
            for step in registry.demo_steps():
                try:
                    line = step(project)
                except Exception as exc:  # noqa: BLE001 - a demo step never stops the stack
                    line = f"a demo step failed: {type(exc).__name__}: {exc}"
                if line:
                    self.stdout.write(f"ctxobs: {line}")
        else:
            self.stderr.write(f"ctxobs: the example agent failed (exit {rc}); see {logs / 'demo-agent.log'}")

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str], logs: Path) -> None:
        log = logs / f"{name}.log"
        self.children.append(_Child(name, cmd, env, log, _popen(cmd, env, log), time.monotonic()))

    def _supervise(self) -> None:
        """Restart the children that exited, each after its backoff."""
        now = time.monotonic()
        for c in self.children:
            if c.restart_at is None:
                code = c.proc.poll()
                if code is None:
                    continue
                # What the dead process left in its group (a worker's pool) goes with it.
                _signal_group(c.proc, signal.SIGKILL)
                c.quick_exits = c.quick_exits + 1 if now - c.started < RESTART_STABLE_S else 1
                delay = min(RESTART_BACKOFF_MAX_S, RESTART_BACKOFF_S * 2 ** (c.quick_exits - 1))
                c.restart_at = now + delay
                self.stderr.write(f"ctxobs: {c.name} exited ({_exit_text(code)}); restarting it in "
                                  f"{delay:g} s (exit {c.quick_exits} in a row); see {c.log}")
            elif now >= c.restart_at:
                c.proc = _popen(c.argv, c.env, c.log)
                c.started, c.restart_at = now, None
                self.stderr.write(f"ctxobs: {c.name} restarted (pid {c.proc.pid})")

    def _stop(self) -> None:
        """Stop every child at once (the example agent with SIGINT, so that its SDK flushes or
        spools what it holds; the others with SIGTERM), and kill each process group still there
        after STOP_GRACE_S. Safe to call twice."""
        with self.demo_lock:
            self.stopping.set()
        deadline = time.monotonic() + STOP_GRACE_S
        model, self._model = self._model, None
        stopper = None
        if model is not None:
            stopper = threading.Thread(target=model.stop, daemon=True)
            stopper.start()
        supervised = [c.proc for c in self.children if c.proc.poll() is None]
        children = list(supervised)
        if self.demo_proc is not None:
            _signal_group(self.demo_proc, signal.SIGINT)
            children.append(self.demo_proc)
        for c in self.children:
            if c.proc in supervised:
                # A Celery worker's SIGTERM waits for the tasks it runs; its cold shutdown (SIGQUIT)
                # does not, and loses nothing: tasks are acknowledged after they run and are safe
                # to run twice, so what it held is delivered again.
                _signal_group(c.proc, signal.SIGQUIT if c.name.startswith("worker") else signal.SIGTERM)
        for p in children:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # Also when the leader is gone: its children (gunicorn workers, a Celery pool) may not be.
            _signal_group(p, signal.SIGKILL)
        for p in children:
            if p.poll() is None:
                p.wait()
        if stopper is not None:
            stopper.join(timeout=max(0.0, deadline - time.monotonic()) + 1)
