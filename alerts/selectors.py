"""Reads of the alerts app, including the snapshot neighbourhoods that rules evaluate on."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Count, Max, Q, QuerySet

from alerts.models import Alert, AlertRule, Channel, Delivery
from alerts.rules import RuleSpec, Turn
from ctxobs.wire import unstorable, usable_window
from ingest.models import Snapshot


def session_alert_markers(*, project_id: int, session_ref: int) -> list[dict[str, Any]]:
    """Alerts of one session for the timeline, in turn order (one query):
    dicts with turn, rule_kind, severity, title, alert_id (and state)."""
    rows = (
        Alert.objects.filter(project_id=project_id, session_ref=session_ref)
        .order_by("turn", "id")
        .values("id", "turn", "rule_kind", "severity", "title", "state")
    )
    return [
        {
            "turn": r["turn"],
            "rule_kind": r["rule_kind"],
            "severity": r["severity"],
            "title": r["title"],
            "alert_id": r["id"],
            "state": r["state"],
        }
        for r in rows
    ]


def alerts_filter(
    *,
    project_id: int,
    state: str | None = None,
    rule_id: int | None = None,
    session_id: str | None = None,
    severity: str | None = None,
) -> QuerySet[Alert]:
    """Alerts of a project, newest first, with their rule."""
    qs = Alert.objects.filter(project_id=project_id).select_related("rule")
    if any(v and unstorable(v) for v in (state, session_id, severity)):
        # Text the store cannot hold (a NUL) matches no stored alert.
        return qs.none()
    if state:
        qs = qs.filter(state=state)
    if rule_id:
        qs = qs.filter(rule_id=rule_id)
    if session_id:
        qs = qs.filter(session_id=session_id)
    if severity:
        qs = qs.filter(severity=severity)
    return qs.order_by("-created_at", "-id")


def alert_get(*, project_id: int, alert_id: int) -> Alert | None:
    return Alert.objects.filter(project_id=project_id, pk=alert_id).select_related("rule").first()


def alert_state_counts(*, project_id: int) -> dict[str, int]:
    rows = Alert.objects.filter(project_id=project_id).values("state").annotate(n=Count("id"))
    out = dict.fromkeys(Alert.State.values, 0)
    out.update({r["state"]: r["n"] for r in rows})
    return out


def rules_list(*, project_id: int) -> list[AlertRule]:
    return list(AlertRule.objects.filter(project_id=project_id).order_by("id"))


def rule_get(*, project_id: int, rule_id: int) -> AlertRule | None:
    return AlertRule.objects.filter(project_id=project_id, pk=rule_id).first()


def rules_with_counts(*, project_id: int) -> list[AlertRule]:
    """Rules with `n_alerts` and `n_open` (one query)."""
    return list(
        AlertRule.objects.filter(project_id=project_id)
        .annotate(n_alerts=Count("alerts"), n_open=Count("alerts", filter=Q(alerts__state="open")))
        .order_by("id")
    )


def channels_list(*, project_id: int) -> list[Channel]:
    """Channels with `n_sent`, `n_failed` and `last_delivery_at` (one query)."""
    return list(
        Channel.objects.filter(project_id=project_id)
        .annotate(
            n_sent=Count("deliveries", filter=Q(deliveries__status="sent")),
            n_failed=Count("deliveries", filter=Q(deliveries__status="failed")),
            last_delivery_at=Max("deliveries__created_at"),
        )
        .order_by("id")
    )


def channel_get(*, project_id: int, channel_id: int) -> Channel | None:
    return Channel.objects.filter(project_id=project_id, pk=channel_id).first()


def channel_deliveries(*, channel: Channel, limit: int = 50) -> list[Delivery]:
    """The latest deliveries of a channel with their attempt logs (two queries)."""
    return list(
        Delivery.objects.filter(channel=channel)
        .select_related("alert")
        .prefetch_related("log")
        .order_by("-created_at", "-id")[:limit]
    )


def alert_deliveries(*, alert: Alert) -> list[Delivery]:
    return list(
        Delivery.objects.filter(alert=alert).select_related("channel").prefetch_related("log").order_by("id")
    )


# --- what rules evaluate on --------------------------------------------------
TURN_COLUMNS = (
    "id",
    "session_ref",
    "turn",
    "ts",
    "snapshot_id",
    "watermark",
    "tier",
    "context_window",
    "reserve_tokens",
    "total_tokens",
    "n_compression",
    "n_validation",
    "n_validation_failed",
    "n_recall",
    "n_recall_injected",
    "count_drift",
    "agent",
    "model_name",
    "session_id",
    "received_at",
)
# What the one-huge-block rule needs of a snapshot's blocks (parallel arrays on its row).
BLOCK_COLUMNS = ("block_keys", "block_kinds", "block_tokens")


def kind_max(row: dict[str, Any]) -> tuple[tuple[str, int, str], ...]:
    """The biggest block of each kind of a snapshot row with BLOCK_COLUMNS, (kind, tokens, key),
    the first one in prompt order on a tie; () when the row has no block columns."""
    best: dict[str, tuple[str, int, str]] = {}
    for key, kind, tokens in zip(
        row.get("block_keys") or (), row.get("block_kinds") or (), row.get("block_tokens") or (), strict=True
    ):
        cur = best.get(kind)
        if cur is None or tokens > cur[1]:
            best[kind] = (kind, tokens, key)
    return tuple(best.values())


def _turn(row: dict[str, Any]) -> Turn:
    return Turn(
        ref=row["id"],
        turn=row["turn"],
        ts=row["ts"],
        watermark=row["watermark"],
        tier=row["tier"],
        usable_tokens=usable_window(row["context_window"], row["reserve_tokens"]),
        total_tokens=row["total_tokens"],
        n_compression=row["n_compression"],
        n_validation=row["n_validation"],
        n_validation_failed=row["n_validation_failed"],
        n_recall=row["n_recall"],
        n_recall_injected=row["n_recall_injected"],
        count_drift=row["count_drift"],
        agent=row["agent"],
        model=row["model_name"],
        kind_max=kind_max(row),
    )


def _order(row: dict[str, Any]) -> tuple[int, datetime, str]:
    # The ingest's order of a session's snapshots: turn, then time, then id (repeated turns).
    return (row["turn"], row["ts"], str(row["snapshot_id"]))


def snapshot_neighbourhoods(
    *, project_id: int, snapshot_refs: list[int], window: int, with_blocks: bool = False
) -> dict[int, list[dict[str, Any]]]:
    """For each session touched by SNAPSHOT_REFS: the given snapshots, the WINDOW snapshots before
    each of them and the WINDOW after each (by turn order), as rows sorted by turn, with the
    block columns when WITH_BLOCKS — one query, whatever the length of the sessions."""
    columns = TURN_COLUMNS + (BLOCK_COLUMNS if with_blocks else ())
    cols = ", ".join(f"s.{c}" for c in columns)
    inner = ", ".join(columns)
    # The project id never reaches the planner as a literal (a sub-select, then the rows found):
    # with a literal and statistics that lag a fast-growing project, it estimates one row for
    # the project and may scan all of it through the (project, ts) index instead.
    sql = f"""
        WITH n AS (
            SELECT project_id, session_ref, turn FROM ingest_snapshot
            WHERE project_id = (SELECT %(p)s::bigint) AND id = ANY(%(refs)s::bigint[])
        )
        SELECT DISTINCT ON (s.id) {cols} FROM n
        JOIN LATERAL (
            -- Ordered by turn alone so that the (project, session_ref, turn) index ends each
            -- scan after WINDOW rows; ties within a turn are ordered in Python.
            (SELECT {inner} FROM ingest_snapshot s
               WHERE s.project_id = n.project_id AND s.session_ref = n.session_ref AND s.turn < n.turn
               ORDER BY s.turn DESC LIMIT %(w)s)
            UNION ALL
            (SELECT {inner} FROM ingest_snapshot s
               WHERE s.project_id = n.project_id AND s.session_ref = n.session_ref AND s.turn = n.turn)
            UNION ALL
            (SELECT {inner} FROM ingest_snapshot s
               WHERE s.project_id = n.project_id AND s.session_ref = n.session_ref AND s.turn > n.turn
               ORDER BY s.turn LIMIT %(w)s)
        ) s ON true
    """  # noqa: S608 - the interpolated text is a fixed column list
    with connection.cursor() as cur:
        cur.execute(sql, {"p": project_id, "refs": list(snapshot_refs), "w": window})
        names = [c[0] for c in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        out[r["session_ref"]].append(r)
    for line in out.values():
        line.sort(key=_order)
    return dict(out)


def turns_from_rows(rows: list[dict[str, Any]]) -> list[Turn]:
    return [_turn(r) for r in rows]


def anchors_of(
    *, project_id: int, snapshot_refs: list[int]
) -> dict[int, tuple[list[dict[str, Any]], dict[str, Any]]]:
    """Block metadata (position, key, kind, tokens; no messages) in order and the turn-to-turn
    change of some snapshots (one query)."""
    if not snapshot_refs:
        return {}
    with connection.cursor() as cur:
        # The project id as a sub-select: see `snapshot_neighbourhoods`.
        cur.execute(
            "SELECT id, block_keys, block_kinds, block_tokens, change FROM ingest_snapshot"
            " WHERE project_id = (SELECT %s::bigint) AND id = ANY(%s::bigint[])",
            [project_id, list(snapshot_refs)],
        )
        rows = cur.fetchall()
    out: dict[int, tuple[list[dict[str, Any]], dict[str, Any]]] = {}
    for ref, keys, kinds, tokens, change in rows:
        blocks = [
            {"position": i, "key": k, "kind": kd, "tokens": t}
            for i, (k, kd, t) in enumerate(zip(keys, kinds, tokens, strict=True))
        ]
        # Django reads jsonb as text and leaves decoding to the field; this is a raw query.
        out[ref] = (blocks, (json.loads(change) if isinstance(change, str) else change) or {})
    return out


def compressed_tokens_by_block_per_snapshot(
    *, project_id: int, snapshot_refs: list[int]
) -> dict[int, dict[str, int]]:
    """Per snapshot: tokens removed per block key by its compression events (one query)."""
    out: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    with connection.cursor() as cur:
        # The project id as a sub-select: see `snapshot_neighbourhoods`.
        cur.execute(
            "SELECT snapshot_ref, block, tokens_before, tokens_after FROM ingest_compressionevent"
            " WHERE project_id = (SELECT %s::bigint) AND snapshot_ref = ANY(%s::bigint[])",
            [project_id, list(snapshot_refs)],
        )
        rows = cur.fetchall()
    for ref, block, before, after in rows:
        if before is not None and after is not None:
            out[ref][block] += max(1, before - after)
        else:
            out[ref][block] += 1
    return {k: dict(v) for k, v in out.items()}


@dataclass(frozen=True, slots=True)
class EpisodeProbe:
    """Where findings of one rule in one session fall: the alerts of that rule and session whose
    span ends at or after FROM_TURN, or (when FROM_TS is set) at or after FROM_TS, may take them."""

    session_ref: int
    rule_id: int
    from_turn: int
    from_ts: datetime | None


# Alerts read per probe and direction before the read is taken as possibly incomplete. The
# episodes that end inside a cooldown are few (a finding inside it extends them), so the hot path
# -- new turns at the end of a session -- stays far below this.
EPISODE_SCAN_LIMIT = 16


def episodes_near(*, project_id: int, probes: list[EpisodeProbe]) -> list[Alert]:
    """The alerts that the findings of PROBES may extend: every alert of the probe's rule and
    session whose span ends at or after the probe's turn or time, plus possibly others (callers
    filter). Index range scans on (project, session, rule, last_turn / last_ts) bounded by
    EPISODE_SCAN_LIMIT, so the cost does not grow with the session; a probe whose scan hits the
    limit is read again without it (one more query, exact). The project id is a sub-select for
    the reason given in `snapshot_neighbourhoods`."""
    if not probes:
        return []
    sql = """
        SELECT a.*, k.i AS probe_i, x.dir AS probe_dir FROM
        unnest(%(s)s::bigint[], %(r)s::bigint[], %(t)s::int[], %(ts)s::timestamptz[])
            WITH ORDINALITY AS k(session_ref, rule_id, from_turn, from_ts, i)
        CROSS JOIN LATERAL (
            (SELECT a.id, 'turn' AS dir FROM alerts_alert a
               WHERE a.project_id = (SELECT %(p)s::bigint) AND a.session_ref = k.session_ref
                 AND a.rule_id = k.rule_id
                 AND a.last_turn >= k.from_turn
               ORDER BY a.last_turn LIMIT %(n)s)
            UNION ALL
            (SELECT a.id, 'ts' AS dir FROM alerts_alert a
               WHERE a.project_id = (SELECT %(p)s::bigint) AND a.session_ref = k.session_ref
                 AND a.rule_id = k.rule_id
                 AND a.last_ts >= k.from_ts
               ORDER BY a.last_ts LIMIT %(n)s)
        ) x
        JOIN alerts_alert a ON a.id = x.id
    """
    params = {
        "p": project_id,
        "s": [p.session_ref for p in probes],
        "r": [p.rule_id for p in probes],
        "t": [p.from_turn for p in probes],
        "ts": [p.from_ts for p in probes],
        "n": EPISODE_SCAN_LIMIT,
    }
    found: dict[int, Alert] = {}
    per_scan: dict[tuple[int, str], int] = defaultdict(int)
    for a in Alert.objects.raw(sql, params):
        found[a.pk] = a
        extra = vars(a)  # the raw query's probe columns, set on the instance
        per_scan[(extra["probe_i"], extra["probe_dir"])] += 1
    full = sorted({i for (i, _), n in per_scan.items() if n >= EPISODE_SCAN_LIMIT})
    if full:
        q = Q()
        for i in full:
            p = probes[i - 1]
            since = Q(last_turn__gte=p.from_turn)
            if p.from_ts is not None:
                since |= Q(last_ts__gte=p.from_ts)
            q |= Q(session_ref=p.session_ref, rule_id=p.rule_id) & since
        for a in Alert.objects.filter(q, project_id=project_id):
            found.setdefault(a.pk, a)
    return sorted(found.values(), key=lambda a: (a.turn, a.pk))


def rule_specs(*, rules: list[AlertRule], thresholds: tuple[float, float, float, float]) -> list[RuleSpec]:
    return [
        RuleSpec(
            id=r.pk,
            kind=r.kind,
            params=r.params,
            agent=r.agent,
            model=r.model,
            cooldown_turns=r.cooldown_turns,
            cooldown_seconds=float(r.cooldown_seconds),
            thresholds=thresholds,
        )
        for r in rules
    ]


def recent_lines(
    *, project_id: int, since: datetime, limit: int, with_blocks: bool = False
) -> tuple[dict[int, list[dict[str, Any]]], bool]:
    """Snapshots of the project since SINCE (at most LIMIT, the most recent), by session in turn
    order, with the block columns when WITH_BLOCKS, and whether the limit cut some off (one query)."""
    columns = TURN_COLUMNS + (BLOCK_COLUMNS if with_blocks else ())
    qs = (
        Snapshot.objects.filter(project_id=project_id, ts__gte=since)
        .order_by("-ts", "-id")
        .values(*columns)[: limit + 1]
    )
    rows = list(qs)
    truncated = len(rows) > limit
    rows = rows[:limit]
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        out[r["session_ref"]].append(r)
    for line in out.values():
        line.sort(key=_order)
    return dict(out), truncated
