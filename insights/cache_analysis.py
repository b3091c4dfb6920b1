"""The prompt-cache lens's analyzer: per new turn (and the turn after it, whose previous turn
a late arrival changes), the figures of insights.cache, written to `insights_turncache`.

Idempotent: each run recomputes the rows of its turns and replaces them, and moves the daily sums
(`insights_cacheday`, `insights_cachebreakday`) by the difference between the new rows and the
ones they replace."""

from __future__ import annotations

import logging
import time
from datetime import UTC
from typing import Any

from django.db import connection, transaction
from django.dispatch import Signal

from core.models import Project
from ingest import selectors as ingest_selectors
from ingest.types import CacheTurn
from insights import cache as C
from insights import prices
from insights.cache_models import TurnCache

logger = logging.getLogger(__name__)

# Sent after the figures of a batch are stored, with project_id and snapshot_refs (those
# analysed): alerts evaluates its cache rules on it.
cache_analyzed = Signal()

VERSION_TAG = "assembly_version"


def _blocks(turn: CacheTurn, messages: dict[int, list[dict[str, Any]]]) -> C.TurnBlocks:
    return C.TurnBlocks(
        hashes=turn.block_hashes,
        keys=turn.block_keys,
        kinds=turn.block_kinds,
        tokens=turn.block_tokens,
        params=turn.params or {},
        messages=messages,
    )


def turn_cache_row(
    *,
    project_id: int,
    cur: CacheTurn,
    prev: CacheTurn | None,
    cur_messages: dict[int, list[dict[str, Any]]],
    prev_messages: dict[int, list[dict[str, Any]]],
    table: dict[str, prices.Price],
) -> TurnCache:
    """The lens's row for CUR after PREV (unsaved)."""
    provider = C.provider_of(cur.model_name, cur.params or {}, cur.tags or {})
    cb = _blocks(cur, cur_messages)
    pb = _blocks(prev, prev_messages) if prev is not None else None
    prefix = C.shared_prefix(pb, cb)
    prompt = cur.prompt_tokens_reported if cur.prompt_tokens_reported is not None else cur.total_tokens
    gap = C.gap_seconds(prev.ts if prev is not None else None, cur.ts)
    expected = C.expected_cache(
        provider=provider,
        model=cur.model_name,
        prefix=prefix,
        prev=pb,
        cur=cb,
        prompt_tokens=prompt,
        gap_s=gap,
    )
    # What keeping the whole previous prompt as the prefix would have read, sent in time.
    whole = (
        C.Prefix(blocks=len(pb.hashes), tokens=prev.total_tokens, reason=C.KEPT) if pb and prev else prefix
    )
    potential = C.expected_cache(
        provider=provider,
        model=cur.model_name,
        prefix=whole,
        prev=pb,
        cur=cb,
        prompt_tokens=prompt,
        gap_s=gap,
        ignore_ttl=True,
        whole=True,
    )
    if potential.cached < expected.cached:
        potential = expected
    price = prices.price_for(cur.model_name, table)
    costs = None
    if price is not None:
        costs = C.cost(
            price=price,
            prompt_tokens=prompt,
            completion_tokens=cur.completion_tokens or 0,
            expected=expected,
            potential=potential,
            reported_cached=cur.cached_tokens,
            reported_written=cur.cache_write_tokens,
        )
    version = (cur.tags or {}).get(VERSION_TAG)
    return TurnCache(
        project_id=project_id,
        snapshot_ref=cur.ref,
        session_ref=cur.session_ref,
        turn=cur.turn,
        received_at=cur.received_at,
        ts=cur.ts,
        model_name=cur.model_name[:256],
        provider=provider,
        assembly_version=str(version)[:128] if version is not None else "",
        prev_turn=prev.turn if prev is not None else None,
        gap_seconds=gap,
        prompt_tokens=prompt,
        completion_tokens=cur.completion_tokens or 0,
        n_blocks=len(cur.block_hashes),
        prefix_blocks=prefix.blocks,
        prefix_tokens=prefix.tokens,
        reason=prefix.reason,
        detail=prefix.detail[:500],
        break_position=prefix.position,
        break_key=prefix.key[:128],
        break_kind=prefix.kind[:20],
        expected_cached=expected.cached,
        expected_written=expected.written,
        potential_cached=potential.cached,
        reported_cached=cur.cached_tokens,
        note=expected.note[:200],
        cost_no_cache=costs.no_cache if costs else None,
        cost_expected=costs.expected if costs else None,
        cost_actual=costs.actual if costs else None,
        cost_lost=costs.lost if costs else None,
    )


