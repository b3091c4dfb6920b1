"""Ninja schemas of the alerts API (fields listed explicitly)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Schema

from alerts.kinds import DEFAULT_COOLDOWN_SECONDS, DEFAULT_COOLDOWN_TURNS


class Contributor(Schema):
    position: int
    key: str
    kind: str
    tokens: int
    share: float
    delta: int
    compressed_tokens: int = 0


class AlertOut(Schema):
    id: int
    rule_id: int
    rule_name: str
    rule_kind: str
    severity: str
    title: str
    state: str
    session_id: str
    agent: str
    model: str
    turn: int
    last_turn: int
    ts: datetime
    value: float
    threshold: float
    peak_value: float
    unit: str
    contributors: list[Contributor]
    dedup_key: str
    created_at: datetime
    acknowledged_at: datetime | None
    resolved_at: datetime | None
    turn_url: str


class AlertPage(Schema):
    count: int
    limit: int
    offset: int
    items: list[AlertOut]


class RuleOut(Schema):
    id: int
    name: str
    kind: str
    severity: str
    enabled: bool
    params: dict[str, Any]
    agent: str
    model: str
    cooldown_turns: int
    cooldown_seconds: int
    is_default: bool
    created_at: datetime
    updated_at: datetime


class RuleIn(Schema):
    name: str
    kind: str
    severity: str = "warning"
    enabled: bool = True
    params: dict[str, Any] = {}
    agent: str = ""
    model: str = ""
    cooldown_turns: int = DEFAULT_COOLDOWN_TURNS
    cooldown_seconds: int = DEFAULT_COOLDOWN_SECONDS


class RulePatch(Schema):
    name: str | None = None
    kind: str | None = None
    severity: str | None = None
    enabled: bool | None = None
    params: dict[str, Any] | None = None
    agent: str | None = None
    model: str | None = None
    cooldown_turns: int | None = None
    cooldown_seconds: int | None = None


class RuleErrors(Schema):
    detail: str
    errors: dict[str, str]


class IncidentOut(Schema):
    id: int
    title: str
    cause: str
    agent: str
    severity: str
    status: str
    muted_until: datetime | None
    first_seen: datetime
    last_seen: datetime
    alert_count: int
    session_count: int
    opened_count: int
    reopened_at: datetime | None
    acknowledged_at: datetime | None
    resolved_at: datetime | None
    resolution: str
    confirmed_at: datetime | None
    url: str


class IncidentPage(Schema):
    count: int
    limit: int
    offset: int
    items: list[IncidentOut]


class IncidentSessionOut(Schema):
    session_id: str
    first_turn: int
    last_turn: int
    alerts: int


class IncidentDetailOut(IncidentOut):
    culprit: str | None
    sessions: list[IncidentSessionOut]
    alerts: list[AlertOut]
    alerts_shown: int


class MuteIn(Schema):
    minutes: int
