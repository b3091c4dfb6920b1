"""Whether answers changed beyond noise (ORM-free, standard library only): exact tests,
bootstrap intervals, permutation tests, and verdicts that say it in words.

Replay's verdicts (replay.measures) and the experiments app's comparisons (experiments.stats
re-exports this module) rest on the same tests. The samples are few (a handful of answers per
variant, tens of items per evaluation set), so the tests here are exact where that is affordable
(Fisher, McNemar, permutation tests by enumeration) and resample otherwise, always with a fixed
seed: the same results give the same verdict on every page load.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

# A table as likely as the observed one counts as "as extreme" despite float error (scipy's
# fisher_exact uses the same relative tolerance).
FISHER_RTOL = 1 + 1e-7
# Points of the common rate over which Boschloo's test takes its supremum (then as many again,
# finer, around the best): the p-value is found to well within 1e-4 of the exact supremum.
BOSCHLOO_GRID = 200
# Permutation statistics equal to the observed one up to float error count as "as extreme".
STAT_EPS = 1e-12
DEFAULT_ALPHA = 0.05
WORSE = "worse"
BETTER = "better"
SAME = "same"
DIRECTIONS = (WORSE, BETTER, SAME)
# Words that read after "answers" ("0 of 8 answers without memory") rather than before it.
_TRAILING_LABEL_WORDS = ("with", "without", "after", "before", "under", "using", "in", "on", "at", "from")


@dataclass(frozen=True)
class Verdict:
    """The outcome of a comparison: whether it changed beyond noise, its p-value, a sentence for
    the page, and which way it went ("worse", "better", or "same" when not changed)."""

    changed: bool
    p: float
    words: str
    direction: str


# --- exact tests -----------------------------------------------------------------------------
def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _check_counts(yes: int, n: int, name: str) -> None:
    if n < 0 or yes < 0 or yes > n:
        raise ValueError(f"{name}: need 0 <= yes <= n, got {yes} of {n}")


def fisher_exact(a_yes: int, a_n: int, b_yes: int, b_n: int) -> float:
    """Two-sided p-value of Fisher's exact test on [[a_yes, a_n - a_yes], [b_yes, b_n - b_yes]]:
    the total probability, under fixed margins, of the tables no more likely than the observed."""
    _check_counts(a_yes, a_n, "a")
    _check_counts(b_yes, b_n, "b")
    total = a_n + b_n
    yes = a_yes + b_yes
    lo = max(0, a_n - (total - yes))
    hi = min(yes, a_n)
    if lo == hi:
        return 1.0
    log_denominator = _log_choose(total, a_n)

    def log_p(x: int) -> float:
        return _log_choose(yes, x) + _log_choose(total - yes, a_n - x) - log_denominator

    observed = log_p(a_yes)
    cutoff = observed + math.log(FISHER_RTOL)
    p = sum(math.exp(lp) for x in range(lo, hi + 1) if (lp := log_p(x)) <= cutoff)
    return min(1.0, p)


def boschloo_exact(a_yes: int, a_n: int, b_yes: int, b_n: int) -> float:
    """Two-sided p-value of Boschloo's exact unconditional test on the same table as
    fisher_exact: the tables are ordered by Fisher's p-value, and the p-value is the largest
    probability, over the common rate, of the tables no more likely than the observed one
    (two independent binomials). Never above Fisher's; with 3 answers a side, 3 of 3 against 0
    of 3 gives 0.031 where Fisher's gives 0.1."""
    _check_counts(a_yes, a_n, "a")
    _check_counts(b_yes, b_n, "b")
    return _boschloo(a_yes, a_n, b_yes, b_n)


