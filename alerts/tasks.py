"""Celery tasks of the alerts app: take ids, call one service, safe to run twice."""

from __future__ import annotations

from datetime import datetime

from alerts.services import delivery, evaluation, incidents
from core.tasking import project_task


@project_task("alerts.evaluate")
def alerts_evaluate_task(*, project_id: int, snapshot_refs: list[int], pending_id: int | None = None) -> int:
    res = evaluation.alerts_evaluate(project_id=project_id, snapshot_refs=snapshot_refs)
    if pending_id is not None:
        evaluation.pending_evaluation_done(
            pending_id=pending_id, deferred=res.deferred, retry_in=res.retry_in
        )
    if res.deferred and res.retry_in is not None:
        alerts_evaluate_task.apply_async(
            kwargs={"project_id": project_id, "snapshot_refs": res.deferred, "pending_id": pending_id},
            countdown=res.retry_in + 0.5,
        )
    return len(res.created)


@project_task("alerts.deliver")
def alerts_deliver_task(*, delivery_id: int) -> None:
    retry_in = delivery.delivery_attempt(delivery_id=delivery_id)
    if retry_in is not None:
        alerts_deliver_task.apply_async(kwargs={"delivery_id": delivery_id}, countdown=retry_in)


@project_task("alerts.sweep")
def alerts_sweep_task() -> dict[str, int]:
    res = evaluation.alerts_sweep()
    return {"evaluations": res.evaluations, "deliveries": res.deliveries}


@project_task("alerts.follow_up")
def alerts_follow_up_task(*, delivery_id: int, event: str, attempt: int = 1) -> None:
    retry_in = delivery.follow_up_attempt(delivery_id=delivery_id, event=event, attempt=attempt)
    if retry_in is not None:
        alerts_follow_up_task.apply_async(
            kwargs={"delivery_id": delivery_id, "event": event, "attempt": attempt + 1}, countdown=retry_in
        )


@project_task("alerts.incidents_sweep")
def alerts_incidents_sweep_task(*, now: str | None = None) -> dict[str, int]:
    """Unmute, auto-resolve and release held messages (alerts.services.incidents.incidents_sweep);
    NOW (ISO 8601) stands in for the current time."""
    res = incidents.incidents_sweep(now=datetime.fromisoformat(now) if now else None)
    return {"resolved": res.resolved, "unmuted": res.unmuted, "released": res.released}
