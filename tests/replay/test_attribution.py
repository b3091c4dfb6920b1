"""The attribution surrogate (pure functions): ablation masks, the Lasso fit and its R²,
sentence units, and the plan an attribution job makes."""

from __future__ import annotations

import random

import pytest

from replay import ablation, attribution
from replay.errors import VariantError


def _synthetic(truth: list[float], n: int, seed: int, noise: float) -> tuple[list[list[bool]], list[float]]:
    masks = attribution.masks(len(truth), n, seed)
    rng = random.Random(seed)
    ys = [0.1 + sum(w for w, k in zip(truth, m, strict=True) if k) + rng.gauss(0, noise) for m in masks]
    return masks, ys


def test_the_surrogate_recovers_a_known_sparse_truth_and_reports_a_high_held_out_r2() -> None:
    truth = [0.0, 0.7, 0.0, 0.0, 0.15, 0.0, 0.0, 0.0]
    masks, ys = _synthetic(truth, 32, seed=3, noise=0.02)
    fit = attribution.fit(masks, ys)
    w = fit["weights"]
    assert max(range(len(w)), key=w.__getitem__) == 1
    assert w[1] == pytest.approx(0.7, abs=0.08) and w[4] == pytest.approx(0.15, abs=0.08)
    # Sparse: the sources that do nothing get (almost) nothing.
    assert all(abs(w[j]) < 0.05 for j in (0, 2, 3, 5, 6, 7))
    assert fit["folds"] == 4 and fit["n"] == 32 and fit["r2_holdout"] is not None and fit["r2_holdout"] > 0.9


def test_a_surrogate_fitted_on_pure_noise_has_a_poor_held_out_r2() -> None:
    masks = attribution.masks(6, 32, 5)
    rng = random.Random(9)
    fit = attribution.fit(masks, [rng.random() for _ in masks])
    assert fit["r2_holdout"] is not None and fit["r2_holdout"] < 0.5


def test_answers_that_never_vary_give_no_r2_and_zero_weights() -> None:
    masks = attribution.masks(4, 16, 1)
    fit = attribution.fit(masks, [0.8] * 16)
    assert fit["r2_holdout"] is None and fit["r2_train"] is None
    assert fit["weights"] == [0.0] * 4 and fit["intercept"] == pytest.approx(0.8)


def test_masks_are_seeded_and_keep_about_half() -> None:
    a = attribution.masks(10, 40, 7)
    assert a == attribution.masks(10, 40, 7) and a != attribution.masks(10, 40, 8)
    kept = sum(k for m in a for k in m) / 400
    assert 0.4 < kept < 0.6


def test_sentences_are_split_and_kept_without_touching_roles_or_tool_ids() -> None:
    msgs = [
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "Doc 1: Paris is big. Doc 2: Rome is old!\nDoc 3: Oslo.",
        },
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c2"}]},
        {"role": "tool", "tool_call_id": "c2", "content": "Nothing found."},
    ]
    units = attribution.sentence_units(msgs)
    assert [u["text"] for u in units] == [
        "Doc 1: Paris is big.",
        "Doc 2: Rome is old!",
        "Doc 3: Oslo.",
        "Nothing found.",
    ]
    kept = attribution.keep_sentences(msgs, [1, 3])
    assert kept[0] == {"role": "tool", "tool_call_id": "c1", "content": "Doc 2: Rome is old!"}
    assert kept[1] == msgs[1] and kept[2]["content"] == "Nothing found."


def _blocks() -> list[dict[str, object]]:
    def b(key: str, kind: str, text: str) -> dict[str, object]:
        return {"key": key, "kind": kind, "messages": [{"role": "system", "content": text}], "tokens": 5}

    return [
        b("system", "system", "You answer briefly."),
        b("memory", "memory", "The code is 4417."),
        b("history", "history", "We talked about the weather. It was sunny."),
        b("retrieval", "retrieval", "Doc A is about cats. Doc B is about dogs. Doc C is about fish."),
        {
            "key": "user",
            "kind": "user",
            "messages": [{"role": "user", "content": "What is my code?"}],
            "tokens": 5,
        },
    ]


def test_an_attribution_plan_ablates_every_block_but_the_system_prompt_and_the_question() -> None:
    blocks = _blocks()
    plans = ablation.plan_variants(kind="attribution", blocks=blocks, samples=3, ablations=16, seed=4)
    assert plans[0].is_baseline and plans[0].samples == 3 and len(plans) == 17
    removed = {op["key"] for p in plans[1:] for op in p.operations}
    assert removed == {"memory", "history", "retrieval"}
    for p in plans[1:]:
        mask = attribution.mask_of(p.operations, ["memory", "history", "retrieval"], None)
        kept = [b["key"] for b in ablation.apply_operations(blocks, p.operations)]
        assert kept == [
            "system",
            *[k for k, m in zip(["memory", "history", "retrieval"], mask, strict=True) if m],
            "user",
        ]
    again = ablation.plan_variants(kind="attribution", blocks=blocks, samples=3, ablations=16, seed=4)
    assert [p.operations for p in again] == [p.operations for p in plans]


def test_a_sentence_level_plan_keeps_sentences_of_one_block() -> None:
    blocks = _blocks()
    plans = ablation.plan_variants(kind="attribution", blocks=blocks, block_key="retrieval", ablations=8)
    for p in plans[1:]:
        (op,) = p.operations
        assert op["op"] == "keep_sentences" and op["key"] == "retrieval"
        out = ablation.apply_operations(blocks, p.operations)
        text = out[3]["messages"][0]["content"]
        assert text == " ".join(
            ["Doc A is about cats.", "Doc B is about dogs.", "Doc C is about fish."][i] for i in op["keep"]
        )
        assert [b["key"] for b in out] == [b["key"] for b in blocks]


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"ablations": 4}, "ablations must be from 8"),
        ({"block_key": "memory"}, "at least two sentences"),
        ({"block_key": "nope"}, "no block with key 'nope'"),
    ],
)
def test_an_attribution_that_cannot_be_planned_says_why(kw: dict[str, object], message: str) -> None:
    with pytest.raises(VariantError, match=message):
        ablation.plan_variants(kind="attribution", blocks=_blocks(), **kw)  # type: ignore[arg-type]


def test_a_turn_with_one_source_cannot_be_attributed() -> None:
    blocks = [b for b in _blocks() if b["key"] in ("system", "memory", "user")]
    with pytest.raises(VariantError, match="at least two blocks"):
        ablation.plan_variants(kind="attribution", blocks=blocks)
