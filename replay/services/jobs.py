"""Writes of replay jobs: plan one from a spec (the preview and its cost estimate, nothing
written), create it with its variants and runs, and cancel it."""

from __future__ import annotations

import logging
import math
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from core.models import Project
from ingest import selectors as ingest_selectors
from ingest.types import StoredBlock, TimelineRow
from replay import ablation, attribution, signals
from replay.errors import NotFound, PreconditionFailed, TurnGone, VariantError
from replay.models import (
    JOB_FINISHED,
    JobStatus,
    ModelEndpoint,
    QueuePriority,
    ReplayJob,
    ReplayRun,
    ReplayVariant,
)
from replay.services.runs import _enqueue, _job_refresh, _lease, reuse_key, run_call_plan
from replay.types import PlanEstimate, RemoveOp, ReplayJobSpec, SkippedTurn, TurnFilter

logger = logging.getLogger(__name__)

JOB_KINDS = ("plain", "without", "move", "loo", "batch", "custom", "attribution")
# Jobs that other apps plan over frozen contexts (replay_contexts_plan), not from a spec.
PLANNED_KINDS = ("experiment",)
MAX_SAMPLES = 10
MAX_SNAPSHOTS_PER_JOB = 200
MAX_RUNS_PER_JOB = 2000


@dataclass
class PlannedSnapshot:
    snapshot_ref: int
    snapshot_uuid: uuid.UUID
    session_id: str
    turn: int
    blocks: list[StoredBlock]
    plans: list[ablation.VariantPlan]
    params: dict[str, Any] = field(default_factory=dict)  # the turn's saved parameters
    # Per baseline sample: the id of an earlier run of the same call whose answer it takes
    # instead of calling the model (None: it calls).
    reuse: list[int | None] = field(default_factory=list)
    # The same for the other variants, by their index in `plans` (jobs that reuse every call).
    reuse_by_plan: dict[int, list[int | None]] = field(default_factory=dict)
    # A frozen context the variants render from instead of the stored turn (replay.ReplayContext).
    context_id: int | None = None

    def reused(self, index: int) -> list[int | None]:
        """Per sample of plan INDEX: the earlier run it takes the answer of, or None."""
        return self.reuse if index == 0 and self.plans[0].is_baseline else self.reuse_by_plan.get(index, [])


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
        calls = tokens = reused = 0
        for s in self.snapshots:
            e = ablation.estimate(s.plans, s.blocks)
            calls += e["model_calls"]
            tokens += e["prompt_tokens"]
            for i, p in enumerate(s.plans):
                n = sum(1 for r in s.reused(i) if r is not None)
                if n:
                    calls -= n
                    tokens -= n * ablation.context_tokens(ablation.apply_operations(s.blocks, p.operations))
                    reused += n
        return {
            "model_calls": calls,
            "prompt_tokens": tokens,
            "snapshots": len(self.snapshots),
            "variants": sum(len(s.plans) for s in self.snapshots),
            "skipped": len(self.skipped),
            "reused": reused,
            "no_change": sum(1 for s in self.snapshots for p in s.plans if p.no_change),
        }


