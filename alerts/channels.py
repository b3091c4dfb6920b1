"""Where alerts go: webhook (signed JSON) and e-mail. Transport, signing and secret storage;
the delivery state (attempts, retries, log) lives in alerts.services.delivery.

Webhook signature: the receiver gets `X-Ctxobs-Timestamp: <unix seconds>` and
`X-Ctxobs-Signature: sha256=<hex>`, the HMAC-SHA256 with the channel's secret of
`<timestamp>.<raw body>`. `signature_verify` is the reference check.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import smtplib
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
from django.conf import settings
from django.core.mail import EmailMessage
from django.urls import NoReverseMatch, reverse

from core import net, registry
from core import secrets as core_secrets
from ctxobs.retry import parse_retry_after, retryable_status

SIGNATURE_HEADER = "X-Ctxobs-Signature"
TIMESTAMP_HEADER = "X-Ctxobs-Timestamp"
EVENT_HEADER = "X-Ctxobs-Event"
DELIVERY_HEADER = "X-Ctxobs-Delivery"
USER_AGENT = "ctxobs-alerts/1"
MAX_ERROR_CHARS = 500


# --- secrets -----------------------------------------------------------------
def secret_new() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def secret_encrypt(raw: str) -> str:
    return core_secrets.encrypt(raw)


def secret_decrypt(token: str) -> str:
    """The raw secret; ValueError when it cannot be decrypted (the encryption key changed)."""
    return core_secrets.decrypt(token, what="the channel secret")


def signature(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def signature_verify(
    secret: str,
    timestamp: str,
    body: bytes,
    header: str,
    *,
    tolerance: float | None = 300,
    now: float | None = None,
) -> bool:
    """Whether HEADER signs BODY at TIMESTAMP with SECRET (and the timestamp is recent)."""
    if tolerance is not None:
        try:
            age = abs((now if now is not None else time.time()) - float(timestamp))
        except ValueError:
            return False
        if age > tolerance:
            return False
    return hmac.compare_digest(signature(secret, timestamp, body), header)


# --- webhook URLs ------------------------------------------------------------
def webhook_url_problem(url: str, *, allow_private: bool) -> str | None:
    """Why URL is not an acceptable webhook target, or None, by the one URL policy (core.net)."""
    try:
        net.url_check(url, allow_private=allow_private)
    except net.AddressRefused as exc:
        return exc.reason
    return None


# --- sending -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SendResult:
    ok: bool
    retryable: bool
    status_code: int | None = None
    error: str = ""
    duration_ms: float = 0.0
    retry_after: float | None = None


def webhook_send(
    *,
    url: str,
    secret: str,
    payload: dict[str, Any],
    event: str,
    delivery_id: int,
    timeout: float,
    allow_private: bool,
) -> SendResult:
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, default=str).encode()
    ts = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        EVENT_HEADER: event,
        DELIVERY_HEADER: str(delivery_id),
        TIMESTAMP_HEADER: ts,
        SIGNATURE_HEADER: signature(secret, ts, body),
    }
    started = time.perf_counter()
    try:
        # The policy is applied again on connect (a name re-pointed since it was saved), and no
        # redirects are followed: the signed body goes only where the channel says.
        with net.guarded_client(allow_private=allow_private, timeout=timeout) as client:
            resp = client.post(url, content=body, headers=headers)
    except net.AddressRefused as exc:
        return SendResult(False, False, None, f"url {exc.reason}"[:MAX_ERROR_CHARS], _ms(started))
    except httpx.TimeoutException:
        return SendResult(False, True, None, f"timed out after {timeout:g}s", _ms(started))
    except httpx.HTTPError as exc:
        return SendResult(False, True, None, f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS], _ms(started))
    ms = _ms(started)
    code = resp.status_code
    if 200 <= code < 300:
        return SendResult(True, False, code, "", ms)
    retry_after = parse_retry_after(resp.headers.get("Retry-After"))
    retryable = retryable_status(code)
    return SendResult(False, retryable, code, f"HTTP {code}", ms, retry_after)


def email_send(*, recipients: list[str], subject: str, text: str) -> SendResult:
    started = time.perf_counter()
    try:
        n = EmailMessage(
            subject=subject, body=text, from_email=settings.DEFAULT_FROM_EMAIL, to=recipients
        ).send()
    except smtplib.SMTPRecipientsRefused as exc:
        return SendResult(
            False,
            False,
            None,
            f"recipients refused: {', '.join(exc.recipients)}"[:MAX_ERROR_CHARS],
            _ms(started),
        )
    except (smtplib.SMTPException, OSError) as exc:
        return SendResult(False, True, None, f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS], _ms(started))
    if n != 1:
        return SendResult(False, True, None, "the e-mail backend sent nothing", _ms(started))
    return SendResult(True, False, None, "", _ms(started))


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


# --- what is sent ------------------------------------------------------------
def base_url() -> str:
    """Where the dashboard is reached (CTXOBS_BASE_URL): the start of every link sent out."""
    return str(settings.CTXOBS_BASE_URL).rstrip("/")


def turn_path(project_id: int, session_id: str, turn: int) -> str:
    """The turn page of the dashboard."""
    try:
        return reverse(
            "ingest:turn", kwargs={"project_id": project_id, "session_id": session_id, "turn": turn}
        )
    except NoReverseMatch:
        return f"/p/{project_id}/s/{quote(session_id, safe='/')}/t/{turn}/"


def alert_payload(alert: Any, *, project_name: str) -> dict[str, Any]:
    """The JSON an alert is sent as. Block keys and ids only — never prompt text."""
    root = base_url()
    return {
        "event": "alert.opened",
        "alert": {
            "id": alert.pk,
            "project": {"id": alert.project_id, "name": project_name},
            "rule": {"id": alert.rule_id, "name": alert.rule.name, "kind": alert.rule_kind},
            "severity": alert.severity,
            "title": alert.title,
            "state": alert.state,
            "session_id": alert.session_id,
            "agent": alert.agent,
            "model": alert.model,
            "turn": alert.turn,
            "last_turn": alert.last_turn,
            "value": alert.value,
            "threshold": alert.threshold,
            "unit": alert.unit,
            "contributors": alert.contributors,
            "created_at": alert.created_at.isoformat(),
            "turn_url": root + turn_path(alert.project_id, alert.session_id, alert.turn),
            "alert_url": f"{root}/p/{alert.project_id}/alerts/{alert.pk}/",
            # Fields other apps add (replay's "triage" of the alert's turn), read at send time.
            **registry.alert_payload_extras(
                project_id=alert.project_id, alert_id=alert.pk, snapshot_ref=alert.snapshot_ref
            ),
        },
    }


def test_payload(channel: Any, *, project_name: str) -> dict[str, Any]:
    return {
        "event": "test",
        "channel": {"id": channel.pk, "name": channel.name},
        "project": {"id": channel.project_id, "name": project_name},
        "message": "This is a test delivery from ctxobs.",
    }


def _triage_lines(t: Any) -> list[str]:
    if not isinstance(t, dict):
        return []
    line = t.get("summary") or t.get("status", "")
    if t.get("status") in ("skipped", "failed") and t.get("reason"):
        line = f"{t['status']}: {t['reason']}"
    return [f"Triage: {line}", f"  {t.get('url', '')}", ""]


def alert_email(alert: Any, *, project_name: str) -> tuple[str, str]:
    p = alert_payload(alert, project_name=project_name)["alert"]
    subject = " ".join(f"[ctxobs {project_name}] {alert.severity}: {alert.title}".split())[:250]
    lines = [
        alert.title,
        "",
        f"Rule: {p['rule']['name']} ({alert.rule_kind})",
        f"Session: {alert.session_id}  turn {alert.turn}",
        f"Value: {alert.value:.4g}{alert.unit}  threshold {alert.threshold:.4g}{alert.unit}",
        "",
        "Top contributing blocks:",
        *[
            f"  - {c['key']} ({c['kind']}): {c['tokens']} tokens, {c['share'] * 100:.0f}% of the window"
            for c in alert.contributors
        ],
        "",
        *_triage_lines(p.get("triage")),
        f"Turn: {p['turn_url']}",
        f"Alert: {p['alert_url']}",
    ]
    return subject, "\n".join(lines)


# --- incidents -----------------------------------------------------------------------------
def incident_path(project_id: int, incident_id: int) -> str:
    """The incident's page: the one place its URL is built."""
    try:
        return reverse("alerts:incident", kwargs={"project_id": project_id, "incident_id": incident_id})
    except NoReverseMatch:
        return f"/p/{project_id}/incidents/{incident_id}/"


