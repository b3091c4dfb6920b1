"""Reads behind the dashboard pages: one query per fact, whatever the number of rows shown.

Row reads go through ingest.selectors; this module adds what only the pages need (sparklines,
the turns table, the turn-to-turn comparison, the project overview aggregates).
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, cast

from django.db import connection, transaction
from django.utils import timezone

from core import registry, textdiff
from core.models import Project
from ctxobs.wire import occurrence_keys
from ingest import derive, selectors
from ingest.models import RECEIVED_EVER, AgentSession, Snapshot
from ingest.types import (
    AlertMarker,
    BlockDiff,
    ProjectOverview,
    StoredBlock,
    TurnChartRow,
    TurnComparison,
    TurnsPage,
    TurnTableRow,
)

SPARK_POINTS = 24
TURN_TABLE_FIELDS = (
    "id",
    "snapshot_id",
    "turn",
    "ts",
    "total_tokens",
    "watermark",
    "tier",
    "kind_tokens",
    "n_compression",
    "n_recall",
    "n_recall_injected",
    "n_validation",
    "n_validation_failed",
    "count_drift",
    "context_window",
    "reserve_tokens",
    "latency_ms",
    "prompt_tokens_reported",
)


def session_alerts(*, project_id: int, session_ref: int) -> list[AlertMarker]:
    """Alert markers of a session (turn, rule_kind, severity, title, alert_id); [] without alerts."""
    # Provided by the alerts app when installed (core.registry), so ingest never imports it.
    markers = registry.session_markers(project_id=project_id, session_ref=session_ref, sources=("alert",))
    return cast(list[AlertMarker], markers)


def session_markers_split(
    *, project_id: int, session_ref: int
) -> tuple[list[AlertMarker], list[AlertMarker]]:
    """A session's alert markers and its other markers (lint findings: source "lint"), from one
    call of each provider."""
    markers = cast(list[AlertMarker], registry.session_markers(project_id=project_id,
                                                               session_ref=session_ref))
    alerts = [m for m in markers if m.get("source") == "alert"]
    return alerts, [m for m in markers if m.get("source") != "alert"]


def sessions_sparklines(*, project_id: int, sessions: list[AgentSession]) -> dict[int, list[float]]:
    """Per session on a page: its watermark over the turns, reduced to SPARK_POINTS buckets
    (the maximum of each), in one query."""
    if not sessions:
        return {}
    refs = [s.id for s in sessions]
    tops = [max(s.max_turn, 0) for s in sessions]
    # The day partitions from the page's earliest first turn on (a page shows recent sessions).
    since = min(s.received_since for s in sessions)
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT s.session_ref,
                   LEAST(%s - 1, GREATEST(0, floor(s.turn::float8 * %s / (b.max_turn + 1))))::int AS bucket,
                   max(s.watermark)
            FROM unnest(%s::bigint[], %s::int[]) AS b(ref, max_turn)
            JOIN ingest_snapshot s ON s.project_id = %s AND s.session_ref = b.ref AND s.received_at >= %s
            GROUP BY 1, 2 ORDER BY 1, 2
            """,
            [SPARK_POINTS, SPARK_POINTS, refs, tops, project_id, since],
        )
        out: dict[int, list[float]] = defaultdict(list)
        for ref, _bucket, wm in cur.fetchall():
            out[ref].append(float(wm))
    return dict(out)


