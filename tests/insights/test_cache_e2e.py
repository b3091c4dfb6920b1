"""End to end with a real Celery worker: ingest through the API -> the insights task runs the
cache analyzer -> figures stored -> shown on the turn page; a new assembly version whose hit
rate fell raises the cache alert from the worker."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from alerts import kinds as K
from alerts.models import Alert
from alerts.services.rules import rule_create
from insights.cache_models import TurnCache
from tests.ingest.test_views import login, make_user
from tests.insights.cache_factories import cache_turn
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_ingest_to_cache_figures_to_page_and_alert_through_the_worker(
    celery_worker_process: Any, api: Any, project: Any
) -> None:
    rule = rule_create(
        project=project,
        data={
            "name": "cache after deploy",
            "kind": K.CACHE_HIT_RATE_FELL,
            "params": {"drop_points": 20, "min_turns": 3},
        },
    )
    stable = [cache_turn(t, session_id="v1-a", version="v1", cached=3072 if t else 0) for t in range(4)]
    assert api.post_snapshots(stable).status_code == 200
    wait_until(
        lambda: TurnCache.objects.filter(project=project).count() == 4,
        60,
        "the worker to analyse the first batch",
    )
    rows = list(TurnCache.objects.filter(project=project).order_by("turn"))
    assert [r.turn for r in rows] == [0, 1, 2, 3]
    assert rows[2].reported_cached == 3072 and rows[2].expected_cached > 3000

    broken = [
        cache_turn(
            t,
            session_id="v2-a",
            version="v2",
            cached=0,
            system=f"You are a travel assistant. Time 2026-12-01 09:{t:02d}",
        )
        for t in range(4)
    ]
    assert api.post_snapshots(broken).status_code == 200
    row = wait_until(
        lambda: TurnCache.objects.filter(project=project, assembly_version="v2", turn=3).first(),
        60,
        "the worker to analyse the second batch",
    )
    assert row.reason == "timestamp" and row.break_key == "system"
    alert = wait_until(lambda: Alert.objects.filter(rule=rule).first(), 60, "the cache alert")
    assert alert.session_id == "v2-a" and "v2" in alert.title

    html = (
        login(make_user("vera", project))
        .get(reverse("ingest:turn", args=[project.pk, "v2-a", 3]))
        .content.decode()
    )
    assert "a date or time changed in an early block" in html
