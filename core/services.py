"""Writes of tenancy: projects and their ingest keys. A raw key is returned once and never stored."""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from core.errors import AuthError
from core.models import KEY_SCOPES, SCOPE_INGEST, IngestKey, Project, hash_key, key_prefix, new_raw_key

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


def ingest_key_authenticate(*, raw: str | None) -> IngestKey:
    """The active key for RAW, or AuthError saying what is wrong (missing/unknown/revoked)."""
    if not raw:
        raise AuthError("missing ingest key: send 'Authorization: Bearer <key>'")
    key = IngestKey.objects.select_related("project").filter(key_hash=hash_key(raw.strip())).first()
    if key is None:
        raise AuthError("unknown ingest key")
    if key.revoked_at is not None:
        raise AuthError("this ingest key was revoked")
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > LAST_USED_RESOLUTION_S:
        IngestKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return key
