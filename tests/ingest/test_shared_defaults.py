"""Ingest's pages and projects read snapshots with the shared defaults of ctxobs.wire."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from alerts import kinds as K
from alerts import rules as R
from core.models import Project
from ctxobs.wire import COUNT_DRIFT_WARN, DEFAULT_TIER_THRESHOLDS
from ingest.views import _decorate_turn


def test_a_new_project_starts_with_the_default_tier_thresholds() -> None:
    assert Project(name="defaults").thresholds == DEFAULT_TIER_THRESHOLDS


@pytest.mark.parametrize(
    ("drift", "flagged"),
    [(None, False), (0.07, False), (-0.07, False), (0.12, True), (-0.12, True)],
    ids=["not-reported", "7%", "minus-7%", "12%", "minus-12%"],
)
def test_the_page_flags_the_drift_the_default_alert_rule_fires_on(drift: float | None, flagged: bool) -> None:
    row = {"turn": 1, "kind_tokens": {"system": 10}, "context_window": 1000, "reserve_tokens": 0,
           "count_drift": drift}
    assert _decorate_turn(row, {})["drift_flag"] is flagged
    rule = R.RuleSpec(id=1, kind=K.COUNT_DRIFT, params=K.default_params(K.COUNT_DRIFT), cooldown_turns=0)
    assert K.default_params(K.COUNT_DRIFT)["drift_pct"] == COUNT_DRIFT_WARN * 100
    turn = R.Turn(ref=1, turn=1, ts=datetime(2026, 1, 1, tzinfo=UTC), watermark=0.1, tier="ok",
                  usable_tokens=1000, count_drift=drift)
    assert bool(R.evaluate_line([rule], [turn])) is flagged
