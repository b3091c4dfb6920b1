"""How a snapshot is read everywhere: the usable window, the tiers, repeated block keys."""

from __future__ import annotations

import pytest

from ctxobs.wire import DEFAULT_TIER_THRESHOLDS, occurrence_keys, tier_for, usable_window


@pytest.mark.parametrize(
    ("window", "reserve", "usable"),
    [(128_000, 19_200, 108_800), (1000, 0, 1000), (1000, 1000, 1), (1000, 5000, 1), (0, 0, 1)],
    ids=["default-reserve", "no-reserve", "reserve-fills-window", "reserve-beyond-window", "empty"],
)
def test_usable_window_is_window_less_reserve_and_never_below_one(
    window: int, reserve: int, usable: int
) -> None:
    assert usable_window(window, reserve) == usable


@pytest.mark.parametrize(
    ("watermark", "tier"),
    [(0.0, "ok"), (0.5999, "ok"), (0.60, "warn"), (0.70, "compress"), (0.85, "force"), (0.95, "break"),
     (3.0, "break")],
    ids=["empty", "below-warn", "warn", "compress", "force", "break", "overflowing"],
)
def test_default_tiers_start_at_the_default_thresholds(watermark: float, tier: str) -> None:
    assert DEFAULT_TIER_THRESHOLDS == (0.60, 0.70, 0.85, 0.95)
    assert tier_for(watermark) == tier


def test_a_project_threshold_moves_the_tier() -> None:
    assert tier_for(0.65, (0.5, 0.6, 0.8, 0.9)) == "compress"


def test_repeated_keys_are_numbered_from_the_second_occurrence() -> None:
    keys = ["system", "retrieval", "user", "retrieval", "retrieval", "system"]
    assert occurrence_keys(keys) == ["system", "retrieval", "user", "retrieval#2", "retrieval#3", "system#2"]
    assert occurrence_keys(iter([])) == []
