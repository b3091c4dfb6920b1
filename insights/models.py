"""The insights app's own bookkeeping; each analyzer keeps its figures in its own tables."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models


class PendingAnalysis(models.Model):
    """The analysis owed to one ingest batch's new snapshots. Written in the batch's own
    transaction and deleted once every analyzer has run, so that a broker outage or a lost task
    cannot lose it: the sweeper queues whatever is still here after `due_at`."""

    project = models.ForeignKey("core.Project", on_delete=models.CASCADE, related_name="+")
    snapshot_refs = ArrayField(models.BigIntegerField())
    created_at = models.DateTimeField()
    due_at = models.DateTimeField()
    sweeps = models.IntegerField(default=0)

    class Meta:
        ordering = ["due_at", "id"]
        indexes = [models.Index(fields=["due_at"], name="insights_pending_due_idx")]

    def __str__(self) -> str:
        return f"pending analysis #{self.pk} ({len(self.snapshot_refs)} snapshots)"


# --- contamination lint -------------------------------------------------------------------------
class Finding(models.Model):
    """A contamination-lint finding on one stored turn: which check, the blocks involved and the
    text that shows it (see insights.lint). One per turn and check; written after ingest by the
    lint analyzer, removed by retention with the turn (`received_at`)."""

    project = models.ForeignKey("core.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    snapshot_ref = models.BigIntegerField()
    session_ref = models.BigIntegerField()
    turn = models.IntegerField()
    received_at = models.DateTimeField()
    check_name = models.CharField(max_length=40, db_column="check")
    severity = models.CharField(max_length=10)
    block_keys = ArrayField(models.CharField(max_length=128), default=list)
    evidence = models.TextField(default="", blank=True)
    details = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "snapshot_ref", "check_name"], name="insights_finding_uniq"),
        ]
        indexes = [
            models.Index(fields=["project", "session_ref", "turn"], name="insights_finding_session_idx"),
            models.Index(fields=["project", "check_name", "session_ref"], name="insights_finding_check_idx"),
            models.Index(fields=["project", "received_at"], name="insights_finding_time_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.check_name} on turn {self.turn}"
