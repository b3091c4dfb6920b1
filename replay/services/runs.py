"""Execution of replay runs: claim a run, call the model under a renewed lease, record the
outcome and its retry, recount the job; and the reclaimer that re-queues runs whose lease ran out.
Every write here is safe to repeat."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Count
from django.utils import timezone

from core.models import Project
from ctxobs.retry import backoff_delay
from ingest import selectors as ingest_selectors
from replay import ablation, endpoints, signals
from replay.errors import ReplayError, VariantError, turn_expired
from replay.models import JOB_FINISHED, JobStatus, ModelEndpoint, ReplayJob, ReplayRun, ReplayVariant
from replay.services import contexts
from replay.services.model_endpoints import _api_key
from replay.types import ChatRequest

logger = logging.getLogger(__name__)

RUN_TERMINAL = (ReplayRun.Status.DONE, ReplayRun.Status.FAILED, ReplayRun.Status.CANCELLED)


def _max_attempts() -> int:
    return int(settings.CTXOBS_REPLAY_MAX_ATTEMPTS)


def _retry_base_s() -> float:
    return float(settings.CTXOBS_REPLAY_RETRY_BASE_S)


def _lease() -> timedelta:
    return timedelta(seconds=float(settings.CTXOBS_REPLAY_LEASE_S))


def _enqueue(run_ids: list[int], priority: int) -> None:
    """Queue a task for each of RUN_IDS at PRIORITY (`QueuePriority`: its retries keep it)."""
    from replay.tasks import run_execute

    for rid in run_ids:
        run_execute.apply_async(args=[rid], priority=priority)


def _job_refresh(*, job_id: int) -> None:
    """Recount the job's runs; close the job when every run has ended."""
    with transaction.atomic():
        job = ReplayJob.objects.select_for_update().get(pk=job_id)
        counts = {
            r["status"]: r["n"]
            for r in ReplayRun.objects.filter(job_id=job_id)
            .values("status")
            .annotate(n=Count("id"))
            .order_by()
        }
        job.n_done = counts.get(ReplayRun.Status.DONE, 0)
        job.n_failed = counts.get(ReplayRun.Status.FAILED, 0)
        job.n_cancelled = counts.get(ReplayRun.Status.CANCELLED, 0)
        fields = ["n_done", "n_failed", "n_cancelled"]
        ended = job.n_done + job.n_failed + job.n_cancelled
        if ended >= job.n_runs and job.status not in JOB_FINISHED:
            job.status = JobStatus.FAILED if job.n_done == 0 and job.n_failed else JobStatus.DONE
            job.finished_at = timezone.now()
            fields += ["status", "finished_at"]
            status = job.status
            transaction.on_commit(
                lambda: signals.job_finished.send(sender=ReplayJob, job_id=job_id, status=status)
            )
            logger.info(
                "replay.job_finished job_id=%s status=%s done=%s failed=%s",
                job.pk,
                job.status,
                job.n_done,
                job.n_failed,
            )
        job.save(update_fields=fields)


@dataclass
class ReclaimResult:
    requeued: list[int]
    failed: list[int]
    cancelled: list[int]


RECLAIM_BATCH = 500


