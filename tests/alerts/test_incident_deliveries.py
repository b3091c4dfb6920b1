"""Notify once: channels hear about incidents (opened, escalated, resolved, triaged), never
about single alerts, at a real local webhook receiver that counts what it gets; the hourly limit
of a channel; the culprit from a triage of one of the incident's turns."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from alerts.models import Alert, Delivery, Incident
from alerts.services import delivery as alert_delivery
from alerts.services.incidents import incidents_sweep
from alerts.tasks import alerts_deliver_task
from core import registry
from core.services import project_triage_set
from replay.models import Triage
from tests.alerts.conftest import confirm_at_once
from tests.alerts.receiver import Receiver
from tests.alerts.test_delivery import run_delivery, webhook
from tests.alerts.test_incidents import jump

pytestmark = pytest.mark.django_db


@pytest.fixture
def private_ok(project):
    """The messages of each state change: incidents announced by their first alert (the pending
    stage has tests of its own, below)."""
    project.allow_private_endpoints = True
    project.save()
    confirm_at_once(project)
    return project


def deliver_all() -> None:
    """Attempt every delivery owed, each twice (a redelivered task must send nothing twice)."""
    for did in Delivery.objects.filter(status="pending").order_by("id").values_list("id", flat=True):
        run_delivery(did)
        alerts_deliver_task.apply(kwargs={"delivery_id": did}).get()


def events(rx: Receiver) -> list[str]:
    return [r["body"]["event"] for r in rx.accepted()]


def test_one_message_per_incident_state_however_many_alerts(poster, private_ok):
    start = timezone.now().replace(microsecond=0) - timedelta(hours=2)
    with Receiver() as rx:
        _, rx.secret = webhook(private_ok, rx.url)
        for i in range(4):  # 12 alerts, one incident
            jump(poster, f"s-{i}", at=start + timedelta(minutes=i))
            deliver_all()
        assert Alert.objects.filter(project=private_ok).count() == 12
        assert events(rx) == ["incident.opened"]
        (inc,) = Incident.objects.filter(project=private_ok)
        opened = rx.accepted()[0]
        assert opened["signature_ok"] and opened["headers"]["X-Ctxobs-Event"] == "incident.opened"
        body = opened["body"]
        assert body["incident"]["id"] == inc.pk and body["incident"]["severity"] == "warning"
        assert body["incident"]["url"].endswith(f"/p/{private_ok.pk}/incidents/{inc.pk}/")
        assert [(a["session_id"], a["turn"]) for a in body["alerts"]] == [("s-0", 1)] * 3
        assert body["alerts"][0]["turn_url"].endswith(f"/p/{private_ok.pk}/s/s-0/t/1/")

        # Two sessions reach the break tier (critical): escalated, once.
        jump(poster, "s-8", at=start + timedelta(minutes=8), fill=0.99)
        jump(poster, "s-9", at=start + timedelta(minutes=9), fill=0.99)
        deliver_all()
        assert events(rx) == ["incident.opened", "incident.escalated"]
        escalated = rx.accepted()[1]["body"]
        assert escalated["incident"]["severity"] == "critical"
        # The digest lists what grouped since the last message: s-1..s-3 (9) and s-8 (4).
        assert len(escalated["alerts"]) == 13 and escalated["alerts_more"] == 0
        assert {a["session_id"] for a in escalated["alerts"]} == {"s-1", "s-2", "s-3", "s-8"}

        # Quiet for the quiet period: resolved, once, whatever the sweep's repeats.
        for _ in range(2):
            incidents_sweep(now=start + timedelta(minutes=9, seconds=10) + timedelta(minutes=31))
            deliver_all()
        assert events(rx) == ["incident.opened", "incident.escalated", "incident.resolved"]
        resolved = rx.accepted()[2]["body"]
        assert resolved["incident"]["status"] == "resolved" and resolved["incident"]["resolution"] == "auto"
        assert resolved["incident"]["alert_count"] == 20 and resolved["incident"]["session_count"] == 6
        assert {a["session_id"] for a in resolved["alerts"]} == {"s-9"}
    assert not Delivery.objects.filter(alert__isnull=False).exists(), "no delivery per alert"
    assert list(Delivery.objects.order_by("id").values_list("event", "sequence", "status")) == [
        ("opened", 1, "sent"),
        ("escalated", 2, "sent"),
        ("resolved", 3, "sent"),
    ]


def test_the_digest_lists_twenty_alerts_and_counts_the_rest(poster, private_ok):
    with Receiver() as rx:
        _, rx.secret = webhook(private_ok, rx.url)
        jump(poster, "s-0")
        for i in range(1, 9):  # 24 more alerts before the next message
            jump(poster, f"s-{i}")
        incidents_sweep(now=timezone.now() + timedelta(days=60))
        deliver_all()
        resolved = rx.accepted()[-1]["body"]
        assert resolved["event"] == "incident.resolved"
        assert len(resolved["alerts"]) == 20 and resolved["alerts_more"] == 4


def test_a_muted_incident_keeps_grouping_and_stays_silent_until_the_mute_passes(poster, private_ok):
    from alerts.services.incidents import incident_mute

    now = timezone.now().replace(microsecond=0)
    with Receiver() as rx:
        _, rx.secret = webhook(private_ok, rx.url)
        jump(poster, "s-0", at=now - timedelta(minutes=2))
        deliver_all()
        inc = Incident.objects.get(project=private_ok)
        incident_mute(incident=inc, user=None, minutes=10, now=now)
        jump(poster, "s-1", at=now - timedelta(minutes=1), fill=0.99)  # would escalate
        deliver_all()
        inc.refresh_from_db()
        assert (inc.status, inc.severity, inc.session_count) == ("muted", "critical", 2)
        assert events(rx) == ["incident.opened"]
        assert incidents_sweep(now=now + timedelta(minutes=5)).unmuted == 0
        res = incidents_sweep(now=now + timedelta(minutes=11))
        assert res.unmuted == 1
        deliver_all()
        assert events(rx) == ["incident.opened", "incident.escalated"]
        assert {a["session_id"] for a in rx.accepted()[1]["body"]["alerts"]} == {"s-1"}


def test_a_channel_over_its_hourly_limit_holds_messages_and_the_next_one_counts_them(poster, private_ok):
    recent = timezone.now().replace(microsecond=0) - timedelta(minutes=2)
    with Receiver() as rx:
        ch, rx.secret = webhook(private_ok, rx.url, max_per_hour=2)
        assert ch.max_per_hour == 2
        for i, agent in enumerate(("a-bot", "b-bot", "c-bot", "d-bot")):
            jump(poster, f"s-{i}", agent=agent, at=recent)
        deliver_all()
        assert len(rx.accepted()) == 2
        held = list(Delivery.objects.filter(status="held").order_by("id"))
        assert len(held) == 2 and all(d.held_at for d in held)
        # Nothing goes out while the hour is full, however often the sweep runs.
        assert incidents_sweep().released == 0
        assert len(rx.accepted()) == 2

        # An hour later (the sent messages' claims moved back), the next message carries them.
        Delivery.objects.filter(status="sent").update(claimed_at=timezone.now() - timedelta(minutes=61))
        jump(poster, "s-9", agent="e-bot", at=recent)
        deliver_all()
        assert len(rx.accepted()) == 3
        third = rx.accepted()[2]["body"]
        assert third["incident"]["agent"] == "e-bot"
        assert third["held_back"]["count"] == 2
        titles = {m["title"] for m in third["held_back"]["messages"]}
        assert titles == {Incident.objects.get(pk=d.incident_id).title for d in held}
        assert {m["event"] for m in third["held_back"]["messages"]} == {"incident.opened"}
        carrier = Delivery.objects.get(incident__agent="e-bot")
        assert set(Delivery.objects.filter(status="folded").values_list("folded_into", flat=True)) == {
            carrier.pk
        }
        assert incidents_sweep().released == 0, "nothing left held"


def test_held_messages_go_out_with_the_sweep_once_the_hour_has_room(poster, private_ok):
    recent = timezone.now().replace(microsecond=0) - timedelta(minutes=2)
    with Receiver() as rx:
        _, rx.secret = webhook(private_ok, rx.url, max_per_hour=1)
        for i, agent in enumerate(("a-bot", "b-bot", "c-bot")):
            jump(poster, f"s-{i}", agent=agent, at=recent)
        deliver_all()
        assert len(rx.accepted()) == 1 and Delivery.objects.filter(status="held").count() == 2
        Delivery.objects.filter(status="sent").update(claimed_at=timezone.now() - timedelta(minutes=61))
        assert incidents_sweep().released == 1
        deliver_all()
        assert len(rx.accepted()) == 2
        second = rx.accepted()[1]["body"]
        assert second["incident"]["agent"] == "c-bot", "the latest held message carries the others"
        assert second["held_back"]["count"] == 1 and second["held_back"]["messages"][0]["title"].endswith(
            f"of agent b-bot since {recent + timedelta(seconds=10):%H:%M} UTC"
        )


def test_the_culprit_from_a_triage_of_a_turn_is_on_the_incident_and_its_messages(poster, private_ok):
    """The triage row is the one the evaluation recorded for the alerted turn (replay's
    auto-triage); its attribution is written as finished here instead of running the model."""
    from alerts import selectors

    project_triage_set(project=private_ok, enabled=True, daily_calls=50)
    private_ok.refresh_from_db()
    with Receiver() as rx:
        _, rx.secret = webhook(private_ok, rx.url)
        jump(poster, "s-0")
        inc = Incident.objects.get(project=private_ok)
        assert selectors.incident_culprit(incident=inc) is None, "queued, not finished"
        deliver_all()
        assert rx.accepted()[0]["body"]["incident"]["culprit"] is None
        t = Triage.objects.get(project=private_ok, turn=1, session_id="s-0")
        Triage.objects.filter(pk=t.pk).update(
            status="done",
            finished_at=timezone.now(),
            result={
                "block": "history",
                "score": 0.83,
                "noise": 0.05,
                "ranking": [{"key": "history", "score": 0.83}],
            },
        )
        culprit = selectors.incident_culprit(incident=inc)
        assert culprit == "turn 1 of s-0: most responsible block: history (score 0.83, noise band 0.05)"
        # As replay says it when its triage finishes: one "triaged" message per incident.
        for _ in range(2):
            registry.alert_follow_up(
                project_id=private_ok.pk, alert_ids=list(t.alert_ids), event="alert.triaged"
            )
            deliver_all()
        assert events(rx) == ["incident.opened", "incident.triaged"]
        assert rx.accepted()[1]["body"]["incident"]["culprit"] == culprit
        incidents_sweep(now=timezone.now() + timedelta(days=60))
        deliver_all()
        assert rx.accepted()[2]["body"]["incident"]["culprit"] == culprit


def test_email_channel_gets_the_incident_digest(poster, project, mailoutbox):
    from alerts.services import channels as alert_channels

    alert_channels.channel_create(
        project=project, kind="email", data={"name": "oncall", "recipients": "a@example.com"}
    )
    confirm_at_once(project)
    jump(poster, "s-0")
    for did in Delivery.objects.values_list("id", flat=True):
        assert alert_delivery.delivery_attempt(delivery_id=did) is None
    (msg,) = mailoutbox
    inc = Incident.objects.get(project=project)
    assert msg.subject.startswith(f"[ctxobs {project.name}] incident opened: warning: The history overflowed")
    assert f"/p/{project.pk}/incidents/{inc.pk}/" in msg.body
    assert f"session s-0 turn 1  http://localhost:8000/p/{project.pk}/s/s-0/t/1/" in msg.body