@functools.lru_cache(maxsize=4096)
def _boschloo(a_yes: int, a_n: int, b_yes: int, b_n: int) -> float:
    observed = fisher_exact(a_yes, a_n, b_yes, b_n)
    if observed >= 1.0:
        return 1.0
    cutoff = observed * FISHER_RTOL
    extreme = [
        (math.comb(a_n, x) * math.comb(b_n, y), x + y)
        for x in range(a_n + 1)
        for y in range(b_n + 1)
        if fisher_exact(x, a_n, y, b_n) <= cutoff
    ]
    n = a_n + b_n

    def tail(pi: float) -> float:
        return math.fsum(c * pi**k * (1 - pi) ** (n - k) for c, k in extreme)

    # The supremum over the common rate: a grid, then a finer one around its best point.
    grid = [(i + 0.5) / BOSCHLOO_GRID for i in range(BOSCHLOO_GRID)]
    best = max(grid, key=tail)
    step = 1 / BOSCHLOO_GRID
    fine = [best + step * (j / BOSCHLOO_GRID - 0.5) for j in range(BOSCHLOO_GRID + 1)]
    sup = max(tail(pi) for pi in [*grid, *fine] if 0 < pi < 1)
    return min(observed, sup)


def distance_permutation_test(
    distances: Sequence[Sequence[float]], n_a: int, *, n_perm: int = 2000, seed: int = 0
) -> float:
    """One-sided p-value that the items after the first N_A (B) are further from the first N_A
    (A) than those are from each other, under DISTANCES (a symmetric matrix over A then B). The
    statistic is the mean A-B distance minus the mean distance between two A items; the labels
    of the items (not of the distances, which share items) are permuted: every split when there
    are at most N_PERM, else N_PERM random ones (seeded), (1 + as extreme) / (1 + N_PERM)."""
    n = len(distances)
    if not 2 <= n_a < n:
        raise ValueError("a distance permutation test needs two A items and one B item")

    def stat(a: Sequence[int]) -> float:
        inside = set(a)
        b = [j for j in range(n) if j not in inside]
        cross = math.fsum(distances[i][j] for i in a for j in b) / (len(a) * len(b))
        pairs = list(itertools.combinations(a, 2))
        within = math.fsum(distances[i][j] for i, j in pairs) / len(pairs)
        return cross - within

    observed = stat(range(n_a))
    threshold = observed - STAT_EPS * max(1.0, abs(observed))
    if math.comb(n, n_a) <= n_perm:
        splits = list(itertools.combinations(range(n), n_a))
        return sum(1 for a in splits if stat(a) >= threshold) / len(splits)
    rng = random.Random(seed)
    extreme = sum(1 for _ in range(n_perm) if stat(rng.sample(range(n), n_a)) >= threshold)
    return (1 + extreme) / (1 + n_perm)


def smallest_permutation_p(n: int, n_a: int, *, n_perm: int = 2000) -> float:
    """The smallest p-value distance_permutation_test can give for N items, N_A of them A."""
    splits = math.comb(n, n_a)
    return 1 / splits if splits <= n_perm else 1 / (1 + n_perm)


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value on the discordant pairs B and C (binomial, p = 1/2);
    1.0 when there are none."""
    if b < 0 or c < 0:
        raise ValueError("discordant counts cannot be negative")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.exp(_log_choose(n, i) - n * math.log(2)) for i in range(k + 1))
    return min(1.0, 2 * tail)


# --- resampling ------------------------------------------------------------------------------
def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """The Q quantile of SORTED_VALUES, interpolated linearly between order statistics."""
    pos = q * (len(sorted_values) - 1)
    i = math.floor(pos)
    j = min(i + 1, len(sorted_values) - 1)
    return sorted_values[i] + (sorted_values[j] - sorted_values[i]) * (pos - i)


def bootstrap_ci(
    values: Sequence[float], *, n_boot: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, lo, hi): the mean of VALUES and its percentile bootstrap interval at LEVEL,
    resampling items N_BOOT times; the same SEED gives the same interval. One value gives
    (mean, mean, mean); no values raise ValueError."""
    if not values:
        raise ValueError("a bootstrap needs at least one value")
    if not 0 < level < 1:
        raise ValueError("level must be between 0 and 1")
    if n_boot < 1:
        raise ValueError("n_boot must be at least 1")
    xs = [float(v) for v in values]
    mean = _mean(xs)
    n = len(xs)
    if n == 1:
        return mean, mean, mean
    rng = random.Random(seed)
    means = sorted(math.fsum(rng.choices(xs, k=n)) / n for _ in range(n_boot))
    tail = (1 - level) / 2
    return mean, _quantile(means, tail), _quantile(means, 1 - tail)


