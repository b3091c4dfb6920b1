"""Writes of the ingest app: projects, keys and the snapshot batch path."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from ctxobs import tokens as tok
from ctxobs.wire import block_hashes, validate_snapshot
from ingest import derive
from ingest.errors import AuthError
from ingest.models import (
    KEY_PREFIX_LEN,
    KEY_SCOPES,
    SCOPE_INGEST,
    IngestKey,
    Project,
    hash_key,
    new_raw_key,
)
from ingest.store import PreparedSnapshot, snapshots_store
from ingest.types import BatchItemResult, BatchReport, Message

logger = logging.getLogger(__name__)


# --- projects and keys ------------------------------------------------------
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
    key = IngestKey.objects.create(project=project, name=name, prefix=raw[:KEY_PREFIX_LEN],
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
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        IngestKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return key


# --- snapshots --------------------------------------------------------------
@dataclass
class BatchResult:
    results: list[BatchItemResult]
    created: int = 0
    duplicate: int = 0
    rejected: int = 0
    snapshot_refs: list[int] = field(default_factory=list)

    def as_dict(self) -> BatchReport:
        return {
            "results": self.results,
            "created": self.created,
            "duplicate": self.duplicate,
            "rejected": self.rejected,
        }


_server_token_cache = tok.TokenCache(maxsize=200_000)


def _count_block(messages: list[Message], h: str, counter: tok.Counter) -> int:
    key = (counter.requested, h)
    hit = _server_token_cache.get(key)
    if hit is not None:
        return hit
    n = tok.messages_tokens(messages, counter)
    _server_token_cache.put(key, n)
    return n


def _prepare(
    index: int, snap: dict[str, Any], thresholds: tuple[float, float, float, float]
) -> PreparedSnapshot:
    model = snap["model"]
    counter: tok.Counter | None = None
    blocks = snap["blocks"]
    estimated_any = model.get("counts") == "estimated"
    kind_tokens: dict[str, int] = {}
    total = 0
    tool_defs = (snap.get("params") or {}).get("tools")
    for b in blocks:
        h, mh = block_hashes(b["messages"])
        n = b["tokens"]
        if n is None:
            if counter is None:
                counter = tok.get_counter(model["encoding"] or None, model["name"])
            if b["kind"] == "tools" and not b["messages"]:
                # The definitions travel in params.tools (as sent to the model); they are
                # counted once, on the first tools block, by the same rule as the SDK's.
                n = tok.tools_tokens(tool_defs, counter) if isinstance(tool_defs, list) else 0
                tool_defs = None
            else:
                n = _count_block(b["messages"], h, counter)
            b["estimated"] = not counter.exact
        estimated_any = estimated_any or b["estimated"]
        # The validated block belongs to this batch alone, so it is completed in place.
        b["hash"], b["message_hashes"], b["tokens"] = h, mh, n
        kind_tokens[b["kind"]] = kind_tokens.get(b["kind"], 0) + n
        total += n
    wm = derive.watermark(total, model["context_window"], model["reserve_tokens"])
    out = snap["output"] or {}
    reported = (out.get("usage") or {}).get("prompt_tokens")
    encoding = model["encoding"] or (counter.used if counter else tok.encoding_for_model(model["name"]))
    return PreparedSnapshot(
        index=index,
        snap=snap,
        blocks=blocks,
        total=total,
        watermark=wm,
        tier=derive.tier(wm, thresholds),
        kind_tokens=kind_tokens,
        counts_estimated=estimated_any,
        encoding=encoding,
        drift=derive.count_drift(total, reported),
    )


def snapshot_batch_ingest(*, project: Project, batch: list[Any]) -> BatchResult:
    """Validate, dedup and store a batch; the result lists each item's fate, in order.

    Valid items are written in one transaction and acknowledged only after it commits;
    invalid items are rejected with field errors without affecting the others.
    """
    started = time.perf_counter()
    results: list[BatchItemResult | None] = [None] * len(batch)
    prepared: list[PreparedSnapshot] = []
    seen_ids: set[str] = set()
    res = BatchResult(results=[])
    thresholds = project.thresholds
    for i, item in enumerate(batch):
        snap, errors = validate_snapshot(item, i)
        if snap is None:
            sid = item.get("snapshot_id") if isinstance(item, dict) else None
            results[i] = {"index": i, "snapshot_id": sid if isinstance(sid, str) else None,
                          "status": "rejected", "errors": errors}
            res.rejected += 1
            continue
        if snap["snapshot_id"] in seen_ids:
            results[i] = {"index": i, "snapshot_id": snap["snapshot_id"], "status": "duplicate"}
            res.duplicate += 1
            continue
        seen_ids.add(snap["snapshot_id"])
        prepared.append(_prepare(i, snap, thresholds))

    if prepared:
        created_refs = snapshots_store(project=project, prepared=prepared)
        for p in prepared:
            ref = created_refs.get(p.snap["snapshot_id"])
            status = "created" if ref is not None else "duplicate"
            results[p.index] = {"index": p.index, "snapshot_id": p.snap["snapshot_id"], "status": status}
            if ref is not None:
                res.created += 1
                res.snapshot_refs.append(ref)
            else:
                res.duplicate += 1
    res.results = [r for r in results if r is not None]
    logger.info(
        "ingest.batch project_id=%s created=%d duplicate=%d rejected=%d ms=%.1f",
        project.pk, res.created, res.duplicate, res.rejected, (time.perf_counter() - started) * 1000,
    )
    return res
