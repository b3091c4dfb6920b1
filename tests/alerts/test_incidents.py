"""Incidents on the real database: alerts grouped within a session and across sessions, the
project's windows, auto-resolve and reopen driven by the turn times and the sweep's `now`, and
the incidents API."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from alerts import kinds as K
from alerts.models import Alert, Incident, IncidentPolicy
from alerts.services.incidents import incidents_sweep
from alerts.tasks import alerts_incidents_sweep_task
from tests.alerts.conftest import confirm_at_once, sized_snapshot
from tests.alerts.test_api import csrf, editor_client
from tests.factories import block

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def jump(poster, session_id: str, *, at: datetime = T0, fill: float = 0.9, agent: str = "travel-bot", **kw):
    """Turn 0 at 30%, turn 1 jumping to FILL: compress tier, force tier and a watermark spike at
    once (and the break tier above 97%)."""
    poster.post(
        [
            sized_snapshot(turn=0, fill=0.3, session_id=session_id, ts=at, agent=agent),
            sized_snapshot(
                turn=1, fill=fill, session_id=session_id, ts=at + timedelta(seconds=10), agent=agent, **kw
            ),
        ]
    )


def test_three_rules_firing_on_one_turn_make_one_incident(poster, project):
    jump(poster, "s-1")
    alerts = list(Alert.objects.filter(project=project))
    assert sorted(a.rule.name for a in alerts) == [
        "Entered the compress tier",
        "Entered the force tier",
        "Watermark spike",
    ]
    (inc,) = Incident.objects.filter(project=project)
    assert {a.incident_id for a in alerts} == {inc.pk}
    assert (inc.alert_count, inc.session_count, inc.opened_count) == (3, 1, 1)
    assert inc.severity == "warning", "the highest of its alerts (compress is info)"
    assert inc.cause == "context_pressure:history" and inc.agent == "travel-bot"
    assert inc.title == "The history overflowed the window in 1 session of agent travel-bot since 08:00 UTC"
    assert inc.first_seen == T0 + timedelta(seconds=10)
    # One turn of one session, no critical alert: pending until confirmed (test_incident_pending).
    assert inc.status == "pending" and inc.confirmed_at is None


def test_a_later_alert_of_another_rule_within_the_session_window_joins_the_incident(poster, project):
    jump(poster, "s-1")
    # Turn 4 (three turns later): a big tool result takes half the window, a "one huge block"
    # alert about another block, in the same event.
    tool = block("search", "tool_results", "results", tokens=4000)
    poster.post(
        [
            sized_snapshot(turn=2, fill=0.9, session_id="s-1", ts=T0 + timedelta(seconds=20)),
            sized_snapshot(turn=3, fill=0.9, session_id="s-1", ts=T0 + timedelta(seconds=30)),
            sized_snapshot(
                turn=4, fill=0.92, session_id="s-1", ts=T0 + timedelta(seconds=40), extra_blocks=[tool]
            ),
        ]
    )
    share = Alert.objects.get(project=project, rule_kind=K.BLOCK_SHARE)
    assert share.contributors[0]["key"] == "search"
    (inc,) = Incident.objects.filter(project=project)
    assert share.incident_id == inc.pk and inc.alert_count == Alert.objects.filter(project=project).count()


def test_the_same_cause_in_three_sessions_of_an_agent_is_one_incident(poster, project):
    for i, s in enumerate(("s-1", "s-2", "s-3")):
        jump(poster, s, at=T0 + timedelta(minutes=5 * i))
    (inc,) = Incident.objects.filter(project=project)
    assert (inc.alert_count, inc.session_count) == (9, 3)
    assert inc.last_seen == T0 + timedelta(minutes=10, seconds=10)
    assert "in 3 sessions of agent travel-bot since 08:00 UTC" in inc.title
    assert set(Alert.objects.filter(project=project).values_list("incident_id", flat=True)) == {inc.pk}


def test_another_cause_or_another_agent_opens_its_own_incident(poster, project):
    jump(poster, "s-1")
    # A tool result that arrives and floods the window: the top contributor is `search`.
    tool = block("search", "tool_results", "results", tokens=5000)
    jump(poster, "s-2", extra_blocks=[tool])
    jump(poster, "s-3", agent="billing-bot")
    got = {(i.agent, i.cause): i for i in Incident.objects.filter(project=project)}
    assert set(got) == {
        ("travel-bot", "context_pressure:history"),
        ("travel-bot", "context_pressure:search"),
        ("billing-bot", "context_pressure:history"),
    }
    assert all(i.session_count == 1 for i in got.values())
    assert got[("travel-bot", "context_pressure:search")].title.startswith(
        "Tool results from `search` overflowed the window in 1 session"
    )


def test_a_project_policy_narrows_the_cross_session_window(poster, project):
    IncidentPolicy.objects.create(project=project, group_window_seconds=60)
    jump(poster, "s-1")
    jump(poster, "s-2", at=T0 + timedelta(minutes=10))
    assert Incident.objects.filter(project=project).count() == 2
    jump(poster, "s-3", at=T0 + timedelta(minutes=10, seconds=30))
    assert sorted(Incident.objects.filter(project=project).values_list("session_count", flat=True)) == [1, 2]


def test_a_quiet_incident_resolves_itself_and_the_cause_returning_reopens_it(poster, project):
    confirm_at_once(project)  # only a confirmed incident reopens
    start = timezone.now().replace(microsecond=0) - timedelta(hours=5)
    jump(poster, "s-1", at=start)
    (inc,) = Incident.objects.filter(project=project)
    inc.status = "acknowledged"  # acknowledged incidents resolve on their own too
    inc.save()
    seen = start + timedelta(seconds=10)

    assert incidents_sweep(now=seen + timedelta(minutes=29)).resolved == 0
    for n in (1, 0):  # run twice: the second run finds nothing to do
        res = alerts_incidents_sweep_task.apply(
            kwargs={"now": (seen + timedelta(minutes=31)).isoformat()}
        ).get()
        assert res["resolved"] == n
    inc.refresh_from_db()
    assert (inc.status, inc.resolution, inc.resolved_by) == ("resolved", "auto", None)
    assert inc.resolved_at == seen + timedelta(minutes=31)

    # Within the reopen window (2 h after resolution): the same incident, reopened.
    jump(poster, "s-2", at=start + timedelta(hours=1))
    inc.refresh_from_db()
    assert Incident.objects.filter(project=project).count() == 1
    assert (inc.status, inc.opened_count, inc.session_count, inc.alert_count) == ("open", 2, 2, 6)
    assert inc.reopened_at is not None and inc.resolved_at is None and inc.resolution == ""

    # Reopened once, it needs twice the quiet period (quiet_seconds x opened_count) to resolve, and
    # meanwhile the cause returning joins it even past the group window (30 minutes).
    jump(poster, "s-3", at=start + timedelta(hours=1, minutes=45))
    inc.refresh_from_db()
    assert Incident.objects.filter(project=project).count() == 1
    assert (inc.status, inc.opened_count, inc.session_count) == ("open", 2, 3)
    last = start + timedelta(hours=1, minutes=45, seconds=10)
    assert incidents_sweep(now=last + timedelta(minutes=59)).resolved == 0
    second = last + timedelta(minutes=61)
    assert incidents_sweep(now=second).resolved == 1
    # Past the reopen window: a new incident.
    jump(poster, "s-4", at=second + timedelta(hours=2, minutes=1))
    assert Incident.objects.filter(project=project).count() == 2
    inc.refresh_from_db()
    assert inc.status == "resolved" and inc.opened_count == 2


def test_an_episode_that_goes_on_keeps_its_incident_from_resolving(poster, project):
    start = timezone.now().replace(microsecond=0) - timedelta(hours=3)
    jump(poster, "s-1", at=start)
    # The session keeps crossing into the force tier for 36 more minutes, within the rules'
    # cooldowns: its alerts extend instead of new ones being raised.
    poster.post(
        [
            sized_snapshot(
                turn=t, fill=0.92 if t % 2 else 0.5, session_id="s-1", ts=start + timedelta(minutes=4 * t)
            )
            for t in range(2, 10)
        ]
    )
    (inc,) = Incident.objects.filter(project=project)
    assert inc.alert_count == Alert.objects.filter(project=project).count() == 3
    assert inc.last_seen == start + timedelta(minutes=36)
    # One session, but its condition lasted past the confirmation period (15 minutes).
    assert inc.status == "open" and inc.confirmed_at is not None
    assert incidents_sweep(now=start + timedelta(minutes=36 + 29)).resolved == 0
    assert incidents_sweep(now=start + timedelta(minutes=36 + 31)).resolved == 1


# --- the API ---------------------------------------------------------------------------------
def test_incidents_api_lists_filters_and_shows_one_with_its_alerts(api, poster, project):
    jump(poster, "s-1")
    jump(poster, "s-2", fill=0.99)  # the break tier: critical
    jump(poster, "s-3", agent="billing-bot")
    r = api.get("/incidents")
    assert r.status_code == 200
    body = r.json()
    assert body["count"] == 2
    assert {i["agent"]: i["severity"] for i in body["items"]} == {
        "travel-bot": "critical",
        "billing-bot": "warning",
    }
    assert [i["agent"] for i in api.get("/incidents", agent="billing-bot").json()["items"]] == ["billing-bot"]
    assert api.get("/incidents", severity="critical").json()["count"] == 1
    assert api.get("/incidents", status="resolved").json()["count"] == 0
    assert api.get("/incidents", since="2027-01-01T00:00:00Z").json()["count"] == 0
    travel = next(i for i in body["items"] if i["agent"] == "travel-bot")
    assert travel["url"] == f"/p/{project.pk}/incidents/{travel['id']}/"

    detail = api.get(f"/incidents/{travel['id']}").json()
    assert detail["session_count"] == 2 and detail["alerts_shown"] == detail["alert_count"] == 7
    assert [s["session_id"] for s in detail["sessions"]] == ["s-1", "s-2"]
    assert {a["session_id"] for a in detail["alerts"]} == {"s-1", "s-2"}
    assert detail["culprit"] is None
    assert api.get("/incidents/999999").status_code == 404


def test_incident_actions_need_an_editor_and_check_their_input(api, poster, project):
    jump(poster, "s-1")
    inc = Incident.objects.get(project=project)
    r = api.client.post(f"/api/v1/incidents/{inc.pk}/ack", **api.headers())
    assert r.status_code == 403, "an ingest key may read incidents but not change them"
    c = editor_client(project)
    url = f"/api/v1/incidents/{inc.pk}"
    r = c.post(f"{url}/ack", **csrf(c))
    assert r.status_code == 200 and r.json()["status"] == "acknowledged"
    r = c.post(f"{url}/mute", data=json.dumps({"minutes": 0}), content_type="application/json", **csrf(c))
    assert r.status_code == 422 and "minutes" in r.json()["detail"]
    r = c.post(f"{url}/mute", data=json.dumps({"minutes": 30}), content_type="application/json", **csrf(c))
    assert r.status_code == 200 and r.json()["status"] == "muted" and r.json()["muted_until"]
    r = c.post(f"{url}/resolve", **csrf(c))
    assert r.status_code == 200
    inc.refresh_from_db()
    assert (inc.status, inc.resolution) == ("resolved", "user") and inc.resolved_by is not None
    r = c.post(f"{url}/mute", data=json.dumps({"minutes": 30}), content_type="application/json", **csrf(c))
    assert r.status_code == 422
    viewer = editor_client(project, role="viewer")
    assert viewer.post(f"{url}/ack", **csrf(viewer)).status_code == 403
    assert c.post("/api/v1/incidents/999999/ack", **csrf(c)).status_code == 404


def test_the_title_names_the_kind_of_the_block_its_cause_names_not_a_later_alerts_top_block() -> None:
    from alerts.models import Alert
    from alerts.services.incidents import _block_kind

    later = Alert(
        contributors=[{"key": "history", "kind": "history"}, {"key": "search", "kind": "tool_results"}]
    )
    first = Alert(contributors=[{"key": "search", "kind": "tool_results"}])
    # The alert that grew the incident has another block on top: the cause's block still names it.
    assert _block_kind([later, first], "context_pressure:search") == "tool_results"
    assert _block_kind([later], "context_pressure:kb") == ""
    assert _block_kind([first], "validation") == ""