def _overrides(params: Any) -> dict[str, Any]:
    """The job's parameter overrides, checked field by field (VariantError names the field)."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise VariantError("params must be an object")
    out: dict[str, Any] = {}
    for k, v in params.items():
        if v is None:
            continue
        if k not in ablation.OVERRIDE_PARAMS:
            raise VariantError(f"params.{k}: not an override; one of {', '.join(ablation.OVERRIDE_PARAMS)}")
        number = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        if k == "temperature" and not (number and 0 <= v <= 2):
            raise VariantError("params.temperature must be a number from 0 to 2")
        if k == "top_p" and not (number and 0 < v <= 1):
            raise VariantError("params.top_p must be a number above 0, at most 1")
        if k == "max_tokens" and not (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 100_000):
            raise VariantError("params.max_tokens must be a whole number from 1 to 100000")
        if k == "seed" and not (isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63):
            raise VariantError("params.seed must be a whole number")
        out[k] = v
    return out


def _reusable(
    *,
    project: Project,
    endpoint: ModelEndpoint,
    planned: list[PlannedSnapshot],
    overrides: dict[str, Any],
    every_variant: bool = False,
) -> None:
    """Per baseline sample of each planned turn (with EVERY_VARIANT, per sample of every
    variant), an earlier done run of the same call (same endpoint, model and request body) to
    take the answer of, each earlier run at most once per job; fills PlannedSnapshot.reuse and
    reuse_by_plan."""
    keys_by_unit: list[tuple[PlannedSnapshot, int, list[str]]] = []
    for s in planned:
        for j, p in enumerate(s.plans):
            if not p.samples or (j > 0 and not every_variant) or (j == 0 and not p.is_baseline):
                continue
            request = ablation.render_variant(s.blocks, p.operations, s.params)
            keys = []
            for i in range(p.samples):
                call = run_call_plan(
                    request=request, overrides=overrides, endpoint=endpoint, is_baseline=p.is_baseline,
                    sample=i,
                )
                keys.append(reuse_key(endpoint=endpoint, call=call))
            keys_by_unit.append((s, j, keys))
    wanted = {k for _, _, keys in keys_by_unit for k in keys}
    available: dict[str, list[int]] = {}
    for run_id, key in (
        ReplayRun.objects.filter(
            job__project=project,
            request_key__in=wanted,
            status=ReplayRun.Status.DONE,
            reused_from__isnull=True,
        )
        .order_by("id")
        .values_list("id", "request_key")
    ):
        available.setdefault(key, []).append(run_id)
    for s, j, keys in keys_by_unit:
        found = [available[k].pop(0) if available.get(k) else None for k in keys]
        if j == 0:
            s.reuse = found
        else:
            s.reuse_by_plan[j] = found


def _turn_matches(row: TimelineRow, flt: TurnFilter) -> bool:
    if flt.get("min_watermark") is not None and row["watermark"] < float(flt["min_watermark"]):
        return False
    if flt.get("tier") and row["tier"] != flt["tier"]:
        return False
    if flt.get("turn_from") is not None and row["turn"] < int(flt["turn_from"]):
        return False
    return not (flt.get("turn_to") is not None and row["turn"] > int(flt["turn_to"]))


def _target_snapshots(*, project: Project, spec: ReplayJobSpec) -> list[tuple[int, uuid.UUID, str, int]]:
    """(snapshot_ref, uuid, session_id, turn) of the turns SPEC names, in session/turn order."""
    if spec.get("snapshot_id"):
        snap = ingest_selectors.snapshot_ref_by_uuid(project=project, snapshot_id=spec["snapshot_id"])
        if snap is None:
            raise TurnGone("snapshot", project.retention_days)
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
            expired = ingest_selectors.session_expired(project=project, session_id=str(spec["session_id"]))
            raise TurnGone("session", project.retention_days, expired=expired)
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


def replay_job_plan(
    *, project: Project, spec: ReplayJobSpec, endpoint: ModelEndpoint | None = None
) -> JobPlan:
    """What a job for SPEC would run, without writing anything: per turn, the variants and
    their samples (see ablation.plan_variants), and the turns skipped because the variant
    does not apply to them (e.g. they have no such block). With ENDPOINT, the baseline samples
    that earlier runs of the same call answer already (PlannedSnapshot.reuse). Every field of
    SPEC is checked here: one built from a form or from JSON may not hold to its types."""
    if not isinstance(spec, dict):
        raise VariantError("the job spec must be an object")
    kind = spec.get("kind") or "plain"
    if kind not in JOB_KINDS:
        raise VariantError(f"kind must be one of {', '.join(JOB_KINDS)}")
    samples = spec.get("samples", 3)
    if not isinstance(samples, int) or isinstance(samples, bool) or not 1 <= samples <= MAX_SAMPLES:
        raise VariantError(f"samples must be an integer from 1 to {MAX_SAMPLES}")
    params = _overrides(spec.get("params"))
    operations = spec.get("operations")
    if operations is not None and not isinstance(operations, list):
        raise VariantError("operations must be a list")
    block_key = spec.get("block")
    ablations, seed = _attribution_spec(spec) if kind == "attribution" else (0, 0)
    if kind in ("without", "move") and not block_key:
        raise VariantError(f"a {kind} job needs 'block': the key of the block")
    if kind == "batch" and not operations and block_key:
        operations = [RemoveOp(op="remove", key=block_key)]
    targets = _target_snapshots(project=project, spec=spec)
    if kind != "batch" and len(targets) > 1 and not spec.get("snapshot_id"):
        kind = "batch" if (operations or block_key) else kind
    refs = [t[0] for t in targets]
    blocks_by_ref = ingest_selectors.snapshots_blocks(project_id=project.pk, snapshot_refs=refs)
    params_by_ref = ingest_selectors.snapshots_params(project_id=project.pk, snapshot_refs=refs)
    planned: list[PlannedSnapshot] = []
    skipped: list[SkippedTurn] = []
    for ref, sid, session_id, turn in targets:
        blocks = blocks_by_ref.get(ref) or []
        saved_params = dict(params_by_ref.get(ref, {}))
        vkind = "custom" if kind == "batch" else kind
        if vkind == "custom" and not operations and block_key:
            operations = [RemoveOp(op="remove", key=block_key)]
        try:
            plans = ablation.plan_variants(
                kind=vkind,
                blocks=blocks,
                samples=samples,
                block_key=block_key,
                to=spec.get("to"),
                anchor=spec.get("anchor"),
                operations=operations,
                params=saved_params,
                **({"ablations": ablations, "seed": seed} if kind == "attribution" else {}),
            )
        except VariantError as exc:
            if len(targets) == 1:
                raise
            skipped.append(
                {"snapshot_id": str(sid), "session_id": session_id, "turn": turn, "reason": exc.detail}
            )
            continue
        planned.append(PlannedSnapshot(ref, sid, session_id, turn, blocks, plans, saved_params))
    if not planned:
        raise VariantError("the variant applies to none of the selected turns")
    if endpoint is not None:
        _reusable(project=project, endpoint=endpoint, planned=planned, overrides=params)
    runs = sum(p.samples for s in planned for p in s.plans)
    if runs > MAX_RUNS_PER_JOB:
        raise VariantError(f"this job would make {runs} model calls; at most {MAX_RUNS_PER_JOB} per job")
    title = spec.get("title") or _title(kind, planned)
    return JobPlan(
        kind=kind, title=title[:300], samples=samples, params=params, snapshots=planned, skipped=skipped
    )


def _attribution_spec(spec: ReplayJobSpec) -> tuple[int, int]:
    """(ablations, seed) of an attribution job's spec, with their defaults."""
    ablations = spec.get("ablations", attribution.DEFAULT_ABLATIONS)
    if not isinstance(ablations, int) or isinstance(ablations, bool):
        raise VariantError("ablations must be an integer")
    seed = spec.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**31:
        raise VariantError("seed must be an integer from 0 to 2147483647")
    return ablations, seed


