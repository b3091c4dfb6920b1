"""Replay pages: confirm step, results, side by side (escaped), progress partial, roles, query counts."""

from __future__ import annotations

import re
from typing import Any

import pytest

from replay.models import QueuePriority, ReplayJob
from replay.services.jobs import replay_job_create
from replay.services.runs import replay_run_execute
from tests import factories as f
from tests.replay.helpers import planted_fact_snapshot, post

pytestmark = pytest.mark.django_db


@pytest.fixture
def planted(api: Any, private_project: Any) -> dict[str, Any]:
    wire = planted_fact_snapshot()
    post(api, wire)
    return wire


def _run_all(job: ReplayJob) -> None:
    for r in job.runs.order_by("pk"):
        replay_run_execute(run_id=r.pk)


def test_the_first_post_shows_the_cost_and_the_confirm_starts_the_job(
    editor_client: Any,
    private_project: Any,
    planted: dict[str, Any],
    stub_endpoint: Any,
) -> None:
    url = f"/p/{private_project.pk}/replays/new"
    data = {"snapshot_id": planted["snapshot_id"], "kind": "loo"}
    resp = editor_client.post(url, data)
    page = resp.content.decode()
    assert resp.status_code == 200
    assert re.search(r'id="est-calls">12<', page)  # 3 baseline samples + 3 for each of 3 blocks
    assert not ReplayJob.objects.exists()
    resp = editor_client.post(url, {**data, "confirm": "1", "samples": "3", "max_tokens": "16"})
    job = ReplayJob.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/p/{private_project.pk}/replays/{job.pk}/"
    assert job.n_runs == 12 and job.params == {"max_tokens": 16}


def test_viewers_cannot_start_replays(
    viewer_client: Any, private_project: Any, planted: dict[str, Any], stub_endpoint: Any
) -> None:
    resp = viewer_client.post(
        f"/p/{private_project.pk}/replays/new",
        {"snapshot_id": planted["snapshot_id"], "kind": "plain", "confirm": "1"},
    )
    assert resp.status_code == 403
    assert not ReplayJob.objects.exists()


def test_a_non_member_gets_404(private_project: Any, planted: dict[str, Any], stub_endpoint: Any) -> None:
    from core.services import project_create
    from tests.replay.conftest import member_client

    other, _ = project_create(name="elsewhere")
    outsider = member_client(other, "admin", username="outsider")
    job = replay_job_create(
        project=private_project,
        endpoint=stub_endpoint,
        spec={"kind": "plain", "snapshot_id": planted["snapshot_id"]},
    )
    assert outsider.get(f"/p/{private_project.pk}/replays/{job.pk}/").status_code == 404
    assert outsider.get(f"/p/{private_project.pk}/replays/").status_code == 404


def test_the_turn_actions_are_for_editors_only(private_project: Any, planted: dict[str, Any]) -> None:
    from django.template.loader import render_to_string
    from django.test import RequestFactory

    from core.models import Membership
    from ingest import selectors as ingest_selectors

    snap = ingest_selectors.snapshot_by_uuid(project=private_project, snapshot_id=planted["snapshot_id"])
    blocks = ingest_selectors.snapshot_blocks(project_id=private_project.pk, snapshot_ref=snap.id)
    request = RequestFactory().get("/")
    for role, visible in (("viewer", False), ("editor", True), ("admin", True)):
        html = render_to_string(
            "replay/_turn_actions.html",
            {
                "project": private_project,
                "membership": Membership(role=role),
                "snapshot": snap,
                "blocks": blocks,
            },
            request=request,
        )
        assert ('data-testid="replay-without-memory"' in html) is visible
        assert ("<form" in html) is visible


def test_the_side_by_side_page_escapes_model_output(
    editor_client: Any,
    private_project: Any,
    planted: dict[str, Any],
    stub_endpoint: Any,
    stub_server: Any,
) -> None:
    stub_server.text = "<script>alert('x')</script> & <b>Paris</b>"
    job = replay_job_create(
        project=private_project,
        endpoint=stub_endpoint,
        spec={"kind": "without", "snapshot_id": planted["snapshot_id"], "block": "memory", "samples": 1},
    )
    _run_all(job)
    variant_run = job.runs.get(variant__is_baseline=False)
    page = editor_client.get(
        f"/p/{private_project.pk}/replays/{job.pk}/runs/{variant_run.pk}/"
    ).content.decode()
    assert "<script>alert" not in page and "<b>Paris" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    # Against the original answer ("Guangzhou."): the old word is deleted, the new ones inserted.
    assert "<del>Guangzhou.</del>" in page
    assert "<ins>&lt;script&gt;" in page


