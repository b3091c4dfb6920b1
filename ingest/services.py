"""Writes of the ingest app: the snapshot batch path."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import psycopg
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from core import pgtext
from core.models import Project
from ctxobs import tokens as tok
from ctxobs.hashing import block_hashes
from ctxobs.validate import validate_snapshot
from ctxobs.wire import TIERS, tier_for
from ingest import derive
from ingest.models import block_flags
from ingest.signals import snapshots_stored

logger = logging.getLogger(__name__)


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


@dataclass(slots=True)
class _Prepared:
    index: int
    snap: dict[str, Any]
    blocks: list[dict[str, Any]]  # the validated blocks, with hash, message_hashes, tokens, estimated
    total: int
    watermark: float
    tier: str
    kind_tokens: dict[str, int]
    counts_estimated: bool
    encoding: str
    drift: float | None
    ref: int = 0  # Snapshot.id
    session_ref: int = 0
    change: dict[str, Any] = field(default_factory=dict)
    prev_turn: int | None = None


def _prepare(index: int, snap: dict[str, Any], thresholds: tuple[float, float, float, float]) -> _Prepared:
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
    return _Prepared(
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
        # Typed as a plain dict from here: preparing completes the blocks in place (hash, message_hashes).
        prepared.append(_prepare(i, cast(dict[str, Any], snap), thresholds))

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


def _j(value: Any) -> str:
    return pgtext.json_dumps(value)


def _text_array(values: list[str]) -> str:
    """A PostgreSQL text[] literal: psycopg adapts Python lists element by element in Python,
    which cost more than the rest of the snapshot row."""
    return "{" + ",".join(['"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values]) + "}"


def _plain_array(values: list[Any]) -> str:
    """A PostgreSQL array literal of numbers or hex hashes (nothing to quote)."""
    return "{" + ",".join(map(str, values)) + "}"


_STORE_ATTEMPTS = 3


def _store(project: Project, prepared: list[_Prepared]) -> dict[str, int]:
    """Store PREPARED (new snapshots only) in one transaction; {snapshot_id: Snapshot.id} of those created."""
    for attempt in range(1, _STORE_ATTEMPTS + 1):
        try:
            return _store_once(project, prepared)
        except (IntegrityError, psycopg.IntegrityError):
            # Snapshots are COPYed, which has no ON CONFLICT: a snapshot_id that a concurrent batch
            # committed after this one's duplicate check fails the whole transaction. Run again and
            # the duplicate check reports it.
            if attempt == _STORE_ATTEMPTS:
                raise
            logger.info("ingest.batch_retry project_id=%s attempt=%d reason=concurrent_duplicate",
                        project.pk, attempt)
    raise AssertionError("unreachable")


_SNAPSHOT_COPY = (
    "COPY ingest_snapshot (project_id, id, snapshot_id, session_ref, session_id, turn, agent, ts,"
    " received_at, model_name, context_window, reserve_tokens, encoding, counts_estimated, params, tags,"
    " total_tokens, watermark, tier, kind_tokens, n_blocks, n_compression, n_recall, n_recall_injected,"
    " n_validation, n_validation_failed, retries, fallback_used, output, prompt_tokens_reported,"
    " completion_tokens, cached_tokens, latency_ms, count_drift, prev_turn, change, block_keys, block_kinds,"
    " block_hashes, block_tokens, block_flags, block_refs) FROM STDIN"
)


def _store_once(project: Project, prepared: list[_Prepared]) -> dict[str, int]:
    pid = project.pk
    now = timezone.now()
    # Database errors of the psycopg cursors below reach callers as Django's (503 handling).
    with transaction.atomic(), connection.wrap_database_errors:
        raw = connection.cursor().cursor  # Django's psycopg cursor (client-side binding), for COPY
        # Parameters bound server-side: the batch's arrays and JSON travel apart from the SQL text
        # instead of being escaped into it, which cost PostgreSQL's parser more than the rows did.
        cur = psycopg.Cursor(raw.connection)

        # 1. Duplicates already stored (a resend) are never stored twice; ids for the rest, in the
        #    same round trip (a few may go unused, as sequences allow).
        cur.execute(
            """
            SELECT ARRAY(SELECT snapshot_id::text FROM ingest_snapshot
                         WHERE project_id = %s AND snapshot_id = ANY(%s::uuid[])),
                   ARRAY(SELECT nextval('ingest_snapshot_id_seq') FROM generate_series(1, %s))
            """,
            [pid, [p.snap["snapshot_id"] for p in prepared], len(prepared)],
        )
        row = cur.fetchone()
        assert row is not None  # a SELECT without FROM returns one row
        existing_ids, new_ids = row
        existing = set(existing_ids)
        fresh = [p for p in prepared if p.snap["snapshot_id"] not in existing]
        if not fresh:
            return {}
        for p, ref in zip(fresh, new_ids, strict=False):
            p.ref = ref

        # 2. Sessions: upsert with their aggregates (commutative, so arrival order does not matter).
        #    The upsert locks each session row; that serialises concurrent batches of one session so
        #    the turn-to-turn diffs see a stable order, and sorted ids avoid deadlocks between them.
        by_session: dict[str, list[_Prepared]] = defaultdict(list)
        for p in fresh:
            by_session[p.snap["session_id"]].append(p)
        # Columns: session id, agent, model, first seen, last seen, max tier; then turns, max turn,
        # max watermark, failed validations, compression events.
        text_cols: tuple[list[str], ...] = ([], [], [], [], [], [])
        num_cols: tuple[list[Any], ...] = ([], [], [], [], [])
        for sid in sorted(by_session):
            ps = by_session[sid]
            latest = max(ps, key=lambda p: (p.snap["ts"], p.snap["turn"]))
            for col, text in zip(text_cols, (
                sid, latest.snap["agent"], latest.snap["model"]["name"],
                min(p.snap["ts"] for p in ps).isoformat(), latest.snap["ts"].isoformat(),
                TIERS[max(TIERS.index(p.tier) for p in ps)],
            ), strict=True):
                col.append(text)
            for col, num in zip(num_cols, (
                len(ps), max(p.snap["turn"] for p in ps), max(p.watermark for p in ps),
                sum(1 for p in ps for v in p.snap["validation"] if not v["passed"]),
                sum(len(p.snap["compression"]) for p in ps),
            ), strict=True):
                col.append(num)
        cur.execute(
            """
            INSERT INTO ingest_session AS s (project_id, session_id, agent, model, turn_count, max_turn,
                first_seen, last_seen, max_watermark, max_tier, failed_validations, compression_events,
                alert_count)
            SELECT %s, x.session_id, x.agent, x.model, x.n, x.max_turn, x.first_seen, x.last_seen,
                x.max_watermark, x.max_tier, x.failed, x.compressions, 0
            FROM unnest(%s::text[], %s::text[], %s::text[], %s::timestamptz[], %s::timestamptz[], %s::text[],
                %s::int[], %s::int[], %s::float8[], %s::int[], %s::int[])
                AS x(session_id, agent, model, first_seen, last_seen, max_tier, n, max_turn, max_watermark,
                     failed, compressions)
            ORDER BY x.session_id
            ON CONFLICT (project_id, session_id) DO UPDATE SET
                turn_count = s.turn_count + EXCLUDED.turn_count,
                max_turn = GREATEST(s.max_turn, EXCLUDED.max_turn),
                first_seen = LEAST(s.first_seen, EXCLUDED.first_seen),
                agent = CASE WHEN EXCLUDED.last_seen >= s.last_seen OR s.agent = ''
                             THEN EXCLUDED.agent ELSE s.agent END,
                model = CASE WHEN EXCLUDED.last_seen >= s.last_seen OR s.model = ''
                             THEN EXCLUDED.model ELSE s.model END,
                last_seen = GREATEST(s.last_seen, EXCLUDED.last_seen),
                max_watermark = GREATEST(s.max_watermark, EXCLUDED.max_watermark),
                max_tier = CASE
                    WHEN array_position(ARRAY['ok','warn','compress','force','break'], EXCLUDED.max_tier)
                         > array_position(ARRAY['ok','warn','compress','force','break'], s.max_tier)
                    THEN EXCLUDED.max_tier ELSE s.max_tier END,
                failed_validations = s.failed_validations + EXCLUDED.failed_validations,
                compression_events = s.compression_events + EXCLUDED.compression_events
            RETURNING id, session_id
            """,
            [pid, *map(_text_array, text_cols), *map(_plain_array, num_cols)],
        )
        session_refs = {sid: ref for ref, sid in cur.fetchall()}
        for p in fresh:
            p.session_ref = session_refs[p.snap["session_id"]]

        # 3. Turn-to-turn change, correct for late and repeated turns.
        updates = _derive_changes(cur, pid, fresh)

        # 4. Snapshots, by COPY. Their ids are new; a snapshot_id stored meanwhile fails the COPY
        #    (see _store).
        with raw.copy(_SNAPSHOT_COPY) as copy:
            for p in fresh:
                s = p.snap
                out = s["output"]
                usage = out["usage"] if out else {}
                model = s["model"]
                blocks = p.blocks
                refs = [b["refs"] for b in blocks] if any(b["refs"] for b in blocks) else None
                copy.write_row((
                    pid, p.ref, s["snapshot_id"], p.session_ref, s["session_id"], s["turn"], s["agent"],
                    s["ts"], now, model["name"], model["context_window"], model["reserve_tokens"], p.encoding,
                    p.counts_estimated, _j(s["params"]), _j(s["tags"]), p.total, p.watermark, p.tier,
                    _j(p.kind_tokens), len(blocks), len(s["compression"]), len(s["recall"]),
                    sum(1 for r in s["recall"] if r["injected"]), len(s["validation"]),
                    sum(1 for v in s["validation"] if not v["passed"]), s["retries"], s["fallback_used"],
                    _j(out) if out is not None else None, usage.get("prompt_tokens"),
                    usage.get("completion_tokens"), usage.get("cached_tokens"),
                    out.get("latency_ms") if out else None, p.drift, p.prev_turn, _j(p.change),
                    _text_array([b["key"] for b in blocks]), _text_array([b["kind"] for b in blocks]),
                    _plain_array([b["hash"] for b in blocks]), _plain_array([b["tokens"] for b in blocks]),
                    _plain_array([block_flags(estimated=b["estimated"], pinned=b["pinned"],
                                              compressed=b["compressed"]) for b in blocks]),
                    _j(refs) if refs is not None else None,
                ))

        # 5. Block contents and their messages, each stored once per project under its hash. Hashes
        #    this process saw committed skip the database; for the rest, the insert itself tells which
        #    blocks are new, and only their messages are sent.
        contents: dict[str, tuple[dict[str, Any], str]] = {}
        for p in fresh:
            for b in p.blocks:
                if b["hash"] not in contents:
                    contents[b["hash"]] = (b, p.encoding)
        maybe_new = sorted(_known_blocks.unknown(pid, contents))
        new_blocks: list[str] = []
        if maybe_new:
            rows = [contents[h] for h in maybe_new]
            cur.execute(
                """
                INSERT INTO ingest_blockcontent (project_id, hash, message_hashes, chars, tokens, encoding,
                    created_at)
                SELECT %s, x.hash, string_to_array(x.mh, ','), x.chars, x.tokens, x.encoding, %s
                FROM unnest(%s::text[], %s::text[], %s::int[], %s::int[], %s::text[])
                    AS x(hash, mh, chars, tokens, encoding)
                ON CONFLICT (project_id, hash) DO NOTHING
                RETURNING hash
                """,
                [pid, now, _plain_array(maybe_new),
                 _text_array([",".join(b["message_hashes"]) for b, _ in rows]),
                 _plain_array([b["chars"] for b, _ in rows]), _plain_array([b["tokens"] for b, _ in rows]),
                 _text_array([enc for _, enc in rows])],
            )
            new_blocks = [r[0] for r in cur.fetchall()]
        messages: dict[str, dict[str, Any]] = {}
        for h in new_blocks:
            b = contents[h][0]
            # Searching a batch's JSON for an escaped NUL costs more than encoding it: validation
            # already knows the blocks whose text needs no escaping (see ctxobs.wire.STORE_ESCAPE).
            verbatim = b["verbatim"]
            for mh, m in zip(b["message_hashes"], b["messages"], strict=True):
                if mh not in messages:
                    messages[mh] = m if verbatim else pgtext.escape_message(m)
        new_messages = sorted(_known_messages.unknown(pid, messages))
        if new_messages:
            cur.execute(
                """
                INSERT INTO ingest_messagecontent (project_id, hash, message)
                SELECT %s, x.hash, x.message FROM jsonb_to_recordset(%s::jsonb) AS x(hash text, message jsonb)
                ON CONFLICT (project_id, hash) DO NOTHING
                """,
                [pid, pgtext.json_dumps([{"hash": mh, "message": messages[mh]} for mh in new_messages],
                                        checked=True)],
            )

        # 6. Child rows by COPY: the snapshot ids are new, so nothing can conflict.
        if any(p.snap["compression"] for p in fresh):
            with raw.copy(
                "COPY ingest_compressionevent (project_id, snapshot_ref, position, ts, strategy, block,"
                " tokens_before, tokens_after, watermark, items, ref) FROM STDIN"
            ) as copy:
                for p in fresh:
                    for pos, c in enumerate(p.snap["compression"]):
                        copy.write_row((pid, p.ref, pos, p.snap["ts"], c["strategy"], c["block"],
                                        c["tokens_before"], c["tokens_after"], c["watermark"], _j(c["items"]),
                                        pgtext.escape_text(c["ref"])))
        if any(p.snap["recall"] for p in fresh):
            with raw.copy(
                "COPY ingest_recallitem (project_id, snapshot_ref, position, memory_id, channel, score, rank,"
                " injected, stale, conflicting, block, preview) FROM STDIN"
            ) as copy:
                for p in fresh:
                    for pos, r in enumerate(p.snap["recall"]):
                        copy.write_row((pid, p.ref, pos, r["memory_id"], r["channel"], r["score"],
                                        r["rank"], r["injected"], r["stale"], r["conflicting"], r["block"],
                                        pgtext.escape_text(r["preview"])))
        if any(p.snap["validation"] for p in fresh):
            with raw.copy(
                "COPY ingest_validationoutcome (project_id, snapshot_ref, position, layer, \"check\", passed,"
                " code, message, attempt) FROM STDIN"
            ) as copy:
                for p in fresh:
                    for pos, v in enumerate(p.snap["validation"]):
                        copy.write_row((pid, p.ref, pos, v["layer"], v["check"], v["passed"], v["code"],
                                        pgtext.escape_text(v["message"]), v["attempt"]))

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

        refs = [p.ref for p in fresh]
        block_keys, message_keys = list(contents), list(messages)
        snapshots_stored.send(sender=Project, project_id=pid, snapshot_refs=refs)

        def _committed() -> None:
            _known_blocks.add(pid, block_keys)
            _known_messages.add(pid, message_keys)

        transaction.on_commit(_committed)
    return {p.snap["snapshot_id"]: p.ref for p in fresh}


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
    # The stored neighbourhood of the new turns, with their blocks: from the last stored turn before
    # the earliest new one to the first stored turn after the latest new one.
    cur.execute(
        """
        WITH b(session_ref, lo, hi) AS (SELECT * FROM unnest(%s::bigint[], %s::int[], %s::int[]))
        SELECT s.id, s.session_ref, s.turn, s.ts, s.snapshot_id::text,
               s.block_keys, s.block_kinds, s.block_hashes, s.block_tokens FROM b
        JOIN LATERAL (
            SELECT id, session_ref, turn, ts, snapshot_id, block_keys, block_kinds, block_hashes, block_tokens
            FROM ingest_snapshot s
            WHERE s.project_id = %s AND s.session_ref = b.session_ref
              AND s.turn >= COALESCE((SELECT max(x.turn) FROM ingest_snapshot x WHERE x.project_id = %s
                                      AND x.session_ref = b.session_ref AND x.turn < b.lo), b.lo)
              AND s.turn <= COALESCE((SELECT min(x.turn) FROM ingest_snapshot x WHERE x.project_id = %s
                                      AND x.session_ref = b.session_ref AND x.turn > b.hi), b.hi)
        ) s ON true
        """,
        [refs, los, his, pid, pid, pid],
    )
    # One ordered line per session of (turn, ts, snapshot_id) with either a stored turn's blocks
    # or a new turn.
    Entry = tuple[int, datetime, str, int | None, "_Prepared | None", list[derive.BlockRef] | None]
    lines: dict[int, list[Entry]] = defaultdict(list)
    for sid, sref, turn, ts, snap_uuid, keys, kinds, hashes, tokens in cur.fetchall():
        stored = list(map(derive.BlockRef, keys, kinds, hashes, tokens))
        lines[sref].append((turn, ts, snap_uuid, sid, None, stored))
    for p in fresh:
        lines[p.session_ref].append((p.snap["turn"], p.snap["ts"], p.snap["snapshot_id"], None, p, None))
    updates: list[dict[str, Any]] = []
    for line in lines.values():
        line.sort(key=lambda e: (e[0], e[1], e[2]))
        prev_blocks: list[derive.BlockRef] | None = None
        prev_turn: int | None = None
        prev_is_new = False
        for turn, _ts, _u, stored_id, new, stored_blocks in line:
            if new is not None:
                cur_blocks = [derive.BlockRef(b["key"], b["kind"], b["hash"], b["tokens"])
                              for b in new.blocks]
                # The first entry of the line may be a new turn with nothing stored before it.
                new.change = derive.block_change(prev_blocks, cur_blocks, prev_turn)
                new.prev_turn = prev_turn
                prev_is_new = True
            else:
                cur_blocks = stored_blocks or []
                if prev_is_new:
                    updates.append({"id": stored_id, "prev_turn": prev_turn,
                                    "change": derive.block_change(prev_blocks, cur_blocks, prev_turn)})
                prev_is_new = False
            prev_blocks, prev_turn = cur_blocks, turn
    return updates


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
