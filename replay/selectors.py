"""Reads of the replay app: endpoints, jobs, and a job's results against its noise floor."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, cast

from django.db.models import QuerySet

from core.models import Project
from ingest import selectors as ingest_selectors
from ingest.types import SnapshotRef
from replay import ablation, diff
from replay.models import ModelEndpoint, ReplayJob, ReplayRun, ReplayVariant
from replay.types import JobResults, RunComparison, TurnResult, VariantResult, VariantSummary


def endpoints_list(*, project: Project) -> list[ModelEndpoint]:
    return list(ModelEndpoint.objects.filter(project=project).order_by("-is_default", "name"))


def endpoint_get(*, project: Project, endpoint_id: int) -> ModelEndpoint | None:
    return ModelEndpoint.objects.filter(project=project, pk=endpoint_id).first()


def endpoint_default(*, project: Project) -> ModelEndpoint | None:
    return ModelEndpoint.objects.filter(project=project, is_default=True).first()


def jobs_list(*, project: Project, limit: int = 100) -> QuerySet[ReplayJob]:
    return (
        ReplayJob.objects.filter(project=project)
        .select_related("endpoint")
        .order_by("-created_at", "-id")[:limit]
    )


def job_get(*, project: Project, job_id: int) -> ReplayJob | None:
    return ReplayJob.objects.select_related("endpoint").filter(project=project, pk=job_id).first()


def params_shown(params: dict[str, Any] | None) -> list[tuple[str, str]]:
    """A turn's saved parameters as (name, compact JSON) rows for a page (escaped there)."""
    rows = []
    for k, v in sorted((params or {}).items()):
        text = ablation.canonical_json(v)
        rows.append((k, text if len(text) <= 300 else text[:299] + "…"))
    return rows


def _usage(run: ReplayRun | None) -> dict[str, Any]:
    if run is None:
        return {}
    return {
        "prompt_tokens": run.prompt_tokens,
        "completion_tokens": run.completion_tokens,
        "latency_ms": run.latency_ms,
    }


def job_results(*, job: ReplayJob) -> JobResults:
    """Per turn: the baseline samples and their spread (the noise floor), and each variant's
    effect against it; plus the leave-one-out bars and the many-turn summary. Two queries."""
    variants = list(ReplayVariant.objects.filter(job=job).order_by("position"))
    runs = list(ReplayRun.objects.filter(job=job).order_by("variant_id", "sample"))
    by_variant: dict[int, list[ReplayRun]] = defaultdict(list)
    for r in runs:
        by_variant[r.variant_id].append(r)
    turns: dict[int, TurnResult] = {}
    for v in variants:
        t = turns.setdefault(
            v.snapshot_ref,
            {
                "snapshot_ref": v.snapshot_ref,
                "snapshot_uuid": v.snapshot_uuid,
                "session_id": v.session_id,
                "turn": v.turn,
                "baseline": None,
                "variants": [],
            },
        )
        entry: VariantResult = {"variant": v, "runs": by_variant.get(v.pk, [])}
        if v.is_baseline:
            t["baseline"] = entry
        else:
            t["variants"].append(entry)
    for t in turns.values():
        baseline = t["baseline"]
        base_runs = [r for r in (baseline["runs"] if baseline else []) if r.status == ReplayRun.Status.DONE]
        texts = [r.output_text for r in base_runs]
        t["noise"] = diff.noise_floor(texts)
        t["baseline_done"] = len(base_runs)
        t["baseline_runs"] = base_runs
        for e in t["variants"]:
            done = [r for r in e["runs"] if r.status == ReplayRun.Status.DONE]
            e["run"] = done[0] if done else (e["runs"][0] if e["runs"] else None)
            e["no_change"] = e["variant"].no_change
            if e["no_change"]:
                # Its request is the baseline's: nothing was sent, nothing can have changed.
                e["effect"] = None
                e["changed"] = False
                e["tool_calls_match"] = None
                e["prompt_tokens_delta"] = None
            elif done and base_runs:
                effect = e["effect"] = diff.effect(done[0].output_text, texts, t["noise"])
                match = diff.tool_calls_match(done[0].tool_calls, base_runs[0].tool_calls)
                e["tool_calls_match"] = match
                e["changed"] = not effect["within_noise"] or not match
                # Like with like: both counts are the replay model's (its usage for each call).
                e["prompt_tokens_delta"] = (
                    None
                    if done[0].prompt_tokens is None or base_runs[0].prompt_tokens is None
                    else done[0].prompt_tokens - base_runs[0].prompt_tokens
                )
            else:
                e["effect"] = None
                e["changed"] = None
                e["tool_calls_match"] = None
                e["prompt_tokens_delta"] = None
    ordered = sorted(turns.values(), key=lambda t: (t["session_id"], t["turn"]))
    summary: dict[str, VariantSummary] = {}
    for t in ordered:
        for e in t["variants"]:
            s = summary.setdefault(
                e["variant"].label,
                {"label": e["variant"].label, "turns": 0, "measured": 0, "changed": 0, "exact": 0},
            )
            s["turns"] += 1
            if e["changed"] is not None:
                s["measured"] += 1
                s["changed"] += int(bool(e["changed"]))
                measured = e.get("effect")
                s["exact"] += int(bool(measured and measured["exact_baseline"]))
    failures = [r for r in runs if r.status == ReplayRun.Status.FAILED]
    return {
        "turns": ordered,
        "summary": list(summary.values()),
        "failures": failures,
        "variants": variants,
        "runs": runs,
    }