def _title(kind: str, planned: list[PlannedSnapshot]) -> str:
    first = planned[0]
    where = f"{first.session_id} turn {first.turn}" if len(planned) == 1 else f"{len(planned)} turns"
    variant = next((p.label for p in first.plans if not p.is_baseline), "replay")
    if kind == "loo":
        variant = "leave-one-out"
    if kind == "attribution":
        block = next((p.target_key for p in first.plans if p.target_key), "")
        variant = f"attribution over the sentences of {block}" if block else "attribution"
    return f"{variant} — {where}"


def replay_job_create(
    *,
    project: Project,
    spec: ReplayJobSpec,
    endpoint: ModelEndpoint | None = None,
    user: Any = None,
    priority: QueuePriority = QueuePriority.PERSON,
) -> ReplayJob:
    """Plan SPEC, store the job with its variants and one pending run per (variant, sample),
    and enqueue one task per run once the transaction commits, at PRIORITY in the replay queue."""
    endpoint = endpoint or ModelEndpoint.objects.filter(project=project, is_default=True).first()
    if endpoint is not None and endpoint.project_id != project.pk:
        raise NotFound("no such endpoint in this project")
    plan = replay_job_plan(project=project, spec=spec, endpoint=endpoint)
    if endpoint is None:
        raise PreconditionFailed("this project has no model endpoint; add one first (project settings, "
                                 "Model endpoints)")
    stored = spec.copy()
    stored["skipped"] = plan.skipped
    return replay_job_store(project=project, endpoint=endpoint, plan=plan, spec=stored, user=user,
                            priority=priority)


def replay_contexts_plan(
    *,
    project: Project,
    endpoint: ModelEndpoint,
    kind: str,
    title: str,
    samples: int,
    params: dict[str, Any] | None,
    snapshots: list[PlannedSnapshot],
    skipped: list[SkippedTurn] | None = None,
) -> JobPlan:
    """A job's plan over frozen contexts whose variants the caller chose (an experiment's items):
    every call that an earlier run of the project already made with the same request takes
    that run's answer (reuse across jobs: a control or a strategy run again pays nothing twice)."""
    if not 1 <= samples <= MAX_SAMPLES:
        raise VariantError(f"samples must be an integer from 1 to {MAX_SAMPLES}")
    overrides = _overrides(params)
    if not snapshots:
        raise VariantError("nothing to run: no item has a variant to replay")
    _reusable(project=project, endpoint=endpoint, planned=snapshots, overrides=overrides, every_variant=True)
    runs = sum(p.samples for s in snapshots for p in s.plans)
    limit = MAX_RUNS_PER_JOB * 10
    if runs > limit:
        raise VariantError(f"this would make {runs} model calls; at most {limit} per run")
    return JobPlan(
        kind=kind, title=title[:300], samples=samples, params=overrides, snapshots=snapshots,
        skipped=list(skipped or []),
    )


