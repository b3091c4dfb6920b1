"""docker-compose.yml describes the production stack (no Docker engine runs in CI: parse it)."""

from pathlib import Path

import pytest
import yaml
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def test_compose_has_web_worker_beat_postgres_redis_with_health_checks():
    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = spec["services"]
    assert {"web", "worker", "beat", "postgres", "redis"} <= set(services)
    for name in ("web", "worker", "beat", "postgres", "redis"):
        assert services[name]["healthcheck"]["test"], name
    for name in ("web", "worker", "beat"):
        env = services[name]["environment"]
        assert env["DATABASE_URL"].startswith("postgresql://") and "@postgres:5432/" in env["DATABASE_URL"]
        assert env["REDIS_URL"] == "redis://redis:6379/0"
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "celery -A config worker" in services["worker"]["command"]
    assert "celery -A config beat" in services["beat"]["command"]
    assert "uvicorn config.asgi:application" in services["web"]["command"]
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["redis"]["image"].startswith("redis:")


def test_dockerfile_copies_every_app_of_the_compose_stack():
    docker = (ROOT / "Dockerfile").read_text()
    for part in ("ctxobs", "core", "config", "ingest", "templates", "static", "manage.py"):
        assert f"COPY {part}" in docker


@pytest.mark.django_db
def test_the_postgres_service_sets_only_real_postgresql_settings_of_the_ones_docs_recommend():
    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    cmd = spec["services"]["postgres"]["command"]
    assert cmd[0] == "postgres" and cmd[1::2] == ["-c"] * (len(cmd) // 2)
    settings = dict(arg.split("=", 1) for arg in cmd[2::2])
    with connection.cursor() as cur:  # the real server's own list: a misspelt name fails here
        cur.execute("SELECT name FROM pg_settings WHERE name = ANY(%s)", [list(settings)])
        assert {r[0] for r in cur.fetchall()} == set(settings)
    docs = (ROOT / "docs" / "scale.md").read_text()
    for name, value in settings.items():
        assert f"{name} = {value}" in docs, name
