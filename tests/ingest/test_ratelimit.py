"""The per-key ingest limit is a token bucket in the test's real Redis: a burst of exactly
`burst` passes, the next request waits 1/rate, tokens come back at `rate` up to `burst`."""

from __future__ import annotations

import math
import threading
import time
import uuid
from typing import Any

import pytest

from ingest.ratelimit import retry_after_seconds, take_token
from tests.conftest import Api
from tests.factories import snapshot

T0 = 1_000_000.0  # a clock reading of our own, so that refills are exact


def _bucket() -> str:
    return f"test-{uuid.uuid4()}"


def _passes(bucket: str, n: int, *, rate: float, burst: int, now: float) -> list[float | None]:
    return [take_token(bucket=bucket, rate=rate, burst=burst, now=now) for _ in range(n)]


def test_a_full_bucket_lets_exactly_burst_requests_through() -> None:
    b = _bucket()
    got = _passes(b, 6, rate=4, burst=5, now=T0)
    assert got[:5] == [None] * 5
    assert got[5] == pytest.approx(0.25)  # one token at 4/s


def test_tokens_come_back_at_rate_and_never_beyond_burst() -> None:
    b = _bucket()
    _passes(b, 5, rate=4, burst=5, now=T0)
    # 0.1 s in: 0.4 of a token, so 0.15 s more to wait.
    assert take_token(bucket=b, rate=4, burst=5, now=T0 + 0.1) == pytest.approx(0.15)
    # 0.25 s in: one token.
    assert _passes(b, 2, rate=4, burst=5, now=T0 + 0.25) == [None, pytest.approx(0.25)]
    # One second later: four tokens, exactly.
    got = _passes(b, 5, rate=4, burst=5, now=T0 + 1.25)
    assert got[:4] == [None] * 4 and got[4] == pytest.approx(0.25)
    # A long quiet spell refills to the burst, not beyond.
    got = _passes(b, 6, rate=4, burst=5, now=T0 + 3600)
    assert got[:5] == [None] * 5 and got[5] is not None


def test_buckets_are_per_key_and_rate_zero_is_no_limit() -> None:
    a, b = _bucket(), _bucket()
    assert _passes(a, 2, rate=1, burst=1, now=T0)[1] is not None
    assert take_token(bucket=b, rate=1, burst=1, now=T0) is None
    assert _passes(a, 50, rate=0, burst=1, now=T0) == [None] * 50


def test_concurrent_requests_never_take_more_than_the_bucket_holds() -> None:
    b = _bucket()
    results: list[float | None] = []
    lock = threading.Lock()

    def hit() -> None:
        for _ in range(10):
            r = take_token(bucket=b, rate=0.001, burst=25)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=hit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r is None for r in results) == 25


@pytest.mark.parametrize(("wait", "header"), [(0.004, 1), (1.0, 1), (1.2, 2), (9.99, 10)],
                         ids=["under-a-second", "one", "rounded-up", "ten"])
def test_retry_after_is_whole_seconds_rounded_up(wait: float, header: int) -> None:
    assert retry_after_seconds(wait) == header


@pytest.mark.django_db
def test_ingest_answers_429_after_the_burst_with_the_wait_for_one_token(api: Api, settings: Any) -> None:
    settings.CTXOBS_INGEST_RATE_LIMIT = 0.1  # a token every 10 s
    settings.CTXOBS_INGEST_RATE_BURST = 3
    started = time.monotonic()
    codes = [api.post_snapshots([snapshot(turn=i)]).status_code for i in range(3)]
    limited = api.post_snapshots([snapshot(turn=3)])
    elapsed = time.monotonic() - started
    assert codes == [200, 200, 200]
    assert limited.status_code == 429
    # 10 s for a token, less what has refilled since the bucket was first used.
    assert math.ceil(10 - elapsed) <= int(limited["Retry-After"]) <= 10
    assert "bursts of 3" in limited.json()["detail"]


@pytest.mark.django_db
def test_waiting_the_retry_after_is_enough_for_the_next_request(api: Api, settings: Any) -> None:
    settings.CTXOBS_INGEST_RATE_LIMIT = 0.5  # a token every 2 s
    settings.CTXOBS_INGEST_RATE_BURST = 2
    first = [api.post_snapshots([snapshot(turn=i)]) for i in range(3)]
    assert [r.status_code for r in first] == [200, 200, 429]
    wait = int(first[2]["Retry-After"])
    assert 1 <= wait <= 2
    time.sleep(wait)
    assert api.post_snapshots([snapshot(turn=3)]).status_code == 200
    assert api.post_snapshots([snapshot(turn=4)]).status_code == 429  # one token came back, not two
