"""The one URL/SSRF policy for every outbound call a user can aim (model endpoints, webhooks).

A URL is checked twice: when it is saved (`url_check`, for a clear field error) and again when a
connection is opened (`guarded_client`): the host is resolved once more, every address is checked
and the socket goes to a checked address, so a name that resolved to a public address at save
time and to 127.0.0.1 later (DNS rebinding) is refused instead of reached.

Refused unless the project allows private endpoints: loopback, private, link-local (cloud
metadata), shared, reserved, unspecified and multicast addresses, IPv4 addresses embedded in IPv6
(mapped, 6to4, Teredo, NAT64), `localhost` and `*.localhost` names. Hosts written as numbers in a
form other than dotted decimal (2130706433, 0177.0.0.1, 0x7f.1) are refused always: resolvers
disagree about them, so what is checked might not be what is reached.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import ssl
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

PRIVATE_HINT = "allow private endpoints in the project settings to use it"
_LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NUMERIC_HOST = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]*))*$", re.IGNORECASE)


class AddressRefused(Exception):
    """A URL or an address the policy refuses; `reason` is safe to show to the user. Raised at
    connect time too, where it is not an httpx error on purpose: callers must not retry it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_refused(address: str | IPAddress) -> str | None:
    """Why ADDRESS is not a public unicast address, or None when it is."""
    ip = ipaddress.ip_address(address.split("%", 1)[0] if isinstance(address, str) else address)
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_v4(ip)
        if inner is not None:
            why = address_refused(inner)
            return f"{why} (inside {ip})" if why else None
    if ip.is_multicast:
        return f"{ip} is a multicast address"
    if ip.is_loopback:
        return f"{ip} is a loopback address"
    if ip.is_link_local:
        return f"{ip} is a link-local address"
    if ip.is_unspecified:
        return f"{ip} is the unspecified address"
    if not ip.is_global:
        return f"{ip} is a private or reserved address"
    return None


def host_is_local_name(host: str) -> bool:
    name = host.lower().rstrip(".")
    return name in _LOCAL_NAMES or name.endswith(".localhost")


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


def _non_canonical_number(host: str) -> bool:
    if not _NUMERIC_HOST.match(host) or _literal(host) is not None:
        return False
    try:
        socket.inet_aton(host)
    except OSError:
        return False
    return True


def resolve(host: str, port: int) -> list[str]:
    """Every address HOST resolves to (literal addresses as themselves)."""
    lit = _literal(host)
    if lit is not None:
        return [str(lit)]
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _checked(host: str, port: int, *, allow_private: bool, resolve_names: bool = True) -> list[str] | None:
    """The policy for one host, applied at save time and on connect alike: raises AddressRefused
    with the reason, lets socket.gaierror/UnicodeError through when the name does not resolve,
    and returns the addresses it checked (None when it had no need to resolve)."""
    if _non_canonical_number(host):
        raise AddressRefused(f"write the address {host[:100]!r} in dotted decimal (like 192.0.2.1)")
    if allow_private:
        return None
    if host_is_local_name(host):
        raise AddressRefused(f"{host[:100]!r} is a local name; {PRIVATE_HINT}")
    if not resolve_names and _literal(host) is None:
        return None
    addrs = resolve(host, port)
    for addr in addrs:
        why = address_refused(addr)
        if why:
            raise AddressRefused(f"{host[:100]!r}: {why}; {PRIVATE_HINT}")
    return addrs


def host_problem(host: str, port: int, *, allow_private: bool, resolve_names: bool = True) -> str | None:
    """Why HOST may not be connected to, or None. Resolves HOST unless it is a literal address."""
    try:
        _checked(host, port, allow_private=allow_private, resolve_names=resolve_names)
    except AddressRefused as exc:
        return exc.reason
    except (socket.gaierror, UnicodeError):
        return f"the host {host[:100]!r} does not resolve"
    return None


def url_check(url: str, *, allow_private: bool, resolve_names: bool = True) -> str:
    """URL without surrounding blanks or a trailing slash, or AddressRefused: http/https only, a
    host, no credentials, query or fragment, a valid port, and the host passes `host_problem`."""
    url = (url or "").strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise AddressRefused("must be an http:// or https:// URL")
    if not parts.hostname:
        raise AddressRefused("the URL needs a host name")
    if parts.username or parts.password:
        raise AddressRefused("must not carry credentials in the URL")
    if parts.query or parts.fragment:
        raise AddressRefused("takes no query string or fragment")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise AddressRefused("has an invalid port") from None
    problem = host_problem(parts.hostname, port, allow_private=allow_private, resolve_names=resolve_names)
    if problem:
        raise AddressRefused(problem)
    return url.rstrip("/")


class GuardedBackend(httpcore.SyncBackend):
    """Opens TCP connections only to addresses the policy allows, resolving the name itself and
    connecting to the address it checked. TLS still verifies the certificate against the URL's
    host name, which httpcore passes separately (SNI)."""

    def __init__(self, *, allow_private: bool) -> None:
        self.allow_private = allow_private

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            addrs = _checked(host, port, allow_private=self.allow_private)
        except (socket.gaierror, UnicodeError) as exc:
            raise httpcore.ConnectError(f"the host {host[:100]!r} does not resolve") from exc
        if addrs is None:
            return super().connect_tcp(host, port, timeout, local_address, socket_options)
        last: Exception | None = None
        for addr in addrs:
            try:
                return super().connect_tcp(addr, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last


class GuardedTransport(httpx.HTTPTransport):
    """httpx's transport with its connection pool opening sockets through GuardedBackend."""

    def __init__(self, *, allow_private: bool, ssl_context: ssl.SSLContext | None = None) -> None:
        ctx = ssl_context or httpx.create_ssl_context(trust_env=False)
        super().__init__(verify=ctx, trust_env=False)
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)
        self._pool = httpcore.ConnectionPool(
            ssl_context=ctx,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(allow_private=allow_private),
        )


def guarded_client(*, allow_private: bool, **kwargs: Any) -> httpx.Client:
    """An httpx client that applies the policy on every connection. No proxies from the
    environment (a proxy would connect on our behalf, past the check) and no redirects unless
    asked for: a redirect may point anywhere, though the connection check would still apply."""
    kwargs.setdefault("follow_redirects", False)
    return httpx.Client(transport=GuardedTransport(allow_private=allow_private), trust_env=False, **kwargs)


_clients_lock = threading.Lock()
_clients: dict[tuple[int, bool], httpx.Client] = {}


def shared_guarded_client(*, allow_private: bool) -> httpx.Client:
    """This process's pooled guarded client for ALLOW_PRIVATE. Building one loads the CA bundle
    (tens of ms) and the pool keeps connections open between calls; a forked worker child builds
    its own, since sockets are not shared across processes."""
    import os

    key = (os.getpid(), allow_private)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = guarded_client(allow_private=allow_private)
        return client
