"""Replay pages: jobs (confirm, progress, results, side-by-side) and the project's endpoints."""

from __future__ import annotations

import json
from typing import Any, cast

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core.access import page_context, project_access
from core.services import project_triage_set
from ingest import selectors as ingest_selectors
from replay import selectors
from replay.errors import ReplayError
from replay.forms import TriageForm
from replay.models import ModelEndpoint, ReplayRun
from replay.services import jobs, model_endpoints, triage
from replay.types import ReplayJobSpec

SPEC_FIELDS = ("snapshot_id", "session_id", "kind", "block", "to", "anchor")
# The overrides the confirm page offers: (field, type, label). Empty means "as saved".
OVERRIDE_FIELDS: tuple[tuple[str, Any, str], ...] = (
    ("temperature", float, "temperature"),
    ("top_p", float, "top p"),
    ("max_tokens", int, "max tokens"),
    ("seed", int, "seed"),
)


_page = page_context


def _spec_from_post(data: Any) -> ReplayJobSpec:
    """The job spec of the confirm page's form; replay_job_plan checks its fields."""
    spec: dict[str, Any] = {k: data.get(k) for k in SPEC_FIELDS if data.get(k)}
    spec.setdefault("kind", "plain")
    try:
        spec["samples"] = int(data.get("samples") or 3)
    except ValueError:
        raise ReplayError("samples must be a whole number") from None
    params: dict[str, Any] = {}
    for name, parse, label in OVERRIDE_FIELDS:
        raw = (data.get(name) or "").strip()
        if not raw:
            continue
        try:
            params[name] = parse(raw)
        except ValueError:
            raise ReplayError(f"{label} must be {'a whole number' if parse is int else 'a number'}") from None
    if params:
        spec["params"] = params
    flt = {
        k: data.get(f"filter_{k}")
        for k in ("q", "agent", "model", "tier", "min_watermark")
        if data.get(f"filter_{k}")
    }
    if flt:
        if "min_watermark" in flt:
            try:
                flt["min_watermark"] = float(flt["min_watermark"])
            except ValueError:
                raise ReplayError("the minimum watermark must be a number") from None
        spec["filter"] = flt
    if data.get("operations"):
        try:
            spec["operations"] = json.loads(data["operations"])
        except ValueError:
            raise ReplayError("operations must be a JSON list") from None
    return cast(ReplayJobSpec, spec)


@require_GET
def replay_list(request: HttpRequest, project_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "viewer")
    return render(
        request,
        "replay/list.html",
        _page(
            request,
            project,
            membership,
            jobs=selectors.jobs_list(project=project),
            endpoints=selectors.endpoints_list(project=project),
        ),
    )


@require_POST
def replay_create(request: HttpRequest, project_id: int) -> HttpResponse:
    """First POST: the confirm page with what the job will cost. POST with confirm=1: start it."""
    project, membership = project_access(request, project_id, "editor")
    endpoints = selectors.endpoints_list(project=project)
    endpoint = None
    if request.POST.get("endpoint"):
        try:
            endpoint = selectors.endpoint_get(project=project, endpoint_id=int(request.POST["endpoint"]))
        except ValueError:
            endpoint = None
        if endpoint is None:
            raise Http404("no such endpoint")
    else:
        endpoint = next((e for e in endpoints if e.is_default), None)
    ctx: dict[str, Any] = _page(
        request,
        project,
        membership,
        endpoints=endpoints,
        endpoint=endpoint,
        post=request.POST,
    )
    try:
        spec = _spec_from_post(request.POST)
        ctx["spec"] = spec
        ctx["spec_json"] = json.dumps(spec.get("operations")) if spec.get("operations") else ""
        plan = jobs.replay_job_plan(project=project, spec=spec, endpoint=endpoint)
        ctx["plan"] = plan
        ctx["estimate"] = plan.estimate
        if len(plan.snapshots) == 1:
            ctx["saved_params"] = selectors.params_shown(plan.snapshots[0].params)
        if endpoint is None:
            raise ReplayError("this project has no model endpoint yet; an admin can add one")
        if request.POST.get("confirm") == "1":
            job = jobs.replay_job_create(project=project, spec=spec, endpoint=endpoint, user=request.user)
            return redirect("replay:detail", project_id=project.pk, job_id=job.pk)
    except ReplayError as exc:
        ctx["error"] = exc.detail
        return render(request, "replay/confirm.html", ctx, status=exc.status_code)
    return render(request, "replay/confirm.html", ctx)


def _job_or_404(project: Any, job_id: int) -> Any:
    job = selectors.job_get(project=project, job_id=job_id)
    if job is None:
        raise Http404("no such replay job")
    return job


@require_GET
def replay_detail(request: HttpRequest, project_id: int, job_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "viewer")
    job = _job_or_404(project, job_id)
    results = selectors.job_results(job=job)
    refs = [t["snapshot_ref"] for t in results["turns"]]
    kept = ingest_selectors.snapshots_existing(project_id=project.pk, snapshot_refs=refs)
    ctx = _page(
        request,
        project,
        membership,
        job=job,
        results=results,
        expired_refs={r for r in refs if r not in kept},
    )
    if getattr(request, "htmx", False):
        return render(request, "replay/_progress.html", ctx)
    figures = []
    if job.kind == "loo":
        for t in results["turns"]:
            fig = selectors.loo_figure(turn=t)
            if fig is not None:
                figures.append(fig)
    ctx["loo_figure"] = figures[0] if figures else None
    ctx["attribution_figure"] = None
    if job.kind == "attribution" and results["turns"]:
        t = results["turns"][0]
        turn_url = reverse(
            "ingest:turn", kwargs={"project_id": project.pk, "session_id": t["session_id"], "turn": t["turn"]}
        )
        ctx["attribution_figure"] = selectors.attribution_figure(turn=t, turn_url=turn_url)
        ctx["attribution_turn_url"] = turn_url
    return render(request, "replay/detail.html", ctx)


@require_GET
def replay_progress(request: HttpRequest, project_id: int, job_id: int) -> HttpResponse:
    """The progress partial htmx polls; once a job that was running ends, the page reloads to
    show its full results (charts included)."""
    project, membership = project_access(request, project_id, "viewer")
    job = _job_or_404(project, job_id)
    results = selectors.job_results(job=job, attribute=False)  # the partial shows no chart
    resp = render(
        request, "replay/_progress.html", _page(request, project, membership, job=job, results=results)
    )
    if job.finished and request.GET.get("was_running"):
        resp["HX-Refresh"] = "true"
    return resp


@require_POST
def replay_cancel(request: HttpRequest, project_id: int, job_id: int) -> HttpResponse:
    project, _ = project_access(request, project_id, "editor")
    job = _job_or_404(project, job_id)
    jobs.replay_job_cancel(job=job)
    return redirect("replay:detail", project_id=project.pk, job_id=job.pk)


@require_GET
def replay_compare(request: HttpRequest, project_id: int, job_id: int, run_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "viewer")
    job = _job_or_404(project, job_id)
    run = ReplayRun.objects.select_related("variant").filter(job=job, pk=run_id).first()
    if run is None:
        raise Http404("no such run")
    cmp = selectors.run_compare(job=job, run=run)
    return render(
        request,
        "replay/compare.html",
        _page(
            request,
            project,
            membership,
            job=job,
            run=run,
            request_body_json=json.dumps(run.request_body, indent=1, ensure_ascii=False)[:200_000]
            if run.request_body is not None
            else "",
            **cmp,
        ),
    )


