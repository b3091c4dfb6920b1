"""The "cache hit rate fell" alert rule: the newest assembly version's hit rate against the
previous version's, one alert per rule and version."""

from __future__ import annotations

from typing import Any

import pytest

from alerts import kinds as K
from alerts import rules as R
from alerts.models import Alert
from alerts.services.cache_rules import cache_rules_evaluate
from alerts.services.rules import rule_create
from core.models import Project
from ingest import selectors
from ingest.models import AgentSession
from insights.cache_analysis import cache_analyze
from tests.insights.cache_factories import cache_turn

pytestmark = pytest.mark.django_db


def _deploy(api: Any, project: Project, *, version: str, sessions: int, stable: bool, start: int = 0) -> None:
    """SESSIONS sessions of 4 turns at VERSION; an unstable assembly puts the time in the system
    prompt, so every turn misses the cache."""
    snaps = []
    for s in range(start, start + sessions):
        for t in range(4):
            system = (
                "You are a travel assistant." if stable else f"You are a travel assistant. Now 08:{t:02d}"
            )
            cached = 3072 if stable and t else 0
            snaps.append(
                cache_turn(t, session_id=f"{version}-{s}", system=system, version=version, cached=cached)
            )
    r = api.post_snapshots(snaps)
    assert r.status_code == 200 and r.json()["created"] == len(snaps)
    refs = [selectors.snapshot_by_uuid(project=project, snapshot_id=x["snapshot_id"]).id for x in snaps]
    cache_analyze(project_id=project.pk, snapshot_refs=refs)


@pytest.fixture
def rule(project: Project) -> Any:
    return rule_create(
        project=project,
        data={
            "name": "cache after deploy",
            "kind": K.CACHE_HIT_RATE_FELL,
            "severity": "warning",
            "params": {"drop_points": 20, "min_turns": 6},
        },
    )


def test_rule_params_are_checked() -> None:
    clean, errors = K.validate_params(K.CACHE_HIT_RATE_FELL, {"drop_points": "x", "min_turns": 0})
    assert set(errors) == {"drop_points", "min_turns"}
    clean, errors = K.validate_params(K.CACHE_HIT_RATE_FELL, {})
    assert not errors and clean == {"drop_points": 15.0, "min_turns": 20}


def test_per_turn_evaluation_leaves_the_project_kind_alone() -> None:
    from datetime import UTC, datetime

    spec = R.RuleSpec(id=1, kind=K.CACHE_HIT_RATE_FELL, params={"drop_points": 1, "min_turns": 1})
    turn = R.Turn(
        ref=1, turn=1, ts=datetime(2026, 12, 1, tzinfo=UTC), watermark=0.1, tier="ok", usable_tokens=1
    )
    assert R.evaluate(spec, turn, []) is None


def test_hit_rate_falling_after_a_new_version_raises_one_alert(api: Any, project: Project, rule: Any) -> None:
    _deploy(api, project, version="v1", sessions=3, stable=True)
    # The signal from the analyzer evaluated the rule: one version only, nothing to compare.
    assert not Alert.objects.filter(rule=rule).exists()
    _deploy(api, project, version="v2", sessions=3, stable=False)
    alerts = list(Alert.objects.filter(rule=rule))
    assert len(alerts) == 1
    a = alerts[0]
    assert "v1" in a.title and "v2" in a.title and a.rule_kind == K.CACHE_HIT_RATE_FELL
    assert a.session_id.startswith("v2-") and a.turn == 1  # the first v2 turn after a session's first
    assert a.value >= 20 and a.unit == "points"
    assert AgentSession.objects.get(project=project, session_id=a.session_id).alert_count == 1
    # Evaluating again (another batch of the same version) raises nothing new.
    assert cache_rules_evaluate(project_id=project.pk) == []
    _deploy(api, project, version="v2", sessions=1, stable=False, start=10)
    assert Alert.objects.filter(rule=rule).count() == 1


def test_a_version_that_keeps_the_hit_rate_raises_nothing(api: Any, project: Project, rule: Any) -> None:
    _deploy(api, project, version="v1", sessions=3, stable=True)
    _deploy(api, project, version="v2", sessions=3, stable=True)
    assert not Alert.objects.filter(rule=rule).exists()


def test_too_few_turns_of_the_new_version_wait(api: Any, project: Project, rule: Any) -> None:
    _deploy(api, project, version="v1", sessions=3, stable=True)
    _deploy(api, project, version="v2", sessions=1, stable=False)  # 3 turns after first turns < 6
    assert not Alert.objects.filter(rule=rule).exists()
    _deploy(api, project, version="v2", sessions=1, stable=False, start=1)
    assert Alert.objects.filter(rule=rule).count() == 1


def test_rule_editor_offers_the_cache_kind_and_saves_it(project: Project) -> None:
    from django.urls import reverse

    from tests.ingest.test_views import login, make_user

    c = login(make_user("eddie", project, "editor"))
    url = reverse("alerts:rule_new", args=[project.pk])
    html = c.get(url, {"kind": K.CACHE_HIT_RATE_FELL}).content.decode()
    assert "drop_points" in html and "min_turns" in html
    form = {
        "kind": K.CACHE_HIT_RATE_FELL,
        "name": "cache",
        "severity": "warning",
        "enabled": "on",
        "p_drop_points": "abc",
        "p_min_turns": "5",
        "cooldown_turns": "20",
        "cooldown_seconds": "1800",
    }
    r = c.post(url, form)
    assert r.status_code == 422 and "must be a number" in r.content.decode()
    r = c.post(url, {**form, "p_drop_points": "25"})
    assert r.status_code == 302
    from alerts.models import AlertRule

    saved = AlertRule.objects.get(project=project, name="cache")
    assert saved.kind == K.CACHE_HIT_RATE_FELL and saved.params == {"drop_points": 25.0, "min_turns": 5}
