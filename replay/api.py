"""Replay API: preview, start, read and cancel jobs. Thin handlers over services/selectors."""

from __future__ import annotations

import uuid
from typing import Any, cast

from django.http import HttpRequest
from django.urls import reverse
from ninja import Router, Status

from core.auth import Caller, ProjectReadAuth, request_caller
from core.models import SCOPE_REPLAY
from core.schemas import Detail
from ingest import selectors as ingest_selectors
from replay import selectors
from replay.errors import NotFound
from replay.models import QueuePriority, ReplayJob, ReplayRun, Triage
from replay.schemas import JobOut, PreviewOut, ReplayIn, TriageOut
from replay.services import jobs, triage
from replay.types import ReplayJobSpec

router = Router(tags=["replays"])


# Starting and cancelling replays spends (or stops spending) the model provider's budget: a key
# needs the replay scope, which agents' ingest keys do not have.
REPLAY_AUTH = ProjectReadAuth("editor", key_scope=SCOPE_REPLAY)


def _spec(payload: ReplayIn) -> ReplayJobSpec:
    spec = payload.dict(exclude_none=True, exclude={"endpoint_id"})
    if "operations" in spec:
        spec["operations"] = [{k: v for k, v in op.items() if v is not None} for op in spec["operations"]]
    if "filter" in spec:
        spec["filter"] = {k: v for k, v in spec["filter"].items() if v is not None}
    if "params" in spec:
        spec["params"] = {k: v for k, v in spec["params"].items() if v is not None}
    # ReplayIn's fields are the spec's; replay_job_plan checks the operations themselves.
    return cast(ReplayJobSpec, spec)


def _endpoint(caller: Caller, endpoint_id: int | None) -> Any:
    if endpoint_id is None:
        return None
    ep = selectors.endpoint_get(project=caller.project, endpoint_id=endpoint_id)
    if ep is None:
        raise NotFound("no such endpoint in this project")
    return ep


def _run_out(r: ReplayRun) -> dict[str, Any]:
    return {
        "id": r.pk,
        "sample": r.sample,
        "status": r.status,
        "attempts": r.attempts,
        "error": r.error,
        "output_text": r.output_text,
        "tool_calls": r.tool_calls,
        "finish_reason": r.finish_reason,
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "latency_ms": r.latency_ms,
        "api_mode": r.api_mode,
        "mode_note": r.mode_note,
        "request_path": r.request_path,
        "reused_from": r.reused_from_id,
    }


def _attribution_out(att: Any) -> dict[str, Any] | None:
    if not att:
        return None
    fit = att["fit"] or {}
    return {
        **{
            k: att[k]
            for k in ("level", "block", "planned", "measured", "samples", "noise", "top", "top_alone")
        },
        "r2_holdout": fit.get("r2_holdout"),
        "r2_train": fit.get("r2_train"),
        "sources": att["sources"],
    }


def _job_out(job: ReplayJob, *, full: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": job.pk,
        "kind": job.kind,
        "title": job.title,
        "status": job.status,
        "endpoint": job.endpoint.name,
        "samples": job.samples,
        "estimate": job.estimate,
        "n_runs": job.n_runs,
        "n_done": job.n_done,
        "n_failed": job.n_failed,
        "n_cancelled": job.n_cancelled,
        "priority": QueuePriority(job.priority).name.lower(),
        "progress": job.progress,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "url": reverse("replay:detail", kwargs={"project_id": job.project_id, "job_id": job.pk}),
    }
    if full:
        res = selectors.job_results(job=job)
        turns = []
        for t in res["turns"]:
            variants = []
            entries = ([t["baseline"]] if t["baseline"] else []) + t["variants"]
            for e in entries:
                v = e["variant"]
                variants.append(
                    {
                        "id": v.pk,
                        "snapshot_id": str(v.snapshot_uuid),
                        "session_id": v.session_id,
                        "turn": v.turn,
                        "label": v.label,
                        "operations": v.operations,
                        "is_baseline": v.is_baseline,
                        "target_key": v.target_key,
                        "runs": [_run_out(r) for r in e["runs"]],
                        "effect": e.get("effect"),
                        "changed": e.get("changed"),
                        "verdict": e.get("verdict"),
                        "verdict_words": e.get("verdict_words"),
                        "p": e.get("p"),
                        "tool_calls_match": e.get("tool_calls_match"),
                        "prompt_tokens_delta": e.get("prompt_tokens_delta"),
                        "no_change": bool(e.get("no_change")),
                    }
                )
            turns.append(
                {
                    "snapshot_id": str(t["snapshot_uuid"]),
                    "session_id": t["session_id"],
                    "turn": t["turn"],
                    "noise": t["noise"],
                    "ranking": t.get("ranking", []),
                    "attribution": _attribution_out(t.get("attribution")),
                    "variants": variants,
                }
            )
        out["turns"] = turns
        out["summary"] = res["summary"]
    return out