def loo_figure(*, turn: TurnResult) -> dict[str, Any] | None:
    """A plotly bar per block (distance of the answer without it from the baseline) with the
    baseline's own spread as a band; None until something is measured."""
    bars = [(e["variant"].target_key, eff["distance"]) for e in turn["variants"] if (eff := e.get("effect"))]
    if not bars:
        return None
    import plotly.graph_objects as go

    noise = turn["noise"]
    keys = [k for k, _ in bars]
    fig = go.Figure()
    fig.add_bar(
        x=keys,
        y=[d for _, d in bars],
        name="distance from baseline",
        marker_color=["#c0392b" if d > noise["max"] + diff.NOISE_EPS else "#95a5a6" for _, d in bars],
    )
    fig.add_hrect(
        y0=0,
        y1=max(noise["max"], 0.002),
        fillcolor="#3498db",
        opacity=0.2,
        line_width=0,
        annotation_text=f"noise (max {noise['max']:.3f}, mean {noise['mean']:.3f})",
        annotation_position="top left",
    )
    fig.update_layout(
        yaxis={"title": "1 - word similarity", "range": [0, 1.05]},
        xaxis={"title": "block removed"},
        margin={"l": 50, "r": 20, "t": 30, "b": 50},
        height=360,
        showlegend=False,
    )
    return cast(dict[str, Any], fig.to_plotly_json())


def run_compare(*, job: ReplayJob, run: ReplayRun) -> RunComparison:
    """RUN beside the original answer and beside the first baseline sample of its turn."""
    variant = run.variant
    snap = ingest_selectors.snapshot_ref_by_uuid(project=job.project, snapshot_id=variant.snapshot_uuid)
    # For the page: a NUL or an unpaired surrogate of the saved answer shown visibly (UTF-8
    # cannot carry the second).
    original = snap.output_shown() if snap else {}
    baseline = (
        ReplayRun.objects.filter(
            job=job,
            variant__snapshot_ref=variant.snapshot_ref,
            variant__is_baseline=True,
            status=ReplayRun.Status.DONE,
        )
        .order_by("sample")
        .first()
    )
    orig_usage = {**(original.get("usage") or {}), "latency_ms": original.get("latency_ms")}
    # The original's prompt tokens are the agent's model's count, the replay's the replay
    # model's: different tokenizers, so the two counts are shown apart, never subtracted.
    orig_prompt_tokens = orig_usage.pop("prompt_tokens", None)
    vs_original = (
        diff.compare(
            a_text=original.get("text"),
            b_text=run.output_text,
            a_tool_calls=original.get("tool_calls"),
            b_tool_calls=run.tool_calls,
            a_usage=orig_usage,
            b_usage=_usage(run),
        )
        if original
        else None
    )
    if vs_original is not None:
        vs_original["prompt_tokens_a"] = orig_prompt_tokens
        vs_original["prompt_tokens_b"] = run.prompt_tokens
        vs_original["prompt_tokens_whose"] = ("the agent's model", "the replay model")
    vs_baseline = None
    if baseline is not None and baseline.pk != run.pk:
        vs_baseline = diff.compare(
            a_text=baseline.output_text,
            b_text=run.output_text,
            a_tool_calls=baseline.tool_calls,
            b_tool_calls=run.tool_calls,
            a_usage=_usage(baseline),
            b_usage=_usage(run),
            a_embedding=baseline.embedding,
            b_embedding=run.embedding,
        )
    return {
        "snapshot": snap,
        "original": original,
        "baseline": baseline,
        "vs_original": vs_original,
        "vs_baseline": vs_baseline,
        "variant": variant,
        "request_differences": request_differences(job=job, run=run, snapshot=snap),
    }


def request_differences(
    *, job: ReplayJob, run: ReplayRun, snapshot: SnapshotRef | None
) -> list[dict[str, str]] | None:
    """Every difference between the request RUN sent (stored on it) and the one the agent
    sent for the turn; None when the run has not sent one (yet)."""
    if snapshot is None or run.request_body is None:
        return None
    blocks = ingest_selectors.snapshot_blocks(project_id=job.project_id, snapshot_ref=snapshot.ref)
    original = ablation.render_request(blocks, snapshot.params)
    return ablation.request_differences(
        original=original,
        sent_path=run.request_path,
        sent_body=run.request_body,
        overrides=job.params,
        endpoint_params=job.endpoint.default_params,
        operations=run.variant.operations,
        mode_note=run.mode_note,
    )
