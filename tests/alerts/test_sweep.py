"""The sweeper's bookkeeping and the delivery lease, on the real database: what is queued again,
what is claimed once, and how an attempt whose lease ran out is recorded. The outage and the
kill -9 themselves are in test_durability.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from alerts.channels import SendResult
from alerts.models import Delivery, PendingEvaluation
from alerts.services import delivery as alert_delivery
from alerts.services.delivery import INTERRUPTED
from alerts.services.evaluation import SweepResult, alerts_sweep
from alerts.tasks import alerts_evaluate_task
from tests.alerts.conftest import sized_snapshot
from tests.alerts.receiver import Receiver
from tests.alerts.test_delivery import raise_one_alert, webhook

pytestmark = pytest.mark.django_db


@pytest.fixture
def private_ok(project):
    project.allow_private_endpoints = True
    project.save()
    return project


def test_each_ingest_batch_records_one_pending_evaluation_with_its_new_snapshots(poster, project):
    batch = [sized_snapshot(turn=0, fill=0.3), sized_snapshot(turn=0, fill=0.3, session_id="s-2")]
    refs = poster.post(batch, evaluate=False)
    (pending,) = PendingEvaluation.objects.filter(project=project)
    assert sorted(pending.snapshot_refs) == sorted(refs)
    assert pending.due_at > pending.created_at
    poster.post(batch, evaluate=False)  # a resend stores nothing, so it owes nothing
    assert PendingEvaluation.objects.filter(project=project).count() == 1


def test_the_evaluation_task_run_twice_marks_its_pending_row_done(poster, project):
    refs = poster.post([sized_snapshot(turn=0, fill=0.3), sized_snapshot(turn=1, fill=0.9)], evaluate=False)
    (pending,) = PendingEvaluation.objects.filter(project=project)
    for _ in range(2):
        alerts_evaluate_task.apply(
            kwargs={"project_id": project.pk, "snapshot_refs": refs, "pending_id": pending.pk}
        ).get()
    assert not PendingEvaluation.objects.filter(project=project).exists()
    assert project.alerts.filter(turn=1, rule__params__tier="force").count() == 1


def test_the_sweeper_queues_overdue_work_once_per_grace(poster, private_ok, settings):
    settings.CTXOBS_ALERT_SWEEP_GRACE_SECONDS = 60
    webhook(private_ok, "http://127.0.0.1:9/x")
    alert = raise_one_alert(poster)
    (d,) = Delivery.objects.filter(incident=alert.incident)
    assert alerts_sweep() == SweepResult(evaluations=0, deliveries=0), "nothing overdue yet"

    long_ago = timezone.now() - timedelta(minutes=5)
    PendingEvaluation.objects.filter(project=private_ok).update(due_at=long_ago)
    Delivery.objects.filter(pk=d.pk).update(created_at=long_ago)
    n_pending = PendingEvaluation.objects.filter(project=private_ok).count()
    assert alerts_sweep() == SweepResult(evaluations=n_pending, deliveries=1)
    # Claimed: each pending evaluation is due again a grace later, not at the next sweep.
    for p in PendingEvaluation.objects.filter(project=private_ok):
        assert p.sweeps == 1 and p.due_at > timezone.now() + timedelta(seconds=50)
    assert alerts_sweep().evaluations == 0

    # A delivery in flight is left alone until its lease has run out.
    Delivery.objects.filter(pk=d.pk).update(
        status="sending", attempts=1, lease_until=timezone.now() + timedelta(minutes=1)
    )
    assert alerts_sweep().deliveries == 0
    Delivery.objects.filter(pk=d.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert alerts_sweep().deliveries == 1


def test_an_interrupted_last_attempt_fails_the_delivery_without_sending(poster, private_ok):
    with Receiver() as rx:
        ch, rx.secret = webhook(private_ok, rx.url, max_attempts=1)
        alert = raise_one_alert(poster)
        d = Delivery.objects.get(incident=alert.incident, channel=ch)
        claimed, _at = alert_delivery._delivery_claim(delivery_id=d.pk)
        assert claimed.attempts == 1
        assert alert_delivery.delivery_attempt(delivery_id=d.pk) is None, "in flight elsewhere: skipped"
        Delivery.objects.filter(pk=d.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
        assert alert_delivery.delivery_attempt(delivery_id=d.pk) is None
        assert rx.requests == []
    d.refresh_from_db()
    assert (d.status, d.attempts, d.lease_until, d.last_error) == ("failed", 1, None, INTERRUPTED)
    assert [(a.number, a.error) for a in d.log.all()] == [(1, INTERRUPTED)]


def test_a_result_recorded_after_its_lease_was_taken_over_leaves_the_delivery_to_the_new_attempt(
    poster, private_ok
):
    with Receiver() as rx:
        ch, rx.secret = webhook(private_ok, rx.url)
        alert = raise_one_alert(poster)
        d = Delivery.objects.get(incident=alert.incident, channel=ch)
        old, old_at = alert_delivery._delivery_claim(delivery_id=d.pk)
        Delivery.objects.filter(pk=d.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
        new, new_at = alert_delivery._delivery_claim(delivery_id=d.pk)
        assert (old.attempts, new.attempts) == (1, 2)

        late = SendResult(True, False, 200, "", 5.0)
        assert alert_delivery._delivery_record(d=old, at=old_at, result=late) is None
        d.refresh_from_db()
        assert (d.status, d.attempts) == ("sending", 2), "the late result does not end the new attempt"
        assert alert_delivery._delivery_record(d=new, at=new_at, result=late) is None
    d.refresh_from_db()
    assert (d.status, d.attempts, d.last_status_code, d.lease_until) == ("sent", 2, 200, None)
    assert [(a.number, a.status_code) for a in d.log.all()] == [(1, 200), (2, 200)]


def test_the_sweeper_takes_a_backlog_larger_than_one_page(project):
    long_ago = timezone.now() - timedelta(minutes=5)
    PendingEvaluation.objects.bulk_create(
        PendingEvaluation(project=project, snapshot_refs=[i], created_at=long_ago, due_at=long_ago)
        for i in range(5)
    )
    assert alerts_sweep(limit=2).evaluations == 5
    assert not PendingEvaluation.objects.filter(due_at__lte=timezone.now()).exists()
