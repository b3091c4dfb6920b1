"""Celery tasks of the insights app: take ids, call the pipeline, safe to run twice."""

from __future__ import annotations

from core.tasking import project_task
from insights import pipeline


@project_task("insights.analyze")
def insights_analyze_task(*, project_id: int, snapshot_refs: list[int], pending_id: int | None = None) -> int:
    failed = pipeline.analyze(project_id=project_id, snapshot_refs=snapshot_refs)
    if pending_id is not None:
        pipeline.pending_done(pending_id=pending_id, failed=failed)
    return len(failed)


@project_task("insights.sweep")
def insights_sweep_task() -> dict[str, int]:
    res = pipeline.sweep()
    return {"queued": res.queued, "dropped": res.dropped}
