"""Channel writes: creating, editing, deleting channels, rotating a webhook's signing secret,
and queueing a test message. What a channel kind sends and how is in `alerts.channels`."""

from __future__ import annotations

import logging
from typing import Any, TypedDict

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from alerts import channels as ch
from alerts import kinds as K
from alerts.errors import InvalidChannel
from alerts.models import (
    EMAIL_MAX_ATTEMPTS,
    WEBHOOK_MAX_ATTEMPTS,
    WEBHOOK_TIMEOUT_SECONDS,
    Channel,
    Delivery,
)
from alerts.services.delivery import deliveries_enqueue
from core.models import Project

logger = logging.getLogger(__name__)

NAME_MAX_CHARS = 100
WEBHOOK_TIMEOUT_MIN = 0.1
WEBHOOK_TIMEOUT_MAX = 30.0
MAX_ATTEMPTS = 10
MAX_RECIPIENTS = 50
CHANNEL_FIELDS = (
    "name",
    "min_severity",
    "enabled",
    "url",
    "timeout_seconds",
    "max_attempts",
    "recipients",
    "max_per_hour",
)
MAX_PER_HOUR = 3600


class ChannelFields(TypedDict, total=False):
    """The editable fields of a channel, cleaned: the common ones and those of its kind."""

    name: str
    min_severity: str
    enabled: bool
    url: str
    timeout_seconds: float
    max_attempts: int
    recipients: list[str]
    max_per_hour: int


def _channel_clean(project: Project, data: dict[str, Any], *, kind: str) -> ChannelFields:
    errors: dict[str, str] = {}
    out: ChannelFields = {}
    name = str(data.get("name") or "").strip()
    if not name or len(name) > NAME_MAX_CHARS:
        errors["name"] = f"required, at most {NAME_MAX_CHARS} characters"
    out["name"] = name
    sev = data.get("min_severity") or "info"
    if sev not in K.SEVERITIES:
        errors["min_severity"] = f"one of {', '.join(K.SEVERITIES)}"
    out["min_severity"] = sev
    out["enabled"] = bool(data.get("enabled", True))
    # Left as it is when not sent (forms that do not show it).
    if data.get("max_per_hour") not in (None, ""):
        try:
            per_hour = int(data["max_per_hour"])
            if not 1 <= per_hour <= MAX_PER_HOUR:
                raise ValueError
            out["max_per_hour"] = per_hour
        except (TypeError, ValueError):
            errors["max_per_hour"] = f"a whole number of messages an hour between 1 and {MAX_PER_HOUR}"
    if kind == Channel.Kind.WEBHOOK:
        url = str(data.get("url") or "").strip()
        problem = (
            ch.webhook_url_problem(url, allow_private=project.allow_private_endpoints) if url else "required"
        )
        if problem:
            errors["url"] = problem
        out["url"] = url
        try:
            timeout = float(data.get("timeout_seconds") or WEBHOOK_TIMEOUT_SECONDS)
            if not WEBHOOK_TIMEOUT_MIN <= timeout <= WEBHOOK_TIMEOUT_MAX:
                raise ValueError
            out["timeout_seconds"] = timeout
        except (TypeError, ValueError):
            errors["timeout_seconds"] = (
                f"a number of seconds between {WEBHOOK_TIMEOUT_MIN:g} and {WEBHOOK_TIMEOUT_MAX:g}"
            )
        try:
            attempts = int(data.get("max_attempts") or WEBHOOK_MAX_ATTEMPTS)
            if not 1 <= attempts <= MAX_ATTEMPTS:
                raise ValueError
            out["max_attempts"] = attempts
        except (TypeError, ValueError):
            errors["max_attempts"] = f"a whole number between 1 and {MAX_ATTEMPTS}"
    elif kind == Channel.Kind.EMAIL:
        raw = data.get("recipients") or []
        if isinstance(raw, str):
            raw = list(raw.replace(";", ",").replace("\n", ",").split(","))
        recips = [str(r).strip() for r in raw if str(r).strip()]
        bad = []
        for r in recips:
            try:
                validate_email(r)
            except ValidationError:
                bad.append(r)
        if not recips:
            errors["recipients"] = "at least one address"
        elif bad:
            errors["recipients"] = "not an e-mail address: " + ", ".join(bad[:3])
        elif len(recips) > MAX_RECIPIENTS:
            errors["recipients"] = f"at most {MAX_RECIPIENTS} addresses"
        out["recipients"] = recips
        try:
            attempts = int(data.get("max_attempts") or EMAIL_MAX_ATTEMPTS)
            if not 1 <= attempts <= MAX_ATTEMPTS:
                raise ValueError
            out["max_attempts"] = attempts
        except (TypeError, ValueError):
            errors["max_attempts"] = f"a whole number between 1 and {MAX_ATTEMPTS}"
    else:
        errors["kind"] = "webhook or email"
    if errors:
        raise InvalidChannel(errors)
    return out


def channel_create(*, project: Project, kind: str, data: dict[str, Any]) -> tuple[Channel, str | None]:
    """A new channel; for a webhook also its signing secret, returned in clear this once."""
    clean = _channel_clean(project, data, kind=kind)
    secret = ch.secret_new() if kind == Channel.Kind.WEBHOOK else None
    channel = Channel.objects.create(
        project=project, kind=kind, secret_encrypted=ch.secret_encrypt(secret) if secret else "", **clean
    )
    logger.info("alerts.channel_created project_id=%s channel_id=%s kind=%s", project.pk, channel.pk, kind)
    return channel, secret


def channel_update(*, channel: Channel, data: dict[str, Any]) -> Channel:
    current = {f: getattr(channel, f) for f in CHANNEL_FIELDS}
    merged = {**current, **{k: v for k, v in data.items() if k in CHANNEL_FIELDS}}
    clean = _channel_clean(channel.project, merged, kind=channel.kind)
    for f, v in clean.items():
        setattr(channel, f, v)
    channel.save()
    return channel


def channel_secret_rotate(*, channel: Channel) -> str:
    secret = ch.secret_new()
    channel.secret_encrypted = ch.secret_encrypt(secret)
    channel.save(update_fields=["secret_encrypted"])
    logger.info("alerts.channel_secret_rotated project_id=%s channel_id=%s", channel.project_id, channel.pk)
    return secret


def channel_delete(*, channel: Channel) -> None:
    logger.info("alerts.channel_deleted project_id=%s channel_id=%s", channel.project_id, channel.pk)
    channel.delete()


def channel_test_send(*, channel: Channel) -> Delivery:
    """Queue a test message to CHANNEL; its result shows in the channel's delivery log."""
    d = Delivery.objects.create(project_id=channel.project_id, channel=channel, is_test=True)
    transaction.on_commit(lambda: deliveries_enqueue([d.pk]))
    return d

