"""Per-key ingest rate limit: a token bucket in Redis.

A key's bucket holds up to BURST tokens and gains RATE tokens a second; each request takes one.
The bucket is one Redis hash changed by one Lua script, so two web processes never both take
the last token, and the script reads Redis's clock (TIME), so web hosts whose clocks disagree
still share one bucket.
"""

from __future__ import annotations

import logging
import math
from functools import lru_cache
from typing import Any

import redis

from core.redis_client import redis_client

logger = logging.getLogger(__name__)

# KEYS[1] the bucket; ARGV rate (tokens/s), burst (capacity), and an optional clock reading (s).
# Returns the seconds until a token is back, "0" when one was taken.
_TAKE = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
elseif now > ts then
  tokens = math.min(burst, tokens + (now - ts) * rate)
  ts = now
end
local wait = 0
-- a hair under 1 still counts: (now - ts) * rate is rarely exact in floating point
if tokens >= 1 - 1e-9 then
  tokens = math.max(0, tokens - 1)
else
  wait = (1 - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'ts', string.format('%.17g', ts))
-- an idle bucket refills completely in burst / rate seconds; after that it need not be kept
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return string.format('%.17g', wait)
"""


@lru_cache(maxsize=4)
def _script(client: redis.Redis) -> Any:
    return client.register_script(_TAKE)


def take_token(*, bucket: str, rate: float, burst: int, now: float | None = None) -> float | None:
    """Take one token from BUCKET: None if the request may go on, else the seconds until a token
    is back. RATE <= 0 turns the limit off. NOW (seconds) replaces Redis's clock, for tests.

    Fails open: when Redis is unreachable ingest continues (PostgreSQL is the durable store)
    and the failure is logged.
    """
    if rate <= 0:
        return None
    client = redis_client()
    args: list[Any] = [repr(float(rate)), max(1, int(burst))]
    if now is not None:
        args.append(repr(float(now)))
    try:
        wait = float(_script(client)(keys=[f"ctxobs:tb:{bucket}"], args=args))
    except redis.RedisError as exc:
        logger.warning("ingest.ratelimit_unavailable error=%s", type(exc).__name__)
        return None
    return wait if wait > 0 else None


def retry_after_seconds(wait: float) -> int:
    """The Retry-After value for WAIT seconds: whole seconds, rounded up, at least 1."""
    return max(1, math.ceil(wait))
