"""What the contamination lint adds to pages ingest owns (registered in InsightsConfig.ready)."""

from __future__ import annotations

from typing import Any

from core import registry
from core.registry import ExpiringTable, SessionFilter, TurnPageExtension
from insights import lint_selectors


def _turn_context(*, snapshot: Any, **_: Any) -> dict[str, Any]:
    return {"lint_findings": lint_selectors.turn_findings(project_id=snapshot.project_id,
                                                         snapshot_ref=snapshot.id)}


TURN_FINDINGS = TurnPageExtension(
    name="insights.lint_findings", template="insights/_turn_findings.html", context=_turn_context
)

FINDING_FILTER = SessionFilter(
    name="finding", label="lint finding", choices=lint_selectors.check_choices,
    sessions=lint_selectors.sessions_with_finding,
)


def register() -> None:
    """The findings table for retention, the turn page's findings, the timeline's markers and the
    sessions list's filter."""
    registry.expiring_table_add(ExpiringTable(table="insights_finding", time_column="received_at"))
    registry.turn_page_extension_add(TURN_FINDINGS)
    registry.session_markers_add("insights.lint", lint_selectors.session_finding_markers, source="lint")
    registry.session_filter_add(FINDING_FILTER)