def replay_job_store(
    *, project: Project, endpoint: ModelEndpoint, plan: JobPlan, spec: ReplayJobSpec, user: Any = None,
    priority: QueuePriority = QueuePriority.PERSON,
) -> ReplayJob:
    """Store PLAN as a job with its variants and one run per (variant, sample): a run that an
    earlier call answers (PlannedSnapshot.reused) is done at once with that answer, the others
    are pending and enqueued once the transaction commits, at PRIORITY in the replay queue."""
    with transaction.atomic():
        job = ReplayJob.objects.create(
            project=project,
            endpoint=endpoint,
            created_by=user if getattr(user, "pk", None) else None,
            kind=plan.kind,
            title=plan.title,
            spec=spec,
            params=plan.params,
            samples=plan.samples,
            estimate=plan.estimate,
            priority=priority,
        )
        variants: list[ReplayVariant] = []
        reuse_of: list[list[int | None]] = []
        pos = 0
        for s in plan.snapshots:
            for j, p in enumerate(s.plans):
                v = ReplayVariant(
                    job=job,
                    position=pos,
                    snapshot_ref=s.snapshot_ref,
                    snapshot_uuid=s.snapshot_uuid,
                    session_id=s.session_id[:256],
                    turn=s.turn,
                    label=p.label[:300],
                    operations=p.operations,
                    is_baseline=p.is_baseline,
                    target_key=p.target_key[:128],
                    samples=p.samples,
                    no_change=p.no_change,
                    context_id=s.context_id,
                    prompt_tokens_est=ablation.context_tokens(
                        ablation.apply_operations(s.blocks, p.operations)
                    ),
                )
                variants.append(v)
                reuse_of.append(s.reused(j))
                pos += 1
        ReplayVariant.objects.bulk_create(variants)
        # Queued messages wait safely in Redis, however long the queue; the lease only says when
        # the reclaimer may start asking whether this run's message was lost (see replay_runs_reclaim).
        now = timezone.now()
        lease_end = now + _lease()
        sources = {
            r.pk: r
            for r in ReplayRun.objects.filter(
                pk__in=[i for ids in reuse_of for i in ids if i is not None],
                status=ReplayRun.Status.DONE,
            )
        }
        new_runs: list[ReplayRun] = []
        for v, reused in zip(variants, reuse_of, strict=True):
            for i in range(v.samples):
                src_id = reused[i] if i < len(reused) else None
                src = sources.get(src_id) if src_id is not None else None
                if src is None:
                    new_runs.append(ReplayRun(job=job, variant=v, sample=i, lease_expires_at=lease_end))
                    continue
                # The same call answered already: its answer, no model call.
                new_runs.append(
                    ReplayRun(
                        job=job, variant=v, sample=i, status=ReplayRun.Status.DONE, reused_from=src,
                        output_text=src.output_text, tool_calls=src.tool_calls,
                        finish_reason=src.finish_reason, prompt_tokens=src.prompt_tokens,
                        completion_tokens=src.completion_tokens, latency_ms=src.latency_ms,
                        embedding=src.embedding, request_path=src.request_path,
                        request_body=src.request_body, api_mode=src.api_mode, mode_note=src.mode_note,
                        request_key=src.request_key, finished_at=now, work_ms=0.0,
                    )
                )
        runs = ReplayRun.objects.bulk_create(new_runs)
        job.n_runs = len(runs)
        job.save(update_fields=["n_runs"])
        run_ids = [r.pk for r in runs if r.status == ReplayRun.Status.PENDING]
        if len(run_ids) < len(runs) or not runs:
            # Reused samples are done already; a job with nothing left to call ends here.
            transaction.on_commit(lambda: _job_refresh(job_id=job.pk))
        transaction.on_commit(lambda: _enqueue(run_ids, priority))
    logger.info(
        "replay.job_created job_id=%s project_id=%s kind=%s runs=%s",
        job.pk,
        project.pk,
        job.kind,
        len(run_ids),
    )
    return job


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
    signals.job_finished.send(sender=ReplayJob, job_id=job.pk, status=JobStatus.CANCELLED)
    logger.info("replay.job_cancelled job_id=%s runs_cancelled=%s", job.pk, len(ids))
    job.refresh_from_db()
    return job
