"""An attribution job's results on its page and in the API: the ranked bar chart with the noise
band, each source linked to its block on the turn page, the fit quality; against a scripted
server whose answer depends on which blocks it received."""

from __future__ import annotations

from typing import Any

import pytest

from core.services import ingest_key_create
from replay import selectors
from replay.models import ReplayJob, ReplayVariant
from replay.services.jobs import replay_job_create
from replay.services.runs import replay_run_execute
from tests.replay.helpers import planted_code_snapshot, post

pytestmark = pytest.mark.django_db


def _run(job: ReplayJob, stub_server: Any, answer: Any) -> None:
    for r in job.runs.select_related("variant").order_by("variant__position", "sample"):
        stub_server.text = answer(r.variant.operations, r.sample)
        replay_run_execute(run_id=r.pk)


def _memory_answer(operations: list[dict[str, Any]], sample: int) -> str:
    removed = {op.get("key") for op in operations if op.get("op") == "remove"}
    if "memory" in removed:
        return "I do not know your locker code."
    # The retrieved document nudges the wording a little; the fact stays.
    return "Your locker code is 4417." if "retrieval" not in removed else "Locker code: 4417."


def test_an_attribution_job_ranks_the_block_the_answer_rests_on_first_with_its_fit_and_links(
    api: Any, editor_client: Any, private_project: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    wire = planted_code_snapshot()
    post(api, wire)
    job = replay_job_create(
        project=private_project,
        endpoint=stub_endpoint,
        spec={"kind": "attribution", "snapshot_id": wire["snapshot_id"], "ablations": 24, "seed": 1},
    )
    # An ablation that keeps every source is the baseline's request: planned, never sent.
    unchanged = ReplayVariant.objects.filter(job=job, no_change=True).count()
    assert unchanged <= 1
    assert job.kind == "attribution" and job.n_runs == 3 + 24 - unchanged
    assert job.estimate["model_calls"] == 27 - unchanged
    _run(job, stub_server, _memory_answer)
    (turn,) = selectors.job_results(job=job)["turns"]
    att = turn["attribution"]
    assert att["level"] == "block" and att["measured"] == 24 and att["samples"] == 3
    ranked = [s["key"] for s in att["sources"]]
    assert ranked[0] == "memory" and att["top"] == "memory" and att["top_alone"] is True
    assert sorted(ranked) == ["history", "memory", "retrieval", "tools"]
    scores = {s["key"]: s["score"] for s in att["sources"]}
    assert scores["memory"] > 0.3 and abs(scores["history"]) < 0.05 and abs(scores["tools"]) < 0.05
    assert att["fit"]["r2_holdout"] is not None and att["fit"]["r2_holdout"] > 0.8
    assert att["noise"] == 0.0  # the three baseline answers are the same

    fig = selectors.attribution_figure(turn=turn, turn_url="/turn/")
    assert fig is not None
    (bars,) = [t for t in fig["data"] if t["type"] == "bar"]
    assert "memory" in bars["y"][0] and 'href="/turn/#block-2"' in bars["y"][0]
    assert list(bars["x"]) == sorted(bars["x"], reverse=True)
    (band,) = fig["layout"]["shapes"]
    assert band["x0"] < 0 < band["x1"]

    page = editor_client.get(f"/p/{private_project.pk}/replays/{job.pk}/").content.decode()
    assert 'data-testid="attribution-chart"' in page and 'id="attribution-figure"' in page
    assert 'data-testid="attribution-top">memory<' in page
    turn_url = f"/p/{private_project.pk}/s/{wire['session_id']}/t/{wire['turn']}/"
    assert f'<a href="{turn_url}#block-2">memory</a>' in page
    # The turn page has the anchor the link points at.
    turn_page = editor_client.get(turn_url).content.decode()
    assert 'id="block-2"' in turn_page and 'data-testid="replay-attribution"' in turn_page

    key = ingest_key_create(project=private_project, name="ci", scopes=("ingest", "replay"))[1]
    resp = api.get(f"/replays/{job.pk}", key=key)
    assert resp.status_code == 200, resp.content
    (t,) = resp.json()["turns"]
    assert t["attribution"]["top"] == "memory" and t["attribution"]["sources"][0]["rank"] == 1
    assert t["attribution"]["r2_holdout"] > 0.8 and t["noise"]["samples"] == 3


def test_sentence_level_attribution_names_the_sentence_and_escapes_it(
    api: Any, editor_client: Any, private_project: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    wire = planted_code_snapshot()
    wire["blocks"][4]["messages"][0]["content"] = (
        "The gym opens at six. Locker code: 4417. <script>alert(1)</script> Towels are at the desk."
    )
    post(api, wire)
    job = replay_job_create(
        project=private_project,
        endpoint=stub_endpoint,
        spec={
            "kind": "attribution",
            "snapshot_id": wire["snapshot_id"],
            "block": "retrieval",
            "ablations": 16,
        },
    )
    assert "sentences of retrieval" in job.title

    def answer(operations: list[dict[str, Any]], sample: int) -> str:
        keep = next((op["keep"] for op in operations if op["op"] == "keep_sentences"), [0, 1, 2, 3])
        return "Your locker code is 4417." if 1 in keep else "I do not know."

    _run(job, stub_server, answer)
    (turn,) = selectors.job_results(job=job)["turns"]
    att = turn["attribution"]
    assert att["level"] == "sentence" and att["block"] == "retrieval"
    top = att["sources"][0]
    assert top["key"] == "retrieval #2" and top["text"] == "Locker code: 4417." and att["top_alone"]
    page = editor_client.get(f"/p/{private_project.pk}/replays/{job.pk}/").content.decode()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_verdicts_say_needs_more_samples_under_three_baseline_samples(
    api: Any, editor_client: Any, private_project: Any, stub_endpoint: Any, stub_server: Any
) -> None:
    wire = planted_code_snapshot()
    post(api, wire)
    job = replay_job_create(
        project=private_project,
        endpoint=stub_endpoint,
        spec={"kind": "without", "block": "memory", "snapshot_id": wire["snapshot_id"], "samples": 2},
    )
    _run(job, stub_server, lambda ops, n: "I do not know." if ops else "Your locker code is 4417.")
    (turn,) = selectors.job_results(job=job)["turns"]
    (e,) = turn["variants"]
    assert e["verdict"] == "needs more samples" and e["effect"]["samples"] == 2
    key = ingest_key_create(project=private_project, name="ci", scopes=("ingest", "replay"))[1]
    (t,) = api.get(f"/replays/{job.pk}", key=key).json()["turns"]
    (v,) = [v for v in t["variants"] if not v["is_baseline"]]
    assert v["verdict"] == "needs more samples" and v["effect"]["samples"] == 2
    page = editor_client.get(f"/p/{private_project.pk}/replays/{job.pk}/").content.decode()
    assert 'class="verdict samples"' in page and "(2 samples; moved" in page
    assert "too few for a verdict" in page


def test_the_attribution_button_shows_its_cost_then_starts_the_job(
    api: Any, editor_client: Any, private_project: Any, stub_endpoint: Any
) -> None:
    wire = planted_code_snapshot()
    post(api, wire)
    url = f"/p/{private_project.pk}/replays/new"
    data = {"snapshot_id": wire["snapshot_id"], "kind": "attribution"}
    resp = editor_client.post(url, data)
    assert resp.status_code == 200
    preview = resp.content.decode()
    resp = editor_client.post(url, {**data, "confirm": "1", "samples": "3"})
    job = ReplayJob.objects.get()
    # 3 baseline samples + 32 ablations, less an ablation that keeps every source (the baseline's
    # own request, never sent).
    unchanged = ReplayVariant.objects.filter(job=job, no_change=True).count()
    assert unchanged <= 1
    assert f'id="est-calls">{35 - unchanged}<' in preview
    assert resp.status_code == 302 and job.kind == "attribution" and job.n_runs == 35 - unchanged
    # A block with one sentence cannot be split: the page says why, nothing is started.
    resp = editor_client.post(url, {**data, "block": "memory"})
    assert resp.status_code == 400 and "at least two sentences" in resp.content.decode()
    assert ReplayJob.objects.count() == 1