def test_the_results_show_changed_and_within_noise_verdicts(
    editor_client: Any,
    private_project: Any,
    planted: dict[str, Any],
    stub_endpoint: Any,
    stub_server: Any,
) -> None:
    job = replay_job_create(
        project=private_project,
        endpoint=stub_endpoint,
        spec={"kind": "loo", "snapshot_id": planted["snapshot_id"], "samples": 3},
    )
    runs = list(job.runs.order_by("variant__position", "sample"))
    for r in runs:
        key = r.variant.target_key
        stub_server.text = "I do not know." if key == "memory" else "Guangzhou."
        replay_run_execute(run_id=r.pk)
    page = editor_client.get(f"/p/{private_project.pk}/replays/{job.pk}/").content.decode()
    assert page.count('class="verdict changed"') == 1
    assert page.count('class="verdict same"') == 2
    assert 'id="loo-chart"' in page and 'id="loo-figure"' in page
    assert "/assets/plotly-" in page


def test_the_progress_partial_polls_until_the_job_ends_then_reloads(
    editor_client: Any,
    private_project: Any,
    planted: dict[str, Any],
    stub_endpoint: Any,
) -> None:
    job = replay_job_create(
        project=private_project,
        endpoint=stub_endpoint,
        spec={"kind": "plain", "snapshot_id": planted["snapshot_id"], "samples": 2},
    )
    url = f"/p/{private_project.pk}/replays/{job.pk}/progress?was_running=1"
    resp = editor_client.get(url, HTTP_HX_REQUEST="true")
    assert 'hx-trigger="every 1s"' in resp.content.decode() and "HX-Refresh" not in resp
    # A person's replay goes first in the replay queue: nothing to explain.
    assert 'id="job-priority"' not in resp.content.decode()
    _run_all(job)
    resp = editor_client.get(url, HTTP_HX_REQUEST="true")
    assert "hx-trigger" not in resp.content.decode() and resp["HX-Refresh"] == "true"
    assert "2 done" in resp.content.decode()


BEHIND = "its calls wait in the replay queue behind the replays people ask for"


@pytest.mark.parametrize(("priority", "says"), [
    (QueuePriority.TRIAGE, f"Queued as automatic triage: {BEHIND}."),
    (QueuePriority.EXPERIMENT, f"Queued as experiment: {BEHIND} and automatic triage."),
])
def test_a_job_queued_behind_people_s_replays_says_so_until_it_ends(
    editor_client: Any, private_project: Any, planted: dict[str, Any], stub_endpoint: Any,
    priority: QueuePriority, says: str,
) -> None:
    job = replay_job_create(
        project=private_project, endpoint=stub_endpoint, priority=priority,
        spec={"kind": "plain", "snapshot_id": planted["snapshot_id"], "samples": 1},
    )
    page = editor_client.get(f"/p/{private_project.pk}/replays/{job.pk}/").content.decode()
    assert says in page
    _run_all(job)
    page = editor_client.get(f"/p/{private_project.pk}/replays/{job.pk}/").content.decode()
    assert 'id="job-priority"' not in page


def test_a_batch_shows_in_how_many_turns_the_answer_changed(
    editor_client: Any,
    api: Any,
    private_project: Any,
    stub_endpoint: Any,
    stub_server: Any,
) -> None:
    for turn in range(4):
        post(api, f.snapshot(session_id="many", turn=turn))
    job = replay_job_create(
        project=private_project,
        endpoint=stub_endpoint,
        spec={"kind": "batch", "session_id": "many", "block": "memory", "samples": 1},
    )
    for r in job.runs.order_by("variant__position"):
        changed_turn = r.variant.turn in (1, 3) and not r.variant.is_baseline
        stub_server.text = "something else entirely" if changed_turn else "Guangzhou window seat"
        replay_run_execute(run_id=r.pk)
    page = editor_client.get(f"/p/{private_project.pk}/replays/{job.pk}/").content.decode()
    assert 'id="batch-summary"' in page
    assert re.search(r'data-testid="changed-count">2</b> of 4', page)


@pytest.mark.parametrize("pages", ["detail", "list", "compare"])
def test_query_count_does_not_grow_with_the_rows_shown(
    editor_client: Any,
    api: Any,
    private_project: Any,
    stub_endpoint: Any,
    django_assert_max_num_queries: Any,
    pages: str,
) -> None:
    def make(n_blocks: int) -> ReplayJob:
        wire = f.snapshot(blocks=[f.block(f"b{i}", "other", f"text {i}") for i in range(n_blocks)])
        post(api, wire)
        job = replay_job_create(
            project=private_project,
            endpoint=stub_endpoint,
            spec={"kind": "loo", "snapshot_id": wire["snapshot_id"], "samples": 2},
        )
        _run_all(job)
        return job

    small, big = make(2), make(12)
    for job in (small, big):
        if pages == "detail":
            url = f"/p/{private_project.pk}/replays/{job.pk}/"
        elif pages == "list":
            url = f"/p/{private_project.pk}/replays/"
        else:
            url = f"/p/{private_project.pk}/replays/{job.pk}/runs/{job.runs.order_by('-pk').first().pk}/"
        with django_assert_max_num_queries(12):
            assert editor_client.get(url).status_code == 200


