"""The measures of an answer's change: edit, task and semantic distances, and the verdicts."""

from __future__ import annotations

import pytest

from replay import measures as m


def _effect(text: str, baseline: list[str], noise: dict, n: int = 3, **kw: object) -> dict:
    """The effect of a variant that gave TEXT N times (a verdict compares distributions)."""
    return m.effect(text, baseline, noise, texts=[text] * n, **kw)  # type: ignore[arg-type]


def test_a_one_number_change_in_a_short_answer_is_far_from_1_but_above_a_zero_noise_floor() -> None:
    base = "Your locker code is 4417."
    changed = "Your locker code is 4418."
    d = m.edit_distance(base, changed)
    assert 0 < d < 0.2
    noise = m.noise_floor([base, base, base])
    eff = _effect(changed, [base] * 3, noise)
    assert eff["distance"] == pytest.approx(d)
    assert eff["within_noise"] is False and eff["verdict"] == m.CHANGED and eff["samples"] == 3
    # The task measure sees the one fact of the answer lost.
    assert eff["task_distance"] == 1.0


def test_the_edit_distance_is_zero_for_the_same_text_and_one_for_nothing_shared() -> None:
    assert m.edit_distance("Guangzhou.", "Guangzhou.") == 0.0
    assert m.edit_distance("", "") == 0.0
    assert m.edit_distance("aaaa", "zzzz") == 1.0
    # A reworded one-liner is not the maximum either: it keeps most characters.
    assert m.edit_distance("You fly to Guangzhou.", "You are flying to Guangzhou.") < 0.4


@pytest.mark.parametrize(
    ("reference", "answer", "expected"),
    [
        ("You are flying to Guangzhou.", "Guangzhou, of course!", 0.0),
        ("You are flying to Guangzhou.", "I don't know where you are going.", 1.0),
        ("Flight CZ3101 leaves at 9:45 for Guangzhou.", "CZ3101 to Guangzhou leaves at 10:15.", 1 / 3),
        ('{"order_id": 12, "refund": 30.5}', '```json\n{"refund": 30.5, "order_id": 12}\n```', 0.0),
        ('{"order_id": 12, "refund": 30.5}', '{"order_id": 12, "refund": 31}', 0.5),
        ('{"order_id": 12, "refund": 30.5}', "order 12, refund 30.5", 1.0),
        ("Sure, I can help with that.", "No.", None),
    ],
    ids=[
        "fact-kept",
        "fact-lost",
        "one-of-three-lost",
        "same-json",
        "json-field-changed",
        "json-lost",
        "no-facts",
    ],
)
def test_the_task_distance_counts_the_key_facts_lost(
    reference: str, answer: str, expected: float | None
) -> None:
    got = m.task_distance(reference, answer)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_the_task_distance_wants_the_same_tool_call_with_the_same_arguments() -> None:
    call = [{"function": {"name": "search_flights", "arguments": '{"day": "fri", "to": "CAN"}'}}]
    same = [{"function": {"name": "search_flights", "arguments": '{"to":"CAN","day":"fri"}'}}]
    other = [{"function": {"name": "search_flights", "arguments": '{"to":"PEK","day":"fri"}'}}]
    assert m.task_distance("", "", reference_tool_calls=call, tool_calls=same) == 0.0
    assert m.task_distance("", "", reference_tool_calls=call, tool_calls=other) == 1.0
    assert m.task_distance("", "I will search.", reference_tool_calls=call, tool_calls=[]) == 1.0


def test_the_semantic_distance_is_one_minus_the_cosine() -> None:
    assert m.semantic_distance([1.0, 0.0], [1.0, 0.0]) == pytest.approx(0.0)
    assert m.semantic_distance([1.0, 0.0], [0.0, 1.0]) == pytest.approx(1.0)
    assert m.semantic_distance([1.0, 0.0], [1.0, 1.0]) == pytest.approx(1 - 2**-0.5)
    assert m.semantic_distance(None, [1.0]) is None
    assert m.semantic_distance([0.0, 0.0], [1.0, 0.0]) is None


def test_a_verdict_needs_three_baseline_samples() -> None:
    for n in (0, 1, 2):
        texts = ["Guangzhou."] * n
        noise = m.noise_floor(texts)
        eff = _effect("I do not know.", texts, noise)
        assert eff["verdict"] == m.NEEDS_SAMPLES and noise["enough"] is False
    noise = m.noise_floor(["Guangzhou."] * 3)
    assert _effect("I do not know.", ["Guangzhou."] * 3, noise)["verdict"] == m.CHANGED
    assert _effect("Guangzhou.", ["Guangzhou."] * 3, noise)["verdict"] == m.WITHIN_NOISE
    # One answer of the variant is no distribution either.
    assert _effect("I do not know.", ["Guangzhou."] * 3, noise, n=1)["verdict"] == m.NEEDS_SAMPLES


def test_an_effect_inside_the_spread_of_every_measure_is_within_noise() -> None:
    nine, ten = "The flight leaves at nine.", "The flight leaves at ten."
    baseline = [nine, ten, nine, ten, nine]
    noise = m.noise_floor(baseline)
    assert noise["max"] == pytest.approx(m.edit_distance(baseline[0], baseline[1])) and noise["max"] > 0
    assert noise["samples"] == 5
    varied = m.effect(baseline[1], baseline, noise, texts=list(reversed(baseline)))
    assert varied["verdict"] == m.WITHIN_NOISE
    assert _effect("I cannot help with that request.", baseline, noise, n=5)["verdict"] == m.CHANGED
    # Three answers a side without a fact cannot show a change in wording: too few.
    assert _effect("I cannot help with that request.", baseline[:3], noise)["verdict"] == m.NEEDS_SAMPLES


def test_the_spread_of_embeddings_enters_the_noise_and_the_verdict() -> None:
    texts = ["Sure, happy to help.", "Sure, happy to help!"] * 2 + ["Sure, happy to help."]
    embs = [[1.0, 0.0], [1.0, 0.05]] * 2 + [[1.0, 0.0]]
    noise = m.noise_floor(texts, embeddings=embs)
    assert noise["measures"]["semantic"]["max"] > 0

    def variant(emb: list[float]) -> dict:
        return m.effect(
            texts[0], texts, noise, texts=texts, variant_embeddings=[emb] * 5, baseline_embeddings=embs
        )

    near, far = variant([1.0, 0.02]), variant([0.0, 1.0])
    assert near["verdict"] == m.WITHIN_NOISE
    assert far["verdict"] == m.CHANGED and far["semantic_distance"] > 0.9


def test_the_ranking_breaks_a_tie_of_the_edit_distance_with_the_task_distance() -> None:
    base = ["Your destination is Guangzhou."] * 3
    noise = m.noise_floor(base)
    keeps_fact = m.effect("Your destination: Guangzhou", base, noise)
    loses_fact = m.effect("Your destination is unknown.", base, noise)
    assert keeps_fact["task_distance"] == 0.0 and loses_fact["task_distance"] == 1.0
    assert m.rank_key(loses_fact) > m.rank_key(keeps_fact)
    # Combined distances within RANK_TIE of each other tie; the task distance decides.
    a = {"distance": 0.4012, "task_distance": 0.5}
    b = {"distance": 0.9031, "task_distance": None}
    c = {"distance": 0.95, "task_distance": 0.0}
    d = {"distance": 0.9, "task_distance": None, "semantic_distance": 0.3}
    assert sorted([a, b, c, d], key=m.rank_key, reverse=True) == [d, b, c, a]
