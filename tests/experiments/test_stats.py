"""The statistics behind a context experiment's verdicts: known values, seeded determinism,
interval coverage, and the words the pages show."""

from __future__ import annotations

import math
import random

import pytest

from experiments import stats


# --- exact tests -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ((8, 8, 0, 8), 2 / 12870),
        ((3, 4, 1, 4), 0.485714),
        ((7, 8, 6, 8), 1.0),
        ((1, 9, 11, 14), 0.00275946),  # scipy.stats.fisher_exact([[1, 8], [11, 3]])
        ((8, 10, 1, 6), 0.0349650),  # scipy.stats.fisher_exact([[8, 2], [1, 5]])
        ((0, 5, 0, 5), 1.0),
        ((0, 0, 3, 7), 1.0),
    ],
    ids=["8-8-vs-0-8", "3-4-vs-1-4", "7-8-vs-6-8", "asymmetric", "scipy-docs", "all-no", "empty-side"],
)
def test_fisher_exact_matches_known_p_values(table: tuple[int, int, int, int], expected: float) -> None:
    assert stats.fisher_exact(*table) == pytest.approx(expected, rel=1e-4)


def test_fisher_exact_is_symmetric_in_the_two_sides() -> None:
    assert stats.fisher_exact(2, 10, 9, 12) == pytest.approx(stats.fisher_exact(9, 12, 2, 10))


def test_fisher_exact_handles_thousands_of_answers() -> None:
    p = stats.fisher_exact(1500, 3000, 1400, 3000)
    assert 0 < p < 0.02
    assert stats.fisher_exact(1500, 3000, 1500, 3000) == pytest.approx(1.0)


@pytest.mark.parametrize("table", [(3, 2, 0, 1), (-1, 2, 0, 1)], ids=["yes-above-n", "negative"])
def test_fisher_exact_refuses_impossible_counts(table: tuple[int, int, int, int]) -> None:
    with pytest.raises(ValueError):
        stats.fisher_exact(*table)


@pytest.mark.parametrize(
    ("b", "c", "expected"),
    [(0, 5, 0.0625), (5, 0, 0.0625), (0, 0, 1.0), (3, 3, 1.0), (1, 9, 0.021484375), (0, 10, 2 / 1024)],
    ids=["0-5", "5-0", "none", "balanced", "1-9", "0-10"],
)
def test_mcnemar_exact_is_the_two_sided_binomial(b: int, c: int, expected: float) -> None:
    assert stats.mcnemar_exact(b, c) == pytest.approx(expected)


# --- resampling --------------------------------------------------------------------------------
def test_bootstrap_is_deterministic_by_seed() -> None:
    values = [0.2, 0.9, 0.4, 0.7, 0.1, 0.8]
    assert stats.bootstrap_ci(values, seed=3) == stats.bootstrap_ci(values, seed=3)
    assert stats.bootstrap_ci(values, seed=3) != stats.bootstrap_ci(values, seed=4)
    mean, lo, hi = stats.bootstrap_ci(values)
    assert mean == pytest.approx(3.1 / 6)
    assert lo < mean < hi


def test_bootstrap_of_one_value_is_that_value_and_of_none_an_error() -> None:
    assert stats.bootstrap_ci([0.4]) == (0.4, 0.4, 0.4)
    with pytest.raises(ValueError):
        stats.bootstrap_ci([])


def test_bootstrap_interval_covers_the_true_mean_at_about_the_nominal_rate() -> None:
    rng = random.Random(11)
    trials, covered = 200, 0
    for t in range(trials):
        sample = [rng.gauss(0.5, 0.2) for _ in range(30)]
        _, lo, hi = stats.bootstrap_ci(sample, n_boot=400, seed=t)
        covered += lo <= 0.5 <= hi
    # Percentile intervals run a little narrow at n = 30; 95% nominal, binomial sd ~1.5%.
    assert 0.88 <= covered / trials <= 0.99


def test_paired_bootstrap_is_the_interval_of_the_differences() -> None:
    a = [1.0, 0.8, 0.9, 1.0, 0.7]
    b = [0.9, 0.7, 0.9, 0.8, 0.6]
    assert stats.paired_bootstrap_ci(a, b, seed=1) == stats.bootstrap_ci(
        [y - x for x, y in zip(a, b, strict=True)], seed=1
    )
    with pytest.raises(ValueError):
        stats.paired_bootstrap_ci([1.0], [1.0, 2.0])


def test_permutation_test_enumerates_small_splits_exactly() -> None:
    # 20 splits of 6 values into 3 and 3; only the observed one and its mirror are as extreme.
    assert stats.permutation_test([1, 2, 3], [4, 5, 6]) == pytest.approx(2 / 20)
    assert stats.permutation_test([4, 5, 6], [1, 2, 3], alternative="greater") == pytest.approx(1 / 20)
    assert stats.permutation_test([1, 2, 3], [4, 5, 6], alternative="greater") == pytest.approx(1.0)
    assert stats.permutation_test([1, 1, 1], [1, 1, 1]) == 1.0


