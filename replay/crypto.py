"""Encryption of provider API keys at rest (Fernet, key derived from the configured secret)."""

from __future__ import annotations

import base64
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings


@lru_cache(maxsize=4)
def _fernet(secret: str) -> Fernet:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"ctxobs endpoint api keys").derive(
        secret.encode("utf-8")
    )
    return Fernet(base64.urlsafe_b64encode(derived))


def _secret() -> str:
    return settings.CTXOBS_ENCRYPTION_KEY or settings.SECRET_KEY


def encrypt(plain: str) -> str:
    """The Fernet token of PLAIN; "" stays "" (no key configured)."""
    if not plain:
        return ""
    return _fernet(_secret()).encrypt(plain.encode("utf-8")).decode("ascii")


def decrypt(token: str) -> str:
    """The plain text of TOKEN; raises ValueError (never the key) when it cannot be decrypted."""
    if not token:
        return ""
    try:
        return _fernet(_secret()).decrypt(token.encode("ascii")).decode("utf-8")
    except InvalidToken:
        raise ValueError("the stored API key cannot be decrypted with the configured secret") from None


def hint(plain: str) -> str:
    """A short, non-secret reminder of which key is stored (its last 4 characters)."""
    return f"…{plain[-4:]}" if len(plain) >= 12 else "…"