def replay_runs_reclaim(*, replay_queue_depth: int | None) -> ReclaimResult:
    """Re-queue the unfinished runs whose lease ran out: running ones whose worker stopped
    renewing it (it died), pending ones whose scheduled retry a dead worker held and, when the
    replay queue is empty (REPLAY_QUEUE_DEPTH == 0), pending ones whose message was lost between
    a worker taking it and claiming the run. A run already claimed CTXOBS_REPLAY_MAX_ATTEMPTS
    times fails instead, and runs of a cancelled job are cancelled. Finished runs are never
    touched; safe to run twice and from several processes (rows are taken with SKIP LOCKED)."""
    now = timezone.now()
    out = ReclaimResult([], [], [])
    jobs: set[int] = set()
    by_priority: dict[int, list[int]] = {}  # the requeued runs by their job's queue priority
    with transaction.atomic():
        runs = list(
            ReplayRun.objects.select_for_update(of=("self",), skip_locked=True)
            .select_related("job")
            .filter(
                status__in=(ReplayRun.Status.PENDING, ReplayRun.Status.RUNNING), lease_expires_at__lt=now
            )
            .order_by("lease_expires_at")[:RECLAIM_BATCH]
        )
        for run in runs:
            lost_worker = run.status == ReplayRun.Status.RUNNING
            if run.job.status == JobStatus.CANCELLED:
                run.status = ReplayRun.Status.CANCELLED
                run.error = "cancelled"
                run.finished_at = now
                run.lease_expires_at = None
                out.cancelled.append(run.pk)
            elif lost_worker and run.attempts >= _max_attempts():
                run.status = ReplayRun.Status.FAILED
                run.error = f"the worker running it stopped during the model call ({run.attempts} times)"
                run.finished_at = now
                run.lease_expires_at = None
                out.failed.append(run.pk)
            elif lost_worker or run.next_attempt_at is not None or replay_queue_depth == 0:
                if lost_worker:
                    run.error = "re-queued: the worker running it stopped"
                run.status = ReplayRun.Status.PENDING
                run.claim = None
                run.next_attempt_at = None
                run.lease_expires_at = now + _lease()
                out.requeued.append(run.pk)
                by_priority.setdefault(run.job.priority, []).append(run.pk)
            else:
                # Its message may still be waiting in a busy queue: look again later.
                continue
            run.save(update_fields=["status", "error", "finished_at", "claim", "next_attempt_at",
                                    "lease_expires_at"])
            jobs.add(run.job_id)
        for priority, requeued in sorted(by_priority.items()):
            transaction.on_commit(partial(_enqueue, requeued, priority))
    for job_id in sorted(jobs):
        _job_refresh(job_id=job_id)
    if runs:
        logger.info(
            "replay.runs_reclaimed requeued=%s failed=%s cancelled=%s queue_depth=%s",
            len(out.requeued),
            len(out.failed),
            len(out.cancelled),
            replay_queue_depth,
        )
    return out


@dataclass
class RunOutcome:
    state: str
    retry_in: float | None = None


class _LeaseKeeper:
    """Renews a run's lease every third of it while its model call is under way, from a thread
    with its own database connection; stops when the claim is no longer ours."""

    def __init__(self, *, run_id: int, claim: uuid.UUID) -> None:
        self.run_id = run_id
        self.claim = claim
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"lease-{run_id}", daemon=True)

    def __enter__(self) -> _LeaseKeeper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join()

    def _loop(self) -> None:
        lease = _lease()
        try:
            while not self.stopped.wait(lease.total_seconds() / 3):
                try:
                    with transaction.atomic():
                        # Never wait behind a row lock for longer than a renewal period.
                        wait_ms = int(lease.total_seconds() * 1000 / 3)
                        with connection.cursor() as cur:
                            cur.execute("SET LOCAL lock_timeout = %s", [f"{wait_ms}ms"])
                        kept = ReplayRun.objects.filter(
                            pk=self.run_id, claim=self.claim, status=ReplayRun.Status.RUNNING
                        ).update(lease_expires_at=timezone.now() + lease)
                except DatabaseError as exc:
                    logger.warning(
                        "replay.lease_renew_failed run_id=%s error=%s", self.run_id, type(exc).__name__
                    )
                    continue
                if not kept:
                    return
        finally:
            connection.close()


RETRY_MAX_S = 60.0


def _backoff(attempt: int, retry_after: float | None) -> float:
    return backoff_delay(
        attempt,
        base=_retry_base_s(),
        cap=RETRY_MAX_S,
        retry_after=retry_after,
        retry_after_cap=endpoints.MAX_RETRY_AFTER_S,
        jitter=0.1,
    )


def replay_run_request(*, project: Project, variant: ReplayVariant) -> ChatRequest:
    """The request VARIANT sends: the saved blocks with its operations, the saved parameters
    that still apply (removing the tool definitions' block removes `tools`). A variant with a
    frozen context renders from it, whatever the project's retention did to the turn."""
    if variant.context_id is not None:
        frozen = variant.context.snapshot if variant.context else {}
        return ablation.render_variant(
            contexts.context_blocks(frozen), variant.operations, contexts.context_params(frozen)
        )
    snap = ingest_selectors.snapshot_ref_by_uuid(project=project, snapshot_id=variant.snapshot_uuid)
    if snap is None:
        # It was stored when the job was made: retention has removed it since.
        raise VariantError(turn_expired(project.retention_days))
    blocks = ingest_selectors.snapshot_blocks(project_id=project.pk, snapshot_ref=snap.ref)
    return ablation.render_variant(blocks, variant.operations, snap.params)


