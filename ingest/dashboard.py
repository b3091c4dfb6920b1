"""Reads behind the dashboard pages: one query per fact, whatever the number of rows shown.

Row reads go through ingest.selectors; this module adds what only the pages need (sparklines,
the turns table, the turn-to-turn comparison, the project overview aggregates).
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime
from importlib import import_module
from typing import Any

from django.conf import settings
from django.db import connection

from ingest import derive, selectors, textdiff
from ingest.models import AgentSession, Project, Snapshot

SPARK_POINTS = 24
TURN_TABLE_FIELDS = (
    "id",
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


def alerts_enabled() -> bool:
    return "alerts" in settings.INSTALLED_APPS


def session_alerts(*, project_id: int, session_ref: int) -> list[dict[str, Any]]:
    """Alert markers of a session (turn, rule_kind, severity, title, alert_id); [] without alerts."""
    if not alerts_enabled():
        return []
    mod = import_module("alerts.selectors")
    return list(mod.session_alert_markers(project_id=project_id, session_ref=session_ref))


def sessions_sparklines(*, project_id: int, sessions: list[AgentSession]) -> dict[int, list[float]]:
    """Per session on a page: its watermark over the turns, reduced to SPARK_POINTS buckets
    (the maximum of each), in one query."""
    if not sessions:
        return {}
    refs = [s.id for s in sessions]
    tops = [max(s.max_turn, 0) for s in sessions]
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT s.session_ref,
                   LEAST(%s - 1, GREATEST(0, floor(s.turn::float8 * %s / (b.max_turn + 1))))::int AS bucket,
                   max(s.watermark)
            FROM unnest(%s::bigint[], %s::int[]) AS b(ref, max_turn)
            JOIN ingest_snapshot s ON s.project_id = %s AND s.session_ref = b.ref
            GROUP BY 1, 2 ORDER BY 1, 2
            """,
            [SPARK_POINTS, SPARK_POINTS, refs, tops, project_id],
        )
        out: dict[int, list[float]] = defaultdict(list)
        for ref, _bucket, wm in cur.fetchall():
            out[ref].append(float(wm))
    return dict(out)


