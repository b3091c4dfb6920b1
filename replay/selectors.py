"""Reads of the replay app: endpoints, jobs, and a job's results against its noise floor."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, cast

from django.db.models import QuerySet

from core.models import Project
from ingest import selectors as ingest_selectors
from ingest.types import SnapshotRef
from replay import ablation, attribution, diff, measures
from replay.errors import VariantError
from replay.models import ModelEndpoint, ReplayJob, ReplayRun, ReplayVariant
from replay.types import (
    AttributionResult,
    AttributionSource,
    JobResults,
    RunComparison,
    TurnResult,
    VariantResult,
    VariantSummary,
)


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


def job_results(*, job: ReplayJob, attribute: bool = True) -> JobResults:
    """Per turn: the baseline samples and their spread (the noise floor), and each variant's
    effect against it; plus the leave-one-out bars and the many-turn summary. Two queries; a
    leave-one-out's ranking one more (the blocks' kinds), an attribution job's fit one more (the
    blocks) unless ATTRIBUTE is False."""
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
    fixed: dict[int, set[str]] = {}
    if job.kind == ReplayJob.Kind.LEAVE_ONE_OUT and turns:
        outlines = ingest_selectors.snapshot_outlines(project_id=job.project_id, snapshot_refs=list(turns))
        fixed = {
            ref: {b["key"] for b in o.blocks if b["kind"] in attribution.FIXED_KINDS}
            for ref, o in outlines.items()
        }
    for ref, t in turns.items():
        t["fixed_keys"] = sorted(fixed.get(ref, ()))
        _measure_turn(t)
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
    if attribute and job.kind == ReplayJob.Kind.ATTRIBUTION:
        _attribute(job=job, turns=ordered)
    failures = [r for r in runs if r.status == ReplayRun.Status.FAILED]
    return {
        "turns": ordered,
        "summary": list(summary.values()),
        "failures": failures,
        "variants": variants,
        "runs": runs,
    }


def _ranked(t: TurnResult) -> list[VariantResult]:
    """The measured variants, largest effect first (replay.measures.rank_key). A leave-one-out
    keeps the system prompt and the question out of the ranking (attribution.FIXED_KINDS, as
    attribution does): without the question any answer moves, which says nothing about which
    block of the context the answer rests on. A turn with nothing else ranks every block."""
    measured = [e for e in t["variants"] if e.get("effect")]
    fixed = set(t.get("fixed_keys") or ())
    context = [e for e in measured if e["variant"].target_key not in fixed]
    return sorted(context or measured, key=lambda e: measures.rank_key(e.get("effect")), reverse=True)


def _measure_turn(t: TurnResult) -> None:
    """The turn's noise floor and each variant's effect against it: every answer of the variant
    against every baseline answer (replay.measures.effect), and the variants ranked (`_ranked`)."""
    baseline = t["baseline"]
    base_runs = [r for r in (baseline["runs"] if baseline else []) if r.status == ReplayRun.Status.DONE]
    texts = [r.output_text for r in base_runs]
    base_calls = [r.tool_calls for r in base_runs]
    base_embs = [r.embedding for r in base_runs]
    t["noise"] = measures.noise_floor(texts, tool_calls=base_calls, embeddings=base_embs)
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
            e["verdict"] = None
            e["verdict_words"] = None
            e["p"] = None
            e["tool_calls_match"] = None
            e["prompt_tokens_delta"] = None
        elif done and base_runs:
            run = done[0]
            effect = e["effect"] = measures.effect(
                run.output_text,
                texts,
                t["noise"],
                baseline_tool_calls=base_calls,
                baseline_embeddings=base_embs,
                texts=[r.output_text for r in done],
                variant_tool_calls=[r.tool_calls for r in done],
                variant_embeddings=[r.embedding for r in done],
                label=e["variant"].label,
            )
            match = diff.tool_calls_match(run.tool_calls, base_runs[0].tool_calls)
            e["tool_calls_match"] = match
            e["changed"] = not effect["within_noise"] or not match
            # A lost or changed tool call is one of the verdict's checks.
            e["verdict"] = effect["verdict"]
            e["verdict_words"] = effect["verdict_words"]
            e["p"] = effect["p"]
            # Like with like: both counts are the replay model's (its usage for each call).
            e["prompt_tokens_delta"] = (
                None
                if run.prompt_tokens is None or base_runs[0].prompt_tokens is None
                else run.prompt_tokens - base_runs[0].prompt_tokens
            )
        else:
            e["effect"] = None
            e["changed"] = None
            e["verdict"] = None
            e["verdict_words"] = None
            e["p"] = None
            e["tool_calls_match"] = None
            e["prompt_tokens_delta"] = None
    t["ranking"] = [e["variant"].target_key or e["variant"].label for e in _ranked(t)]


def _response(eff: dict[str, Any]) -> float:
    """An ablated answer's closeness to the baseline for the attribution surrogate."""
    return 1.0 - measures.combined_distance(eff)


