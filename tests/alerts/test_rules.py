"""The pure rule evaluation on crafted lines of turns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from alerts import kinds as K
from alerts import rules as R

BASE = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
TIERS_AT = ((0.95, "break"), (0.85, "force"), (0.70, "compress"), (0.60, "warn"), (0.0, "ok"))


def tier(wm: float) -> str:
    return next(t for lo, t in TIERS_AT if wm >= lo)


def turn(i: int, wm: float = 0.3, **kw: Any) -> R.Turn:
    return R.Turn(
        ref=1000 + i,
        turn=i,
        ts=BASE + timedelta(seconds=10 * i),
        watermark=wm,
        tier=tier(wm),
        usable_tokens=10_000,
        **kw,
    )


def spec(kind: str, rule_id: int = 1, **params: Any) -> R.RuleSpec:
    clean, errors = K.validate_params(kind, params)
    assert not errors
    return R.RuleSpec(id=rule_id, kind=kind, params=clean)


def fired_turns(rule: R.RuleSpec, line: list[R.Turn]) -> list[int]:
    return [f.turn.turn for f in R.evaluate_line([rule], line)]


@pytest.mark.parametrize(
    ("target", "watermarks", "expected"),
    [
        ("force", [0.3, 0.5, 0.9, 0.9, 0.7, 0.88], [2, 5]),
        ("force", [0.3, 0.99], [1]),  # jumping straight past force into break still enters force
        ("break", [0.3, 0.9, 0.94, 0.96], [3]),
        ("warn", [0.65], [0]),  # a session that starts above the tier
        ("compress", [0.1, 0.2, 0.3], []),
    ],
    ids=["enters-twice", "skips-a-tier", "break", "first-turn", "never"],
)
def test_tier_crossing_fires_when_the_previous_turn_was_below(target, watermarks, expected):
    line = [turn(i, wm) for i, wm in enumerate(watermarks)]
    assert fired_turns(spec(K.TIER_CROSSING, tier=target), line) == expected


def test_watermark_spike_by_points_from_the_previous_turn():
    line = [turn(i, wm) for i, wm in enumerate([0.20, 0.25, 0.50, 0.52])]
    rule = spec(K.WATERMARK_SPIKE, rise_points=20, median_ratio=0)
    findings = R.evaluate_line([rule], line)
    assert [f.turn.turn for f in findings] == [2]
    assert findings[0].value == pytest.approx(25)
    assert findings[0].threshold == 20


def test_watermark_spike_against_the_recent_median():
    wms = [0.15, 0.16, 0.15, 0.14, 0.16, 0.40]
    line = [turn(i, wm) for i, wm in enumerate(wms)]
    rule = spec(K.WATERMARK_SPIKE, rise_points=0, median_ratio=2.0, median_turns=5, min_watermark_pct=30)
    findings = R.evaluate_line([rule], line)
    assert [f.turn.turn for f in findings] == [5]
    assert findings[0].value == pytest.approx(0.40 / 0.15)


def test_watermark_spike_median_ignores_small_contexts():
    line = [turn(i, wm) for i, wm in enumerate([0.01, 0.01, 0.01, 0.05])]
    rule = spec(K.WATERMARK_SPIKE, rise_points=0, median_ratio=2.0, min_watermark_pct=30)
    assert fired_turns(rule, line) == []


def test_block_share_counts_only_the_chosen_kinds():
    huge_history = turn(0, 0.8, kind_max=(("history", 6000, "history"), ("tool_results", 500, "search")))
    huge_tool = turn(1, 0.8, kind_max=(("history", 3000, "history"), ("tool_results", 4500, "search")))
    rule = spec(K.BLOCK_SHARE, share_pct=40, block_kinds="tool_results")
    findings = R.evaluate_line([rule], [huge_history, huge_tool])
    assert [f.turn.turn for f in findings] == [1]
    assert "'search'" in findings[0].title
    assert findings[0].value == pytest.approx(45)
    any_kind = spec(K.BLOCK_SHARE, share_pct=40, block_kinds=[])
    assert fired_turns(any_kind, [huge_history, huge_tool]) == [0, 1]


def test_compression_storm_counts_events_within_the_window():
    counts = [0, 1, 0, 1, 1, 0, 0, 0, 0, 1]
    line = [turn(i, n_compression=n) for i, n in enumerate(counts)]
    rule = spec(K.COMPRESSION_STORM, events=3, turns=4)
    assert fired_turns(rule, line) == [4]  # turns 1..4 hold 3 events; turn 9 is alone in its window


def test_validation_failure_rate_needs_enough_checks_and_a_failure_now():
    line = [
        turn(0, n_validation=1, n_validation_failed=1),  # 1 check: too few
        turn(1, n_validation=1, n_validation_failed=1),
        turn(2, n_validation=1, n_validation_failed=1),  # 3 of 3 failed
        turn(3, n_validation=1, n_validation_failed=0),  # no failure this turn
    ]
    rule = spec(K.VALIDATION_FAILURE_RATE, rate_pct=50, turns=10, min_checks=3)
    findings = R.evaluate_line([rule], line)
    assert [f.turn.turn for f in findings] == [2]
    assert findings[0].value == pytest.approx(100)


def test_recall_miss_rate_counts_turns_where_recall_ran_but_injected_nothing():
    line = [
        turn(0, n_recall=3, n_recall_injected=1),
        turn(1, n_recall=2, n_recall_injected=0),
        turn(2),  # recall did not run: not counted
        turn(3, n_recall=4, n_recall_injected=0),
    ]
    rule = spec(K.RECALL_MISS_RATE, rate_pct=50, turns=10, min_recalls=3)
    findings = R.evaluate_line([rule], line)
    assert [f.turn.turn for f in findings] == [3]
    assert findings[0].value == pytest.approx(200 / 3)


@pytest.mark.parametrize(
    ("drift", "fires"),
    [(0.04, False), (0.12, True), (-0.3, True), (None, False)],
    ids=["small", "over", "negative", "unreported"],
)
def test_count_drift_is_absolute(drift, fires):
    assert bool(fired_turns(spec(K.COUNT_DRIFT, drift_pct=10), [turn(0, count_drift=drift)])) is fires


def test_rule_narrowed_to_an_agent_or_a_model():
    line = [turn(0, 0.9, agent="travel-bot", model="gpt-4o"), turn(1, 0.3), turn(2, 0.9, agent="other")]
    narrowed = R.RuleSpec(id=1, kind=K.TIER_CROSSING, params={"tier": "force"}, agent="travel-bot")
    assert fired_turns(narrowed, line) == [0]
    by_model = R.RuleSpec(id=1, kind=K.TIER_CROSSING, params={"tier": "force"}, model="gpt-4o-mini")
    assert fired_turns(by_model, line) == []


def test_params_are_validated_with_reasons():
    clean, errors = K.validate_params(K.COMPRESSION_STORM, {"events": "x", "turns": 0, "bogus": 1})
    assert set(errors) == {"events", "turns", "bogus"}
    clean, errors = K.validate_params(K.TIER_CROSSING, {"tier": "ok"})
    assert "tier" in errors
    clean, errors = K.validate_params(K.BLOCK_SHARE, {"block_kinds": "tool_results, nope"})
    assert "nope" in errors["block_kinds"]


# --- episodes ----------------------------------------------------------------
def episodes(rule: R.RuleSpec, line: list[R.Turn]) -> list[R.Episode]:
    return R.episodes_for(R.evaluate_line([rule], line), {rule.id: rule}).get(rule.id, [])


def test_a_session_sitting_above_a_threshold_is_one_episode():
    line = [turn(i, 0.9, count_drift=0.3) for i in range(50)]
    rule = R.RuleSpec(id=1, kind=K.COUNT_DRIFT, params={"drift_pct": 10.0}, cooldown_turns=5)
    eps = episodes(rule, line)
    assert len(eps) == 1
    assert (eps[0].first_turn, eps[0].last_turn) == (0, 49)


def test_a_gap_longer_than_the_cooldown_starts_a_new_episode():
    drifts = [0.3] * 3 + [0.0] * 10 + [0.3] * 2
    line = [turn(i, count_drift=d) for i, d in enumerate(drifts)]
    short = R.RuleSpec(id=1, kind=K.COUNT_DRIFT, params={"drift_pct": 10.0}, cooldown_turns=5)
    assert [(e.first_turn, e.last_turn) for e in episodes(short, line)] == [(0, 2), (13, 14)]
    long = R.RuleSpec(id=1, kind=K.COUNT_DRIFT, params={"drift_pct": 10.0}, cooldown_turns=20)
    assert [(e.first_turn, e.last_turn) for e in episodes(long, line)] == [(0, 14)]


def test_cooldown_in_seconds_joins_findings_close_in_time():
    drifts = [0.3] + [0.0] * 10 + [0.3]
    line = [turn(i, count_drift=d) for i, d in enumerate(drifts)]  # 10 s apart
    rule = R.RuleSpec(
        id=1, kind=K.COUNT_DRIFT, params={"drift_pct": 10.0}, cooldown_turns=0, cooldown_seconds=200
    )
    assert len(episodes(rule, line)) == 1
    rule = R.RuleSpec(
        id=1, kind=K.COUNT_DRIFT, params={"drift_pct": 10.0}, cooldown_turns=0, cooldown_seconds=50
    )
    assert len(episodes(rule, line)) == 2


def test_a_late_earlier_finding_becomes_the_anchor():
    rule = R.RuleSpec(id=1, kind=K.COUNT_DRIFT, params={"drift_pct": 10.0}, cooldown_turns=5)
    late = [turn(i, count_drift=0.3) for i in (4, 5)]
    eps = R.episodes_for(R.evaluate_line([rule], late), {1: rule})
    early = R.evaluate_line([rule], [turn(2, count_drift=0.5)])
    eps = R.episodes_for(early, {1: rule}, eps)
    (ep,) = eps[1]
    assert (ep.first_turn, ep.last_turn, ep.anchor_moved) == (2, 5, True)
    assert ep.value == pytest.approx(50)


def test_contributors_rank_growth_for_spikes_and_size_otherwise():
    blocks = [
        {"position": 0, "key": "system", "kind": "system", "tokens": 300},
        {"position": 1, "key": "history", "kind": "history", "tokens": 5000},
        {"position": 2, "key": "search", "kind": "tool_results", "tokens": 2500},
        {"position": 3, "key": "user", "kind": "user", "tokens": 50},
    ]
    change = {
        "entered": [{"key": "search", "kind": "tool_results", "tokens": 2500}],
        "grew": [{"key": "history", "kind": "history", "before": 4800, "after": 5000}],
    }
    spike = R.contributors(K.WATERMARK_SPIKE, blocks=blocks, usable_tokens=10_000, change=change)
    assert [c["key"] for c in spike] == ["search", "history", "system"]
    assert spike[0]["delta"] == 2500 and spike[0]["share"] == 0.25
    size = R.contributors(K.COUNT_DRIFT, blocks=blocks, usable_tokens=10_000)
    assert [c["key"] for c in size] == ["history", "search", "system"]