def timeline_rows(*, project: Project, session: AgentSession) -> list[TurnChartRow]:
    """What the timeline chart needs of every turn, in turn order: one query, only these columns
    (a 2,000-turn session stays well under 100 ms)."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT turn, watermark, kind_tokens::text, n_compression, n_validation_failed,
                   CASE WHEN n_compression > 0 THEN (
                       SELECT count(*) FROM ingest_compressionevent c
                       WHERE c.project_id = s.project_id AND c.snapshot_ref = s.id
                         AND c.received_at = s.received_at AND c.source = 'provider'
                   ) ELSE 0 END
            FROM ingest_snapshot s WHERE project_id = %s AND session_ref = %s AND received_at >= %s
            ORDER BY turn, ts, snapshot_id
            """,
            [project.pk, session.id, session.received_since],
        )
        return [
            {
                "turn": t,
                "watermark": wm,
                "kind_tokens": json.loads(kt) if kt else {},
                "n_compression": nc,
                "n_validation_failed": nf,
                "n_provider_edits": npe,
            }
            for t, wm, kt, nc, nf, npe in cur.fetchall()
        ]


def turns_page(*, project: Project, session: AgentSession, page: int, per_page: int) -> TurnsPage:
    """One page of the turns table, in turn order (the count comes from the session row)."""
    total = session.turn_count
    pages = max(1, -(-total // per_page))
    page = min(max(1, page), pages)
    rows = cast(list[TurnTableRow], list(
        selectors.session_turns(project=project, session=session)
        .order_by("turn", "ts", "snapshot_id")
        .values(*TURN_TABLE_FIELDS)[(page - 1) * per_page : page * per_page]
    ))
    return {
        "rows": rows,
        "page": page,
        "pages": pages,
        "per_page": per_page,
        "total": total,
        "has_prev": page > 1,
        "has_next": page < pages,
    }


def _refs(blocks: list[StoredBlock]) -> list[derive.BlockRef]:
    return [
        derive.BlockRef(key=b["key"], kind=b["kind"], hash=b["content_hash"], tokens=b["tokens"])
        for b in blocks
    ]


def _keyed(blocks: list[StoredBlock]) -> dict[str, StoredBlock]:
    return dict(zip(occurrence_keys(b["key"] for b in blocks), blocks, strict=True))


def turn_comparison(
    *, project_id: int, snapshot: Snapshot, other: Snapshot | None
) -> tuple[list[StoredBlock], TurnComparison | None]:
    """The blocks of SNAPSHOT and, when OTHER is given, what changed from OTHER to SNAPSHOT:
    blocks entered/left/grew/shrank/changed, with a word diff of each block present in both
    whose content differs. Two queries."""
    refs = [snapshot.id] + ([other.id] if other is not None else [])
    by_ref = selectors.snapshots_blocks(project_id=project_id, snapshot_refs=refs)
    blocks = by_ref[snapshot.id]
    if other is None:
        return blocks, None
    before = by_ref[other.id]
    change = derive.block_change(_refs(before), _refs(blocks), other.turn)
    old, new = _keyed(before), _keyed(blocks)
    diffs: list[BlockDiff] = []
    for key, b in new.items():
        a = old.get(key)
        if a is None or a["content_hash"] == b["content_hash"]:
            continue
        segments = textdiff.word_diff(
            textdiff.messages_text(a["messages"]), textdiff.messages_text(b["messages"])
        )
        stats = textdiff.diff_stats(segments)
        diffs.append(
            {
                "key": key,
                "kind": b["kind"],
                "before": a["tokens"],
                "after": b["tokens"],
                "delta": b["tokens"] - a["tokens"],
                "segments": segments,
                "inserted": stats["inserted"],
                "deleted": stats["deleted"],
            }
        )
    comparison: TurnComparison = {
        **change, "diffs": diffs, "other_turn": other.turn, "is_previous": snapshot.prev_turn == other.turn,
    }
    return blocks, comparison


# --- project overview ---------------------------------------------------------------
WM_BUCKET = 0.05
WM_BUCKETS = 24  # 0 .. 120%
BAND = 0.10
BANDS = 11  # 0 .. 110%+
# A gap between two turns longer than this is idle time, not time spent in a tier.
MAX_TURN_GAP_SECONDS = 600


# Snapshots inserted this many ids before the last refresh's mark are looked at again, and counted
# if that refresh could not see them: a batch still in flight then (ids taken, not yet committed)
# becomes visible later with ids below the mark.
RESCAN_IDS = 10_000
_ROLLUP_LOCK = 0x6F76_7277  # advisory lock namespace of the overview refresh

# The rollup is kept per (day, session) in `ingest_overview_session_day`, and per day in
# `ingest_overview_day` as the sum of that day's session rows. A refresh recomputes only the
# (day, session) pairs that new snapshots touched, from those sessions' own turns, and moves each
# day's row by the difference between the session rows it wrote and those they replaced: its cost
# follows the new turns' sessions, not the day's volume.
# What a refresh counts: the snapshots with ids past its mark, and those below the mark that the
# last refresh may not have seen (ids are drawn before a batch commits, so a batch still running
# then becomes visible later with ids below the mark). Each row's 32-bit xmin is widened against
# this statement's snapshot; a row written by a transaction at or past the last refresh's
# snapshot xmin (`seen_xmin`: every older one had ended, its rows counted if committed) is looked
# at again, within RESCAN_IDS ids below the mark. Recomputing a (day, session) pair is idempotent,
# so one looked at twice is only work. Returns one row: the highest id seen, this statement's
# snapshot xmin and xmax, and, as JSON, the (day, session) pairs to recompute with the turns each
# counted so far. A touched session's previous day with turns is recomputed too (the time its last
# turn there spent in its tier changes once a next turn exists).
_ARRIVED_SQL = """
WITH snap AS MATERIALIZED (SELECT pg_current_snapshot() AS s),
top64 AS (SELECT pg_snapshot_xmax(s)::text::bigint AS x FROM snap),
arrived AS (
    SELECT id, ts, session_ref FROM ingest_snapshot WHERE project_id = %(pid)s AND id > %(covered)s
    UNION ALL
    SELECT id, ts, session_ref FROM (
        SELECT s.id, s.ts, s.session_ref,
               t.x - ((t.x %% 4294967296 - s.xmin::text::bigint + 4294967296) %% 4294967296) AS xid
        FROM ingest_snapshot s, top64 t
        WHERE s.project_id = %(pid)s AND s.id > %(covered)s - %(rescan)s AND s.id <= %(covered)s
    ) w
    WHERE w.xid >= %(seen_xmin)s
),
new AS (SELECT DISTINCT date_trunc('day', ts)::date AS day, session_ref FROM arrived),
pairs AS (
    SELECT day, session_ref FROM new
    UNION
    SELECT p.day, n.session_ref FROM new n
    CROSS JOIN LATERAL (SELECT max(o.day) AS day FROM ingest_overview_session_day o
                        WHERE o.project_id = %(pid)s AND o.session_ref = n.session_ref AND o.day < n.day) p
    WHERE p.day IS NOT NULL
)
SELECT (SELECT max(id) FROM arrived),
       (SELECT pg_snapshot_xmin(s)::text::bigint FROM snap),
       (SELECT pg_snapshot_xmax(s)::text::bigint FROM snap),
       (SELECT coalesce(json_agg(json_build_array(p.day, p.session_ref, coalesce(o.turns, 0))), '[]')::text
        FROM pairs p LEFT JOIN ingest_overview_session_day o
          ON o.project_id = %(pid)s AND o.day = p.day AND o.session_ref = p.session_ref)
"""

_SESSION_DAYS_SQL = """
WITH t AS (SELECT * FROM unnest(%(days)s::date[], %(refs)s::bigint[]) AS t(day, session_ref)),
b AS (
    -- Each day with the 10 minutes after it, so a turn just before midnight finds its successor.
    -- The session's first turn bounds the partitions read (received_at >= first_received).
    SELECT t.day, COALESCE(sess.first_received, %(ever)s) AS since, s.session_ref, s.id, s.received_at,
           s.turn, s.ts, s.watermark, s.tier, s.n_recall, s.n_recall_injected, s.n_validation,
           s.n_validation_failed, s.n_compression,
           lead(s.ts) OVER (PARTITION BY t.day, s.session_ref ORDER BY s.turn, s.ts) AS nxt
    FROM t
    JOIN ingest_session sess ON sess.project_id = %(pid)s AND sess.id = t.session_ref
    JOIN ingest_snapshot s
      ON s.project_id = %(pid)s AND s.session_ref = t.session_ref
     AND s.received_at >= COALESCE(sess.first_received, %(ever)s)
     AND s.ts >= t.day AND s.ts < t.day + interval '1 day' + %(gap)s * interval '1 s'
),
r AS (
    SELECT b.*, LEAST(%(nb)s - 1, floor(watermark / %(bw)s))::int AS bucket,
           CASE WHEN nxt IS NOT NULL THEN LEAST(%(gap)s, extract(epoch FROM nxt - ts))
                -- the next turn is further away than the gap cap: the cap; no next turn: nothing
                WHEN EXISTS (SELECT 1 FROM ingest_snapshot n WHERE n.project_id = %(pid)s
                             AND n.session_ref = b.session_ref AND n.turn > b.turn
                             AND n.received_at >= b.since) THEN %(gap)s
                ELSE 0 END AS gap
    FROM b WHERE ts < day + interval '1 day'
),
per_pair AS (
    SELECT day, session_ref, count(*) AS turns,
           coalesce(sum(n_recall), 0) AS recalled, coalesce(sum(n_recall_injected), 0) AS injected,
           count(*) FILTER (WHERE n_validation > 0) AS validated,
           count(*) FILTER (WHERE n_validation_failed > 0) AS failed,
           coalesce(sum(n_compression), 0) AS compressions, coalesce(max(watermark), 0) AS max_watermark
    FROM r GROUP BY day, session_ref
),
per_bucket AS (
    SELECT day, session_ref, jsonb_object_agg(bucket, jsonb_build_array(n, v, f)) AS buckets
    FROM (SELECT day, session_ref, bucket, count(*) AS n, count(*) FILTER (WHERE n_validation > 0) AS v,
                 count(*) FILTER (WHERE n_validation_failed > 0) AS f
          FROM r GROUP BY day, session_ref, bucket) x
    GROUP BY day, session_ref
),
per_tier AS (
    SELECT day, session_ref, jsonb_object_agg(tier, jsonb_build_array(n, secs)) AS tiers
    FROM (SELECT day, session_ref, tier, count(*) AS n, sum(gap)::float8 AS secs
          FROM r GROUP BY day, session_ref, tier) x
    GROUP BY day, session_ref
),
per_strategy AS (
    -- A turn's compression events count on its day.
    SELECT day, session_ref, jsonb_object_agg(strategy, n) AS strategies
    FROM (SELECT r.day, r.session_ref, c.strategy, count(*) AS n
          FROM r JOIN ingest_compressionevent c
            ON c.project_id = %(pid)s AND c.snapshot_ref = r.id AND c.received_at = r.received_at
          WHERE r.n_compression > 0
          GROUP BY r.day, r.session_ref, c.strategy) x
    GROUP BY day, session_ref
)
INSERT INTO ingest_overview_session_day (project_id, day, session_ref, turns, recalled, injected, validated,
                                         failed, compressions, max_watermark, buckets, tiers, strategies)
SELECT %(pid)s, p.day, p.session_ref, p.turns, p.recalled, p.injected, p.validated, p.failed, p.compressions,
       p.max_watermark, pb.buckets, pt.tiers, coalesce(ps.strategies, '{}'::jsonb)
FROM per_pair p JOIN per_bucket pb USING (day, session_ref) JOIN per_tier pt USING (day, session_ref)
LEFT JOIN per_strategy ps USING (day, session_ref)
RETURNING day, turns, recalled, injected, validated, failed, compressions, max_watermark::float8,
          buckets::text, tiers::text, strategies::text
"""

# The columns of a rollup row after (project_id, day[, session_ref]), as the refresh sums them.
_SUMS = ("turns", "recalled", "injected", "validated", "failed", "compressions")
_JSON_SUMS = ("buckets", "tiers", "strategies")


def _json_add(into: dict[str, Any], other: dict[str, Any], sign: int) -> None:
    """Add OTHER (a rollup's {key: count} or {key: [counts]}) into INTO, times SIGN."""
    for key, value in other.items():
        if isinstance(value, list):
            have = into.setdefault(key, [0] * len(value))
            into[key] = [a + sign * (b or 0) for a, b in zip(have, value, strict=True)]
        else:
            into[key] = into.get(key, 0) + sign * value


def _json_clean(sums: dict[str, Any]) -> dict[str, Any]:
    """SUMS without the keys no turn counts any more (a count of 0; its seconds rounded away)."""
    return {k: v for k, v in sums.items() if (v[0] if isinstance(v, list) else v)}


class _DayDelta:
    """How one day's row moves: the session rows written (+1) minus those they replaced (-1)."""

    def __init__(self) -> None:
        self.sessions = 0
        self.sums = dict.fromkeys(_SUMS, 0)
        self.max_watermark = 0.0
        self.json: dict[str, dict[str, Any]] = {k: {} for k in _JSON_SUMS}

    def add(self, row: tuple[Any, ...], sign: int) -> None:
        # row: (turns, recalled, injected, validated, failed, compressions, max_watermark, buckets,
        # tiers, strategies), the JSON ones as text.
        self.sessions += sign
        for name, value in zip(_SUMS, row[:6], strict=True):
            self.sums[name] += sign * value
        if sign > 0:  # a session's day only gains turns, so its maximum only rises
            self.max_watermark = max(self.max_watermark, row[6])
        for name, text in zip(_JSON_SUMS, row[7:], strict=True):
            _json_add(self.json[name], json.loads(text), sign)


def _days_apply(cur: Any, project_id: int, deltas: dict[date, _DayDelta]) -> None:
    """Move each day's row of PROJECT_ID by its delta (a day left without sessions goes)."""
    if not deltas:
        return
    cur.execute(
        "SELECT day, sessions, turns, recalled, injected, validated, failed, compressions, max_watermark,"
        " buckets::text, tiers::text, strategies::text FROM ingest_overview_day"
        " WHERE project_id = %s AND day = ANY(%s::date[])",
        [project_id, list(deltas)],
    )
    current = {r[0]: r for r in cur.fetchall()}
    gone: list[date] = []
    rows: list[tuple[Any, ...]] = []
    for day, delta in deltas.items():
        old = current.get(day)
        sessions = (old[1] if old else 0) + delta.sessions
        if sessions <= 0:
            gone.append(day)
            continue
        sums = [(old[2 + i] if old else 0) + delta.sums[name] for i, name in enumerate(_SUMS)]
        max_wm = max(old[8] if old else 0.0, delta.max_watermark)
        blobs = []
        for i, name in enumerate(_JSON_SUMS):
            merged = json.loads(old[9 + i]) if old else {}
            _json_add(merged, delta.json[name], 1)
            blobs.append(json.dumps(_json_clean(merged)))
        rows.append((project_id, day, sessions, *sums, max_wm, *blobs))
    if gone:
        cur.execute("DELETE FROM ingest_overview_day WHERE project_id = %s AND day = ANY(%s::date[])",
                    [project_id, gone])
    if rows:
        cur.executemany(
            """
            INSERT INTO ingest_overview_day (project_id, day, sessions, turns, recalled, injected, validated,
                                             failed, compressions, max_watermark, buckets, tiers, strategies)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s::jsonb)
            ON CONFLICT (project_id, day) DO UPDATE
            SET sessions = EXCLUDED.sessions, turns = EXCLUDED.turns, recalled = EXCLUDED.recalled,
                injected = EXCLUDED.injected, validated = EXCLUDED.validated, failed = EXCLUDED.failed,
                compressions = EXCLUDED.compressions, max_watermark = EXCLUDED.max_watermark,
                buckets = EXCLUDED.buckets, tiers = EXCLUDED.tiers, strategies = EXCLUDED.strategies
            """,
            rows,
        )


# The overview's periods, in days (None: all time), as its view offers them.
OVERVIEW_RANGES: dict[str, int | None] = {"1": 1, "7": 7, "30": 30, "90": 90, "all": None}
# A view brings the rollup up to date itself only while the days to recompute hold at most this
# many turns (about 0.1 s of work); past it, the beat task `ingest.overview_refresh` does, and the
# page says how fresh its figures are.
INLINE_REFRESH_MAX_TURNS = 20_000


def _period_start(today: date, days: int | None) -> date | None:
    return None if days is None else today - timedelta(days=days - 1)


def _session_counts_sql(today: date) -> tuple[str, list[Any]]:
    """One statement counting a project's sessions (all, hot, alerted) seen in each period."""
    cols: list[str] = []
    args: list[Any] = []
    for days in OVERVIEW_RANGES.values():
        start = _period_start(today, days)
        seen = "true" if start is None else "last_seen >= %s"
        for extra in ("", " AND max_tier IN ('force', 'break')", " AND alert_count > 0"):
            cols.append(f"count(*) FILTER (WHERE {seen}{extra})")
            if start is not None:
                args.append(start)
    return f"SELECT {', '.join(cols)} FROM ingest_session WHERE project_id = %s", args  # noqa: S608


def overview_refresh(*, project_id: int, max_turns: int | None = None) -> list[date] | None:
    """Bring the rollup of PROJECT_ID up to date: recompute the (day, session) rows that snapshots
    added since the last refresh fall on (late ones for old days included), with each touched
    session's previous day (the time its last turn there spent in its tier may have changed), move
    those days' rows by the difference, and count the sessions of each period. Returns the days
    moved; None when MAX_TURNS is given and the touched sessions' days hold more turns than that
    (nothing is done: the beat task refreshes). Safe to run concurrently: a refresh already
    running for the project makes this one return at once."""
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [_ROLLUP_LOCK, project_id])
        if not cur.fetchone()[0]:
            return []
        # Two statements, not one: a single one carrying the days' lookup (which runs only when
        # something arrived) is estimated at the cost of scanning the whole store, and past about
        # a million snapshots that estimate makes PostgreSQL JIT-compile it on every view
        # (~100 ms), whether the lookup runs or not (bench/scale.py).
        cur.execute(
            """
            SELECT coalesce(st.covered_snapshot, 0), coalesce(st.seen_xmin, 0), coalesce(st.seen_xmax, 0),
                   (SELECT max(id) FROM ingest_snapshot WHERE project_id = %(pid)s)
            FROM (SELECT 1) AS one LEFT JOIN ingest_overview_state st ON st.project_id = %(pid)s
            """,
            {"pid": project_id},
        )
        covered, seen_xmin, seen_xmax, top = cur.fetchone()
        # Nothing past the mark, and nothing was running when the last refresh read: nothing to do.
        if top is None or (top <= covered and seen_xmin >= seen_xmax):
            return []
        if max_turns is not None and top - covered > max_turns:
            # More new snapshots than the bound (ids are drawn in order; gaps only overcount):
            # even looking up their days would cost more than the bound allows.
            return None
        cur.execute(
            _ARRIVED_SQL,
            {"pid": project_id, "covered": covered, "rescan": RESCAN_IDS, "seen_xmin": seen_xmin},
        )
        seen_top, xmin, xmax, pairs_json = cur.fetchone()
        pairs = [(date.fromisoformat(d), ref, n) for d, ref, n in json.loads(pairs_json)]
        if not pairs:
            if seen_xmin < seen_xmax:  # what was running then left no turn to count: a newer snapshot
                cur.execute(
                    "UPDATE ingest_overview_state SET seen_xmin = %s, seen_xmax = %s WHERE project_id = %s",
                    [xmin, xmax, project_id],
                )
            return []
        if max_turns is not None and sum(n for _, _, n in pairs) + top - covered > max_turns:
            return None
        params: dict[str, Any] = {
            "pid": project_id,
            "days": [d for d, _, _ in pairs],
            "refs": [r for _, r, _ in pairs],
            "gap": MAX_TURN_GAP_SECONDS,
            "nb": WM_BUCKETS,
            "bw": WM_BUCKET,
            "ever": RECEIVED_EVER,
        }
        touched = (
            "project_id = %(pid)s AND (day, session_ref) IN "
            "(SELECT * FROM unnest(%(days)s::date[], %(refs)s::bigint[]))"
        )
        deltas: dict[date, _DayDelta] = defaultdict(_DayDelta)
        cur.execute(
            f"""
            DELETE FROM ingest_overview_session_day WHERE {touched}
            RETURNING day, turns, recalled, injected, validated, failed, compressions, max_watermark::float8,
                      buckets::text, tiers::text, strategies::text
            """,  # noqa: S608 - only a fixed fragment is interpolated
            params,
        )
        for row in cur.fetchall():
            deltas[row[0]].add(row[1:], -1)
        cur.execute(_SESSION_DAYS_SQL, params)
        for row in cur.fetchall():
            deltas[row[0]].add(row[1:], 1)
        _days_apply(cur, project_id, deltas)
        today = timezone.now().astimezone(UTC).date()
        sql, args = _session_counts_sql(today)
        cur.execute(sql, [*args, project_id])
        row = cur.fetchone()
        counts: dict[str, Any] = {"day": today.isoformat()}
        for i, key in enumerate(OVERVIEW_RANGES):
            counts[key] = list(row[3 * i : 3 * i + 3])
        cur.execute(
            """
            INSERT INTO ingest_overview_state (project_id, covered_snapshot, refreshed_at, session_counts,
                                               seen_xmin, seen_xmax)
            VALUES (%s, %s, now(), %s::jsonb, %s, %s)
            ON CONFLICT (project_id) DO UPDATE
            SET covered_snapshot = EXCLUDED.covered_snapshot, refreshed_at = EXCLUDED.refreshed_at,
                session_counts = EXCLUDED.session_counts, seen_xmin = EXCLUDED.seen_xmin,
                seen_xmax = EXCLUDED.seen_xmax
            """,
            [project_id, max(covered, seen_top or 0), json.dumps(counts), xmin, xmax],
        )
    return sorted(deltas)


def overview_rebuild(*, project_id: int) -> list[date] | None:
    """Recompute PROJECT_ID's whole rollup from its stored turns (what a refresh after the first
    keeps up to date); the days it holds."""
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_ROLLUP_LOCK, project_id])
        for table in ("ingest_overview_session_day", "ingest_overview_day", "ingest_overview_state"):
            cur.execute(f"DELETE FROM {table} WHERE project_id = %s", [project_id])  # noqa: S608
    return overview_refresh(project_id=project_id)


