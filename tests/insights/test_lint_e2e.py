"""End to end with a real Celery worker: ingest commit -> insights.analyze (the lint) -> findings
-> the evaluation they are owed -> an alert of a lint rule; and the pages show them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.urls import reverse

from alerts.models import Alert, PendingEvaluation
from alerts.services.rules import rule_create
from bench.lint_cases import labelled_set, wire
from insights import lint
from insights.models import Finding, PendingAnalysis
from tests.ingest.test_views import login, make_user
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_ingest_to_findings_to_pages_and_a_lint_alert_through_the_worker(
    celery_worker_process: Any, api: Any, project: Any
) -> None:
    rule = rule_create(project=project, data={"name": "echo", "kind": "lint_finding", "severity": "warning",
                                              "params": {"checks": ["echo_chamber"]}})
    cases = labelled_set(per_check=1, clean=1, seed=2026)
    echo = next(c for c in cases if c.check == lint.ECHO_CHAMBER and c.planted)
    clean = next(c for c in cases if not c.check)
    planted = [c for c in cases if c.planted]
    snaps = [s for c in [*planted, clean] for s in wire(c, prefix="e2e")]
    r = api.post_snapshots(snaps)
    assert r.status_code == 200, r.content

    # Every planted check found on its session's second turn, by the worker, off the request path.
    def all_found() -> bool:
        got = set(Finding.objects.filter(project=project, turn=1).values_list("check_name", flat=True))
        return got == set(lint.CHECKS)

    wait_until(all_found, 60, "the worker to store a finding of every check")
    wait_until(lambda: not PendingAnalysis.objects.filter(project=project).exists(), 30,
               "the analysis debt to be settled")
    clean_refs = _refs(project, f"e2e-{clean.name}")
    assert not Finding.objects.filter(project=project, session_ref__in=clean_refs).exists()

    # The lint rule alerts once, on the echo-chamber turn.
    alerts = wait_until(lambda: list(Alert.objects.filter(rule=rule)), 60, "the lint rule to fire")
    assert [(a.session_id, a.turn) for a in alerts] == [(f"e2e-{echo.name}", 1)]

    viewer = login(make_user("vic", project, "viewer"))
    sid = f"e2e-{echo.name}"
    chart = viewer.get(reverse("ingest:chart_data", kwargs={"project_id": project.pk, "session_id": sid}))
    traces = {t.get("name"): t for t in json.loads(chart.content)["data"]}
    assert list(traces["lint finding"]["x"]) == [1]
    page = viewer.get(reverse("ingest:turn", kwargs={"project_id": project.pk, "session_id": sid, "turn": 1}))
    assert 'data-check="echo_chamber"' in page.content.decode()
    sessions_url = reverse("ingest:sessions", kwargs={"project_id": project.pk})
    sessions = viewer.get(sessions_url, {"finding": "echo_chamber"})
    html = sessions.content.decode()
    assert sid in html and f"e2e-{clean.name}" not in html
    # Both evaluations (after ingest, after the lint) done: still one alert.
    wait_until(lambda: not PendingEvaluation.objects.filter(project=project).exists(), 60,
               "every evaluation owed to be done")
    assert Alert.objects.filter(rule=rule).count() == 1


def _refs(project: Any, session_id: str) -> list[int]:
    from ingest.models import AgentSession

    qs = AgentSession.objects.filter(project=project, session_id=session_id)
    return list(qs.values_list("id", flat=True))
