"""Writes of replay jobs: plan one from a spec (the preview and its cost estimate, nothing
written), create it with its variants and runs, and cancel it."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from core.models import Project
from ingest import selectors as ingest_selectors
from ingest.types import StoredBlock, TimelineRow
from replay import ablation, attribution
from replay.errors import EndpointError, NotFound, VariantError
from replay.models import JOB_FINISHED, JobStatus, ModelEndpoint, ReplayJob, ReplayRun, ReplayVariant
from replay.services.runs import _enqueue, _job_refresh, _lease
from replay.types import PlanEstimate, SkippedTurn

logger = logging.getLogger(__name__)

JOB_KINDS = ("plain", "without", "move", "loo", "batch", "custom", "attribution")
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
    ablations, seed = _attribution_spec(spec) if kind == "attribution" else (0, 0)
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
                **({"ablations": ablations, "seed": seed} if kind == "attribution" else {}),
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


def _attribution_spec(spec: dict[str, Any]) -> tuple[int, int]:
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
