"""Alerts and alert rules over the API: thin handlers over services and selectors.

Who may do what: alerts and rules are read with an ingest key or as a signed-in member
(`ProjectReadAuth`). Changing them — acknowledging, resolving, creating or editing rules — needs
a signed-in member with the editor role (session cookie plus CSRF token). Ingest keys live inside
agent processes; a leaked key must not be able to silence the alerts about its own agent.
"""

from __future__ import annotations

from typing import Any, Literal

from django.http import HttpRequest
from ninja import Query, Router, Schema, Status

from alerts import channels, selectors
from alerts.errors import NotFound
from alerts.models import Alert, AlertRule, Incident
from alerts.schemas import (
    AlertOut,
    AlertPage,
    IncidentDetailOut,
    IncidentPage,
    MuteIn,
    RuleErrors,
    RuleIn,
    RuleOut,
    RulePatch,
)
from alerts.services import episodes, incidents
from alerts.services import rules as rule_services
from core.auth import ProjectReadAuth, request_caller
from core.params import Id, Instant, PageLimit, PageOffset
from core.schemas import Detail

router = Router(tags=["alerts"])


# A signed-in member with at least the editor role, CSRF-checked; never an ingest key.
EDITOR_AUTH = ProjectReadAuth(
    "editor", keys_refused="ingest keys may read alerts but not change them: sign in as an editor"
)


def _alert_out(a: Alert) -> dict[str, Any]:
    return {
        "id": a.pk,
        "rule_id": a.rule_id,
        "rule_name": a.rule.name,
        "rule_kind": a.rule_kind,
        "severity": a.severity,
        "title": a.title,
        "state": a.state,
        "session_id": a.session_id,
        "agent": a.agent,
        "model": a.model,
        "turn": a.turn,
        "last_turn": a.last_turn,
        "ts": a.ts,
        "value": a.value,
        "threshold": a.threshold,
        "peak_value": a.peak_value,
        "unit": a.unit,
        "contributors": a.contributors,
        "dedup_key": a.dedup_key,
        "created_at": a.created_at,
        "acknowledged_at": a.acknowledged_at,
        "resolved_at": a.resolved_at,
        "turn_url": channels.turn_path(a.project_id, a.session_id, a.turn),
    }


def _rule_out(r: AlertRule) -> dict[str, Any]:
    return {f: getattr(r, f) for f in RuleOut.model_fields}


class AlertFilters(Schema):
    state: str | None = None
    rule: Id | None = None
    session: str | None = None
    severity: str | None = None
    limit: PageLimit = 50
    offset: PageOffset = 0


@router.get(
    "/alerts",
    auth=ProjectReadAuth(),
    response={200: AlertPage, 401: Detail, 404: Detail},
    summary="List alerts, newest first (filters: state, rule id, session id, severity)",
)
def alerts_list(request: HttpRequest, filters: Query[AlertFilters]) -> dict[str, Any]:
    caller = request_caller(request)
    qs = selectors.alerts_filter(
        project_id=caller.project.pk,
        state=filters.state,
        rule_id=filters.rule,
        session_id=filters.session,
        severity=filters.severity,
    )
    limit, offset = filters.limit, filters.offset
    return {
        "count": qs.count(),
        "limit": limit,
        "offset": offset,
        "items": [_alert_out(a) for a in qs[offset : offset + limit]],
    }


@router.get(
    "/alerts/{alert_id}",
    auth=ProjectReadAuth(),
    response={200: AlertOut, 401: Detail, 404: Detail},
    summary="One alert",
)
def alert_detail(request: HttpRequest, alert_id: int) -> dict[str, Any]:
    caller = request_caller(request)
    a = selectors.alert_get(project_id=caller.project.pk, alert_id=alert_id)
    if a is None:
        raise NotFound("no such alert")
    return _alert_out(a)