_DAY_SUMS_LOCK = 0x6361_6368  # advisory lock namespace of a project's cache rows and day sums
_OLD_ROWS_SQL = """
    SELECT received_at, prompt_tokens, expected_cached, reported_cached, reason, break_key, break_kind,
           cost_no_cache, cost_expected, cost_actual, cost_lost
    FROM insights_turncache WHERE project_id = %s AND snapshot_ref = ANY(%s)
"""
_DAY_SUMS_SQL = """
WITH d AS (
    INSERT INTO insights_cacheday AS t (project_id, day, turns, prompt_tokens, cached_tokens,
        expected_cached, reported_turns, breaks, cost_no_cache, cost_expected, cost_actual, cost_lost,
        priced_turns)
    SELECT %(p)s, * FROM unnest(%(day)s::date[], %(turns)s::bigint[], %(prompt)s::bigint[],
        %(cached)s::bigint[], %(expected)s::bigint[], %(reported)s::bigint[], %(breaks)s::bigint[],
        %(no_cache)s::float8[], %(c_expected)s::float8[], %(c_actual)s::float8[], %(lost)s::float8[],
        %(priced)s::bigint[])
    ON CONFLICT (project_id, day) DO UPDATE SET
        turns = t.turns + EXCLUDED.turns, prompt_tokens = t.prompt_tokens + EXCLUDED.prompt_tokens,
        cached_tokens = t.cached_tokens + EXCLUDED.cached_tokens,
        expected_cached = t.expected_cached + EXCLUDED.expected_cached,
        reported_turns = t.reported_turns + EXCLUDED.reported_turns, breaks = t.breaks + EXCLUDED.breaks,
        cost_no_cache = t.cost_no_cache + EXCLUDED.cost_no_cache,
        cost_expected = t.cost_expected + EXCLUDED.cost_expected,
        cost_actual = t.cost_actual + EXCLUDED.cost_actual, cost_lost = t.cost_lost + EXCLUDED.cost_lost,
        priced_turns = t.priced_turns + EXCLUDED.priced_turns
)
INSERT INTO insights_cachebreakday AS t (project_id, day, break_key, reason, break_kind, turns)
SELECT %(p)s, * FROM unnest(%(b_day)s::date[], %(b_key)s::text[], %(b_reason)s::text[], %(b_kind)s::text[],
                            %(b_turns)s::bigint[])
ON CONFLICT (project_id, day, break_key, reason) DO UPDATE SET
    turns = t.turns + EXCLUDED.turns, break_kind = greatest(t.break_kind, EXCLUDED.break_kind)
"""
_DAY_FIELDS = ("turns", "prompt", "cached", "expected", "reported", "breaks", "no_cache", "c_expected",
               "c_actual", "lost", "priced")


