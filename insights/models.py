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


from insights.cache_models import TurnCache  # noqa: E402 - the prompt-cache lens's table

__all__ = ["PendingAnalysis", "TurnCache"]
