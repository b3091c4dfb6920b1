"""Writes of the ingest app: projects, keys and the snapshot batch path."""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from ctxobs import tokens as tok
from ctxobs.wire import TIERS, block_hashes, validate_snapshot
from ingest import derive
from ingest.errors import AuthError
from ingest.models import KEY_PREFIX_LEN, IngestKey, Project, hash_key, new_raw_key
from ingest.signals import snapshots_committed

logger = logging.getLogger(__name__)


# --- projects and keys ------------------------------------------------------
def project_create(*, name: str) -> tuple[Project, str]:
    """Create a project and its first ingest key; the raw key is returned once, never stored."""
    with transaction.atomic():
        project = Project.objects.create(name=name)
        _, raw = ingest_key_create(project=project, name="default")
    return project, raw


def ingest_key_create(*, project: Project, name: str = "") -> tuple[IngestKey, str]:
    raw = new_raw_key()
    key = IngestKey.objects.create(project=project, name=name, prefix=raw[:KEY_PREFIX_LEN], key_hash=hash_key(raw))
    logger.info("ingest.key_created project_id=%s prefix=%s", project.pk, key.prefix)
    return key, raw


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
    results: list[dict[str, Any]]
    created: int = 0
    duplicate: int = 0
    rejected: int = 0
    snapshot_refs: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "results": self.results,
            "created": self.created,
            "duplicate": self.duplicate,
            "rejected": self.rejected,
        }


_server_token_cache = tok.TokenCache(maxsize=200_000)


class _KnownHashes:
    """Content hashes this process has seen committed, so repeats skip the existence check.

    Entries are added only after the commit that stored them, so a rolled-back batch can
    never leave a reference to content that is not there. Bounded: cleared when full.
    """

    def __init__(self, maxsize: int = 400_000) -> None:
        self.maxsize = maxsize
        self._set: set[tuple[int, str]] = set()

    def unknown(self, project_id: int, hashes: Any) -> list[str]:
        return [h for h in hashes if (project_id, h) not in self._set]

    def add(self, project_id: int, hashes: Any) -> None:
        if len(self._set) > self.maxsize:
            self._set.clear()
        self._set.update((project_id, h) for h in hashes)


_known_blocks = _KnownHashes()
_known_messages = _KnownHashes()


def _count_block(messages: list[dict[str, Any]], h: str, counter: tok.Counter) -> int:
    key = (counter.requested, h)
    hit = _server_token_cache.get(key)
    if hit is not None:
        return hit
    n = tok.messages_tokens(messages, counter)
    _server_token_cache.put(key, n)
    return n


@dataclass
class _Prepared:
    index: int
    snap: dict[str, Any]
    blocks: list[dict[str, Any]]  # with hash, tokens, estimated
    total: int
    watermark: float
    tier: str
    kind_tokens: dict[str, int]
    counts_estimated: bool
    encoding: str
    drift: float | None
    session_ref: int = 0
    change: dict[str, Any] = field(default_factory=dict)
    prev_turn: int | None = None


