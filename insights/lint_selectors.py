"""Reads of the contamination lint's findings, for pages, the sessions filter and alert rules."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from django.db.models import QuerySet

from insights.lint import CHECKS
from insights.models import Finding

MARKERS_LIMIT = 2000


def turn_findings(*, project_id: int, snapshot_ref: int) -> list[dict[str, Any]]:
    """The findings of one turn, most severe first (one query)."""
    rank = {"critical": 0, "warning": 1, "info": 2}
    rows: list[dict[str, Any]] = [
        {**r, "label": CHECKS.get(r["check_name"], r["check_name"])}
        for r in Finding.objects.filter(project_id=project_id, snapshot_ref=snapshot_ref).values(
            "check_name", "severity", "block_keys", "evidence", "details")
    ]
    rows.sort(key=lambda r: (rank.get(r["severity"], 3), r["check_name"]))
    return rows


def session_finding_markers(*, project_id: int, session_ref: int) -> list[Mapping[str, object]]:
    """Timeline markers of a session's findings (source "lint"): turn, rule_kind (the check),
    severity, title; one query, at most MARKERS_LIMIT."""
    rows = (
        Finding.objects.filter(project_id=project_id, session_ref=session_ref)
        .order_by("turn", "check_name")
        .values_list("turn", "check_name", "severity")[:MARKERS_LIMIT]
    )
    return [
        {"source": "lint", "turn": turn, "rule_kind": check, "severity": severity,
         "title": CHECKS.get(check, check), "alert_id": None}
        for turn, check, severity in rows
    ]


def check_choices() -> list[tuple[str, str]]:
    return [("any", "any finding"), *CHECKS.items()]


def sessions_with_finding(*, project_id: int, value: str) -> QuerySet[Finding, int]:
    """The session refs with a finding of check VALUE ("any": any check), as a sub-query."""
    qs = Finding.objects.filter(project_id=project_id)
    if value != "any":
        qs = qs.filter(check_name=value)
    return qs.values_list("session_ref", flat=True)


def checks_by_snapshot(*, project_id: int, snapshot_refs: Sequence[int]) -> dict[int, tuple[str, ...]]:
    """The checks found on each of SNAPSHOT_REFS (one query)."""
    out: dict[int, list[str]] = defaultdict(list)
    if not snapshot_refs:
        return {}
    for ref, check in (
        Finding.objects.filter(project_id=project_id, snapshot_ref__in=list(snapshot_refs))
        .order_by("snapshot_ref", "check_name").values_list("snapshot_ref", "check_name")
    ):
        out[ref].append(check)
    return {k: tuple(v) for k, v in out.items()}
