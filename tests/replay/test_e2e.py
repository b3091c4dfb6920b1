"""End to end: a real Celery worker process, the real local model server (Gemma 3 270M via
llama-cpp-python) and a scripted HTTP server on loopback for the provider's failures."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from replay.models import ReplayRun
from replay.selectors import job_results
from replay.services.jobs import replay_job_cancel, replay_job_create
from replay.tasks import run_execute
from tests import factories as f
from tests.processes import celery_idle
from tests.replay.conftest import wait_job
from tests.replay.helpers import PLANTED_MEMORY, planted_fact_snapshot, post
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
FAST = {"max_tokens": 24}


def _turn(res: dict[str, Any]) -> dict[str, Any]:
    assert len(res["turns"]) == 1
    return res["turns"][0]


def test_replaying_a_demo_turn_reproduces_an_answer_with_zero_noise_at_temperature_0(
    celery_worker_process: Any,
    api: Any,
    local_endpoint: Any,
) -> None:
    wire = f.snapshot(turn=3)
    post(api, wire)
    job = replay_job_create(
        project=local_endpoint.project,
        endpoint=local_endpoint,
        spec={"kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 3, "params": FAST},
    )
    job = wait_job(job.pk)
    assert job.status == "done" and job.n_done == 3
    t = _turn(job_results(job=job))
    texts = [r.output_text for r in t["baseline_runs"]]
    assert all(texts) and len(set(texts)) == 1
    assert t["noise"]["max"] == 0.0
    assert all(r.prompt_tokens and r.prompt_tokens > 20 for r in t["baseline_runs"])


def test_without_memory_a_planted_fact_disappears_from_the_answer(
    celery_worker_process: Any,
    api: Any,
    local_endpoint: Any,
    local_model: Any,
) -> None:
    wire = planted_fact_snapshot()
    post(api, wire)
    job = replay_job_create(
        project=local_endpoint.project,
        endpoint=local_endpoint,
        spec={
            "kind": "without",
            "snapshot_id": wire["snapshot_id"],
            "block": "memory",
            "samples": 2,
            "params": FAST,
        },
    )
    job = wait_job(job.pk)
    assert job.status == "done", job.runs.values_list("error", flat=True)
    t = _turn(job_results(job=job))
    assert all("Guangzhou" in r.output_text for r in t["baseline_runs"])
    (e,) = t["variants"]
    assert "Guangzhou" not in e["run"].output_text
    assert e["changed"] is True and e["effect"]["within_noise"] is False
    # The block reached the model: the server counted its tokens, and no more.
    memory_tokens = (
        len(
            httpx.post(
                local_model.base_url.removesuffix("/v1") + "/extras/tokenize",
                # Chat mode: the server joins the memory block into the system message.
                json={"input": f"\n\n{PLANTED_MEMORY}"},
            ).json()["tokens"]
        )
        - 1
    )  # minus BOS
    dropped = t["baseline_runs"][0].prompt_tokens - e["run"].prompt_tokens
    assert abs(dropped - memory_tokens) <= 2, (dropped, memory_tokens)


def test_leave_one_out_over_a_snapshot_measures_every_block(
    celery_worker_process: Any,
    api: Any,
    local_endpoint: Any,
) -> None:
    wire = planted_fact_snapshot()
    post(api, wire)
    job = replay_job_create(
        project=local_endpoint.project,
        endpoint=local_endpoint,
        spec={"kind": "loo", "snapshot_id": wire["snapshot_id"], "samples": 2, "params": FAST},
    )
    job = wait_job(job.pk)
    assert job.status == "done" and job.n_runs == 2 + 3 * 2 and job.n_done == 8
    t = _turn(job_results(job=job))
    effects = {e["variant"].target_key: e for e in t["variants"]}
    assert set(effects) == {"system", "memory", "user"}
    assert all(e["effect"] is not None for e in effects.values())
    assert effects["memory"]["changed"] is True
    assert sum(r.model_calls for r in ReplayRun.objects.filter(job=job)) == 8


def test_429_and_500_are_retried_with_backoff_then_succeed(
    celery_worker_process: Any,
    api: Any,
    stub_endpoint: Any,
    stub_server: Any,
    settings: Any,
) -> None:
    wire = planted_fact_snapshot()
    post(api, wire)
    stub_server.script = [(429, {"Retry-After": "1"}, 0.0), (500, {}, 0.0)]
    job = replay_job_create(
        project=stub_endpoint.project,
        endpoint=stub_endpoint,
        spec={"kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 1},
    )
    job = wait_job(job.pk, timeout=30)
    run = job.runs.get()
    assert job.status == "done" and run.status == "done" and run.attempts == 3
    assert len(stub_server.completion_calls()) == 3
    t = stub_server.call_times
    assert t[1] - t[0] >= 0.95  # Retry-After: 1
    assert t[2] - t[1] >= 0.9  # backoff after the 500


def test_retries_end_in_a_recorded_failure_shown_with_its_reason(
    celery_worker_process: Any,
    api: Any,
    stub_endpoint: Any,
    stub_server: Any,
    editor_client: Any,
) -> None:
    wire = planted_fact_snapshot()
    post(api, wire)
    stub_server.script = [(503, {"Retry-After": "0"}, 0.0)] * 10
    job = replay_job_create(
        project=stub_endpoint.project,
        endpoint=stub_endpoint,
        spec={"kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 1},
    )
    job = wait_job(job.pk, timeout=30)
    run = job.runs.get()
    assert job.status == "failed" and run.status == "failed"
    assert "HTTP 503" in run.error and "gave up after 5 attempts" in run.error
    assert len(stub_server.completion_calls()) == 5
    page = editor_client.get(f"/p/{job.project_id}/replays/{job.pk}/").content.decode()
    assert "gave up after 5 attempts" in page


def test_a_run_delivered_twice_to_the_worker_calls_the_model_once(
    celery_worker_process: Any,
    api: Any,
    stub_endpoint: Any,
    stub_server: Any,
) -> None:
    wire = planted_fact_snapshot()
    post(api, wire)
    stub_server.delay = 0.5
    job = replay_job_create(
        project=stub_endpoint.project,
        endpoint=stub_endpoint,
        spec={"kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 1},
    )
    rid = job.runs.get().pk
    # Duplicate deliveries while the first one is in flight.
    again = [run_execute.delay(rid), run_execute.delay(rid)]
    job = wait_job(job.pk, timeout=30)
    wait_until(
        lambda: all(celery_worker_process.task_finished(r.id) for r in again),
        60,
        "the worker to finish both duplicate deliveries",
    )
    assert job.status == "done"
    assert len(stub_server.completion_calls()) == 1
    assert ReplayRun.objects.filter(job=job).count() == 1
    assert ReplayRun.objects.get(pk=rid).model_calls == 1


def reclaimer_runs(workers: Any) -> int:
    return int(workers.processes.tasks_finished("worker", "replay.runs_reclaim"))


def test_cancelling_a_job_stops_its_model_calls(
    celery_worker_process: Any,
    api: Any,
    stub_endpoint: Any,
    stub_server: Any,
) -> None:
    wire = planted_fact_snapshot()
    post(api, wire)
    stub_server.delay = 0.4
    job = replay_job_create(
        project=stub_endpoint.project,
        endpoint=stub_endpoint,
        spec={"kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 10},
    )
    wait_until(lambda: job.runs.filter(status="done").exists(), 20, "a first run to be done")
    replay_job_cancel(job=job)
    reclaims = reclaimer_runs(celery_worker_process)
    # Calls under way when the job was cancelled finish, and every queued run task is consumed.
    wait_until(lambda: not job.runs.filter(status="running").exists(), 30, "the runs under way to end")
    wait_until(lambda: celery_idle("replay"), 60, "the replay queue to be drained and acknowledged")
    calls = len(stub_server.completion_calls())
    job.refresh_from_db()
    assert job.status == "cancelled"
    assert job.n_cancelled >= 10 - calls and job.n_cancelled > 0
    assert calls < 10
    # Nothing more is called later: beat's reclaimer (every 2 s here) has run twice more since the
    # cancel, and whatever it might have queued has been consumed.
    wait_until(
        lambda: reclaimer_runs(celery_worker_process) >= reclaims + 2,
        60,
        "the replay reclaimer to run twice after the cancel",
    )
    wait_until(lambda: celery_idle("replay"), 60, "the replay queue to be idle again")
    assert len(stub_server.completion_calls()) == calls
    assert not job.runs.filter(status__in=["pending", "running"]).exists()