def timeline_rows(*, project: Project, session: AgentSession) -> list[dict[str, Any]]:
    """What the timeline chart needs of every turn, in turn order: one query, only these columns
    (a 2,000-turn session stays well under 100 ms)."""
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT turn, watermark, kind_tokens::text, n_compression, n_validation_failed
            FROM ingest_snapshot WHERE project_id = %s AND session_ref = %s
            ORDER BY turn, ts, snapshot_id
            """,
            [project.pk, session.id],
        )
        return [
            {
                "turn": t,
                "watermark": wm,
                "kind_tokens": json.loads(kt) if kt else {},
                "n_compression": nc,
                "n_validation_failed": nf,
            }
            for t, wm, kt, nc, nf in cur.fetchall()
        ]


def turns_page(*, project: Project, session: AgentSession, page: int, per_page: int) -> dict[str, Any]:
    """One page of the turns table, in turn order (the count comes from the session row)."""
    total = session.turn_count
    pages = max(1, -(-total // per_page))
    page = min(max(1, page), pages)
    rows = list(
        Snapshot.objects.filter(project=project, session_ref=session.id)
        .order_by("turn", "ts", "snapshot_id")
        .values(*TURN_TABLE_FIELDS)[(page - 1) * per_page : page * per_page]
    )
    return {
        "rows": rows,
        "page": page,
        "pages": pages,
        "per_page": per_page,
        "total": total,
        "has_prev": page > 1,
        "has_next": page < pages,
    }


def _refs(blocks: list[dict[str, Any]]) -> list[derive.BlockRef]:
    return [
        derive.BlockRef(key=b["key"], kind=b["kind"], hash=b["content_hash"], tokens=b["tokens"])
        for b in blocks
    ]


def _keyed(blocks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    seen: dict[str, int] = {}
    out: dict[str, dict[str, Any]] = {}
    for b in blocks:
        n = seen.get(b["key"], 0)
        seen[b["key"]] = n + 1
        out[b["key"] if n == 0 else f"{b['key']}#{n + 1}"] = b
    return out


def turn_comparison(
    *, project_id: int, snapshot: Snapshot, other: Snapshot | None
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
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
    diffs = []
    for key, b in new.items():
        a = old.get(key)
        if a is None or a["content_hash"] == b["content_hash"]:
            continue
        segments = textdiff.word_diff(
            textdiff.messages_text(a["messages"]), textdiff.messages_text(b["messages"])
        )
        diffs.append(
            {
                "key": key,
                "kind": b["kind"],
                "before": a["tokens"],
                "after": b["tokens"],
                "delta": b["tokens"] - a["tokens"],
                "segments": segments,
                **textdiff.diff_stats(segments),
            }
        )
    change["diffs"] = diffs
    change["other_turn"] = other.turn
    change["is_previous"] = snapshot.prev_turn == other.turn
    return blocks, change


# --- project overview ---------------------------------------------------------------
WM_BUCKET = 0.05
WM_BUCKETS = 24  # 0 .. 120%
BAND = 0.10
BANDS = 11  # 0 .. 110%+
# A gap between two turns longer than this is idle time, not time spent in a tier.
MAX_TURN_GAP_SECONDS = 600


def project_overview(*, project: Project, since: datetime | None) -> dict[str, Any]:
    """Aggregates of PROJECT since SINCE (all time when None): five queries."""
    pid = project.pk
    since_sql = "AND ts >= %s" if since is not None else ""
    args: list[Any] = [since] if since is not None else []
    out: dict[str, Any] = {}
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT date_trunc('day', ts) AS d, count(DISTINCT session_ref), count(*),
                   coalesce(sum(n_recall), 0), coalesce(sum(n_recall_injected), 0),
                   count(*) FILTER (WHERE n_validation > 0), count(*) FILTER (WHERE n_validation_failed > 0),
                   coalesce(sum(n_compression), 0), coalesce(max(watermark), 0)
            FROM ingest_snapshot WHERE project_id = %s {since_sql}
            GROUP BY 1 ORDER BY 1
            """,  # noqa: S608 - only a fixed fragment is interpolated
            [pid, *args],
        )
        days = cur.fetchall()
        out["days"] = [d[0] for d in days]
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
        }
        cur.execute(
            f"""
            SELECT count(*), count(*) FILTER (WHERE max_tier IN ('force', 'break')),
                   count(*) FILTER (WHERE alert_count > 0)
            FROM ingest_session WHERE project_id = %s {since_sql.replace("ts", "last_seen")}
            """,  # noqa: S608
            [pid, *args],
        )
        n_sessions, n_hot, n_alerted = cur.fetchone()
        out["totals"].update({"sessions": n_sessions, "hot_sessions": n_hot, "alerted_sessions": n_alerted})

        cur.execute(
            f"""
            SELECT LEAST(%s - 1, floor(watermark / %s))::int AS b, count(*),
                   count(*) FILTER (WHERE n_validation > 0), count(*) FILTER (WHERE n_validation_failed > 0)
            FROM ingest_snapshot WHERE project_id = %s {since_sql}
            GROUP BY 1 ORDER BY 1
            """,  # noqa: S608
            [WM_BUCKETS, WM_BUCKET, pid, *args],
        )
        hist = {b: (n, c, f) for b, n, c, f in cur.fetchall()}
        out["wm_buckets"] = [(round(b * WM_BUCKET, 2), hist.get(b, (0, 0, 0))[0]) for b in range(WM_BUCKETS)]
        bands: dict[int, list[int]] = defaultdict(lambda: [0, 0])
        for b, (_n, c, f) in hist.items():
            band = min(BANDS - 1, int(b * WM_BUCKET / BAND + 1e-9))
            bands[band][0] += c
            bands[band][1] += f
        out["bands"] = [(round(i * BAND, 2), bands[i][0], bands[i][1]) for i in range(BANDS) if i in bands]

        cur.execute(
            f"""
            SELECT tier, count(*), coalesce(sum(LEAST(gap, %s)), 0)
            FROM (
                SELECT tier,
                       extract(epoch FROM lead(ts) OVER (PARTITION BY session_ref ORDER BY turn, ts) - ts)
                       AS gap
                FROM ingest_snapshot WHERE project_id = %s {since_sql}
            ) t GROUP BY 1
            """,  # noqa: S608
            [MAX_TURN_GAP_SECONDS, pid, *args],
        )
        tiers = {t: (n, float(sec or 0)) for t, n, sec in cur.fetchall()}
        from ctxobs.wire import TIERS

        out["tiers"] = [(t, tiers.get(t, (0, 0.0))[1] / 3600, tiers.get(t, (0, 0.0))[0]) for t in TIERS]

        cur.execute(
            f"""
            SELECT date_trunc('day', ts), strategy, count(*)
            FROM ingest_compressionevent WHERE project_id = %s {since_sql}
            GROUP BY 1, 2 ORDER BY 1, 2
            """,  # noqa: S608
            [pid, *args],
        )
        out["compression"] = cur.fetchall()
    return out