def _transition(request: HttpRequest, alert_id: int, fn: Any) -> dict[str, Any]:
    caller = request_caller(request)
    a = selectors.alert_get(project_id=caller.project.pk, alert_id=alert_id)
    if a is None:
        raise NotFound("no such alert")
    fn(alert=a, user=request.user)
    return _alert_out(selectors.alert_get(project_id=caller.project.pk, alert_id=alert_id))  # type: ignore[arg-type]


@router.post(
    "/alerts/{alert_id}/ack",
    auth=EDITOR_AUTH,
    response={200: AlertOut, 401: Detail, 403: Detail, 404: Detail},
    summary="Acknowledge an open alert (editor)",
)
def alert_ack(request: HttpRequest, alert_id: int) -> dict[str, Any]:
    return _transition(request, alert_id, episodes.alert_acknowledge)


@router.post(
    "/alerts/{alert_id}/resolve",
    auth=EDITOR_AUTH,
    response={200: AlertOut, 401: Detail, 403: Detail, 404: Detail},
    summary="Resolve an alert (editor)",
)
def alert_resolve(request: HttpRequest, alert_id: int) -> dict[str, Any]:
    return _transition(request, alert_id, episodes.alert_resolve)


@router.get(
    "/alert-rules",
    auth=ProjectReadAuth(),
    response={200: list[RuleOut], 401: Detail, 404: Detail},
    summary="The project's alert rules",
)
def rules_list(request: HttpRequest) -> list[dict[str, Any]]:
    caller = request_caller(request)
    return [_rule_out(r) for r in selectors.rules_list(project_id=caller.project.pk)]


@router.post(
    "/alert-rules",
    auth=EDITOR_AUTH,
    response={201: RuleOut, 401: Detail, 403: Detail, 404: Detail, 422: RuleErrors},
    summary="Create a rule (editor). Kinds and their params: see the rule editor or alerts.kinds.PARAMS",
)
def rule_create(request: HttpRequest, body: RuleIn) -> Status[dict[str, Any]]:
    caller = request_caller(request)
    rule = rule_services.rule_create(project=caller.project, data=body.model_dump())
    return Status(201, _rule_out(rule))


@router.patch(
    "/alert-rules/{rule_id}",
    auth=EDITOR_AUTH,
    response={200: RuleOut, 401: Detail, 403: Detail, 404: Detail, 422: RuleErrors},
    summary="Change some fields of a rule (editor)",
)
def rule_update(request: HttpRequest, rule_id: int, body: RulePatch) -> dict[str, Any]:
    caller = request_caller(request)
    rule = selectors.rule_get(project_id=caller.project.pk, rule_id=rule_id)
    if rule is None:
        raise NotFound("no such rule")
    return _rule_out(rule_services.rule_update(rule=rule, data=body.model_dump(exclude_none=True)))


@router.put(
    "/alert-rules/{rule_id}",
    auth=EDITOR_AUTH,
    response={200: RuleOut, 401: Detail, 403: Detail, 404: Detail, 422: RuleErrors},
    summary="Replace a rule (editor)",
)
def rule_replace(request: HttpRequest, rule_id: int, body: RuleIn) -> dict[str, Any]:
    caller = request_caller(request)
    rule = selectors.rule_get(project_id=caller.project.pk, rule_id=rule_id)
    if rule is None:
        raise NotFound("no such rule")
    return _rule_out(rule_services.rule_update(rule=rule, data=body.model_dump()))


# --- incidents ---------------------------------------------------------------------------------
def _incident_out(i: Incident) -> dict[str, Any]:
    return {
        "id": i.pk,
        "title": i.title,
        "cause": i.cause,
        "agent": i.agent,
        "severity": i.severity,
        "status": i.status,
        "muted_until": i.muted_until,
        "first_seen": i.first_seen,
        "last_seen": i.last_seen,
        "alert_count": i.alert_count,
        "session_count": i.session_count,
        "opened_count": i.opened_count,
        "reopened_at": i.reopened_at,
        "acknowledged_at": i.acknowledged_at,
        "resolved_at": i.resolved_at,
        "resolution": i.resolution,
        "confirmed_at": i.confirmed_at,
        "url": channels.incident_path(i.project_id, i.pk),
    }


