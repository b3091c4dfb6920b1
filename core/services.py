"""Writes of tenancy: projects and their ingest keys. A raw key is returned once and never stored."""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from django.db import connection, models, transaction
from django.utils import timezone

from core.errors import AuthError
from core.models import (
    KEY_SCOPES,
    SCOPE_INGEST,
    TRIAGE_DAILY_CALLS_MAX,
    IngestKey,
    Project,
    hash_key,
    key_prefix,
    new_raw_key,
)
from ctxobs.wire import LIMITS

logger = logging.getLogger(__name__)

# A key's last use is recorded at most this often: a write per request would cost ingest more
# than the information is worth.
LAST_USED_RESOLUTION_S = 60


def project_create(*, name: str, scopes: tuple[str, ...] = (SCOPE_INGEST,)) -> tuple[Project, str]:
    """Create a project and its first key (ingest-only unless SCOPES says otherwise); the raw key
    is returned once, never stored."""
    with transaction.atomic():
        project = Project.objects.create(name=name)
        _, raw = ingest_key_create(project=project, name="default", scopes=scopes)
    return project, raw


def ingest_key_create(
    *, project: Project, name: str = "", scopes: tuple[str, ...] = (SCOPE_INGEST,)
) -> tuple[IngestKey, str]:
    """A new key of PROJECT with SCOPES (`ingest`, optionally `replay`); the raw key is returned
    once. Every key may ingest: a replay-only key would be of no use to an agent."""
    unknown = set(scopes) - set(KEY_SCOPES)
    if unknown:
        raise ValueError(f"unknown key scope(s): {', '.join(sorted(unknown))}")
    wanted = [s for s in KEY_SCOPES if s == SCOPE_INGEST or s in scopes]
    raw = new_raw_key()
    key = IngestKey.objects.create(project=project, name=name, prefix=key_prefix(raw),
                                   key_hash=hash_key(raw), scopes=wanted)
    logger.info("ingest.key_created project_id=%s prefix=%s scopes=%s", project.pk, key.prefix,
                ",".join(wanted))
    return key, raw


def project_allow_private_set(*, project: Project, allow: bool) -> None:
    """Whether PROJECT's model endpoints and webhooks may point at loopback/private addresses
    (off by default: on a server those reach the server's own network)."""
    Project.objects.filter(pk=project.pk).update(allow_private_endpoints=allow)
    project.allow_private_endpoints = allow
    logger.info("ingest.project_allow_private project_id=%s allow=%s", project.pk, allow)


def project_triage_set(*, project: Project, enabled: bool, daily_calls: int) -> None:
    """Whether PROJECT triages its alerted and validation-failed turns by itself, and how many
    model calls a UTC day its triages may reserve at most."""
    if not 0 <= daily_calls <= TRIAGE_DAILY_CALLS_MAX:
        raise ValueError(f"daily calls must be from 0 to {TRIAGE_DAILY_CALLS_MAX}")
    Project.objects.filter(pk=project.pk).update(triage_enabled=enabled, triage_daily_calls=daily_calls)
    project.triage_enabled, project.triage_daily_calls = enabled, daily_calls
    logger.info(
        "core.project_triage project_id=%s enabled=%s daily_calls=%s", project.pk, enabled, daily_calls
    )


# Bounds of a project's context-window overrides (Project.model_windows).
MODEL_WINDOWS_MAX_ENTRIES = 200
MODEL_NAME_MAX_CHARS = 200


def model_windows_problems(windows: Mapping[str, object]) -> list[str]:
    """What makes WINDOWS ({model name: window in tokens}) unfit as a project's overrides."""
    problems = []
    if len(windows) > MODEL_WINDOWS_MAX_ENTRIES:
        problems.append(f"{len(windows)} models: at most {MODEL_WINDOWS_MAX_ENTRIES}")
    for name, window in windows.items():
        if not isinstance(name, str) or not name.strip() or len(name) > MODEL_NAME_MAX_CHARS:
            problems.append(f"model name {str(name)[:40]!r}: 1 to {MODEL_NAME_MAX_CHARS} characters")
        if isinstance(window, bool) or not isinstance(window, int) or not 0 < window <= LIMITS.max_int:
            problems.append(
                f"window of {str(name)[:40]!r}: a whole number of tokens from 1 to {LIMITS.max_int}"
            )
    return problems


