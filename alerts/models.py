"""Alert rules, the alerts they raise, and where alerts are sent.

Alerts point at sessions and snapshots by (project_id, *_ref) like the ingest hot tables do.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

from alerts.kinds import (
    DEFAULT_CHANNEL_MAX_PER_HOUR,
    DEFAULT_COOLDOWN_SECONDS,
    DEFAULT_COOLDOWN_TURNS,
    INCIDENT_DEFAULTS,
    SEVERITIES,
    STORED_KINDS,
)
from core.debts import PendingWork

KIND_CHOICES = list(STORED_KINDS.items())
SEVERITY_CHOICES = [(s, s) for s in SEVERITIES]
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}
TITLE_MAX_CHARS = 500
# Defaults of a new channel.
WEBHOOK_TIMEOUT_SECONDS = 5.0
WEBHOOK_MAX_ATTEMPTS = 5
EMAIL_MAX_ATTEMPTS = 3


class AlertRule(models.Model):
    project = models.ForeignKey("core.Project", on_delete=models.CASCADE, related_name="alert_rules")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=32, choices=KIND_CHOICES)
    severity = models.CharField(max_length=10, choices=SEVERITY_CHOICES, default="warning")
    enabled = models.BooleanField(default=True)
    params = models.JSONField(default=dict)
    # Narrowing: blank matches any agent / model.
    agent = models.CharField(max_length=256, blank=True, default="")
    model = models.CharField(max_length=256, blank=True, default="")
    # A finding within this many turns (or seconds) of an alert of the same rule and session
    # extends that alert instead of raising a new one.
    cooldown_turns = models.IntegerField(default=DEFAULT_COOLDOWN_TURNS)
    cooldown_seconds = models.IntegerField(default=DEFAULT_COOLDOWN_SECONDS)
    is_default = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project_id", "id"]
        indexes = [models.Index(fields=["project", "enabled"], name="alertrule_project_idx")]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class Alert(models.Model):
    class State(models.TextChoices):
        OPEN = "open", "open"
        ACKNOWLEDGED = "acknowledged", "acknowledged"
        RESOLVED = "resolved", "resolved"

    project = models.ForeignKey("core.Project", on_delete=models.CASCADE, related_name="alerts")
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    rule_kind = models.CharField(max_length=32, choices=KIND_CHOICES)
    severity = models.CharField(max_length=10, choices=SEVERITY_CHOICES)
    title = models.CharField(max_length=TITLE_MAX_CHARS)
    session_ref = models.BigIntegerField()  # AgentSession.id within the project
    session_id = models.CharField(max_length=256)
    agent = models.CharField(max_length=256, blank=True, default="")
    model = models.CharField(max_length=256, blank=True, default="")
    # The anchor: the first turn of the condition episode, and the span the episode covers.
    turn = models.IntegerField()
    snapshot_ref = models.BigIntegerField()
    ts = models.DateTimeField()
    last_turn = models.IntegerField()
    last_ts = models.DateTimeField()
    value = models.FloatField()
    threshold = models.FloatField()
    peak_value = models.FloatField()
    unit = models.CharField(max_length=16, default="%")
    contributors = models.JSONField(default=list)  # top blocks: position, key, kind, tokens, share, delta
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN)
    # The incident it grouped into (alerts.services.incidents); None for alerts raised before incidents.
    incident = models.ForeignKey(
        "Incident", null=True, blank=True, on_delete=models.SET_NULL, related_name="alerts", db_index=True
    )
    # "<rule>:<session_ref>:<first turn of the episode>", unique per project.
    dedup_key = models.CharField(max_length=100)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["project", "dedup_key"], name="uniq_alert_dedup_key")]
        indexes = [
            models.Index(fields=["project", "-created_at"], name="alert_recent_idx"),
            models.Index(fields=["project", "state", "-created_at"], name="alert_state_idx"),
            models.Index(fields=["project", "session_ref", "rule", "turn"], name="alert_session_idx"),
            # The episodes new findings may extend: those ending at or after a turn or a time.
            models.Index(
                fields=["project", "session_ref", "rule", "last_turn"], name="alert_episode_turn_idx"
            ),
            models.Index(fields=["project", "session_ref", "rule", "last_ts"], name="alert_episode_ts_idx"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.title}"


class Channel(models.Model):
    class Kind(models.TextChoices):
        WEBHOOK = "webhook", "webhook"
        EMAIL = "email", "e-mail"

    project = models.ForeignKey("core.Project", on_delete=models.CASCADE, related_name="alert_channels")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    enabled = models.BooleanField(default=True)
    min_severity = models.CharField(max_length=10, choices=SEVERITY_CHOICES, default="info")
    url = models.URLField(max_length=2000, blank=True, default="")
    # The HMAC secret, Fernet-encrypted (the receiver needs the same secret to verify).
    secret_encrypted = models.TextField(blank=True, default="")
    timeout_seconds = models.FloatField(default=WEBHOOK_TIMEOUT_SECONDS)
    max_attempts = models.IntegerField(default=WEBHOOK_MAX_ATTEMPTS)
    recipients = models.JSONField(default=list, blank=True)  # e-mail addresses
    # At most this many incident messages per rolling hour; the rest are held and summed up in the next.
    max_per_hour = models.IntegerField(default=DEFAULT_CHANNEL_MAX_PER_HOUR)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project_id", "id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class Incident(models.Model):
    """Alerts that belong together: one event in a session, or one cause across the sessions of
    an agent (alerts.services.incidents). Channels hear about its state changes, not its alerts."""

    class Status(models.TextChoices):
        # Not yet confirmed (alerts.services.incidents): it groups alerts and sends nothing.
        PENDING = "pending", "pending"
        OPEN = "open", "open"
        ACKNOWLEDGED = "acknowledged", "acknowledged"
        RESOLVED = "resolved", "resolved"
        MUTED = "muted", "muted"

    class Resolution(models.TextChoices):
        NONE = "", "-"
        AUTO = "auto", "auto"
        USER = "user", "user"
        # Went quiet before it was confirmed: no message was ever sent about it.
        TRANSIENT = "transient", "transient"

    project = models.ForeignKey("core.Project", on_delete=models.CASCADE, related_name="incidents")
    agent = models.CharField(max_length=256, blank=True, default="")
    # "<rule family>[:<block key of the first alert's top contributor>]" (alerts.kinds.incident_cause).
    cause = models.CharField(max_length=300)
    title = models.CharField(max_length=TITLE_MAX_CHARS)
    severity = models.CharField(max_length=10, choices=SEVERITY_CHOICES)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    muted_until = models.DateTimeField(null=True, blank=True)
    # Turn times (the agent's clock) of the earliest and latest alert activity grouped into it.
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    alert_count = models.IntegerField(default=0)
    session_count = models.IntegerField(default=0)
    opened_count = models.IntegerField(default=1)
    reopened_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolution = models.CharField(max_length=12, choices=Resolution.choices, blank=True, default="")
    # When it was confirmed (null while pending, and for good when it resolved as transient).
    confirmed_at = models.DateTimeField(null=True, blank=True)
    # Notify once: each state change sent to channels takes the next sequence number; the severity
    # last announced tells an escalation; the alerts grouped since the last message wait here
    # (up to DIGEST_ALERTS ids, and how many more) for the next one.
    event_sequence = models.IntegerField(default=0)
    notified_severity = models.CharField(max_length=10, blank=True, default="")
    digest_alert_ids = ArrayField(models.BigIntegerField(), default=list, blank=True)
    digest_more = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-last_seen", "-id"]
        indexes = [
            # Grouping and reopening: the incidents of one agent and cause, latest first.
            models.Index(fields=["project", "agent", "cause", "-last_seen"], name="incident_cause_idx"),
            models.Index(fields=["project", "-last_seen"], name="incident_recent_idx"),
            models.Index(fields=["project", "status", "-last_seen"], name="incident_status_idx"),
            # The auto-resolve and unmute scan: only incidents not resolved.
            models.Index(
                fields=["last_seen"],
                name="incident_unresolved_idx",
                condition=~models.Q(status="resolved"),
            ),
        ]

    def __str__(self) -> str:
        return f"incident #{self.pk} {self.title}"


class IncidentPolicy(models.Model):
    """A project's incident windows (alerts.kinds.INCIDENT_DEFAULTS apply without a row)."""

    project = models.OneToOneField("core.Project", on_delete=models.CASCADE, related_name="incident_policy")
    session_window_turns = models.IntegerField(default=INCIDENT_DEFAULTS.session_window_turns)
    session_window_seconds = models.IntegerField(default=INCIDENT_DEFAULTS.session_window_seconds)
    group_window_seconds = models.IntegerField(default=INCIDENT_DEFAULTS.group_window_seconds)
    quiet_seconds = models.IntegerField(default=INCIDENT_DEFAULTS.quiet_seconds)
    quiet_max_factor = models.IntegerField(default=INCIDENT_DEFAULTS.quiet_max_factor)
    reopen_window_seconds = models.IntegerField(default=INCIDENT_DEFAULTS.reopen_window_seconds)
    confirm_sessions = models.IntegerField(default=INCIDENT_DEFAULTS.confirm_sessions)
    confirm_turns = models.IntegerField(default=INCIDENT_DEFAULTS.confirm_turns)
    confirm_seconds = models.IntegerField(default=INCIDENT_DEFAULTS.confirm_seconds)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"incident policy of project {self.project_id}"


