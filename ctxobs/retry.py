"""The one retry policy for every outbound call: reading Retry-After and the backoff between attempts.

Used by the SDK's transport, alert delivery and replay model calls. Standard library only: the SDK
is the bottom layer and the server depends on it, never the other way round.

- `parse_retry_after`: delta-seconds (decimals accepted, as some servers send them) or an
  HTTP-date (RFC 9110). A date in the past means "now" (0). Garbage, negative and non-finite
  values ("-5", "soon", "nan", "inf", "1e999") are ignored (None): the caller falls back to its own
  backoff rather than hammering at once or waiting forever. A run of digits too large for a float
  is a valid, very long wait; the caller's cap bounds it.
- `backoff_delay`: the server's Retry-After, when given, replaces the exponential schedule (the
  server knows when it will be ready) but never exceeds the caller's bound, so a header of 2**63
  seconds cannot park a job forever or overflow a timedelta. Without one, `base * 2**(attempt-1)`
  up to `cap`. Jitter spreads clients that failed together: the exponential wait is drawn below
  the computed value (the cap stays a bound), a Retry-After wait above it (never earlier than asked).
"""

from __future__ import annotations

import math
import random
import re
import time
from datetime import UTC
from email.utils import parsedate_to_datetime

__all__ = ["RETRY_AFTER_MAX_S", "backoff_delay", "parse_retry_after", "retryable_status"]

# The longest wait a server's Retry-After gets by default: enough for a restart or a rate-limit
# window, short enough that a wrong header cannot park sending for hours.
RETRY_AFTER_MAX_S = 300.0
_TRANSIENT_4XX = frozenset({408, 425, 429})  # timed out waiting, too early, slow down
_DIGITS = re.compile(r"[0-9]+")
# 2**62 * base overflows nothing, and no cap anyone sets is reached later than that.
_MAX_DOUBLINGS = 62


def retryable_status(status: int) -> bool:
    """Whether an HTTP answer with STATUS may succeed when sent again unchanged: 408, 425, 429
    and every 5xx. Any other 4xx says the request itself is wrong."""
    return status in _TRANSIENT_4XX or 500 <= status <= 599


def parse_retry_after(value: str | bytes | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header value, or None if absent or unusable.

    NOW (unix seconds, default the current time) is what an HTTP-date is measured from."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    text = value.strip()
    if not text:
        return None
    if _DIGITS.fullmatch(text):
        # float() of a very long digit run is inf, not an error: a legal, absurd wait.
        return float(text)
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": RFC 5322's "UTC, origin unknown"
        when = when.replace(tzinfo=UTC)
    try:
        at = when.timestamp()
    except (OverflowError, OSError, ValueError):
        return None
    return max(0.0, at - (time.time() if now is None else now))


def backoff_delay(
    attempt: int,
    *,
    base: float,
    cap: float,
    retry_after: float | None = None,
    retry_after_cap: float | None = None,
    jitter: float = 0.0,
    retry_after_jitter: float = 0.0,
    rand: random.Random | None = None,
) -> float:
    """Seconds to wait before retrying after failed attempt number ATTEMPT (1 = the first).

    RETRY_AFTER (seconds, from `parse_retry_after`) wins when given, bounded by RETRY_AFTER_CAP
    (default CAP) and spread upward by up to RETRY_AFTER_JITTER of itself. Otherwise
    BASE * 2**(ATTEMPT-1), at most CAP, drawn from [(1 - JITTER) * w, w]."""
    draw = (rand or random).random
    if retry_after is not None and retry_after >= 0 and not math.isnan(retry_after):
        bound = cap if retry_after_cap is None else retry_after_cap
        wait = min(bound, retry_after)
        if retry_after_jitter > 0:
            wait *= 1.0 + retry_after_jitter * draw()
        return wait
    doublings = min(max(0, attempt - 1), _MAX_DOUBLINGS)
    wait = min(cap, base * 2.0**doublings)
    if jitter > 0:
        wait *= 1.0 - min(1.0, jitter) * draw()
    return max(0.0, wait)
