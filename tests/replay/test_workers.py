"""Replays against dead workers, time limits and the queues, with the real processes: the
workers and beat of config.celery (tests/conftest.py starts them with a 12 s replay lease and a
2 s reclaim interval), PostgreSQL, Redis and the local model server behind a counting proxy."""

from __future__ import annotations

import time
from typing import Any

import pytest

from replay.models import QueuePriority, ReplayJob, ReplayRun
from replay.services.jobs import replay_job_create
from replay.services.model_endpoints import endpoint_create
from tests import factories as f
from tests.conftest import TEST_WORKER_ENV
from tests.replay.conftest import wait_job
from tests.replay.helpers import PLANTED_MEMORY, PLANTED_QUESTION, PLANTED_SYSTEM, post
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LEASE_S = float(TEST_WORKER_ENV["CTXOBS_REPLAY_LEASE_S"])
RECLAIM_EVERY_S = float(TEST_WORKER_ENV["CTXOBS_REPLAY_RECLAIM_EVERY_S"])


def five_block_snapshot() -> dict[str, Any]:
    return f.snapshot(
        blocks=[
            f.block("system", "system", PLANTED_SYSTEM, pinned=True),
            f.block("tools", "tools", "Tools: search_flights(city), book_hotel(city, nights)."),
            f.block("memory", "memory", PLANTED_MEMORY),
            f.block("history", "history", "Earlier the user asked about vegetarian restaurants."),
            f.block("user", "user", PLANTED_QUESTION),
        ]
    )


def test_a_leave_one_out_job_finishes_after_its_worker_is_killed_mid_call(
    celery_worker_process: Any, api: Any, counted_local_endpoint: Any, settings: Any
) -> None:
    # The leases this process gives new runs, like the workers' (a message the dead worker had
    # taken but not yet claimed comes back once its run's lease has run out).
    settings.CTXOBS_REPLAY_LEASE_S = LEASE_S
    endpoint, proxy = counted_local_endpoint
    wire = five_block_snapshot()
    post(api, wire)
    job = replay_job_create(
        project=endpoint.project,
        endpoint=endpoint,
        spec={"kind": "loo", "snapshot_id": wire["snapshot_id"], "samples": 2, "params": {"max_tokens": 48}},
    )
    assert job.n_runs == 2 + 5 * 2  # the baseline's 2 samples, and as many for each block left out
    runs = ReplayRun.objects.filter(job=job)

    # Mid-job: a run has finished and the model is answering another one.
    wait_until(lambda: runs.filter(status="done").exists() and proxy.in_flight > 0, 240, "a call in flight")
    celery_worker_process.kill("worker-replay")
    killed_at = time.monotonic()
    running = set(runs.filter(status="running").values_list("pk", flat=True))
    done_before = {r.pk: (r.model_calls, r.output_text) for r in runs.filter(status="done")}
    assert running, "the worker died holding runs"

    celery_worker_process.start("worker-replay")
    job = wait_job(job.pk, timeout=180)
    took = time.monotonic() - killed_at

    assert job.status == "done" and job.n_done == job.n_runs == 12
    assert not runs.exclude(status="done").exists()
    # The runs the dead worker held were reclaimed once their lease ran out, and called again once.
    for run in runs.filter(pk__in=running):
        assert run.attempts == 2 and run.model_calls == 2, (run.pk, run.attempts)
    # A run that had finished was never run again.
    for run in runs.filter(pk__in=list(done_before)):
        assert (run.model_calls, run.output_text) == done_before[run.pk]
        assert run.attempts == 1
    # The model saw every planned call once, plus at most the calls that were in flight.
    assert job.n_runs <= proxy.started <= job.n_runs + len(running), (proxy.started, running)
    # Bounded by the lease (plus the remaining runs on a loaded machine), not by the broker's
    # visibility timeout (an hour).
    assert took < LEASE_S + RECLAIM_EVERY_S + 90, took


