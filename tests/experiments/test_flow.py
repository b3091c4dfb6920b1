"""An evaluation set from stored turns, a strategy, experiments against the control, and their
comparison: on the real PostgreSQL, with the replay runs executed as a worker executes them
against a real HTTP server that answers like an OpenAI-compatible API."""

from __future__ import annotations

from typing import Any

import pytest

from experiments.models import CheckResult, Experiment
from experiments.selectors import compare, experiment_get
from experiments.services import runs, sets, strategies
from replay.models import ReplayRun
from tests import factories as f
from tests.experiments.conftest import fact_answer, run_pending
from tests.replay.helpers import post

pytestmark = pytest.mark.django_db


def _turn(i: int, *, with_memory: bool) -> dict[str, Any]:
    blocks = [f.block("system", "system", "You are a travel assistant.", pinned=True)]
    if with_memory:
        blocks.append(f.block("memory", "memory", f"Memory: booking code BK{i:03d}."))
    blocks.append(f.block("user", "user", "What is my booking code?"))
    text = f"Your booking code is BK{i:03d}." if with_memory else "Which booking?"
    return f.snapshot(
        session_id=f"s{i}",
        turn=1,
        blocks=blocks,
        output={"text": text, "tool_calls": [], "finish_reason": "stop"},
    )


def _planted_set(api: Any, project: Any, n: int = 8) -> Any:
    wires = [_turn(i, with_memory=i < n - 2) for i in range(n)]
    for w in wires:
        post(api, w)
    seeds = sets.seeds_from_turns(project=project, snapshot_ids=[w["snapshot_id"] for w in wires])
    for i, s in enumerate(seeds):
        if i < n - 2:
            s.checks = [{"type": "fact", "match": "text", "value": f"BK{i:03d}"}]
    return sets.eval_set_create(project=project, name="codes", seeds=seeds), wires


def _finish(exp: Experiment) -> Experiment:
    assert exp.job_id is not None
    run_pending(exp.job_id)
    runs.experiment_finalize(experiment_id=exp.pk)
    exp.refresh_from_db()
    return exp


def test_a_strategy_that_drops_memory_loses_exactly_the_planted_facts(
    api: Any, private_project: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    eval_set, _ = _planted_set(api, private_project)
    stub_server.answer = fact_answer({f"BK{i:03d}": f"BK{i:03d}" for i in range(8)})
    version = sets.latest_version(eval_set)
    drop = strategies.strategy_create(
        project=private_project, name="no memory", operations=[{"op": "remove", "key": "memory"}]
    )
    exp = runs.experiment_start(
        project=private_project,
        set_version=version,
        strategy_version=strategies.strategy_latest(drop),
        samples=3,
    )
    exp = _finish(exp)
    assert exp.status == Experiment.Status.DONE, exp.reason
    # The two items without a memory block: not applicable, not failed.
    assert exp.n_not_applicable == 2
    comparison = exp.summary["vs_control"]
    fidelity = next(m for m in comparison["metrics"] if m["name"] == "fact_fidelity")
    assert fidelity["a"]["mean"] == pytest.approx(1.0)
    assert fidelity["b"]["mean"] == pytest.approx(0.0)
    assert fidelity["changed"] and fidelity["direction"] == "worse", fidelity["verdict"]
    lost_items = {int(x["item"]) for x in comparison["flipped"] if x["lost"]}
    planted = {it.pk for it in version.items.all() if it.position < 6}
    assert lost_items == planted
    # Every answer's check result is stored with its evidence.
    results = CheckResult.objects.filter(experiment=exp)
    assert results.count() == 6 * 2 * 3
    failed = results.filter(arm="strategy", passed=False).first()
    assert failed is not None and failed.evidence


def test_the_same_strategy_twice_is_no_difference_and_pays_no_call_twice(
    api: Any, private_project: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    eval_set, _ = _planted_set(api, private_project)
    stub_server.answer = fact_answer({f"BK{i:03d}": f"BK{i:03d}" for i in range(8)})
    version = sets.latest_version(eval_set)
    keep = strategies.strategy_create(
        project=private_project,
        name="system first",
        operations=[{"op": "move", "key": "memory", "to": "end"}],
    )
    sv = strategies.strategy_latest(keep)
    a = _finish(
        runs.experiment_start(project=private_project, set_version=version, strategy_version=sv, samples=2)
    )
    calls = len(stub_server.completion_calls())
    b = _finish(
        runs.experiment_start(project=private_project, set_version=version, strategy_version=sv, samples=2)
    )
    # Every call of the second is the first's, reused.
    assert len(stub_server.completion_calls()) == calls
    assert (
        ReplayRun.objects.filter(job_id=b.job_id, reused_from__isnull=False).count()
        == ReplayRun.objects.filter(job_id=b.job_id).count()
    )
    res = compare(project=private_project, experiment_ids=[a.pk, b.pk])
    row = res["rows"][0]["comparison"]
    assert not any(m["changed"] for m in row["metrics"])
    fidelity = next(m for m in row["metrics"] if m["name"] == "fact_fidelity")
    assert "no difference" in fidelity["verdict"]
    assert row["flipped"] == []


def test_a_set_edited_while_an_experiment_runs_keeps_the_experiments_version(
    api: Any, private_project: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    eval_set, wires = _planted_set(api, private_project)
    version = sets.latest_version(eval_set)
    exp = runs.experiment_start(project=private_project, set_version=version, samples=1)
    first = version.items.order_by("position").first()
    new = sets.eval_set_items_remove(eval_set=eval_set, item_ids=[first.pk])
    assert new.number == version.number + 1 and new.n_items == version.n_items - 1
    stub_server.answer = fact_answer({f"BK{i:03d}": f"BK{i:03d}" for i in range(8)})
    exp = _finish(exp)
    assert exp.set_version_id == version.pk
    assert len(exp.summary["items"]) == version.n_items
    # The control's own figures: every planted fact stated, over the six items that carry one.
    figures = {m["name"]: m["value"] for m in exp.summary["figures"]}
    assert figures["fact_fidelity"]["mean"] == 1.0 and figures["fact_fidelity"]["n"] == 6
    assert figures["compression_ratio"]["mean"] == 1.0
    got = experiment_get(project=private_project, experiment_id=exp.pk)
    assert got is not None and got.set_version.number == 1