def project_model_windows_set(*, project: Project, windows: Mapping[str, int]) -> None:
    """Replace PROJECT's context-window overrides: {model name: window}, matched before the
    model registry wherever a window is derived from a model name (OTLP ingest)."""
    problems = model_windows_problems(windows)
    if problems:
        raise ValueError("; ".join(problems))
    value = dict(sorted(windows.items()))
    Project.objects.filter(pk=project.pk).update(model_windows=value)
    project.model_windows = value
    logger.info("ingest.project_model_windows project_id=%s models=%d", project.pk, len(value))


def project_price_table_set(*, project: Project, table: dict[str, dict[str, float]]) -> None:
    """Replace PROJECT's own model prices (checked by the caller; see insights.prices)."""
    Project.objects.filter(pk=project.pk).update(price_table=table)
    project.price_table = table
    logger.info("core.project_price_table project_id=%s models=%d", project.pk, len(table))


def ingest_key_revoke(*, prefix: str, project: Project | None = None) -> IngestKey:
    qs = IngestKey.objects.filter(prefix=prefix, revoked_at__isnull=True)
    if project is not None:
        qs = qs.filter(project=project)
    keys = list(qs[:2])
    if not keys:
        raise IngestKey.DoesNotExist(f"no active key with prefix {prefix!r}")
    if len(keys) > 1:
        raise ValueError(f"prefix {prefix!r} matches more than one key; give the project too")
    key = keys[0]
    key.revoked_at = timezone.now()
    key.save(update_fields=["revoked_at"])
    logger.info("ingest.key_revoked project_id=%s prefix=%s", key.project_id, key.prefix)
    return key


M = TypeVar("M", bound=models.Model)


@functools.cache
def _key_lookup_sql() -> str:
    """The statement that reads a key by its hash with its project: every column of both models,
    the key's first. Written once: through the ORM, compiling the query cost more than running it
    (about 1 ms of CPU on every request the API authenticates)."""
    quote = connection.ops.quote_name

    def q(field: Any) -> str:
        return quote(str(field.column))

    key, project = IngestKey._meta, Project._meta
    columns = [f"k.{q(f)}" for f in key.concrete_fields] + [f"p.{q(f)}" for f in project.concrete_fields]
    return (
        f"SELECT {', '.join(columns)} FROM {quote(key.db_table)} k JOIN {quote(project.db_table)} p"  # noqa: S608 - the models' own names
        f" ON p.{q(project.pk)} = k.{q(key.get_field('project'))} WHERE k.{q(key.get_field('key_hash'))} = %s"
    )


@functools.cache
def _readers(model: type[models.Model]) -> tuple[list[str], list[tuple[int, Any, list[Any]]]]:
    """MODEL's concrete fields' attribute names in order, and for each field the ORM converts on
    reading, its position, its column and its converters (the backend's, then the field's)."""
    fields = model._meta.concrete_fields
    converting = []
    for i, field in enumerate(fields):
        col = field.get_col(model._meta.db_table)
        converters = [*connection.ops.get_db_converters(col), *field.get_db_converters(connection)]
        if converters:
            converting.append((i, col, converters))
    return [f.attname for f in fields], converting


def _instance(model: type[M], values: Sequence[Any]) -> M:
    """An instance of MODEL from VALUES, its concrete fields' columns in order, converted as the
    ORM converts what it reads (a JSON field's text parsed, and so on)."""
    names, converting = _readers(model)
    row = list(values)
    for i, col, converters in converting:
        for convert in converters:
            row[i] = convert(row[i], col, connection)
    return model.from_db(connection.alias, names, row)


def _key_with_project(key_hash: str) -> IngestKey | None:
    """The key stored under KEY_HASH with its project, in one statement; None when there is none."""
    with connection.cursor() as cur:
        cur.execute(_key_lookup_sql(), [key_hash])
        row = cur.fetchone()
    if row is None:
        return None
    n = len(IngestKey._meta.concrete_fields)
    key = _instance(IngestKey, row[:n])
    key.project = _instance(Project, row[n:])
    return key


def ingest_key_authenticate(*, raw: str | None) -> IngestKey:
    """The active key for RAW, or AuthError saying what is wrong (missing/unknown/revoked)."""
    if not raw:
        raise AuthError("missing ingest key: send 'Authorization: Bearer <key>'")
    key = _key_with_project(hash_key(raw.strip()))
    if key is None:
        raise AuthError("unknown ingest key")
    if key.revoked_at is not None:
        raise AuthError("this ingest key was revoked")
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > LAST_USED_RESOLUTION_S:
        IngestKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return key
