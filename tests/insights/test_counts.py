"""Counts you can trust: the counts analyzer on real PostgreSQL (learned ratio, drift against it,
idempotence, retention registration) and the pages that show it."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from core import registry
from core.models import Project
from ctxobs import tokens
from ingest.models import Snapshot
from insights import counts
from insights.counts import analyze_counts, calibrate
from insights.counts_selectors import count_drifts, model_ratios
from insights.models import ModelCountRatio, TurnCount
from tests.factories import block, snapshot
from tests.ingest.test_views import make_user

pytestmark = pytest.mark.django_db

MODEL = "llama-3.1-8b-instruct"


def estimated_turn(turn: int, *, usual: float, dropped: int = 0, session_id: str = "steady",
                   model: str = MODEL) -> dict[str, Any]:
    """A turn whose counts the agent marked estimated, and whose provider reported what an
    estimate USUAL off would read (our 1000 + DROPPED tokens; the provider saw 1000)."""
    blocks = [
        block("system", "system", "You are a travel assistant.", tokens=300, pinned=True),
        block("history", "history", f"history up to turn {turn}", tokens=697),
        block("user", "user", f"question {turn}", tokens=dropped) if dropped else None,
    ]
    ours = 1000  # 300 + 697 + 3 for the reply priming
    snap = snapshot(session_id=session_id, turn=turn, model=model, blocks=[b for b in blocks if b])
    snap["model"]["counts"] = "estimated"
    usage = {"prompt_tokens": round(ours / (1 + usual)), "completion_tokens": 2}
    snap["output"] = {"text": "ok", "usage": usage}
    return snap


def post(api: Any, project: Project, snaps: list[dict[str, Any]]) -> list[int]:
    r = api.post_snapshots(snaps)
    assert r.status_code == 200, r.content
    ids = [s["snapshot_id"] for s in snaps]
    stored = Snapshot.objects.filter(project=project, snapshot_id__in=ids)
    by_id = dict(stored.values_list("snapshot_id", "id"))
    return [by_id[uuid.UUID(i)] for i in ids]


def test_the_drift_is_measured_against_the_models_usual_ratio() -> None:
    steady = [1 / 0.92] * 8  # reported / ours of an estimate that reads 8% low
    c = calibrate(1000, round(1000 / 0.92), steady, exact=False)
    assert c.usual_ratio == pytest.approx(1 / 0.92) and abs(c.drift) < 0.001 and not c.flagged
    dropped = calibrate(1000, round(700 / 0.92), steady, exact=False)  # the provider saw 30% less
    assert dropped.flagged and dropped.drift == pytest.approx(0.3 / 0.7, rel=0.01)
    # One odd turn does not move the median.
    assert calibrate(1000, 1087, [*steady, 0.5], exact=False).usual_ratio == pytest.approx(1 / 0.92)
    # Without a usual ratio: exact counts are compared with zero at 10%, estimates at 25%.
    assert calibrate(1000, 870, [], exact=True).flagged
    assert not calibrate(1000, 870, [], exact=False).flagged
    assert calibrate(1000, 700, [], exact=False).flagged


@pytest.mark.parametrize("usual", [-0.08, -0.13, 0.06])
def test_ordinary_estimated_turns_are_not_flagged_and_a_dropped_block_is(api, project, usual) -> None:
    refs = post(api, project, [estimated_turn(t, usual=usual) for t in range(8)])
    dropped = post(api, project, [estimated_turn(8, usual=usual, dropped=250)])
    analyze_counts(project_id=project.pk, snapshot_refs=refs)
    analyze_counts(project_id=project.pk, snapshot_refs=dropped)
    rows = {r.snapshot_ref: r for r in TurnCount.objects.filter(project_id=project.pk)}
    raw = {s.id: s.count_drift for s in Snapshot.objects.filter(project=project)}
    for ref in refs:
        assert raw[ref] == pytest.approx(usual, abs=0.002)
        assert not rows[ref].flagged, (ref, rows[ref].drift)
    for ref in refs[5:]:
        assert rows[ref].usual_n >= 5 and abs(rows[ref].drift) < 0.002
    turn = rows[dropped[0]]
    assert turn.flagged and turn.drift == pytest.approx(0.25, abs=0.01)
    assert model_ratios(project_id=project.pk)[MODEL] == pytest.approx(1 / (1 + usual), rel=0.002)


def test_running_twice_writes_the_same_figures(api, project) -> None:
    refs = post(api, project, [estimated_turn(t, usual=-0.08) for t in range(7)])
    analyze_counts(project_id=project.pk, snapshot_refs=refs[:4])
    analyze_counts(project_id=project.pk, snapshot_refs=refs[4:])
    first = list(TurnCount.objects.filter(project_id=project.pk).order_by("snapshot_ref").values())
    analyze_counts(project_id=project.pk, snapshot_refs=refs[4:])
    analyze_counts(project_id=project.pk, snapshot_refs=refs[:4])
    again = list(TurnCount.objects.filter(project_id=project.pk).order_by("snapshot_ref").values())
    assert [{k: v for k, v in r.items() if k != "id"} for r in again] == [
        {k: v for k, v in r.items() if k != "id"} for r in first]
    assert len(again) == 7 and ModelCountRatio.objects.filter(project_id=project.pk).count() == 1


def test_turns_without_reported_usage_are_left_out_and_projects_are_apart(api, project) -> None:
    other = Project.objects.create(name="other-counts")
    snap = estimated_turn(0, usual=-0.08)
    del snap["output"]
    refs = post(api, project, [snap, estimated_turn(1, usual=-0.08)])
    analyze_counts(project_id=project.pk, snapshot_refs=refs)
    assert list(TurnCount.objects.values_list("snapshot_ref", flat=True)) == [refs[1]]
    assert count_drifts(project_id=other.pk, snapshot_refs=refs) == {}


def test_the_figures_go_with_their_project(api, project) -> None:
    refs = post(api, project, [estimated_turn(t, usual=-0.08) for t in range(6)])
    analyze_counts(project_id=project.pk, snapshot_refs=refs)
    assert TurnCount.objects.filter(project_id=project.pk).count() == 6
    project.delete()
    assert not TurnCount.objects.exists() and not ModelCountRatio.objects.exists()


def test_the_per_turn_table_is_registered_for_retention_and_the_analyzer_by_name() -> None:
    from insights import pipeline

    table = registry.ExpiringTable(table="insights_turncount", time_column="received_at")
    assert table in registry.expiring_tables()
    assert dict(pipeline.analyzers())["counts"] is counts.analyze_counts


def test_template_overheads_per_provider() -> None:
    o = tokens.template_overhead("gpt-4o-mini")
    assert (o.per_message, o.per_name, o.priming, o.total(4, 1)) == (3, 1, 3, 16)
    g = tokens.template_overhead("google/gemma-3-270m-it")
    assert (g.per_message, g.priming, g.per_request, g.total(3)) == (5, 3, 1, 19)
    assert tokens.template_overhead("claude-sonnet-4").per_message is None
    assert tokens.template_overhead("claude-sonnet-4").total(3) is None
    assert "family not known" in tokens.template_overhead("mystery-7b").provider


# --- the pages ------------------------------------------------------------------------------
def _login(project: Project) -> Client:
    c = Client()
    c.force_login(make_user("viewer-counts", project, "viewer"))
    return c


def _drift_cells(html: str) -> list[tuple[bool, str]]:
    cells = re.findall(r'<td class="r( bad)?" title="([^"]*)">([^<]*)</td>', html)
    return [(bool(bad), text) for bad, title, text in cells if "drift" in title or "raw" in title]


def test_timeline_and_turn_page_show_the_drift_against_the_usual_ratio(api, project) -> None:
    refs = post(api, project, [estimated_turn(t, usual=-0.13) for t in range(7)])
    dropped = post(api, project, [estimated_turn(7, usual=-0.13, dropped=250)])
    analyze_counts(project_id=project.pk, snapshot_refs=refs + dropped)
    c = _login(project)
    html = c.get(f"/p/{project.pk}/s/steady/").content.decode()
    cells = _drift_cells(html)
    assert len(cells) == 8
    # The raw drift is -13% on every turn; shown against the usual ratio it is 0.0% and not red.
    assert cells[6] == (False, "0.0%")
    assert cells[7][0] and cells[7][1] == "25.0%"
    assert "usual drift of -13.0%" in html

    turn = c.get(f"/p/{project.pk}/s/steady/t/6/").content.decode()
    assert 'id="count-drift">' in turn and "(0.0% drift)" in turn
    assert "why counts differ" in turn and "llama.cpp · Llama 3 template" in turn
    assert 'Our count: 1,000 tokens, with <span class="mono">cl100k_base (estimated)</span>' in turn
    bad = c.get(f"/p/{project.pk}/s/steady/t/7/").content.decode()
    assert 'id="count-drift" class="bad"' in bad and "(25.0% drift)" in bad

    # The read API: the raw drift as ingest derived it, and the analyzer's calibration beside it.
    sid = Snapshot.objects.get(project=project, id=dropped[0]).snapshot_id
    derived = api.get(f"/snapshots/{sid}").json()["derived"]
    cal = derived["count_calibration"]
    assert cal["drift"] == pytest.approx(0.25, abs=0.005) and cal["flagged"] and cal["usual_n"] == 7
    assert cal["usual_drift"] == pytest.approx(-0.13, abs=0.005)
    assert derived["count_drift"] == pytest.approx(1250 / round(1000 / 0.87) - 1, abs=0.005)


def test_the_turn_page_explains_openais_overhead_for_this_turn(api, project) -> None:
    snap = snapshot(session_id="oa", turn=0, model="gpt-4o")
    snap["output"] = {"text": "ok", "usage": {"prompt_tokens": 80}}
    refs = post(api, project, [snap])
    analyze_counts(project_id=project.pk, snapshot_refs=refs)
    html = _login(project).get(f"/p/{project.pk}/s/oa/t/0/").content.decode()
    details = html[html.index('<details class="count-why">'):]
    details = details[: details.index("</details>")]
    # Three messages: 3 x 3 + 3 priming = 12 tokens of overhead.
    assert "OpenAI" in details and "× 3 messages" in details
    assert re.search(r"this turn</th><td class=\"r\">12</td>", details)
    assert "no usual ratio for this model yet" in details


# --- the family's own tokenizer -----------------------------------------------------------------
def gemma_turn(turn: int, session_id: str = "gemma") -> dict[str, Any]:
    snap = snapshot(session_id=session_id, turn=turn, model="gemma-3-270m-it")
    snap["output"] = {"text": "ok", "usage": {"prompt_tokens": 60}}
    return snap


def test_a_gguf_vocabulary_counts_the_prompt_with_the_gemma_template(api, project, settings) -> None:
    from llama_cpp import Llama

    from replay import localmodel

    path = str(localmodel.model_path())
    settings.CTXOBS_TOKENIZERS = json.dumps({"gemma": path, "gemma-3-270m-x": "http://127.0.0.1:9/none"})
    snap = gemma_turn(0)
    refs = post(api, project, [snap])
    analyze_counts(project_id=project.pk, snapshot_refs=refs)
    row = TurnCount.objects.get(project_id=project.pk, snapshot_ref=refs[0])
    vocab = Llama(model_path=path, vocab_only=True, verbose=False)
    texts = [m["content"] for b in snap["blocks"] for m in b["messages"]]
    text_tokens = sum(len(vocab.tokenize(t.encode(), add_bos=False, special=True)) for t in texts)
    # Gemma's template: 5 tokens around each of the 3 messages, 3 to prime the reply, <bos>.
    assert row.native == text_tokens + 3 * 5 + 3 + 1
    assert row.tokenizer == f"GGUF vocabulary {Path(path).name}" and row.counted != row.native
    assert row.ratio == pytest.approx(60 / row.native)


@pytest.mark.parametrize(
    "source", ["http://127.0.0.1:9/v1", "/nonexistent/model.gguf", "/nonexistent/tokenizer.json"])
def test_a_tokenizer_that_cannot_count_leaves_ingests_estimate(
    api, project, settings, source, caplog
) -> None:
    from insights import counts_tokenizers

    settings.CTXOBS_TOKENIZERS = json.dumps({"gemma": source})
    refs = post(api, project, [gemma_turn(t) for t in range(3)])
    analyze_counts(project_id=project.pk, snapshot_refs=refs)
    rows = TurnCount.objects.filter(project_id=project.pk)
    assert len(rows) == 3 and all(r.native is None and r.tokenizer == "cl100k_base (estimated)" for r in rows)
    failures = [r for r in caplog.records if "insights.tokenizer_unavailable" in r.getMessage()]
    assert len(failures) == 1
    # The source is asked once, not once per turn, and not again for a while.
    tok = counts_tokenizers.for_model("gemma-3-270m-it")
    assert tok is not None and counts_tokenizers.is_down(tok)


def test_tokenizer_labels_name_no_credentials_and_no_full_paths() -> None:
    from insights.counts_tokenizers import parse_sources

    toks = parse_sources(json.dumps({"a": "http://user:secret@10.0.0.5:8080/v1", "b": "/srv/m/x.gguf",
                                     "c": "/srv/models/llama3/tokenizer.json"}))
    assert [toks[k].label for k in "abc"] == [
        "llama.cpp server http://10.0.0.5:8080", "GGUF vocabulary x.gguf", "llama3/tokenizer.json"]


@pytest.mark.parametrize("raw", ["[1]", '{"gemma": ""}', "{not json"])
def test_a_malformed_tokenizer_setting_is_logged_and_ignored(api, project, settings, raw, caplog) -> None:
    settings.CTXOBS_TOKENIZERS = raw
    refs = post(api, project, [gemma_turn(0)])
    analyze_counts(project_id=project.pk, snapshot_refs=refs)
    assert TurnCount.objects.get(project_id=project.pk, snapshot_ref=refs[0]).native is None
    assert any("insights.tokenizers_invalid" in r.getMessage() for r in caplog.records)
