"""Replay tells us when a job ended; the experiment built on it is evaluated by a task."""

from __future__ import annotations

from typing import Any


def on_job_finished(sender: Any, job_id: int, **kwargs: Any) -> None:
    from experiments.models import Experiment
    from experiments.tasks import experiment_finalize

    for exp_id in Experiment.objects.filter(job_id=job_id).values_list("id", flat=True):
        experiment_finalize.delay(exp_id)