def test_permutation_test_samples_large_splits_deterministically() -> None:
    rng = random.Random(5)
    x = [rng.random() + 0.3 for _ in range(25)]
    y = [rng.random() for _ in range(25)]
    p = stats.permutation_test(x, y, n_perm=500, seed=2)
    assert p == stats.permutation_test(x, y, n_perm=500, seed=2)
    assert 0 < p < 0.05
    assert stats.permutation_test(x, x, n_perm=500) > 0.5


def test_paired_permutation_test_flips_signs_exactly_for_few_items() -> None:
    # Five differences all of one sign: 2 of the 32 sign patterns are as extreme.
    assert stats.paired_permutation_test([1, 1, 1, 1, 1], [0, 0, 0, 0, 0]) == pytest.approx(2 / 32)
    assert stats.paired_permutation_test([1, 2], [1, 2]) == 1.0


# --- verdicts ----------------------------------------------------------------------------------
def test_a_fact_lost_in_every_answer_at_eight_samples_is_changed() -> None:
    v = stats.proportion_verdict(
        base_yes=8, base_n=8, var_yes=0, var_n=8, what="the fact was", var_label="without memory"
    )
    assert v.changed
    assert v.direction == "worse"
    assert v.p == pytest.approx(2 / 12870)
    assert v.words == (
        "the fact was in 8 of 8 baseline answers and 0 of 8 answers without memory: changed, p < 0.001"
    )


def test_one_fewer_answer_with_the_fact_at_eight_samples_is_within_noise() -> None:
    v = stats.proportion_verdict(base_yes=7, base_n=8, var_yes=6, var_n=8, what="the fact was")
    assert not v.changed
    assert v.direction == "same"
    assert v.words == (
        "the fact was in 7 of 8 baseline answers and 6 of 8 variant answers: within noise (p = 1)"
    )


def test_proportion_verdict_reads_direction_by_what_is_better() -> None:
    v = stats.proportion_verdict(
        base_yes=1, base_n=20, var_yes=12, var_n=20, what="a constraint was broken", higher_is_better=False
    )
    assert v.changed and v.direction == "worse"
    assert v.words == (
        "a constraint was broken in 1 of 20 baseline answers and 12 of 20 variant answers: changed, p < 0.001"
    )
    assert stats.proportion_verdict(
        base_yes=2, base_n=20, var_yes=14, var_n=20, what="the fact was"
    ).direction == "better"


@pytest.mark.parametrize(
    ("p", "text"),
    [
        (0.0001, "p < 0.001"),
        (0.003, "p = 0.003"),
        (0.0625, "p = 0.063"),
        (0.6125, "p = 0.61"),
        (1.0, "p = 1"),
    ],
    ids=["tiny", "small", "half-up", "two-digits", "one"],
)
def test_p_values_read_with_two_significant_digits(p: float, text: str) -> None:
    assert stats.format_p(p) == text


@pytest.mark.parametrize(
    ("x", "text"),
    [(0.075, "0.075"), (-0.1234, "-0.12"), (-0.03, "-0.03"), (3120.0, "3,100"), (95.0, "95"), (0.0, "0")],
    ids=["small", "negative", "one-digit", "thousands", "percent", "zero"],
)
def test_numbers_read_with_two_significant_digits(x: float, text: str) -> None:
    assert stats.format_number(x) == text


def test_distance_verdict_finds_answers_moved_beyond_the_baseline_spread() -> None:
    v = stats.distance_verdict(
        baseline_pairwise=[0.10, 0.12, 0.08], variant_vs_baseline=[0.50, 0.60, 0.55, 0.52, 0.58, 0.61]
    )
    assert v.changed and v.direction == "worse"
    assert v.p == pytest.approx(1 / 84)  # the observed split is the most extreme of C(9, 3)
    assert v.words == (
        "the answer is 0.56 from the baseline answers on average, baseline samples 0.10 from each "
        "other: changed, p = 0.012"
    )


def test_distance_verdict_within_the_baseline_spread_is_noise() -> None:
    v = stats.distance_verdict(
        baseline_pairwise=[0.10, 0.30, 0.20, 0.25], variant_vs_baseline=[0.15, 0.22, 0.28, 0.12]
    )
    assert not v.changed and v.direction == "same"
    assert "within noise (p = " in v.words


def test_distance_verdict_with_too_few_distances_asks_for_more_samples() -> None:
    v = stats.distance_verdict(baseline_pairwise=[0.1], variant_vs_baseline=[0.9, 0.8])
    assert not v.changed and v.p == 1.0
    assert v.words.startswith("needs more samples")


