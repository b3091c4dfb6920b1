"""Reads of the experiments app: sets, versions and items, strategies, experiments and their
figures, comparisons of experiments on one set version, sweeps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from django.db.models import QuerySet

from core.models import Project
from experiments import checks as checks_mod
from experiments import metrics, stats
from experiments.errors import Conflict, ExperimentError, NotFound
from experiments.models import (
    CheckResult,
    Comparison,
    EvalItem,
    EvalSet,
    EvalSetVersion,
    Experiment,
    ExperimentItem,
    Strategy,
    StrategyVersion,
    Sweep,
)
from experiments.services.runs import arm_side, experiment_finalize

MAX_COMPARED = 6


def sets_list(*, project: Project) -> QuerySet[EvalSet]:
    return EvalSet.objects.filter(project=project).order_by("name")


def set_get(*, project: Project, set_id: int) -> EvalSet | None:
    return EvalSet.objects.filter(project=project, pk=set_id).first()


def set_by_name(*, project: Project, name: str) -> EvalSet | None:
    return EvalSet.objects.filter(project=project, name=name).first()


def version_get(*, eval_set: EvalSet, number: int | None = None) -> EvalSetVersion | None:
    qs = eval_set.versions.all()
    if number is not None:
        return qs.filter(number=number).first()
    return qs.order_by("-number").first()


def version_items(*, version: EvalSetVersion) -> list[EvalItem]:
    return list(version.items.select_related("context").order_by("position"))


def strategies_list(*, project: Project) -> list[Strategy]:
    return list(Strategy.objects.filter(project=project).prefetch_related("versions").order_by("name"))


def strategy_get(*, project: Project, strategy_id: int) -> Strategy | None:
    return Strategy.objects.filter(project=project, pk=strategy_id).first()


def strategy_by_name(*, project: Project, name: str) -> Strategy | None:
    return Strategy.objects.filter(project=project, name=name).first()


def strategy_version_get(*, strategy: Strategy, number: int | None = None) -> StrategyVersion | None:
    qs = strategy.versions.all()
    return qs.filter(number=number).first() if number is not None else qs.order_by("-number").first()


def experiments_list(
    *, project: Project, set_version: EvalSetVersion | None = None, limit: int = 200
) -> list[Experiment]:
    qs = Experiment.objects.filter(project=project).select_related(
        "set_version",
        "set_version__eval_set",
        "strategy_version",
        "strategy_version__strategy",
        "endpoint",
        "job",
    )
    if set_version is not None:
        qs = qs.filter(set_version=set_version)
    return list(qs.order_by("-created_at", "-id")[:limit])


def experiment_get(*, project: Project, experiment_id: int) -> Experiment | None:
    exp = (
        Experiment.objects.filter(project=project, pk=experiment_id)
        .select_related(
            "set_version",
            "set_version__eval_set",
            "strategy_version",
            "strategy_version__strategy",
            "endpoint",
            "job",
        )
        .first()
    )
    if exp is not None and exp.summary is None and exp.job is not None and exp.job.finished:
        # The task that evaluates it may not have run yet (or its message was lost): do it here.
        experiment_finalize(experiment_id=exp.pk)
        exp.refresh_from_db()
    return exp


def experiment_progress(exp: Experiment) -> dict[str, Any]:
    job = exp.job
    if job is None:
        prepared = ExperimentItem.objects.filter(experiment=exp).exclude(operations=[]).count()
        return {"runs": 0, "done": 0, "failed": 0, "progress": 0.0, "phase": exp.status, "prepared": prepared}
    return {
        "runs": job.n_runs,
        "done": job.n_done,
        "failed": job.n_failed,
        "progress": job.progress,
        "phase": exp.status,
        "reused": (job.estimate or {}).get("reused", 0),
        "model_calls": (job.estimate or {}).get("model_calls", 0),
    }


def experiment_items(*, exp: Experiment) -> list[dict[str, Any]]:
    """Per item: its figures on both arms (from the summary) and what the strategy did."""
    summary = exp.summary or {}
    entries = summary.get("items") or {}
    comparison = summary.get("vs_control") or {}
    flipped = {f["item"]: f for f in comparison.get("flipped") or []}
    out = []
    for key, e in sorted(entries.items(), key=lambda kv: kv[1].get("position", 0)):
        c, s = e.get("control"), e.get("strategy")
        out.append(
            {
                **e,
                "control_pass": metrics.majority_pass(c),
                "strategy_pass": metrics.majority_pass(s),
                "control_facts": metrics.item_value(c, "fact_fidelity"),
                "strategy_facts": metrics.item_value(s, "fact_fidelity"),
                "flip": flipped.get(key),
            }
        )
    return out


def item_results(*, exp: Experiment, item_id: int) -> list[CheckResult]:
    return list(
        CheckResult.objects.filter(experiment=exp, item_id=item_id).order_by("arm", "sample", "check_id")
    )


def compare(*, project: Project, experiment_ids: Sequence[int]) -> dict[str, Any]:
    """Experiments on one set version side by side: each against the first, metric by metric."""
    ids = [int(i) for i in experiment_ids]
    if len(ids) < 2:
        raise ExperimentError("choose at least two experiments to compare")
    if len(ids) > MAX_COMPARED:
        raise ExperimentError(f"at most {MAX_COMPARED} experiments at once")
    found = {
        e.pk: e
        for e in Experiment.objects.filter(project=project, pk__in=ids).select_related(
            "set_version",
            "set_version__eval_set",
            "strategy_version",
            "strategy_version__strategy",
            "endpoint",
        )
    }
    missing = [i for i in ids if i not in found]
    if missing:
        raise NotFound(f"no experiment {missing[0]} in this project")
    exps = [found[i] for i in ids]
    versions = {e.set_version_id for e in exps}
    if len(versions) > 1:
        raise Conflict("experiments compare only on the same set version; these ran on different ones")
    for e in exps:
        if e.summary is None and e.job_id is not None and e.job is not None and e.job.finished:
            experiment_finalize(experiment_id=e.pk)
            e.refresh_from_db()
    not_done = [e.pk for e in exps if e.summary is None]
    if not_done:
        raise Conflict(f"experiment {not_done[0]} has no results yet")
    base = exps[0]
    kept = {c.b_id: c.result for c in Comparison.objects.filter(a=base, b__in=[e.pk for e in exps[1:]])}
    rows = []
    labels = check_labels(base.set_version)
    for e in exps[1:]:
        result = kept.get(e.pk)
        if result is None:
            result = metrics.compare(arm_side(base), arm_side(e))
            Comparison.objects.bulk_create([Comparison(a=base, b=e, result=result)], ignore_conflicts=True)
        # The facts each flipped item lost or gained, named as the set's page names its checks.
        flipped = [
            {**f, **{side: [labels.get(c, c) for c in f[side]] for side in ("lost", "gained")}}
            for f in result.get("flipped") or []
        ]
        rows.append({"experiment": e, "comparison": result, "flipped": flipped})
    return {"experiments": exps, "base": exps[0], "rows": rows, "set_version": exps[0].set_version}


def compare_pending(*, project: Project, experiment_ids: Sequence[int]) -> list[dict[str, Any]]:
    """The experiments of a comparison that have no figures yet, each with its progress (one
    query), for the page that waits for them."""
    ids = list(experiment_ids)[:MAX_COMPARED]
    exps = (
        Experiment.objects.filter(project=project, pk__in=ids, summary__isnull=True)
        .select_related("strategy_version", "strategy_version__strategy", "job")
        .order_by("pk")
    )
    return [{"exp": e, "progress": experiment_progress(e)} for e in exps]


def check_labels(version: EvalSetVersion) -> dict[str, str]:
    """Check id -> the one line that says what it wants ('states "Guangzhou"'), for every check of
    VERSION: its set-level checks and its items' own."""
    out: dict[str, str] = {}
    for group in [version.checks, *version.items.values_list("checks", flat=True)]:
        for c in group or []:
            if isinstance(c, dict) and "id" in c:
                out.setdefault(str(c["id"]), checks_mod.describe(c))
    return out


