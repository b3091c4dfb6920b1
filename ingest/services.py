"""Writes of the ingest app: the snapshot batch path."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from django.db import connection

from core.models import RETENTION_DAYS_MAX, Project
from ctxobs import tokens as tok
from ctxobs.validate import validate_snapshot
from ctxobs.wire import FieldError, Snapshot, WireMessage, tier_for
from ingest import derive, wirebody
from ingest.store import PreparedBlock, PreparedSnapshot, snapshots_store
from ingest.types import BatchItemResult, BatchReport, Message

logger = logging.getLogger(__name__)


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


def _count_block(messages: list[WireMessage], h: str, counter: tok.Counter) -> int:
    key = (counter.requested, h)
    hit = _server_token_cache.get(key)
    if hit is not None:
        return hit
    # Messages are counted as the JSON objects the agent sent, whatever their fields.
    n = tok.messages_tokens(cast(list[Message], messages), counter)
    _server_token_cache.put(key, n)
    return n


def _prepare(index: int, snap: Snapshot, thresholds: tuple[float, float, float, float]) -> PreparedSnapshot:
    model = snap["model"]
    counter: tok.Counter | None = None
    estimated_any = model["counts"] == "estimated"
    kind_tokens: dict[str, int] = {}
    total = 0
    tool_defs = snap["params"].get("tools")
    blocks: list[PreparedBlock] = []
    for b in snap["blocks"]:
        messages = b["messages"]
        # A block sent by hash brings its content address and token count, not its messages. A
        # block the server holds (the same bytes, sent before) keeps its addresses from then.
        h, mh = (b["hash"], []) if b["hash"] is not None else wirebody.block_hashes(b)
        n = b["tokens"]
        estimated = b["estimated"]
        if n is None:
            if counter is None:
                counter = tok.get_counter(model["encoding"] or None, model["name"])
            if b["kind"] == "tools" and not messages:
                # The definitions travel in params.tools (as sent to the model); they are
                # counted once, on the first tools block, by the same rule as the SDK's.
                n = tok.tools_tokens(tool_defs, counter) if isinstance(tool_defs, list) else 0
                tool_defs = None
            else:
                n = _count_block(messages, h, counter)
            estimated = not counter.exact
        estimated_any = estimated_any or estimated
        blocks.append(PreparedBlock(b, h, mh, n, estimated))
        kind = b["kind"]
        kind_tokens[kind] = kind_tokens.get(kind, 0) + n
        total += n
    wm = derive.watermark(total, model["context_window"], model["reserve_tokens"])
    out = snap["output"]
    reported = out["usage"].get("prompt_tokens") if out is not None else None
    encoding = model["encoding"] or (counter.used if counter else tok.encoding_for_model(model["name"]))
    return PreparedSnapshot(
        index=index,
        snap=snap,
        blocks=blocks,
        total=total,
        watermark=wm,
        tier=tier_for(wm, thresholds),
        kind_tokens=kind_tokens,
        counts_estimated=estimated_any,
        encoding=encoding,
        drift=derive.count_drift(total, reported),
    )


def _unknown_block(index: int, position: int) -> FieldError:
    return {
        "loc": ["snapshots", index, "blocks", position, "hash"],
        "msg": "unknown block content: this project holds no block with this hash (never sent, or expired)",
        "hint": "send the block's messages",
    }


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
        stored = snapshots_store(project=project, prepared=prepared)
        created_refs = stored.created
        for p in prepared:
            sid = p.snap["snapshot_id"]
            missing = stored.unknown_blocks.get(sid)
            if missing:
                results[p.index] = {"index": p.index, "snapshot_id": sid, "status": "rejected",
                                    "errors": [_unknown_block(p.index, j) for j in missing]}
                res.rejected += 1
                continue
            ref = created_refs.get(sid)
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


# --- for other apps ------------------------------------------------------------
def session_alert_counts_add(*, project_id: int, added: Mapping[int, int]) -> None:
    """Add ADDED[session_ref] to those sessions' alert counts: an increment, not a recount, so
    that it costs the same in a session with many alerts (one query)."""
    if not added:
        return
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE ingest_session s SET alert_count = s.alert_count + v.n
            FROM unnest(%s::bigint[], %s::int[]) AS v(id, n)
            WHERE s.project_id = %s AND s.id = v.id
            """,
            [list(added), list(added.values()), project_id],
        )


def session_alert_counts_set(*, project_id: int, counts: Mapping[int, int]) -> None:
    """Set the alert counts of the sessions COUNTS names (session_ref -> count; one query)."""
    if not counts:
        return
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE ingest_session s SET alert_count = v.n
            FROM unnest(%s::bigint[], %s::int[]) AS v(id, n)
            WHERE s.project_id = %s AND s.id = v.id
            """,
            [list(counts), list(counts.values()), project_id],
        )


# --- retention ----------------------------------------------------------------
def project_retention_set(*, project: Project, days: int) -> None:
    """Keep PROJECT's turns DAYS days after they arrive (1..RETENTION_DAYS_MAX); the next expiry
    run (ingest.retention) applies it."""
    if not 1 <= days <= RETENTION_DAYS_MAX:
        raise ValueError(f"retention must be 1 to {RETENTION_DAYS_MAX} days")
    project.retention_days = days
    project.save(update_fields=["retention_days"])
    logger.info("ingest.retention_set project_id=%s days=%d", project.pk, days)
