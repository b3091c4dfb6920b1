"""Sign-in throttling: failed sign-ins are counted in Redis per account and per client address in
a fixed window; past either limit every sign-in for that account (or from that address) is
refused, the right password included, until the window ends. A success clears the account's
count. The client address is REMOTE_ADDR, or X-Forwarded-For when REMOTE_ADDR is a trusted proxy
(CTXOBS_TRUSTED_PROXIES): otherwise anyone could name a fresh address on every guess.

Fails open: when Redis is unreachable sign-ins go on unthrottled and the failure is logged,
so an outage of the broker does not lock every user out."""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import math
from functools import lru_cache
from typing import Any

import redis
from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from core.redis_client import redis_client

logger = logging.getLogger(__name__)

PREFIX = "ctxobs:signin:"


@lru_cache(maxsize=8)
def _trusted(spec: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(s, strict=False) for s in spec)


def _is_trusted(addr: str) -> bool:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    return any(ip in net for net in _trusted(tuple(settings.CTXOBS_TRUSTED_PROXIES)))


def client_ip(request: HttpRequest) -> str:
    """The caller's address: REMOTE_ADDR, unless that is a trusted proxy, then the nearest
    X-Forwarded-For entry that is not itself a trusted proxy."""
    remote = str(request.META.get("REMOTE_ADDR") or "")
    if not remote or not _is_trusted(remote):
        return remote
    chain = [p.strip() for p in str(request.META.get("HTTP_X_FORWARDED_FOR") or "").split(",") if p.strip()]
    for hop in reversed(chain):
        try:
            ipaddress.ip_address(hop)
        except ValueError:
            break  # a garbled entry: trust nothing further left
        if not _is_trusted(hop):
            return hop
        remote = hop
    return remote


def _account_key(username: str) -> str:
    # Hashed: usernames as typed (typos, passwords pasted in the wrong field) stay out of Redis.
    norm = username.strip().lower().encode()
    return PREFIX + "acct:" + hashlib.sha256(norm).hexdigest()[:32]


def _ip_key(ip: str) -> str:
    return PREFIX + "ip:" + (ip or "unknown")


def _limits() -> tuple[int, int, int]:
    return (
        settings.CTXOBS_SIGNIN_MAX_FAILURES_ACCOUNT,
        settings.CTXOBS_SIGNIN_MAX_FAILURES_IP,
        settings.CTXOBS_SIGNIN_WINDOW,
    )


def signin_wait(*, username: str, ip: str) -> int | None:
    """Seconds until USERNAME may try to sign in from IP again, or None when it may now."""
    per_account, per_ip, window = _limits()
    try:
        pipe = redis_client().pipeline()
        pipe.get(_account_key(username))
        pipe.ttl(_account_key(username))
        pipe.get(_ip_key(ip))
        pipe.ttl(_ip_key(ip))
        acct, acct_ttl, by_ip, ip_ttl = pipe.execute()
    except redis.RedisError as exc:
        logger.warning("ingest.signin_throttle_unavailable error=%s", type(exc).__name__)
        return None
    waits = []
    if per_account > 0 and acct is not None and int(acct) >= per_account:
        waits.append(acct_ttl if acct_ttl > 0 else window)
    if per_ip > 0 and by_ip is not None and int(by_ip) >= per_ip:
        waits.append(ip_ttl if ip_ttl > 0 else window)
    return max(waits) if waits else None


def signin_failed(*, username: str, ip: str) -> None:
    """Count one failed sign-in against USERNAME and IP; the window starts at the first."""
    _, _, window = _limits()
    try:
        pipe = redis_client().pipeline()
        for key in (_account_key(username), _ip_key(ip)):
            pipe.set(key, 0, ex=window, nx=True)
            pipe.incr(key)
        _, acct, _, by_ip = pipe.execute()
    except redis.RedisError as exc:
        logger.warning("ingest.signin_throttle_unavailable error=%s", type(exc).__name__)
        return
    logger.info("ingest.signin_failed ip=%s account_failures=%s ip_failures=%s", ip, acct, by_ip)


def signin_succeeded(*, username: str) -> None:
    try:
        redis_client().delete(_account_key(username))
    except redis.RedisError as exc:
        logger.warning("ingest.signin_throttle_unavailable error=%s", type(exc).__name__)


def wait_message(seconds: int) -> str:
    minutes = max(1, math.ceil(seconds / 60))
    return f"Too many failed sign-ins. Try again in {minutes} minute{'s' if minutes != 1 else ''}."


class ThrottledModelBackend(ModelBackend):
    """Django's username/password check behind the sign-in throttle. Used by every sign-in form
    (the dashboard's and the admin's). A throttled attempt is refused before the password is
    checked and is not counted again; the wait is left on the request for the page to show."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        if request is None or username is None:
            return super().authenticate(request, username=username, password=password, **kwargs)
        ip = client_ip(request)
        wait = signin_wait(username=username, ip=ip)
        if wait is not None:
            request.signin_wait = wait  # type: ignore[attr-defined]
            logger.info("ingest.signin_throttled ip=%s wait_s=%s", ip, wait)
            raise PermissionDenied(wait_message(wait))
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            signin_failed(username=username, ip=ip)
            wait = signin_wait(username=username, ip=ip)
            if wait is not None:
                request.signin_wait = wait  # type: ignore[attr-defined]
        else:
            signin_succeeded(username=username)
        return user