@router.post(
    "/replays/preview",
    auth=ProjectReadAuth("editor"),
    response={200: PreviewOut, 400: Detail, 401: Detail, 403: Detail, 404: Detail},
    summary="What a replay job would run and cost, without starting it",
)
def replay_preview(request: HttpRequest, payload: ReplayIn) -> dict[str, Any]:
    caller = request_caller(request)
    endpoint = _endpoint(caller, payload.endpoint_id) or selectors.endpoint_default(project=caller.project)
    plan = jobs.replay_job_plan(project=caller.project, spec=_spec(payload), endpoint=endpoint)
    return {
        "kind": plan.kind,
        "title": plan.title,
        "estimate": plan.estimate,
        "skipped": plan.skipped,
        "variants": [
            {
                "snapshot_id": str(s.snapshot_uuid),
                "session_id": s.session_id,
                "turn": s.turn,
                "label": p.label,
                "operations": p.operations,
                "is_baseline": p.is_baseline,
                "samples": p.samples,
                "no_change": p.no_change,
            }
            for s in plan.snapshots
            for p in s.plans
        ],
    }


@router.post(
    "/replays",
    auth=REPLAY_AUTH,
    response={201: JobOut, 400: Detail, 401: Detail, 403: Detail, 404: Detail, 409: Detail},
    summary="Start a replay job (one model call per variant and sample)",
    openapi_extra={"responses": {409: {
        "description": "the project is not ready for it: it has no model endpoint (the detail says what "
                       "to do first)"}}},
)
def replay_create(request: HttpRequest, payload: ReplayIn) -> Status[Any]:
    caller = request_caller(request)
    job = jobs.replay_job_create(
        project=caller.project,
        spec=_spec(payload),
        endpoint=_endpoint(caller, payload.endpoint_id),
        user=caller.membership.user if caller.membership else None,
    )
    return Status(201, _job_out(job, full=False))


@router.get(
    "/replays/{job_id}",
    auth=ProjectReadAuth("viewer"),
    response={200: JobOut, 401: Detail, 404: Detail},
    summary="A replay job: progress, runs, and each variant's effect against the noise floor",
)
def replay_get(request: HttpRequest, job_id: int) -> dict[str, Any]:
    caller = request_caller(request)
    job = selectors.job_get(project=caller.project, job_id=job_id)
    if job is None:
        raise NotFound("no such replay job")
    return _job_out(job, full=True)


@router.post(
    "/replays/{job_id}/cancel",
    auth=REPLAY_AUTH,
    response={200: JobOut, 401: Detail, 403: Detail, 404: Detail},
    summary="Cancel a replay job",
)
def replay_cancel(request: HttpRequest, job_id: int) -> dict[str, Any]:
    caller = request_caller(request)
    job = selectors.job_get(project=caller.project, job_id=job_id)
    if job is None:
        raise NotFound("no such replay job")
    return _job_out(jobs.replay_job_cancel(job=job), full=False)


def _triage_out(t: Triage) -> dict[str, Any]:
    return {**triage.triage_out(t), "calls_made": triage.triage_calls_made(triage_row=t)}


@router.get(
    "/triage",
    auth=ProjectReadAuth("viewer"),
    response={200: TriageOut, 401: Detail, 404: Detail},
    summary="The auto-triage of one turn (by its snapshot_id)",
)
def triage_of_turn(request: HttpRequest, snapshot_id: uuid.UUID) -> dict[str, Any]:
    caller = request_caller(request)
    snap = ingest_selectors.snapshot_ref_by_uuid(project=caller.project, snapshot_id=snapshot_id)
    t = triage.triage_for_turn(project_id=caller.project.pk, snapshot_ref=snap.ref) if snap else None
    if t is None:
        raise NotFound("this turn has no triage")
    return _triage_out(t)


@router.get(
    "/triage/{triage_id}",
    auth=ProjectReadAuth("viewer"),
    response={200: TriageOut, 401: Detail, 404: Detail},
    summary="An auto-triage: state, verdict, cost",
)
def triage_get(request: HttpRequest, triage_id: int) -> dict[str, Any]:
    caller = request_caller(request)
    t = triage.triage_get(project=caller.project, triage_id=triage_id)
    if t is None:
        raise NotFound("no such triage")
    return _triage_out(t)


@router.post(
    "/triage/{triage_id}/cancel",
    auth=REPLAY_AUTH,
    response={200: TriageOut, 401: Detail, 403: Detail, 404: Detail},
    summary="Cancel an auto-triage and its replay job",
)
def triage_cancel(request: HttpRequest, triage_id: int) -> dict[str, Any]:
    caller = request_caller(request)
    t = triage.triage_get(project=caller.project, triage_id=triage_id)
    if t is None:
        raise NotFound("no such triage")
    triage.triage_cancel(triage_row=t)
    return _triage_out(triage.triage_get(project=caller.project, triage_id=triage_id) or t)
