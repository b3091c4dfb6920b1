"""Reads of the alerts app, including the snapshot neighbourhoods that rules evaluate on."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Count, Max, QuerySet

from alerts.models import Alert, AlertRule, Channel, Delivery
from alerts.rules import RuleSpec, Turn
from ingest.models import CompressionEvent, Snapshot, SnapshotBlock


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
    from django.db.models import Q

    return list(
        AlertRule.objects.filter(project_id=project_id)
        .annotate(n_alerts=Count("alerts"), n_open=Count("alerts", filter=Q(alerts__state="open")))
        .order_by("id")
    )


def channels_list(*, project_id: int) -> list[Channel]:
    """Channels with `n_sent`, `n_failed` and `last_delivery_at` (one query)."""
    from django.db.models import Q

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


def _turn(row: dict[str, Any], kind_max: tuple[tuple[str, int, str], ...] = ()) -> Turn:
    return Turn(
        ref=row["id"],
        turn=row["turn"],
        ts=row["ts"],
        watermark=row["watermark"],
        tier=row["tier"],
        usable_tokens=max(1, row["context_window"] - row["reserve_tokens"]),
        total_tokens=row["total_tokens"],
        n_compression=row["n_compression"],
        n_validation=row["n_validation"],
        n_validation_failed=row["n_validation_failed"],
        n_recall=row["n_recall"],
        n_recall_injected=row["n_recall_injected"],
        count_drift=row["count_drift"],
        agent=row["agent"],
        model=row["model_name"],
        kind_max=kind_max,
    )


def _order(row: dict[str, Any]) -> tuple[int, datetime, str]:
    # The ingest's order of a session's snapshots: turn, then time, then id (repeated turns).
    return (row["turn"], row["ts"], str(row["snapshot_id"]))


def snapshot_neighbourhoods(
    *, project_id: int, snapshot_refs: list[int], window: int
) -> dict[int, list[dict[str, Any]]]:
    """For each session touched by SNAPSHOT_REFS: the given snapshots, the WINDOW snapshots before
    each of them and the WINDOW after each (by turn order), as rows sorted by turn — one query,
    whatever the length of the sessions."""
    cols = ", ".join(f"s.{c}" for c in TURN_COLUMNS)
    sql = f"""
        WITH n AS (
            SELECT id, session_ref, turn, ts, snapshot_id FROM ingest_snapshot
            WHERE project_id = %(p)s AND id = ANY(%(refs)s::bigint[])
        )
        SELECT DISTINCT ON (s.id) {cols} FROM n
        JOIN LATERAL (
            -- Ordered by turn alone so that the (project, session_ref, turn) index ends each
            -- scan after WINDOW rows; ties within a turn are ordered in Python.
            (SELECT * FROM ingest_snapshot s WHERE s.project_id = %(p)s AND s.session_ref = n.session_ref
               AND s.turn < n.turn ORDER BY s.turn DESC LIMIT %(w)s)
            UNION ALL
            (SELECT * FROM ingest_snapshot s WHERE s.project_id = %(p)s AND s.session_ref = n.session_ref
               AND s.turn = n.turn)
            UNION ALL
            (SELECT * FROM ingest_snapshot s WHERE s.project_id = %(p)s AND s.session_ref = n.session_ref
               AND s.turn > n.turn ORDER BY s.turn LIMIT %(w)s)
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


def max_blocks(*, project_id: int, snapshot_refs: list[int]) -> dict[int, tuple[tuple[str, int, str], ...]]:
    """The biggest block of each kind, (kind, tokens, key), of each snapshot (one query)."""
    if not snapshot_refs:
        return {}
    out: dict[int, list[tuple[str, int, str]]] = defaultdict(list)
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT DISTINCT ON (snapshot_ref, kind) snapshot_ref, kind, tokens, key FROM ingest_snapshotblock
            WHERE project_id = %s AND snapshot_ref = ANY(%s::bigint[])
            ORDER BY snapshot_ref, kind, tokens DESC, position
            """,
            [project_id, list(snapshot_refs)],
        )
        for ref, kind, tokens, key in cur.fetchall():
            out[ref].append((kind, tokens, key))
    return {k: tuple(v) for k, v in out.items()}


def turns_from_rows(
    rows: list[dict[str, Any]], maxb: dict[int, tuple[tuple[str, int, str], ...]]
) -> list[Turn]:
    return [_turn(r, maxb.get(r["id"], ())) for r in rows]


def blocks_of(*, project_id: int, snapshot_refs: list[int]) -> dict[int, list[dict[str, Any]]]:
    """Block metadata (no messages) of some snapshots, in order (one query)."""
    out: dict[int, list[dict[str, Any]]] = {r: [] for r in snapshot_refs}
    rows = (
        SnapshotBlock.objects.filter(project_id=project_id, snapshot_ref__in=snapshot_refs)
        .order_by("snapshot_ref", "position")
        .values("snapshot_ref", "position", "key", "kind", "tokens")
    )
    for b in rows:
        out[b["snapshot_ref"]].append(b)
    return out


def changes_of(*, project_id: int, snapshot_refs: list[int]) -> dict[int, dict[str, Any]]:
    rows = Snapshot.objects.filter(project_id=project_id, id__in=snapshot_refs).values_list("id", "change")
    return dict(rows)


def compressed_tokens_by_block_per_snapshot(
    *, project_id: int, snapshot_refs: list[int]
) -> dict[int, dict[str, int]]:
    """Per snapshot: tokens removed per block key by its compression events (one query)."""
    out: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    rows = CompressionEvent.objects.filter(project_id=project_id, snapshot_ref__in=snapshot_refs).values_list(
        "snapshot_ref", "block", "tokens_before", "tokens_after"
    )
    for ref, block, before, after in rows:
        if before is not None and after is not None:
            out[ref][block] += max(1, before - after)
        else:
            out[ref][block] += 1
    return {k: dict(v) for k, v in out.items()}


def episodes_near(*, project_id: int, session_refs: list[int], rule_ids: list[int]) -> QuerySet[Alert]:
    """Existing alerts of some rules in some sessions (the episodes new findings may extend)."""
    return Alert.objects.filter(project_id=project_id, session_ref__in=session_refs, rule_id__in=rule_ids)


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
    *, project_id: int, since: datetime, limit: int
) -> tuple[dict[int, list[dict[str, Any]]], bool]:
    """Snapshots of the project since SINCE (at most LIMIT, the most recent), by session in turn
    order, and whether the limit cut some off. Two queries."""
    qs = (
        Snapshot.objects.filter(project_id=project_id, ts__gte=since)
        .order_by("-ts", "-id")
        .values(*TURN_COLUMNS)[: limit + 1]
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
