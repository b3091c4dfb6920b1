"""Auto-triage end to end: a real Celery worker, the real local model server (behind a proxy
that counts the model calls) and a real webhook receiver; plus the budget's atomicity under
concurrent reservations on real PostgreSQL."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, transaction
from django.urls import reverse

from alerts.models import Alert, AlertRule
from alerts.tasks import alerts_evaluate_task
from core import registry
from core.models import SCOPE_INGEST, SCOPE_REPLAY
from core.services import ingest_key_create, project_triage_set
from ingest.models import Snapshot
from replay.models import ModelEndpoint, QueuePriority, ReplayJob, ReplayRun, Triage, TriageBudget
from replay.services import triage as triage_services
from tests import factories as f
from tests.alerts.receiver import Receiver
from tests.replay.conftest import member_client
from tests.replay.helpers import PLANTED_MEMORY, PLANTED_QUESTION, PLANTED_SYSTEM, post
from tests.waiting import wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]

# A planted-fact turn costs 3 baseline calls and 3 without each of its 3 blocks.
CALLS_PER_TRIAGE = 12
FAILED_CHECK = {
    "layer": "structure",
    "check": "json_schema",
    "passed": False,
    "code": "E_MISSING_FIELD",
    "message": "city missing",
    "attempt": 1,
}


def planted_turn(
    *, session_id: str, turn: int, hot: bool = False, history: bool = False, **kw: Any
) -> dict[str, Any]:
    """The planted-fact turn (the fact only in memory, the question in the user block). HOT: its
    window is so small that the turn lands in the force tier, which the default rules alert on.
    HISTORY: an irrelevant exchange after the memory block, a second source block."""
    blocks = [
        f.block("system", "system", PLANTED_SYSTEM, pinned=True, tokens=20),
        f.block("memory", "memory", PLANTED_MEMORY, tokens=15),
        f.block("user", "user", PLANTED_QUESTION, tokens=10),
    ]
    if history:
        blocks.insert(2, f.block("history", "history", messages=IRRELEVANT_HISTORY, tokens=20))
    return f.snapshot(
        session_id=session_id,
        turn=turn,
        blocks=blocks,
        context_window=59 if hot else 8000,
        output={"text": "Guangzhou.", "tool_calls": [], "finish_reason": "stop"},
        # A one-line answer: the replays send the saved parameters, and a base model left at the
        # factories' 256 tokens rambles on for seconds per call.
        params={"temperature": 0, "max_tokens": 12},
        **kw,
    )


IRRELEVANT_HISTORY = [
    {"role": "user", "content": "Is it going to rain today?"},
    {"role": "assistant", "content": "No, it should stay dry."},
]


def _ref(project: Any, wire: dict[str, Any]) -> int:
    return int(Snapshot.objects.get(project=project, snapshot_id=wire["snapshot_id"]).id)


def _finished(project: Any, ref: int) -> Triage | None:
    t = Triage.objects.filter(project=project, snapshot_ref=ref).first()
    return t if t is not None and t.finished else None


@pytest.mark.e2e
def test_an_alert_on_a_planted_fact_turn_is_triaged_by_itself_and_named_everywhere(
    celery_worker_process: Any, api: Any, counted_local_endpoint: Any
) -> None:
    from alerts.models import IncidentPolicy
    from alerts.services import channels as alert_channels

    ep, proxy = counted_local_endpoint
    project = ep.project
    project_triage_set(project=project, enabled=True, daily_calls=50)
    # One alert's incident is announced at once (by default it waits, pending, for a second
    # session, more turns or a critical alert: alerts.services.incidents).
    IncidentPolicy.objects.update_or_create(project=project, defaults={"confirm_sessions": 1})
    with Receiver() as rx:
        _, secret = alert_channels.channel_create(
            project=project, kind="webhook", data={"name": "hook", "url": rx.url, "timeout_seconds": 3}
        )
        rx.secret = secret
        post(api, planted_turn(session_id="tri", turn=0))
        hot = planted_turn(session_id="tri", turn=1, hot=True)
        post(api, hot)
        ref = _ref(project, hot)
        alerts = wait_until(
            lambda: list(Alert.objects.filter(project=project, snapshot_ref=ref)), 60, "an alert"
        )
        t = wait_until(lambda: _finished(project, ref), 240, "the triage to finish")

        assert t.status == "done", (t.status, t.reason)
        assert t.trigger == "alert" and set(t.alert_ids) >= {a.pk for a in alerts}
        # The system prompt and the question are measured but kept out of the ranking.
        assert t.result["block"] == "memory"
        assert [r["key"] for r in t.result["ranking"]] == ["memory"]
        assert t.result["baseline_samples"] == 3 and t.result["noise"] >= 0.0
        top = t.result["ranking"][0]
        assert t.result["score"] == top["score"] == max(r["score"] for r in t.result["ranking"])
        # Cost: reserved before the job, counted in today's budget, and what the model really got.
        assert t.calls_reserved == CALLS_PER_TRIAGE == t.job.n_runs
        # Its calls waited behind a person's replays, ahead of experiments.
        assert t.job.priority == QueuePriority.TRIAGE
        assert triage_services.budget_used(project=project) == CALLS_PER_TRIAGE
        assert proxy.started == CALLS_PER_TRIAGE
        assert triage_services.triage_calls_made(triage_row=t) == CALLS_PER_TRIAGE

        # Channels hear of the incident the alert opened, once; a follow-up "incident.triaged" to
        # the same channel names the culprit in words.
        opened = wait_until(
            lambda: [r for r in rx.requests if r["headers"].get("X-Ctxobs-Event") == "incident.opened"], 30
        )
        assert {a["id"] for a in opened[0]["body"]["alerts"]} & {a.pk for a in alerts}
        assert opened[0]["body"]["alerts"][0]["turn_url"].endswith(f"/p/{project.pk}/s/tri/t/1/")
        triaged = wait_until(
            lambda: [r for r in rx.requests if r["headers"].get("X-Ctxobs-Event") == "incident.triaged"], 30
        )
        assert triaged[0]["signature_ok"]
        body = triaged[0]["body"]
        assert body["event"] == "incident.triaged"
        assert body["incident"]["id"] == Alert.objects.get(pk=alerts[0].pk).incident_id
        assert f"most responsible block: {t.result['block']} (score" in body["incident"]["culprit"]

    # The turn page and the alert page show the verdict.
    viewer = member_client(project, "viewer")
    turn_page = viewer.get(reverse("ingest:turn", args=[project.pk, "tri", 1])).content.decode()
    assert f"most responsible block: {t.result['block']}" in turn_page
    assert (
        'data-testid="triage-cost"' in turn_page and f"{CALLS_PER_TRIAGE} model calls reserved" in turn_page
    )
    alert_page = viewer.get(reverse("alerts:detail", args=[project.pk, alerts[0].pk])).content.decode()
    assert f"most responsible block: {t.result['block']}" in alert_page
    assert 'data-testid="triage-cancel"' not in alert_page, "a finished triage has nothing to cancel"

    # Dedup: a second alert on the same turn joins the triage instead of starting another.
    first = alerts[0]
    AlertRule.objects.create(
        project=project,
        name="again",
        kind=first.rule.kind,
        severity=first.rule.severity,
        params=first.rule.params,
    )
    res = alerts_evaluate_task.apply_async(kwargs={"project_id": project.pk, "snapshot_refs": [ref]})
    wait_until(lambda: celery_worker_process.task_finished(res.id), 60, "the evaluation")
    again = Alert.objects.filter(project=project, snapshot_ref=ref, rule__name="again").get()
    t2 = Triage.objects.get(pk=t.pk)
    assert again.pk in t2.alert_ids
    assert Triage.objects.filter(project=project, snapshot_ref=ref).count() == 1
    assert t2.status == "done" and t2.job_id == t.job_id
    assert ReplayJob.objects.filter(project=project).count() == 1
    assert proxy.started == CALLS_PER_TRIAGE


@pytest.mark.e2e
def test_a_failed_validation_triggers_a_triage_that_can_be_cancelled_from_the_turn_page(
    celery_worker_process: Any, api: Any, stub_server: Any, stub_endpoint: Any
) -> None:
    project = stub_endpoint.project
    project_triage_set(project=project, enabled=True, daily_calls=50)
    AlertRule.objects.filter(project=project).update(enabled=False)  # only validation flags turns here
    stub_server.delay = 4.0  # each model call takes a while: the job is still running when cancelled
    wire = planted_turn(session_id="val", turn=0, validation=[FAILED_CHECK])
    post(api, wire)
    ref = _ref(project, wire)
    t = wait_until(
        lambda: Triage.objects.filter(project=project, snapshot_ref=ref, status="running").first(),
        60,
        "a start",
    )
    assert t.trigger == "validation" and t.alert_ids == [] and t.job_id is not None
    editor = member_client(project, "editor")
    page = reverse("ingest:turn", args=[project.pk, "val", 0])
    assert 'data-testid="triage-cancel"' in editor.get(page).content.decode()
    resp = editor.post(reverse("replay:triage_cancel", args=[project.pk, t.pk]), {"next": page})
    assert resp.status_code == 302 and resp["Location"] == page
    t.refresh_from_db()
    assert t.status == "cancelled"
    job = ReplayJob.objects.get(pk=t.job_id)
    assert job.status == "cancelled"
    # No new model call starts: the calls under way (at most the worker's two) finish, no more.
    wait_until(lambda: not ReplayRun.objects.filter(job=job, status__in=["pending", "running"]).exists(), 60)
    made = len(stub_server.completion_calls())
    assert made < CALLS_PER_TRIAGE
    assert ReplayRun.objects.filter(job=job, status="cancelled").count() >= CALLS_PER_TRIAGE - made
    # The finisher leaves a cancelled triage as it is.
    triage_services.triage_finish(triage_id=t.pk)
    assert Triage.objects.get(pk=t.pk).status == "cancelled"
    assert "cancelled" in editor.get(page).content.decode()


@pytest.mark.e2e
def test_the_daily_budget_caps_triage_calls_even_with_concurrent_triggers(
    celery_worker_process: Any, api: Any, counted_local_endpoint: Any
) -> None:
    ep, proxy = counted_local_endpoint
    project = ep.project
    cap = 2 * CALLS_PER_TRIAGE + 2  # room for two triages, not three
    project_triage_set(project=project, enabled=True, daily_calls=cap)
    AlertRule.objects.filter(project=project).update(enabled=False)  # only validation flags turns here
    # Four failing turns in one batch: four triages queued at once; the replay worker (two
    # processes) and four threads here start them concurrently.
    wires = [planted_turn(session_id=f"b{i}", turn=0, validation=[FAILED_CHECK]) for i in range(4)]
    resp = api.post_snapshots(wires)
    assert resp.status_code == 200, resp.content
    refs = [_ref(project, w) for w in wires]
    queued = wait_until(
        lambda: (
            (ids := list(Triage.objects.filter(project=project).values_list("id", flat=True)))
            and len(ids) == 4
            and ids
        ),
        60,
        "four triages",
    )
    barrier = threading.Barrier(len(queued))

    def start(tid: int) -> None:
        try:
            barrier.wait()
            triage_services.triage_start(triage_id=tid)
        finally:
            connection.close()

    threads = [threading.Thread(target=start, args=(tid,)) for tid in queued]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    done = wait_until(
        lambda: all(_finished(project, r) for r in refs) and [_finished(project, r) for r in refs],
        300,
        "triages",
    )
    statuses = sorted(t.status for t in done)
    assert statuses == ["done", "done", "skipped", "skipped"], [(t.status, t.reason) for t in done]
    for t in done:
        if t.status == "skipped":
            assert t.reason == f"daily budget of {cap} calls reached"
            assert t.job_id is None and t.calls_reserved == 0
    used = triage_services.budget_used(project=project)
    assert used == 2 * CALLS_PER_TRIAGE <= cap
    assert sum(t.calls_reserved for t in done) == used
    assert ReplayJob.objects.filter(project=project).count() == 2
    assert proxy.started == used, "the model got exactly the calls counted"

    # The next flagged turn of the day is skipped too, and says so on its page.
    late = planted_turn(session_id="late", turn=0, validation=[FAILED_CHECK])
    post(api, late)
    t = wait_until(lambda: _finished(project, _ref(project, late)), 60, "the late triage")
    assert t.status == "skipped" and t.reason == f"daily budget of {cap} calls reached"
    page = member_client(project, "viewer").get(reverse("ingest:turn", args=[project.pk, "late", 0]))
    assert f"skipped: daily budget of {cap} calls reached" in page.content.decode()
    assert triage_services.budget_used(project=project) == used and proxy.started == used


def test_concurrent_reservations_never_pass_the_cap(project: Any) -> None:
    day = triage_services.utc_day()
    n, calls, cap = 12, 5, 23
    barrier = threading.Barrier(n)
    granted: list[bool] = []
    lock = threading.Lock()

    def reserve() -> None:
        try:
            barrier.wait()
            with transaction.atomic():
                ok = triage_services._budget_reserve(project_id=project.pk, day=day, calls=calls, cap=cap)
            with lock:
                granted.append(ok)
        finally:
            connection.close()

    threads = [threading.Thread(target=reserve) for _ in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert granted.count(True) == cap // calls
    assert TriageBudget.objects.get(project=project, day=day).calls == (cap // calls) * calls


def test_one_triage_per_turn_and_only_for_projects_that_opted_in(api: Any, project: Any) -> None:
    wire = planted_turn(session_id="d", turn=0)
    post(api, wire)
    ref = _ref(project, wire)
    flag = registry.TurnFlagged(project_id=project.pk, snapshot_ref=ref, reason="alert", alert_id=11)
    registry.turns_flagged([flag])
    assert not Triage.objects.exists(), "triage is off by default"
    project_triage_set(project=project, enabled=True, daily_calls=10)
    with transaction.atomic():
        registry.turns_flagged([flag])
        registry.turns_flagged(
            [registry.TurnFlagged(project_id=project.pk, snapshot_ref=ref, reason="alert", alert_id=12)]
        )
    (t,) = Triage.objects.filter(project=project)
    assert (t.snapshot_ref, t.turn, t.session_id) == (ref, 0, "d")
    # A worker left running by an earlier test may already have started it (and skipped it: the
    # project has no endpoint); either way there is one.
    assert t.status in ("queued", "skipped")
    assert t.alert_ids == [11, 12]


def test_triage_settings_and_the_api(client: Any, api: Any, project: Any) -> None:
    admin = member_client(project, "admin")
    url = reverse("replay:triage_settings", args=[project.pk])
    # The section on the settings page, with the project's values, posting to replay's view.
    page = admin.get(reverse("ingest:settings", args=[project.pk])).content.decode()
    assert 'id="triage"' in page and f'action="{url}"' in page and 'id="triage-state">off' in page
    bad = admin.post(url, {"enabled": "on", "daily_calls": "-3"})
    assert bad.status_code == 400
    body = bad.content.decode()
    assert "daily_calls" in body and 'id="triage-errors"' in body and 'value="-3"' in body
    project.refresh_from_db()
    assert not project.triage_enabled
    ok = admin.post(url, {"enabled": "on", "daily_calls": "40"})
    assert ok.status_code == 302 and ok["Location"].endswith(f"/p/{project.pk}/settings/#triage")
    project.refresh_from_db()
    assert project.triage_enabled and project.triage_daily_calls == 40
    page = admin.get(ok["Location"]).content.decode()
    assert "Auto-triage is on, within 40 model calls a day." in page and 'id="triage-state">on' in page
    assert member_client(project, "editor", "ed").post(url, {"daily_calls": "1"}).status_code in (403, 404)

    wire = planted_turn(session_id="api", turn=0)
    post(api, wire)
    ref = _ref(project, wire)
    # Stored as the listener stores it, without queueing its start: this test cancels it first.
    snap = Snapshot.objects.get(project=project, snapshot_id=wire["snapshot_id"])
    Triage.objects.create(
        project=project,
        snapshot_ref=ref,
        snapshot_uuid=snap.snapshot_id,
        session_id="api",
        turn=0,
        received_at=snap.received_at,
        trigger="alert",
    )
    t = Triage.objects.get(project=project, snapshot_ref=ref)
    got = api.get("/triage", snapshot_id=wire["snapshot_id"])
    assert got.status_code == 200 and got.json()["id"] == t.pk and got.json()["status"] == "queued"
    assert api.get("/triage", snapshot_id="not-a-uuid").status_code in (400, 422)
    # Cancelling spends no budget but stops it: a key needs the replay scope.
    path = f"/api/v1/triage/{t.pk}/cancel"
    refused = client.post(path, **api.headers())
    assert refused.status_code == 403
    _, replay_key = ingest_key_create(project=project, name="ops", scopes=(SCOPE_INGEST, SCOPE_REPLAY))
    done = client.post(path, HTTP_AUTHORIZATION=f"Bearer {replay_key}")
    assert done.status_code == 200 and done.json()["status"] == "cancelled"
    # A cancelled triage is never started.
    assert triage_services.triage_start(triage_id=t.pk) == "nothing_to_do"
    assert not ReplayJob.objects.exists()


def _sourced_turn(*, session_id: str) -> dict[str, Any]:
    """A planted-fact turn with three source blocks (memory, history, retrieval) besides the
    system prompt and the question: what an attribution can tell apart."""
    blocks = [
        f.block("system", "system", PLANTED_SYSTEM, pinned=True, tokens=20),
        f.block("memory", "memory", PLANTED_MEMORY, tokens=15),
        f.block(
            "history",
            "history",
            messages=[
                {"role": "user", "content": "Is it going to rain today?"},
                {"role": "assistant", "content": "No, it should stay dry."},
            ],
            tokens=20,
        ),
        f.block("retrieval", "retrieval", "Document: the museum has three floors.", tokens=12),
        f.block("user", "user", PLANTED_QUESTION, tokens=10),
    ]
    return f.snapshot(
        session_id=session_id,
        turn=0,
        blocks=blocks,
        output={"text": "Guangzhou.", "tool_calls": [], "finish_reason": "stop"},
    )


@pytest.mark.e2e
def test_a_failed_validation_on_a_turn_with_sources_is_triaged_by_attribution_on_the_real_model(
    celery_worker_process: Any, api: Any, counted_local_endpoint: Any
) -> None:
    """The attribution path end to end: the fact only in memory, an irrelevant history beside it,
    the real worker and the real local model."""
    from replay import triage

    ep, proxy = counted_local_endpoint
    project = ep.project
    # The local model is a base model. Through the server's chat format (llama-2's fallback: its
    # GGUF has no template) it rambles, and the history's two messages move a rambling answer
    # as far as the memory does; a transcript ending in "Assistant:" gets a one-line answer.
    ModelEndpoint.objects.filter(pk=ep.pk).update(mode=ModelEndpoint.Mode.COMPLETIONS)
    project_triage_set(project=project, enabled=True, daily_calls=50)
    AlertRule.objects.filter(project=project).update(enabled=False)  # only validation flags turns here
    wire = planted_turn(session_id="att-e2e", turn=0, validation=[FAILED_CHECK], history=True)
    post(api, wire)
    ref = _ref(project, wire)
    t = wait_until(lambda: _finished(project, ref), 240, "the triage to finish")

    assert t.status == "done", (t.status, t.reason)
    assert t.trigger == "validation" and t.job_kind == "attribution" == t.job.kind
    sources = {"memory", "history"}  # the blocks besides the system prompt and the question
    result = t.result
    assert result["method"] == "attribution"
    assert result["block"] in sources and isinstance(result["score"], float)
    assert result["baseline_samples"] == 3 and result["noise"] >= 0.0
    assert {r["key"] for r in result["ranking"]} == sources and len(result["ranking"]) == 2
    top = result["ranking"][0]
    assert (top["key"], top["score"]) == (result["block"], result["score"])
    assert result["score"] == max(r["score"] for r in result["ranking"])
    # The fact lives only in memory: without it the answer loses it, without the history it
    # does not, so the attribution names memory, alone, beyond the baseline's noise.
    answers = list(ReplayRun.objects.filter(job=t.job).values_list("variant__label", "output_text"))
    assert result["block"] == "memory" and result["tied_with"] == [], (result, answers)
    assert result["within_noise"] is False and top["changed"] is True
    assert triage.triage_summary(result).startswith(
        f"most responsible block: memory (score {result['score']:.2f}, noise band {result['noise']:.2f})"
    )
    # Cost: the 3 baseline samples and one call per ablation that changes the request, reserved
    # before the job, counted in today's budget, and what the model server really got.
    job = t.job
    changing = job.variants.filter(is_baseline=False, no_change=False).count()
    assert 0 < changing <= job.spec["ablations"] == 8
    assert t.calls_reserved == 3 + changing == job.n_runs
    assert proxy.started == t.calls_reserved
    assert triage_services.budget_used(project=project) == t.calls_reserved
    assert triage_services.triage_calls_made(triage_row=t) == t.calls_reserved


@pytest.mark.parametrize(
    ("keys", "method"),
    [
        (["system", "memory", "user"], "loo"),
        (["system", "memory", "history", "user"], "attribution"),
        (["memory", "history"], "attribution"),
        (["system", "user"], "loo"),
    ],
    ids=["one-source", "two-sources", "no-system-prompt", "no-source"],
)
def test_triage_runs_attribution_when_the_turn_has_two_source_blocks(keys: list[str], method: str) -> None:
    from replay import attribution, triage
    from replay.services.jobs import JOB_KINDS

    blocks = [{"key": k, "kind": k} for k in keys]
    spec = triage.triage_job_spec(snapshot_id="s", blocks=blocks, job_kinds=JOB_KINDS)
    assert spec["kind"] == method
    assert spec["samples"] == triage.TRIAGE_SAMPLES
    if method == "attribution":
        # As many ablations as a leave-one-out would make calls, at least the fewest it takes.
        assert spec["ablations"] == max(attribution.MIN_ABLATIONS, len(keys))
    else:
        assert "ablations" not in spec
    # Without the attribution kind on offer, leave-one-out.
    assert triage.triage_job_spec(snapshot_id="s", blocks=blocks, job_kinds=("loo",))["kind"] == "loo"


def test_an_attribution_verdict_names_the_top_source_with_its_band_and_method() -> None:
    from replay import triage

    def source(key: str, position: int, score: float, within: bool) -> dict[str, Any]:
        return {
            "index": position,
            "key": key,
            "text": "",
            "position": position,
            "score": score,
            "within_noise": within,
            "rank": 0,
        }

    att = {
        "level": "block",
        "block": None,
        "block_position": None,
        "planned": 9,
        "measured": 9,
        "samples": 3,
        "noise": 0.02,
        "fit": None,
        "sources": [
            source("memory", 1, 0.61, False),
            source("history", 2, 0.03, False),
            source("retrieval", 3, 0.01, True),
        ],
        "top": "memory",
        "top_alone": True,
    }
    turn: Any = {"attribution": att, "variants": [], "noise": {"max": 0.5, "samples": 3}}
    kinds = {"memory": "memory", "history": "history", "retrieval": "retrieval"}
    result = triage.triage_result(turn=turn, block_kinds=kinds, method="attribution")
    assert result["method"] == "attribution"
    assert (result["block"], result["kind"], result["score"]) == ("memory", "memory", 0.61)
    # The band is the attribution's own, not the leave-one-out noise of the turn.
    assert result["noise"] == 0.02 and result["within_noise"] is False and result["tied_with"] == []
    assert [r["key"] for r in result["ranking"]] == ["memory", "history", "retrieval"]
    assert [r["changed"] for r in result["ranking"]] == [True, True, False]
    assert result["ranking"][0]["position"] == 1
    assert triage.triage_summary(result).startswith(
        "most responsible block: memory (score 0.61, noise band 0.02)"
    )


def test_a_triage_of_a_turn_with_sources_reserves_its_attribution_job_calls(
    api: Any, stub_endpoint: Any
) -> None:
    from replay import attribution

    project = stub_endpoint.project
    wire = _sourced_turn(session_id="att")
    post(api, wire)
    ref = _ref(project, wire)
    snap = Snapshot.objects.get(project=project, snapshot_id=wire["snapshot_id"])
    project_triage_set(project=project, enabled=True, daily_calls=50)
    t = Triage.objects.create(
        project=project,
        snapshot_ref=ref,
        snapshot_uuid=snap.snapshot_id,
        session_id="att",
        turn=0,
        received_at=snap.received_at,
        trigger="validation",
    )
    assert triage_services.triage_start(triage_id=t.pk) == "started"
    t.refresh_from_db()
    job = ReplayJob.objects.get(pk=t.job_id)
    assert t.status == "running" and t.job_kind == job.kind == "attribution"
    assert job.spec["ablations"] == attribution.MIN_ABLATIONS  # five blocks: at least eight
    # Reserved: the 3 baseline samples and one call per ablation that changes the request, the
    # job's runs and the day's use alike.
    changing = job.variants.filter(is_baseline=False, no_change=False).count()
    assert job.variants.filter(is_baseline=False).count() == attribution.MIN_ABLATIONS
    assert t.calls_reserved == 3 + changing == job.n_runs == job.estimate["model_calls"]
    assert triage_services.budget_used(project=project) == t.calls_reserved
    triage_services.triage_cancel(triage_row=t)


def test_the_turn_page_shows_an_attribution_verdict_as_one(api: Any, project: Any) -> None:
    from replay import triage

    wire = _sourced_turn(session_id="page")
    post(api, wire)
    snap = Snapshot.objects.get(project=project, snapshot_id=wire["snapshot_id"])
    project_triage_set(project=project, enabled=True, daily_calls=50)
    ranking = [
        {"key": "memory", "kind": "memory", "position": 1, "score": 0.61, "changed": True},
        {"key": "history", "kind": "history", "position": 2, "score": 0.01, "changed": False},
    ]
    result = {
        "block": "memory",
        "kind": "memory",
        "score": 0.61,
        "noise": 0.02,
        "baseline_samples": 3,
        "within_noise": False,
        "tied_with": [],
        "ranking": ranking,
        "method": "attribution",
    }
    Triage.objects.create(
        project=project,
        snapshot_ref=snap.id,
        snapshot_uuid=snap.snapshot_id,
        session_id="page",
        turn=0,
        received_at=snap.received_at,
        trigger="validation",
        status="done",
        job_kind="attribution",
        result=result,
    )
    page = member_client(project, "viewer").get(reverse("ingest:turn", args=[project.pk, "page", 0]))
    html = page.content.decode()
    assert page.status_code == 200
    assert triage.triage_summary(result) in html
    assert "score (attribution weight)" in html and "block removed" not in html
    assert "method: attribution (random ablations" in html