def overview_refresh_all() -> int:
    """Bring every project's overview rollup up to date, however much arrived (the beat task);
    the projects refreshed."""
    from core.models import Project

    n = 0
    for pid in Project.objects.order_by("pk").values_list("pk", flat=True):
        if overview_refresh(project_id=pid):
            n += 1
    return n


def project_overview(*, project: Project, period: str = "30") -> ProjectOverview:
    """Aggregates of PROJECT over PERIOD (a key of OVERVIEW_RANGES: the last N days, or all
    time), read from the daily rollup and its session counts: the cost follows the number of
    days shown, not the project's history. The view brings the rollup up to date first when
    that is cheap (INLINE_REFRESH_MAX_TURNS); otherwise the figures are those of the last
    refresh (`as_of`, `behind`), which the beat task makes."""
    from ctxobs.wire import TIERS

    pid = project.pk
    today = timezone.now().astimezone(UTC).date()
    since = _period_start(today, OVERVIEW_RANGES[period])
    behind = overview_refresh(project_id=pid, max_turns=INLINE_REFRESH_MAX_TURNS) is None
    since_sql = "AND day >= %s" if since is not None else ""
    args: list[Any] = [since] if since is not None else []
    out = cast(ProjectOverview, {})  # filled key by key below
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT day, sessions, turns, recalled, injected, validated, failed, compressions, max_watermark,
                   buckets, tiers, strategies
            FROM ingest_overview_day WHERE project_id = %s {since_sql} ORDER BY day
            """,  # noqa: S608 - only a fixed fragment is interpolated
            [pid, *args],
        )
        # Django has psycopg hand jsonb over as text.
        days = [(*d[:9], *(json.loads(j) for j in d[9:])) for d in cur.fetchall()]
        cur.execute(
            "SELECT refreshed_at, session_counts FROM ingest_overview_state WHERE project_id = %s", [pid]
        )
        state = cur.fetchone()
        as_of, stored = (state[0], json.loads(state[1])) if state else (None, {})
        if stored.get("day") == today.isoformat() and period in stored:
            n_sessions, n_hot, n_alerted = stored[period]
        else:
            # Counted at the last refresh for another day (or never): counted now.
            cur.execute(
                f"""
                SELECT count(*), count(*) FILTER (WHERE max_tier IN ('force', 'break')),
                       count(*) FILTER (WHERE alert_count > 0)
                FROM ingest_session WHERE project_id = %s {since_sql.replace("day", "last_seen")}
                """,  # noqa: S608
                [pid, *args],
            )
            n_sessions, n_hot, n_alerted = cur.fetchone()

    midnight = time(tzinfo=UTC)
    out["since"] = since
    out["as_of"] = as_of
    out["behind"] = behind
    out["days"] = [datetime.combine(d[0], midnight) for d in days]
    out["sessions"] = [d[1] for d in days]
    out["turns"] = [d[2] for d in days]
    out["recalled"] = [d[3] for d in days]
    out["injected"] = [d[4] for d in days]
    out["totals"] = {
        "turns": sum(d[2] for d in days),
        "recalled": sum(d[3] for d in days),
        "injected": sum(d[4] for d in days),
        "validated": sum(d[5] for d in days),
        "failed": sum(d[6] for d in days),
        "compressions": sum(d[7] for d in days),
        "max_watermark": max((d[8] for d in days), default=0.0),
        "sessions": n_sessions,
        "hot_sessions": n_hot,
        "alerted_sessions": n_alerted,
    }
    hist: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    tiers: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for d in days:
        for b, (n, v, f) in d[9].items():
            h = hist[int(b)]
            h[0], h[1], h[2] = h[0] + n, h[1] + v, h[2] + f
        for t, (n, secs) in d[10].items():
            tiers[t][0] += n
            tiers[t][1] += secs or 0.0
    out["wm_buckets"] = [(round(b * WM_BUCKET, 2), hist[b][0] if b in hist else 0) for b in range(WM_BUCKETS)]
    bands: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for b, (_n, c, f) in hist.items():
        band = min(BANDS - 1, int(b * WM_BUCKET / BAND + 1e-9))
        bands[band][0] += c
        bands[band][1] += f
    out["bands"] = [(round(i * BAND, 2), bands[i][0], bands[i][1]) for i in range(BANDS) if i in bands]
    out["tiers"] = [
        (t, tiers[t][1] / 3600 if t in tiers else 0.0, int(tiers[t][0]) if t in tiers else 0) for t in TIERS
    ]
    out["compression"] = [
        (day, strategy, n)
        for day, d in zip(out["days"], days, strict=True)
        for strategy, n in sorted(d[11].items())
    ]
    return out
