"""Tenancy: projects, who may see them (memberships with a role) and what may write to them
(ingest keys with scopes). The tables keep the names they had when ingest owned them."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

from core import pgtext


class EscapedJSONField(models.JSONField):
    """JSON content that may hold text PostgreSQL refuses (U+0000, unpaired surrogates): stored
    escaped, read back as sent (see core.pgtext)."""

    def get_prep_value(self, value: Any) -> Any:
        return super().get_prep_value(pgtext.escape_json(value))

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        out = super().from_db_value(value, expression, connection)
        # Only a value holding ESC can hold an escaped string: the rest skip the walk.
        if isinstance(value, str) and pgtext.ESC in value:
            return pgtext.unescape_json(out)
        return out

    def deconstruct(self) -> Any:
        # The column is plain jsonb: the escaping is Python-side only, so no migration.
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs


# TextField is generic only in django-stubs; subscripting it at runtime needs django-stubs-ext.
class EscapedTextField(models.TextField):  # type: ignore[type-arg]
    """Text content stored escaped where PostgreSQL would refuse it (see core.pgtext)."""

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return pgtext.escape_text(value) if isinstance(value, str) else value

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return pgtext.unescape_text(value) if isinstance(value, str) else value

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.TextField", args, kwargs


# Project-level limits, documented in README (settings) and docs/scale.md.
RETENTION_DAYS_DEFAULT = 30
RETENTION_DAYS_MAX = 3650
TRIAGE_DAILY_CALLS_DEFAULT = 200
TRIAGE_DAILY_CALLS_MAX = 1_000_000


class Project(models.Model):
    name = models.CharField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Tier thresholds as fractions of the usable window (warn, compress, force, break).
    tier_warn = models.FloatField(default=0.60)
    tier_compress = models.FloatField(default=0.70)
    tier_force = models.FloatField(default=0.85)
    tier_break = models.FloatField(default=0.95)
    # Replays may target loopback/private model servers only when this is on.
    allow_private_endpoints = models.BooleanField(default=False)
    # Days a turn is kept; expiry removes older turns (see docs/scale.md). Bounds in core.limits.
    retention_days = models.PositiveIntegerField(default=RETENTION_DAYS_DEFAULT)
    # Context windows by model name, over the built-in registry: {"my-model": 32768}.
    model_windows = models.JSONField(default=dict, blank=True)
    # Prices per million tokens by model name, over the built-in table:
    # {"gpt-4o": {"input": 2.5, "cached_input": 1.25, "output": 10.0}}.
    price_table = models.JSONField(default=dict, blank=True)
    # Auto-triage: attribution runs on alerted or validation-failed turns, within a daily budget.
    triage_enabled = models.BooleanField(default=False)
    triage_daily_calls = models.PositiveIntegerField(default=TRIAGE_DAILY_CALLS_DEFAULT)

    class Meta:
        db_table = "ingest_project"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def thresholds(self) -> tuple[float, float, float, float]:
        return (self.tier_warn, self.tier_compress, self.tier_force, self.tier_break)


class Membership(models.Model):
    class Role(models.TextChoices):
        VIEWER = "viewer", "viewer"
        EDITOR = "editor", "editor"
        ADMIN = "admin", "admin"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "ingest_membership"
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="uniq_membership")]

    def __str__(self) -> str:
        return f"{self.user} @ {self.project} ({self.role})"

    ROLE_RANK = {"viewer": 0, "editor": 1, "admin": 2}

    def at_least(self, role: str) -> bool:
        return self.ROLE_RANK[self.role] >= self.ROLE_RANK[role]


# A raw key is "cx_" and 32 random bytes in URL-safe base64 (43 characters); its first
# KEY_PREFIX_LEN characters are kept in clear to name the key in lists and logs.
KEY_RAW_PREFIX = "cx_"
KEY_RANDOM_BYTES = 32
KEY_PREFIX_LEN = 12


def hash_key(raw: str) -> str:
    # Ingest keys carry 190+ bits of randomness, so a plain SHA-256 is a safe, O(1)-lookup hash.
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def new_raw_key() -> str:
    return KEY_RAW_PREFIX + secrets.token_urlsafe(KEY_RANDOM_BYTES)


def key_prefix(raw: str) -> str:
    """The part of a raw key kept in clear (IngestKey.prefix)."""
    return raw[:KEY_PREFIX_LEN]


# What a key may do. `ingest`: send snapshots and read its project's data (what agents need).
# `replay`: also start and cancel replays, which spend the model provider's budget; never implied.
SCOPE_INGEST, SCOPE_REPLAY = "ingest", "replay"
KEY_SCOPES = (SCOPE_INGEST, SCOPE_REPLAY)


def ingest_only() -> list[str]:
    return [SCOPE_INGEST]


class IngestKey(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="keys")
    name = models.CharField(max_length=100, blank=True, default="")
    scopes = ArrayField(models.CharField(max_length=16), default=ingest_only)
    prefix = models.CharField(max_length=KEY_PREFIX_LEN, db_index=True)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "ingest_ingestkey"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.project})"

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes
