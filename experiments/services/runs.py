"""Experiments: a set version x a strategy ("as saved" is the control) x an endpoint x samples,
run as one replay job on the replay workers (its runs claimed, leased, retried, reclaimed and
cancelled as every replay's are; a call an earlier run made with the same request is reused).

start -> (prepare: model-made summaries, cached) -> the replay job -> finalize: every check on
every answer, then the figures (experiments.metrics). Every step is safe to run twice."""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.models import Project
from experiments import checks as checks_mod
from experiments import metrics
from experiments.errors import Conflict, ExperimentError, NotFound
from experiments.models import (
    EXPERIMENT_FINISHED,
    MAX_SAMPLES,
    CheckResult,
    Comparison,
    EvalItem,
    EvalSetVersion,
    Experiment,
    ExperimentItem,
    StrategyVersion,
    SummaryCache,
    Sweep,
)
from experiments.services.strategies import sweep_operations
from insights import prices
from replay import ablation, compression, endpoints, measures
from replay.errors import ReplayError, VariantError
from replay.models import JobStatus, ModelEndpoint, QueuePriority, ReplayJob, ReplayRun, ReplayVariant
from replay.services import jobs as replay_jobs
from replay.services.contexts import context_blocks, context_params
from replay.services.model_endpoints import _api_key
from replay.types import Operation

logger = logging.getLogger(__name__)

SUMMARY_MAX_TOKENS = 4096


def _endpoint(project: Project, endpoint: ModelEndpoint | None) -> ModelEndpoint:
    ep = endpoint or ModelEndpoint.objects.filter(project=project, is_default=True).first()
    if ep is None:
        raise Conflict("this project has no model endpoint; add one first")
    if ep.project_id != project.pk:
        raise NotFound("no such endpoint in this project")
    return ep


def _samples(samples: Any) -> int:
    if not isinstance(samples, int) or isinstance(samples, bool) or not 1 <= samples <= MAX_SAMPLES:
        raise ExperimentError(f"samples: a whole number from 1 to {MAX_SAMPLES}")
    return samples


def _needs_summary(operations: Sequence[dict[str, Any]]) -> bool:
    return any(op.get("op") == "summarize" and not op.get("summary") for op in operations)


def operation_hash(op: dict[str, Any]) -> str:
    return ablation.request_hash({k: v for k, v in op.items() if k != "summary"})


@dataclass
class ItemPlan:
    item: EvalItem
    blocks: list[Any]
    operations: list[dict[str, Any]]
    applicable: bool
    reason: str = ""
    tokens_before: int = 0
    tokens_after: int = 0
    removed: list[str] | None = None


def _plan_item(item: EvalItem, operations: list[dict[str, Any]]) -> ItemPlan:
    """What OPERATIONS do to ITEM: the blocks after them and the tokens before and after, or why
    they do not apply (a strategy naming a block the item lacks is not a failure)."""
    blocks = context_blocks(item.context.snapshot)
    before = ablation.context_tokens(blocks)
    plan = ItemPlan(
        item=item,
        blocks=blocks,
        operations=operations,
        applicable=True,
        tokens_before=before,
        tokens_after=before,
    )
    if not operations:
        return plan
    try:
        after = ablation.apply_operations(blocks, cast(list[Operation], operations))
    except VariantError as exc:
        plan.applicable = False
        plan.reason = exc.detail
        return plan
    params = context_params(item.context.snapshot)
    if ablation.canonical_json(
        ablation.render_request(after, ablation.variant_params(blocks, after, params))
    ) == ablation.canonical_json(ablation.render_variant(blocks, [], params)):
        plan.applicable = False
        plan.reason = "the strategy changes nothing in this context"
        return plan
    effect = compression.strategy_effect(blocks, after)
    plan.tokens_after = int(effect["tokens_after"])
    plan.tokens_before = int(effect["tokens_before"])
    plan.removed = list(effect["removed"])
    return plan


def _title(
    version: EvalSetVersion,
    strategy: StrategyVersion | None,
    endpoint: ModelEndpoint,
    sweep_value: Any = None,
) -> str:
    label = str(strategy) if strategy else "as saved"
    if sweep_value is not None:
        label += f" ({sweep_value})"
    return f"{version.eval_set.name} v{version.number} · {label} · {endpoint.name}"


def experiment_start(
    *,
    project: Project,
    set_version: EvalSetVersion,
    strategy_version: StrategyVersion | None = None,
    endpoint: ModelEndpoint | None = None,
    samples: Any = 3,
    params: dict[str, Any] | None = None,
    user: Any = None,
    sweep: Sweep | None = None,
    sweep_value: Any = None,
) -> Experiment:
    """Start an experiment: its items' plans (not applicable ones recorded as such), then either
    its replay job at once, or, when a `summarize` operation needs model-made summaries, the
    preparation task that makes them (cached) and starts the job."""
    if set_version.eval_set.project_id != project.pk:
        raise NotFound("no such set in this project")
    if strategy_version is not None and strategy_version.strategy.project_id != project.pk:
        raise NotFound("no such strategy in this project")
    ep = _endpoint(project, endpoint)
    n = _samples(samples)
    try:
        overrides = replay_jobs._overrides(params)
    except VariantError as exc:
        raise ExperimentError(exc.detail) from exc
    operations = list(strategy_version.operations) if strategy_version else []
    if sweep is not None and sweep_value is not None:
        operations = sweep_operations(operations, sweep.parameter, sweep_value)
    items = list(set_version.items.select_related("context").order_by("position"))
    if not items:
        raise ExperimentError("this set version has no items")
    prepare = _needs_summary(operations)
    with transaction.atomic():
        exp = Experiment.objects.create(
            project=project,
            set_version=set_version,
            strategy_version=strategy_version,
            endpoint=ep,
            samples=n,
            params=overrides,
            operations=operations,
            sweep=sweep,
            sweep_value=sweep_value,
            title=_title(set_version, strategy_version, ep, sweep_value)[:300],
            status=Experiment.Status.PREPARING if prepare else Experiment.Status.RUNNING,
            n_items=len(items),
            created_by=user if getattr(user, "pk", None) else None,
        )
        if prepare:
            ExperimentItem.objects.bulk_create(
                [ExperimentItem(experiment=exp, item=it, operations=operations) for it in items]
            )
            exp_id = exp.pk
            transaction.on_commit(lambda: _enqueue_prepare(exp_id))
        else:
            _launch(exp, [_plan_item(it, operations) for it in items])
    logger.info("experiments.started experiment_id=%s items=%s prepare=%s", exp.pk, len(items), prepare)
    return exp


def _enqueue_prepare(experiment_id: int) -> None:
    from experiments.tasks import experiment_prepare

    # Its summaries are model calls on the replay queue, behind a person's replays.
    experiment_prepare.apply_async(args=[experiment_id], priority=QueuePriority.EXPERIMENT)


def _job_plan(
    *,
    project: Project,
    endpoint: ModelEndpoint,
    label: str,
    title: str,
    samples: int,
    params: dict[str, Any],
    plans: list[ItemPlan],
) -> replay_jobs.JobPlan:
    """The replay job of an experiment: per item the control (as saved, SAMPLES times) and,
    where the strategy applies, the strategy's variant; calls made before are reused."""
    planned: list[replay_jobs.PlannedSnapshot] = []
    for p in plans:
        ctx = p.item.context
        variants = [ablation.VariantPlan(label="as saved", is_baseline=True, samples=samples)]
        if p.applicable and p.operations:
            variants.append(
                ablation.VariantPlan(
                    label=label[:300], operations=cast(list[Operation], p.operations), samples=samples
                )
            )
        planned.append(
            replay_jobs.PlannedSnapshot(
                snapshot_ref=ctx.pk,
                snapshot_uuid=p.item.snapshot_uuid or uuid.uuid5(uuid.NAMESPACE_OID, ctx.content_hash),
                session_id=p.item.session_id,
                turn=p.item.turn or 0,
                blocks=p.blocks,
                plans=variants,
                params=context_params(ctx.snapshot),
                context_id=ctx.pk,
            )
        )
    try:
        return replay_jobs.replay_contexts_plan(
            project=project,
            endpoint=endpoint,
            kind=ReplayJob.Kind.EXPERIMENT,
            title=title,
            samples=samples,
            params=params,
            snapshots=planned,
        )
    except VariantError as exc:
        raise ExperimentError(exc.detail) from exc


@dataclass
class ExperimentPlan:
    items: list[ItemPlan]
    job: replay_jobs.JobPlan | None  # None until the summaries a strategy needs are made


def experiment_plan(
    *,
    project: Project,
    set_version: EvalSetVersion,
    strategy_version: StrategyVersion | None = None,
    endpoint: ModelEndpoint | None = None,
    samples: Any = 3,
    params: dict[str, Any] | None = None,
) -> ExperimentPlan:
    """What an experiment would run, nothing written: each item's plan (tokens before and after,
    or why the strategy does not apply) and the replay job with its estimate (model calls, prompt
    tokens, calls reused)."""
    ep = _endpoint(project, endpoint)
    n = _samples(samples)
    try:
        overrides = replay_jobs._overrides(params)
    except VariantError as exc:
        raise ExperimentError(exc.detail) from exc
    operations = list(strategy_version.operations) if strategy_version else []
    items = list(set_version.items.select_related("context").order_by("position"))
    plans = [_plan_item(it, operations) for it in items]
    if _needs_summary(operations):
        return ExperimentPlan(items=plans, job=None)
    label = str(strategy_version) if strategy_version else "as saved"
    job = _job_plan(project=project, endpoint=ep, label=label, title=label, samples=n, params=overrides,
                    plans=plans)
    return ExperimentPlan(items=plans, job=job)


def _launch(exp: Experiment, plans: list[ItemPlan]) -> None:
    """Store the items' plans and the experiment's replay job. Inside a transaction."""
    plan = _job_plan(project=exp.project, endpoint=exp.endpoint, label=exp.strategy_label, title=exp.title,
                     samples=exp.samples, params=exp.params, plans=plans)
    job = replay_jobs.replay_job_store(
        project=exp.project,
        endpoint=exp.endpoint,
        plan=plan,
        spec={"experiment_id": exp.pk},
        user=exp.created_by,
        priority=QueuePriority.EXPERIMENT,  # behind the replays people ask for meanwhile
    )
    stored = list(ReplayVariant.objects.filter(job=job).order_by("position").values_list("id", flat=True))
    rows: list[ExperimentItem] = []
    existing = {ei.item_id: ei for ei in ExperimentItem.objects.filter(experiment=exp)}
    i = 0
    for p in plans:
        control = stored[i]
        i += 1
        strategy = None
        if p.applicable and p.operations:
            strategy = stored[i]
            i += 1
        ei = existing.get(p.item.pk) or ExperimentItem(experiment=exp, item=p.item)
        ei.applicable = p.applicable
        ei.reason = p.reason[:500] if not ei.failed else ei.reason
        ei.operations = p.operations
        ei.tokens_before = p.tokens_before
        ei.tokens_after = p.tokens_after
        ei.removed = p.removed or []
        ei.control_variant_id = control
        ei.strategy_variant_id = strategy
        rows.append(ei)
    # Rows made while preparing summaries are updated; the others are new.
    kept = [r for r in rows if r.pk is not None]
    ExperimentItem.objects.bulk_create([r for r in rows if r.pk is None])
    ExperimentItem.objects.bulk_update(
        kept,
        [
            "applicable",
            "reason",
            "operations",
            "tokens_before",
            "tokens_after",
            "removed",
            "control_variant_id",
            "strategy_variant_id",
        ],
    )
    exp.job = job
    exp.status = Experiment.Status.RUNNING
    exp.n_not_applicable = sum(1 for p in plans if not p.applicable)
    exp.save(update_fields=["job", "status", "n_not_applicable"])