def run_call_plan(
    *,
    request: ChatRequest,
    overrides: dict[str, Any],
    endpoint: ModelEndpoint,
    is_baseline: bool,
    sample: int,
) -> ablation.CallPlan:
    """The call a run makes for REQUEST: the saved parameters, the job's OVERRIDES, and for a
    sample after the first no saved seed (the resamples whose spread the verdicts test; the
    same for baseline and variants, so that both distributions are sampled alike)."""
    return ablation.build_call(
        request=request,
        model=endpoint.model,
        mode=endpoint.mode,
        endpoint_params=endpoint.default_params,
        overrides=overrides,
        drops_later_system=endpoint.chat_drops_later_system,
        resample=sample > 0,
    )


def reuse_key(*, endpoint: ModelEndpoint, call: ablation.CallPlan) -> str:
    """What makes two calls the same call: endpoint, model, API path and canonical body."""
    return ablation.request_hash(
        {"endpoint": endpoint.pk, "model": endpoint.model, "path": call.path, "body": call.body}
    )


def _run_call(
    *, run: ReplayRun, job: ReplayJob, endpoint: ModelEndpoint, project: Project
) -> tuple[endpoints.CallResult, list[float] | None]:
    """The network part of a run, outside any transaction: the completion, then its embedding
    when the endpoint has an embeddings model (a failed embedding only loses the embedding).
    The body is stored on the run before it is sent."""
    # Shape only: the address is checked where the connection is opened (core.net).
    url = endpoints.validate_base_url(
        endpoint.base_url, allow_private=project.allow_private_endpoints, resolve=False
    )
    request = replay_run_request(project=project, variant=run.variant)
    call = run_call_plan(
        request=request,
        overrides=job.params,
        endpoint=endpoint,
        is_baseline=run.variant.is_baseline,
        sample=run.sample,
    )
    ReplayRun.objects.filter(pk=run.pk).update(
        request_path=call.path,
        request_body=call.body,
        api_mode=call.mode,
        mode_note=call.note[:300],
        request_key=reuse_key(endpoint=endpoint, call=call),
    )
    api_key = _api_key(endpoint)
    result = endpoints.complete(
        base_url=url, path=call.path, body=call.body, api_key=api_key, timeout=endpoint.timeout_s,
        allow_private=project.allow_private_endpoints,
    )
    embedding: list[float] | None = None
    if endpoint.embeddings_model and result.text:
        try:
            embedding = endpoints.embed(
                base_url=url,
                model=endpoint.embeddings_model,
                text=result.text,
                api_key=api_key,
                timeout=endpoint.timeout_s,
                allow_private=project.allow_private_endpoints,
            )
        except endpoints.CallError as exc:
            logger.warning("replay.embedding_failed run_id=%s reason=%s", run.pk, exc.reason)
    return result, embedding


def replay_run_execute(*, run_id: int) -> RunOutcome:
    """Execute run RUN_ID at most once: claim it under a row lock (pending -> running), call the
    model outside any transaction, then store the result only if the claim is still ours.
    A second delivery of the same run finds it claimed or finished and calls nothing."""
    t0 = time.perf_counter()
    claimed = _run_claim(run_id=run_id, now=timezone.now())
    if isinstance(claimed, RunOutcome):
        return claimed
    run, claim = claimed
    result, embedding, failure = _run_call_leased(run=run, claim=claim)
    return _run_record(run_id=run_id, claim=claim, result=result, embedding=embedding, failure=failure, t0=t0)


