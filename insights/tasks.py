"""Celery tasks of the insights app: take ids, call the pipeline, safe to run twice."""

from __future__ import annotations

from celery import shared_task

from insights import pipeline


@shared_task(name="insights.analyze", acks_late=True)
def insights_analyze_task(*, project_id: int, snapshot_refs: list[int], pending_id: int | None = None) -> int:
    failed = pipeline.analyze(project_id=project_id, snapshot_refs=snapshot_refs)
    if pending_id is not None:
        pipeline.pending_done(pending_id=pending_id, failed=failed)
    return len(failed)


@shared_task(name="insights.sweep", soft_time_limit=60, time_limit=90, ignore_result=True)
def insights_sweep_task() -> dict[str, int]:
    res = pipeline.sweep()
    return {"queued": res.queued, "dropped": res.dropped}