# --- summaries --------------------------------------------------------------------------------
def _summary_call(*, exp: Experiment, prompt: str, budget: int) -> endpoints.CallResult:
    ep = exp.endpoint
    url = endpoints.validate_base_url(
        ep.base_url, allow_private=exp.project.allow_private_endpoints, resolve=False
    )
    request: Any = {
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max(16, min(SUMMARY_MAX_TOKENS, int(budget * 1.2))),
    }
    call = ablation.build_call(
        request=request,
        model=ep.model,
        mode=ep.mode,
        endpoint_params=ep.default_params,
        drops_later_system=ep.chat_drops_later_system,
    )
    return endpoints.complete(
        base_url=url,
        path=call.path,
        body=call.body,
        api_key=_api_key(ep),
        timeout=ep.timeout_s,
        allow_private=exp.project.allow_private_endpoints,
    )


def _summarised(exp: Experiment, ei: ExperimentItem, blocks: list[Any]) -> list[dict[str, Any]]:
    """The item's operations with every `summarize` carrying its summary: from the cache, or
    from one model call each (stored in the cache). Raises endpoints.CallError or VariantError."""
    ops = [dict(op) for op in ei.operations]
    current = blocks
    for i, op in enumerate(ops):
        if op.get("op") == "summarize" and not op.get("summary"):
            inp = compression.summarize_input(current, cast(Operation, op))
            key = {
                "project": exp.project,
                "content_hash": inp.content_hash,
                "operation_hash": operation_hash(op),
                "endpoint": exp.endpoint,
                "model": exp.endpoint.model,
            }
            cached = SummaryCache.objects.filter(**key).first()
            if cached is None:
                result = _summary_call(exp=exp, prompt=inp.prompt, budget=inp.budget_tokens)
                if not result.text.strip():
                    raise endpoints.CallError("the summarising model answered nothing", transient=False)
                cached, _ = SummaryCache.objects.get_or_create(
                    **key,
                    defaults={
                        "summary": result.text.strip(),
                        "prompt_tokens": result.prompt_tokens,
                        "completion_tokens": result.completion_tokens,
                    },
                )
            op["summary"] = cached.summary
        current = ablation.apply_operations(current, [op])  # type: ignore[list-item]
        ops[i] = op
    return ops


def experiment_prepare(*, experiment_id: int) -> str:
    """Make the summaries an experiment's strategy needs, item by item (an item whose summary
    fails is marked failed with the reason; the others go on), then start its replay job.
    A cancelled experiment makes no further call; safe to run twice."""
    exp = (
        Experiment.objects.select_related("project", "endpoint", "set_version")
        .filter(pk=experiment_id)
        .first()
    )
    if exp is None:
        return "missing"
    if exp.status != Experiment.Status.PREPARING:
        return f"already_{exp.status}"
    items = list(
        ExperimentItem.objects.filter(experiment=exp)
        .select_related("item", "item__context")
        .order_by("item__position")
    )
    for ei in items:
        if ei.failed or not _needs_summary(ei.operations):
            continue
        if Experiment.objects.filter(pk=exp.pk, status=Experiment.Status.CANCELLED).exists():
            return "cancelled"
        blocks = context_blocks(ei.item.context.snapshot)
        try:
            ei.operations = _summarised(exp, ei, blocks)
        except VariantError as exc:
            ei.applicable = False
            ei.reason = exc.detail[:500]
        except (endpoints.CallError, ReplayError) as exc:
            reason = exc.reason if isinstance(exc, endpoints.CallError) else exc.detail
            ei.failed = True
            ei.reason = f"the summary failed: {reason}"[:500]
            logger.info("experiments.summary_failed experiment_id=%s item_id=%s", exp.pk, ei.item_id)
        ei.save(update_fields=["operations", "applicable", "reason", "failed"])
    with transaction.atomic():
        exp = Experiment.objects.select_for_update().select_related("project", "endpoint").get(pk=exp.pk)
        if exp.status != Experiment.Status.PREPARING:
            return f"already_{exp.status}"
        plans: list[ItemPlan] = []
        for ei in (
            ExperimentItem.objects.filter(experiment=exp)
            .select_related("item", "item__context")
            .order_by("item__position")
        ):
            if ei.failed or not ei.applicable:
                p = ItemPlan(
                    item=ei.item,
                    blocks=context_blocks(ei.item.context.snapshot),
                    operations=[],
                    applicable=False,
                    reason=ei.reason,
                )
            else:
                p = _plan_item(ei.item, ei.operations)
            plans.append(p)
        exp.n_failed_items = sum(
            1 for p in plans if not p.applicable and p.reason.startswith("the summary failed")
        )
        exp.save(update_fields=["n_failed_items"])
        _launch(exp, plans)
    return "started"


