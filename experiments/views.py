"""Experiment pages: sets (create from a filter, a timeline selection or a JSONL upload; items,
checks and suggestions; export), strategies, experiments (progress, figures against the control,
items), the comparison of experiments and its flipped items, sweeps."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from core import textdiff
from core.access import page_context, project_access
from experiments import checks as checks_mod
from experiments import selectors
from experiments.errors import Conflict, ExperimentError
from experiments.models import EXPERIMENT_FINISHED, CheckResult, EvalSet, Experiment, ExperimentItem
from experiments.services import runs, sets, strategies
from replay import ablation
from replay import selectors as replay_selectors
from replay.models import ReplayRun
from replay.services.contexts import context_blocks, context_params

MAX_UPLOAD_BYTES = 64 * 1024 * 1024


def _set_or_404(project: Any, set_id: int) -> EvalSet:
    s = selectors.set_get(project=project, set_id=set_id)
    if s is None:
        raise Http404("no such evaluation set")
    return s


def _exp_or_404(project: Any, experiment_id: int) -> Experiment:
    e = selectors.experiment_get(project=project, experiment_id=experiment_id)
    if e is None:
        raise Http404("no such experiment")
    return e


@require_GET
def home(request: HttpRequest, project_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "viewer")
    return render(
        request,
        "experiments/home.html",
        page_context(
            request,
            project,
            membership,
            sets=selectors.sets_list(project=project).prefetch_related("versions"),
            strategies=selectors.strategies_list(project=project),
            presets=strategies.PRESETS,
            experiments=selectors.experiments_list(project=project, limit=100),
            sweeps=selectors.sweeps_list(project=project),
            endpoints=replay_selectors.endpoints_list(project=project),
        ),
    )


def _fail(request: HttpRequest, exc: ExperimentError, to: str) -> HttpResponse:
    messages.error(request, exc.detail)
    return redirect(to)


@require_POST
def set_create(request: HttpRequest, project_id: int) -> HttpResponse:
    """A set from a filter form, a timeline selection (snapshot_id values) or a JSONL upload."""
    project, membership = project_access(request, project_id, "editor")
    back = request.POST.get("next") or ""
    # Back to the page the selection came from (a path on this site only), else the home page.
    home_url = (
        back
        if back.startswith("/") and not back.startswith("//")
        else reverse("experiments:home", kwargs={"project_id": project.pk})
    )
    data = request.POST
    name = (data.get("name") or "").strip()
    rejected: list[dict[str, Any]] = []
    try:
        if data.getlist("snapshot_id") or data.get("alert_id"):
            if data.get("alert_id"):
                seeds = sets.seeds_from_alert(project=project, alert_id=int(data["alert_id"]))
            else:
                seeds = sets.seeds_from_turns(
                    project=project, snapshot_ids=data.getlist("snapshot_id"), source="timeline"
                )
            existing = selectors.set_by_name(project=project, name=name) if name else None
            if existing is not None:
                sets.eval_set_items_add(eval_set=existing, seeds=seeds, user=request.user)
                messages.success(request, f"Added {len(seeds)} turns to {existing.name}.")
                return redirect("experiments:set", project_id=project.pk, set_id=existing.pk)
            s = sets.eval_set_create(project=project, name=name, seeds=seeds, user=request.user)
        elif (f := request.FILES.get("file")) is not None:
            if f.size and f.size > MAX_UPLOAD_BYTES:
                raise ExperimentError(f"the file exceeds {MAX_UPLOAD_BYTES // (1024 * 1024)} MB")
            header, raw, errors = sets.parse_jsonl(f.read().splitlines())
            seeds, rejected = sets.seeds_from_wire(raw, source="jsonl")
            rejected = errors + rejected
            name = name or str(header.get("name") or "")
            s = sets.eval_set_create(
                project=project,
                name=name,
                seeds=seeds,
                checks=header.get("checks"),
                description=str(header.get("description") or ""),
                user=request.user,
            )
        else:
            flt: dict[str, Any] = {}
            for k in ("agent", "model", "tag", "since", "until"):
                if (data.get(k) or "").strip():
                    flt[k] = data[k].strip()
            for k in ("failed_validation", "has_alerts"):
                if data.get(k):
                    flt[k] = True
            if (data.get("sample") or "").strip():
                try:
                    flt["sample"] = int(data["sample"])
                except ValueError:
                    raise ExperimentError("sample: a whole number") from None
            s = sets.eval_set_create(
                project=project,
                name=name,
                seeds=sets.seeds_from_filter(project=project, flt=flt),
                description=data.get("description") or "",
                user=request.user,
            )
    except ValueError:
        return _fail(request, ExperimentError("alert_id: a whole number"), home_url)
    except ExperimentError as exc:
        return _fail(request, exc, home_url)
    if rejected:
        messages.warning(
            request,
            f"{len(rejected)} lines were refused; the first: "
            f"{'.'.join(map(str, rejected[0]['loc']))}: {rejected[0]['msg']}",
        )
    return redirect("experiments:set", project_id=project.pk, set_id=s.pk)


@require_GET
def set_detail(request: HttpRequest, project_id: int, set_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "viewer")
    s = _set_or_404(project, set_id)
    number = request.GET.get("version")
    version = selectors.version_get(eval_set=s, number=int(number) if number and number.isdigit() else None)
    if version is None:
        raise Http404("no such version")
    items = selectors.version_items(version=version)
    rows = [
        {
            "item": it,
            "checks": [(c, checks_mod.describe(c)) for c in it.checks],
            "suggestions": [(i, sg, checks_mod.describe(sg["check"])) for i, sg in enumerate(it.suggestions)],
            "blocks": [(b["key"], b.get("tokens")) for b in context_blocks(it.context.snapshot)],
        }
        for it in items
    ]
    return render(
        request,
        "experiments/set.html",
        page_context(
            request,
            project,
            membership,
            eval_set=s,
            version=version,
            rows=rows,
            versions=list(s.versions.order_by("-number")),
            set_checks=[(c, checks_mod.describe(c)) for c in version.checks],
            set_checks_json=json.dumps(version.checks, indent=1, ensure_ascii=False),
            pending=sum(len(it.suggestions) for it in items),
            pinned_bytes=sum(it.context.size_bytes for it in {it.context_id: it for it in items}.values()),
            strategies=selectors.strategies_list(project=project),
            endpoints=replay_selectors.endpoints_list(project=project),
            experiments=selectors.experiments_list(project=project, set_version=version),
            latest=version.number == max(v.number for v in s.versions.all()),
        ),
    )


@require_POST
def set_edit(request: HttpRequest, project_id: int, set_id: int) -> HttpResponse:
    """Confirm suggestions (one item's or all), set checks (the set's or an item's), remove items."""
    project, _ = project_access(request, project_id, "editor")
    s = _set_or_404(project, set_id)
    here = reverse("experiments:set", kwargs={"project_id": project.pk, "set_id": s.pk})
    action = request.POST.get("action")
    try:
        if action == "confirm_all":
            sets.eval_set_suggestions_confirm_all(eval_set=s, user=request.user)
            messages.success(request, "Every suggested check is confirmed.")
        elif action == "confirm":
            item_id = int(request.POST.get("item") or 0)
            chosen = [int(i) for i in request.POST.getlist("suggestion")]
            sets.eval_item_checks_set(
                eval_set=s, item_id=item_id, checks=None, confirm=chosen, user=request.user
            )
            messages.success(request, f"{len(chosen)} suggested checks confirmed.")
        elif action in ("set_checks", "item_checks"):
            try:
                value = json.loads(request.POST.get("checks") or "[]")
            except ValueError:
                raise ExperimentError("checks: a JSON list of checks") from None
            if action == "set_checks":
                sets.eval_set_checks_set(eval_set=s, checks=value, user=request.user)
            else:
                sets.eval_item_checks_set(
                    eval_set=s, item_id=int(request.POST.get("item") or 0), checks=value, user=request.user
                )
            messages.success(request, "Checks saved.")
        elif action == "add_check":
            item_id = int(request.POST.get("item") or 0)
            item = next(
                (it for it in selectors.version_items(version=sets.latest_version(s)) if it.pk == item_id),
                None,
            )
            if item is None:
                raise ExperimentError("no such item in the latest version")
            check = _check_from_form(request.POST)
            sets.eval_item_checks_set(
                eval_set=s, item_id=item_id, checks=[*item.checks, check], user=request.user
            )
            messages.success(request, "Check added.")
        elif action == "remove":
            ids = [int(i) for i in request.POST.getlist("item_id")]
            if not ids:
                raise ExperimentError("select the items to remove")
            v = sets.eval_set_items_remove(eval_set=s, item_ids=ids, user=request.user)
            messages.success(request, f"Version {v.number}: {len(ids)} items removed.")
        else:
            raise ExperimentError("unknown action")
    except ValueError:
        return _fail(request, ExperimentError("a whole number was expected"), here)
    except ExperimentError as exc:
        return _fail(request, exc, here)
    return redirect(here)


def _check_from_form(data: Any) -> dict[str, Any]:
    """A check from the page's small form: a type and one value."""
    kind = data.get("check_type")
    value = (data.get("check_value") or "").strip()
    if not value and kind not in ("valid_json",):
        raise ExperimentError("the check needs a value")
    if kind == "fact_text":
        return {"type": "fact", "match": "text", "value": value}
    if kind == "fact_regex":
        return {"type": "fact", "match": "regex", "pattern": value}
    if kind == "not_contains":
        return {"type": "constraint", "rule": "not_contains", "text": value}
    if kind == "valid_json":
        return {"type": "constraint", "rule": "valid_json"}
    if kind == "max_chars":
        try:
            return {"type": "constraint", "rule": "max_chars", "limit": int(value)}
        except ValueError:
            raise ExperimentError("max characters: a whole number") from None
    if kind == "no_repeat":
        slots = []
        for part in value.split(","):
            name, sep, v = part.partition("=")
            if not sep:
                raise ExperimentError("slots: name=value, separated by commas")
            slots.append({"name": name.strip(), "value": v.strip()})
        return {"type": "no_repeat_question", "slots": slots}
    raise ExperimentError("choose a kind of check")


@require_GET
def set_export(request: HttpRequest, project_id: int, set_id: int) -> StreamingHttpResponse:
    project, _ = project_access(request, project_id, "viewer")
    s = _set_or_404(project, set_id)
    number = request.GET.get("version")
    version = selectors.version_get(eval_set=s, number=int(number) if number and number.isdigit() else None)
    if version is None:
        raise Http404("no such version")
    resp = StreamingHttpResponse(sets.eval_set_export(version=version), content_type="application/x-ndjson")
    resp["Content-Disposition"] = f'attachment; filename="set-{s.pk}-v{version.number}.jsonl"'
    return resp


@require_POST
def strategy_save(request: HttpRequest, project_id: int) -> HttpResponse:
    project, _ = project_access(request, project_id, "editor")
    home_url = reverse("experiments:home", kwargs={"project_id": project.pk})
    try:
        if request.POST.get("preset"):
            name = request.POST["preset"]
            if name not in strategies.PRESETS:
                raise ExperimentError("no such preset")
            strategies.preset_ensure(project=project, name=name)
            messages.success(request, f"Strategy {name!r} added.")
            return redirect(home_url)
        try:
            ops = json.loads(request.POST.get("operations") or "")
        except ValueError:
            raise ExperimentError("operations: a JSON list of operations") from None
        existing = selectors.strategy_by_name(project=project, name=(request.POST.get("name") or "").strip())
        if existing is not None:
            v = strategies.strategy_update(strategy=existing, operations=ops)
            messages.success(request, f"{existing.name}: version {v.number}.")
        else:
            strategies.strategy_create(
                project=project,
                name=request.POST.get("name"),
                operations=ops,
                description=request.POST.get("description") or "",
            )
            messages.success(request, "Strategy saved.")
    except ExperimentError as exc:
        return _fail(request, exc, home_url)
    return redirect(home_url)


@require_POST
def experiment_create(request: HttpRequest, project_id: int) -> HttpResponse:
    project, _ = project_access(request, project_id, "editor")
    try:
        s = _set_or_404(project, int(request.POST.get("set") or 0))
    except ValueError:
        raise Http404("no such set") from None
    here = reverse("experiments:set", kwargs={"project_id": project.pk, "set_id": s.pk})
    try:
        version = selectors.version_get(eval_set=s, number=int(request.POST.get("version") or 0) or None)
        if version is None:
            raise ExperimentError("no such version")
        endpoint = None
        if request.POST.get("endpoint"):
            endpoint = replay_selectors.endpoint_get(
                project=project, endpoint_id=int(request.POST["endpoint"])
            )
            if endpoint is None:
                raise ExperimentError("no such endpoint")
        samples = int(request.POST.get("samples") or 3)
        chosen = [x for x in request.POST.getlist("strategy") if x]
        if not chosen:
            raise ExperimentError("choose at least one strategy (or as saved)")
        chosen_versions = []
        for ref in chosen:
            sv = None
            if ref != "as-saved":
                st = selectors.strategy_get(project=project, strategy_id=int(ref))
                if st is None:
                    raise ExperimentError("no such strategy")
                sv = strategies.strategy_latest(st)
            chosen_versions.append(sv)
        if request.POST.get("preview"):
            previews = []
            for sv in chosen_versions:
                plan = runs.experiment_plan(
                    project=project,
                    set_version=version,
                    strategy_version=sv,
                    endpoint=endpoint,
                    samples=samples,
                )
                previews.append(
                    {
                        "strategy": str(sv) if sv else "as saved",
                        "items": len(plan.items),
                        "not_applicable": [p for p in plan.items if not p.applicable],
                        "estimate": plan.job.estimate if plan.job else None,
                    }
                )
            _, membership = project_access(request, project_id, "editor")
            return render(
                request,
                "experiments/confirm.html",
                page_context(
                    request,
                    project,
                    membership,
                    eval_set=s,
                    version=version,
                    previews=previews,
                    post=request.POST,
                    chosen=chosen,
                    samples=samples,
                ),
            )
        started = []
        for sv in chosen_versions:
            started.append(
                runs.experiment_start(
                    project=project,
                    set_version=version,
                    strategy_version=sv,
                    endpoint=endpoint,
                    samples=samples,
                    user=request.user,
                )
            )
    except ValueError:
        return _fail(request, ExperimentError("a whole number was expected"), here)
    except ExperimentError as exc:
        return _fail(request, exc, here)
    if len(started) == 1:
        return redirect("experiments:experiment", project_id=project.pk, experiment_id=started[0].pk)
    return redirect(
        reverse("experiments:compare", kwargs={"project_id": project.pk})
        + "?ids="
        + ",".join(str(e.pk) for e in started)
    )


def _metric_rows(comparison: dict[str, Any] | None) -> list[dict[str, Any]]:
    return list((comparison or {}).get("metrics") or [])


@require_GET
def experiment_detail(request: HttpRequest, project_id: int, experiment_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "viewer")
    e = _exp_or_404(project, experiment_id)
    summary = e.summary or {}
    comparison = summary.get("vs_control")
    ctx = page_context(
        request,
        project,
        membership,
        exp=e,
        progress=selectors.experiment_progress(e),
        comparison=comparison,
        metric_rows=_metric_rows(comparison),
        items=selectors.experiment_items(exp=e) if e.summary else [],
        control_only=summary.get("arm") == "control",
    )
    if getattr(request, "htmx", False):
        resp = render(request, "experiments/_progress.html", ctx)
        if e.finished and request.GET.get("was_running"):
            resp["HX-Refresh"] = "true"
        return resp
    return render(request, "experiments/experiment.html", ctx)


@require_POST
def experiment_cancel(request: HttpRequest, project_id: int, experiment_id: int) -> HttpResponse:
    project, _ = project_access(request, project_id, "editor")
    e = _exp_or_404(project, experiment_id)
    runs.experiment_cancel(experiment=e)
    return redirect("experiments:experiment", project_id=project.pk, experiment_id=e.pk)


def _answers(exp: Experiment, ei: ExperimentItem, arm: str) -> list[dict[str, Any]]:
    vid = ei.control_variant_id if arm == "control" else ei.strategy_variant_id
    if not vid:
        return []
    results: dict[int, list[CheckResult]] = {}
    for r in CheckResult.objects.filter(experiment=exp, item_id=ei.item_id, arm=arm).order_by("check_id"):
        results.setdefault(r.sample, []).append(r)
    return [
        {"run": r, "results": results.get(r.sample, [])}
        for r in ReplayRun.objects.filter(variant_id=vid).order_by("sample")
    ]


def _context_text(blocks: list[Any], params: dict[str, Any]) -> str:
    return ablation.render_transcript(ablation.render_request(blocks, params).get("messages") or [])


@require_GET
def experiment_item(request: HttpRequest, project_id: int, experiment_id: int, item_id: int) -> HttpResponse:
    """One item of an experiment: what the strategy did to its context (diffed), each answer of
    both arms with every check's result and evidence, and the first answers diffed."""
    project, membership = project_access(request, project_id, "viewer")
    e = _exp_or_404(project, experiment_id)
    ei = (
        ExperimentItem.objects.filter(experiment=e, item_id=item_id)
        .select_related("item", "item__context")
        .first()
    )
    if ei is None:
        raise Http404("no such item in this experiment")
    snap = ei.item.context.snapshot
    blocks = context_blocks(snap)
    params = context_params(snap)
    after = blocks
    if ei.applicable and ei.operations and not ei.failed:
        try:
            after = ablation.apply_operations(blocks, ei.operations)
        except Exception:  # noqa: BLE001 - shown as not applied; the experiment recorded why
            after = blocks
    control = _answers(e, ei, "control")
    strategy = _answers(e, ei, "strategy")
    first_c = next((a["run"] for a in control if a["run"].status == "done"), None)
    first_s = next((a["run"] for a in strategy if a["run"].status == "done"), None)
    out = snap.get("output") if isinstance(snap.get("output"), dict) else {}
    return render(
        request,
        "experiments/item.html",
        page_context(
            request,
            project,
            membership,
            exp=e,
            ei=ei,
            control=control,
            strategy=strategy,
            reference=(out or {}).get("text") or "",
            context_diff=textdiff.prose_diff(_context_text(blocks, params), _context_text(after, params)),
            answer_diff=textdiff.prose_diff(
                first_c.output_text if first_c else "", first_s.output_text if first_s else ""
            )
            if first_s
            else None,
            checks=[(c, checks_mod.describe(c)) for c in [*e.set_version.checks, *ei.item.checks]],
        ),
    )


@require_GET
def compare(request: HttpRequest, project_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "viewer")
    raw = request.GET.get("ids") or ",".join(request.GET.getlist("id"))
    ctx = page_context(request, project, membership, error=None, result=None, waiting=None, pending=[])
    try:
        ids = [int(x) for x in raw.split(",") if x.strip()]
        ctx["result"] = selectors.compare(project=project, experiment_ids=ids)
    except ValueError:
        ctx["error"] = "experiment ids separated by commas"
    except Conflict as exc:
        if "no results yet" not in exc.detail:
            ctx["error"] = exc.detail
        else:
            # Still running: the page looks again until every experiment has its figures, and
            # shows how far each one that has none yet has got.
            ctx["waiting"] = exc.detail
            ctx["pending"] = selectors.compare_pending(project=project, experiment_ids=ids)
    except ExperimentError as exc:
        ctx["error"] = exc.detail
    return render(request, "experiments/compare.html", ctx, status=400 if ctx["error"] else 200)


@require_GET
def compare_item(request: HttpRequest, project_id: int, a_id: int, b_id: int, item_id: int) -> HttpResponse:
    """One item under two experiments: their contexts and first answers diffed."""
    project, membership = project_access(request, project_id, "viewer")
    a, b = _exp_or_404(project, a_id), _exp_or_404(project, b_id)
    sides: list[dict[str, Any]] = []
    firsts: list[str] = []
    texts: list[str] = []
    for e in (a, b):
        ei = (
            ExperimentItem.objects.filter(experiment=e, item_id=item_id)
            .select_related("item", "item__context")
            .first()
        )
        if ei is None:
            raise Http404("no such item in these experiments")
        snap = ei.item.context.snapshot
        blocks = context_blocks(snap)
        after = blocks
        arm = "strategy" if ei.strategy_variant_id else "control"
        if arm == "strategy":
            try:
                after = ablation.apply_operations(blocks, ei.operations)
            except Exception:  # noqa: BLE001 - the page shows the saved context then
                after = blocks
        answers = _answers(e, ei, arm)
        first = next((x["run"] for x in answers if x["run"].status == "done"), None)
        firsts.append(first.output_text if first is not None else "")
        texts.append(_context_text(after, context_params(snap)))
        sides.append(
            {
                "exp": e,
                "ei": ei,
                "arm": arm,
                "answers": answers,
                "first": first,
                "text": _context_text(after, context_params(snap)),
            }
        )
    return render(
        request,
        "experiments/compare_item.html",
        page_context(
            request,
            project,
            membership,
            a=sides[0],
            b=sides[1],
            answer_diff=textdiff.prose_diff(firsts[0], firsts[1]),
            context_diff=textdiff.prose_diff(texts[0], texts[1]),
        ),
    )


@require_GET
def sweep_detail(request: HttpRequest, project_id: int, sweep_id: int) -> HttpResponse:
    """A sweep: one experiment per value of a strategy's parameter, and the compression-ratio
    versus fidelity curve with its knee (where fidelity starts to fall faster than tokens)."""
    project, membership = project_access(request, project_id, "viewer")
    sweep = selectors.sweep_get(project=project, sweep_id=sweep_id)
    if sweep is None:
        raise Http404("no such sweep")
    curve = selectors.sweep_curve(sweep=sweep)
    return render(
        request,
        "experiments/sweep.html",
        page_context(
            request,
            project,
            membership,
            sweep=sweep,
            curve=curve,
            figure=selectors.sweep_figure(curve=curve, parameter=sweep.parameter),
            finished=all(p["status"] in EXPERIMENT_FINISHED for p in curve["points"]),
        ),
    )


@require_POST
def sweep_create(request: HttpRequest, project_id: int) -> HttpResponse:
    project, _ = project_access(request, project_id, "editor")
    try:
        s = _set_or_404(project, int(request.POST.get("set") or 0))
    except ValueError:
        raise Http404("no such set") from None
    here = reverse("experiments:set", kwargs={"project_id": project.pk, "set_id": s.pk})
    try:
        st = selectors.strategy_get(project=project, strategy_id=int(request.POST.get("strategy") or 0))
        if st is None:
            raise ExperimentError("choose a strategy")
        raw = [v.strip() for v in (request.POST.get("values") or "").split(",") if v.strip()]
        values: list[Any] = []
        for v in raw:
            try:
                values.append(json.loads(v))
            except ValueError:
                values.append(v)
        version = selectors.version_get(eval_set=s, number=int(request.POST.get("version") or 0) or None)
        if version is None:
            raise ExperimentError("no such version")
        exps = runs.sweep_start(
            project=project,
            set_version=version,
            strategy=st,
            parameter=(request.POST.get("parameter") or "").strip(),
            values=values,
            samples=int(request.POST.get("samples") or 2),
            user=request.user,
        )
    except ValueError:
        return _fail(request, ExperimentError("a whole number was expected"), here)
    except ExperimentError as exc:
        return _fail(request, exc, here)
    assert exps[0].sweep_id is not None
    return redirect("experiments:sweep", project_id=project.pk, sweep_id=exps[0].sweep_id)
