"""Deliveries to a real local webhook receiver and a real local SMTP server, through Django's
e-mail backend configured from the environment, and the channels' "send test" action."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core import mail

from alerts import channels
from alerts.errors import InvalidChannel
from alerts.models import Alert, AlertRule, Channel, Delivery
from alerts.services import channels as alert_channels
from alerts.services import delivery as alert_delivery
from alerts.services import evaluation as alert_evaluation
from core.models import Membership
from tests.alerts.conftest import confirm_at_once, sized_snapshot
from tests.alerts.receiver import Receiver
from tests.alerts.smtp_server import SmtpServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def private_ok(project):
    project.allow_private_endpoints = True
    project.save()
    return project


def webhook(project, url: str, **data) -> tuple[Channel, str]:
    return alert_channels.channel_create(
        project=project, kind="webhook", data={"name": "hook", "url": url, "timeout_seconds": 2, **data}
    )


def raise_one_alert(poster, session_id: str = "s-1") -> Alert:
    """One warning alert, whose incident is announced at once (confirm_at_once)."""
    AlertRule.objects.filter(project=poster.project).exclude(
        kind="tier_crossing", params__tier="force"
    ).delete()
    confirm_at_once(poster.project)
    poster.post(
        [
            sized_snapshot(turn=0, fill=0.3, session_id=session_id),
            sized_snapshot(turn=1, fill=0.9, session_id=session_id),
        ]
    )
    return Alert.objects.get(project=poster.project, session_id=session_id)


def run_delivery(delivery_id: int) -> list[float]:
    """Attempt a delivery until it needs no further attempt, skipping the back-off waits."""
    waits = []
    while True:
        wait = alert_delivery.delivery_attempt(delivery_id=delivery_id)
        if wait is None:
            return waits
        waits.append(wait)
        Delivery.objects.filter(pk=delivery_id).update(next_attempt_at=None)


def test_signed_webhook_is_retried_after_a_500(poster, private_ok, settings):
    settings.CTXOBS_ALERT_RETRY_BASE_SECONDS = 0.5
    with Receiver(fail_first=1) as rx:
        ch, secret = webhook(private_ok, rx.url)
        rx.secret = secret
        alert = raise_one_alert(poster)
        d = Delivery.objects.get(incident=alert.incident, channel=ch)
        waits = run_delivery(d.pk)
        assert waits == [0.5], "one back-off after the 500"
        (got,) = rx.accepted()
        assert len(rx.requests) == 2 and rx.requests[0]["status"] == 500
        assert got["signature_ok"]
        body = got["body"]
        # Channels hear about the alert's incident, which lists it.
        assert body["event"] == "incident.opened" and body["incident"]["id"] == alert.incident_id
        (listed,) = body["alerts"]
        assert listed["id"] == alert.pk and listed["turn"] == 1
        assert listed["turn_url"].endswith(f"/p/{private_ok.pk}/s/s-1/t/1/")
        assert body["incident"]["cause"] == "context_pressure:history"
    d.refresh_from_db()
    assert (d.status, d.attempts, d.last_status_code) == ("sent", 2, 200)
    assert [(a.number, a.status_code) for a in d.log.all()] == [(1, 500), (2, 200)]
    assert run_delivery(d.pk) == [] and d.log.count() == 2, "a sent delivery is never sent again"


def test_a_webhook_slower_than_its_timeout_is_retried(poster, private_ok, settings):
    settings.CTXOBS_ALERT_RETRY_BASE_SECONDS = 0.01
    with Receiver(slow_first=1, slow_seconds=3.0) as rx:
        ch, rx.secret = webhook(private_ok, rx.url, timeout_seconds=0.3)
        alert = raise_one_alert(poster)
        d = Delivery.objects.get(incident=alert.incident, channel=ch)
        assert len(run_delivery(d.pk)) == 1
        assert len(rx.accepted()) >= 1
    d.refresh_from_db()
    assert (d.status, d.attempts, d.last_status_code) == ("sent", 2, 200)
    first, second = d.log.all()
    # Behaviour, not speed: the attempt ends at the channel's 0.3 s timeout, not when the receiver
    # would have answered (3 s); the bound leaves room for a loaded machine.
    assert first.status_code is None and "timed out" in first.error and first.duration_ms < 2500
    assert second.status_code == 200


def test_a_wrong_secret_fails_verification_and_4xx_is_not_retried(poster, private_ok):
    with Receiver() as rx:
        ch, _secret = webhook(private_ok, rx.url)
        rx.secret = "whsec_not-the-one"
        alert = raise_one_alert(poster)
        d = Delivery.objects.get(incident=alert.incident, channel=ch)
        assert run_delivery(d.pk) == []
        assert [r["signature_ok"] for r in rx.requests] == [False]
    d.refresh_from_db()
    assert (d.status, d.last_status_code, d.attempts) == ("failed", 401, 1)


def test_retries_stop_after_max_attempts_on_a_dead_endpoint(poster, private_ok, settings):
    settings.CTXOBS_ALERT_RETRY_BASE_SECONDS = 0.01
    with Receiver() as rx:
        url = rx.url
    ch, _ = webhook(private_ok, url, max_attempts=3)  # nothing listens there any more
    alert = raise_one_alert(poster)
    d = Delivery.objects.get(incident=alert.incident, channel=ch)
    waits = run_delivery(d.pk)
    assert waits == [0.01, 0.02]
    d.refresh_from_db()
    assert (d.status, d.attempts, d.last_status_code) == ("failed", 3, None)
    assert "ConnectError" in d.last_error


def test_one_delivery_per_incident_event_and_channel(poster, private_ok):
    ch, _ = webhook(private_ok, "http://127.0.0.1:9/x")
    alert = raise_one_alert(poster)
    refs = list(private_ok.snapshot_set.values_list("id", flat=True))
    alert_evaluation.alerts_evaluate(project_id=private_ok.pk, snapshot_refs=refs)
    assert Delivery.objects.filter(incident=alert.incident, channel=ch).count() == 1
    assert not Delivery.objects.filter(alert=alert).exists()


def test_severity_filter_and_disabled_channels(poster, private_ok):
    webhook(private_ok, "http://127.0.0.1:9/x", min_severity="critical")
    alert = raise_one_alert(poster)  # force crossing is a warning
    assert not Delivery.objects.filter(incident=alert.incident).exists()


def test_email_channel_sends_through_the_django_backend(poster, project):
    ch, secret = alert_channels.channel_create(
        project=project, kind="email", data={"name": "oncall", "recipients": "a@example.com, b@example.com"}
    )
    assert secret is None
    alert = raise_one_alert(poster)
    d = Delivery.objects.get(incident=alert.incident, channel=ch)
    run_delivery(d.pk)
    (msg,) = mail.outbox
    assert msg.to == ["a@example.com", "b@example.com"]
    assert "incident opened: warning: The history overflowed the window" in msg.subject
    assert f"/p/{project.pk}/s/s-1/t/1/" in msg.body
    d.refresh_from_db()
    assert d.status == "sent"


def test_send_test_for_each_channel_kind(project, private_ok, django_capture_on_commit_callbacks):
    with Receiver() as rx:
        hook, secret = webhook(private_ok, rx.url)
        rx.secret = secret
        email, _ = alert_channels.channel_create(
            project=project, kind="email", data={"name": "m", "recipients": "x@example.com"}
        )
        for c in (hook, email):
            d = alert_channels.channel_test_send(channel=c)
            run_delivery(d.pk)
            d.refresh_from_db()
            assert d.status == "sent" and d.is_test
        (got,) = rx.accepted()
        assert got["body"]["event"] == "test" and got["signature_ok"]
        assert got["headers"][channels.EVENT_HEADER] == "test"
    assert len(mail.outbox) == 1


def test_channel_validation(project):
    with pytest.raises(InvalidChannel) as exc:
        alert_channels.channel_create(
            project=project, kind="email", data={"name": "m", "recipients": "not-an-address"}
        )
    assert "recipients" in exc.value.errors
    with pytest.raises(InvalidChannel) as exc:
        alert_channels.channel_create(
            project=project, kind="webhook", data={"name": "h", "url": "ftp://example.com/x"}
        )
    assert "url" in exc.value.errors


def test_signature_reference_check():
    body = b'{"a":1}'
    sig = channels.signature("s3cret", "1700000000", body)
    assert channels.signature_verify("s3cret", "1700000000", body, sig, now=1700000010)
    assert not channels.signature_verify("s3cret", "1700000000", body + b" ", sig, now=1700000010)
    assert not channels.signature_verify("s3cret", "1700000000", body, sig, now=1700009999), "too old"


def test_secret_round_trip_is_encrypted():
    token = channels.secret_encrypt("whsec_abc")
    assert "whsec_abc" not in token
    assert channels.secret_decrypt(token) == "whsec_abc"


SMTP_SCRIPT = """
import json, django
django.setup()
from django.conf import settings
from alerts.channels import email_send
r = email_send(recipients=["oncall@example.com"], subject="[ctxobs] env check", text="hello")
print(json.dumps({"backend": settings.EMAIL_BACKEND, "ok": r.ok, "error": r.error}))
"""


# The local server takes a login over plain SMTP on loopback; aiosmtpd warns about that.
@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
def test_smtp_settings_from_the_environment_reach_a_real_smtp_server():
    """The SMTP host, port, credentials and sender come from CTXOBS_* variables: a fresh process
    configured only by them delivers to a real local SMTP server that requires the login."""
    with SmtpServer(user="alerts", password="smtp-pw") as smtp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTXOBS_SMTP")}
        env.pop("CTXOBS_EMAIL_BACKEND", None)
        env.update(
            DJANGO_SETTINGS_MODULE="config.settings",
            CTXOBS_SMTP_HOST="127.0.0.1",
            CTXOBS_SMTP_PORT=str(smtp.port),
            CTXOBS_SMTP_USER="alerts",
            CTXOBS_SMTP_PASSWORD="smtp-pw",
            CTXOBS_EMAIL_FROM="ctxobs-alerts@example.com",
        )
        out = subprocess.run(
            [sys.executable, "-c", SMTP_SCRIPT],
            env=env,
            cwd=str(Path(__file__).resolve().parents[2]),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert result == {"backend": "django.core.mail.backends.smtp.EmailBackend", "ok": True, "error": ""}
        (got,) = smtp.received
        assert got["from"] == "ctxobs-alerts@example.com" and got["to"] == ["oncall@example.com"]
        assert got["login"] == "alerts" and smtp.logins == ["alerts"]
        assert got["message"]["Subject"] == "[ctxobs] env check"

        env["CTXOBS_SMTP_PASSWORD"] = "wrong"
        out = subprocess.run(
            [sys.executable, "-c", SMTP_SCRIPT],
            env=env,
            cwd=str(Path(__file__).resolve().parents[2]),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        refused = json.loads(out.stdout.strip().splitlines()[-1])
        assert refused["ok"] is False and "Authentication" in refused["error"]
        assert len(smtp.received) == 1


@pytest.fixture
def smtp_backend(settings):
    with SmtpServer() as smtp:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", smtp.port
        settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
        settings.EMAIL_USE_TLS = False
        yield smtp


def test_send_test_action_on_the_channel_page_for_both_kinds(client, private_ok, smtp_backend):
    """The channel page's "send test" button queues a test delivery; it reaches a real webhook
    receiver (signed) and a real SMTP server, and the delivery log on the page shows it."""
    admin = get_user_model().objects.create_user("admin", password="pw")
    Membership.objects.create(project=private_ok, user=admin, role="admin")
    client.force_login(admin)
    with Receiver() as rx:
        hook, rx.secret = webhook(private_ok, rx.url)
        email, _ = alert_channels.channel_create(
            project=private_ok, kind="email", data={"name": "oncall", "recipients": "oncall@example.com"}
        )
        for c in (hook, email):
            r = client.post(f"/p/{private_ok.pk}/alerts/channels/{c.pk}/test/")
            assert r.status_code in (200, 302)
            d = Delivery.objects.get(channel=c, is_test=True)
            assert d.status == "pending"
            run_delivery(d.pk)
            d.refresh_from_db()
            assert d.status == "sent" and d.attempts == 1
            page = client.get(f"/p/{private_ok.pk}/alerts/channels/{c.pk}/").content.decode()
            assert "sent" in page
        (got,) = rx.accepted()
        assert got["body"]["event"] == "test" and got["signature_ok"]
        assert Delivery.objects.get(channel=hook).last_status_code == 200
    (msg,) = smtp_backend.messages()
    assert "test message" in msg["Subject"] and msg["To"] == "oncall@example.com"


def test_send_test_action_is_for_admins(client, project):
    viewer = get_user_model().objects.create_user("viewer", password="pw")
    Membership.objects.create(project=project, user=viewer, role="viewer")
    email, _ = alert_channels.channel_create(
        project=project, kind="email", data={"name": "oncall", "recipients": "oncall@example.com"}
    )
    client.force_login(viewer)
    r = client.post(f"/p/{project.pk}/alerts/channels/{email.pk}/test/")
    assert r.status_code in (403, 404)
    assert not Delivery.objects.filter(channel=email).exists()
