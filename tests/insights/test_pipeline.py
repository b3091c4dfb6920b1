"""The insights pipeline: an ingest batch records the analysis it is owed in its own transaction,
the task runs every analyzer and forgets the debt, and a failed analyzer leaves the debt for
the sweeper. Real PostgreSQL and the real ingest API."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from insights import pipeline
from insights.models import PendingAnalysis
from tests.factories import snapshot


@pytest.fixture
def analyzers() -> Any:
    saved = dict(pipeline._analyzers)
    seen: list[tuple[int, list[int]]] = []

    def record(*, project_id: int, snapshot_refs: list[int]) -> None:
        seen.append((project_id, list(snapshot_refs)))

    pipeline._analyzers.clear()
    pipeline.analyzer_add("record", record)
    yield seen
    pipeline._analyzers.clear()
    pipeline._analyzers.update(saved)


@pytest.mark.django_db
def test_a_batch_records_its_debt_and_the_task_forgets_it_once_every_analyzer_ran(
        api: Any, project: Any, analyzers: list[tuple[int, list[int]]],
        django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        resp = api.post_snapshots([snapshot(turn=1), snapshot(turn=2)])
    assert resp.status_code == 200, resp.content
    debt = PendingAnalysis.objects.get(project=project)
    assert len(debt.snapshot_refs) == 2
    assert any(getattr(c, "__name__", "") == "<lambda>" for c in callbacks)

    failed = pipeline.analyze(project_id=project.pk, snapshot_refs=list(debt.snapshot_refs))
    pipeline.pending_done(pending_id=debt.pk, failed=failed)
    assert failed == []
    assert analyzers == [(project.pk, list(debt.snapshot_refs))]
    assert not PendingAnalysis.objects.filter(pk=debt.pk).exists()


@pytest.mark.django_db
def test_a_failing_analyzer_does_not_stop_the_others_and_keeps_the_debt_for_the_sweeper(
        api: Any, project: Any, analyzers: list[tuple[int, list[int]]],
        django_capture_on_commit_callbacks: Any) -> None:
    def broken(*, project_id: int, snapshot_refs: list[int]) -> None:
        raise RuntimeError("analyzer fault")

    pipeline._analyzers.clear()
    pipeline.analyzer_add("broken", broken)
    pipeline.analyzer_add("record", lambda **kw: analyzers.append((kw["project_id"], kw["snapshot_refs"])))
    with django_capture_on_commit_callbacks(execute=False):
        assert api.post_snapshots([snapshot(turn=1)]).status_code == 200
    debt = PendingAnalysis.objects.get(project=project)

    failed = pipeline.analyze(project_id=project.pk, snapshot_refs=list(debt.snapshot_refs))
    pipeline.pending_done(pending_id=debt.pk, failed=failed)
    assert failed == ["broken"]
    assert len(analyzers) == 1  # the analyzer after the broken one still ran
    kept = PendingAnalysis.objects.get(pk=debt.pk)
    assert kept.due_at > timezone.now()

    PendingAnalysis.objects.filter(pk=debt.pk).update(due_at=timezone.now() - timedelta(seconds=1))
    res = pipeline.sweep()
    assert (res.queued, res.dropped) == (1, 0)
    swept = PendingAnalysis.objects.get(pk=debt.pk)
    assert swept.sweeps == 1 and swept.due_at > timezone.now()
    # A second sweep right away finds nothing due: the first one claimed it.
    assert pipeline.sweep().queued == 0


@pytest.mark.django_db
def test_without_analyzers_ingest_records_no_debt(api: Any, project: Any) -> None:
    saved = dict(pipeline._analyzers)
    pipeline._analyzers.clear()
    try:
        assert api.post_snapshots([snapshot(turn=1)]).status_code == 200
    finally:
        pipeline._analyzers.update(saved)
    assert not PendingAnalysis.objects.filter(project=project).exists()
