"""Nothing lost, nothing stuck: with a real web server, Celery worker and beat on the test
database and a Redis of the test's own, alerts of turns ingested while Redis is down arrive
after it is back, a webhook being sent holds no row lock, and a worker killed mid-send leads
to a redelivery once the attempt's lease runs out."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.db import transaction
from django.utils import timezone

from alerts.models import Alert, AlertRule, Delivery, PendingEvaluation
from alerts.services import channels as alert_channels
from alerts.services import delivery as alert_delivery
from ingest.models import Snapshot
from tests.alerts.conftest import confirm_at_once, sized_snapshot
from tests.alerts.processes import Stack
from tests.alerts.receiver import Receiver
from tests.processes import keep_logs_on_failure
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SWEEP_SECONDS = 1
GRACE_SECONDS = 2
LEASE_MARGIN_SECONDS = 1
WEBHOOK_TIMEOUT = 3.0


@pytest.fixture
def stack(request: Any, tmp_path: Any, django_db_setup: Any) -> Any:
    s = Stack(
        tmp_path,
        {
            "CTXOBS_ALERT_SWEEP_SECONDS": str(SWEEP_SECONDS),
            "CTXOBS_ALERT_SWEEP_GRACE_SECONDS": str(GRACE_SECONDS),
            "CTXOBS_ALERT_DELIVERY_LEASE_SECONDS": str(LEASE_MARGIN_SECONDS),
            "CTXOBS_INGEST_RATE_LIMIT": "0",
        },
    )
    s.redis.start()
    try:
        yield s
    finally:
        s.close()
        keep_logs_on_failure(request, tmp_path)


def force_rule_only(project: Any) -> None:
    AlertRule.objects.filter(project=project).exclude(kind="tier_crossing", params__tier="force").delete()


def post(stack: Stack, key: str, snaps: list[dict[str, Any]]) -> httpx.Response:
    return httpx.post(
        f"{stack.base_url}/api/v1/snapshots",
        content=json.dumps({"snapshots": snaps}),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        timeout=60,
    )


def test_turns_ingested_while_redis_is_down_get_their_alerts_once_it_is_back(stack, project, ingest_key):
    force_rule_only(project)
    stack.web()
    stack.worker()
    stack.beat()

    # The normal path: evaluated by the worker at commit, and its pending row is gone.
    r = post(stack, ingest_key, [sized_snapshot(turn=0, fill=0.3, session_id="outage")])
    assert r.status_code == 200, r.text
    wait_until(
        lambda: not PendingEvaluation.objects.filter(project=project).exists(),
        60,
        "the first turn to be evaluated",
    )

    stack.redis.stop()
    snaps = [sized_snapshot(turn=i, fill=f, session_id="outage") for i, f in ((1, 0.5), (2, 0.9), (3, 0.93))]
    r = post(stack, ingest_key, snaps)
    assert r.status_code == 200, r.text
    assert [x["status"] for x in r.json()["results"]] == ["created"] * 3
    assert Snapshot.objects.filter(project=project, session_id="outage").count() == 4
    (pending,) = PendingEvaluation.objects.filter(project=project)
    assert len(pending.snapshot_refs) == 3
    assert "alerts.enqueue_failed" in stack.log("web").read_text(errors="replace")
    assert not Alert.objects.filter(project=project).exists()

    stack.redis.start()
    back = time.monotonic()
    (alert,) = wait_until(
        lambda: list(Alert.objects.filter(project=project)),
        90,
        "the alert of the turns ingested during the outage",
    )
    took = time.monotonic() - back
    assert (alert.session_id, alert.turn, alert.rule.params["tier"]) == ("outage", 2, "force")
    wait_until(
        lambda: not PendingEvaluation.objects.filter(project=project).exists(),
        30,
        "the pending evaluation to be marked done",
    )
    print(f"alert {took:.1f}s after redis came back")  # noqa: T201 - shown with -s, for the report
    assert Alert.objects.filter(project=project).count() == 1


def test_a_webhook_in_flight_holds_no_lock_and_a_killed_worker_is_redelivered_after_the_lease(
    stack, project, ingest_key
):
    project.allow_private_endpoints = True
    project.save()
    force_rule_only(project)
    confirm_at_once(project)  # the session's one alert is announced, not left pending
    with Receiver(slow_first=1, slow_seconds=60) as rx:
        channel, rx.secret = alert_channels.channel_create(
            project=project,
            kind="webhook",
            data={"name": "hook", "url": rx.url, "timeout_seconds": WEBHOOK_TIMEOUT},
        )
        stack.web()
        worker = stack.worker()
        stack.beat()
        r = post(
            stack,
            ingest_key,
            [
                sized_snapshot(turn=0, fill=0.3, session_id="slow"),
                sized_snapshot(turn=1, fill=0.9, session_id="slow"),
            ],
        )
        assert r.status_code == 200, r.text
        wait_until(lambda: rx.requests, 60, "the webhook to be called")

        # The receiver is holding the request: the delivery is in flight but its row is free.
        with transaction.atomic():
            d = Delivery.objects.select_for_update(nowait=True).get(channel=channel)
            assert d.status == "sending" and d.attempts == 1
            assert d.lease_until is not None and d.lease_until > timezone.now()
        lease_until = d.lease_until

        stack.kill9(worker)
        stack.worker()
        wait_until(
            lambda: len(rx.requests) >= 2, WEBHOOK_TIMEOUT * 3 + LEASE_MARGIN_SECONDS + 60, "the redelivery"
        )
        d = wait_until(
            lambda: Delivery.objects.filter(pk=d.pk, status="sent").first(),
            30,
            "the delivery to be recorded as sent",
        )
        first, second = rx.requests[:2]
        assert second["at"] >= lease_until.timestamp() - 0.5, "redelivered only after the lease ran out"
        assert first["body"]["incident"]["id"] == second["body"]["incident"]["id"]
        assert first["body"]["event"] == second["body"]["event"] == "incident.opened"
        assert first["headers"]["X-Ctxobs-Delivery"] == second["headers"]["X-Ctxobs-Delivery"] == str(d.pk)
        assert second["signature_ok"]
    assert (d.attempts, d.last_status_code, d.lease_until) == (2, 200, None)
    log = [(a.number, a.status_code, a.error) for a in d.log.all()]
    assert log == [(1, None, alert_delivery.INTERRUPTED), (2, 200, "")]
    assert d.sent_at is not None and d.sent_at - lease_until < timedelta(seconds=60)
