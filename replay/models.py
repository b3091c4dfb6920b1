"""Replay storage: model endpoints, jobs, their variants and one run per (job, variant, sample).

Snapshots are referenced by (project_id, snapshot_ref) like the ingest hot tables do; replay
never writes ingest tables.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

from core.models import EscapedJSONField, EscapedTextField, Project


class ModelEndpoint(models.Model):
    """An OpenAI-compatible server a project replays against. The API key is stored encrypted
    (core.secrets) and never shown again."""

    class Mode(models.TextChoices):
        # The completions API with a transcript we render ourselves: every message reaches the
        # model, whatever chat template the server would otherwise apply. For servers without
        # a chat API; chat with chat_drops_later_system falls back to it only where needed.
        COMPLETIONS = "completions", "completions (transcript rendered by ctxobs)"
        CHAT = "chat", "chat completions (messages sent as saved)"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="model_endpoints")
    name = models.CharField(max_length=100)
    base_url = models.CharField(max_length=500)
    model = models.CharField(max_length=200)
    mode = models.CharField(max_length=20, choices=Mode.choices, default=Mode.CHAT)
    api_key_encrypted = models.TextField(blank=True, default="")
    api_key_hint = models.CharField(max_length=12, blank=True, default="")
    default_params = models.JSONField(default=dict, blank=True)
    embeddings_model = models.CharField(max_length=200, blank=True, default="")
    timeout_s = models.FloatField(default=60.0)
    is_default = models.BooleanField(default=False)
    is_local = models.BooleanField(default=False)
    # Chat mode only: the server's chat template keeps a leading system message and drops later
    # ones (llama.cpp's plain templates). A request with such a message then goes to the
    # completions API as a transcript, which keeps every message.
    chat_drops_later_system = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_test_at = models.DateTimeField(null=True, blank=True)
    last_test_ok = models.BooleanField(null=True, blank=True)
    last_test_detail = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        ordering = ["project", "-is_default", "name"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="uniq_endpoint_name")]

    def __str__(self) -> str:
        return f"{self.name} ({self.model})"

    @property
    def has_api_key(self) -> bool:
        return bool(self.api_key_encrypted)


class JobStatus(models.TextChoices):
    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    DONE = "done", "done"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"


JOB_FINISHED = (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED)


class QueuePriority(models.IntegerChoices):
    """Where a job's model calls wait in the replay queue: the worker takes every call of a lower
    number first, and calls of the same number in the order they were queued. The numbers are the
    Redis transport's priority steps (settings: CELERY_BROKER_TRANSPORT_OPTIONS), a list per step."""

    PERSON = 0, "asked by a person"
    TRIAGE = 3, "automatic triage"
    EXPERIMENT = 6, "experiment"


class ReplayJob(models.Model):
    class Kind(models.TextChoices):
        PLAIN = "plain", "replay"
        WITHOUT = "without", "without a block"
        MOVE = "move", "move a block"
        LEAVE_ONE_OUT = "loo", "leave-one-out"
        BATCH = "batch", "one variant over many turns"
        CUSTOM = "custom", "custom variant"
        ATTRIBUTION = "attribution", "attribution (random ablations)"
        EXPERIMENT = "experiment", "experiment over an evaluation set"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="replay_jobs")
    endpoint = models.ForeignKey(ModelEndpoint, on_delete=models.PROTECT, related_name="jobs")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    title = models.CharField(max_length=300, blank=True, default="")
    status = models.CharField(max_length=10, choices=JobStatus.choices, default=JobStatus.PENDING)
    spec = models.JSONField(default=dict)  # what was asked: snapshots, operations, filter
    params = models.JSONField(default=dict)  # sampling overrides on top of snapshot + endpoint params
    samples = models.PositiveSmallIntegerField(default=3)  # baseline replays for the noise floor
    # A person's replay is not queued behind an experiment's hundreds of calls.
    priority = models.PositiveSmallIntegerField(choices=QueuePriority.choices, default=QueuePriority.PERSON)
    estimate = models.JSONField(default=dict)  # {"model_calls": n, "prompt_tokens": n}
    n_runs = models.IntegerField(default=0)
    n_done = models.IntegerField(default=0)
    n_failed = models.IntegerField(default=0)
    n_cancelled = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at"], name="replay_job_recent_idx")]

    def __str__(self) -> str:
        return f"job {self.pk} ({self.kind}, {self.status})"

    @property
    def finished(self) -> bool:
        return self.status in JOB_FINISHED

    @property
    def queued_behind_triage(self) -> bool:
        """Whether its calls wait behind automatic triage's as well as people's replays."""
        return self.priority > QueuePriority.TRIAGE

    @property
    def progress(self) -> float:
        return (self.n_done + self.n_failed + self.n_cancelled) / self.n_runs if self.n_runs else 1.0


