"""Reads of the alerts app: alerts, rules, channels and deliveries, the alerts that new findings
may extend, and the turns rules evaluate on (from the snapshots read through `ingest.selectors`)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, fields
from datetime import datetime
from typing import TypedDict

from django.db import connection
from django.db.models import Count, Max, Min, Q, QuerySet

from alerts import kinds as K
from alerts.models import Alert, AlertRule, Channel, Delivery, Incident, IncidentPolicy
from alerts.rules import RuleSpec, Turn
from core import registry
from ctxobs.wire import unstorable, usable_window
from ingest.types import TurnRow
from insights.lint_selectors import checks_by_snapshot


class AlertMarker(TypedDict):
    """An alert as the session timeline marks it."""

    turn: int
    rule_kind: str
    severity: str
    title: str
    alert_id: int
    state: str


def session_alert_markers(*, project_id: int, session_ref: int) -> list[AlertMarker]:
    """Alerts of one session for the timeline, in turn order (one query)."""
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


# --- incidents -----------------------------------------------------------------------------------
def incident_windows(*, project_id: int) -> K.IncidentWindows:
    """The project's incident windows (its IncidentPolicy, or the defaults)."""
    # Read on every evaluation that groups: one plain statement (the ORM's compilation of it
    # cost more than the query).
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT {', '.join(_WINDOW_FIELDS)} FROM {IncidentPolicy._meta.db_table} WHERE project_id = %s",  # noqa: S608
            [project_id],
        )
        row = cur.fetchone()
    if row is None:
        return K.INCIDENT_DEFAULTS
    return K.IncidentWindows(**dict(zip(_WINDOW_FIELDS, row, strict=True)))


# IncidentPolicy's columns are named as the windows' fields.
_WINDOW_FIELDS = tuple(f.name for f in fields(K.IncidentWindows))


def incident_quiet_min() -> int:
    """The shortest quiet period any project has set (the auto-resolve scan's bound)."""
    low = IncidentPolicy.objects.aggregate(low=Min("quiet_seconds"))["low"]
    return int(low) if low is not None else K.INCIDENT_DEFAULTS.quiet_seconds


def incident_quiet_factor_min() -> int:
    """The smallest quiet_max_factor any project has set (the auto-resolve scan's bound)."""
    low = IncidentPolicy.objects.aggregate(low=Min("quiet_max_factor"))["low"]
    default = K.INCIDENT_DEFAULTS.quiet_max_factor
    return default if low is None else min(int(low), default)


# Besides the statuses: "unresolved" (open, acknowledged or muted: confirmed and not resolved)
# and "transient" (resolved before it was confirmed). "resolved" leaves the transient ones out.
INCIDENT_FILTER_STATUSES = (*Incident.Status.values, "unresolved", "transient")


def incidents_filter(
    *,
    project_id: int,
    status: str | None = None,
    severity: str | None = None,
    agent: str | None = None,
    since: datetime | None = None,
) -> QuerySet[Incident]:
    """Incidents of a project, last seen first. STATUS may be "unresolved" (open, acknowledged
    or muted) or "transient" (see INCIDENT_FILTER_STATUSES); SINCE keeps those seen at or after it."""
    qs = Incident.objects.filter(project_id=project_id)
    if any(v and unstorable(v) for v in (status, severity, agent)):
        return qs.none()
    if status == "unresolved":
        qs = qs.exclude(status__in=(Incident.Status.RESOLVED, Incident.Status.PENDING))
    elif status == "transient":
        qs = qs.filter(status=Incident.Status.RESOLVED, resolution=Incident.Resolution.TRANSIENT)
    elif status == Incident.Status.RESOLVED:
        qs = qs.filter(status=status).exclude(resolution=Incident.Resolution.TRANSIENT)
    elif status:
        qs = qs.filter(status=status)
    if severity:
        qs = qs.filter(severity=severity)
    if agent is not None and agent != "":
        qs = qs.filter(agent=agent)
    if since is not None:
        qs = qs.filter(last_seen__gte=since)
    return qs.order_by("-last_seen", "-id")


def incident_get(*, project_id: int, incident_id: int) -> Incident | None:
    return Incident.objects.filter(project_id=project_id, pk=incident_id).first()


def incident_alerts(*, incident: Incident, limit: int = 200) -> list[Alert]:
    """The incident's alerts in time order, with their rules (the first LIMIT)."""
    return list(
        Alert.objects.filter(project_id=incident.project_id, incident=incident)
        .select_related("rule")
        .order_by("ts", "id")[:limit]
    )


class IncidentSession(TypedDict):
    session_ref: int
    session_id: str
    first_turn: int
    last_turn: int
    alerts: int


def incident_sessions(*, incident: Incident) -> list[IncidentSession]:
    """The sessions of an incident with the turns its alerts span (one query)."""
    rows = (
        Alert.objects.filter(project_id=incident.project_id, incident=incident)
        .values("session_ref", "session_id")
        .annotate(first_turn=Min("turn"), last_turn=Max("last_turn"), alerts=Count("id"), first_ts=Min("ts"))
        .order_by("first_ts", "session_ref")
    )
    return [
        {
            "session_ref": r["session_ref"],
            "session_id": r["session_id"],
            "first_turn": r["first_turn"],
            "last_turn": r["last_turn"],
            "alerts": r["alerts"],
        }
        for r in rows
    ]


# The turns whose triage may name an incident's culprit: its latest alerts' anchors.
CULPRIT_TURNS = 50


