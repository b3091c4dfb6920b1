"""The insights app's own bookkeeping; each analyzer keeps its figures in its own tables."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models

from core.debts import PendingWork


class PendingAnalysis(PendingWork):
    """The analysis owed to one ingest batch's new snapshots (core.debts): deleted once every
    analyzer has run."""

    class Meta(PendingWork.Meta):
        indexes = [models.Index(fields=["due_at"], name="insights_pending_due_idx")]


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


# --- token counts (insights.counts) ----------------------------------------------------------
class TurnCount(models.Model):
    """How one turn's prompt tokens compare with what its provider reported: our count (with the
    model family's own tokenizer when one is configured, else ingest's), the provider's count,
    their ratio, the model's usual ratio when the turn was analysed and the drift against it."""

    # Deleted with the project (in Django, like ingest's snapshots); no database-level constraint.
    project = models.ForeignKey("core.Project", on_delete=models.CASCADE, db_index=False, db_constraint=False,
                                related_name="+")
    snapshot_ref = models.BigIntegerField()
    received_at = models.DateTimeField()
    model_name = models.CharField(max_length=256)
    # Ingest's count of the whole prompt (blocks + reply priming), tiktoken or its estimate.
    counted = models.IntegerField()
    # The same prompt counted with the model family's tokenizer and template; null without one.
    native = models.IntegerField(null=True, blank=True)
    tokenizer = models.CharField(max_length=300, default="", blank=True)
    reported = models.IntegerField()
    ratio = models.FloatField()  # reported / (native or counted)
    usual_ratio = models.FloatField(null=True, blank=True)  # median of the model's earlier turns
    usual_n = models.IntegerField(default=0)
    drift = models.FloatField()  # (expected - reported) / reported, expected = ours * usual ratio
    flagged = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "snapshot_ref"], name="insights_turncount_uniq"),
        ]
        indexes = [
            models.Index(fields=["project", "model_name", "received_at"],
                         name="insights_turncount_model_idx"),
            models.Index(fields=["project", "received_at"], name="insights_turncount_time_idx"),
        ]

    def __str__(self) -> str:
        return f"counts of snapshot {self.snapshot_ref}"


class ModelCountRatio(models.Model):
    """A model's usual ratio of reported to counted prompt tokens in a project: the median over
    its last turns with reported usage, updated by the counts analyzer."""

    project = models.ForeignKey("core.Project", on_delete=models.CASCADE, db_index=False, db_constraint=False,
                                related_name="+")
    model_name = models.CharField(max_length=256)
    ratio = models.FloatField()
    n = models.IntegerField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "model_name"], name="insights_modelratio_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.model_name}: {self.ratio:.3f}"
from insights.cache_models import (  # noqa: E402 - the prompt-cache lens's tables
    CacheBreakDay,
    CacheDay,
    TurnCache,
)

__all__ = ["CacheBreakDay", "CacheDay", "PendingAnalysis", "TurnCache"]
