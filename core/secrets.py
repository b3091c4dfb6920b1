"""Secrets at rest (webhook signing secrets, provider API keys): one Fernet policy for every app.

The key is derived with HKDF-SHA256 from CTXOBS_ENCRYPTION_KEY, or SECRET_KEY when that is unset.
Values written before this module existed used two other derivations (alert channels: SHA-256 of a
labelled secret, or the configured Fernet key itself; replay endpoints: HKDF with another label).
They still decrypt: the MultiFernet tries the primary key first and those two after it, and every
new value is written with the primary key. Neither the key nor the plain text is ever logged, and
errors never carry either.
"""

from __future__ import annotations

import base64
import hashlib
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

PRIMARY_INFO = b"ctxobs secrets at rest"
# What replay endpoints' API keys were encrypted with before: read-only fallback.
_LEGACY_REPLAY_INFO = b"ctxobs endpoint api keys"


def _hkdf(secret: str, info: bytes) -> Fernet:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret.encode("utf-8"))
    return Fernet(base64.urlsafe_b64encode(derived))


def _legacy_alerts(configured: str, secret_key: str) -> Fernet:
    # Alert channel secrets before: the configured value as a Fernet key when it was one, else a
    # SHA-256 of it (or of SECRET_KEY) with a label.
    if configured:
        try:
            return Fernet(configured.encode())
        except (ValueError, TypeError):
            material = f"ctxobs-encryption:{configured}"
    else:
        material = f"ctxobs-alerts-channel:{secret_key}"
    return Fernet(base64.urlsafe_b64encode(hashlib.sha256(material.encode()).digest()))


@lru_cache(maxsize=4)
def _keys(configured: str, secret_key: str) -> tuple[Fernet, MultiFernet]:
    source = configured or secret_key
    primary = _hkdf(source, PRIMARY_INFO)
    fallbacks = [_legacy_alerts(configured, secret_key), _hkdf(source, _LEGACY_REPLAY_INFO)]
    return primary, MultiFernet([primary, *fallbacks])


def _current() -> tuple[Fernet, MultiFernet]:
    return _keys(str(settings.CTXOBS_ENCRYPTION_KEY or ""), str(settings.SECRET_KEY))


def encrypt(plain: str) -> str:
    """The Fernet token of PLAIN under the primary key; "" stays "" (nothing stored)."""
    if not plain:
        return ""
    return _current()[0].encrypt(plain.encode("utf-8")).decode("ascii")


def decrypt(token: str, *, what: str = "the stored secret") -> str:
    """The plain text of TOKEN (written under the primary key or a former derivation); "" stays "".
    ValueError naming WHAT, never the key or the token, when no key opens it."""
    if not token:
        return ""
    try:
        return _current()[1].decrypt(token.encode("ascii")).decode("utf-8")
    except (InvalidToken, UnicodeError):
        raise ValueError(f"{what} cannot be decrypted with the configured encryption key") from None


def hint(plain: str) -> str:
    """A short, non-secret reminder of which secret is stored (its last 4 characters)."""
    return f"…{plain[-4:]}" if len(plain) >= 12 else "…"