class ReplayContext(models.Model):
    """A saved context frozen for replay: one turn in the wire form (what `ctxobs push` takes),
    stored once per project by its content hash. Retention never removes it: evaluation sets pin
    their items' contexts here, so that a set replays the same way however old its turns are."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="replay_contexts")
    content_hash = models.CharField(max_length=64)
    # The wire form: blocks with their messages, params, model, output, events (stored escaped,
    # read back as sent).
    snapshot = EscapedJSONField(default=dict)
    size_bytes = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project", "id"]
        constraints = [
            models.UniqueConstraint(fields=["project", "content_hash"], name="uniq_replay_context_hash")
        ]

    def __str__(self) -> str:
        return f"context {self.pk} ({self.content_hash[:12]})"


class ReplayVariant(models.Model):
    """One context to send: a saved snapshot's blocks plus operations (none for the baseline).
    With `context`, the blocks come from that frozen context instead of the stored turn."""

    job = models.ForeignKey(ReplayJob, on_delete=models.CASCADE, related_name="variants")
    position = models.IntegerField()
    snapshot_ref = models.BigIntegerField()  # ingest Snapshot.id within job.project
    snapshot_uuid = models.UUIDField()
    session_id = models.CharField(max_length=256, blank=True, default="")
    turn = models.IntegerField(default=0)
    label = models.CharField(max_length=300)
    operations = models.JSONField(default=list)
    is_baseline = models.BooleanField(default=False)
    target_key = models.CharField(max_length=128, blank=True, default="")  # the block acted on, if one
    samples = models.PositiveSmallIntegerField(default=1)
    prompt_tokens_est = models.IntegerField(default=0)
    # Its request equals the baseline's (e.g. moving a block without messages): not run.
    no_change = models.BooleanField(default=False)
    context = models.ForeignKey(
        ReplayContext, null=True, blank=True, on_delete=models.PROTECT, related_name="variants"
    )

    class Meta:
        ordering = ["job", "position"]
        constraints = [models.UniqueConstraint(fields=["job", "position"], name="uniq_variant_position")]

    def __str__(self) -> str:
        return self.label


class ReplayRun(models.Model):
    """One model call: (job, variant, sample). pending -> running -> done | failed | cancelled."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"
        CANCELLED = "cancelled", "cancelled"

    job = models.ForeignKey(ReplayJob, on_delete=models.CASCADE, related_name="runs")
    variant = models.ForeignKey(ReplayVariant, on_delete=models.CASCADE, related_name="runs")
    sample = models.PositiveSmallIntegerField(default=0)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    claim = models.UUIDField(null=True, blank=True)  # the worker allowed to call the model
    claimed_at = models.DateTimeField(null=True, blank=True)
    # Running: renewed while the model call is under way; once past, the worker is presumed dead
    # and replay.runs_reclaim re-queues the run. Pending: when its message, if a dead worker took
    # it before claiming the run, may be sent again (see replay_runs_reclaim).
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    model_calls = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True, default="")
    # A model's answer may hold U+0000 or broken UTF-16 that PostgreSQL refuses: stored escaped,
    # read back as the model sent it (core.pgtext).
    output_text = EscapedTextField(blank=True, default="")
    tool_calls = EscapedJSONField(default=list, blank=True)
    finish_reason = models.CharField(max_length=50, blank=True, default="")
    prompt_tokens = models.IntegerField(null=True, blank=True)
    completion_tokens = models.IntegerField(null=True, blank=True)
    latency_ms = models.FloatField(null=True, blank=True)  # the model's own time (HTTP round trip)
    work_ms = models.FloatField(null=True, blank=True)  # the whole unit: render, call, store
    embedding = models.JSONField(null=True, blank=True)
    # Exactly what was sent: the API path and JSON body (stored escaped like the answer), the
    # API mode used and, when it is not the turn's own, why.
    request_path = models.CharField(max_length=40, blank=True, default="")
    request_body = EscapedJSONField(null=True, blank=True)
    api_mode = models.CharField(max_length=20, blank=True, default="")
    mode_note = models.CharField(max_length=300, blank=True, default="")
    # sha256 of (endpoint, model, path, canonical body): a done run with the same key is the same
    # call, whose answer a baseline sample of a later job may reuse (reused_from) without a call.
    request_key = models.CharField(max_length=64, blank=True, default="")
    reused_from = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="reused_by"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job", "variant", "sample"]
        constraints = [
            models.UniqueConstraint(fields=["job", "variant", "sample"], name="uniq_run_unit"),
        ]
        indexes = [
            models.Index(fields=["job", "status"], name="replay_run_status_idx"),
            models.Index(
                fields=["lease_expires_at"],
                name="replay_run_lease_idx",
                condition=models.Q(status__in=["pending", "running"]),
            ),
            models.Index(
                fields=["request_key"],
                name="replay_run_reuse_idx",
                condition=models.Q(status="done", reused_from__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.status})"


class Triage(models.Model):
    """Auto-triage of one turn: attribution run in the background on a turn an alert fired on
    or whose output failed validation, on the project's default endpoint. One per turn.

    queued -> running -> done | failed | cancelled, or queued -> skipped (daily budget reached,
    no endpoint, nothing to attribute) | cancelled."""

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"
        SKIPPED = "skipped", "skipped"
        CANCELLED = "cancelled", "cancelled"

    class Trigger(models.TextChoices):
        ALERT = "alert", "an alert fired"
        VALIDATION = "validation", "validation failed"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="triages")
    snapshot_ref = models.BigIntegerField()  # ingest Snapshot.id within the project
    snapshot_uuid = models.UUIDField()
    session_id = models.CharField(max_length=256)
    turn = models.IntegerField()
    received_at = models.DateTimeField()  # the turn's, for retention
    trigger = models.CharField(max_length=16, choices=Trigger.choices)
    alert_ids = ArrayField(models.BigIntegerField(), default=list, blank=True)  # every alert on the turn
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    reason = models.CharField(max_length=500, blank=True, default="")
    job = models.ForeignKey(ReplayJob, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    job_kind = models.CharField(max_length=16, blank=True, default="")
    calls_reserved = models.IntegerField(default=0)  # counted against the project's daily budget
    # {"block", "kind", "score", "noise", "within_noise", "tied_with", "ranking": [{key, score}],
    #  "baseline_samples", "method"} once done.
    result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["project", "snapshot_ref"], name="uniq_triage_turn")]
        indexes = [models.Index(fields=["project", "-created_at"], name="replay_triage_recent_idx")]

    def __str__(self) -> str:
        return f"triage {self.pk} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in TRIAGE_FINISHED


TRIAGE_FINISHED = (
    Triage.Status.DONE,
    Triage.Status.FAILED,
    Triage.Status.SKIPPED,
    Triage.Status.CANCELLED,
)


class TriageBudget(models.Model):
    """The model calls triage reserved for a project on one UTC day (its daily budget's use)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    calls = models.IntegerField(default=0)

    class Meta:
        ordering = ["project", "-day"]
        constraints = [models.UniqueConstraint(fields=["project", "day"], name="uniq_triage_budget_day")]

    def __str__(self) -> str:
        return f"triage budget {self.project_id} {self.day}: {self.calls}"
