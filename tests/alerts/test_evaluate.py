"""Evaluation after ingest on sessions posted through the real ingest API, one test per rule
kind plus out-of-order and repeated delivery, cooldown and the session's alert count."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from alerts import kinds as K
from alerts import selectors
from alerts.models import Alert, AlertRule
from alerts.services import evaluation as alert_evaluation
from alerts.services import rules as alert_rules
from core.models import Project
from core.services import project_create
from ingest.models import AgentSession, Snapshot
from tests.alerts.conftest import sized_snapshot
from tests.factories import block

pytestmark = pytest.mark.django_db


def alerts_of(project: Project, kind: str | None = None) -> list[Alert]:
    qs = Alert.objects.filter(project=project).order_by("turn", "id")
    if kind:
        qs = qs.filter(rule_kind=kind)
    return list(qs)


def only_rule(project: Project, kind: str, **params: Any) -> AlertRule:
    AlertRule.objects.filter(project=project).delete()
    return alert_rules.rule_create(project=project, data={"name": kind, "kind": kind, "params": params})


def test_new_project_gets_the_default_rules_of_every_kind(db):
    project, _ = project_create(name="fresh")
    kinds = set(AlertRule.objects.filter(project=project).values_list("kind", flat=True))
    assert kinds == set(K.KINDS)
    tiers = set(
        AlertRule.objects.filter(project=project, kind=K.TIER_CROSSING).values_list("params__tier", flat=True)
    )
    assert tiers == {"warn", "compress", "force", "break"}


def test_tier_crossing_alert_points_at_the_turn_and_its_growing_blocks(poster, project):
    fills = [0.3, 0.5, 0.75, 0.9, 0.92, 0.91, 0.9]
    for i, f in enumerate(fills):
        poster.post([sized_snapshot(turn=i, fill=f)])
    force = [a for a in alerts_of(project, K.TIER_CROSSING) if a.rule.params["tier"] == "force"]
    assert len(force) == 1, "a session sitting in the force tier raises one alert"
    a = force[0]
    assert (a.turn, a.last_turn) == (3, 3)
    assert a.value == pytest.approx(90, abs=0.5) and a.threshold == pytest.approx(85)
    assert a.contributors[0]["key"] == "history" and a.contributors[0]["delta"] > 0
    assert len(a.contributors) <= 3
    assert a.session_id == "s-1" and a.state == "open"
    compress = [a for a in alerts_of(project, K.TIER_CROSSING) if a.rule.params["tier"] == "compress"]
    assert [x.turn for x in compress] == [2]


def test_watermark_spike_from_one_big_tool_result(poster, project):
    only_rule(project, K.WATERMARK_SPIKE, rise_points=20)
    tool = block("search", "tool_results", "a very long search result", tokens=3000)
    poster.post([sized_snapshot(turn=0, fill=0.2), sized_snapshot(turn=1, fill=0.22)])
    poster.post([sized_snapshot(turn=2, fill=0.6, extra_blocks=[tool])])
    (a,) = alerts_of(project)
    assert a.turn == 2 and a.unit == "points"
    assert a.value == pytest.approx(38, abs=1)
    assert a.contributors[0]["key"] == "search" and a.contributors[0]["delta"] == 3000


def test_one_block_above_a_share_of_the_window(poster, project):
    only_rule(project, K.BLOCK_SHARE, share_pct=30, block_kinds="tool_results")
    huge = block("search", "tool_results", "huge", tokens=3000)
    poster.post([sized_snapshot(turn=0, fill=0.5), sized_snapshot(turn=1, fill=0.6, extra_blocks=[huge])])
    (a,) = alerts_of(project)
    assert a.turn == 1
    assert "'search'" in a.title
    assert a.value == pytest.approx(3000 / 8500 * 100)
    assert a.contributors[0]["key"] == "search"


def test_compression_storm(poster, project):
    only_rule(project, K.COMPRESSION_STORM, events=3, turns=3)
    ev = {
        "strategy": "drop_tool_output",
        "block": "history",
        "tokens_before": 900,
        "tokens_after": 100,
        "watermark": 0.7,
        "items": ["c1"],
    }
    snaps = [sized_snapshot(turn=i, fill=0.7, compression=[ev] if i >= 2 else []) for i in range(6)]
    poster.post(snaps[:4])
    assert alerts_of(project) == [], "two events within three turns are no storm"
    poster.post(snaps[4:5])
    (a,) = alerts_of(project)
    assert (a.turn, a.value, a.threshold, a.unit) == (4, 3, 3, "events")
    poster.post(snaps[5:])
    (a,) = alerts_of(project)
    assert a.last_turn == 5 and a.peak_value == 3
    assert a.contributors[0]["key"] == "history" and a.contributors[0]["compressed_tokens"] > 0


def test_validation_failure_rate(poster, project):
    only_rule(project, K.VALIDATION_FAILURE_RATE, rate_pct=50, turns=5, min_checks=3)

    def v(passed: bool) -> list[dict[str, Any]]:
        return [
            {
                "layer": "structure",
                "check": "json_schema",
                "passed": passed,
                "code": "" if passed else "E_JSON",
            }
        ]

    results = [True, True, False, False, False, True]
    poster.post([sized_snapshot(turn=i, fill=0.3, validation=v(p)) for i, p in enumerate(results)])
    (a,) = alerts_of(project)
    # Turn 3: 2 of 4 checks failed, 50% is not above the rate; turn 4: 3 of 5.
    assert a.turn == 4 and a.value == pytest.approx(60) and a.last_turn == 4


def test_recall_misses(poster, project):
    only_rule(project, K.RECALL_MISS_RATE, rate_pct=50, turns=10, min_recalls=3)

    def rc(injected: bool) -> list[dict[str, Any]]:
        return [{"memory_id": "m-1", "channel": "vector", "score": 0.4, "rank": 1, "injected": injected}]

    pattern = [True, False, False, False]
    poster.post([sized_snapshot(turn=i, fill=0.3, recall=rc(p)) for i, p in enumerate(pattern)])
    (a,) = alerts_of(project)
    assert a.turn == 2 and a.value == pytest.approx(200 / 3)


def test_count_drift(poster, project):
    only_rule(project, K.COUNT_DRIFT, drift_pct=10)
    out = {"text": "ok", "usage": {"prompt_tokens": 2000, "completion_tokens": 3}}
    honest = {"text": "ok", "usage": {"prompt_tokens": 2550, "completion_tokens": 3}}
    poster.post(
        [sized_snapshot(turn=0, fill=0.3, output=honest), sized_snapshot(turn=1, fill=0.3, output=out)]
    )
    (a,) = alerts_of(project)
    assert a.turn == 1 and a.value > 10


def test_count_drift_is_judged_against_the_models_usual_ratio(poster, project):
    """A tokenizer's steady offset (ours 8% under the provider's count on every turn) does not
    alert, not even before the model's usual ratio is learned; a turn whose context the provider
    did not get (a dropped message: it counted far fewer tokens) does."""
    only_rule(project, K.COUNT_DRIFT, drift_pct=5)
    ours = 2550  # sized_snapshot(fill=0.3): the prompt tokens we count

    def out(prompt_tokens: int) -> dict[str, Any]:
        return {"text": "ok", "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 3}}

    steady = round(ours / 0.92)
    for t in range(8):
        poster.post([sized_snapshot(turn=t, fill=0.3, output=out(steady))])
    assert alerts_of(project) == []
    raw = Snapshot.objects.filter(project=project).values_list("count_drift", flat=True)
    assert all(d == pytest.approx(-0.08, abs=0.005) for d in raw)  # over the rule's 5% against zero

    poster.post([sized_snapshot(turn=8, fill=0.3, output=out(1500))])
    (a,) = alerts_of(project)
    assert a.turn == 8 and a.value > 50 and "usual ratio" in a.title


@pytest.mark.parametrize(
    ("field", "narrowed_to", "other"),
    [("model", "gpt-4o-mini", "gpt-4o"), ("agent", "billing-bot", "travel-bot")],
    ids=["model", "agent"],
)
def test_rule_narrowed_to_an_agent_or_a_model_ignores_the_others(poster, project, field, narrowed_to, other):
    only_rule(project, K.COUNT_DRIFT, drift_pct=10)
    AlertRule.objects.filter(project=project).update(**{field: narrowed_to})
    out = {"text": "ok", "usage": {"prompt_tokens": 1000}}
    poster.post([sized_snapshot(turn=0, fill=0.3, output=out, **{field: other})])
    assert alerts_of(project) == []
    poster.post([sized_snapshot(turn=0, fill=0.3, output=out, session_id="s-2", **{field: narrowed_to})])
    (a,) = alerts_of(project)
    assert a.session_id == "s-2" and getattr(a, field) == narrowed_to


PROFILE = [0.2, 0.3, 0.5, 0.65, 0.8, 0.9, 0.88, 0.97, 0.6, 0.4, 0.45, 0.9]


def _signature(project: Project) -> list[tuple[str, str, int, int]]:
    return sorted((a.rule.name, a.session_id, a.turn, a.last_turn) for a in alerts_of(project))


def _post_profile(poster: Any, order: list[int], *, session_id: str = "s-1") -> None:
    snaps = [sized_snapshot(turn=i, fill=f, session_id=session_id) for i, f in enumerate(PROFILE)]
    for i in order:
        poster.post([snaps[i]])


def test_out_of_order_arrival_raises_the_same_alerts_as_in_order(poster, project):
    _post_profile(poster, list(range(len(PROFILE))), session_id="in-order")
    expected = [(r, t, lt) for r, _s, t, lt in _signature(project)]
    assert expected, "the profile must raise alerts"
    rng = random.Random(7)
    for n in range(3):
        order = list(range(len(PROFILE)))
        rng.shuffle(order)
        _post_profile(poster, order, session_id=f"shuffled-{n}")
        # The lateness allowance has passed for everything: the deferred re-evaluation runs.
        refs = list(
            Snapshot.objects.filter(project=project, session_id=f"shuffled-{n}").values_list("id", flat=True)
        )
        with_past = timezone.now() + timedelta(seconds=settings.CTXOBS_ALERT_LATENESS_SECONDS + 1)
        Snapshot.objects.filter(project=project, id__in=refs).update(
            received_at=with_past - timedelta(hours=1)
        )
        alert_evaluation.alerts_evaluate(project_id=project.pk, snapshot_refs=refs)
        got = [(r, t, lt) for r, s, t, lt in _signature(project) if s == f"shuffled-{n}"]
        assert got == expected, f"order {order}"


def test_a_turn_waits_for_its_missing_predecessor(poster, project):
    only_rule(project, K.WATERMARK_SPIKE, rise_points=20, median_ratio=0)
    snaps = [sized_snapshot(turn=i, fill=f) for i, f in enumerate([0.2, 0.5, 0.55])]
    poster.post([snaps[0]])
    refs = poster.post([snaps[2]], evaluate=False)
    res = alert_evaluation.alerts_evaluate(project_id=project.pk, snapshot_refs=refs)
    assert res.deferred == refs and 0 < res.retry_in <= settings.CTXOBS_ALERT_LATENESS_SECONDS
    assert alerts_of(project) == [], "0.2 -> 0.55 is not a spike of turn 2: turn 1 is missing"
    poster.post([snaps[1]])
    (a,) = alerts_of(project)
    assert a.turn == 1


def test_evaluating_twice_raises_nothing_new(poster, project):
    refs: list[int] = []
    for i, f in enumerate(PROFILE):
        refs += poster.post([sized_snapshot(turn=i, fill=f)])
    before = _signature(project)
    res = alert_evaluation.alerts_evaluate(project_id=project.pk, snapshot_refs=refs)
    assert res.created == []
    assert _signature(project) == before
    assert len({a.dedup_key for a in alerts_of(project)}) == len(before)


def test_a_resent_batch_is_a_duplicate_and_raises_nothing(poster, project, api):
    snaps = [sized_snapshot(turn=i, fill=f) for i, f in enumerate(PROFILE)]
    poster.post(snaps)
    before = _signature(project)
    r = api.post_snapshots(snaps)
    assert {x["status"] for x in r.json()["results"]} == {"duplicate"}
    assert _signature(project) == before


def test_cooldown_in_turns_separates_episodes(poster, project):
    rule = only_rule(project, K.TIER_CROSSING, tier="force")
    fills = [0.5, 0.9, 0.5, 0.9] + [0.5] * 6 + [0.9]
    poster.post([sized_snapshot(turn=i, fill=f) for i, f in enumerate(fills)])
    assert rule.cooldown_turns == 20
    assert [(a.turn, a.last_turn) for a in alerts_of(project)] == [(1, 10)], "within the cooldown: one alert"
    alert_rules.rule_update(rule=rule, data={"cooldown_turns": 3, "cooldown_seconds": 0})
    poster.post([sized_snapshot(turn=i, fill=f, session_id="s-2") for i, f in enumerate(fills)])
    assert [(a.turn, a.last_turn) for a in alerts_of(project) if a.session_id == "s-2"] == [(1, 3), (10, 10)]


def test_session_alert_count_and_timeline_markers(poster, project):
    for i, f in enumerate(PROFILE):
        poster.post([sized_snapshot(turn=i, fill=f)])
    session = AgentSession.objects.get(project=project, session_id="s-1")
    alerts = alerts_of(project)
    assert session.alert_count == len(alerts) > 0
    markers = selectors.session_alert_markers(project_id=project.pk, session_ref=session.id)
    assert [m["alert_id"] for m in markers] == [a.pk for a in sorted(alerts, key=lambda a: (a.turn, a.pk))]
    assert set(markers[0]) >= {"turn", "rule_kind", "severity", "title", "alert_id"}
    alert_rules.rule_delete(rule=alerts[0].rule)
    session.refresh_from_db()
    assert session.alert_count == Alert.objects.filter(project=project).count()


def test_evaluation_cost_does_not_grow_with_the_session(
    poster, project, django_assert_num_queries, django_assert_max_num_queries
):
    # Every other turn enters the compress tier, a minute apart, so alerts pile up in the session.
    AlertRule.objects.filter(project=project).exclude(kind=K.TIER_CROSSING).delete()
    AlertRule.objects.filter(project=project).update(cooldown_turns=1, cooldown_seconds=0)
    start = timezone.now() - timedelta(days=1)
    snaps = [
        sized_snapshot(turn=i, fill=0.3 + 0.45 * (i % 2), ts=start + timedelta(minutes=i)) for i in range(300)
    ]
    refs = poster.post(snaps)
    assert len(alerts_of(project)) >= 100
    quiet = sized_snapshot(turn=300, fill=0.3, ts=start + timedelta(minutes=300))
    (ref,) = poster.post([quiet], evaluate=False)
    with django_assert_num_queries(2):  # rules, then the turn's neighbourhood: nothing fires
        alert_evaluation.alerts_evaluate(project_id=project.pk, snapshot_refs=[ref])
    firing = sized_snapshot(turn=301, fill=0.75, ts=start + timedelta(minutes=301))
    (ref,) = poster.post([firing], evaluate=False)
    # Grouping a new alert into its incident adds a constant handful (alerts.services.incidents).
    with django_assert_max_num_queries(20):
        res = alert_evaluation.alerts_evaluate(project_id=project.pk, snapshot_refs=[ref])
    assert res.created or res.updated
    with django_assert_max_num_queries(21):  # a late turn re-evaluates the turns after it
        alert_evaluation.alerts_evaluate(project_id=project.pk, snapshot_refs=refs[5:6])


def test_episode_scan_past_its_limit_still_finds_a_long_alert(project):
    """More alerts end after a turn than one bounded scan reads: the long alert that spans them
    (possible when a time cooldown joins distant turns) is still found."""
    rule = only_rule(project, K.COUNT_DRIFT)
    t0 = timezone.now() - timedelta(days=1)

    def alert(first: int, last: int) -> Alert:
        return Alert.objects.create(
            project=project, rule=rule, rule_kind=rule.kind, severity="info", title="t", session_ref=1,
            session_id="s", turn=first, snapshot_ref=first, ts=t0 + timedelta(minutes=first),
            last_turn=last, last_ts=t0 + timedelta(minutes=last), value=1, threshold=1, peak_value=1,
            dedup_key=f"{rule.pk}:1:{first}",
        )  # fmt: skip

    long = alert(0, 100)
    n_short = selectors.EPISODE_SCAN_LIMIT + 4
    for i in range(n_short):
        alert(51 + i, 51 + i)
    probe = selectors.EpisodeProbe(session_ref=1, rule_id=rule.pk, from_turn=50, from_ts=None)
    found = selectors.episodes_near(project_id=project.pk, probes=[probe])
    assert long.pk in {a.pk for a in found}
    assert len(found) == n_short + 1
    probe = selectors.EpisodeProbe(session_ref=1, rule_id=rule.pk, from_turn=200, from_ts=t0)
    assert long.pk in {a.pk for a in selectors.episodes_near(project_id=project.pk, probes=[probe])}


def test_alerts_whose_figures_mix_ints_and_floats_are_updated_in_one_statement(poster, project):
    """A compression storm counts compressions (ints) and a tier crossing measures a fill (floats):
    one evaluation that extends both writes them in one UPDATE. Sent as they are, psycopg refused
    the mixed list and the whole evaluation rolled back, with the alerts it had made."""
    from alerts.services.episodes import alerts_update

    for i, f in enumerate([0.3, 0.5, 0.9, 0.97]):
        poster.post([sized_snapshot(turn=i, fill=f)])
    a, b = alerts_of(project)[:2]
    a.value, a.threshold, a.peak_value = 4, 3, 5
    b.value, b.threshold, b.peak_value = 91.36, 80.0, 97.25
    alerts_update([a, b])
    a.refresh_from_db()
    b.refresh_from_db()
    assert (a.value, a.threshold, a.peak_value) == (4.0, 3.0, 5.0)
    assert (b.value, b.threshold, b.peak_value) == (91.36, 80.0, 97.25)