def sweep_curve(*, sweep: Sweep) -> dict[str, Any]:
    """The sweep's points (compression ratio, fact fidelity) by value, and the knee."""
    points: list[dict[str, Any]] = []
    ready: list[tuple[float, float]] = []
    for e in sweep.experiments.order_by("id"):
        comp = (e.summary or {}).get("vs_control") or {}
        ms = {m["name"]: m for m in comp.get("metrics") or []}
        ratio = ((ms.get("compression_ratio") or {}).get("b") or {}).get("mean")
        fid = ((ms.get("fact_fidelity") or {}).get("b") or {}).get("mean")
        points.append(
            {"experiment": e, "value": e.sweep_value, "ratio": ratio, "fidelity": fid, "status": e.status}
        )
        if ratio is not None and fid is not None:
            ready.append((float(ratio), float(fid)))
    k = stats.knee(ready) if len(ready) >= 3 else None
    return {"points": points, "knee": ready[k] if k is not None else None}


def sweeps_list(*, project: Project, limit: int = 20) -> list[Sweep]:
    return list(
        Sweep.objects.filter(project=project).select_related("strategy").order_by("-created_at")[:limit]
    )


def sweep_get(*, project: Project, sweep_id: int) -> Sweep | None:
    return Sweep.objects.filter(project=project, pk=sweep_id).select_related("strategy").first()


def sweep_figure(*, curve: dict[str, Any], parameter: str) -> dict[str, Any] | None:
    """The compression-ratio versus fact-fidelity curve of a sweep (plotly), the knee marked;
    None until two points are measured."""
    pts = [p for p in curve["points"] if p["ratio"] is not None and p["fidelity"] is not None]
    if len(pts) < 2:
        return None
    import plotly.graph_objects as go

    pts.sort(key=lambda p: -float(p["ratio"]))
    fig = go.Figure()
    fig.add_scatter(
        x=[p["ratio"] for p in pts],
        y=[p["fidelity"] for p in pts],
        mode="lines+markers+text",
        text=[f"{parameter}={p['value']}" for p in pts],
        textposition="top center",
        name="fact fidelity",
        line={"color": "#1e88e5"},
    )
    knee = curve.get("knee")
    if knee is not None:
        fig.add_scatter(
            x=[knee[0]],
            y=[knee[1]],
            mode="markers",
            name="knee",
            marker={"symbol": "star", "size": 16, "color": "#e53935"},
        )
    fig.update_layout(
        xaxis={"title": "compression ratio (tokens after / before)", "autorange": "reversed"},
        yaxis={"title": "fact fidelity", "range": [-0.05, 1.05]},
        margin={"l": 60, "r": 20, "t": 30, "b": 50},
        height=380,
    )
    return cast(dict[str, Any], fig.to_plotly_json())