# --- endpoints -----------------------------------------------------------------
@require_http_methods(["GET", "POST"])
def endpoint_list(request: HttpRequest, project_id: int) -> HttpResponse:
    """Admins list and add endpoints. API keys are write-only: the page never shows one."""
    project, membership = project_access(request, project_id, "admin")
    ctx: dict[str, Any] = _page(request, project, membership, modes=ModelEndpoint.Mode.choices)
    status = 200
    if request.method == "POST":
        data = request.POST
        try:
            raw_params = (data.get("default_params") or "").strip()
            params = json.loads(raw_params) if raw_params else {}
            if not isinstance(params, dict):
                raise ReplayError("default parameters must be a JSON object")
            model_endpoints.endpoint_create(
                project=project,
                name=data.get("name", ""),
                base_url=data.get("base_url", ""),
                model=data.get("model", ""),
                api_key=data.get("api_key", ""),
                mode=data.get("mode") or ModelEndpoint.Mode.CHAT,
                default_params=params,
                embeddings_model=data.get("embeddings_model", ""),
                timeout_s=float(data.get("timeout_s") or 60),
                is_default=data.get("is_default") == "on",
                chat_drops_later_system=data.get("chat_drops_later_system") == "on",
            )
            return redirect(reverse("replay:endpoints", kwargs={"project_id": project.pk}))
        except ValueError:
            ctx["error"] = "default parameters must be valid JSON and the timeout a number"
            status = 400
        except ReplayError as exc:
            ctx["error"] = exc.detail
            status = exc.status_code
        # Everything typed comes back except the key.
        ctx["form"] = {
            k: data.get(k, "")
            for k in (
                "name", "base_url", "model", "mode", "default_params", "embeddings_model", "timeout_s",
                "chat_drops_later_system",
            )
        }
    ctx["endpoints"] = selectors.endpoints_list(project=project)
    return render(request, "replay/endpoints.html", ctx, status=status)


@require_POST
def endpoint_test(request: HttpRequest, project_id: int, endpoint_id: int) -> HttpResponse:
    project, membership = project_access(request, project_id, "admin")
    ep = selectors.endpoint_get(project=project, endpoint_id=endpoint_id)
    if ep is None:
        raise Http404("no such endpoint")
    ok, detail = model_endpoints.endpoint_test(endpoint=ep)
    ep.refresh_from_db()
    if getattr(request, "htmx", False):
        return render(request, "replay/_endpoint_row.html", {"project": project, "ep": ep})
    return redirect(reverse("replay:endpoints", kwargs={"project_id": project.pk}))


@require_POST
def endpoint_default(request: HttpRequest, project_id: int, endpoint_id: int) -> HttpResponse:
    project, _ = project_access(request, project_id, "admin")
    ep = selectors.endpoint_get(project=project, endpoint_id=endpoint_id)
    if ep is None:
        raise Http404("no such endpoint")
    model_endpoints.endpoint_set_default(endpoint=ep)
    return redirect(reverse("replay:endpoints", kwargs={"project_id": project.pk}))


@require_POST
def triage_cancel(request: HttpRequest, project_id: int, triage_id: int) -> HttpResponse:
    """Cancel a turn's auto-triage and its job; back to the page it was cancelled from."""
    project, _ = project_access(request, project_id, "editor")
    t = triage.triage_get(project=project, triage_id=triage_id)
    if t is None:
        raise Http404("no such triage")
    triage.triage_cancel(triage_row=t)
    nxt = request.POST.get("next") or ""
    if nxt.startswith(f"/p/{project.pk}/") and "//" not in nxt:
        return redirect(nxt)
    return redirect("ingest:turn", project_id=project.pk, session_id=t.session_id, turn=t.turn)


# --- auto-triage settings (a section of the project settings page: replay.extensions) ----------
@require_http_methods(["GET", "POST"])
def triage_settings(request: HttpRequest, project_id: int) -> HttpResponse:
    """The project's auto-triage switch and daily budget (admins). A valid change goes back to the
    settings page; an invalid one comes back here with the reasons, as typed."""
    project, membership = project_access(request, project_id, "admin")
    form = TriageForm(request.POST) if request.method == "POST" else TriageForm.for_project(project)
    if request.method == "POST":
        if form.is_valid():
            enabled, calls = form.cleaned_data["enabled"], form.cleaned_data["daily_calls"]
            project_triage_set(project=project, enabled=enabled, daily_calls=calls)
            messages.success(
                request,
                f"Auto-triage is on, within {calls} model calls a day." if enabled else "Auto-triage is off.",
            )
            return redirect(reverse("ingest:settings", kwargs={"project_id": project.pk}) + "#triage")
    status = 400 if form.errors else 200
    return render(
        request, "replay/triage_settings.html", _page(request, project, membership, triage_form=form),
        status=status,
    )
