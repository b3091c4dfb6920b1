"""The figures of a comparison: a large set's one-resampling path in numpy says what each
metric's own test says (its speed is in bench/experiments.py)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from experiments import metrics


def _digest(facts: list[bool], tokens: float) -> dict[str, Any]:
    answers = [
        metrics.Answer(results={"f": ("fact", ok), "c": ("constraint", True)}, prompt_tokens=int(tokens))
        for ok in facts
    ]
    return metrics.digest(answers)


def _sides(n: int, lost: int, seed: int = 1) -> tuple[metrics.Side, metrics.Side]:
    rnd = random.Random(seed)
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    for i in range(n):
        keep = i >= lost
        a[str(i)] = (_digest([True, True, rnd.random() > 0.1], 1000 + i), 1.0)
        b[str(i)] = (_digest([keep, keep, keep and rnd.random() > 0.1], 400 + i), 0.4)
    return metrics.Side("as saved", a), metrics.Side("summarise", b)


@pytest.mark.parametrize(
    ("n", "lost", "changed"),
    [(40, 12, True), (40, 0, False), (120, 30, True)],
    ids=["40-items-12-lost", "40-items-none-lost", "120-items-30-lost"],
)
def test_the_numpy_path_says_what_each_metrics_own_test_says(n: int, lost: int, changed: bool) -> None:
    a, b = _sides(n, lost)
    keys = list(a.items)
    fast = {r["name"]: r for r in metrics._vector_rows(keys, a, b)}
    slow = {r["name"]: r for r in metrics._item_rows(keys, a, b)}
    for name in metrics.SAMPLED:
        assert fast[name]["changed"] == slow[name]["changed"], (
            name,
            fast[name]["verdict"],
            slow[name]["verdict"],
        )
    f, s = fast["fact_fidelity"], slow["fact_fidelity"]
    assert f["changed"] is changed
    assert f["diff"]["mean"] == pytest.approx(s["diff"]["mean"])
    assert f["diff"]["lo"] == pytest.approx(s["diff"]["lo"], abs=0.03)
    assert f["diff"]["hi"] == pytest.approx(s["diff"]["hi"], abs=0.03)
    assert f["a"]["mean"] == pytest.approx(s["a"]["mean"]) and f["b"]["n"] == s["b"]["n"] == n
    if changed:
        assert f["direction"] == "worse" and f["verdict"].startswith("summarise loses")
    assert fast["prompt_tokens"]["direction"] == "better"


def test_a_comparison_of_500_items_names_every_item_that_lost_its_fact() -> None:
    a, b = _sides(500, 100)
    out = metrics.compare(a, b)
    assert len(out["flipped"]) == 100 and out["lost_facts"] == 100
    assert {f["item"] for f in out["flipped"]} == {str(i) for i in range(100)}
    fidelity = next(m for m in out["metrics"] if m["name"] == "fact_fidelity")
    assert fidelity["changed"] and fidelity["p"] < 0.001


@pytest.mark.parametrize(("n", "few"), [(2, True), (5, True), (6, False), (12, False)])
def test_a_verdict_on_fewer_items_than_a_paired_test_needs_says_it_cannot_tell(n: int, few: bool) -> None:
    # Every item loses its facts: on 5 items the sign-flip test cannot reach p < 0.05 (2/32).
    a, b = _sides(n, lost=n)
    row = next(r for r in metrics.compare(a, b)["metrics"] if r["name"] == "fact_fidelity")
    if few:
        assert not row["changed"]
        words = row["verdict"]
        assert words.startswith(f"too few items to tell: {n} judged on fact fidelity"), words
        assert "beyond noise" not in row["verdict"]
    else:
        assert row["changed"] and row["direction"] == "worse", row["verdict"]