def _run_claim(*, run_id: int, now: datetime) -> tuple[ReplayRun, uuid.UUID] | RunOutcome:
    """Under the run's row lock: the run claimed (pending -> running) with its new claim id, or
    the outcome that says why it makes no call now."""
    with transaction.atomic():
        run = (
            ReplayRun.objects.select_for_update(of=("self",))
            .select_related("job", "job__endpoint", "job__project", "variant", "variant__context")
            .filter(pk=run_id)
            .first()
        )
        if run is None:
            return RunOutcome("missing")
        if run.status in RUN_TERMINAL:
            return RunOutcome(f"already_{run.status}")
        not_now = _run_not_callable(run=run, now=now)
        if not_now is not None:
            return not_now
        claim = uuid.uuid4()
        run.status = ReplayRun.Status.RUNNING
        run.claim = claim
        run.claimed_at = now
        run.lease_expires_at = now + _lease()
        run.attempts += 1
        run.model_calls += 1
        run.save(
            update_fields=["status", "claim", "claimed_at", "lease_expires_at", "attempts", "model_calls"]
        )
        job = run.job
        if job.status == JobStatus.PENDING:
            ReplayJob.objects.filter(pk=job.pk, status=JobStatus.PENDING).update(
                status=JobStatus.RUNNING, started_at=now
            )
    return run, claim


def _run_not_callable(*, run: ReplayRun, now: datetime) -> RunOutcome | None:
    """Why the locked, unfinished RUN makes no call now (its job was cancelled, another worker
    holds it, its retry is not due, its turn is gone), ending it where that is final; None
    when it may be claimed."""
    job = run.job
    if job.status == JobStatus.CANCELLED:
        run.status = ReplayRun.Status.CANCELLED
        run.error = "cancelled"
        run.finished_at = now
        run.lease_expires_at = None
        run.save(update_fields=["status", "error", "finished_at", "lease_expires_at"])
        transaction.on_commit(lambda: _job_refresh(job_id=job.pk))
        return RunOutcome("cancelled")
    if run.status == ReplayRun.Status.RUNNING:
        held = _run_held(run=run, now=now)
        if held is not None:
            return held
    if (
        run.status == ReplayRun.Status.PENDING
        and run.next_attempt_at
        and run.next_attempt_at > now + timedelta(seconds=1)
    ):
        return RunOutcome("not_yet", retry_in=(run.next_attempt_at - now).total_seconds())
    if run.variant.context_id is None and not ingest_selectors.snapshots_existing(
        project_id=job.project_id, snapshot_refs=[run.variant.snapshot_ref]
    ):
        # Retention removed the turn after the job was made: the run ends here, without a
        # model call or a retry, and says why.
        run.status = ReplayRun.Status.FAILED
        run.error = turn_expired(job.project.retention_days)
        run.finished_at = now
        run.claim = None
        run.lease_expires_at = None
        run.next_attempt_at = None
        run.save(update_fields=["status", "error", "finished_at", "claim", "lease_expires_at",
                                "next_attempt_at"])
        transaction.on_commit(lambda: _job_refresh(job_id=job.pk))
        logger.info("replay.run_turn_expired run_id=%s job_id=%s", run.pk, job.pk)
        return RunOutcome("turn_expired")
    return None


def _run_held(*, run: ReplayRun, now: datetime) -> RunOutcome | None:
    """A RUNNING run: another worker holds it while its lease runs; once the lease ran out, it
    failed when it was claimed CTXOBS_REPLAY_MAX_ATTEMPTS times, else it may be claimed again."""
    if run.lease_expires_at and run.lease_expires_at > now:
        # Another worker holds it; look again when its lease would run out.
        remaining = (run.lease_expires_at - now).total_seconds()
        return RunOutcome("claimed_elsewhere", retry_in=max(1.0, remaining))
    if run.attempts >= _max_attempts():
        run.status = ReplayRun.Status.FAILED
        run.error = f"the worker running it stopped during the model call ({run.attempts} times)"
        run.finished_at = now
        run.claim = None
        run.lease_expires_at = None
        run.save(update_fields=["status", "error", "finished_at", "claim", "lease_expires_at"])
        job_id = run.job_id
        transaction.on_commit(lambda: _job_refresh(job_id=job_id))
        return RunOutcome("failed")
    logger.warning("replay.run_lease_expired run_id=%s attempt=%s", run.pk, run.attempts)
    return None


