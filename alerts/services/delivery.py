"""Deliveries: one alert (or test message) to one channel, attempted by claim, send, record
with retries and a lease that the sweeper takes over when a worker dies mid-send."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from alerts import channels as ch
from alerts import kinds as K
from alerts import selectors
from alerts.models import SEVERITY_RANK, Alert, Channel, Delivery, DeliveryAttempt
from ctxobs.retry import RETRY_AFTER_MAX_S, backoff_delay

logger = logging.getLogger(__name__)


def deliveries_create(*, project_id: int, alerts: list[Alert]) -> list[int]:
    """One delivery per alert and channel: only for single-alert messages (channels hear about
    incidents through alerts.services.incidents)."""
    chans = list(Channel.objects.filter(project_id=project_id, enabled=True))
    if not chans:
        return []
    objs = [
        Delivery(project_id=project_id, alert=a, channel=c)
        for a in alerts
        for c in chans
        if SEVERITY_RANK[a.severity] >= SEVERITY_RANK[c.min_severity]
    ]
    return [d.pk for d in Delivery.objects.bulk_create(objs)]


def deliveries_enqueue(delivery_ids: list[int]) -> None:
    from alerts.tasks import alerts_deliver_task

    for did in delivery_ids:
        try:
            alerts_deliver_task.apply_async(kwargs={"delivery_id": did})
        except Exception:  # noqa: BLE001 - broker down: the sweeper queues it once it is back
            logger.exception("alerts.deliver_enqueue_failed delivery_id=%s", did)


RETRY_MAX_SECONDS = 300.0


def _backoff(attempt: int, retry_after: float | None) -> float:
    # No jitter: each delivery gets its own time, and the delivery log reads as the schedule.
    base = float(settings.CTXOBS_ALERT_RETRY_BASE_SECONDS)
    return backoff_delay(
        attempt, base=base, cap=RETRY_MAX_SECONDS, retry_after=retry_after, retry_after_cap=RETRY_AFTER_MAX_S
    )


def _lease(c: Channel) -> timedelta:
    """How long an attempt on C may be in flight: connect, write and read may each take the
    channel's timeout, plus a margin for the rest of the attempt."""
    own = c.timeout_seconds if c.kind == Channel.Kind.WEBHOOK else float(settings.EMAIL_TIMEOUT or 0.0)
    return timedelta(seconds=3 * own + float(settings.CTXOBS_ALERT_DELIVERY_LEASE_SECONDS))


INTERRUPTED = "no result recorded: the attempt was interrupted (its worker stopped) and its lease ran out"


def delivery_attempt(*, delivery_id: int) -> float | None:
    """Make the next attempt of a delivery, if it is due; the seconds until the next attempt
    when one is needed, else None.

    Claim, send, record: the attempt is leased in one short transaction, sent with no
    transaction open and no row locked, and its result recorded in a second short one. Safe to
    run twice: a sent or failed delivery is left alone, one in flight elsewhere is skipped (the
    sweeper takes it up if its lease runs out), and an early call only reports the wait."""
    claim = _delivery_claim(delivery_id=delivery_id)
    if not isinstance(claim, tuple):
        return claim
    d, at = claim
    c = d.channel
    if not c.enabled:
        result = ch.SendResult(False, False, None, "channel disabled")
    elif d.alert is None and d.incident is None and not d.is_test:
        result = ch.SendResult(False, False, None, "alert deleted")
    else:
        result = _send(d, c)
    return _delivery_record(d=d, at=at, result=result)


def _delivery_claim(*, delivery_id: int) -> tuple[Delivery, datetime] | float | None:
    """Lease the next attempt of the delivery: (the delivery, with `attempts` its number, and
    when it started), or the seconds until it is due, or None when there is nothing to do."""
    with transaction.atomic():
        d = (
            Delivery.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("channel", "channel__project", "alert", "alert__rule", "incident")
            .filter(pk=delivery_id)
            .first()
        )
        if d is None or d.status not in (
            Delivery.Status.PENDING,
            Delivery.Status.SENDING,
            Delivery.Status.RETRYING,
        ):
            return None
        now = timezone.now()
        c = d.channel
        if d.claimed_at is None and d.incident_id is not None and not d.is_test:
            if not _rate_claim(d, c, now):
                return None
        if d.status == Delivery.Status.SENDING:
            if d.lease_until is not None and d.lease_until > now:
                return None
            # The attempt's worker died between claim and record: log the attempt as lost. It
            # counts like a timeout, since the receiver may have had it.
            lease = _lease(c)
            DeliveryAttempt.objects.get_or_create(
                delivery=d,
                number=d.attempts,
                defaults={"at": (d.lease_until or now) - lease, "error": INTERRUPTED},
            )
            logger.warning("alerts.delivery_lease_expired delivery_id=%s attempt=%d", d.pk, d.attempts)
            if d.attempts >= c.max_attempts:
                d.status, d.lease_until, d.next_attempt_at = Delivery.Status.FAILED, None, None
                d.last_status_code, d.last_error = None, INTERRUPTED
                d.save(
                    update_fields=[
                        "status",
                        "lease_until",
                        "next_attempt_at",
                        "last_status_code",
                        "last_error",
                    ]
                )
                return None
        elif d.next_attempt_at is not None and d.next_attempt_at > now + timedelta(milliseconds=200):
            return (d.next_attempt_at - now).total_seconds()
        d.attempts += 1
        d.status = Delivery.Status.SENDING
        d.lease_until = now + _lease(c)
        d.save(update_fields=["attempts", "status", "lease_until", "claimed_at", "digest"])
    return d, now


