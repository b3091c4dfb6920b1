"""Attribution end to end: a real Celery worker process and the real local model server
(Gemma 3 270M via llama-cpp-python, which also serves the embeddings of the semantic measure)
on a planted-fact turn: the fact lives only in the memory block, the other blocks are noise."""

from __future__ import annotations

from typing import Any

import pytest

from replay.selectors import job_results
from replay.services.jobs import replay_job_create
from tests.replay.conftest import wait_job
from tests.replay.helpers import planted_code_snapshot, post

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
FAST = {"max_tokens": 24}


def test_attribution_over_a_planted_fact_turn_ranks_the_memory_block_first_alone(
    celery_worker_process: Any, api: Any, local_endpoint: Any
) -> None:
    wire = planted_code_snapshot()
    post(api, wire)
    job = replay_job_create(
        project=local_endpoint.project,
        endpoint=local_endpoint,
        spec={
            "kind": "attribution",
            "snapshot_id": wire["snapshot_id"],
            "samples": 3,
            "ablations": 16,
            "seed": 0,
            "params": FAST,
        },
    )
    job = wait_job(job.pk, timeout=300)
    # 3 baseline samples and 16 ablations, less one that keeps every source if the seed drew it
    # (the baseline's own request, planned and never sent).
    assert job.status == "done" and job.n_done == job.n_runs >= 18, job.runs.values_list("error", flat=True)
    (turn,) = job_results(job=job)["turns"]
    assert all("4417" in r.output_text for r in turn["baseline_runs"])
    # The semantic measure: the local server embedded every answer.
    assert all(r.embedding and len(r.embedding) > 100 for r in turn["baseline_runs"])
    without_memory = [
        e for e in turn["variants"] if any(op.get("key") == "memory" for op in e["variant"].operations)
    ]
    assert without_memory and all("4417" not in e["run"].output_text for e in without_memory)
    assert all(e["effect"]["semantic_distance"] is not None for e in turn["variants"] if not e["no_change"])
    att = turn["attribution"]
    assert att["measured"] == 16 and att["samples"] == 3
    assert att["top"] == "memory" and att["top_alone"] is True, att["sources"]
    top, second = att["sources"][0], att["sources"][1]
    assert top["score"] > second["score"] + 0.1 and not top["within_noise"]
    assert att["fit"]["r2_train"] is not None and att["fit"]["r2_train"] > 0.5