def _paired_differences(a: Sequence[float], b: Sequence[float]) -> list[float]:
    if len(a) != len(b):
        raise ValueError(f"paired values need the same number of items ({len(a)} and {len(b)})")
    return [float(y) - float(x) for x, y in zip(a, b, strict=True)]


def paired_bootstrap_ci(
    a: Sequence[float], b: Sequence[float], *, n_boot: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, lo, hi) of B - A over paired items (A[i] and B[i] are the same item), by
    bootstrap_ci over the items' differences."""
    return bootstrap_ci(_paired_differences(a, b), n_boot=n_boot, level=level, seed=seed)


def permutation_test(
    x: Sequence[float],
    y: Sequence[float],
    *,
    n_perm: int = 2000,
    seed: int = 0,
    alternative: str = "two-sided",
) -> float:
    """P-value of a permutation test for a difference in means between X and Y: two-sided, or
    with ALTERNATIVE "greater" that X's mean is larger. Every split of the pooled values is
    enumerated when there are at most N_PERM of them; otherwise N_PERM random splits (seeded)
    give the estimate (1 + as extreme) / (1 + N_PERM), which is never 0."""
    if alternative not in ("two-sided", "greater"):
        raise ValueError("alternative must be 'two-sided' or 'greater'")
    if not x or not y:
        raise ValueError("a permutation test needs values on both sides")
    pooled = [float(v) for v in (*x, *y)]
    n, k = len(pooled), len(x)
    total = math.fsum(pooled)

    def stat(sum_x: float) -> float:
        d = sum_x / k - (total - sum_x) / (n - k)
        return abs(d) if alternative == "two-sided" else d

    observed = stat(math.fsum(pooled[:k]))
    threshold = observed - STAT_EPS * max(1.0, abs(observed))
    if math.comb(n, k) <= n_perm:
        splits = list(itertools.combinations(range(n), k))
        extreme = sum(1 for idx in splits if stat(math.fsum(pooled[i] for i in idx)) >= threshold)
        return extreme / len(splits)
    rng = random.Random(seed)
    extreme = sum(1 for _ in range(n_perm) if stat(math.fsum(rng.sample(pooled, k))) >= threshold)
    return (1 + extreme) / (1 + n_perm)


def paired_permutation_test(
    a: Sequence[float], b: Sequence[float], *, n_perm: int = 2000, seed: int = 0
) -> float:
    """Two-sided p-value of a sign-flip test on the paired differences B - A (their mean is 0
    under no effect): all 2^n sign patterns when at most N_PERM, else N_PERM random ones."""
    diffs = _paired_differences(a, b)
    if not diffs:
        raise ValueError("a paired test needs at least one item")
    observed = abs(math.fsum(diffs))
    threshold = observed - STAT_EPS * max(1.0, observed)
    patterns = 1 << len(diffs)
    if patterns <= n_perm:
        extreme = sum(
            1
            for signs in itertools.product((1.0, -1.0), repeat=len(diffs))
            if abs(math.fsum(s * d for s, d in zip(signs, diffs, strict=True))) >= threshold
        )
        return extreme / patterns
    rng = random.Random(seed)
    extreme = 0
    for _ in range(n_perm):
        if abs(math.fsum(d if rng.random() < 0.5 else -d for d in diffs)) >= threshold:
            extreme += 1
    return (1 + extreme) / (1 + n_perm)


# --- words -----------------------------------------------------------------------------------
def format_p(p: float) -> str:
    """"p < 0.001" below 0.001, else "p = " and two significant digits."""
    if p < 0.001:
        return "p < 0.001"
    return f"p = {format_number(p)}"


