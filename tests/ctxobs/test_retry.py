"""The one retry policy: Retry-After parsing and the backoff between attempts."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from ctxobs.retry import backoff_delay, parse_retry_after, retryable_status

NOW = 1_780_000_000.0  # a fixed "now" for HTTP-dates (2026-05-28)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        ("  7 ", 7.0),
        ("0", 0.0),
        ("0.5", 0.5),
        (b"3", 3.0),
        ("9223372036854775808", 2.0**63),
    ],
    ids=["seconds", "blanks", "zero", "decimal", "bytes", "2^63"],
)
def test_delta_seconds_are_read(value: str | bytes, expected: float) -> None:
    assert parse_retry_after(value, now=NOW) == expected


@pytest.mark.parametrize(
    "value",
    [None, "", "   ", "-5", "-0.5", "soon", "nan", "inf", "-inf", "1e999", "5, 10", "12s", "Friday"],
    ids=["none", "empty", "blank", "negative", "negative-decimal", "word", "nan", "inf", "-inf",
         "overflowing-float", "two-values", "unit", "day-name"],
)
def test_garbage_is_ignored(value: str | None) -> None:
    assert parse_retry_after(value, now=NOW) is None


def test_a_huge_run_of_digits_is_a_valid_endless_wait_that_the_cap_bounds() -> None:
    ra = parse_retry_after("9" * 400, now=NOW)
    assert ra is not None and ra > 1e300
    assert backoff_delay(1, base=1.0, cap=30.0, retry_after=ra) == 30.0
    assert backoff_delay(1, base=1.0, cap=30.0, retry_after=ra, retry_after_cap=120.0) == 120.0
    timedelta(seconds=backoff_delay(1, base=1.0, cap=300.0, retry_after=2.0**63))  # no OverflowError


def test_http_date_counts_from_now() -> None:
    assert parse_retry_after("Thu, 28 May 2026 20:27:10 GMT", now=NOW) == 30.0
    assert parse_retry_after("Thu, 28 May 2026 20:27:10 -0000", now=NOW) == 30.0  # no zone: UTC
    assert parse_retry_after("Thu, 28 May 2026 22:27:10 +0200", now=NOW) == 30.0


def test_http_date_in_the_past_means_now() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=NOW) == 0.0


@pytest.mark.parametrize(
    "value",
    ["Thu, 32 May 2026 20:27:10 GMT", "Mon, 99 Foo 2026 xx:yy:zz GMT", "Thu, 28 May"],
    ids=["day-32", "bad-fields", "truncated"],
)
def test_a_broken_http_date_is_ignored(value: str) -> None:
    assert parse_retry_after(value, now=NOW) is None


def test_backoff_doubles_from_base_up_to_the_cap() -> None:
    waits = [backoff_delay(n, base=0.5, cap=30.0) for n in range(1, 10)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert backoff_delay(0, base=0.5, cap=30.0) == 0.5  # "no attempt yet" is the first wait


def test_backoff_survives_absurd_attempt_numbers() -> None:
    assert backoff_delay(10_000, base=1.0, cap=300.0) == 300.0
    assert backoff_delay(2**63, base=1.0, cap=300.0) == 300.0


def test_retry_after_replaces_the_schedule_within_its_cap() -> None:
    assert backoff_delay(6, base=1.0, cap=60.0, retry_after=2.0) == 2.0
    assert backoff_delay(1, base=1.0, cap=60.0, retry_after=0.0) == 0.0
    assert backoff_delay(1, base=1.0, cap=60.0, retry_after=500.0, retry_after_cap=120.0) == 120.0
    assert backoff_delay(3, base=1.0, cap=60.0, retry_after=-1.0) == 4.0  # nonsense: the schedule


def test_jitter_stays_below_the_computed_wait_and_retry_after_jitter_above() -> None:
    rng = random.Random(7)
    waits = [backoff_delay(4, base=1.0, cap=60.0, jitter=0.5, rand=rng) for _ in range(300)]
    assert all(4.0 <= w <= 8.0 for w in waits) and len(set(waits)) > 250
    ras = [backoff_delay(1, base=1.0, cap=60.0, retry_after=10.0, retry_after_jitter=0.1, rand=rng)
           for _ in range(300)]
    assert all(10.0 <= w <= 11.0 for w in ras) and len(set(ras)) > 250


@pytest.mark.parametrize(
    ("status", "retry"),
    [(408, True), (425, True), (429, True), (500, True), (501, True), (503, True), (599, True),
     (400, False), (401, False), (404, False), (413, False), (422, False), (200, False), (600, False)],
    ids=lambda v: str(v),
)
def test_only_transient_statuses_are_retried(status: int, retry: bool) -> None:
    assert retryable_status(status) is retry