def _run_call_leased(
    *, run: ReplayRun, claim: uuid.UUID
) -> tuple[endpoints.CallResult | None, list[float] | None, endpoints.CallError | None]:
    """The model call of the claimed RUN, its lease renewed meanwhile: (result, embedding, None),
    or (None, None, the failure); a replay error or the time limit is a failure not worth a retry."""
    job = run.job
    try:
        with _LeaseKeeper(run_id=run.pk, claim=claim):
            result, embedding = _run_call(run=run, job=job, endpoint=job.endpoint, project=job.project)
    except endpoints.CallError as exc:
        return None, None, exc
    except ReplayError as exc:
        return None, None, endpoints.CallError(exc.detail, transient=False)
    except SoftTimeLimitExceeded:
        # A repeat would hit the same limit: record it, so that the run ends with its reason.
        limit = float(settings.CTXOBS_REPLAY_TIME_LIMIT_S)
        return None, None, endpoints.CallError(
            f"took longer than the replay time limit ({limit:g}s)", transient=False
        )
    return result, embedding, None


def _run_record(
    *,
    run_id: int,
    claim: uuid.UUID,
    result: endpoints.CallResult | None,
    embedding: list[float] | None,
    failure: endpoints.CallError | None,
    t0: float,
) -> RunOutcome:
    """Store the call's outcome on the run if the claim is still ours: done, a retry after a
    backoff for a transient failure (within CTXOBS_REPLAY_MAX_ATTEMPTS), else failed; an ended
    run recounts its job."""
    with transaction.atomic():
        cur = ReplayRun.objects.select_for_update().get(pk=run_id)
        if cur.claim != claim or cur.status != ReplayRun.Status.RUNNING:
            logger.warning("replay.claim_lost run_id=%s", run_id)
            return RunOutcome("claim_lost")
        cur.claim = None
        cur.lease_expires_at = None
        outcome = _run_outcome(cur, result=result, embedding=embedding, failure=failure)
        if cur.status in RUN_TERMINAL:
            cur.finished_at = timezone.now()
            cur.work_ms = (time.perf_counter() - t0) * 1000.0
        cur.save()
        if cur.status in RUN_TERMINAL:
            _job_refresh(job_id=cur.job_id)
    logger.info(
        "replay.run_%s run_id=%s job_id=%s attempt=%s model_ms=%s",
        outcome.state,
        run_id,
        cur.job_id,
        cur.attempts,
        f"{result.latency_ms:.0f}" if result else "-",
    )
    return outcome


def _run_outcome(
    cur: ReplayRun,
    *,
    result: endpoints.CallResult | None,
    embedding: list[float] | None,
    failure: endpoints.CallError | None,
) -> RunOutcome:
    """Set the locked run CUR's fields from the call's result or failure (not saved)."""
    if result is not None:
        cur.status = ReplayRun.Status.DONE
        cur.output_text = result.text
        cur.tool_calls = result.tool_calls
        cur.finish_reason = result.finish_reason[:50]
        cur.prompt_tokens = result.prompt_tokens
        cur.completion_tokens = result.completion_tokens
        cur.latency_ms = result.latency_ms
        cur.embedding = embedding
        cur.error = ""
        cur.next_attempt_at = None
        return RunOutcome("done")
    if failure is not None and failure.transient and cur.attempts < _max_attempts():
        delay = _backoff(cur.attempts, failure.retry_after)
        cur.status = ReplayRun.Status.PENDING
        cur.next_attempt_at = timezone.now() + timedelta(seconds=delay)
        # The retry's message waits on a worker until then; if that worker dies, the
        # reclaimer sends another once this lease has run out too.
        cur.lease_expires_at = cur.next_attempt_at + _lease()
        cur.error = f"retrying in {delay:.1f}s after: {failure.reason}"[:500]
        return RunOutcome("retry", retry_in=delay)
    reason = failure.reason if failure else "unknown failure"
    if failure is not None and failure.transient:
        reason = f"{reason} (gave up after {cur.attempts} attempts)"
    cur.status = ReplayRun.Status.FAILED
    cur.error = reason[:500]
    return RunOutcome("failed")
