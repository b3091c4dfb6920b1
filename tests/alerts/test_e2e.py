"""End to end with a real Celery worker: ingest commit -> alerts.evaluate -> alert row ->
alerts.deliver -> a real local webhook receiver (signature verified, retried after a 500)."""

from __future__ import annotations

import pytest

from alerts.models import Alert, Delivery
from alerts.tasks import alerts_deliver_task, alerts_evaluate_task
from ingest.models import AgentSession
from tests.alerts.conftest import confirm_at_once, sized_snapshot
from tests.alerts.receiver import Receiver
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_ingest_to_alert_to_webhook_through_the_worker(celery_worker_process, api, project):
    from alerts.services import channels as alert_channels

    project.allow_private_endpoints = True
    project.save()
    confirm_at_once(project)  # one session's alerts: announced at once, not left pending
    with Receiver(fail_first=1) as rx:
        channel, secret = alert_channels.channel_create(
            project=project, kind="webhook", data={"name": "hook", "url": rx.url, "timeout_seconds": 3}
        )
        rx.secret = secret
        # Nothing until turn 2, whose jump raises the tier crossings and the spike in one
        # evaluation: whichever turns the worker's evaluations take together, the incident opens
        # with turn 2's alerts (a spike at turn 1, evaluated alone, would open it without them).
        fills = [0.3, 0.35, 0.9, 0.92, 0.93]
        for i, f in enumerate(fills):
            r = api.post_snapshots([sized_snapshot(turn=i, fill=f, session_id="e2e")])
            assert r.status_code == 200
        force = wait_until(lambda: list(Alert.objects.filter(project=project, rule__params__tier="force")))
        assert [(a.turn, a.session_id) for a in force] == [(2, "e2e")]
        incident = force[0].incident
        assert incident is not None
        # One message for the incident the turn's alerts grouped into, listing them.
        got = wait_until(lambda: [g for g in rx.accepted() if g["body"]["incident"]["id"] == incident.pk])
        assert got[0]["signature_ok"] and got[0]["body"]["event"] == "incident.opened"
        listed = {a["id"]: a for a in got[0]["body"]["alerts"]}
        assert listed[force[0].pk]["turn_url"].endswith(f"/p/{project.pk}/s/e2e/t/2/")
        assert rx.requests[0]["status"] == 500, "the first attempt failed and was retried"
        d = wait_until(
            lambda: Delivery.objects.filter(incident=incident, channel=channel, status="sent").first()
        )
        assert d.attempts >= 1
        n_alerts = Alert.objects.filter(project=project).count()

        # Running the tasks again (a redelivered message) changes nothing and sends nothing more.
        refs = list(project.snapshot_set.values_list("id", flat=True))
        again = [
            alerts_evaluate_task.apply_async(kwargs={"project_id": project.pk, "snapshot_refs": refs}),
            alerts_deliver_task.apply_async(kwargs={"delivery_id": d.pk}),
        ]
        wait_until(
            lambda: all(celery_worker_process.task_finished(r.id) for r in again),
            60,
            "the worker to finish both tasks again",
        )
        assert Alert.objects.filter(project=project).count() == n_alerts
        assert sum(1 for g in rx.accepted() if g["body"]["incident"]["id"] == incident.pk) == 1
        assert len(rx.accepted()) == 1, "one message for the incident, none per alert"
    session = AgentSession.objects.get(project=project, session_id="e2e")
    assert session.alert_count == n_alerts