# --- cancel -----------------------------------------------------------------------------------
def experiment_cancel(*, experiment: Experiment) -> Experiment:
    """Stop EXPERIMENT: no further model call (summaries or runs); what ran is kept."""
    with transaction.atomic():
        exp = Experiment.objects.select_for_update().get(pk=experiment.pk)
        if exp.status in EXPERIMENT_FINISHED:
            return exp
        exp.status = Experiment.Status.CANCELLED
        exp.finished_at = timezone.now()
        exp.save(update_fields=["status", "finished_at"])
    if exp.job_id is not None:
        replay_jobs.replay_job_cancel(job=ReplayJob.objects.get(pk=exp.job_id))
        experiment_finalize(experiment_id=exp.pk, force=True)
    exp.refresh_from_db()
    return exp


# --- evaluation --------------------------------------------------------------------------------
def _reference(snapshot: dict[str, Any]) -> tuple[str, list[Any]]:
    out = snapshot.get("output") if isinstance(snapshot.get("output"), dict) else {}
    assert isinstance(out, dict)
    return str(out.get("text") or ""), list(out.get("tool_calls") or [])


def _price(exp: Experiment) -> tuple[float, float] | None:
    table = prices.price_table(getattr(exp.project, "price_table", None) or None)
    p = prices.price_for(exp.endpoint.model, table)
    return None if p is None else (p.input, p.output)


def _semantic(checks: Sequence[Any]) -> bool:
    return any(
        isinstance(c, dict) and c.get("type") == "consistent" and c.get("measure") == "semantic"
        for c in checks
    )


def _reference_embeddings(
    exp: Experiment, eitems: Sequence[ExperimentItem], set_checks: Sequence[Any]
) -> dict[int, list[float]]:
    """Item id -> the embedding of its reference answer, for the items a semantic `consistent`
    check judges, when the experiment's endpoint serves embeddings. Network calls, outside any
    transaction; an item whose embedding fails is left out (its check then says why)."""
    ep = exp.endpoint
    if not ep.embeddings_model:
        return {}
    url = endpoints.validate_base_url(
        ep.base_url, allow_private=exp.project.allow_private_endpoints, resolve=False
    )
    out: dict[int, list[float]] = {}
    by_text: dict[str, list[float]] = {}
    for ei in eitems:
        if not _semantic([*set_checks, *(ei.item.checks or [])]):
            continue
        text, _ = _reference(ei.item.context.snapshot)
        if not text:
            continue
        if text not in by_text:
            try:
                by_text[text] = endpoints.embed(
                    base_url=url,
                    model=ep.embeddings_model,
                    text=text,
                    api_key=_api_key(ep),
                    timeout=ep.timeout_s,
                    allow_private=exp.project.allow_private_endpoints,
                )
            except endpoints.CallError as exc:
                logger.warning(
                    "experiments.reference_embedding_failed experiment_id=%s item_id=%s reason=%s",
                    exp.pk, ei.item_id, exc.reason,
                )
                continue
        out[ei.item_id] = by_text[text]
    return out