def format_number(x: float) -> str:
    """X with two significant digits, never in exponent notation (0.075, -0.12, 3,100)."""
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{round(x, 1 - int(math.floor(math.log10(abs(x))))):,.0f}"
    digits = max(0, 1 - int(math.floor(math.log10(abs(x)))))
    # Half up, as people round: 0.0625 reads "0.063" (float rounding would give "0.062").
    text = f"{Decimal(repr(x)).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP):f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def answers_phrase(count: int, n: int, label: str) -> str:
    """"3 of 8 baseline answers", or "0 of 8 answers without memory" when LABEL opens with a
    preposition."""
    first = label.split(" ", 1)[0]
    if first in _TRAILING_LABEL_WORDS:
        return f"{count} of {n} answers {label}"
    return f"{count} of {n} {label} answers"


def _direction(delta: float, higher_is_better: bool) -> str:
    if delta == 0:
        return SAME
    return BETTER if (delta > 0) == higher_is_better else WORSE


def _outcome(changed: bool, direction: str, p: float) -> str:
    """"changed, p = …" (or the direction in place of "changed"), or "within noise (p = …)"."""
    if changed:
        return f"{'changed' if direction == SAME else direction}, {format_p(p)}"
    return f"within noise ({format_p(p)})"


# --- verdicts --------------------------------------------------------------------------------
def proportion_verdict(
    *,
    base_yes: int,
    base_n: int,
    var_yes: int,
    var_n: int,
    what: str,
    alpha: float = DEFAULT_ALPHA,
    base_label: str = "baseline",
    var_label: str = "variant",
    higher_is_better: bool = True,
) -> Verdict:
    """Whether the share of answers with WHAT (a fact kept, a constraint respected) differs
    between the baseline and the variant, by Fisher's exact test at ALPHA. A label is a word
    read before "answers" ("baseline answers"), or a phrase starting with a preposition read
    after it ("answers without memory"). Direction: the variant's share is "worse" when it is
    lower and HIGHER_IS_BETTER, and "same" when not changed."""
    p = fisher_exact(base_yes, base_n, var_yes, var_n)
    changed = p < alpha
    delta = (var_yes / var_n if var_n else 0.0) - (base_yes / base_n if base_n else 0.0)
    direction = _direction(delta, higher_is_better) if changed else SAME
    words = (
        f"{what} in {answers_phrase(base_yes, base_n, base_label)} and "
        f"{answers_phrase(var_yes, var_n, var_label)}: {_outcome(changed, SAME, p)}"
    )
    return Verdict(changed=changed, p=p, words=words, direction=direction)


def distance_verdict(
    *,
    baseline_pairwise: Sequence[float],
    variant_vs_baseline: Sequence[float],
    alpha: float = DEFAULT_ALPHA,
    what: str = "the answer",
) -> Verdict:
    """Whether variant answers are further from the baseline answers (VARIANT_VS_BASELINE) than
    baseline samples are from each other (BASELINE_PAIRWISE), for a distance such as the edit
    distance: a one-sided permutation test on the two sets of distances. The distances share
    samples, so they are not independent and the p-value is a guide rather than exact. Fewer
    than two distances on either side: not changed, more samples needed."""
    if len(baseline_pairwise) < 2 or len(variant_vs_baseline) < 2:
        words = (
            "needs more samples: at least 2 distances between baseline samples and 2 from variant "
            f"answers (have {len(baseline_pairwise)} and {len(variant_vs_baseline)})"
        )
        return Verdict(changed=False, p=1.0, words=words, direction=SAME)
    p = permutation_test(variant_vs_baseline, baseline_pairwise, alternative="greater")
    changed = p < alpha
    words = (
        f"{what} is {_mean(variant_vs_baseline):.2f} from the baseline answers on average, "
        f"baseline samples {_mean(baseline_pairwise):.2f} from each other: {_outcome(changed, SAME, p)}"
    )
    return Verdict(changed=changed, p=p, words=words, direction=WORSE if changed else SAME)


