"""The one place that reads the process environment for settings."""

from __future__ import annotations

import os
from pathlib import Path


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw not in (None, "") else default


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    return [part.strip() for part in raw.split(",") if part.strip()]


def ctxobs_home() -> Path:
    """Where embedded services keep their data (CTXOBS_HOME, default ~/.ctxobs)."""
    return Path(os.environ.get("CTXOBS_HOME") or Path.home() / ".ctxobs").expanduser()


def redis_client_url(url: str) -> str:
    """redis-py spells a unix socket `unix://`; Celery/kombu spell it `redis+socket://`."""
    if url.startswith("redis+socket://"):
        return "unix://" + url[len("redis+socket://") :]
    return url