def test_paired_verdict_reports_a_loss_with_its_interval() -> None:
    a = [1.0] * 20
    b = [0.9, 0.95, 0.92, 1.0, 0.85] * 4
    v = stats.paired_verdict(a=a, b=b, metric="fact fidelity", higher_is_better=True)
    mean, lo, hi = stats.paired_bootstrap_ci(a, b, level=0.95)
    assert v.changed and v.direction == "worse"
    assert mean == pytest.approx(-0.076)
    assert v.words == (
        f"B loses 0.076 fact fidelity (95% CI {stats.format_number(lo)} to {stats.format_number(hi)}): "
        "worse, p < 0.001"
    )


def test_paired_verdict_without_a_difference_says_noise() -> None:
    v = stats.paired_verdict(a=[1.0] * 10, b=[0.98, 1.02] * 5, metric="fact fidelity", higher_is_better=True)
    assert not v.changed and v.direction == "same"
    assert v.words.startswith("no difference in fact fidelity beyond noise (95% CI -")


def test_paired_verdict_needs_more_than_a_narrow_interval_on_few_items() -> None:
    # Three items that all lost: the bootstrap interval excludes 0, but 3 items cannot show it.
    v = stats.paired_verdict(a=[1.0, 1.0, 1.0], b=[0.5, 0.6, 0.55], metric="fidelity", higher_is_better=True)
    assert not v.changed
    assert v.p == pytest.approx(2 / 8)


def test_paired_verdict_on_a_cost_metric_calls_a_gain_worse() -> None:
    v = stats.paired_verdict(
        a=[0.0] * 12, b=[1.0, 2.0, 1.0] * 4, metric="constraint violations", higher_is_better=False
    )
    assert v.changed and v.direction == "worse"
    assert v.words.startswith("B gains 1.3 constraint violations (95% CI ")


def test_mcnemar_verdict_counts_the_items_each_side_lost() -> None:
    a = [True] * 40
    v = stats.mcnemar_verdict(a_pass=a, b_pass=[False] * 3 + [True] * 37)
    assert not v.changed and v.p == pytest.approx(0.25)
    assert v.words == (
        "B fails 3 of 40 items that A passed and passes 0 that A failed: within noise (p = 0.25)"
    )
    v = stats.mcnemar_verdict(a_pass=a, b_pass=[False] * 10 + [True] * 30, what="tasks")
    assert v.changed and v.direction == "worse"
    assert v.words == "B fails 10 of 40 tasks that A passed and passes 0 that A failed: worse, p = 0.002"


def test_mcnemar_verdict_on_a_better_strategy() -> None:
    a = [False] * 12 + [True] * 8
    v = stats.mcnemar_verdict(a_pass=a, b_pass=[True] * 20, a_label="the baseline", b_label="the strategy")
    assert v.changed and v.direction == "better"
    assert v.words.startswith("the strategy fails 0 of 8 items that the baseline passed and passes 12 ")


# --- the knee of a compression sweep ---------------------------------------------------------
@pytest.mark.parametrize(
    ("points", "expected"),
    [
        ([(1.0, 1.0), (0.5, 0.98), (0.25, 0.95), (0.1, 0.5)], 2),
        ([(0.1, 0.5), (1.0, 1.0), (0.25, 0.95), (0.5, 0.98)], 2),  # unsorted: index into the input
        ([(1.0, 1.0), (0.5, 0.95), (0.25, 0.7), (0.1, 0.6)], 1),  # no step steeper than 1: Kneedle
        ([(1.0, 1.0), (0.5, 1.0), (0.2, 1.0)], None),  # fidelity never falls
        ([(1.0, 1.0), (0.5, 0.5), (0.0, 0.0)], None),  # falls evenly
        ([(1.0, 1.0), (0.5, 0.9)], None),  # too few points
    ],
    ids=["steep-last-step", "unsorted", "kneedle", "flat", "linear", "two-points"],
)
def test_knee_is_the_last_point_before_fidelity_falls_faster_than_tokens(
    points: list[tuple[float, float]], expected: int | None
) -> None:
    assert stats.knee(points) == expected


def test_verdicts_are_frozen() -> None:
    v = stats.mcnemar_verdict(a_pass=[True], b_pass=[True])
    with pytest.raises(AttributeError):
        v.changed = True  # type: ignore[misc]
    assert math.isclose(v.p, 1.0)


def test_the_server_reports_the_metrics_the_cli_knows_by_name() -> None:
    from ctxobs.wire import EXPERIMENT_METRICS
    from experiments.metrics import METRICS

    assert tuple(name for name, _, _ in METRICS) == EXPERIMENT_METRICS
