"""Transient noise does not page: a new incident is pending (silent) until a critical alert, a
second session or a persisting condition confirms it, and one that goes quiet first resolves as
transient without a message. Checked at a real local webhook receiver that counts what it gets.
A recurrence is held to the same bar: it reopens the resolved incident silently and announces
"reopened" only once confirmed. Also the grouping of cause-less families (reopening for another
session of the agent) and of a block overflow that follows an unrelated alert in its session."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from alerts import kinds as K
from alerts.models import Alert, Delivery, Incident, IncidentPolicy
from alerts.services.incidents import incident_acknowledge, incident_mute, incidents_sweep
from tests.alerts.conftest import Poster, sized_snapshot
from tests.alerts.receiver import Receiver
from tests.alerts.test_api import csrf, editor_client
from tests.alerts.test_delivery import webhook
from tests.alerts.test_incident_deliveries import deliver_all, events
from tests.alerts.test_incidents import T0, jump
from tests.factories import block

pytestmark = pytest.mark.django_db


@pytest.fixture
def private_ok(project: Any) -> Any:
    project.allow_private_endpoints = True
    project.save()
    return project


def test_a_lone_alert_stays_pending_and_resolves_as_transient_without_a_message(api, poster, private_ok):
    start = timezone.now().replace(microsecond=0) - timedelta(hours=2)
    with Receiver() as rx:
        _, rx.secret = webhook(private_ok, rx.url)
        jump(poster, "s-0", at=start)  # three warnings on one turn of one session
        deliver_all()
        inc = Incident.objects.get(project=private_ok)
        assert (inc.status, inc.confirmed_at, inc.alert_count, inc.event_sequence) == ("pending", None, 3, 0)
        assert not Delivery.objects.filter(project=private_ok).exists()
        # The API lists it under its own filter, not under the unresolved ones.
        assert [i["id"] for i in api.get("/incidents", status="pending").json()["items"]] == [inc.pk]
        assert api.get("/incidents", status="unresolved").json()["count"] == 0

        seen = start + timedelta(seconds=10)
        assert incidents_sweep(now=seen + timedelta(minutes=29)).resolved == 0
        for n in (1, 0):
            assert incidents_sweep(now=seen + timedelta(minutes=31)).resolved == n
        deliver_all()
        inc.refresh_from_db()
        assert (inc.status, inc.resolution, inc.confirmed_at) == ("resolved", "transient", None)
        assert rx.accepted() == [] and rx.requests == []
    assert not Delivery.objects.filter(project=private_ok).exists()
    assert [i["id"] for i in api.get("/incidents", status="transient").json()["items"]] == [inc.pk]
    assert api.get("/incidents", status="resolved").json()["count"] == 0
    assert api.get("/incidents", status="pending").json()["count"] == 0

    # The cause returning in another session does not reopen an incident nobody heard of.
    jump(poster, "s-1", at=start + timedelta(hours=1))
    assert Incident.objects.filter(project=private_ok).count() == 2
    inc.refresh_from_db()
    assert inc.status == "resolved" and inc.opened_count == 1


def test_a_second_session_of_the_cause_confirms_it_with_one_opened_listing_the_earlier_alerts(
    poster, private_ok
):
    start = timezone.now().replace(microsecond=0) - timedelta(hours=2)
    with Receiver() as rx:
        _, rx.secret = webhook(private_ok, rx.url)
        jump(poster, "s-0", at=start)
        deliver_all()
        assert events(rx) == []
        first = set(Alert.objects.filter(project=private_ok).values_list("id", flat=True))
        jump(poster, "s-1", at=start + timedelta(minutes=5))
        jump(poster, "s-2", at=start + timedelta(minutes=6))
        deliver_all()
        (inc,) = Incident.objects.filter(project=private_ok)
        assert inc.status == "open" and inc.confirmed_at is not None and inc.session_count == 3
        assert events(rx) == ["incident.opened"], "one message, however many alerts and sessions"
        body = rx.accepted()[0]["body"]
        assert body["incident"]["id"] == inc.pk and body["incident"]["status"] == "open"
        listed = {a["id"] for a in body["alerts"]}
        assert first < listed, "the digest holds the alerts grouped while it was pending"
        assert {a["session_id"] for a in body["alerts"]} == {"s-0", "s-1"}

        incidents_sweep(now=start + timedelta(minutes=6, seconds=10) + timedelta(minutes=31))
        deliver_all()
        assert events(rx) == ["incident.opened", "incident.resolved"]
        resolved = rx.accepted()[1]["body"]
        assert resolved["incident"]["resolution"] == "auto"
        assert {a["session_id"] for a in resolved["alerts"]} == {"s-2"}
    assert list(Delivery.objects.order_by("id").values_list("event", "sequence")) == [
        ("opened", 1),
        ("resolved", 2),
    ]


def test_a_critical_alert_confirms_at_once(poster, private_ok):
    with Receiver() as rx:
        _, rx.secret = webhook(private_ok, rx.url)
        jump(poster, "s-0", fill=0.99)  # the break tier: critical
        deliver_all()
        inc = Incident.objects.get(project=private_ok)
        assert inc.status == "open" and inc.severity == "critical"
        assert events(rx) == ["incident.opened"]
        assert len(rx.accepted()[0]["body"]["alerts"]) == inc.alert_count == 4


def test_alerts_on_several_turns_of_one_session_confirm_it(poster, private_ok):
    IncidentPolicy.objects.create(project=private_ok, confirm_turns=2)
    with Receiver() as rx:
        _, rx.secret = webhook(private_ok, rx.url)
        jump(poster, "s-1")
        assert Incident.objects.get(project=private_ok).status == "pending"
        # Turn 4: a big tool result takes half the window, an alert on a second turn.
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
        deliver_all()
        (inc,) = Incident.objects.filter(project=private_ok)
        assert inc.status == "open" and inc.session_count == 1
        assert sorted(set(Alert.objects.filter(incident=inc).values_list("turn", flat=True))) == [1, 4]
        assert events(rx) == ["incident.opened"]


def test_a_pending_incident_can_be_acknowledged_muted_and_resolved_and_announces_when_confirmed(
    poster, private_ok
):
    now = timezone.now().replace(microsecond=0)
    with Receiver() as rx:
        _, rx.secret = webhook(private_ok, rx.url)
        jump(poster, "s-0", at=now - timedelta(minutes=3))
        inc = Incident.objects.get(project=private_ok)
        incident_mute(incident=inc, user=None, minutes=10, now=now)
        # Confirmed while muted: nothing yet.
        jump(poster, "s-1", at=now - timedelta(minutes=2))
        deliver_all()
        inc.refresh_from_db()
        assert inc.status == "muted" and inc.confirmed_at is not None and events(rx) == []
        # When the mute passes, channels hear of it once, with everything grouped so far.
        assert incidents_sweep(now=now + timedelta(minutes=11)).unmuted == 1
        deliver_all()
        inc.refresh_from_db()
        assert inc.status == "open" and events(rx) == ["incident.opened"]
        assert {a["session_id"] for a in rx.accepted()[0]["body"]["alerts"]} == {"s-0", "s-1"}

        # Acknowledged while pending: it stays unannounced until it is confirmed.
        jump(poster, "s-2", at=now - timedelta(minutes=1), agent="billing-bot")
        other = Incident.objects.get(project=private_ok, agent="billing-bot")
        assert other.status == "pending"
        other = incident_acknowledge(incident=other, user=None)
        assert other.status == "acknowledged" and other.confirmed_at is None
        jump(poster, "s-3", at=now - timedelta(seconds=30), agent="billing-bot")
        deliver_all()
        other.refresh_from_db()
        assert other.status == "acknowledged" and other.confirmed_at is not None
        assert events(rx) == ["incident.opened", "incident.opened"]

    # Resolved by a person while pending: nothing is sent, and it is "resolved", not transient.
    jump(poster, "s-4", at=now, agent="search-bot")
    third = Incident.objects.get(project=private_ok, agent="search-bot")
    c = editor_client(private_ok)
    r = c.post(f"/api/v1/incidents/{third.pk}/resolve", **csrf(c))
    assert r.status_code == 200 and (r.json()["status"], r.json()["resolution"]) == ("resolved", "user")
    assert r.json()["confirmed_at"] is None
    assert not Delivery.objects.filter(incident=third).exists()


# --- grouping ------------------------------------------------------------------------------------
def failing(
    poster: Poster,
    session_id: str,
    *,
    at: Any,
    turns: int = 4,
    first_turn: int = 0,
    agent: str = "travel-bot",
) -> None:
    """TURNS turns of SESSION_ID, 20 s apart from AT, whose outputs all fail validation (a
    validation-rate alert)."""
    check = [{"layer": "structure", "check": "json_schema", "passed": False, "code": "E_JSON"}]
    poster.post(
        [
            sized_snapshot(
                turn=t,
                fill=0.3,
                session_id=session_id,
                ts=at + timedelta(seconds=20 * (t - first_turn)),
                validation=check,
                agent=agent,
            )
            for t in range(first_turn, first_turn + turns)
        ]
    )


def test_a_recurrence_reopens_silently_and_announces_reopened_once_a_second_session_confirms_it(
    api, poster, private_ok
):
    start = timezone.now().replace(microsecond=0) - timedelta(hours=6)
    with Receiver() as rx:
        _, rx.secret = webhook(private_ok, rx.url)
        jump(poster, "s-0", at=start)
        jump(poster, "s-1", at=start + timedelta(minutes=2))  # a second session confirms it
        deliver_all()
        (inc,) = Incident.objects.filter(project=private_ok)
        last = start + timedelta(minutes=2, seconds=10)
        assert incidents_sweep(now=last + timedelta(minutes=31)).resolved == 1
        deliver_all()
        assert events(rx) == ["incident.opened", "incident.resolved"]
        sent = len(rx.requests)

        # The cause returns in one session an hour later: the incident reopens, pending, silent.
        back = start + timedelta(hours=1)
        jump(poster, "s-2", at=back)
        deliver_all()
        inc.refresh_from_db()
        assert Incident.objects.filter(project=private_ok).count() == 1
        assert (inc.status, inc.opened_count, inc.session_count) == ("pending", 2, 3)
        assert inc.reopened_at == back + timedelta(seconds=10) and inc.confirmed_at is not None
        assert len(rx.requests) == sent and Delivery.objects.filter(project=private_ok).count() == 2
        assert [i["id"] for i in api.get("/incidents", status="pending").json()["items"]] == [inc.pk]

        # Quiet again, unconfirmed: back to resolved without a message, after twice the quiet
        # period (it has reopened once).
        seen = back + timedelta(seconds=10)
        assert incidents_sweep(now=seen + timedelta(minutes=31)).resolved == 0
        assert incidents_sweep(now=seen + timedelta(minutes=61)).resolved == 1
        deliver_all()
        inc.refresh_from_db()
        assert (inc.status, inc.resolution) == ("resolved", "auto")
        assert len(rx.requests) == sent and Delivery.objects.filter(project=private_ok).count() == 2

        # It returns once more, and a second session confirms the recurrence: one "reopened".
        again = seen + timedelta(minutes=70)
        jump(poster, "s-3", at=again)
        deliver_all()
        assert len(rx.requests) == sent
        jump(poster, "s-4", at=again + timedelta(minutes=3))
        jump(poster, "s-5", at=again + timedelta(minutes=5))
        deliver_all()
        inc.refresh_from_db()
        assert (inc.status, inc.opened_count, inc.session_count) == ("open", 3, 6)
        assert events(rx) == ["incident.opened", "incident.resolved", "incident.reopened"]
        body = rx.accepted()[2]["body"]
        assert body["incident"]["status"] == "open" and body["incident"]["opened_count"] == 3
        # The digest lists what grouped since the last message, the unannounced return included.
        assert {a["session_id"] for a in body["alerts"]} == {"s-2", "s-3", "s-4"}
    assert list(Delivery.objects.order_by("id").values_list("event", "sequence")) == [
        ("opened", 1),
        ("resolved", 2),
        ("reopened", 3),
    ]


def test_a_cause_less_incident_reopens_for_another_session_of_its_agent(poster, project):
    start = timezone.now().replace(microsecond=0) - timedelta(hours=6)
    failing(poster, "s-1", at=start)
    failing(poster, "s-2", at=start + timedelta(minutes=2))
    (inc,) = Incident.objects.filter(project=project)
    assert inc.cause == K.VALIDATION_FAILURE_RATE and inc.status == "open"
    assert incidents_sweep(now=start + timedelta(minutes=40)).resolved == 1

    # Another session of the agent failing an hour later: the resolved incident reopens (pending),
    # rather than a new incident opening at each quiet gap; another agent's failures do not.
    failing(poster, "s-3", at=start + timedelta(hours=1))
    inc.refresh_from_db()
    assert Incident.objects.filter(project=project).count() == 1
    assert (inc.status, inc.opened_count, inc.session_count) == ("pending", 2, 3)
    failing(poster, "s-9", at=start + timedelta(hours=1, minutes=1), agent="code-bot")
    assert Incident.objects.filter(project=project).count() == 2
    failing(poster, "s-4", at=start + timedelta(hours=1, minutes=3))
    inc.refresh_from_db()
    assert (inc.status, inc.opened_count, inc.session_count) == ("open", 2, 4)
    assert Alert.objects.filter(project=project, session_id="s-4").get().incident_id == inc.pk


def test_a_window_overflow_is_not_swallowed_by_an_earlier_validation_incident_of_its_session(poster, project):
    start = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    tool = block("search", "tool_results", "results", tokens=5000)
    # Another session overflowed from `search` a few minutes earlier.
    jump(poster, "s-0", at=start, extra_blocks=[tool])
    overflow = Incident.objects.get(project=project)
    assert overflow.cause == "context_pressure:search"
    # s-1: a validation blip on its first turns, then the same overflow three turns later.
    failing(poster, "s-1", at=start + timedelta(minutes=2))
    validation = Incident.objects.get(project=project, cause=K.VALIDATION_FAILURE_RATE)
    at = start + timedelta(minutes=2, seconds=80)
    poster.post(
        [
            sized_snapshot(turn=4, fill=0.3, session_id="s-1", ts=at),
            sized_snapshot(
                turn=5, fill=0.9, session_id="s-1", ts=at + timedelta(seconds=10), extra_blocks=[tool]
            ),
        ]
    )
    late = list(Alert.objects.filter(project=project, session_id="s-1", turn=5))
    assert late and {a.incident_id for a in late} == {overflow.pk}
    overflow.refresh_from_db()
    validation.refresh_from_db()
    assert overflow.session_count == 2 and overflow.status == "open", "two sessions confirm it"
    assert validation.alert_count == 1 and validation.status == "pending"

    # With no overflow incident of the agent to join, the overflow opens its own rather than
    # joining the validation incident, whose cause and title could not name the block.
    failing(poster, "c-1", at=start, agent="code-bot")
    poster.post(
        [
            sized_snapshot(
                turn=4, fill=0.3, session_id="c-1", ts=start + timedelta(seconds=80), agent="code-bot"
            ),
            sized_snapshot(
                turn=5,
                fill=0.9,
                session_id="c-1",
                ts=start + timedelta(seconds=90),
                agent="code-bot",
                extra_blocks=[tool],
            ),
        ]
    )
    mine = {i.cause: i for i in Incident.objects.filter(project=project, agent="code-bot")}
    assert set(mine) == {K.VALIDATION_FAILURE_RATE, "context_pressure:search"}
    assert mine["context_pressure:search"].title.startswith("Tool results from `search` overflowed")
    assert mine[K.VALIDATION_FAILURE_RATE].alert_count == 1
