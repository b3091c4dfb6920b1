"""The independent prompt-injection set (bench/lint_injection_holdout.py, written without reference
to the check) decides whether `prompt_injection` may page by default: a check below 0.95 precision
on it feeds no enabled default rule."""

from __future__ import annotations

import pytest

from alerts import kinds as K
from alerts.services.rules import DEFAULT_RULES, default_rules_create
from bench.lint import holdout_scores
from bench.lint_injection_holdout import CASES
from core.models import Project
from insights import lint

PAGING_PRECISION = 0.95


def test_the_holdout_set_has_enough_planted_and_near_miss_cases() -> None:
    planted = sum(1 for c in CASES if c["label"])
    assert planted >= 40 and len(CASES) - planted >= 40


def test_a_check_below_the_bar_on_the_holdout_set_feeds_no_enabled_default_rule() -> None:
    scores = holdout_scores()
    assert scores["cases"] == len(CASES)
    assert scores["tp"] + scores["fn"] == sum(1 for c in CASES if c["label"])
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
