"""Leases and the reclaimer at the service level: which unfinished runs come back, which never do.
(tests/replay/test_workers.py kills real workers.)"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from replay.models import QueuePriority, ReplayJob, ReplayRun
from replay.services.jobs import replay_job_cancel, replay_job_create
from replay.services.runs import replay_run_execute, replay_runs_reclaim
from tests.replay.helpers import planted_fact_snapshot, post, queued_run_ids

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(api: Any, private_project: Any, stub_endpoint: Any) -> ReplayJob:
    wire = planted_fact_snapshot()
    post(api, wire)
    return replay_job_create(
        project=private_project, endpoint=stub_endpoint,
        spec={"kind": "loo", "snapshot_id": wire["snapshot_id"], "samples": 2},
    )


def _expired() -> Any:
    return timezone.now() - timedelta(seconds=1)


def _running(run: ReplayRun, *, attempts: int = 1, lease_expires_at: Any = None) -> None:
    ReplayRun.objects.filter(pk=run.pk).update(
        status="running", attempts=attempts, model_calls=attempts, claimed_at=timezone.now(),
        lease_expires_at=lease_expires_at or _expired(),
    )


def test_new_runs_get_a_lease_and_a_claim_renews_it(job: ReplayJob, settings: Any) -> None:
    settings.CTXOBS_REPLAY_LEASE_S = 60
    run = job.runs.order_by("pk").first()
    assert run.lease_expires_at is not None and run.lease_expires_at > timezone.now() + timedelta(seconds=50)
    assert replay_run_execute(run_id=run.pk).state == "done"
    run.refresh_from_db()
    assert run.status == "done" and run.lease_expires_at is None


def test_a_running_run_whose_lease_ran_out_is_requeued_and_finished_runs_never_are(
    job: ReplayJob, stub_server: Any
) -> None:
    done, lost, live, *rest = job.runs.order_by("pk")
    assert replay_run_execute(run_id=done.pk).state == "done"
    ReplayRun.objects.filter(pk=done.pk).update(lease_expires_at=_expired())  # even then
    _running(lost)
    _running(live, lease_expires_at=timezone.now() + timedelta(seconds=30))

    res = replay_runs_reclaim(replay_queue_depth=len(rest))
    assert res.requeued == [lost.pk] and res.failed == [] and res.cancelled == []
    lost.refresh_from_db()
    assert lost.status == "pending" and lost.claim is None
    assert lost.error == "re-queued: the worker running it stopped"
    assert lost.lease_expires_at > timezone.now()
    assert ReplayRun.objects.get(pk=live.pk).status == "running"
    assert ReplayRun.objects.get(pk=done.pk).status == "done"

    # Run twice: nothing more comes back until the new lease runs out too.
    assert replay_runs_reclaim(replay_queue_depth=len(rest)).requeued == []
    # The re-queued run is then called once more; the finished one is not.
    assert replay_run_execute(run_id=lost.pk).state == "done"
    assert replay_run_execute(run_id=done.pk).state == "already_done"
    lost.refresh_from_db()
    assert lost.attempts == 2 and lost.model_calls == 2
    assert len(stub_server.completion_calls()) == 2


def test_a_queued_run_comes_back_only_once_the_replay_queue_is_empty(job: ReplayJob) -> None:
    run = job.runs.order_by("pk").first()
    ReplayRun.objects.filter(pk=run.pk).update(lease_expires_at=_expired())
    # Its message may still be waiting behind others, or the broker cannot say: leave it.
    assert replay_runs_reclaim(replay_queue_depth=3).requeued == []
    assert replay_runs_reclaim(replay_queue_depth=None).requeued == []
    # Nothing waits in the queue, yet the run was never claimed: its message was lost.
    assert replay_runs_reclaim(replay_queue_depth=0).requeued == [run.pk]


def test_a_scheduled_retry_held_by_a_dead_worker_comes_back(job: ReplayJob) -> None:
    run = job.runs.order_by("pk").first()
    ReplayRun.objects.filter(pk=run.pk).update(
        attempts=1, next_attempt_at=timezone.now() - timedelta(seconds=30), lease_expires_at=_expired()
    )
    assert replay_runs_reclaim(replay_queue_depth=5).requeued == [run.pk]
    run.refresh_from_db()
    assert run.status == "pending" and run.next_attempt_at is None


def test_a_run_whose_worker_died_at_every_attempt_fails_with_the_reason(
    job: ReplayJob, settings: Any, stub_server: Any
) -> None:
    settings.CTXOBS_REPLAY_MAX_ATTEMPTS = 3
    first, second, *_ = job.runs.order_by("pk")
    _running(first, attempts=3)
    res = replay_runs_reclaim(replay_queue_depth=0)
    assert first.pk in res.failed and first.pk not in res.requeued
    first.refresh_from_db()
    assert first.status == "failed"
    assert first.error == "the worker running it stopped during the model call (3 times)"
    # A redelivered message finds the same when it gets there first.
    _running(second, attempts=3)
    assert replay_run_execute(run_id=second.pk).state == "failed"
    assert ReplayRun.objects.get(pk=second.pk).status == "failed"
    assert stub_server.completion_calls() == []


def test_runs_a_dead_worker_held_in_a_cancelled_job_end_cancelled(job: ReplayJob) -> None:
    held = job.runs.order_by("pk").first()
    _running(held, lease_expires_at=timezone.now() + timedelta(seconds=30))
    replay_job_cancel(job=job)
    assert ReplayRun.objects.get(pk=held.pk).status == "running"  # its worker was calling the model
    ReplayRun.objects.filter(pk=held.pk).update(lease_expires_at=_expired())  # ...and died
    res = replay_runs_reclaim(replay_queue_depth=0)
    assert res.cancelled == [held.pk] and res.requeued == []
    job.refresh_from_db()
    assert job.status == "cancelled" and job.n_cancelled == job.n_runs
    assert not job.runs.filter(status__in=["pending", "running"]).exists()


def test_each_job_s_calls_are_queued_and_requeued_at_its_priority(
    api: Any, private_project: Any, stub_endpoint: Any, django_capture_on_commit_callbacks: Any
) -> None:
    wire = planted_fact_snapshot()
    post(api, wire)
    spec: Any = {"kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 2}
    with django_capture_on_commit_callbacks(execute=True):
        person = replay_job_create(project=private_project, endpoint=stub_endpoint, spec=spec)
        triage = replay_job_create(project=private_project, endpoint=stub_endpoint, spec=spec,
                                   priority=QueuePriority.TRIAGE)
    person_runs = sorted(person.runs.values_list("pk", flat=True))
    triage_runs = sorted(triage.runs.values_list("pk", flat=True))
    assert person.priority == QueuePriority.PERSON and triage.priority == QueuePriority.TRIAGE
    assert set(person_runs) <= set(queued_run_ids(QueuePriority.PERSON))
    assert set(triage_runs) <= set(queued_run_ids(QueuePriority.TRIAGE))
    assert not set(triage_runs) & set(queued_run_ids(QueuePriority.PERSON))

    # A worker died holding one run of each: each comes back in its own job's list.
    for run in ReplayRun.objects.filter(pk__in=[person_runs[0], triage_runs[0]]):
        _running(run)
    with django_capture_on_commit_callbacks(execute=True):
        res = replay_runs_reclaim(replay_queue_depth=4)
    assert sorted(res.requeued) == sorted([person_runs[0], triage_runs[0]])
    assert queued_run_ids(QueuePriority.PERSON).count(person_runs[0]) == 2
    assert queued_run_ids(QueuePriority.TRIAGE).count(triage_runs[0]) == 2
    assert triage_runs[0] not in queued_run_ids(QueuePriority.PERSON)