class Delivery(models.Model):
    """One message to one channel: an incident's state change (opened, escalated, reopened,
    resolved, triaged), or a test message; at most one per (incident, channel, event, sequence).
    Deliveries of single alerts (alert set, no incident) are from before incidents."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        SENDING = "sending", "sending"
        RETRYING = "retrying", "retrying"
        SENT = "sent", "sent"
        FAILED = "failed", "failed"
        # Over the channel's hourly limit: waits for room, then goes out with the others held.
        HELD = "held", "held"
        # Summed up in a later message (`folded_into`) instead of being sent on its own.
        FOLDED = "folded", "folded"

    project = models.ForeignKey("core.Project", on_delete=models.CASCADE, related_name="+")
    alert = models.ForeignKey(
        Alert, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries"
    )
    incident = models.ForeignKey(
        Incident, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries"
    )
    event = models.CharField(max_length=16, blank=True, default="")
    sequence = models.IntegerField(default=0)
    # What the message says beyond the incident's current state: the alerts grouped since the
    # previous message, and (once claimed) the messages held back and folded into it.
    digest = models.JSONField(default=dict, blank=True)
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="deliveries")
    is_test = models.BooleanField(default=False)
    # When its first attempt was claimed: what the channel's hourly limit counts.
    claimed_at = models.DateTimeField(null=True, blank=True)
    held_at = models.DateTimeField(null=True, blank=True)
    folded_into = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.IntegerField(default=0)
    last_status_code = models.IntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # While SENDING: the attempt `attempts` is in flight until then. A worker that dies mid-send
    # leaves it behind; once it has passed, the sweeper hands the delivery to another worker.
    lease_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["alert", "channel"], name="uniq_delivery_alert_channel"),
            models.UniqueConstraint(
                fields=["incident", "channel", "event", "sequence"],
                name="uniq_delivery_incident_event",
                condition=models.Q(incident__isnull=False),
            ),
        ]
        indexes = [
            models.Index(fields=["channel", "-created_at"], name="delivery_channel_idx"),
            # The hourly limit's count, and the held messages waiting for room.
            models.Index(
                fields=["channel", "claimed_at"],
                name="delivery_rate_idx",
                condition=models.Q(claimed_at__isnull=False),
            ),
            models.Index(
                fields=["channel", "held_at"], name="delivery_held_idx", condition=models.Q(status="held")
            ),
            # The sweeper's scan: only deliveries still owed an attempt.
            models.Index(
                fields=["created_at"],
                name="delivery_open_idx",
                condition=models.Q(status__in=["pending", "sending", "retrying"]),
            ),
        ]

    def __str__(self) -> str:
        return f"delivery #{self.pk} ({self.status})"


class DeliveryAttempt(models.Model):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="log")
    number = models.IntegerField()
    at = models.DateTimeField()
    status_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    duration_ms = models.FloatField(default=0.0)

    class Meta:
        ordering = ["delivery_id", "number"]
        constraints = [models.UniqueConstraint(fields=["delivery", "number"], name="uniq_delivery_attempt")]

    def __str__(self) -> str:
        return f"attempt {self.number} of delivery #{self.delivery_id}"


class PendingEvaluation(PendingWork):
    """The evaluation owed to one ingest batch's new snapshots (core.debts)."""

    class Meta(PendingWork.Meta):
        indexes = [models.Index(fields=["due_at"], name="alert_pending_due_idx")]