HELD_LISTED = 20


def _rate_claim(d: Delivery, c: Channel, now: datetime) -> bool:
    """The channel's hourly limit, at the first claim of an incident message (in the claim's
    transaction): False when the hour is full (D is held, to go out later with the others held);
    else D counts against the hour and takes the messages held so far into its digest."""
    # The channel row serialises the count: two workers never both take the last free slot.
    Channel.objects.select_for_update().filter(pk=c.pk).first()
    since = now - timedelta(seconds=K.RATE_WINDOW_SECONDS)
    used = Delivery.objects.filter(channel_id=c.pk, claimed_at__gte=since).count()
    if used >= c.max_per_hour:
        d.status, d.held_at = Delivery.Status.HELD, d.held_at or now
        d.save(update_fields=["status", "held_at"])
        logger.info("alerts.delivery_held delivery_id=%s channel_id=%s used=%d", d.pk, c.pk, used)
        return False
    held = list(
        Delivery.objects.select_for_update(skip_locked=True, of=("self",))
        .select_related("incident")
        .filter(channel_id=c.pk, status=Delivery.Status.HELD)
        .exclude(pk=d.pk)
        .order_by("held_at", "id")
    )
    if held:
        d.digest = {
            **d.digest,
            "held_back": {
                "count": len(held),
                "messages": [
                    {
                        "event": f"incident.{h.event}",
                        "incident_id": h.incident_id,
                        "title": h.incident.title if h.incident else "",
                        "severity": h.digest.get("severity", ""),
                        "alerts": len(h.digest.get("alerts") or []) + int(h.digest.get("more") or 0),
                        "held_at": h.held_at.isoformat() if h.held_at else None,
                    }
                    for h in held[:HELD_LISTED]
                ],
                "more": max(0, len(held) - HELD_LISTED),
            },
        }
        Delivery.objects.filter(pk__in=[h.pk for h in held]).update(
            status=Delivery.Status.FOLDED, folded_into=d
        )
    d.claimed_at = now
    return True


def _delivery_record(*, d: Delivery, at: datetime, result: ch.SendResult) -> float | None:
    """Record the result of attempt `d.attempts`; the seconds until the next attempt, if any."""
    c = d.channel
    number = d.attempts
    now = timezone.now()
    retry_in = None
    fields: dict[str, Any] = {
        "last_status_code": result.status_code,
        "last_error": result.error,
        "lease_until": None,
        "sent_at": None,
        "next_attempt_at": None,
    }
    if result.ok:
        fields["status"], fields["sent_at"] = Delivery.Status.SENT, now
    elif result.retryable and number < c.max_attempts:
        retry_in = _backoff(number, result.retry_after)
        fields["status"], fields["next_attempt_at"] = (
            Delivery.Status.RETRYING,
            now + timedelta(seconds=retry_in),
        )
    else:
        fields["status"] = Delivery.Status.FAILED
    with transaction.atomic():
        # update_or_create: a result that arrives after its lease ran out replaces the "lost" entry.
        DeliveryAttempt.objects.update_or_create(
            delivery_id=d.pk,
            number=number,
            defaults={
                "at": at,
                "status_code": result.status_code,
                "error": result.error,
                "duration_ms": result.duration_ms,
            },
        )
        # Only while this attempt still holds the delivery: past its lease another attempt may
        # have taken over, and that one records the delivery's state.
        updated = Delivery.objects.filter(pk=d.pk, attempts=number, status=Delivery.Status.SENDING).update(
            **fields
        )
    if not updated:
        logger.warning("alerts.delivery_superseded delivery_id=%s attempt=%d", d.pk, number)
        return None
    logger.info(
        "alerts.delivery delivery_id=%s channel_id=%s attempt=%d status=%s code=%s ms=%.0f",
        d.pk,
        c.pk,
        number,
        fields["status"],
        result.status_code,
        result.duration_ms,
    )
    return retry_in


def _send(d: Delivery, c: Channel) -> ch.SendResult:
    project_name = c.project.name
    if d.incident is not None:
        return _send_incident(d, c)
    if c.kind == Channel.Kind.WEBHOOK:
        problem = ch.webhook_url_problem(c.url, allow_private=c.project.allow_private_endpoints)
        if problem:
            return ch.SendResult(False, False, None, f"url {problem}")
        try:
            secret = ch.secret_decrypt(c.secret_encrypted)
        except ValueError as exc:
            return ch.SendResult(False, False, None, str(exc))
        if d.is_test:
            payload, event = ch.test_payload(c, project_name=project_name), "test"
        else:
            payload, event = ch.alert_payload(d.alert, project_name=project_name), "alert.opened"
        payload["delivery_id"] = d.pk
        return ch.webhook_send(
            url=c.url,
            secret=secret,
            payload=payload,
            event=event,
            delivery_id=d.pk,
            timeout=c.timeout_seconds,
            allow_private=c.project.allow_private_endpoints,
        )
    if d.is_test:
        subject, text = f"[ctxobs {project_name}] test message", "This is a test delivery from ctxobs."
    else:
        subject, text = ch.alert_email(d.alert, project_name=project_name)
    return ch.email_send(recipients=list(c.recipients), subject=subject, text=text)