def experiment_finalize(*, experiment_id: int, force: bool = False) -> str:
    """Once the experiment's replay job has ended: every check on every answer (stored with its
    evidence), then the figures. FORCE: also while the job still runs (a cancel)."""
    exp = (
        Experiment.objects.select_related("job", "set_version", "endpoint", "project")
        .filter(pk=experiment_id)
        .first()
    )
    if exp is None:
        return "missing"
    if exp.summary is not None and exp.status in EXPERIMENT_FINISHED and not force:
        return "already_done"
    job = exp.job
    if job is None:
        return "not_started"
    if not force and job.status not in (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED):
        return "running"
    set_checks = list(exp.set_version.checks or [])
    eitems = list(
        ExperimentItem.objects.filter(experiment=exp)
        .select_related("item", "item__context")
        .order_by("item__position")
    )
    runs = _job_runs(job)
    by_variant: dict[int, list[ReplayRun]] = defaultdict(list)
    for r in runs:
        by_variant[r.variant_id].append(r)
    done_ids = {
        (c[0], c[1], c[2], c[3])
        for c in CheckResult.objects.filter(experiment=exp).values_list(
            "item_id", "arm", "sample", "check_id"
        )
    }
    ref_embeddings = _reference_embeddings(exp, eitems, set_checks)
    new_rows = [
        row
        for ei in eitems
        for row in _item_check_rows(
            exp, ei, set_checks, by_variant, ref_embeddings.get(ei.item_id), done_ids
        )
    ]
    CheckResult.objects.bulk_create(new_rows, batch_size=2000, ignore_conflicts=True)
    exp.summary = _summary(exp, eitems, by_variant)
    # Comparisons made from the summary it replaces are stale.
    Comparison.objects.filter(Q(a=exp) | Q(b=exp)).delete()
    _outcome_set(exp, job, runs)
    exp.finished_at = exp.finished_at or timezone.now()
    exp.save(update_fields=["summary", "status", "reason", "finished_at"])
    logger.info(
        "experiments.finalized experiment_id=%s status=%s results=%s", exp.pk, exp.status, len(new_rows)
    )
    return exp.status


def _job_runs(job: ReplayJob) -> list[ReplayRun]:
    """JOB's runs by variant and sample, with only what the checks and the figures read."""
    return list(
        ReplayRun.objects.filter(job_id=job.pk)
        .only(
            "id",
            "variant_id",
            "sample",
            "status",
            "output_text",
            "tool_calls",
            "prompt_tokens",
            "completion_tokens",
            "embedding",
        )
        .order_by("variant_id", "sample")
    )


def _item_check_rows(
    exp: Experiment,
    ei: ExperimentItem,
    set_checks: list[Any],
    by_variant: dict[int, list[ReplayRun]],
    ref_embedding: list[float] | None,
    done_ids: set[tuple[int, str, int, str]],
) -> list[CheckResult]:
    """The results still to store for item EI: every check (the set's, then the item's own) on
    every answer of each arm, judged against the item's reference answer and the control's
    spread around it; a result already stored (DONE_IDS) is not made again."""
    ref_text, ref_calls = _reference(ei.item.context.snapshot)
    all_checks = set_checks + list(ei.item.checks or [])
    if not all_checks:
        return []
    control_runs = [
        r for r in by_variant.get(ei.control_variant_id or -1, []) if r.status == ReplayRun.Status.DONE
    ]
    threshold, semantic_threshold = _control_spread(all_checks, ref_text, ref_embedding, control_runs)
    rows: list[CheckResult] = []
    for vid, arm in (
        (ei.control_variant_id, CheckResult.Arm.CONTROL),
        (ei.strategy_variant_id, CheckResult.Arm.STRATEGY),
    ):
        if not vid:
            continue
        for r in by_variant.get(vid, []):
            if r.status != ReplayRun.Status.DONE:
                continue
            ctx = checks_mod.CheckContext(
                reference_text=ref_text,
                reference_tool_calls=ref_calls,
                threshold=threshold,
                semantic_threshold=semantic_threshold,
                answer_embedding=r.embedding,
                reference_embedding=ref_embedding,
            )
            rows += _answer_check_rows(exp, ei.item_id, arm, r, all_checks, ctx, done_ids)
    return rows


