"""A leave-one-out job's verdicts through replay.selectors.job_results and the API, with a
scripted model server that states the planted fact only when the memory is in the prompt."""

from __future__ import annotations

import json
from typing import Any

import pytest

from replay import selectors
from replay.models import ReplayRun
from replay.services.jobs import replay_job_create
from replay.services.runs import replay_run_execute
from tests.replay.helpers import PLANTED_CODE_MEMORY, PLANTED_CODE_QUESTION, planted_code_snapshot, post

pytestmark = pytest.mark.django_db


def _answer(body: dict[str, Any]) -> str:
    """The fact when the memory and the question reach the model, else no answer to it."""
    prompt = str(body.get("prompt") or json.dumps(body.get("messages") or []))
    if PLANTED_CODE_MEMORY in prompt and PLANTED_CODE_QUESTION in prompt:
        return "Your locker code is 4417."
    return "I do not know your code."


@pytest.fixture
def code_turn(api: Any, private_project: Any) -> dict[str, Any]:
    wire = planted_code_snapshot()
    post(api, wire)
    return wire


def test_a_leave_one_out_calls_the_lost_fact_changed_and_ranks_memory_over_the_context(
    api: Any, private_project: Any, code_turn: dict[str, Any], stub_endpoint: Any, stub_server: Any
) -> None:
    stub_server.answer = _answer
    job = replay_job_create(
        project=private_project,
        endpoint=stub_endpoint,
        spec={"kind": "loo", "snapshot_id": code_turn["snapshot_id"], "samples": 3},
    )
    # Every variant is sampled as often as the baseline.
    assert {v.samples for v in job.variants.all()} == {3}
    for run_id in job.runs.order_by("pk").values_list("pk", flat=True):
        replay_run_execute(run_id=run_id)
    assert ReplayRun.objects.filter(job=job, status="done").count() == 3 * 7
    (turn,) = selectors.job_results(job=job)["turns"]
    by_key = {e["variant"].target_key: e for e in turn["variants"]}
    memory = by_key["memory"]
    assert memory["verdict"] == "changed" and memory["p"] is not None and memory["p"] < 0.05
    assert memory["verdict_words"].startswith(
        "the fact “4417” was in 3 of 3 baseline answers and 0 of 3 answers without memory: changed, p"
    )
    for key in ("tools", "history", "retrieval"):
        assert by_key[key]["verdict"] == "within noise", key
        assert "3 of 3 answers without " + key in (by_key[key]["verdict_words"] or "")
    # Without the question the answer moves too; it is kept out of the ranking, as is the system prompt.
    assert by_key["user"]["verdict"] == "changed"
    assert turn["ranking"][0] == "memory" and "user" not in turn["ranking"]
    assert sorted(turn["ranking"]) == ["history", "memory", "retrieval", "tools"]

    got = api.get(f"/replays/{job.pk}")
    assert got.status_code == 200, got.content
    (out,) = got.json()["turns"]
    shown = {v["target_key"]: v for v in out["variants"]}
    assert shown["memory"]["verdict"] == "changed"
    assert shown["memory"]["verdict_words"] == memory["verdict_words"]
    assert shown["memory"]["p"] == pytest.approx(memory["p"])
    assert shown["memory"]["effect"]["variant_samples"] == 3
    assert {t["measure"] for t in shown["memory"]["effect"]["tests"]} == {"fact", "edit"}
    assert shown["tools"]["verdict"] == "within noise"


def test_the_job_page_says_the_verdict_in_words(
    editor_client: Any, private_project: Any, code_turn: dict[str, Any], stub_endpoint: Any, stub_server: Any
) -> None:
    stub_server.answer = _answer
    job = replay_job_create(
        project=private_project,
        endpoint=stub_endpoint,
        spec={"kind": "without", "block": "memory", "snapshot_id": code_turn["snapshot_id"], "samples": 3},
    )
    for run_id in job.runs.order_by("pk").values_list("pk", flat=True):
        replay_run_execute(run_id=run_id)
    page = editor_client.get(f"/p/{private_project.pk}/replays/{job.pk}/").content.decode()
    assert page.count('class="verdict changed"') == 1
    assert (
        "the fact “4417” was in 3 of 3 baseline answers and 0 of 3 answers without memory: changed, p"
        in page
    )
