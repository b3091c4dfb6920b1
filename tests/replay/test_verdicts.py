"""Verdicts on distributions of answers (replay.measures.compare through effect): planted
distributions of a fact's presence, rewordings, tool calls and answers without facts."""

from __future__ import annotations

from typing import Any

import pytest

from replay import measures as m

FACT = "Your locker code is 4417."
LOST = "I'm not sure what your locker code is."


def _verdict(
    baseline: list[str], variant: list[str], label: str = "without memory", **kw: Any
) -> dict[str, Any]:
    noise = m.noise_floor(baseline, tool_calls=kw.get("baseline_tool_calls"))
    return m.effect(variant[0], baseline, noise, texts=variant, label=label, **kw)


def test_a_fact_in_8_of_8_baseline_answers_and_0_of_8_without_memory_is_changed_in_words() -> None:
    eff = _verdict([FACT] * 8, [LOST] * 8)
    assert eff["verdict"] == m.CHANGED and eff["within_noise"] is False
    assert eff["p"] < 0.001
    assert eff["verdict_words"] == (
        "the fact “4417” was in 8 of 8 baseline answers and 0 of 8 answers without memory: changed, p < 0.001"
    )
    (fact,) = [t for t in eff["tests"] if t["measure"] == "fact"]
    assert (fact["what"], fact["baseline"], fact["variant"]) == ("4417", 8, 0)
    assert eff["samples"] == 8 and eff["variant_samples"] == 8


@pytest.mark.parametrize(
    ("base_yes", "var_yes", "verdict"),
    [
        (8, 0, m.CHANGED),
        (7, 0, m.CHANGED),
        (7, 6, m.WITHIN_NOISE),
        (8, 8, m.WITHIN_NOISE),
        (6, 7, m.WITHIN_NOISE),
    ],
    ids=["8-of-8-vs-0", "7-of-8-vs-0", "7-of-8-vs-6", "8-of-8-vs-8", "6-of-8-vs-7"],
)
def test_the_verdict_follows_how_many_answers_state_the_fact(
    base_yes: int, var_yes: int, verdict: str
) -> None:
    baseline = [FACT] * base_yes + [LOST] * (8 - base_yes)
    variant = [FACT] * var_yes + [LOST] * (8 - var_yes)
    eff = _verdict(baseline, variant)
    assert eff["verdict"] == verdict
    assert f"was in {base_yes} of 8 baseline answers and {var_yes} of 8 answers without memory" in (
        eff["verdict_words"]
    )


def test_one_baseline_sample_missing_the_fact_no_longer_puts_everything_within_noise() -> None:
    baseline = [FACT] * 7 + [LOST]
    noise = m.noise_floor(baseline)
    # The spread of the baseline reaches the whole range: any answer was inside it.
    assert noise["measures"]["task"]["max"] == 1.0 and noise["max"] > 0.5
    eff = m.effect(LOST, baseline, noise, texts=[LOST] * 8, label="without memory")
    assert eff["distance"] <= noise["max"] and eff["task_distance"] <= noise["measures"]["task"]["max"]
    assert eff["verdict"] == m.CHANGED
    assert eff["verdict_words"].startswith(
        "the fact “4417” was in 7 of 8 baseline answers and 0 of 8 answers without memory: changed, p"
    )


def test_removing_an_irrelevant_block_at_a_temperature_is_within_noise() -> None:
    baseline = ["4417.", "Your locker code is 4417.", "The code is 4417.", "4417", "It is 4417."]
    variant = ["Your locker code is 4417.", "4417.", "4417", "Your code: 4417.", "The code is 4417."]
    eff = _verdict(baseline, variant, label="without history")
    assert eff["verdict"] == m.WITHIN_NOISE and eff["within_noise"] is True
    assert eff["verdict_words"].startswith(
        "the fact “4417” was in 5 of 5 baseline answers and 5 of 5 answers without history: within noise"
    )


def test_a_reworded_answer_that_keeps_its_facts_is_within_noise_and_says_it_is_worded_differently() -> None:
    # At temperature 0 every baseline answer is the same: the rewording is real, the fact kept.
    eff = _verdict(["4417."] * 5, ["The locker code is 4417"] * 5, label="without tools")
    assert eff["verdict"] == m.WITHIN_NOISE
    assert "worded differently (edit distance" in eff["verdict_words"]
    edit = next(t for t in eff["tests"] if t["measure"] == "edit")
    assert edit["decides"] is False and edit["p"] < 0.05


def test_three_samples_each_are_enough_to_call_a_lost_fact_changed() -> None:
    eff = _verdict(["4417."] * 3, [LOST] * 3)
    # Boschloo's exact test: 3 of 3 against 0 of 3 is p = 1/32 (Fisher's would be 0.1).
    assert eff["verdict"] == m.CHANGED and eff["p"] == pytest.approx(1 / 32, abs=1e-4)
    assert eff["verdict_words"] == (
        "the fact “4417” was in 3 of 3 baseline answers and 0 of 3 answers without memory: changed, p = 0.031"
    )
    # One of 3 keeping it is within noise at 3 samples.
    assert _verdict(["4417."] * 3, ["4417.", LOST, LOST])["verdict"] == m.WITHIN_NOISE


