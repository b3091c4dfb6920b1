"""Job planning, idempotent run execution, retries' bound, cancellation (service level)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from ingest import selectors as ingest_selectors
from replay.errors import VariantError
from replay.models import ReplayJob, ReplayRun
from replay.services.jobs import replay_job_cancel, replay_job_create, replay_job_plan
from replay.services.runs import replay_run_execute
from replay.tasks import run_execute
from tests import factories as f
from tests.replay.helpers import planted_fact_snapshot, post


@pytest.fixture
def planted(api: Any, private_project: Any) -> dict[str, Any]:
    wire = planted_fact_snapshot()
    post(api, wire)
    return wire


def _job(project: Any, endpoint: Any, **spec: Any) -> ReplayJob:
    return replay_job_create(project=project, endpoint=endpoint, spec=spec)


@pytest.mark.django_db
def test_leave_one_out_over_d_blocks_makes_k_runs_per_block_plus_k(
    private_project: Any, stub_endpoint: Any, planted: dict[str, Any]
) -> None:
    job = _job(private_project, stub_endpoint, kind="loo", snapshot_id=planted["snapshot_id"], samples=3)
    assert job.n_runs == 3 + 3 * 3
    assert job.estimate["model_calls"] == 12
    assert sorted(v.target_key for v in job.variants.all()) == ["", "memory", "system", "user"]
    assert ReplayRun.objects.filter(job=job, variant__is_baseline=True).count() == 3


@pytest.mark.django_db
def test_a_run_executed_twice_calls_the_model_once_and_stores_one_result(
    private_project: Any,
    stub_endpoint: Any,
    stub_server: Any,
    planted: dict[str, Any],
) -> None:
    job = _job(private_project, stub_endpoint, kind="plain", snapshot_id=planted["snapshot_id"], samples=1)
    run = job.runs.get()
    assert run_execute.apply(args=(run.pk,)).get() == "done"
    assert run_execute.apply(args=(run.pk,)).get() == "already_done"
    assert len(stub_server.completion_calls()) == 1
    run.refresh_from_db()
    assert run.status == "done" and run.model_calls == 1 and run.output_text == "stub answer"
    with pytest.raises(IntegrityError), transaction.atomic():
        ReplayRun.objects.create(job=job, variant=run.variant, sample=run.sample)
    job.refresh_from_db()
    assert job.status == "done" and job.n_done == 1


@pytest.mark.django_db
def test_a_run_another_worker_holds_is_not_called_again(
    private_project: Any, stub_endpoint: Any, stub_server: Any, planted: dict[str, Any]
) -> None:
    job = _job(private_project, stub_endpoint, kind="plain", snapshot_id=planted["snapshot_id"], samples=1)
    run = job.runs.get()
    ReplayRun.objects.filter(pk=run.pk).update(
        status="running", claimed_at=timezone.now(), lease_expires_at=timezone.now() + timedelta(seconds=30)
    )
    out = replay_run_execute(run_id=run.pk)
    assert out.state == "claimed_elsewhere" and out.retry_in and out.retry_in > 1
    assert stub_server.completion_calls() == []
    # A claim whose lease ran out (its worker died) is taken over.
    ReplayRun.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert replay_run_execute(run_id=run.pk).state == "done"
    assert len(stub_server.completion_calls()) == 1


@pytest.mark.django_db
def test_a_client_error_fails_the_run_with_its_reason(
    private_project: Any, stub_endpoint: Any, stub_server: Any, planted: dict[str, Any]
) -> None:
    job = _job(private_project, stub_endpoint, kind="plain", snapshot_id=planted["snapshot_id"], samples=1)
    stub_server.script = [(400, {}, 0.0)]
    assert replay_run_execute(run_id=job.runs.get().pk).state == "failed"
    run = job.runs.get()
    assert run.status == "failed" and "HTTP 400" in run.error and "scripted 400" in run.error
    job.refresh_from_db()
    assert job.status == "failed" and job.n_failed == 1


@pytest.mark.django_db
def test_transient_errors_are_retried_a_bounded_number_of_times(
    private_project: Any,
    stub_endpoint: Any,
    stub_server: Any,
    planted: dict[str, Any],
    settings: Any,
) -> None:
    settings.CTXOBS_REPLAY_MAX_ATTEMPTS = 3
    settings.CTXOBS_REPLAY_RETRY_BASE_S = 0.01
    job = _job(private_project, stub_endpoint, kind="plain", snapshot_id=planted["snapshot_id"], samples=1)
    stub_server.script = [(503, {}, 0.0)] * 5
    rid = job.runs.get().pk
    first = replay_run_execute(run_id=rid)
    assert first.state == "retry" and first.retry_in is not None and first.retry_in < 1
    assert ReplayRun.objects.get(pk=rid).error.startswith("retrying")
    assert replay_run_execute(run_id=rid).state == "retry"
    assert replay_run_execute(run_id=rid).state == "failed"
    run = ReplayRun.objects.get(pk=rid)
    assert run.status == "failed" and "gave up after 3 attempts" in run.error
    assert len(stub_server.completion_calls()) == 3


@pytest.mark.django_db
def test_retry_after_is_honoured(
    private_project: Any, stub_endpoint: Any, stub_server: Any, planted: dict[str, Any]
) -> None:
    job = _job(private_project, stub_endpoint, kind="plain", snapshot_id=planted["snapshot_id"], samples=1)
    stub_server.script = [(429, {"Retry-After": "7"}, 0.0)]
    rid = job.runs.get().pk
    out = replay_run_execute(run_id=rid)
    assert out.state == "retry" and out.retry_in == 7.0
    # Delivered again before its time: nothing is called.
    assert replay_run_execute(run_id=rid).state == "not_yet"
    assert len(stub_server.completion_calls()) == 1


@pytest.mark.django_db
def test_a_cancelled_job_calls_nothing_more(
    private_project: Any, stub_endpoint: Any, stub_server: Any, planted: dict[str, Any]
) -> None:
    job = _job(private_project, stub_endpoint, kind="loo", snapshot_id=planted["snapshot_id"], samples=2)
    first = job.runs.order_by("pk").first()
    replay_run_execute(run_id=first.pk)
    replay_job_cancel(job=job)
    for r in job.runs.all():
        replay_run_execute(run_id=r.pk)
    job.refresh_from_db()
    assert job.status == "cancelled" and job.n_done == 1 and job.n_cancelled == job.n_runs - 1
    assert len(stub_server.completion_calls()) == 1


@pytest.mark.django_db
def test_a_batch_over_a_session_skips_turns_without_the_block(
    api: Any, private_project: Any, stub_endpoint: Any
) -> None:
    for turn in range(3):
        blocks = None if turn != 1 else [f.block("system", "system", "sys"), f.block("user", "user", "hi")]
        post(api, f.snapshot(session_id="batch-s", turn=turn, blocks=blocks))
    plan = replay_job_plan(
        project=private_project,
        spec={"kind": "batch", "session_id": "batch-s", "block": "memory", "samples": 1},
    )
    assert [s.turn for s in plan.snapshots] == [0, 2]
    assert [s["turn"] for s in plan.skipped] == [1]
    assert plan.estimate["model_calls"] == 4
    job = replay_job_create(
        project=private_project,
        endpoint=stub_endpoint,
        spec={"kind": "batch", "session_id": "batch-s", "block": "memory", "samples": 1},
    )
    assert job.kind == "batch" and job.n_runs == 4


@pytest.mark.django_db
def test_planning_a_batch_reads_the_turns_in_a_fixed_number_of_queries(
    api: Any, private_project: Any
) -> None:
    """Blocks and saved parameters of every turn of a session are read at once, not per turn;
    each turn's own parameters still go with its plan."""
    spec = {"kind": "batch", "session_id": "plan-s", "block": "memory", "samples": 1}

    def queries(first: int, last: int) -> int:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        for turn in range(first, last):
            post(api, f.snapshot(session_id="plan-s", turn=turn, params={"temperature": 0.1 * turn}))
        with CaptureQueriesContext(connection) as q:
            plan = replay_job_plan(project=private_project, spec=spec)
        assert len(plan.snapshots) == last
        assert all(p.params["temperature"] == pytest.approx(0.1 * p.turn) for p in plan.snapshots)
        return len(q.captured_queries)

    few = queries(0, 2)
    many = queries(2, 12)  # the same session, now 12 turns
    assert many == few


