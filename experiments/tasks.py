"""Experiment tasks: thin wrappers taking ids. Time limits: settings.CTXOBS_TASK_TIME_LIMITS."""

from __future__ import annotations

from core.tasking import project_task
from experiments.services import runs


@project_task("experiments.prepare")
def experiment_prepare(experiment_id: int) -> str:
    """Make the summaries a strategy needs (cached), then start the experiment's replay job."""
    return runs.experiment_prepare(experiment_id=experiment_id)


@project_task("experiments.finalize")
def experiment_finalize(experiment_id: int) -> str:
    """Evaluate every check on every answer of a finished experiment and store its figures."""
    return runs.experiment_finalize(experiment_id=experiment_id)