def _attribute(*, job: ReplayJob, turns: list[TurnResult]) -> None:
    """Per turn of an attribution job: the surrogate fitted on its measured ablations
    (replay.attribution.fit), each source's score ranked, with the fit's R² and the noise band
    (the largest response difference between two baseline samples)."""
    block_key = job.spec.get("block") or None
    blocks_by_ref = ingest_selectors.snapshots_blocks(
        project_id=job.project_id, snapshot_refs=[t["snapshot_ref"] for t in turns]
    )
    for t in turns:
        blocks = blocks_by_ref.get(t["snapshot_ref"]) or []
        try:
            sources = ablation.attribution_sources(blocks, block_key)
        except VariantError:
            sources = []
        masks: list[list[bool]] = []
        responses: list[float] = []
        for e in t["variants"]:
            eff = e.get("effect")
            if eff and eff.get("distance") is not None:
                masks.append(attribution.mask_of(e["variant"].operations, sources, block_key))
                responses.append(_response(eff))
            elif e.get("no_change"):
                # An ablation whose request is the baseline's (nothing it removes reaches the
                # request) is not sent: its answer is the baseline's own.
                masks.append(attribution.mask_of(e["variant"].operations, sources, block_key))
                responses.append(1.0)
        texts = [r.output_text for r in t.get("baseline_runs", [])]
        calls = [r.tool_calls for r in t.get("baseline_runs", [])]
        band = 0.0
        for i, a in enumerate(texts):
            for j, b in enumerate(texts):
                if i != j:
                    eff = measures.effect(b, [a], {"samples": 1, "max": 0.0}, tool_calls=calls[j],
                                          baseline_tool_calls=[calls[i]])
                    band = max(band, 1.0 - _response(eff))
        positions = {b["key"]: b["position"] for b in blocks}
        block_position = positions.get(block_key) if block_key else None
        result: AttributionResult = {
            "level": "sentence" if block_key else "block",
            "block": block_key,
            "block_position": block_position,
            "planned": len(t["variants"]),
            "measured": len(masks),
            "samples": len(texts),
            "noise": band,
            "fit": None,
            "sources": [],
            "top": None,
            "top_alone": None,
        }
        if sources and len(masks) >= 2:
            fit = attribution.fit(masks, responses)
            result["fit"] = fit
            scored: list[AttributionSource] = [
                {
                    "index": i,
                    "key": s if not block_key else f"{block_key} #{i + 1}",
                    "text": s if block_key else "",
                    "position": positions.get(s) if not block_key else block_position,
                    "score": w,
                    "within_noise": abs(w) <= band + measures.NOISE_EPS,
                    "rank": 0,
                }
                for i, (s, w) in enumerate(zip(sources, fit["weights"], strict=True))
            ]
            scored.sort(key=lambda x: (-x["score"], x["index"]))
            for n, x in enumerate(scored):
                x["rank"] = n + 1
            result["sources"] = scored
            result["top"] = scored[0]["key"]
            result["top_alone"] = scored[0]["score"] > 0 and (
                len(scored) == 1 or scored[0]["score"] > scored[1]["score"] + measures.NOISE_EPS
            )
        t["attribution"] = result


def attribution_figure(*, turn: TurnResult, turn_url: str = "") -> dict[str, Any] | None:
    """A plotly horizontal bar per source (its surrogate score), highest first, with the noise
    band around zero; each bar's label links to the source's block on the turn page."""
    att = turn.get("attribution")
    if not att or not att["sources"]:
        return None
    import plotly.graph_objects as go
    from django.utils.html import escape

    band = att["noise"]
    shown = att["sources"][:30]
    labels = []
    for x in shown:
        name = x["key"] if not x["text"] else f"{x['key']}: {x['text'][:48]}"
        link = f"{turn_url}#block-{x['position']}" if turn_url and x["position"] is not None else ""
        labels.append(f'<a href="{escape(link)}">{escape(name)}</a>' if link else escape(name))
    fig = go.Figure()
    fig.add_bar(
        y=labels,
        x=[x["score"] for x in shown],
        orientation="h",
        name="attribution score",
        marker_color=["#c0392b" if not x["within_noise"] and x["score"] > 0 else "#95a5a6" for x in shown],
    )
    fig.add_vrect(
        x0=-max(band, 0.002),
        x1=max(band, 0.002),
        fillcolor="#3498db",
        opacity=0.2,
        line_width=0,
        annotation_text=f"noise ({att['samples']} samples, max {band:.3f})",
        annotation_position="top left",
    )
    fit = att["fit"] or {}
    r2 = fit.get("r2_holdout")
    r2_text = "–" if r2 is None else f"{r2:.2f}"
    fig.update_layout(
        xaxis={"title": "score: how much keeping the source keeps the answer (0-1)"},
        yaxis={"autorange": "reversed"},
        title={"text": f"fit R² on held-out ablations: {r2_text}", "font": {"size": 12}},
        margin={"l": 220, "r": 20, "t": 40, "b": 50},
        height=max(240, 28 * len(shown) + 100),
        showlegend=False,
    )
    return cast(dict[str, Any], fig.to_plotly_json())


def loo_figure(*, turn: TurnResult) -> dict[str, Any] | None:
    """A plotly bar per block (distance of the answer without it from the baseline) with the
    baseline's own spread as a band, red where the verdict is "changed"; None until something is
    measured."""
    ranked = _ranked(turn)
    shown = {id(e) for e in ranked}
    # The fixed blocks (the system prompt, the question) are shown after the ranked ones.
    effects = ranked + sorted(
        (e for e in turn["variants"] if e.get("effect") and id(e) not in shown),
        key=lambda e: measures.rank_key(e.get("effect")),
        reverse=True,
    )
    bars = [(e["variant"].target_key, float((e.get("effect") or {})["distance"])) for e in effects]
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
        marker_color=["#c0392b" if e.get("changed") else "#95a5a6" for e in effects],
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
        yaxis={"title": "edit distance from the baseline (characters and words)", "range": [0, 1.05]},
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