@pytest.mark.django_db
def test_a_variant_on_an_unknown_block_is_refused_before_anything_is_stored(
    private_project: Any,
    stub_endpoint: Any,
    planted: dict[str, Any],
) -> None:
    with pytest.raises(VariantError, match="no block"):
        _job(
            private_project,
            stub_endpoint,
            kind="without",
            snapshot_id=planted["snapshot_id"],
            block="retrieval",
        )
    assert not ReplayJob.objects.exists()


@pytest.mark.django_db
def test_the_request_sent_for_a_removed_block_lacks_exactly_that_block(
    private_project: Any,
    stub_endpoint: Any,
    stub_server: Any,
    planted: dict[str, Any],
) -> None:
    job = _job(
        private_project,
        stub_endpoint,
        kind="without",
        snapshot_id=planted["snapshot_id"],
        block="memory",
        samples=1,
        params={"max_tokens": 8},
    )
    for r in job.runs.order_by("variant__position"):
        replay_run_execute(run_id=r.pk)
    base, variant = (c["body"] for c in stub_server.completion_calls())
    assert "Memory: the user's destination city is Guangzhou." in base["prompt"]
    assert (
        base["prompt"].replace("System: Memory: the user's destination city is Guangzhou.\n", "")
        == variant["prompt"]
    )
    assert base["max_tokens"] == 8 and base["model"] == "stub-model"
    snap = ingest_selectors.snapshot_by_uuid(project=private_project, snapshot_id=planted["snapshot_id"])
    assert snap is not None