INCIDENT_ALERTS_SHOWN = 200


def _incident_detail(i: Incident) -> dict[str, Any]:
    alerts = selectors.incident_alerts(incident=i, limit=INCIDENT_ALERTS_SHOWN)
    return {
        **_incident_out(i),
        "culprit": selectors.incident_culprit(incident=i),
        "sessions": selectors.incident_sessions(incident=i),
        "alerts": [_alert_out(a) for a in alerts],
        "alerts_shown": len(alerts),
    }


class IncidentFilters(Schema):
    status: (
        Literal["open", "acknowledged", "resolved", "muted", "unresolved", "pending", "transient"] | None
    ) = None
    severity: Literal["info", "warning", "critical"] | None = None
    agent: str | None = None
    since: Instant | None = None
    limit: PageLimit = 50
    offset: PageOffset = 0


@router.get(
    "/incidents",
    auth=ProjectReadAuth(),
    response={200: IncidentPage, 401: Detail, 404: Detail},
    summary="List incidents, last seen first (filters: status — open, acknowledged, resolved, muted,"
    " unresolved, pending (not confirmed yet) or transient (resolved before it was confirmed) —,"
    " severity, agent, since: seen at or after this time)",
)
def incidents_list(request: HttpRequest, filters: Query[IncidentFilters]) -> dict[str, Any]:
    caller = request_caller(request)
    qs = selectors.incidents_filter(
        project_id=caller.project.pk,
        status=filters.status,
        severity=filters.severity,
        agent=filters.agent,
        since=filters.since,
    )
    limit, offset = filters.limit, filters.offset
    return {
        "count": qs.count(),
        "limit": limit,
        "offset": offset,
        "items": [_incident_out(i) for i in qs[offset : offset + limit]],
    }


def _incident(request: HttpRequest, incident_id: int) -> Incident:
    caller = request_caller(request)
    i = selectors.incident_get(project_id=caller.project.pk, incident_id=incident_id)
    if i is None:
        raise NotFound("no such incident")
    return i


@router.get(
    "/incidents/{incident_id}",
    auth=ProjectReadAuth(),
    response={200: IncidentDetailOut, 401: Detail, 404: Detail},
    summary="One incident with its sessions, its alerts (the first 200, in time order) and its culprit",
)
def incident_detail(request: HttpRequest, incident_id: int) -> dict[str, Any]:
    return _incident_detail(_incident(request, incident_id))


@router.post(
    "/incidents/{incident_id}/ack",
    auth=EDITOR_AUTH,
    response={200: IncidentDetailOut, 401: Detail, 403: Detail, 404: Detail},
    summary="Acknowledge an incident (editor); it still resolves on its own when quiet",
)
def incident_ack(request: HttpRequest, incident_id: int) -> dict[str, Any]:
    i = incidents.incident_acknowledge(incident=_incident(request, incident_id), user=request.user)
    return _incident_detail(i)


@router.post(
    "/incidents/{incident_id}/resolve",
    auth=EDITOR_AUTH,
    response={200: IncidentDetailOut, 401: Detail, 403: Detail, 404: Detail},
    summary="Resolve an incident (editor); channels get its \"resolved\" message unless it is muted",
)
def incident_resolve(request: HttpRequest, incident_id: int) -> dict[str, Any]:
    i = incidents.incident_resolve(incident=_incident(request, incident_id), user=request.user)
    return _incident_detail(i)


@router.post(
    "/incidents/{incident_id}/mute",
    auth=EDITOR_AUTH,
    response={200: IncidentDetailOut, 401: Detail, 403: Detail, 404: Detail, 422: Detail},
    summary="Mute an incident for some minutes (editor): it keeps grouping, channels hear nothing until"
    " then. 422 when minutes is outside 1..43200 or the incident is resolved",
)
def incident_mute(request: HttpRequest, incident_id: int, body: MuteIn) -> dict[str, Any]:
    i = incidents.incident_mute(
        incident=_incident(request, incident_id), user=request.user, minutes=body.minutes
    )
    return _incident_detail(i)