def test_a_lost_tool_call_is_a_check_of_its_own() -> None:
    call = [{"function": {"name": "search_flights", "arguments": '{"to": "CAN"}'}}]
    eff = _verdict(
        ["Searching."] * 4,
        ["Searching."] * 4,
        label="without tools",
        baseline_tool_calls=[call] * 4,
        variant_tool_calls=[[]] * 4,
    )
    assert eff["verdict"] == m.CHANGED
    assert eff["verdict_words"].startswith(
        "the tool call search_flights was in 4 of 4 baseline answers and 0 of 4 answers without tools: "
        "changed"
    )


def test_an_answer_without_facts_is_judged_by_its_distances() -> None:
    baseline = ["Sure, happy to help.", "Happy to help!"] * 2 + ["Sure, happy to help."]
    assert m.baseline_checks(baseline) == []
    same = _verdict(baseline, list(reversed(baseline)))
    assert same["verdict"] == m.WITHIN_NOISE
    moved = _verdict(baseline, ["I cannot do that request at all, sorry."] * 5, label="without system")
    assert moved["verdict"] == m.CHANGED
    assert moved["verdict_words"].startswith("the answers without system are ")
    assert "(edit distance): changed, p = " in moved["verdict_words"]
    # With three answers a side a permutation of six answers cannot reach p < 0.05.
    few = _verdict(baseline[:3], ["I cannot do that request at all, sorry."] * 3, label="without system")
    assert few["verdict"] == m.NEEDS_SAMPLES and "run 4 or more samples" in few["verdict_words"]


def test_a_baseline_of_one_answer_is_judged_on_how_often_the_variant_gives_it() -> None:
    # Temperature 0: every baseline sample is the same text, with no fact in it.
    eff = _verdict(["Guangzhou."] * 3, ["I do not know."] * 3)
    assert eff["verdict"] == m.CHANGED
    assert eff["verdict_words"].startswith(
        "the baseline's answer was in 3 of 3 baseline answers and 0 of 3 answers without memory: changed"
    )
    assert _verdict(["Guangzhou."] * 3, ["Guangzhou."] * 3)["verdict"] == m.WITHIN_NOISE


def test_the_checks_are_what_most_baseline_answers_carry() -> None:
    baseline = ["Gate 27, Alice.", "Gate 27.", "Gate 27, Bob."]
    assert m.baseline_checks(baseline) == [("fact", "27")]


@pytest.mark.parametrize(
    ("baseline_n", "variant_n"),
    [(2, 3), (3, 1)],
    ids=["two-baseline-samples", "one-variant-answer"],
)
def test_too_few_answers_on_either_side_need_more_samples(baseline_n: int, variant_n: int) -> None:
    eff = _verdict([FACT] * baseline_n, [LOST] * variant_n)
    assert eff["verdict"] == m.NEEDS_SAMPLES and eff["p"] is None
    assert eff["verdict_words"].startswith(
        "needs more samples: a verdict compares at least 3 baseline answers"
    )


def test_the_verdict_rarely_calls_a_change_between_draws_of_one_distribution() -> None:
    """Baseline and variant drawn alike (the fact in 80% of answers, in varied words): "changed"
    at most at the test's level."""
    import random

    rng = random.Random(7)
    yes = ["4417.", "It's 4417.", "The code is 4417.", "4417"]
    no = ["I'm not sure.", "I am in the kitchen.", "Your locker.", "Hello, I'm sorry."]

    def draw(n: int) -> list[str]:
        return [rng.choice(yes) if rng.random() < 0.8 else rng.choice(no) for _ in range(n)]

    for n in (3, 8):
        verdicts = [_verdict(draw(n), draw(n))["verdict"] for _ in range(120)]
        assert verdicts.count(m.CHANGED) / len(verdicts) <= 0.05, (n, verdicts.count(m.CHANGED))


def test_experiments_reads_the_same_statistics_as_replay() -> None:
    from experiments import stats as experiments_stats
    from replay import stats

    assert experiments_stats.fisher_exact is stats.fisher_exact
    assert experiments_stats.proportion_verdict is stats.proportion_verdict
    assert experiments_stats.Verdict is stats.Verdict


def test_boschloos_test_is_never_above_fishers_and_reaches_1_in_32_at_3_against_3() -> None:
    from replay import stats

    assert stats.boschloo_exact(3, 3, 0, 3) == pytest.approx(1 / 32, abs=1e-4)
    assert stats.fisher_exact(3, 3, 0, 3) == pytest.approx(0.1)
    for a in range(5):
        for b in range(5):
            assert stats.boschloo_exact(a, 4, b, 4) <= stats.fisher_exact(a, 4, b, 4) + 1e-12
    assert stats.boschloo_exact(2, 4, 2, 4) == pytest.approx(1.0)


def test_the_distance_permutation_test_permutes_answers_not_distances() -> None:
    from replay import stats

    def matrix(groups: list[int]) -> list[list[float]]:
        return [[0.0 if x == y else 1.0 for y in groups] for x in groups]

    # Two groups of 4, each all alike: 2 of the 70 splits are as far apart (A|B and B|A).
    assert stats.distance_permutation_test(matrix([0] * 4 + [1] * 4), 4) == pytest.approx(2 / 70)
    assert stats.distance_permutation_test(matrix([0] * 8), 4) == 1.0
    assert stats.smallest_permutation_p(6, 3) == pytest.approx(1 / 20)
