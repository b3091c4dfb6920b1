"""Per-key request rate limit in Redis (a one-second fixed window)."""

from __future__ import annotations

import logging
import time
from functools import lru_cache

import redis
from django.conf import settings

from config.env import redis_client_url

logger = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def _client() -> redis.Redis:
    return redis.Redis.from_url(redis_client_url(settings.REDIS_URL), socket_timeout=0.5,
                                socket_connect_timeout=0.5)


def check_rate(*, bucket: str, limit: float) -> float | None:
    """None if the request may go on, else seconds until it may be retried.

    Fails open: when Redis is unreachable ingest continues (PostgreSQL is the durable store)
    and the failure is logged.
    """
    if limit <= 0:
        return None
    now = time.time()
    window = int(now)
    key = f"ctxobs:rl:{bucket}:{window}"
    try:
        pipe = _client().pipeline()
        pipe.incr(key)
        pipe.expire(key, 2)
        count, _ = pipe.execute()
    except redis.RedisError as exc:
        logger.warning("ingest.ratelimit_unavailable error=%s", type(exc).__name__)
        return None
    if count > limit:
        return max(1.0, window + 1 - now)
    return None
