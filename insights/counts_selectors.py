"""Reads of the counts analyzer's figures, for the pages (through core.registry) and the tests."""

from __future__ import annotations

from collections.abc import Sequence

from core.registry import CountDrift
from insights.models import ModelCountRatio, TurnCount


def count_drifts(*, project_id: int, snapshot_refs: Sequence[int]) -> dict[int, CountDrift]:
    """Per analysed snapshot of SNAPSHOT_REFS: its drift against its model's usual ratio (one query)."""
    rows = TurnCount.objects.filter(project_id=project_id, snapshot_ref__in=list(snapshot_refs)).values_list(
        "snapshot_ref", "drift", "usual_ratio", "usual_n", "flagged", "native", "counted", "tokenizer")
    return {
        ref: CountDrift(
            drift=drift,
            usual_drift=(1 / usual - 1) if usual else None,
            usual_n=usual_n,
            flagged=flagged,
            counted=native if native is not None else counted,
            tokenizer=tokenizer,
        )
        for ref, drift, usual, usual_n, flagged, native, counted, tokenizer in rows
    }


def model_ratios(*, project_id: int) -> dict[str, float]:
    """The usual ratio (reported / ours) of each model of the project that has one."""
    return dict(ModelCountRatio.objects.filter(project_id=project_id).values_list("model_name", "ratio"))
