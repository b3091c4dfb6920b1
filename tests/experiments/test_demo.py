"""The demo's experiments (`ctxobs_up`): turns where both strategies have something to do and
the checks measure something, so that a newcomer's first comparison is not tokens alone."""

from __future__ import annotations

from typing import Any

import pytest

from experiments import demo
from experiments.models import EvalSet, Experiment
from tests import factories as f
from tests.replay.helpers import post

pytestmark = pytest.mark.django_db


def _rich(i: int) -> dict[str, Any]:
    return f.snapshot(
        session_id=f"rich{i}",
        turn=2,
        blocks=[
            f.block("system", "system", "You are a travel assistant.", pinned=True),
            f.block("memory", "memory", f"Memory: the user's booking code is BK{i:03d}."),
            f.block("history", "history", messages=[
                {"role": "user", "content": "Find a flight to Lisbon."},
                {"role": "assistant", "content": "Found one on Friday."},
                {"role": "user", "content": "Book it."},
                {"role": "assistant", "content": "Booked."},
            ]),
            f.block("user", "user", "What is my booking code?"),
        ],
        validation=[{"layer": "structure", "check": "json", "passed": True}],
    )


def _plain(i: int) -> dict[str, Any]:
    return f.snapshot(
        session_id=f"plain{i}",
        turn=0,
        blocks=[
            f.block("system", "system", "You are a travel assistant."),
            f.block("tool_results", "tool_results", "weather: sunny"),
            f.block("user", "user", "Weather?"),
        ],
    )


def test_the_demo_set_takes_the_turns_both_strategies_change(
    api: Any, private_project: Any, stub_endpoint: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(4):
        post(api, _plain(i))
    for i in range(3):
        post(api, _rich(i))
    for i in range(4, 8):
        post(api, _plain(i))
    monkeypatch.setattr(demo, "DEMO_ITEMS", 3)
    said = demo.demo_experiments(private_project)
    assert "3 turns" in said and "without memory" in said
    version = EvalSet.objects.get(project=private_project, name=demo.DEMO_SET).versions.get()
    items = list(version.items.order_by("position"))
    assert {i.context.snapshot["session_id"] for i in items} == {"rich0", "rich1", "rich2"}
    # The suggested checks are confirmed: the comparison measures the memory's facts.
    assert all(i.checks for i in items)
    exps = {e.strategy_label: e for e in Experiment.objects.filter(project=private_project)}
    assert set(exps) == {"as saved", "summarise history to 30% v1", "without memory v1"}
    assert exps["without memory v1"].n_not_applicable == 0
    # Run again: nothing new (the set exists).
    assert demo.demo_experiments(private_project) == ""