@pytest.mark.parametrize(
    "embeddings_model", ["stub-embed", ""], ids=["embeddings-configured", "no-embeddings"]
)
def test_embedding_similarity_is_shown_where_an_embeddings_endpoint_is_configured(
    editor_client: Any,
    private_project: Any,
    planted: dict[str, Any],
    stub_endpoint: Any,
    stub_server: Any,
    embeddings_model: str,
) -> None:
    import math

    from replay.models import ModelEndpoint

    ModelEndpoint.objects.filter(pk=stub_endpoint.pk).update(embeddings_model=embeddings_model)
    job = replay_job_create(
        project=private_project,
        endpoint=stub_endpoint,
        spec={"kind": "without", "snapshot_id": planted["snapshot_id"], "block": "memory", "samples": 1},
    )
    texts = {True: "Guangzhou.", False: "I do not know where you are flying."}
    for r in job.runs.order_by("variant__position"):
        stub_server.text = texts[r.variant.is_baseline]
        replay_run_execute(run_id=r.pk)
    embed_calls = [c for c in stub_server.calls if c["path"].endswith("/embeddings")]
    variant_run = job.runs.get(variant__is_baseline=False)
    page = editor_client.get(
        f"/p/{private_project.pk}/replays/{job.pk}/runs/{variant_run.pk}/"
    ).content.decode()
    if not embeddings_model:
        assert embed_calls == [] and variant_run.embedding is None
        assert "embedding similarity" not in page
        return
    # The scripted server embeds a text as [its length, 1, 0.5]: one call per answer, stored per run.
    assert [c["body"] for c in embed_calls] == [{"model": "stub-embed", "input": t} for t in texts.values()]
    assert variant_run.embedding == [float(len(texts[False])), 1.0, 0.5]
    a, b = [float(len(texts[True])), 1.0, 0.5], variant_run.embedding
    cos = sum(x * y for x, y in zip(a, b, strict=True)) / (math.hypot(*a) * math.hypot(*b))
    assert "embedding similarity" in page and f"{cos:.3f}" in page


def test_leave_one_out_defaults_to_three_baseline_samples_and_draws_a_bar_per_block_over_the_noise_band(
    editor_client: Any, private_project: Any, planted: dict[str, Any], stub_endpoint: Any, stub_server: Any
) -> None:
    from replay import measures, selectors

    spec = {"kind": "loo", "snapshot_id": planted["snapshot_id"]}
    job = replay_job_create(project=private_project, endpoint=stub_endpoint, spec=spec)
    baseline_texts = [
        "You fly to Guangzhou.",
        "You fly to Guangzhou today, I think.",
        "You fly to Guangzhou.",
    ]
    answers = {
        "system": "You fly to Guangzhou today.",  # differs from the baseline less than it differs from itself
        "memory": "I do not know that.",
        "user": "You fly to Guangzhou.",
    }
    runs = list(job.runs.select_related("variant").order_by("variant__position", "sample"))
    assert [r.variant.is_baseline for r in runs].count(True) == 3  # k = 3 unless asked otherwise
    for r in runs:
        v = r.variant
        stub_server.text = baseline_texts[r.sample] if v.is_baseline else answers[v.target_key]
        replay_run_execute(run_id=r.pk)
    (turn,) = selectors.job_results(job=job)["turns"]
    fig = selectors.loo_figure(turn=turn)
    assert fig is not None
    (bars,) = [t for t in fig["data"] if t["type"] == "bar"]
    # Ranked: the largest effect first.
    assert list(bars["x"])[0] == "memory" and sorted(bars["x"]) == ["memory", "system", "user"]
    assert turn["ranking"][0] == "memory"
    noise_max = measures.edit_distance(baseline_texts[0], baseline_texts[1])
    assert turn["noise"]["max"] == pytest.approx(noise_max) and noise_max > 0
    (band,) = fig["layout"]["shapes"]
    assert band["y0"] == 0 and band["y1"] == pytest.approx(noise_max)
    # Only the bar above the band is marked as an effect; the others are within noise.
    heights = dict(zip(bars["x"], bars["y"], strict=True))
    assert heights["memory"] > noise_max >= heights["system"] > 0
    colors = dict(zip(bars["x"], bars["marker"]["color"], strict=True))
    assert colors == {"memory": "#c0392b", "system": "#95a5a6", "user": "#95a5a6"}
    page = editor_client.get(f"/p/{private_project.pk}/replays/{job.pk}/").content.decode()
    assert page.count('class="verdict noise">within noise') == 1
    assert page.count('class="verdict changed"') == 1 and page.count('class="verdict same"') == 1


def test_the_side_by_side_page_shows_an_original_answer_holding_nul_and_broken_text(
    api: Any, editor_client: Any, private_project: Any, stub_endpoint: Any
) -> None:
    wire = planted_fact_snapshot(session_id="binary")
    wire["output"]["text"] = "Guang\x00zhou \udcff."
    post(api, wire)
    job = replay_job_create(
        project=private_project, endpoint=stub_endpoint,
        spec={"kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 1},
    )
    _run_all(job)
    resp = editor_client.get(f"/p/{private_project.pk}/replays/{job.pk}/runs/{job.runs.get().pk}/")
    assert resp.status_code == 200
    assert "Guang\u2400zhou \ufffd." in resp.content.decode()
