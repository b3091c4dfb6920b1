"""Replay tasks: thin wrappers taking ids, one per (job, variant, sample), on the replay queue,
and the periodic reclaimer of runs whose worker died. Time limits: settings.CTXOBS_TASK_TIME_LIMITS."""

from __future__ import annotations

import logging

from celery import Task, current_app
from kombu.exceptions import ChannelError

from core.tasking import project_task
from replay.services import runs, triage

logger = logging.getLogger(__name__)

REPLAY_QUEUE = "replay"


@project_task("replay.run_execute", bind=True, max_retries=None)
def run_execute(self: Task, run_id: int) -> str:
    """Execute one run; safe to deliver twice. Transient provider errors come back later
    (the bound on attempts lives in the service)."""
    outcome = runs.replay_run_execute(run_id=run_id)
    if outcome.retry_in is not None:
        raise self.retry(countdown=outcome.retry_in)
    return outcome.state


def replay_queue_depth() -> int | None:
    """Messages waiting in the replay queue, or None when the broker cannot say."""
    try:
        with current_app.connection_for_read() as conn:
            return int(conn.default_channel.queue_declare(queue=REPLAY_QUEUE, passive=True).message_count)
    except ChannelError:
        return 0  # Redis drops an empty list: the queue "does not exist" when nothing waits in it
    except Exception as exc:  # noqa: BLE001 - unknown depth only postpones part of the reclaim
        logger.warning("replay.queue_depth_unknown error=%s", type(exc).__name__)
        return None


@project_task("replay.runs_reclaim")
def runs_reclaim() -> int:
    """Re-queue the runs whose lease ran out (beat runs this every CTXOBS_REPLAY_RECLAIM_EVERY_S)."""
    res = runs.replay_runs_reclaim(replay_queue_depth=replay_queue_depth())
    return len(res.requeued)


@project_task("replay.triage_start")
def triage_start(triage_id: int) -> str:
    """Start a queued triage (its job, within the daily budget) or record why it is skipped."""
    return triage.triage_start(triage_id=triage_id)


@project_task("replay.triage_finish", bind=True, max_retries=None)
def triage_finish(self: Task, triage_id: int) -> None:
    """Attach a triage's verdict once its job has ended; looks again while the job runs."""
    retry_in = triage.triage_finish(triage_id=triage_id)
    if retry_in is not None:
        raise self.retry(countdown=retry_in)


@project_task("replay.triage_validation")
def triage_validation(project_id: int, snapshot_refs: list[int]) -> int:
    """Triages for the new turns whose output failed validation (projects with triage on)."""
    return len(triage.triages_for_failed_validation(project_id=project_id, snapshot_refs=snapshot_refs))