def incidents_path(project_id: int) -> str:
    try:
        return reverse("alerts:incidents", kwargs={"project_id": project_id})
    except NoReverseMatch:
        return f"/p/{project_id}/incidents/"


def _iso(v: Any) -> str | None:
    return v.isoformat() if v is not None else None


def incident_payload(
    incident: Any, *, event: str, digest: dict[str, Any], project_name: str, culprit: str | None
) -> dict[str, Any]:
    """The JSON an incident's state change is sent as: the incident as it is now, the alerts
    grouped since the previous message (up to alerts.kinds.DIGEST_ALERTS, and how many more),
    the messages held back by the channel's hourly limit, links. Ids, keys and titles only —
    never prompt text."""
    root = base_url()
    alerts = [
        {k: v for k, v in {**a, "turn_url": root + a.get("turn_path", "")}.items() if k != "turn_path"}
        for a in digest.get("alerts") or []
    ]
    out: dict[str, Any] = {
        "event": f"incident.{event}",
        "incident": {
            "id": incident.pk,
            "project": {"id": incident.project_id, "name": project_name},
            "title": incident.title,
            "cause": incident.cause,
            "agent": incident.agent,
            "severity": incident.severity,
            "status": incident.status,
            "alert_count": incident.alert_count,
            "session_count": incident.session_count,
            "opened_count": incident.opened_count,
            "first_seen": _iso(incident.first_seen),
            "last_seen": _iso(incident.last_seen),
            "resolved_at": _iso(incident.resolved_at),
            "resolution": incident.resolution,
            "culprit": culprit,
            "url": root + incident_path(incident.project_id, incident.pk),
        },
        "alerts": alerts,
        "alerts_more": int(digest.get("more") or 0),
        "links": {"incidents": root + incidents_path(incident.project_id)},
    }
    held = digest.get("held_back")
    if held:
        out["held_back"] = held
    return out


