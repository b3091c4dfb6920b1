"""docker-compose.yml describes the production stack (no Docker engine runs in CI: parse it)."""

from pathlib import Path

import yaml

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
    assert "gunicorn config.wsgi:application" in services["web"]["command"]
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["redis"]["image"].startswith("redis:")


def test_dockerfile_copies_every_app_of_the_compose_stack():
    docker = (ROOT / "Dockerfile").read_text()
    for part in ("ctxobs", "core", "config", "ingest", "templates", "static", "manage.py"):
        assert f"COPY {part}" in docker
