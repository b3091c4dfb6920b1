"""Experiments API: evaluation sets (create, add and remove items, checks, export as JSONL;
`ctxobs push --dataset` reads a file into items), strategies, experiments (start, read, cancel),
comparisons and sweeps. Thin handlers."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, StreamingHttpResponse
from django.urls import reverse
from ninja import Query, Router, Status

from core.auth import Caller, ProjectReadAuth
from core.auth import request_caller as caller
from core.models import SCOPE_REPLAY, Project
from core.schemas import Detail
from experiments import selectors
from experiments.errors import ExperimentError, NotFound
from experiments.models import EvalSet, EvalSetVersion, Experiment, Strategy
from experiments.schemas import (
    ChecksIn,
    CompareOut,
    ExperimentIn,
    ExperimentOut,
    ItemChecksIn,
    ItemOut,
    ItemsIn,
    RemoveIn,
    SetIn,
    SetOut,
    StrategyIn,
    StrategyOut,
    StrategyUpdateIn,
    SweepIn,
)
from experiments.services import runs, sets, strategies
from replay import selectors as replay_selectors

router = Router(tags=["experiments"])

READ = ProjectReadAuth("viewer")
EDIT = ProjectReadAuth("editor", key_scope=SCOPE_REPLAY)
# Experiments spend the model provider's budget: like replays, a key needs the replay scope.
RUN = ProjectReadAuth("editor", key_scope=SCOPE_REPLAY)


def _user(c: Caller) -> Any:
    return c.membership.user if c.membership else None


def _set(project: Project, ref: str | int) -> EvalSet:
    """The set named REF, else the set whose id REF is (a name that is a number wins)."""
    if "\x00" in str(ref):
        raise NotFound("no such evaluation set in this project")
    s = selectors.set_by_name(project=project, name=str(ref))
    if s is None and str(ref).isdigit() and len(str(ref)) < 19:
        s = selectors.set_get(project=project, set_id=int(ref))
    if s is None:
        raise NotFound(f"no evaluation set {str(ref)[:100]!r} in this project")
    return s


def _strategy(project: Project, ref: str) -> Strategy:
    """The strategy named REF, else the one whose id REF is (a name that is a number wins)."""
    if "\x00" in ref:
        raise NotFound("no such strategy in this project")
    s = selectors.strategy_by_name(project=project, name=ref)
    if s is None and ref.isdigit() and len(ref) < 19:
        s = selectors.strategy_get(project=project, strategy_id=int(ref))
    if s is None:
        raise NotFound(f"no strategy {ref[:100]!r} in this project")
    return s


def _version_out(v: EvalSetVersion, *, items: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "number": v.number,
        "note": v.note,
        "n_items": v.n_items,
        "checks": v.checks,
        "created_at": v.created_at,
    }
    if items:
        out["items"] = [_item_out(it) for it in v.items.order_by("position")]
    return out


def _item_out(it: Any) -> dict[str, Any]:
    return {
        "id": it.pk,
        "position": it.position,
        "snapshot_id": str(it.snapshot_uuid) if it.snapshot_uuid else None,
        "session_id": it.session_id,
        "turn": it.turn,
        "agent": it.agent,
        "source": it.source,
        "checks": it.checks,
        "suggestions": it.suggestions,
    }


def _set_out(
    s: EvalSet, *, rejected: list[dict[str, Any]] | None = None, items: bool = False
) -> dict[str, Any]:
    versions = list(s.versions.order_by("-number"))
    return {
        "id": s.pk,
        "name": s.name,
        "description": s.description,
        "latest_version": versions[0].number if versions else 0,
        "versions": [_version_out(v, items=items and i == 0) for i, v in enumerate(versions)],
        "rejected": rejected or [],
        "url": reverse("experiments:set", kwargs={"project_id": s.project_id, "set_id": s.pk}),
    }


def _seeds(project: Project, payload: SetIn | ItemsIn) -> tuple[list[sets.ItemSeed], list[dict[str, Any]]]:
    """The items PAYLOAD names (every way it names them), and those refused with their reasons."""
    given = payload.model_fields_set
    if not given & {"snapshot_ids", "filter", "items"}:
        raise ExperimentError("name the items: snapshot_ids, filter or items")
    seeds: list[sets.ItemSeed] = []
    rejected: list[dict[str, Any]] = []
    if "snapshot_ids" in given:
        seeds += sets.seeds_from_turns(project=project, snapshot_ids=payload.snapshot_ids, source="api")
    if "filter" in given:
        found = sets.seeds_from_filter(project=project, flt=payload.filter.dict(exclude_none=True))
        if not found:
            raise NotFound("no stored turn matches the filter")
        seeds += found
    if "items" in given:
        good, rejected = sets.seeds_from_wire(payload.items, source="api")
        seeds += good
    return seeds, rejected


ERRORS = {400: Detail, 401: Detail, 403: Detail, 404: Detail, 409: Detail}


@router.get("/datasets", auth=READ, response={200: list[SetOut], 401: Detail}, summary="Evaluation sets")
def datasets_list(request: HttpRequest) -> list[dict[str, Any]]:
    return [_set_out(s) for s in selectors.sets_list(project=caller(request).project)]


@router.post(
    "/datasets",
    auth=EDIT,
    response={201: SetOut, 207: SetOut, **ERRORS},
    summary="Create an evaluation set (items from turns, a filter or the wire form)",
    description="201 when every item was taken; 207 when some were refused (listed in `rejected` with "
    "their field, message and hint) and the others stored.",
)
def datasets_create(request: HttpRequest, payload: SetIn) -> Status[Any]:
    c = caller(request)
    seeds, rejected = _seeds(c.project, payload)
    if rejected and not seeds:
        raise ExperimentError("every item was refused", extra={"rejected": rejected})
    s = sets.eval_set_create(
        project=c.project,
        name=payload.name,
        description=payload.description,
        seeds=seeds,
        checks=payload.checks,
        user=_user(c),
    )
    return Status(207 if rejected else 201, _set_out(s, rejected=rejected, items=True))


@router.get(
    "/datasets/{ref}",
    auth=READ,
    response={200: SetOut, 401: Detail, 404: Detail},
    summary="An evaluation set: its versions, and the latest one's items",
)
def datasets_get(request: HttpRequest, ref: str) -> dict[str, Any]:
    return _set_out(_set(caller(request).project, ref), items=True)


@router.get(
    "/datasets/{ref}/versions/{number}",
    auth=READ,
    response={200: list[ItemOut], 401: Detail, 404: Detail},
    summary="The items of one version",
)
def datasets_version(request: HttpRequest, ref: str, number: int) -> list[dict[str, Any]]:
    v = selectors.version_get(eval_set=_set(caller(request).project, ref), number=number)
    if v is None:
        raise NotFound(f"no version {number} of this set")
    return [_item_out(it) for it in v.items.order_by("position")]


@router.post(
    "/datasets/{ref}/items",
    auth=EDIT,
    response={201: SetOut, 207: SetOut, **ERRORS},
    summary="Add items: a new version",
)
def datasets_items_add(request: HttpRequest, ref: str, payload: ItemsIn) -> Status[Any]:
    c = caller(request)
    s = _set(c.project, ref)
    seeds, rejected = _seeds(c.project, payload)
    if rejected and not seeds:
        raise ExperimentError("every item was refused", extra={"rejected": rejected})
    sets.eval_set_items_add(eval_set=s, seeds=seeds, user=_user(c))
    return Status(207 if rejected else 201, _set_out(s, rejected=rejected, items=True))


@router.post(
    "/datasets/{ref}/items/remove",
    auth=EDIT,
    response={201: SetOut, **ERRORS},
    summary="Remove items: a new version",
)
def datasets_items_remove(request: HttpRequest, ref: str, payload: RemoveIn) -> Status[Any]:
    c = caller(request)
    s = _set(c.project, ref)
    sets.eval_set_items_remove(eval_set=s, item_ids=payload.item_ids, user=_user(c))
    return Status(201, _set_out(s, items=True))


@router.put(
    "/datasets/{ref}/checks",
    auth=EDIT,
    response={200: SetOut, **ERRORS},
    summary="Set the set-level checks (a new version once an experiment used the latest)",
)
def datasets_checks(request: HttpRequest, ref: str, payload: ChecksIn) -> dict[str, Any]:
    c = caller(request)
    s = _set(c.project, ref)
    sets.eval_set_checks_set(eval_set=s, checks=payload.checks, user=_user(c))
    return _set_out(s, items=True)


@router.put(
    "/datasets/{ref}/items/{item_id}/checks",
    auth=EDIT,
    response={200: ItemOut, **ERRORS},
    summary="Set an item's checks and confirm its suggested ones",
)
def datasets_item_checks(
    request: HttpRequest, ref: str, item_id: int, payload: ItemChecksIn
) -> dict[str, Any]:
    c = caller(request)
    s = _set(c.project, ref)
    item = sets.eval_item_checks_set(
        eval_set=s, item_id=item_id, checks=payload.checks, confirm=payload.confirm, user=_user(c)
    )
    return _item_out(item)


@router.get(
    "/datasets/{ref}/export",
    auth=READ,
    response={200: None, 401: Detail, 404: Detail},
    summary="The set as JSONL: a header line, then each item in the wire form with its checks",
)
def datasets_export(request: HttpRequest, ref: str, version: int | None = None) -> StreamingHttpResponse:
    s = _set(caller(request).project, ref)
    v = selectors.version_get(eval_set=s, number=version)
    if v is None:
        raise NotFound("no such version of this set")
    resp = StreamingHttpResponse(sets.eval_set_export(version=v), content_type="application/x-ndjson")
    resp["Content-Disposition"] = f'attachment; filename="{s.pk}-v{v.number}.jsonl"'
    return resp


# --- strategies ---------------------------------------------------------------------------------
def _strategy_out(s: Strategy) -> dict[str, Any]:
    v = strategies.strategy_latest(s)
    return {
        "id": s.pk,
        "name": s.name,
        "description": s.description,
        "version": v.number,
        "operations": v.operations,
    }


@router.get("/strategies", auth=READ, response={200: list[StrategyOut], 401: Detail}, summary="Strategies")
def strategies_list(request: HttpRequest) -> list[dict[str, Any]]:
    return [_strategy_out(s) for s in selectors.strategies_list(project=caller(request).project)]


@router.post("/strategies", auth=EDIT, response={201: StrategyOut, **ERRORS}, summary="Create a strategy")
def strategies_create(request: HttpRequest, payload: StrategyIn) -> Status[Any]:
    s = strategies.strategy_create(
        project=caller(request).project,
        name=payload.name,
        operations=payload.operations,
        description=payload.description,
    )
    return Status(201, _strategy_out(s))


@router.put(
    "/strategies/{ref}",
    auth=EDIT,
    response={200: StrategyOut, **ERRORS},
    summary="A new version of a strategy",
)
def strategies_update(request: HttpRequest, ref: str, payload: StrategyUpdateIn) -> dict[str, Any]:
    s = _strategy(caller(request).project, ref)
    strategies.strategy_update(strategy=s, operations=payload.operations, description=payload.description)
    return _strategy_out(s)


# --- experiments ----------------------------------------------------------------------------------
def experiment_out(e: Experiment) -> dict[str, Any]:
    summary = e.summary or {}
    return {
        "id": e.pk,
        "title": e.title,
        "status": e.status,
        "reason": e.reason,
        "dataset": e.set_version.eval_set.name,
        "version": e.set_version.number,
        "strategy": e.strategy_label,
        "endpoint": e.endpoint.name,
        "samples": e.samples,
        "n_items": e.n_items,
        "n_not_applicable": e.n_not_applicable,
        "progress": selectors.experiment_progress(e),
        "vs_control": summary.get("vs_control"),
        "figures": summary.get("figures") or [],
        "created_at": e.created_at,
        "finished_at": e.finished_at,
        "url": reverse("experiments:experiment", kwargs={"project_id": e.project_id, "experiment_id": e.pk}),
    }


def _endpoint(project: Project, endpoint_id: int | None) -> Any:
    if endpoint_id is None:
        return None
    ep = replay_selectors.endpoint_get(project=project, endpoint_id=endpoint_id)
    if ep is None:
        raise NotFound("no such endpoint in this project")
    return ep


@router.post(
    "/experiments",
    auth=RUN,
    response={201: ExperimentOut, **ERRORS},
    summary="Start an experiment: a strategy (or as saved) over a set version, on the replay workers",
)
def experiments_create(request: HttpRequest, payload: ExperimentIn) -> Status[Any]:
    c = caller(request)
    s = _set(c.project, payload.dataset)
    v = selectors.version_get(eval_set=s, number=payload.version)
    if v is None:
        raise NotFound(f"no version {payload.version} of this set")
    sv = None
    if payload.strategy:
        sv = strategies.strategy_latest(_strategy(c.project, payload.strategy))
    params = {"temperature": payload.temperature} if payload.temperature is not None else {}
    e = runs.experiment_start(
        project=c.project,
        set_version=v,
        strategy_version=sv,
        endpoint=_endpoint(c.project, payload.endpoint_id),
        samples=payload.samples,
        params=params,
        user=_user(c),
    )
    return Status(201, experiment_out(e))


@router.get(
    "/experiments", auth=READ, response={200: list[ExperimentOut], 401: Detail}, summary="Experiments"
)
def experiments_list(request: HttpRequest) -> list[dict[str, Any]]:
    return [experiment_out(e) for e in selectors.experiments_list(project=caller(request).project, limit=100)]


@router.get(
    "/experiments/compare",
    auth=READ,
    response={200: CompareOut, 400: Detail, 401: Detail, 404: Detail, 409: Detail},
    summary="Experiments on one set version side by side: each metric's paired difference against the first",
)
def experiments_compare(
    request: HttpRequest,
    ids: str = Query(  # type: ignore[type-arg]
        ...,
        pattern=r"^[1-9][0-9]{0,17}(,[1-9][0-9]{0,17}){1,5}$",
        description="2 to 6 experiment ids separated by commas; the first is the base",
    ),
) -> dict[str, Any]:
    c = caller(request)
    try:
        wanted = [int(x) for x in ids.split(",") if x.strip()]
    except ValueError:
        raise ExperimentError("ids: experiment ids separated by commas, e.g. 3,4") from None
    res = selectors.compare(project=c.project, experiment_ids=wanted)
    return {
        "set": res["set_version"].eval_set.name,
        "version": res["set_version"].number,
        "base": res["base"].pk,
        "rows": [{"experiment": r["experiment"].pk, **r["comparison"]} for r in res["rows"]],
        "url": reverse("experiments:compare", kwargs={"project_id": c.project.pk})
        + "?ids="
        + ",".join(map(str, wanted)),
    }


@router.get(
    "/experiments/{experiment_id}",
    auth=READ,
    response={200: ExperimentOut, 401: Detail, 404: Detail},
    summary="An experiment: progress, and its figures against the control once evaluated",
)
def experiments_get(request: HttpRequest, experiment_id: int) -> dict[str, Any]:
    e = selectors.experiment_get(project=caller(request).project, experiment_id=experiment_id)
    if e is None:
        raise NotFound("no such experiment")
    return experiment_out(e)


@router.post(
    "/experiments/{experiment_id}/cancel",
    auth=RUN,
    response={200: ExperimentOut, **ERRORS},
    summary="Cancel an experiment: no further model call",
)
def experiments_cancel(request: HttpRequest, experiment_id: int) -> dict[str, Any]:
    c = caller(request)
    e = selectors.experiment_get(project=c.project, experiment_id=experiment_id)
    if e is None:
        raise NotFound("no such experiment")
    runs.experiment_cancel(experiment=e)
    e = selectors.experiment_get(project=c.project, experiment_id=experiment_id)
    assert e is not None
    return experiment_out(e)


@router.post(
    "/sweeps",
    auth=RUN,
    response={201: list[ExperimentOut], **ERRORS},
    summary="One strategy parameter over several values: one experiment per value",
)
def sweeps_create(request: HttpRequest, payload: SweepIn) -> Status[Any]:
    c = caller(request)
    s = _set(c.project, payload.dataset)
    v = selectors.version_get(eval_set=s, number=payload.version)
    if v is None:
        raise NotFound(f"no version {payload.version} of this set")
    st = _strategy(c.project, payload.strategy)
    exps = runs.sweep_start(
        project=c.project,
        set_version=v,
        strategy=st,
        parameter=payload.parameter,
        values=payload.values,
        endpoint=_endpoint(c.project, payload.endpoint_id),
        samples=payload.samples,
        user=_user(c),
    )
    return Status(201, [experiment_out(e) for e in exps])
