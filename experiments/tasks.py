"""Experiment tasks: thin wrappers taking ids. Time limits: settings.CTXOBS_TASK_TIME_LIMITS."""

from __future__ import annotations

from celery import shared_task

from experiments.services import runs


@shared_task(name="experiments.prepare", acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def experiment_prepare(experiment_id: int) -> str:
    """Make the summaries a strategy needs (cached), then start the experiment's replay job."""
    return runs.experiment_prepare(experiment_id=experiment_id)


@shared_task(name="experiments.finalize", acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def experiment_finalize(experiment_id: int) -> str:
    """Evaluate every check on every answer of a finished experiment and store its figures."""
    return runs.experiment_finalize(experiment_id=experiment_id)