def _send_incident(d: Delivery, c: Channel) -> ch.SendResult:
    inc = d.incident
    assert inc is not None
    project_name = c.project.name
    culprit = selectors.incident_culprit(incident=inc)
    if c.kind == Channel.Kind.WEBHOOK:
        problem = ch.webhook_url_problem(c.url, allow_private=c.project.allow_private_endpoints)
        if problem:
            return ch.SendResult(False, False, None, f"url {problem}")
        try:
            secret = ch.secret_decrypt(c.secret_encrypted)
        except ValueError as exc:
            return ch.SendResult(False, False, None, str(exc))
        payload = ch.incident_payload(
            inc, event=d.event, digest=d.digest, project_name=project_name, culprit=culprit
        )
        payload["delivery_id"] = d.pk
        return ch.webhook_send(
            url=c.url,
            secret=secret,
            payload=payload,
            event=payload["event"],
            delivery_id=d.pk,
            timeout=c.timeout_seconds,
            allow_private=c.project.allow_private_endpoints,
        )
    subject, text = ch.incident_email(
        inc, event=d.event, digest=d.digest, project_name=project_name, culprit=culprit
    )
    return ch.email_send(recipients=list(c.recipients), subject=subject, text=text)


# --- follow-ups: a later message about an alert already sent ---------------------------------
FOLLOW_UP_EVENTS = ("alert.triaged",)


def follow_ups_queue(*, project_id: int, alert_ids: Sequence[int], event: str) -> None:
    """Queue EVENT about each of ALERT_IDS to every channel the alert went to (one task per
    delivery; core.registry.alert_follow_up). Best effort: a follow-up has no delivery row of
    its own, only the worker's log, and a broker outage loses it."""
    if event not in FOLLOW_UP_EVENTS:
        raise ValueError(f"unknown follow-up event {event!r}")
    from alerts.services.incidents import incidents_triaged
    from alerts.tasks import alerts_follow_up_task

    # Alerts of incidents: their incident says it once, with the culprit (durable deliveries).
    incidents_triaged(project_id=project_id, alert_ids=alert_ids)

    ids = list(
        Delivery.objects.filter(project_id=project_id, alert_id__in=list(alert_ids), is_test=False)
        .order_by("id")
        .values_list("id", flat=True)
    )
    for did in ids:
        try:
            alerts_follow_up_task.apply_async(kwargs={"delivery_id": did, "event": event, "attempt": 1})
        except Exception:  # noqa: BLE001 - best effort: the alert page shows the same
            logger.exception("alerts.follow_up_enqueue_failed delivery_id=%s", did)


def follow_up_attempt(*, delivery_id: int, event: str, attempt: int) -> float | None:
    """Send EVENT about the alert of DELIVERY_ID to its channel (the alert's payload as it is
    now, with `event` set to EVENT and the same delivery id); the seconds until the next attempt
    after a transient failure while the channel's attempts last, else None."""
    d = (
        Delivery.objects.select_related("channel", "channel__project", "alert", "alert__rule")
        .filter(pk=delivery_id)
        .first()
    )
    if d is None or d.alert is None or not d.channel.enabled:
        return None
    c = d.channel
    project_name = c.project.name
    if c.kind == Channel.Kind.WEBHOOK:
        problem = ch.webhook_url_problem(c.url, allow_private=c.project.allow_private_endpoints)
        if problem:
            result = ch.SendResult(False, False, None, f"url {problem}")
        else:
            try:
                secret = ch.secret_decrypt(c.secret_encrypted)
            except ValueError as exc:
                result = ch.SendResult(False, False, None, str(exc))
            else:
                payload = ch.alert_payload(d.alert, project_name=project_name)
                payload["event"] = event
                payload["delivery_id"] = d.pk
                result = ch.webhook_send(
                    url=c.url,
                    secret=secret,
                    payload=payload,
                    event=event,
                    delivery_id=d.pk,
                    timeout=c.timeout_seconds,
                    allow_private=c.project.allow_private_endpoints,
                )
    else:
        subject, text = ch.alert_email(d.alert, project_name=project_name)
        result = ch.email_send(recipients=list(c.recipients), subject=f"[triaged] {subject}"[:250], text=text)
    logger.info(
        "alerts.follow_up delivery_id=%s channel_id=%s event=%s attempt=%d ok=%s code=%s",
        d.pk,
        c.pk,
        event,
        attempt,
        result.ok,
        result.status_code,
    )
    if not result.ok and result.retryable and attempt < c.max_attempts:
        return _backoff(attempt, result.retry_after)
    return None
