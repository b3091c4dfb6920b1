"""Secrets at rest: one key policy; values written under either former derivation still decrypt."""

from __future__ import annotations

import base64
import hashlib
import logging
from typing import Any

import pytest
from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from core import secrets

FERNET_KEY = Fernet.generate_key().decode()


# The two derivations that wrote the values already stored, written out here as they were, so the
# test does not depend on the module it checks.
def old_alerts_channel_fernet(configured: str, secret_key: str) -> Fernet:
    if configured:
        try:
            return Fernet(configured.encode())
        except (ValueError, TypeError):
            material = f"ctxobs-encryption:{configured}"
    else:
        material = f"ctxobs-alerts-channel:{secret_key}"
    return Fernet(base64.urlsafe_b64encode(hashlib.sha256(material.encode()).digest()))


def old_replay_crypto_fernet(configured: str, secret_key: str) -> Fernet:
    secret = configured or secret_key
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"ctxobs endpoint api keys")
    derived = hkdf.derive(secret.encode("utf-8"))
    return Fernet(base64.urlsafe_b64encode(derived))


CONFIGS = pytest.mark.parametrize(
    "configured",
    ["", "a passphrase, not a Fernet key", FERNET_KEY],
    ids=["unset", "passphrase", "fernet-key"],
)


@CONFIGS
@pytest.mark.parametrize(
    "old", [old_alerts_channel_fernet, old_replay_crypto_fernet], ids=["alerts-channels", "replay-crypto"]
)
def test_values_encrypted_by_a_former_derivation_still_decrypt(
    settings: Any, configured: str, old: Any
) -> None:
    settings.CTXOBS_ENCRYPTION_KEY = configured
    token = old(configured, settings.SECRET_KEY).encrypt(b"whsec_stored-long-ago").decode()
    assert secrets.decrypt(token) == "whsec_stored-long-ago"


@CONFIGS
def test_new_values_use_the_primary_key_only(settings: Any, configured: str) -> None:
    settings.CTXOBS_ENCRYPTION_KEY = configured
    token = secrets.encrypt("sk-live-0123456789")
    assert "sk-live" not in token and secrets.decrypt(token) == "sk-live-0123456789"
    for old in (old_alerts_channel_fernet, old_replay_crypto_fernet):
        with pytest.raises(InvalidToken):
            old(configured, settings.SECRET_KEY).decrypt(token.encode())
    source = (configured or settings.SECRET_KEY).encode()
    primary = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=secrets.PRIMARY_INFO).derive(source)
    assert Fernet(base64.urlsafe_b64encode(primary)).decrypt(token.encode()) == b"sk-live-0123456789"


def test_a_changed_key_gives_a_clear_error_without_the_secret_or_the_key(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.CTXOBS_ENCRYPTION_KEY = "the first key"
    token = secrets.encrypt("sk-secret-value-123")
    settings.CTXOBS_ENCRYPTION_KEY = "another key"
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ValueError, match="the stored API key cannot be decrypted") as err:
        secrets.decrypt(token, what="the stored API key")
    for text in (str(err.value), caplog.text):
        assert "sk-secret" not in text and "another key" not in text and "the first key" not in text
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_empty_stays_empty_and_the_hint_shows_only_the_last_four() -> None:
    assert secrets.encrypt("") == "" and secrets.decrypt("") == ""
    assert secrets.hint("sk-abcdefghijkl9876") == "…9876"
    assert secrets.hint("short") == "…"