def _prepare(index: int, snap: dict[str, Any], thresholds: tuple[float, float, float, float]) -> _Prepared:
    model = snap["model"]
    counter: tok.Counter | None = None
    blocks = []
    estimated_any = model.get("counts") == "estimated"
    kind_tokens: dict[str, int] = defaultdict(int)
    total = 0
    for b in snap["blocks"]:
        h, mh = block_hashes(b["messages"])
        n = b["tokens"]
        est = b["estimated"]
        if n is None:
            if counter is None:
                counter = tok.get_counter(model["encoding"] or None, model["name"])
            n = _count_block(b["messages"], h, counter)
            est = not counter.exact
        estimated_any = estimated_any or est
        blocks.append({**b, "hash": h, "message_hashes": mh, "tokens": n, "estimated": est})
        kind_tokens[b["kind"]] += n
        total += n
    wm = derive.watermark(total, model["context_window"], model["reserve_tokens"])
    out = snap["output"] or {}
    reported = (out.get("usage") or {}).get("prompt_tokens")
    encoding = model["encoding"] or (counter.used if counter else tok.encoding_for_model(model["name"]))
    return _Prepared(
        index=index,
        snap=snap,
        blocks=blocks,
        total=total,
        watermark=wm,
        tier=derive.tier(wm, thresholds),
        kind_tokens=dict(kind_tokens),
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
    results: list[dict[str, Any] | None] = [None] * len(batch)
    prepared: list[_Prepared] = []
    seen_ids: set[str] = set()
    res = BatchResult(results=[])
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
        prepared.append(_prepare(i, snap, project.thresholds))

    if prepared:
        created_refs = _store(project, prepared)
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


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


def _j(value: Any) -> str:
    return _ENCODER.encode(value)


def _store(project: Project, prepared: list[_Prepared]) -> dict[str, int]:
    pid = project.pk
    now = timezone.now()
    with transaction.atomic():
        cur = connection.cursor()
        raw = cur.cursor  # psycopg cursor, for COPY

        # 1. Sessions: upsert and lock (FOR UPDATE via ON CONFLICT DO UPDATE). Locking serialises
        #    concurrent batches of the same session so the turn-to-turn diffs see a stable order;
        #    sorted ids avoid deadlocks between batches that share sessions.
        by_session: dict[str, list[_Prepared]] = defaultdict(list)
        for p in prepared:
            by_session[p.snap["session_id"]].append(p)
        sids = sorted(by_session)
        rows = []
        for sid in sids:
            ps = by_session[sid]
            rows.append({"session_id": sid, "first_seen": min(p.snap["ts"] for p in ps).isoformat(),
                         "last_seen": max(p.snap["ts"] for p in ps).isoformat()})
        cur.execute(
            """
            INSERT INTO ingest_session (project_id, session_id, agent, model, turn_count, max_turn,
                first_seen, last_seen, max_watermark, max_tier, failed_validations, compression_events,
                alert_count)
            SELECT %s, x.session_id, '', '', 0, 0, x.first_seen, x.last_seen, 0, 'ok', 0, 0, 0
            FROM jsonb_to_recordset(%s::jsonb) AS x(session_id text, first_seen timestamptz,
                last_seen timestamptz)
            ORDER BY x.session_id
            ON CONFLICT (project_id, session_id) DO UPDATE SET session_id = EXCLUDED.session_id
            RETURNING id, session_id
            """,
            [pid, _j(rows)],
        )
        session_refs = {sid: ref for ref, sid in cur.fetchall()}
        for p in prepared:
            p.session_ref = session_refs[p.snap["session_id"]]

        # 2. Duplicates already stored (a resend): never stored twice, reported as duplicate.
        cur.execute(
            "SELECT snapshot_id::text FROM ingest_snapshot WHERE project_id = %s AND snapshot_id = ANY(%s::uuid[])",
            [pid, [p.snap["snapshot_id"] for p in prepared]],
        )
        existing = {r[0] for r in cur.fetchall()}
        fresh = [p for p in prepared if p.snap["snapshot_id"] not in existing]
        if not fresh:
            return {}

        # 3. Turn-to-turn change, correct for late and repeated turns.
        updates = _derive_changes(cur, pid, fresh)

        # 4. Snapshots.
        snap_rows = []
        for p in fresh:
            s, out = p.snap, p.snap["output"] or {}
            usage = out.get("usage") or {}
            snap_rows.append({
                "snapshot_id": s["snapshot_id"], "session_ref": p.session_ref, "session_id": s["session_id"],
                "turn": s["turn"], "agent": s["agent"], "ts": s["ts"].isoformat(),
                "model_name": s["model"]["name"], "context_window": s["model"]["context_window"],
                "reserve_tokens": s["model"]["reserve_tokens"], "encoding": p.encoding,
                "counts_estimated": p.counts_estimated, "params": s["params"], "tags": s["tags"],
                "total_tokens": p.total, "watermark": p.watermark, "tier": p.tier,
                "kind_tokens": p.kind_tokens, "n_blocks": len(p.blocks), "n_compression": len(s["compression"]),
                "n_recall": len(s["recall"]), "n_recall_injected": sum(1 for r in s["recall"] if r["injected"]),
                "n_validation": len(s["validation"]),
                "n_validation_failed": sum(1 for v in s["validation"] if not v["passed"]),
                "retries": s["retries"], "fallback_used": s["fallback_used"],
                "output": s["output"], "prompt_tokens_reported": usage.get("prompt_tokens"),
                "completion_tokens": usage.get("completion_tokens"), "cached_tokens": usage.get("cached_tokens"),
                "latency_ms": out.get("latency_ms"), "count_drift": p.drift, "prev_turn": p.prev_turn,
                "change": p.change,
            })
        cur.execute(
            """
            INSERT INTO ingest_snapshot (project_id, snapshot_id, session_ref, session_id, turn, agent, ts,
                received_at, model_name, context_window, reserve_tokens, encoding, counts_estimated, params,
                tags, total_tokens, watermark, tier, kind_tokens, n_blocks, n_compression, n_recall,
                n_recall_injected, n_validation, n_validation_failed, retries, fallback_used, output,
                prompt_tokens_reported, completion_tokens, cached_tokens, latency_ms, count_drift,
                prev_turn, change)
            SELECT %s, x.snapshot_id, x.session_ref, x.session_id, x.turn, x.agent, x.ts, %s, x.model_name,
                x.context_window, x.reserve_tokens, x.encoding, x.counts_estimated,
                COALESCE(x.params, '{}'::jsonb), COALESCE(x.tags, '{}'::jsonb), x.total_tokens,
                x.watermark, x.tier, x.kind_tokens, x.n_blocks, x.n_compression, x.n_recall,
                x.n_recall_injected, x.n_validation, x.n_validation_failed, x.retries, x.fallback_used,
                x.output, x.prompt_tokens_reported, x.completion_tokens, x.cached_tokens, x.latency_ms,
                x.count_drift, x.prev_turn, x.change
            FROM jsonb_to_recordset(%s::jsonb) AS x(snapshot_id uuid, session_ref bigint, session_id text,
                turn int, agent text, ts timestamptz, model_name text, context_window int,
                reserve_tokens int, encoding text, counts_estimated bool, params jsonb, tags jsonb,
                total_tokens int, watermark float8, tier text, kind_tokens jsonb, n_blocks int,
                n_compression int, n_recall int, n_recall_injected int, n_validation int,
                n_validation_failed int, retries int, fallback_used bool, output jsonb,
                prompt_tokens_reported int, completion_tokens int, cached_tokens int, latency_ms float8,
                count_drift float8, prev_turn int, change jsonb)
            ON CONFLICT (project_id, snapshot_id) DO NOTHING
            RETURNING id, snapshot_id::text
            """,
            [pid, now, _j(snap_rows)],
        )
        created = {sid: ref for ref, sid in cur.fetchall()}
        fresh = [p for p in fresh if p.snap["snapshot_id"] in created]
        if not fresh:
            return {}

        # 5. Block contents and their messages, each stored once per project under its hash.
        contents: dict[str, tuple[dict[str, Any], str]] = {}
        for p in fresh:
            for b in p.blocks:
                if b["hash"] not in contents:
                    contents[b["hash"]] = (b, p.encoding)
        maybe_new = _known_blocks.unknown(pid, contents)
        known: set[str] = set()
        if maybe_new:
            cur.execute(
                "SELECT hash FROM ingest_blockcontent WHERE project_id = %s AND hash = ANY(%s)",
                [pid, maybe_new],
            )
            known = {r[0] for r in cur.fetchall()}
        missing = [(h, *contents[h]) for h in maybe_new if h not in known]
        messages: dict[str, dict[str, Any]] = {}
        if missing:
            for _h, b, _enc in missing:
                for mh, m in zip(b["message_hashes"], b["messages"], strict=True):
                    messages.setdefault(mh, m)
            maybe_new_messages = _known_messages.unknown(pid, messages)
            known_messages: set[str] = set()
            if maybe_new_messages:
                cur.execute(
                    "SELECT hash FROM ingest_messagecontent WHERE project_id = %s AND hash = ANY(%s)",
                    [pid, maybe_new_messages],
                )
                known_messages = {r[0] for r in cur.fetchall()}
            new_messages = [{"hash": mh, "message": messages[mh]} for mh in maybe_new_messages
                            if mh not in known_messages]
            if new_messages:
                cur.execute(
                    """
                    INSERT INTO ingest_messagecontent (project_id, hash, message)
                    SELECT %s, x.hash, x.message FROM jsonb_to_recordset(%s::jsonb) AS x(hash text, message jsonb)
                    ON CONFLICT (project_id, hash) DO NOTHING
                    """,
                    [pid, _j(new_messages)],
                )
            cur.execute(
                """
                INSERT INTO ingest_blockcontent (project_id, hash, message_hashes, chars, tokens, encoding, created_at)
                SELECT %s, x.hash, ARRAY(SELECT jsonb_array_elements_text(x.mh)), x.chars, x.tokens, x.encoding, %s
                FROM jsonb_to_recordset(%s::jsonb) AS x(hash text, mh jsonb, chars int, tokens int, encoding text)
                ON CONFLICT (project_id, hash) DO NOTHING
                """,
                [pid, now, _j([{"hash": h, "mh": b["message_hashes"], "chars": b["chars"],
                                "tokens": b["tokens"], "encoding": enc} for h, b, enc in missing])],
            )

        # 6. Child rows by COPY: the snapshot ids are new, so nothing can conflict.
        with raw.copy(
            "COPY ingest_snapshotblock (project_id, snapshot_ref, position, key, kind, content_hash, tokens,"
            " estimated, pinned, compressed, refs) FROM STDIN"
        ) as copy:
            for p in fresh:
                ref = created[p.snap["snapshot_id"]]
                for pos, b in enumerate(p.blocks):
                    copy.write_row((pid, ref, pos, b["key"], b["kind"], b["hash"], b["tokens"], b["estimated"],
                                    b["pinned"], b["compressed"], _j(b["refs"]) if b["refs"] else "[]"))
        if any(p.snap["compression"] for p in fresh):
            with raw.copy(
                "COPY ingest_compressionevent (project_id, snapshot_ref, position, ts, strategy, block,"
                " tokens_before, tokens_after, watermark, items, ref) FROM STDIN"
            ) as copy:
                for p in fresh:
                    ref = created[p.snap["snapshot_id"]]
                    for pos, c in enumerate(p.snap["compression"]):
                        copy.write_row((pid, ref, pos, p.snap["ts"], c["strategy"], c["block"],
                                        c["tokens_before"], c["tokens_after"], c["watermark"], _j(c["items"]),
                                        c["ref"]))
        if any(p.snap["recall"] for p in fresh):
            with raw.copy(
                "COPY ingest_recallitem (project_id, snapshot_ref, position, memory_id, channel, score, rank,"
                " injected, stale, conflicting, block, preview) FROM STDIN"
            ) as copy:
                for p in fresh:
                    ref = created[p.snap["snapshot_id"]]
                    for pos, r in enumerate(p.snap["recall"]):
                        copy.write_row((pid, ref, pos, r["memory_id"], r["channel"], r["score"], r["rank"],
                                        r["injected"], r["stale"], r["conflicting"], r["block"], r["preview"]))
        if any(p.snap["validation"] for p in fresh):
            with raw.copy(
                "COPY ingest_validationoutcome (project_id, snapshot_ref, position, layer, \"check\", passed,"
                " code, message, attempt) FROM STDIN"
            ) as copy:
                for p in fresh:
                    ref = created[p.snap["snapshot_id"]]
                    for pos, v in enumerate(p.snap["validation"]):
                        copy.write_row((pid, ref, pos, v["layer"], v["check"], v["passed"], v["code"],
                                        v["message"], v["attempt"]))

        # 7. Existing turns whose predecessor changed because an earlier turn arrived late.
        if updates:
            cur.execute(
                """
                UPDATE ingest_snapshot s SET prev_turn = x.prev_turn, change = x.change
                FROM jsonb_to_recordset(%s::jsonb) AS x(id bigint, prev_turn int, change jsonb)
                WHERE s.project_id = %s AND s.id = x.id
                """,
                [_j(updates), pid],
            )

        # 8. Session aggregates: commutative updates, so arrival order does not matter.
        agg = []
        for sid in sids:
            ps = [p for p in by_session[sid] if p.snap["snapshot_id"] in created]
            if not ps:
                continue
            latest = max(ps, key=lambda p: (p.snap["ts"], p.snap["turn"]))
            agg.append({
                "id": session_refs[sid], "n": len(ps), "max_turn": max(p.snap["turn"] for p in ps),
                "first_seen": min(p.snap["ts"] for p in ps).isoformat(),
                "last_seen": latest.snap["ts"].isoformat(),
                "agent": latest.snap["agent"], "model": latest.snap["model"]["name"],
                "max_watermark": max(p.watermark for p in ps),
                "max_tier_rank": max(TIERS.index(p.tier) for p in ps),
                "failed": sum(1 for p in ps for v in p.snap["validation"] if not v["passed"]),
                "compressions": sum(len(p.snap["compression"]) for p in ps),
            })
        cur.execute(
            """
            UPDATE ingest_session s SET
                turn_count = s.turn_count + x.n,
                max_turn = GREATEST(s.max_turn, x.max_turn),
                first_seen = LEAST(s.first_seen, x.first_seen),
                agent = CASE WHEN x.last_seen >= s.last_seen OR s.agent = '' THEN x.agent ELSE s.agent END,
                model = CASE WHEN x.last_seen >= s.last_seen OR s.model = '' THEN x.model ELSE s.model END,
                last_seen = GREATEST(s.last_seen, x.last_seen),
                max_watermark = GREATEST(s.max_watermark, x.max_watermark),
                max_tier = (ARRAY['ok','warn','compress','force','break'])[1 + GREATEST(
                    array_position(ARRAY['ok','warn','compress','force','break'], s.max_tier) - 1,
                    x.max_tier_rank)],
                failed_validations = s.failed_validations + x.failed,
                compression_events = s.compression_events + x.compressions
            FROM jsonb_to_recordset(%s::jsonb) AS x(id bigint, n int, max_turn int, first_seen timestamptz,
                last_seen timestamptz, agent text, model text, max_watermark float8, max_tier_rank int,
                failed int, compressions int)
            WHERE s.project_id = %s AND s.id = x.id
            """,
            [_j(agg), pid],
        )
        refs = [created[p.snap["snapshot_id"]] for p in fresh]
        block_keys, message_keys = list(contents), list(messages)

        def _committed() -> None:
            _known_blocks.add(pid, block_keys)
            _known_messages.add(pid, message_keys)
            snapshots_committed.send(sender=Project, project_id=pid, snapshot_refs=refs)

        transaction.on_commit(_committed)
    return created


def _derive_changes(cur: Any, pid: int, fresh: list[_Prepared]) -> list[dict[str, Any]]:
    """Set `change`/`prev_turn` on FRESH and return the updates for stored turns that follow them."""
    by_ref: dict[int, list[_Prepared]] = defaultdict(list)
    for p in fresh:
        by_ref[p.session_ref].append(p)
    refs, los, his = [], [], []
    for ref, ps in by_ref.items():
        refs.append(ref)
        los.append(min(p.snap["turn"] for p in ps))
        his.append(max(p.snap["turn"] for p in ps))
    # The stored neighbourhood of the new turns: from the last stored turn before the earliest new
    # one to the first stored turn after the latest new one.
    cur.execute(
        """
        WITH b(session_ref, lo, hi) AS (SELECT * FROM unnest(%s::bigint[], %s::int[], %s::int[]))
        SELECT s.id, s.session_ref, s.turn, s.ts, s.snapshot_id::text FROM b
        JOIN LATERAL (
            SELECT id, session_ref, turn, ts, snapshot_id FROM ingest_snapshot s
            WHERE s.project_id = %s AND s.session_ref = b.session_ref
              AND s.turn >= COALESCE((SELECT max(x.turn) FROM ingest_snapshot x WHERE x.project_id = %s
                                      AND x.session_ref = b.session_ref AND x.turn < b.lo), b.lo)
              AND s.turn <= COALESCE((SELECT min(x.turn) FROM ingest_snapshot x WHERE x.project_id = %s
                                      AND x.session_ref = b.session_ref AND x.turn > b.hi), b.hi)
        ) s ON true
        """,
        [refs, los, his, pid, pid, pid],
    )
    stored = cur.fetchall()
    stored_blocks: dict[int, list[derive.BlockRef]] = defaultdict(list)
    if stored:
        cur.execute(
            """
            SELECT sb.snapshot_ref, sb.key, sb.kind, sb.content_hash, sb.tokens FROM ingest_snapshotblock sb
            WHERE sb.project_id = %s AND sb.snapshot_ref = ANY(%s) ORDER BY sb.snapshot_ref, sb.position
            """,
            [pid, [r[0] for r in stored]],
        )
        for sref, key, kind, h, n in cur.fetchall():
            stored_blocks[sref].append(derive.BlockRef(key, kind, h, n))

    # One ordered line per session of (turn, ts, snapshot_id) with either a stored id or a new turn.
    lines: dict[int, list[tuple[int, datetime, str, int | None, _Prepared | None]]] = defaultdict(list)
    for sid, sref, turn, ts, snap_uuid in stored:
        lines[sref].append((turn, ts, snap_uuid, sid, None))
    for p in fresh:
        lines[p.session_ref].append((p.snap["turn"], p.snap["ts"], p.snap["snapshot_id"], None, p))
    updates = []
    for line in lines.values():
        line.sort(key=lambda e: (e[0], e[1], e[2]))
        prev_blocks: list[derive.BlockRef] | None = None
        prev_turn: int | None = None
        prev_is_new = False
        first = True
        for turn, _ts, _u, stored_id, p in line:
            if p is not None:
                cur_blocks = [derive.BlockRef(b["key"], b["kind"], b["hash"], b["tokens"]) for b in p.blocks]
                # The first entry of the line may be a new turn with nothing stored before it.
                p.change = derive.block_change(None if first else prev_blocks, cur_blocks, prev_turn)
                p.prev_turn = prev_turn
                prev_is_new = True
            else:
                cur_blocks = stored_blocks.get(stored_id or 0, [])
                if prev_is_new:
                    updates.append({"id": stored_id, "prev_turn": prev_turn,
                                    "change": derive.block_change(prev_blocks, cur_blocks, prev_turn)})
                prev_is_new = False
            prev_blocks, prev_turn, first = cur_blocks, turn, False
    return updates