def incident_culprit(*, incident: Incident) -> str | None:
    """The verdict of a finished triage on one of the incident's turns (the latest), as text;
    None when none ran or no app triages (core.registry.incident_culprit)."""
    refs = list(
        Alert.objects.filter(project_id=incident.project_id, incident=incident)
        .order_by("-ts", "-id")
        .values_list("snapshot_ref", flat=True)[:CULPRIT_TURNS]
    )
    return registry.incident_culprit(project_id=incident.project_id, snapshot_refs=list(dict.fromkeys(refs)))


def incident_status_counts(*, project_id: int) -> dict[str, int]:
    """The project's incidents per status, the transient ones apart from "resolved"."""
    rows = (
        Incident.objects.filter(project_id=project_id)
        .values("status", "resolution")
        .annotate(n=Count("id"))
        .order_by()
    )
    out = dict.fromkeys((*Incident.Status.values, "transient"), 0)
    for r in rows:
        transient = (
            r["status"] == Incident.Status.RESOLVED and r["resolution"] == Incident.Resolution.TRANSIENT
        )
        out["transient" if transient else r["status"]] += r["n"]
    return out


def incident_deliveries(*, incident: Incident) -> list[Delivery]:
    return list(
        Delivery.objects.filter(incident=incident)
        .select_related("channel")
        .prefetch_related("log")
        .order_by("id")
    )


# --- what rules evaluate on --------------------------------------------------
def kind_max(row: TurnRow) -> tuple[tuple[str, int, str], ...]:
    """The biggest block of each kind of a snapshot row read with its blocks, (kind, tokens,
    key), the first one in prompt order on a tie; () when the row was read without them."""
    best: dict[str, tuple[str, int, str]] = {}
    for key, kind, tokens in zip(row.block_keys, row.block_kinds, row.block_tokens, strict=True):
        cur = best.get(kind)
        if cur is None or tokens > cur[1]:
            best[kind] = (kind, tokens, key)
    return tuple(best.values())


@dataclass(frozen=True, slots=True)
class Drift:
    """What the count-drift rule judges for one turn: the drift, whether it is against the
    model's usual ratio, and whether the rule must wait (see `count_drifts`)."""

    value: float | None
    calibrated: bool = False
    unproven: bool = False


def count_drifts(*, project_id: int, lines: dict[int, list[TurnRow]]) -> dict[int, Drift]:
    """The drift the count-drift rule judges, per snapshot ref of LINES (one query).

    Where counts are calibrated (insights' counts analyzer, through core.registry), a turn's drift
    is measured against its model's usual ratio, not against zero, so a tokenizer's steady offset
    (cl100k standing in for Gemma's: about -8%) does not alert. A turn not analysed yet has no
    drift (its analysis owes it an evaluation); before the model has a usual ratio, the rule
    fires only on a turn the analyzer flagged (its margin is wider for estimated counts). Without
    an app that calibrates counts, the raw drift against the provider's count."""
    refs = [r.ref for line in lines.values() for r in line]
    if not registry.count_drifts_provided():
        return {r.ref: Drift(r.count_drift) for line in lines.values() for r in line}
    got = registry.count_drifts(project_id=project_id, snapshot_refs=refs)
    out: dict[int, Drift] = {}
    for ref in refs:
        d = got.get(ref)
        out[ref] = (
            Drift(None) if d is None
            else Drift(d.drift, calibrated=d.usual_drift is not None,
                       unproven=d.usual_drift is None and not d.flagged)
        )
    return out


def _turn(row: TurnRow, lint: dict[int, tuple[str, ...]] | None = None,
          drifts: dict[int, Drift] | None = None) -> Turn:
    drift = drifts.get(row.ref, Drift(None)) if drifts is not None else Drift(row.count_drift)
    return Turn(
        ref=row.ref,
        turn=row.turn,
        ts=row.ts,
        watermark=row.watermark,
        tier=row.tier,
        usable_tokens=usable_window(row.context_window, row.reserve_tokens),
        total_tokens=row.total_tokens,
        n_compression=row.n_compression,
        n_validation=row.n_validation,
        n_validation_failed=row.n_validation_failed,
        n_recall=row.n_recall,
        n_recall_injected=row.n_recall_injected,
        count_drift=drift.value,
        count_drift_calibrated=drift.calibrated,
        count_drift_unproven=drift.unproven,
        agent=row.agent,
        model=row.model_name,
        kind_max=kind_max(row),
        lint_checks=(lint or {}).get(row.ref, ()),
    )


def turns_from_rows(rows: list[TurnRow], lint: dict[int, tuple[str, ...]] | None = None,
                    drifts: dict[int, Drift] | None = None) -> list[Turn]:
    """Turns for the rules; LINT: the lint checks found per snapshot ref, DRIFTS: the count drift
    the rule judges per snapshot ref (`count_drifts`), each when a rule reads them (without
    DRIFTS, the raw drift)."""
    return [_turn(r, lint, drifts) for r in rows]


def lint_checks(*, project_id: int, lines: dict[int, list[TurnRow]]) -> dict[int, tuple[str, ...]]:
    """The contamination-lint checks found on the turns of LINES, per snapshot ref (one query)."""
    refs = [r.ref for line in lines.values() for r in line]
    return checks_by_snapshot(project_id=project_id, snapshot_refs=refs)


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
    the reason given in `ingest.selectors.turn_neighbourhoods`."""
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
