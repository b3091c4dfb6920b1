"""Helpers for alert tests: post crafted sessions through the real ingest API, then evaluate."""

from __future__ import annotations

from typing import Any

import pytest

from alerts.models import IncidentPolicy
from alerts.services import evaluation as alert_evaluation
from ingest.models import Snapshot
from insights import pipeline
from tests.factories import block, snapshot


def sized_snapshot(
    *,
    turn: int,
    fill: float,
    session_id: str = "s-1",
    window: int = 10_000,
    extra_blocks: list[dict[str, Any]] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """A snapshot whose watermark is about FILL: the usable window is 85% of WINDOW (default
    reserve), and the block token counts are given, so no tokenizer is involved."""
    usable = window - int(window * 0.15)
    total = int(round(fill * usable))
    extra = extra_blocks or []
    rest = total - 100 - sum(b["tokens"] for b in extra)
    blocks = [
        block("system", "system", "You are a travel assistant.", tokens=100, pinned=True),
        *extra,
        block("history", "history", f"history up to turn {turn}", tokens=max(0, rest)),
    ]
    return snapshot(session_id=session_id, turn=turn, blocks=blocks, context_window=window, **kw)


def confirm_at_once(project: Any) -> None:
    """Incidents of PROJECT are confirmed (and announced) by their first alert. By default a lone
    alert's incident stays pending and silent until a second session, more turns or a critical
    alert confirm it (alerts.services.incidents): tests about what channels get, with one alert,
    use this."""
    IncidentPolicy.objects.update_or_create(project=project, defaults={"confirm_sessions": 1})


class Poster:
    def __init__(self, api: Any, project: Any) -> None:
        self.api = api
        self.project = project

    def post(self, snaps: list[dict[str, Any]], *, evaluate: bool = True) -> list[int]:
        r = self.api.post_snapshots(snaps)
        assert r.status_code == 200, r.content
        ids = [s["snapshot_id"] for s in snaps]
        refs = list(
            Snapshot.objects.filter(project=self.project, snapshot_id__in=ids).values_list("id", flat=True)
        )
        if evaluate:
            # As the workers do after the commit: the analyzers (the count-drift rule judges the
            # calibrated counts), then the evaluation.
            assert pipeline.analyze(project_id=self.project.pk, snapshot_refs=refs) == []
            alert_evaluation.alerts_evaluate(project_id=self.project.pk, snapshot_refs=refs)
        return refs


@pytest.fixture
def poster(api: Any, project: Any) -> Poster:
    return Poster(api, project)
