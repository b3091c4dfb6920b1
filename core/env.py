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


def env_url(name: str, default: str) -> str:
    """An absolute http(s) URL without a trailing slash; a malformed value stops the process at
    start with the variable named, rather than producing broken links later."""
    from urllib.parse import urlsplit

    raw = (os.environ.get(name) or default).strip()
    parts = urlsplit(raw)
    if parts.scheme not in {"http", "https"} or not parts.netloc or parts.query or parts.fragment:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{name}={raw!r}: expected an absolute http(s) URL like https://ctxobs.example.com")
    return raw.rstrip("/")


def ctxobs_home() -> Path:
    """Where embedded services keep their data (CTXOBS_HOME, default ~/.ctxobs)."""
    return Path(os.environ.get("CTXOBS_HOME") or Path.home() / ".ctxobs").expanduser()


def local_secret(name: str) -> str:
    """A random secret kept 0600 in CTXOBS_HOME, made on first use and the same for every process
    of this install afterwards, so that a single-machine install never runs on a public default."""
    import secrets

    path = ctxobs_home() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(48) + "\n")
    # A process that lost the creation race may read before the winner's write lands.
    for _ in range(50):
        value = path.read_text().strip()
        if value:
            return value
        import time

        time.sleep(0.02)
    raise RuntimeError(f"{path} is empty; delete it to make a new secret")


def redis_client_url(url: str) -> str:
    """redis-py spells a unix socket `unix://` and its database `?db=N`; Celery/kombu spell them
    `redis+socket://` and `?virtual_host=N`."""
    if url.startswith("redis+socket://"):
        return "unix://" + url[len("redis+socket://") :].replace("virtual_host=", "db=")
    return url
