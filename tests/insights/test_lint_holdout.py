"""The prompt-injection set written blind, without reference to the check or the other sets
(bench/lint_injection_blind2.py), keeps `prompt_injection` off the default paging rules while the
check is below 0.95 precision on it: a check below the bar feeds no enabled default rule. The
check was tuned on bench/lint_injection_cases.py, bench/lint_injection_dev2.py and
bench/lint_injection_blind.py (the earlier holdouts), which are therefore no measure of it."""

from __future__ import annotations

import pytest

from alerts import kinds as K
from alerts.services.rules import DEFAULT_RULES, default_rules_create
from bench.lint import holdout_scores
from bench.lint_injection_blind import CASES as BLIND1
from bench.lint_injection_blind2 import CASES as BLIND
from bench.lint_injection_dev2 import CASES
from core.models import Project
from insights import lint

PAGING_PRECISION = 0.95


def test_the_independent_sets_have_enough_planted_and_near_miss_cases() -> None:
    for cases in (BLIND, BLIND1, CASES):
        planted = sum(1 for c in cases if c["label"])
        assert planted >= 40 and len(cases) - planted >= 40


def test_a_check_below_the_bar_on_the_blind_set_feeds_no_enabled_default_rule() -> None:
    scores = holdout_scores("bench.lint_injection_blind2")
    assert scores["cases"] == len(BLIND)
    assert scores["tp"] + scores["fn"] == sum(1 for c in BLIND if c["label"])
    paging = {
        check
        for rule in DEFAULT_RULES
        if rule.enabled and rule.kind == K.LINT_FINDING
        for check in (rule.params.get("checks") or lint.CHECKS)
    }
    if scores["precision"] < PAGING_PRECISION:
        assert lint.PROMPT_INJECTION not in paging, scores
    # The red line check still pages.
    assert "pinned_compressed" in paging


@pytest.mark.django_db
def test_a_new_project_gets_the_injection_rule_switched_off(project: Project) -> None:
    from alerts.models import AlertRule

    AlertRule.objects.filter(project=project).delete()
    rules = {r.name: r for r in default_rules_create(project=project)}
    injection = rules["Possible prompt injection"]
    assert not injection.enabled and injection.params["checks"] == ["prompt_injection"]
    red_line = rules["Red line lost"]
    assert (
        red_line.enabled
        and red_line.severity == "critical"
        and red_line.params["checks"] == ["pinned_compressed"]
    )


def test_the_scores_take_a_set_by_module_name_or_as_its_cases() -> None:
    assert holdout_scores("bench.lint_injection_dev2") == holdout_scores(CASES)
    planted = next(c for c in CASES if c["label"])
    near = next(c for c in CASES if not c["label"])
    two = holdout_scores([planted, near])
    assert two["cases"] == 2 and two["tp"] + two["fn"] == 1
    assert len(two["wrong"]) == two["fp"] + two["fn"]
