"""Writes of the replay app: endpoints, jobs (planned, previewed, created, cancelled) and the
execution of one run, safe to repeat."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Count
from django.utils import timezone

from core import secrets
from core.models import Project
from ctxobs.retry import backoff_delay
from ingest import selectors as ingest_selectors
from ingest.types import StoredBlock, TimelineRow
from replay import ablation, endpoints
from replay.errors import EndpointError, NotFound, ReplayError, VariantError
from replay.models import JOB_FINISHED, JobStatus, ModelEndpoint, ReplayJob, ReplayRun, ReplayVariant
from replay.types import ChatRequest, PlanEstimate, SkippedTurn

logger = logging.getLogger(__name__)

LOCAL_ENDPOINT_NAME = "local gemma-3-270m"
LOCAL_MODEL_NAME = "gemma-3-270m"
LOCAL_DEFAULT_PARAMS: dict[str, Any] = {"temperature": 0, "seed": 42, "max_tokens": 64}
JOB_KINDS = ("plain", "without", "move", "loo", "batch", "custom")
MAX_SAMPLES = 10
MAX_SNAPSHOTS_PER_JOB = 200
MAX_RUNS_PER_JOB = 2000
RUN_TERMINAL = (ReplayRun.Status.DONE, ReplayRun.Status.FAILED, ReplayRun.Status.CANCELLED)


def _max_attempts() -> int:
    return int(settings.CTXOBS_REPLAY_MAX_ATTEMPTS)


def _retry_base_s() -> float:
    return float(settings.CTXOBS_REPLAY_RETRY_BASE_S)


def _lease() -> timedelta:
    return timedelta(seconds=float(settings.CTXOBS_REPLAY_LEASE_S))


# --- endpoints ------------------------------------------------------------------
def endpoint_create(
    *,
    project: Project,
    name: str,
    base_url: str,
    model: str,
    api_key: str = "",
    mode: str = "chat",
    default_params: dict[str, Any] | None = None,
    embeddings_model: str = "",
    timeout_s: float = 60.0,
    is_default: bool = False,
    is_local: bool = False,
) -> ModelEndpoint:
    """A new endpoint of PROJECT; the base URL is checked against the project's address policy
    and the API key is stored encrypted."""
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise EndpointError("give the endpoint a name (at most 100 characters)")
    if not (model or "").strip():
        raise EndpointError("give the model name the server expects")
    if mode not in ModelEndpoint.Mode.values:
        raise EndpointError(f"mode must be one of {', '.join(ModelEndpoint.Mode.values)}")
    if default_params is not None and not isinstance(default_params, dict):
        raise EndpointError("default parameters must be a JSON object")
    if not 1 <= float(timeout_s) <= 600:
        raise EndpointError("the timeout must be between 1 and 600 seconds")
    url = endpoints.validate_base_url(base_url, allow_private=project.allow_private_endpoints)
    with transaction.atomic():
        if ModelEndpoint.objects.filter(project=project, name=name).exists():
            raise EndpointError(f"an endpoint named {name[:100]!r} exists already")
        first = not ModelEndpoint.objects.filter(project=project).exists()
        ep = ModelEndpoint.objects.create(
            project=project,
            name=name,
            base_url=url,
            model=model.strip(),
            mode=mode,
            api_key_encrypted=secrets.encrypt(api_key),
            api_key_hint=secrets.hint(api_key) if api_key else "",
            default_params=default_params or {},
            embeddings_model=embeddings_model.strip(),
            timeout_s=float(timeout_s),
            is_default=is_default or first,
            is_local=is_local,
        )
        if ep.is_default:
            ModelEndpoint.objects.filter(project=project, is_default=True).exclude(pk=ep.pk).update(
                is_default=False
            )
    logger.info("replay.endpoint_created project_id=%s endpoint_id=%s mode=%s", project.pk, ep.pk, mode)
    return ep


def local_endpoint_register(*, project: Project, base_url: str) -> ModelEndpoint:
    """Register (or point again) the embedded local model server at BASE_URL (e.g.
    "http://127.0.0.1:8011/v1") as PROJECT's default endpoint. The project must allow private
    endpoints (Project.allow_private_endpoints), since the server listens on loopback."""
    if not project.allow_private_endpoints:
        raise EndpointError(
            "the local model listens on loopback: allow private endpoints for this project first"
        )
    url = endpoints.validate_base_url(base_url, allow_private=True)
    with transaction.atomic():
        ep = (
            ModelEndpoint.objects.select_for_update()
            .filter(project=project, name=LOCAL_ENDPOINT_NAME)
            .first()
        )
        if ep is None:
            ep = endpoint_create(
                project=project,
                name=LOCAL_ENDPOINT_NAME,
                base_url=url,
                model=LOCAL_MODEL_NAME,
                mode=ModelEndpoint.Mode.COMPLETIONS,
                default_params=dict(LOCAL_DEFAULT_PARAMS),
                timeout_s=60.0,
                is_default=True,
                is_local=True,
            )
        else:
            ep.base_url = url
            ep.is_local = True
            ep.save(update_fields=["base_url", "is_local", "updated_at"])
        if not ModelEndpoint.objects.filter(project=project, is_default=True).exclude(pk=ep.pk).exists():
            ModelEndpoint.objects.filter(pk=ep.pk).update(is_default=True)
            ep.is_default = True
    logger.info("replay.local_endpoint_registered project_id=%s endpoint_id=%s", project.pk, ep.pk)
    return ep


def endpoint_set_default(*, endpoint: ModelEndpoint) -> None:
    with transaction.atomic():
        ModelEndpoint.objects.filter(project_id=endpoint.project_id).update(is_default=False)
        ModelEndpoint.objects.filter(pk=endpoint.pk).update(is_default=True)


def _api_key(endpoint: ModelEndpoint) -> str:
    try:
        return secrets.decrypt(endpoint.api_key_encrypted, what="the stored API key")
    except ValueError as exc:
        raise EndpointError(str(exc)) from None


def endpoint_test(*, endpoint: ModelEndpoint) -> tuple[bool, str]:
    """Call the endpoint once (one token); remember and return (ok, what happened)."""
    try:
        project = endpoint.project
        # Shape only: the address is checked where the connection is opened (core.net).
        url = endpoints.validate_base_url(
            endpoint.base_url, allow_private=project.allow_private_endpoints, resolve=False
        )
        detail = endpoints.connection_check(
            base_url=url,
            model=endpoint.model,
            mode=endpoint.mode,
            api_key=_api_key(endpoint),
            timeout=min(endpoint.timeout_s, 30.0),
            allow_private=project.allow_private_endpoints,
        )
        ok = True
    except (endpoints.CallError, ReplayError) as exc:
        ok, detail = False, getattr(exc, "reason", None) or str(exc)
    ModelEndpoint.objects.filter(pk=endpoint.pk).update(
        last_test_at=timezone.now(), last_test_ok=ok, last_test_detail=detail[:500]
    )
    logger.info("replay.endpoint_tested endpoint_id=%s ok=%s", endpoint.pk, ok)
    return ok, detail


# --- planning -------------------------------------------------------------------
@dataclass
class PlannedSnapshot:
    snapshot_ref: int
    snapshot_uuid: uuid.UUID
    session_id: str
    turn: int
    blocks: list[StoredBlock]
    plans: list[ablation.VariantPlan]


@dataclass
class JobPlan:
    kind: str
    title: str
    samples: int
    params: dict[str, Any]
    snapshots: list[PlannedSnapshot]
    skipped: list[SkippedTurn]

    @property
    def estimate(self) -> PlanEstimate:
        calls = tokens = 0
        for s in self.snapshots:
            e = ablation.estimate(s.plans, s.blocks)
            calls += e["model_calls"]
            tokens += e["prompt_tokens"]
        return {
            "model_calls": calls,
            "prompt_tokens": tokens,
            "snapshots": len(self.snapshots),
            "variants": sum(len(s.plans) for s in self.snapshots),
            "skipped": len(self.skipped),
        }


def _turn_matches(row: TimelineRow, flt: dict[str, Any]) -> bool:
    if flt.get("min_watermark") is not None and row["watermark"] < float(flt["min_watermark"]):
        return False
    if flt.get("tier") and row["tier"] != flt["tier"]:
        return False
    if flt.get("turn_from") is not None and row["turn"] < int(flt["turn_from"]):
        return False
    return not (flt.get("turn_to") is not None and row["turn"] > int(flt["turn_to"]))


def _target_snapshots(*, project: Project, spec: dict[str, Any]) -> list[tuple[int, uuid.UUID, str, int]]:
    """(snapshot_ref, uuid, session_id, turn) of the turns SPEC names, in session/turn order."""
    if spec.get("snapshot_id"):
        snap = ingest_selectors.snapshot_ref_by_uuid(project=project, snapshot_id=spec["snapshot_id"])
        if snap is None:
            raise NotFound("no such snapshot in this project")
        # A session_id given too names the snapshot's session: a mismatch is a wrong reference.
        if spec.get("session_id") and str(spec["session_id"]) != snap.session_id:
            raise NotFound("no such snapshot in that session")
        return [(snap.ref, snap.snapshot_id, snap.session_id, snap.turn)]
    flt = spec.get("filter")
    if flt is None:
        flt = {}
    if not isinstance(flt, dict):
        raise VariantError("filter must be an object")
    if spec.get("session_id"):
        session = ingest_selectors.session_get(project=project, session_id=str(spec["session_id"]))
        if session is None:
            raise NotFound("no such session in this project")
        sessions = [session]
    elif "filter" in spec:
        # No condition at all selects every session; the per-job bound below still holds.
        sessions = list(
            ingest_selectors.sessions_filter(
                project=project,
                q=flt.get("q") or None,
                agent=flt.get("agent") or None,
                model=flt.get("model") or None,
            )[:MAX_SNAPSHOTS_PER_JOB]
        )
    else:
        raise VariantError("name the turns to replay: snapshot_id, session_id or filter")
    out: list[tuple[int, uuid.UUID, str, int]] = []
    for s in sessions:
        for row in ingest_selectors.session_timeline(project=project, session=s):
            if _turn_matches(row, flt):
                out.append((row["id"], row["snapshot_id"], s.session_id, row["turn"]))
            if len(out) > MAX_SNAPSHOTS_PER_JOB:
                raise VariantError(f"at most {MAX_SNAPSHOTS_PER_JOB} turns per job; narrow the filter")
    if not out:
        # The selection is valid and names nothing, like an unknown session.
        raise NotFound("no turn matches")
    return out


def replay_job_plan(*, project: Project, spec: dict[str, Any]) -> JobPlan:
    """What a job for SPEC would run, without writing anything: per turn, the variants and
    their samples (see ablation.plan_variants), and the turns skipped because the variant
    does not apply to them (e.g. they have no such block)."""
    if not isinstance(spec, dict):
        raise VariantError("the job spec must be an object")
    kind = spec.get("kind") or "plain"
    if kind not in JOB_KINDS:
        raise VariantError(f"kind must be one of {', '.join(JOB_KINDS)}")
    samples = spec.get("samples", 3)
    if not isinstance(samples, int) or isinstance(samples, bool) or not 1 <= samples <= MAX_SAMPLES:
        raise VariantError(f"samples must be an integer from 1 to {MAX_SAMPLES}")
    params = spec.get("params") or {}
    if not isinstance(params, dict):
        raise VariantError("params must be an object")
    operations = spec.get("operations")
    if operations is not None and not isinstance(operations, list):
        raise VariantError("operations must be a list")
    block_key = spec.get("block")
    if kind in ("without", "move") and not block_key:
        raise VariantError(f"a {kind} job needs 'block': the key of the block")
    if kind == "batch" and not operations and block_key:
        operations = [{"op": "remove", "key": block_key}]
    targets = _target_snapshots(project=project, spec=spec)
    if kind != "batch" and len(targets) > 1 and not spec.get("snapshot_id"):
        kind = "batch" if (operations or block_key) else kind
    blocks_by_ref = ingest_selectors.snapshots_blocks(
        project_id=project.pk, snapshot_refs=[t[0] for t in targets]
    )
    planned: list[PlannedSnapshot] = []
    skipped: list[SkippedTurn] = []
    for ref, sid, session_id, turn in targets:
        blocks = blocks_by_ref.get(ref) or []
        vkind = "custom" if kind == "batch" else kind
        if vkind == "custom" and not operations and block_key:
            operations = [{"op": "remove", "key": block_key}]
        try:
            plans = ablation.plan_variants(
                kind=vkind,
                blocks=blocks,
                samples=samples,
                block_key=block_key,
                to=spec.get("to"),
                anchor=spec.get("anchor"),
                operations=operations,
            )
        except VariantError as exc:
            if len(targets) == 1:
                raise
            skipped.append(
                {"snapshot_id": str(sid), "session_id": session_id, "turn": turn, "reason": exc.detail}
            )
            continue
        planned.append(PlannedSnapshot(ref, sid, session_id, turn, blocks, plans))
    if not planned:
        raise VariantError("the variant applies to none of the selected turns")
    runs = sum(p.samples for s in planned for p in s.plans)
    if runs > MAX_RUNS_PER_JOB:
        raise VariantError(f"this job would make {runs} model calls; at most {MAX_RUNS_PER_JOB} per job")
    title = spec.get("title") or _title(kind, planned)
    return JobPlan(
        kind=kind, title=title[:300], samples=samples, params=params, snapshots=planned, skipped=skipped
    )


def _title(kind: str, planned: list[PlannedSnapshot]) -> str:
    first = planned[0]
    where = f"{first.session_id} turn {first.turn}" if len(planned) == 1 else f"{len(planned)} turns"
    variant = next((p.label for p in first.plans if not p.is_baseline), "replay")
    if kind == "loo":
        variant = "leave-one-out"
    return f"{variant} — {where}"


def replay_job_create(
    *,
    project: Project,
    spec: dict[str, Any],
    endpoint: ModelEndpoint | None = None,
    user: Any = None,
) -> ReplayJob:
    """Plan SPEC, store the job with its variants and one pending run per (variant, sample),
    and enqueue one task per run once the transaction commits."""
    plan = replay_job_plan(project=project, spec=spec)
    endpoint = endpoint or ModelEndpoint.objects.filter(project=project, is_default=True).first()
    if endpoint is None:
        raise EndpointError("this project has no model endpoint; add one first")
    if endpoint.project_id != project.pk:
        raise NotFound("no such endpoint in this project")
    with transaction.atomic():
        job = ReplayJob.objects.create(
            project=project,
            endpoint=endpoint,
            created_by=user if getattr(user, "pk", None) else None,
            kind=plan.kind,
            title=plan.title,
            spec={**spec, "skipped": plan.skipped},
            params=plan.params,
            samples=plan.samples,
            estimate=plan.estimate,
        )
        variants: list[ReplayVariant] = []
        pos = 0
        for s in plan.snapshots:
            for p in s.plans:
                v = ReplayVariant(
                    job=job,
                    position=pos,
                    snapshot_ref=s.snapshot_ref,
                    snapshot_uuid=s.snapshot_uuid,
                    session_id=s.session_id,
                    turn=s.turn,
                    label=p.label[:300],
                    operations=p.operations,
                    is_baseline=p.is_baseline,
                    target_key=p.target_key[:128],
                    samples=p.samples,
                    prompt_tokens_est=ablation.context_tokens(
                        ablation.apply_operations(s.blocks, p.operations)
                    ),
                )
                variants.append(v)
                pos += 1
        ReplayVariant.objects.bulk_create(variants)
        # Queued messages wait safely in Redis, however long the queue; the lease only says when
        # the reclaimer may start asking whether this run's message was lost (see replay_runs_reclaim).
        lease_end = timezone.now() + _lease()
        runs = ReplayRun.objects.bulk_create(
            [
                ReplayRun(job=job, variant=v, sample=i, lease_expires_at=lease_end)
                for v in variants
                for i in range(v.samples)
            ]
        )
        job.n_runs = len(runs)
        job.save(update_fields=["n_runs"])
        run_ids = [r.pk for r in runs]
        transaction.on_commit(lambda: _enqueue(run_ids))
    logger.info(
        "replay.job_created job_id=%s project_id=%s kind=%s runs=%s",
        job.pk,
        project.pk,
        job.kind,
        len(run_ids),
    )
    return job


def _enqueue(run_ids: list[int]) -> None:
    from replay.tasks import run_execute

    for rid in run_ids:
        run_execute.delay(rid)


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
            else:
                # Its message may still be waiting in a busy queue: look again later.
                continue
            run.save(update_fields=["status", "error", "finished_at", "claim", "next_attempt_at",
                                    "lease_expires_at"])
            jobs.add(run.job_id)
        requeued = list(out.requeued)
        transaction.on_commit(lambda: _enqueue(requeued))
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


def replay_job_cancel(*, job: ReplayJob) -> ReplayJob:
    """Stop JOB: no new model call starts; calls already under way finish and are kept."""
    now = timezone.now()
    ReplayJob.objects.filter(pk=job.pk).exclude(status__in=JOB_FINISHED).update(
        status=JobStatus.CANCELLED, finished_at=now
    )
    with transaction.atomic():
        # Runs a worker holds right now are skipped here; the worker sees the cancel when it claims.
        ids = list(
            ReplayRun.objects.select_for_update(skip_locked=True)
            .filter(job=job, status=ReplayRun.Status.PENDING)
            .values_list("id", flat=True)
        )
        ReplayRun.objects.filter(pk__in=ids).update(
            status=ReplayRun.Status.CANCELLED, finished_at=now, error="cancelled"
        )
    _job_refresh(job_id=job.pk)
    logger.info("replay.job_cancelled job_id=%s runs_cancelled=%s", job.pk, len(ids))
    job.refresh_from_db()
    return job


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
            logger.info(
                "replay.job_finished job_id=%s status=%s done=%s failed=%s",
                job.pk,
                job.status,
                job.n_done,
                job.n_failed,
            )
        job.save(update_fields=fields)


# --- execution ------------------------------------------------------------------
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
    """The request VARIANT sends: the saved blocks with its operations, the saved parameters."""
    snap = ingest_selectors.snapshot_ref_by_uuid(project=project, snapshot_id=variant.snapshot_uuid)
    if snap is None:
        raise VariantError("the snapshot of this variant is gone")
    blocks = ingest_selectors.snapshot_blocks(project_id=project.pk, snapshot_ref=snap.ref)
    return ablation.render_request(ablation.apply_operations(blocks, variant.operations), snap.params)


def _run_call(
    *, run: ReplayRun, job: ReplayJob, endpoint: ModelEndpoint, project: Project
) -> tuple[endpoints.CallResult, list[float] | None]:
    """The network part of a run, outside any transaction: the completion, then its embedding
    when the endpoint has an embeddings model (a failed embedding only loses the embedding)."""
    # Shape only: the address is checked where the connection is opened (core.net).
    url = endpoints.validate_base_url(
        endpoint.base_url, allow_private=project.allow_private_endpoints, resolve=False
    )
    request = replay_run_request(project=project, variant=run.variant)
    path, body = ablation.call_body(
        request=request,
        model=endpoint.model,
        mode=endpoint.mode,
        endpoint_params=endpoint.default_params,
        overrides=job.params,
    )
    api_key = _api_key(endpoint)
    result = endpoints.complete(
        base_url=url, path=path, body=body, api_key=api_key, timeout=endpoint.timeout_s,
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
    now = timezone.now()
    with transaction.atomic():
        run = (
            ReplayRun.objects.select_for_update(of=("self",))
            .select_related("job", "job__endpoint", "job__project", "variant")
            .filter(pk=run_id)
            .first()
        )
        if run is None:
            return RunOutcome("missing")
        if run.status in RUN_TERMINAL:
            return RunOutcome(f"already_{run.status}")
        job = run.job
        endpoint = job.endpoint
        if job.status == JobStatus.CANCELLED:
            run.status = ReplayRun.Status.CANCELLED
            run.error = "cancelled"
            run.finished_at = now
            run.lease_expires_at = None
            run.save(update_fields=["status", "error", "finished_at", "lease_expires_at"])
            transaction.on_commit(lambda: _job_refresh(job_id=job.pk))
            return RunOutcome("cancelled")
        if run.status == ReplayRun.Status.RUNNING:
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
                transaction.on_commit(lambda: _job_refresh(job_id=job.pk))
                return RunOutcome("failed")
            logger.warning("replay.run_lease_expired run_id=%s attempt=%s", run_id, run.attempts)
        if (
            run.status == ReplayRun.Status.PENDING
            and run.next_attempt_at
            and run.next_attempt_at > now + timedelta(seconds=1)
        ):
            return RunOutcome("not_yet", retry_in=(run.next_attempt_at - now).total_seconds())
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
        if job.status == JobStatus.PENDING:
            ReplayJob.objects.filter(pk=job.pk, status=JobStatus.PENDING).update(
                status=JobStatus.RUNNING, started_at=now
            )
    project = job.project
    result: endpoints.CallResult | None = None
    embedding: list[float] | None = None
    failure: endpoints.CallError | None = None
    try:
        with _LeaseKeeper(run_id=run_id, claim=claim):
            result, embedding = _run_call(run=run, job=job, endpoint=endpoint, project=project)
    except endpoints.CallError as exc:
        failure = exc
    except ReplayError as exc:
        failure = endpoints.CallError(exc.detail, transient=False)
    except SoftTimeLimitExceeded:
        # A repeat would hit the same limit: record it, so that the run ends with its reason.
        limit = float(settings.CTXOBS_REPLAY_TIME_LIMIT_S)
        failure = endpoints.CallError(f"took longer than the replay time limit ({limit:g}s)", transient=False)
    outcome = RunOutcome("done")
    with transaction.atomic():
        cur = ReplayRun.objects.select_for_update().get(pk=run_id)
        if cur.claim != claim or cur.status != ReplayRun.Status.RUNNING:
            logger.warning("replay.claim_lost run_id=%s", run_id)
            return RunOutcome("claim_lost")
        cur.claim = None
        cur.lease_expires_at = None
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
        elif failure is not None and failure.transient and cur.attempts < _max_attempts():
            delay = _backoff(cur.attempts, failure.retry_after)
            cur.status = ReplayRun.Status.PENDING
            cur.next_attempt_at = timezone.now() + timedelta(seconds=delay)
            # The retry's message waits on a worker until then; if that worker dies, the
            # reclaimer sends another once this lease has run out too.
            cur.lease_expires_at = cur.next_attempt_at + _lease()
            cur.error = f"retrying in {delay:.1f}s after: {failure.reason}"[:500]
            outcome = RunOutcome("retry", retry_in=delay)
        else:
            reason = failure.reason if failure else "unknown failure"
            if failure is not None and failure.transient:
                reason = f"{reason} (gave up after {cur.attempts} attempts)"
            cur.status = ReplayRun.Status.FAILED
            cur.error = reason[:500]
            outcome = RunOutcome("failed")
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
