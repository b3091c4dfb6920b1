"""Evaluation sets and experiments at their edges: where items come from (a timeline selection,
a filter with a random sample, an alert's turns, JSONL), versions, export and import, checks
refused when saved, the limits, retention, summaries made by a model (and one that fails), and
a cancel. Real PostgreSQL; replay runs executed as a worker executes them, against a real HTTP
server answering like an OpenAI-compatible API."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from core.services import project_create
from experiments.errors import ExperimentError
from experiments.models import EvalSet, Experiment, ExperimentItem, SummaryCache
from experiments.services import runs, sets, strategies
from ingest import retention
from replay.models import QueuePriority, ReplayRun
from tests import factories as f
from tests.experiments.conftest import fact_answer, run_pending
from tests.ingest.aging import age
from tests.replay.helpers import post, queued_run_ids, queued_tasks

pytestmark = pytest.mark.django_db


def _turn(i: int, *, session: str = "", turn: int = 1, history: bool = False) -> dict[str, Any]:
    blocks = [
        f.block("system", "system", "You are a travel assistant.", pinned=True),
        f.block("memory", "memory", f"Memory: booking code BK{i:03d}."),
    ]
    if history:
        blocks.append(
            f.block(
                "history",
                "history",
                messages=[
                    {"role": "user", "content": "I want to fly to Guangzhou in May."},
                    {"role": "assistant", "content": "Noted: Guangzhou, in May."},
                    {"role": "user", "content": "My budget is 600 EUR."},
                    {"role": "assistant", "content": "Noted: 600 EUR."},
                ],
            )
        )
    blocks.append(f.block("user", "user", "What is my booking code?"))
    return f.snapshot(
        session_id=session or f"s{i}",
        turn=turn,
        blocks=blocks,
        tags={"assembly_version": "v1"},
        output={"text": f"Your booking code is BK{i:03d}.", "tool_calls": [], "finish_reason": "stop"},
    )


def _stored(api: Any, n: int, **kw: Any) -> list[dict[str, Any]]:
    wires = [_turn(i, **kw) for i in range(n)]
    for w in wires:
        post(api, w)
    return wires


def _editor(client: Client, project: Any) -> Client:
    from django.contrib.auth import get_user_model

    from core.models import Membership

    user = get_user_model().objects.create_user("ed", password="pw-12345678")
    Membership.objects.create(user=user, project=project, role="editor")
    client.force_login(user)
    return client


def test_turns_selected_on_a_timeline_become_a_set_and_a_second_selection_a_new_version(
    api: Any, client: Client, project: Any
) -> None:
    wires = _stored(api, 3, session="sess")
    _editor(client, project)
    url = reverse("experiments:set_create", kwargs={"project_id": project.pk})
    resp = client.post(url, {"name": "picked", "snapshot_id": [w["snapshot_id"] for w in wires[:2]]})
    assert resp.status_code == 302
    s = EvalSet.objects.get(project=project, name="picked")
    v1 = sets.latest_version(s)
    assert v1.n_items == 2 and v1.items.first().source == "timeline"
    # The suggestions: the memory's fact that the saved answer states.
    suggested = [x["check"] for x in v1.items.order_by("position").first().suggestions]
    assert {"type": "fact", "value": "BK000"}.items() <= next(
        c for c in suggested if c["type"] == "fact"
    ).items()
    client.post(url, {"name": "picked", "snapshot_id": [wires[2]["snapshot_id"]]})
    v2 = sets.latest_version(s)
    assert (v2.number, v2.n_items) == (2, 3)
    assert sets.latest_version(s).items.last().snapshot_uuid.hex == wires[2]["snapshot_id"].replace("-", "")
    # The timeline shows the selection boxes and the action.
    page = client.get(reverse("ingest:timeline", kwargs={"project_id": project.pk, "session_id": "sess"}))
    assert b'name="snapshot_id"' in page.content and b"Add the selected turns" in page.content


def test_a_filter_with_a_random_sample_takes_that_many_turns(api: Any, project: Any) -> None:
    _stored(api, 6)
    seeds = sets.seeds_from_filter(
        project=project, flt={"tag": "assembly_version=v1", "sample": 4, "seed": 3}
    )
    assert len(seeds) == 4
    again = sets.seeds_from_filter(
        project=project, flt={"tag": "assembly_version=v1", "sample": 4, "seed": 3}
    )
    assert [s.snapshot["snapshot_id"] for s in seeds] == [s.snapshot["snapshot_id"] for s in again]
    assert sets.seeds_from_filter(project=project, flt={"tag": "assembly_version=v2"}) == []
    with pytest.raises(ExperimentError, match="filter.tag"):
        sets.seeds_from_filter(project=project, flt={"tag": "no-equals-sign"})


def test_an_export_imported_into_another_project_is_the_same_set_checks_included(
    api: Any, project: Any
) -> None:
    wires = _stored(api, 2)
    seeds = sets.seeds_from_turns(project=project, snapshot_ids=[w["snapshot_id"] for w in wires])
    seeds[0].checks = [{"type": "fact", "match": "regex", "pattern": r"BK0+"}]
    s = sets.eval_set_create(
        project=project,
        name="codes",
        seeds=seeds,
        checks=[{"type": "constraint", "rule": "max_chars", "limit": 400}],
    )
    text = "".join(sets.eval_set_export(version=sets.latest_version(s)))
    other, _ = project_create(name="elsewhere")
    header, items, errors = sets.parse_jsonl(io.StringIO(text).readlines())
    got, rejected = sets.seeds_from_wire(items, source="jsonl")
    assert errors == [] and rejected == []
    copy = sets.eval_set_create(project=other, name=header["name"], seeds=got, checks=header["checks"])
    a, b = sets.latest_version(s), sets.latest_version(copy)
    assert a.checks == b.checks
    assert [
        (i.checks, i.context.content_hash, i.session_id, i.turn) for i in a.items.order_by("position")
    ] == [(i.checks, i.context.content_hash, i.session_id, i.turn) for i in b.items.order_by("position")]


def test_bad_input_is_refused_with_the_field_and_the_good_items_are_kept(api: Any, project: Any) -> None:
    wires = _stored(api, 1)
    with pytest.raises(ExperimentError, match="at least one item"):
        sets.eval_set_create(project=project, name="empty", seeds=[])
    good = sets.seeds_from_turns(project=project, snapshot_ids=[wires[0]["snapshot_id"]])
    with pytest.raises(ExperimentError, match=r"checks\[0\].pattern"):
        sets.eval_set_create(
            project=project,
            name="bad",
            seeds=good,
            checks=[{"type": "fact", "match": "regex", "pattern": "(unclosed"}],
        )
    with pytest.raises(ExperimentError, match="schema"):
        sets.eval_set_create(
            project=project,
            name="bad",
            seeds=good,
            checks=[{"type": "constraint", "rule": "json_schema", "schema": {"type": 5}}],
        )
    with pytest.raises(ExperimentError, match="at most 2000 items"):
        sets.seeds_from_turns(project=project, snapshot_ids=["0"] * 2001)
    bad_item = {**_turn(9), "turn": -1}
    seeds, rejected = sets.seeds_from_wire([_turn(7), bad_item, "x"])
    assert len(seeds) == 1
    assert rejected[0]["loc"] == ["items", 1, "turn"] and rejected[1]["loc"] == ["items", 2]
    assert EvalSet.objects.filter(name__in=("empty", "bad")).count() == 0


def test_the_api_refuses_bad_checks_by_field_and_keeps_good_items(
    api: Any, project: Any, client: Client
) -> None:
    from core.services import ingest_key_create

    key = ingest_key_create(project=project, name="ci", scopes=("ingest", "replay"))[1]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    body = {"name": "wired", "items": [_turn(1), {**_turn(2), "turn": -3}]}
    resp = client.post("/api/v1/datasets", json.dumps(body), content_type="application/json", **headers)
    # Some items refused, the others stored: 207, as a batch of snapshots answers.
    assert resp.status_code == 207, resp.content
    out = resp.json()
    assert out["versions"][0]["n_items"] == 1
    assert out["rejected"][0]["loc"] == ["items", 1, "turn"]
    bad = {"checks": [{"type": "constraint", "rule": "json_schema", "schema": {"type": "nope"}}]}
    resp = client.put(
        "/api/v1/datasets/wired/checks", json.dumps(bad), content_type="application/json", **headers
    )
    assert resp.status_code == 400 and "schema" in resp.json()["detail"]
    resp = client.post(
        "/api/v1/experiments", json.dumps({"dataset": "wired"}), content_type="application/json", **headers
    )
    assert resp.status_code == 409 and "no model endpoint" in resp.json()["detail"]
    assert client.get("/api/v1/datasets/nope", **headers).status_code == 404


def test_a_set_keeps_its_contexts_after_retention_removed_the_turns(
    api: Any, private_project: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    wires = _stored(api, 2)
    s = sets.eval_set_create(
        project=private_project,
        name="kept",
        seeds=sets.seeds_from_turns(project=private_project, snapshot_ids=[w["snapshot_id"] for w in wires]),
    )
    private_project.retention_days = 1
    private_project.save(update_fields=["retention_days"])
    age(private_project, 5)
    retention.expire()
    with pytest.raises(Exception, match="no stored turn"):
        sets.seeds_from_turns(project=private_project, snapshot_ids=[wires[0]["snapshot_id"]])
    stub_server.answer = fact_answer({"BK000": "BK000", "BK001": "BK001"})
    exp = runs.experiment_start(project=private_project, set_version=sets.latest_version(s), samples=1)
    run_pending(exp.job_id)
    runs.experiment_finalize(experiment_id=exp.pk)
    exp.refresh_from_db()
    assert exp.status == Experiment.Status.DONE
    answers = list(ReplayRun.objects.filter(job_id=exp.job_id).values_list("output_text", flat=True))
    assert sorted(answers) == ["Here is what I know: BK000.", "Here is what I know: BK001."]


def test_summaries_are_made_once_and_a_failing_summary_fails_only_its_item(
    api: Any, private_project: Any, stub_endpoint: Any, stub_server: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    wires = [_turn(i, history=True) for i in range(3)]
    for w in wires:
        post(api, w)
    s = sets.eval_set_create(
        project=private_project,
        name="hist",
        seeds=sets.seeds_from_turns(project=private_project, snapshot_ids=[w["snapshot_id"] for w in wires]),
    )
    st = strategies.strategy_create(
        project=private_project,
        name="sum",
        operations=[{"op": "summarize", "before_last_turns": 1, "ratio": 0.3}],
    )
    sv = strategies.strategy_latest(st)

    def answer(body: dict[str, Any]) -> str:
        prompt = str(body.get("prompt") or "")
        if "Goal" in prompt and "BK002" in prompt:
            raise_on_purpose = "failing"  # the stub answers this one with a 500, below
            return raise_on_purpose
        return "Goal: fly to Guangzhou. Confirmed facts: budget 600 EUR." if "Goal" in prompt else "ok"

    # The three items share their history: one summary serves them all (by content hash).
    stub_server.answer = answer
    with django_capture_on_commit_callbacks(execute=True):
        exp = runs.experiment_start(
            project=private_project, set_version=sets.latest_version(s), strategy_version=sv, samples=1
        )
    assert exp.status == Experiment.Status.PREPARING
    # Its summaries are model calls: they wait in the replay queue behind a person's replays.
    assert [exp.pk] in queued_tasks(QueuePriority.EXPERIMENT, "experiments.prepare")
    with django_capture_on_commit_callbacks(execute=True):
        runs.experiment_prepare(experiment_id=exp.pk)
    exp.refresh_from_db()
    assert exp.status == Experiment.Status.RUNNING
    # So do its replays, whoever started the experiment.
    assert exp.job.priority == QueuePriority.EXPERIMENT
    job_runs = set(ReplayRun.objects.filter(job_id=exp.job_id, status="pending").values_list("pk", flat=True))
    assert job_runs and job_runs <= set(queued_run_ids(QueuePriority.EXPERIMENT))
    summary_calls = [c for c in stub_server.completion_calls() if "Goal" in str(c["body"].get("prompt"))]
    assert len(summary_calls) == 1
    assert SummaryCache.objects.count() == 1
    items = list(ExperimentItem.objects.filter(experiment=exp))
    assert all(i.applicable and not i.failed for i in items), [(i.reason, i.operations) for i in items]
    assert all(i.operations[0]["summary"].startswith("Goal: fly to Guangzhou") for i in items)
    assert all(i.tokens_after < i.tokens_before for i in items)
    # A rerun pays nothing twice: the summary comes from the cache.
    again = runs.experiment_start(
        project=private_project, set_version=sets.latest_version(s), strategy_version=sv, samples=1
    )
    runs.experiment_prepare(experiment_id=again.pk)
    assert len([c for c in stub_server.completion_calls() if "Goal" in str(c["body"].get("prompt"))]) == 1


def test_a_summarising_endpoint_that_fails_marks_the_experiment_partial(
    api: Any, private_project: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    wires = [_turn(i, history=True) for i in range(2)]
    wires[1]["blocks"][2]["messages"][0]["content"] = "I want to fly to Lhasa in June."
    for w in wires:
        post(api, w)
    s = sets.eval_set_create(
        project=private_project,
        name="hist2",
        seeds=sets.seeds_from_turns(project=private_project, snapshot_ids=[w["snapshot_id"] for w in wires]),
    )
    st = strategies.strategy_create(
        project=private_project,
        name="sum",
        operations=[{"op": "summarize", "before_last_turns": 1, "budget": 40}],
    )
    stub_server.answer = lambda body: "Goal: travel." if "Goal" in str(body.get("prompt")) else "ok"
    # The first summary call fails with a server error on every attempt; the second succeeds.
    stub_server.script = [(400, {}, 0.0)]
    exp = runs.experiment_start(
        project=private_project,
        set_version=sets.latest_version(s),
        strategy_version=strategies.strategy_latest(st),
        samples=1,
    )
    runs.experiment_prepare(experiment_id=exp.pk)
    exp.refresh_from_db()
    failed = ExperimentItem.objects.filter(experiment=exp, failed=True)
    assert failed.count() == 1 and "the summary failed" in failed.get().reason
    run_pending(exp.job_id)
    runs.experiment_finalize(experiment_id=exp.pk)
    exp.refresh_from_db()
    assert exp.status == Experiment.Status.PARTIAL, exp.reason
    assert exp.summary["items"][str(failed.get().item_id)]["failed"] is True


def test_a_cancelled_experiment_makes_no_further_model_call(
    api: Any, private_project: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    wires = _stored(api, 3)
    s = sets.eval_set_create(
        project=private_project,
        name="c",
        seeds=sets.seeds_from_turns(project=private_project, snapshot_ids=[w["snapshot_id"] for w in wires]),
    )
    exp = runs.experiment_start(project=private_project, set_version=sets.latest_version(s), samples=2)
    first = ReplayRun.objects.filter(job_id=exp.job_id).order_by("id").first()
    from replay.services.runs import replay_run_execute

    replay_run_execute(run_id=first.pk)
    calls = len(stub_server.completion_calls())
    runs.experiment_cancel(experiment=exp)
    assert run_pending(exp.job_id) == 0
    for rid in ReplayRun.objects.filter(job_id=exp.job_id).values_list("id", flat=True):
        replay_run_execute(run_id=rid)
    assert len(stub_server.completion_calls()) == calls
    exp.refresh_from_db()
    assert exp.status == Experiment.Status.CANCELLED


def test_the_run_form_previews_the_cost_before_anything_starts(
    api: Any, client: Client, private_project: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    wires = _stored(api, 3)
    s = sets.eval_set_create(
        project=private_project,
        name="priced",
        seeds=sets.seeds_from_turns(project=private_project, snapshot_ids=[w["snapshot_id"] for w in wires]),
    )
    st = strategies.strategy_create(
        project=private_project, name="no history", operations=[{"op": "remove", "key": "history"}]
    )
    _editor(client, private_project)
    url = reverse("experiments:run", kwargs={"project_id": private_project.pk})
    form = {"set": s.pk, "version": 1, "strategy": ["as-saved", st.pk], "samples": 2, "preview": "1"}
    resp = client.post(url, form)
    assert resp.status_code == 200
    page = resp.content.decode()
    # As saved: 3 items x 2 samples; the strategy names a block no item has: 3 not applicable.
    assert ">6<" in page and "not applicable: item 0 (no block with key" in page
    assert Experiment.objects.count() == 0 and stub_server.calls == []
    del form["preview"]
    assert client.post(url, form).status_code == 302
    assert Experiment.objects.count() == 2
