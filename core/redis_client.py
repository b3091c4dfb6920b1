"""The Redis client of the web processes (rate limits, health checks), one per URL."""

from __future__ import annotations

from functools import lru_cache

import redis
from django.conf import settings

from core.env import redis_client_url


@lru_cache(maxsize=4)
def _client_for(url: str) -> redis.Redis:
    # Short timeouts: a request never waits long on Redis; callers fail open or report it down.
    return redis.Redis.from_url(redis_client_url(url), socket_timeout=0.5, socket_connect_timeout=0.5)


def redis_client() -> redis.Redis:
    """The client for settings.REDIS_URL (Celery's broker)."""
    return _client_for(settings.REDIS_URL)