def _day_sums_apply(*, project_id: int, rows: list[TurnCache]) -> None:
    """Move the day sums by what ROWS change: minus the stored rows they replace, plus their own.
    Inside the transaction that writes ROWS; the project's lock makes the read of the stored rows
    and the write one step, so two analyses of the same turn at once cannot both count it."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_DAY_SUMS_LOCK, project_id])
        cur.execute(_OLD_ROWS_SQL, [project_id, [r.snapshot_ref for r in rows]])
        old = cur.fetchall()
        days: dict[Any, list[float]] = {}
        breaks: dict[tuple[Any, str, str], list[Any]] = {}

        def add(sign: int, received_at: Any, prompt: int, expected: int, reported: int | None, reason: str,
                key: str, kind: str, no_cache: float | None, c_expected: float | None,
                c_actual: float | None, lost: float | None) -> None:
            day = received_at.astimezone(UTC).date()
            broke = reason not in C.NOT_BREAKS
            sums = days.setdefault(day, [0] * len(_DAY_FIELDS))
            for i, v in enumerate((
                1, prompt, reported if reported is not None else expected, expected, reported is not None,
                broke, no_cache or 0.0, c_expected or 0.0,
                c_actual if c_actual is not None else (c_expected or 0.0), lost or 0.0, no_cache is not None,
            )):
                sums[i] += sign * v
            if broke:
                b = breaks.setdefault((day, key, reason), [kind, 0])
                b[1] += sign

        for o in old:
            add(-1, *o)
        for r in rows:
            add(1, r.received_at, r.prompt_tokens, r.expected_cached, r.reported_cached, r.reason,
                r.break_key, r.break_kind, r.cost_no_cache, r.cost_expected, r.cost_actual, r.cost_lost)
        params: dict[str, Any] = {"p": project_id, "day": list(days)}
        for i, name in enumerate(_DAY_FIELDS):
            params[name] = [sums[i] for sums in days.values()]
        params.update(b_day=[k[0] for k in breaks], b_key=[k[1] for k in breaks],
                      b_reason=[k[2] for k in breaks], b_kind=[v[0] for v in breaks.values()],
                      b_turns=[v[1] for v in breaks.values()])
        cur.execute(_DAY_SUMS_SQL, params)


def cache_analyze_batch(*, project_id: int, snapshot_refs: list[int]) -> None:
    """The analyzer registered as "cache" (insights.pipeline)."""
    cache_analyze(project_id=project_id, snapshot_refs=snapshot_refs)


def cache_analyze(*, project_id: int, snapshot_refs: list[int]) -> int:
    """Compute and store the lens's figures of SNAPSHOT_REFS and of the turns right after them;
    the number of rows written. Four queries to read, whatever the batch's size."""
    started = time.perf_counter()
    pairs = ingest_selectors.cache_turn_pairs(project_id=project_id, snapshot_refs=snapshot_refs)
    if not pairs:
        return 0
    refs = sorted({t.ref for pair in pairs for t in pair if t is not None})
    blocks = ingest_selectors.snapshots_blocks(project_id=project_id, snapshot_refs=refs)
    messages = {ref: {b["position"]: b["messages"] for b in bl} for ref, bl in blocks.items()}
    project_table = Project.objects.filter(pk=project_id).values_list("price_table", flat=True).first()
    table = prices.price_table(project_table)
    rows = [
        turn_cache_row(
            project_id=project_id,
            cur=cur,
            prev=prev,
            cur_messages=messages.get(cur.ref, {}),
            prev_messages=messages.get(prev.ref, {}) if prev is not None else {},
            table=table,
        )
        for cur, prev in pairs
    ]
    fields = [
        f.name
        for f in TurnCache._meta.concrete_fields
        if not f.primary_key and f.name not in ("project", "snapshot_ref")
    ]
    with transaction.atomic():
        _day_sums_apply(project_id=project_id, rows=rows)
        TurnCache.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["project", "snapshot_ref"],
            update_fields=fields,
        )
    logger.info(
        "insights.cache_analyzed project_id=%s snapshots=%d rows=%d ms=%.1f",
        project_id,
        len(snapshot_refs),
        len(rows),
        (time.perf_counter() - started) * 1000,
    )
    for receiver, result in cache_analyzed.send_robust(
        sender=TurnCache, project_id=project_id, snapshot_refs=[r.snapshot_ref for r in rows]
    ):
        if isinstance(result, Exception):
            logger.error(
                "insights.cache_receiver_failed receiver=%s project_id=%s error=%s",
                getattr(receiver, "__qualname__", receiver),
                project_id,
                type(result).__name__,
            )
    return len(rows)
