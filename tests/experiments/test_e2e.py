"""Experiments on the real stack: PostgreSQL, Redis, the Celery workers (replay runs on the
replay worker, the evaluation on the default worker once the job ends) and the embedded local
model (Gemma 3 270M behind llama.cpp's OpenAI-compatible server)."""

from __future__ import annotations

from typing import Any

import pytest

from experiments.models import Experiment
from experiments.selectors import compare
from experiments.services import runs, sets, strategies
from tests import factories as f
from tests.replay.helpers import planted_fact_snapshot, post
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
FAST = {"temperature": 0, "max_tokens": 24}


def _wait(exp: Experiment, timeout: float = 600) -> Experiment:
    def ended() -> bool:
        exp.refresh_from_db()
        return exp.summary is not None and exp.finished

    wait_until(ended, timeout, f"experiment {exp.pk} to be evaluated by the worker", interval=0.5)
    return exp


def test_dropping_memory_loses_the_planted_fact_in_exactly_the_items_that_carry_it(
    celery_worker_process: Any, api: Any, local_endpoint: Any
) -> None:
    project = local_endpoint.project
    planted = [planted_fact_snapshot(session_id=f"planted-{i}", turn=1) for i in range(6)]
    plain = [
        f.snapshot(
            session_id=f"plain-{i}",
            turn=1,
            blocks=[
                f.block(
                    "system",
                    "system",
                    "You are a travel assistant. Answer in one short sentence.",
                    pinned=True,
                ),
                f.block("user", "user", "Say hello to the user."),
            ],
            output={"text": "Hello!", "tool_calls": [], "finish_reason": "stop"},
        )
        for i in range(2)
    ]
    for w in planted + plain:
        post(api, w)
    seeds = sets.seeds_from_turns(project=project, snapshot_ids=[w["snapshot_id"] for w in planted + plain])
    eval_set = sets.eval_set_create(
        project=project,
        name="planted",
        seeds=seeds,
        checks=[{"type": "fact", "match": "text", "value": "Guangzhou"}],
    )
    version = sets.latest_version(eval_set)
    drop = strategies.strategy_create(
        project=project, name="drop memory", operations=[{"op": "remove", "key": "memory"}]
    )
    exp = runs.experiment_start(
        project=project,
        set_version=version,
        endpoint=local_endpoint,
        strategy_version=strategies.strategy_latest(drop),
        samples=2,
        params=FAST,
    )
    exp = _wait(exp)
    assert exp.status == Experiment.Status.DONE, exp.reason
    comparison = exp.summary["vs_control"]
    items = {it.pk: it for it in version.items.all()}
    carriers = {pk for pk, it in items.items() if it.session_id.startswith("planted")}
    lost = {int(x["item"]) for x in comparison["flipped"] if x["lost"]}
    # The model states the planted fact with the memory block and cannot without it.
    assert lost == carriers
    fidelity = next(m for m in comparison["metrics"] if m["name"] == "fact_fidelity")
    assert fidelity["changed"] and fidelity["direction"] == "worse", fidelity["verdict"]
    assert fidelity["p"] < 0.05
    # The items without a memory block are not applicable: run as saved only, not failed.
    assert exp.n_not_applicable == 2
    # Run again, the same strategy is no difference beyond noise, and every call is reused.
    again = _wait(
        runs.experiment_start(
            project=project,
            set_version=version,
            endpoint=local_endpoint,
            strategy_version=strategies.strategy_latest(drop),
            samples=2,
            params=FAST,
        )
    )
    assert again.job is not None and again.job.estimate["model_calls"] == 0
    row = compare(project=project, experiment_ids=[exp.pk, again.pk])["rows"][0]["comparison"]
    assert not any(m["changed"] for m in row["metrics"]), [m["verdict"] for m in row["metrics"]]
    assert row["flipped"] == []


def test_semantic_consistency_is_judged_with_the_endpoints_embeddings(
    celery_worker_process: Any, api: Any, local_endpoint: Any
) -> None:
    from experiments.models import CheckResult

    project = local_endpoint.project
    assert local_endpoint.embeddings_model  # the embedded server answers /v1/embeddings
    planted = [planted_fact_snapshot(session_id=f"semantic-{i}", turn=1) for i in range(2)]
    for w in planted:
        post(api, w)
    seeds = sets.seeds_from_turns(project=project, snapshot_ids=[w["snapshot_id"] for w in planted])
    eval_set = sets.eval_set_create(
        project=project, name="semantic", seeds=seeds, checks=[{"type": "consistent", "measure": "semantic"}]
    )
    drop = strategies.strategy_create(
        project=project, name="drop memory", operations=[{"op": "remove", "key": "memory"}]
    )
    exp = _wait(
        runs.experiment_start(
            project=project,
            set_version=sets.latest_version(eval_set),
            endpoint=local_endpoint,
            strategy_version=strategies.strategy_latest(drop),
            samples=2,
            params=FAST,
        )
    )
    assert exp.status == Experiment.Status.DONE, exp.reason
    results = list(CheckResult.objects.filter(experiment=exp, kind="consistent"))
    assert len(results) == 2 * 2 * 2  # items x arms x samples
    # Every answer is judged against the recorded answer's embedding and the control's spread.
    assert all(r.passed is not None for r in results), [r.evidence for r in results]
    assert all("semantic distance" in r.evidence and "noise floor" in r.evidence for r in results)
    # The control's answers set the floor: each lies within it.
    assert all(r.passed for r in results if r.arm == CheckResult.Arm.CONTROL)