def test_a_replay_over_the_time_limit_fails_with_its_reason(
    celery_worker_process: Any, api: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    # The replay worker again, with a 2 s limit on replay tasks; the stub answers after 5 s.
    celery_worker_process.stop("worker-replay")
    celery_worker_process.start("worker-replay", env={"CTXOBS_REPLAY_TIME_LIMIT_S": "2"})
    wire = five_block_snapshot()
    post(api, wire)
    stub_server.delay = 5.0
    job = replay_job_create(
        project=stub_endpoint.project,
        endpoint=stub_endpoint,
        spec={"kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 1},
    )
    job = wait_job(job.pk, timeout=60)
    run = job.runs.get()
    assert job.status == "failed" and run.status == "failed"
    assert run.error == "took longer than the replay time limit (2s)"
    assert run.attempts == 1 and len(stub_server.completion_calls()) == 1


def test_an_alert_is_delivered_promptly_while_a_long_replay_occupies_the_replay_worker(
    celery_worker_process: Any, api: Any, private_project: Any, stub_server: Any
) -> None:
    from alerts.models import Delivery
    from alerts.services import channels as alert_channels
    from tests.alerts.receiver import Receiver

    wire = five_block_snapshot()
    post(api, wire)
    slow = endpoint_create(
        project=private_project, name="slow", base_url=stub_server.base_url, model="stub-model",
        mode="completions", timeout_s=30.0,
    )
    # Each model call takes 8 s: 4 samples keep both replay pool processes busy for 16 s.
    stub_server.delay = 8.0
    job = replay_job_create(
        project=private_project,
        endpoint=slow,
        spec={"kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 4},
    )
    # Both replay pool processes are waiting on the model.
    wait_until(lambda: len(stub_server.completion_calls()) >= 2, 60, "two replay calls under way")
    with Receiver() as rx:
        channel, secret = alert_channels.channel_create(
            project=private_project, kind="webhook", data={"name": "hook", "url": rx.url}
        )
        rx.secret = secret
        sent_at = time.time()
        delivery = alert_channels.channel_test_send(channel=channel)
        got = wait_until(lambda: rx.accepted(), 30, "the alert at the receiver")
        waited = got[0]["at"] - sent_at
        assert waited < 4.0, waited
        assert ReplayJob.objects.get(pk=job.pk).status == "running"
        wait_until(
            lambda: Delivery.objects.filter(pk=delivery.pk, status="sent").exists(), 10, "delivery recorded"
        )
    job = wait_job(job.pk, timeout=60)
    assert job.status == "done"


def test_a_model_call_longer_than_the_lease_keeps_it_and_is_made_once(
    celery_worker_process: Any, api: Any, private_project: Any, stub_server: Any
) -> None:
    wire = five_block_snapshot()
    post(api, wire)
    slow = endpoint_create(
        project=private_project, name="slow", base_url=stub_server.base_url, model="stub-model",
        mode="completions", timeout_s=60.0,
    )
    # The answer takes well over the lease: only its renewal keeps the reclaimer away.
    stub_server.delay = LEASE_S * 2
    job = replay_job_create(
        project=private_project,
        endpoint=slow,
        spec={"kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 1},
    )
    job = wait_job(job.pk, timeout=LEASE_S * 2 + 60)
    run = job.runs.get()
    assert job.status == "done" and run.status == "done"
    assert run.attempts == 1 and run.model_calls == 1
    assert len(stub_server.completion_calls()) == 1


def test_a_person_s_replay_goes_ahead_of_the_experiment_calls_queued_before_it(
    celery_worker_process: Any, api: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    # Both jobs wait in the replay queue while no replay worker runs: an experiment's six calls,
    # then a person's one.
    celery_worker_process.stop("worker-replay")
    bulk_wire, person_wire = five_block_snapshot(), five_block_snapshot()
    post(api, bulk_wire)
    post(api, person_wire)
    bulk = replay_job_create(
        project=stub_endpoint.project, endpoint=stub_endpoint, priority=QueuePriority.EXPERIMENT,
        spec={"kind": "plain", "snapshot_id": bulk_wire["snapshot_id"], "samples": 6},
    )
    person = replay_job_create(
        project=stub_endpoint.project, endpoint=stub_endpoint,
        spec={"kind": "plain", "snapshot_id": person_wire["snapshot_id"], "samples": 1},
    )
    assert (bulk.priority, person.priority) == (QueuePriority.EXPERIMENT, QueuePriority.PERSON)
    assert (bulk.n_runs, person.n_runs) == (6, 1)
    stub_server.delay = 0.5
    celery_worker_process.start("worker-replay")
    assert wait_job(person.pk, timeout=60).status == "done"
    assert wait_job(bulk.pk, timeout=60).status == "done"

    # The worker's two pool processes took the person's call first, not seventh.
    claims = sorted(ReplayRun.objects.filter(job__in=[bulk, person]), key=lambda r: r.claimed_at)
    assert person.runs.get().pk in [r.pk for r in claims[:2]], [(r.job_id, r.claimed_at) for r in claims]
    assert len(stub_server.completion_calls()) == 7