def _control_spread(
    all_checks: list[Any], ref_text: str, ref_embedding: list[float] | None, control_runs: list[ReplayRun]
) -> tuple[float | None, float | None]:
    """The model's own spread around the reference, as an edit distance and as a semantic one:
    a consistent answer is no farther from it than the control's answers are. Only a
    `consistent` check reads it, and an edit distance per control answer is the costliest step
    here. None where nothing measures it."""
    threshold = semantic_threshold = None
    if any(c.get("type") == "consistent" for c in all_checks if isinstance(c, dict)):
        threshold = max(
            (measures.edit_distance(ref_text, r.output_text) for r in control_runs), default=None
        )
    if ref_embedding is not None:
        spread = [measures.semantic_distance(ref_embedding, r.embedding) for r in control_runs]
        semantic_threshold = max((d for d in spread if d is not None), default=None)
    return threshold, semantic_threshold


def _answer_check_rows(
    exp: Experiment,
    item_id: int,
    arm: str,
    r: ReplayRun,
    all_checks: list[Any],
    ctx: checks_mod.CheckContext,
    done_ids: set[tuple[int, str, int, str]],
) -> list[CheckResult]:
    """Each check's result on run R's answer (in ARM of the item), unless already stored."""
    answer = checks_mod.Answer(text=r.output_text or "", tool_calls=list(r.tool_calls or []))
    return [
        CheckResult(
            experiment=exp,
            item_id=item_id,
            arm=arm,
            sample=r.sample,
            run_id=r.pk,
            check_id=res.check_id[:64],
            kind=res.kind[:24],
            passed=res.passed,
            evidence=res.evidence[:500],
        )
        for res in checks_mod.evaluate_all(all_checks, answer, ctx)
        if (item_id, arm, r.sample, res.check_id) not in done_ids
    ]


def _outcome_set(exp: Experiment, job: ReplayJob, runs: list[ReplayRun]) -> None:
    """EXP's status (and its reason) from how its job went: cancelled when it or the job was,
    failed when every model call failed, partial when some calls or items failed, else done."""
    failed_runs = sum(1 for r in runs if r.status == ReplayRun.Status.FAILED)
    cancelled = exp.status == Experiment.Status.CANCELLED or job.status == JobStatus.CANCELLED
    done_runs = sum(1 for r in runs if r.status == ReplayRun.Status.DONE)
    if cancelled:
        exp.status = Experiment.Status.CANCELLED
    elif done_runs == 0 and runs:
        exp.status = Experiment.Status.FAILED
        exp.reason = "every model call failed"
    elif failed_runs or exp.n_failed_items:
        exp.status = Experiment.Status.PARTIAL
        exp.reason = f"{failed_runs} model calls failed, {exp.n_failed_items} items could not be prepared"
    else:
        exp.status = Experiment.Status.DONE


