"""Replay tasks: thin wrappers taking ids, one per (job, variant, sample), on the replay queue."""

from __future__ import annotations

from celery import shared_task

from replay import services


@shared_task(name="replay.run_execute", bind=True, max_retries=None, acks_late=True, ignore_result=True)
def run_execute(self, run_id: int) -> str:  # type: ignore[no-untyped-def]
    """Execute one run; safe to deliver twice. Transient provider errors come back later
    (the bound on attempts lives in the service)."""
    outcome = services.replay_run_execute(run_id=run_id)
    if outcome.retry_in is not None:
        raise self.retry(countdown=outcome.retry_in)
    return outcome.state