def incident_email(
    incident: Any, *, event: str, digest: dict[str, Any], project_name: str, culprit: str | None
) -> tuple[str, str]:
    p = incident_payload(incident, event=event, digest=digest, project_name=project_name, culprit=culprit)
    inc = p["incident"]
    subject = " ".join(
        f"[ctxobs {project_name}] incident {event}: {incident.severity}: {incident.title}".split()
    )[:250]
    lines = [
        incident.title,
        "",
        f"Status: {incident.status}   severity: {incident.severity}   cause: {incident.cause}",
        f"Alerts: {incident.alert_count} in {incident.session_count} session(s)",
        f"First seen: {inc['first_seen']}   last seen: {inc['last_seen']}",
    ]
    if culprit:
        lines += ["", f"Culprit: {culprit}"]
    if p["alerts"]:
        lines += ["", "Alerts grouped since the last message:"]
        lines += [
            f"  - {a['severity']} {a['rule_kind']}: session {a['session_id']} turn {a['turn']}"
            f"  {a['turn_url']}"
            for a in p["alerts"]
        ]
        if p["alerts_more"]:
            lines.append(f"  … and {p['alerts_more']} more")
    held = p.get("held_back")
    if held:
        lines += ["", f"{held['count']} message(s) held back by this channel's hourly limit:"]
        lines += [f"  - {m['event']}: {m['title']}" for m in held.get("messages", [])]
    lines += ["", f"Incident: {inc['url']}"]
    return subject, "\n".join(lines)
