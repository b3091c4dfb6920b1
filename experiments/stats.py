"""Whether a strategy made answers worse: the statistics live in replay.stats (replay's verdicts
use them too, and replay sits below experiments); this module keeps their names for experiments."""

from __future__ import annotations

from replay.stats import (
    BETTER,
    DEFAULT_ALPHA,
    DIRECTIONS,
    FISHER_RTOL,
    SAME,
    STAT_EPS,
    WORSE,
    Verdict,
    bootstrap_ci,
    distance_verdict,
    fisher_exact,
    format_number,
    format_p,
    knee,
    mcnemar_exact,
    mcnemar_verdict,
    paired_bootstrap_ci,
    paired_permutation_test,
    paired_verdict,
    permutation_test,
    proportion_verdict,
)

__all__ = [
    "BETTER",
    "DEFAULT_ALPHA",
    "DIRECTIONS",
    "FISHER_RTOL",
    "SAME",
    "STAT_EPS",
    "WORSE",
    "Verdict",
    "bootstrap_ci",
    "distance_verdict",
    "fisher_exact",
    "format_number",
    "format_p",
    "knee",
    "mcnemar_exact",
    "mcnemar_verdict",
    "paired_bootstrap_ci",
    "paired_permutation_test",
    "paired_verdict",
    "permutation_test",
    "proportion_verdict",
]