def paired_verdict(
    *,
    a: Sequence[float],
    b: Sequence[float],
    metric: str,
    higher_is_better: bool,
    alpha: float = DEFAULT_ALPHA,
    seed: int = 0,
    b_label: str = "B",
) -> Verdict:
    """Whether B differs from A on METRIC over paired items: the paired bootstrap interval of
    B - A at level 1 - ALPHA and a sign-flip test. Changed when the interval excludes 0 and the
    test's p is below ALPHA: with a handful of items a percentile interval is too narrow on
    its own."""
    level = 1 - alpha
    mean, lo, hi = paired_bootstrap_ci(a, b, level=level, seed=seed)
    p = paired_permutation_test(a, b, seed=seed)
    changed = (lo > 0 or hi < 0) and p < alpha
    ci = f"{format_number(level * 100)}% CI {format_number(lo)} to {format_number(hi)}"
    if not changed:
        words = f"no difference in {metric} beyond noise ({ci}, {format_p(p)})"
        return Verdict(changed=False, p=p, words=words, direction=SAME)
    direction = _direction(mean, higher_is_better)
    verb = "gains" if mean > 0 else "loses"
    words = f"{b_label} {verb} {format_number(abs(mean))} {metric} ({ci}): {_outcome(True, direction, p)}"
    return Verdict(changed=True, p=p, words=words, direction=direction)


def mcnemar_verdict(
    *,
    a_pass: Sequence[bool],
    b_pass: Sequence[bool],
    what: str = "items",
    alpha: float = DEFAULT_ALPHA,
    a_label: str = "A",
    b_label: str = "B",
) -> Verdict:
    """Whether B passes a different share of the same items than A, by McNemar's exact test
    on the items where they disagree."""
    if len(a_pass) != len(b_pass):
        raise ValueError(f"paired results need the same number of items ({len(a_pass)} and {len(b_pass)})")
    lost = sum(1 for x, y in zip(a_pass, b_pass, strict=True) if x and not y)
    gained = sum(1 for x, y in zip(a_pass, b_pass, strict=True) if y and not x)
    a_passed = sum(1 for x in a_pass if x)
    p = mcnemar_exact(lost, gained)
    changed = p < alpha
    direction = _direction(gained - lost, True) if changed else SAME
    words = (
        f"{b_label} fails {lost} of {a_passed} {what} that {a_label} passed and passes {gained} "
        f"that {a_label} failed: {_outcome(changed, direction, p)}"
    )
    return Verdict(changed=changed, p=p, words=words, direction=direction)


# --- compression sweeps ----------------------------------------------------------------------
def knee(points: Sequence[tuple[float, float]]) -> int | None:
    """The knee of a compression sweep, as an index into POINTS, each (ratio, fidelity) with
    ratio = tokens after / tokens before; None with fewer than 3 points.

    The points are read from the least compressed (highest ratio) to the most. The knee is the
    last point before fidelity first falls faster than tokens: the first point whose next step
    loses more fidelity than ratio (a slope above 1). When no step is that steep, it is the
    Kneedle point: with compression (1 - ratio) and fidelity both scaled to [0, 1], the point
    furthest above the straight line from the first point to the last; None when no point is
    above it (fidelity falls evenly or not at all)."""
    if len(points) < 3:
        return None
    order = sorted(range(len(points)), key=lambda i: -points[i][0])
    for here, nxt in itertools.pairwise(order):
        (r0, f0), (r1, f1) = points[here], points[nxt]
        drop, saved = f0 - f1, r0 - r1
        if drop > 0 and (saved <= 0 or drop / saved > 1):
            return here
    ratios = [points[i][0] for i in order]
    fidelities = [points[i][1] for i in order]
    r_span = ratios[0] - ratios[-1]
    f_lo, f_hi = min(fidelities), max(fidelities)
    if r_span <= 0 or f_hi <= f_lo:
        return None
    scaled = [
        ((ratios[0] - r) / r_span, (f - f_lo) / (f_hi - f_lo))
        for r, f in zip(ratios, fidelities, strict=True)
    ]
    y_first, y_last = scaled[0][1], scaled[-1][1]
    best, best_gap = None, STAT_EPS
    for i, (x, y) in zip(order, scaled, strict=True):
        gap = y - (y_first + (y_last - y_first) * x)
        if gap > best_gap:
            best, best_gap = i, gap
    return best