@pytest.mark.django_db
def test_a_replay_sends_content_holding_nul_and_broken_text_as_it_was_sent(
    api: Any, private_project: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    question = "Read this file: PK\x03\x04\x00\x00 and \udcff please"
    wire = planted_fact_snapshot(session_id="binary")
    wire["blocks"][2]["messages"][0]["content"] = question
    wire["params"] = {"stop": ["\x00"]}
    post(api, wire)
    job = _job(private_project, stub_endpoint, kind="plain", snapshot_id=wire["snapshot_id"], samples=1)
    assert replay_run_execute(run_id=job.runs.get().pk).state == "done"
    [call] = stub_server.completion_calls()
    assert question in call["body"]["prompt"]
    # The saved stop first, then the transcript's role labels.
    assert call["body"]["stop"][0] == "\x00" and "\nAssistant:" in call["body"]["stop"]
    # The run keeps the body it sent, NUL and broken text included.
    assert job.runs.get().request_body == call["body"]


@pytest.mark.django_db
def test_an_answer_holding_nul_and_broken_text_is_stored_and_read_back_as_the_model_sent_it(
    api: Any, private_project: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    wire = planted_fact_snapshot(session_id="binary-answer")
    post(api, wire)
    stub_server.text = "bytes: \x00\x01 then \udcff end"
    job = _job(private_project, stub_endpoint, kind="plain", snapshot_id=wire["snapshot_id"], samples=1)
    run = job.runs.get()
    assert replay_run_execute(run_id=run.pk).state == "done"
    run.refresh_from_db()
    assert run.status == "done"
    assert run.output_text == "bytes: \x00\x01 then \udcff end"