def _summary(
    exp: Experiment, eitems: list[ExperimentItem], by_variant: dict[int, list[ReplayRun]]
) -> dict[str, Any]:
    """Per item the digests of both arms (experiments.metrics.digest), and the strategy against
    the control (metrics.compare)."""
    results: dict[tuple[int, str, int], dict[str, tuple[str, bool | None]]] = defaultdict(dict)
    for item_id, arm, sample, cid, kind, passed in CheckResult.objects.filter(experiment=exp).values_list(
        "item_id", "arm", "sample", "check_id", "kind", "passed"
    ):
        results[(item_id, arm, sample)][cid] = (kind, passed)
    price = _price(exp)
    items: dict[str, Any] = {}
    control: dict[str, tuple[Any, float | None]] = {}
    strategy: dict[str, tuple[Any, float | None]] = {}
    for ei in eitems:
        entry: dict[str, Any] = {
            "item_id": ei.item_id,
            "position": ei.item.position,
            "session_id": ei.item.session_id,
            "turn": ei.item.turn,
            "applicable": ei.applicable,
            "failed": ei.failed,
            "reason": ei.reason,
            "tokens_before": ei.tokens_before,
            "tokens_after": ei.tokens_after,
            "ratio": (ei.tokens_after / ei.tokens_before) if ei.tokens_before else None,
            "removed": ei.removed,
        }
        for vid, arm in ((ei.control_variant_id, "control"), (ei.strategy_variant_id, "strategy")):
            if not vid:
                entry[arm] = None
                continue
            rs = by_variant.get(vid, [])
            answers = [
                metrics.Answer(
                    results=results.get((ei.item_id, arm, r.sample), {}),
                    prompt_tokens=r.prompt_tokens,
                    completion_tokens=r.completion_tokens,
                )
                for r in rs
                if r.status == ReplayRun.Status.DONE
            ]
            failed = sum(1 for r in rs if r.status == ReplayRun.Status.FAILED)
            entry[arm] = metrics.digest(answers, failed=failed, price=price)
        items[str(ei.item_id)] = entry
        key = str(ei.item_id)
        control[key] = (entry["control"], 1.0)
        if exp.strategy_version_id or exp.operations:
            if entry["strategy"] is not None:
                strategy[key] = (entry["strategy"], entry["ratio"])
    out: dict[str, Any] = {"items": items}
    if exp.strategy_version_id or exp.operations:
        out["vs_control"] = metrics.compare(
            metrics.Side("as saved", control), metrics.Side(exp.strategy_label, strategy)
        )
    else:
        out["vs_control"] = None
    out["arm"] = "strategy" if (exp.strategy_version_id or exp.operations) else "control"
    own = strategy if out["arm"] == "strategy" else control
    out["figures"] = metrics.figures(metrics.Side(exp.strategy_label, own))
    return out


def arm_side(exp: Experiment) -> metrics.Side:
    """EXPERIMENT's own arm over its items, as a comparison reads it: the strategy's answers
    (the control's for an item the strategy does not apply to, which the strategy leaves as
    saved), or the control's for an "as saved" experiment."""
    summary = exp.summary or {}
    arm = summary.get("arm", "control")
    items: dict[str, tuple[Any, float | None]] = {}
    for key, entry in (summary.get("items") or {}).items():
        if entry.get("failed"):
            continue
        if arm == "strategy" and entry.get("strategy") is not None:
            items[key] = (entry["strategy"], entry.get("ratio"))
        else:
            items[key] = (entry.get("control"), 1.0)
    label = exp.strategy_label if exp.sweep_value is None else f"{exp.strategy_label} ({exp.sweep_value})"
    return metrics.Side(f"#{exp.pk} {label}", items)


def sweep_start(
    *,
    project: Project,
    set_version: EvalSetVersion,
    strategy: Any,
    parameter: str,
    values: Sequence[Any],
    endpoint: ModelEndpoint | None = None,
    samples: Any = 3,
    user: Any = None,
) -> list[Experiment]:
    """One experiment per value of PARAMETER of STRATEGY's latest version, on one set version:
    the compression-ratio versus fidelity curve (experiments.selectors.sweep_curve)."""
    from experiments.services.strategies import strategy_latest

    sv = strategy_latest(strategy)
    if not 2 <= len(values) <= 12:
        raise ExperimentError("values: from 2 to 12 values")
    for value in values:
        sweep_operations(list(sv.operations), parameter, value)
    with transaction.atomic():
        sweep = Sweep.objects.create(
            project=project, strategy=strategy, parameter=parameter, values=list(values)
        )
        return [
            experiment_start(
                project=project,
                set_version=set_version,
                strategy_version=sv,
                endpoint=endpoint,
                samples=samples,
                user=user,
                sweep=sweep,
                sweep_value=value,
            )
            for value in values
        ]
