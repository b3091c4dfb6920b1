"""Celery tasks of the alerts app: take ids, call one service, safe to run twice."""

from __future__ import annotations

from datetime import datetime

from celery import shared_task

from alerts.services import delivery, evaluation, incidents


@shared_task(name="alerts.evaluate", acks_late=True)
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


@shared_task(name="alerts.deliver", acks_late=True)
def alerts_deliver_task(*, delivery_id: int) -> None:
    retry_in = delivery.delivery_attempt(delivery_id=delivery_id)
    if retry_in is not None:
        alerts_deliver_task.apply_async(kwargs={"delivery_id": delivery_id}, countdown=retry_in)


# A sweep only reads a bounded page of ids and queues tasks; a minute means the database or the
# broker is stuck, and the next sweep starts over.
@shared_task(name="alerts.sweep", soft_time_limit=60, time_limit=90, ignore_result=True)
def alerts_sweep_task() -> dict[str, int]:
    res = evaluation.alerts_sweep()
    return {"evaluations": res.evaluations, "deliveries": res.deliveries}


@shared_task(name="alerts.follow_up", acks_late=True, ignore_result=True)
def alerts_follow_up_task(*, delivery_id: int, event: str, attempt: int = 1) -> None:
    retry_in = delivery.follow_up_attempt(delivery_id=delivery_id, event=event, attempt=attempt)
    if retry_in is not None:
        alerts_follow_up_task.apply_async(
            kwargs={"delivery_id": delivery_id, "event": event, "attempt": attempt + 1}, countdown=retry_in
        )


# Bounded pages of row-locked updates; a minute means the database is stuck.
@shared_task(name="alerts.incidents_sweep", soft_time_limit=60, time_limit=90, ignore_result=True)
def alerts_incidents_sweep_task(*, now: str | None = None) -> dict[str, int]:
    """Unmute, auto-resolve and release held messages (alerts.services.incidents.incidents_sweep);
    NOW (ISO 8601) stands in for the current time."""
    res = incidents.incidents_sweep(now=datetime.fromisoformat(now) if now else None)
    return {"resolved": res.resolved, "unmuted": res.unmuted, "released": res.released}
