"""The prompt-cache lens's table: one row per analysed turn (see insights.cache_analysis)."""

from __future__ import annotations

from django.db import models


class TurnCache(models.Model):
    """What one turn shares with the previous turn of its session as a prompt prefix, what
    broke it, the cache reads the provider's rules expect against those it reported, and the
    turn's cost at the project's prices when the model is priced."""

    project = models.ForeignKey(
        "core.Project", on_delete=models.CASCADE, db_index=False, db_constraint=False, related_name="+"
    )
    snapshot_ref = models.BigIntegerField()  # ingest Snapshot.id within the project
    session_ref = models.BigIntegerField()
    turn = models.IntegerField()
    received_at = models.DateTimeField()  # the snapshot's: retention removes the row with the turn
    ts = models.DateTimeField()
    model_name = models.CharField(max_length=256)
    provider = models.CharField(max_length=16)
    assembly_version = models.CharField(max_length=128, blank=True, default="")
    prev_turn = models.IntegerField(null=True, blank=True)
    gap_seconds = models.FloatField(null=True, blank=True)
    prompt_tokens = models.IntegerField()
    completion_tokens = models.IntegerField(default=0)
    n_blocks = models.IntegerField()
    prefix_blocks = models.IntegerField()
    prefix_tokens = models.IntegerField()
    reason = models.CharField(max_length=32)
    detail = models.TextField(blank=True, default="")
    break_position = models.IntegerField(null=True, blank=True)
    break_key = models.CharField(max_length=128, blank=True, default="")
    break_kind = models.CharField(max_length=20, blank=True, default="")
    expected_cached = models.IntegerField()
    expected_written = models.IntegerField(default=0)
    potential_cached = models.IntegerField()  # had the whole previous prompt been kept, in time
    reported_cached = models.IntegerField(null=True, blank=True)
    note = models.CharField(max_length=200, blank=True, default="")
    # Dollars at the project's prices when analysed; null when the model has no price.
    cost_no_cache = models.FloatField(null=True, blank=True)
    cost_expected = models.FloatField(null=True, blank=True)
    cost_actual = models.FloatField(null=True, blank=True)
    cost_lost = models.FloatField(null=True, blank=True)

    class Meta:
        db_table = "insights_turncache"
        constraints = [
            models.UniqueConstraint(fields=["project", "snapshot_ref"], name="insights_turncache_uniq"),
        ]
        indexes = [
            models.Index(fields=["project", "session_ref", "turn"], name="insights_turncache_turn_idx"),
            models.Index(fields=["project", "received_at"], name="insights_turncache_recv_idx"),
            models.Index(
                fields=["project", "assembly_version", "received_at"], name="insights_turncache_ver_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"cache of snapshot {self.snapshot_ref}"

    @property
    def cached(self) -> int:
        """The cache reads the turn had: reported by the provider, else expected."""
        return self.reported_cached if self.reported_cached is not None else self.expected_cached


class CacheDay(models.Model):
    """The sums of one UTC day of a project's `TurnCache` rows (by the turn's arrival), kept by
    the analyzer as it writes them, so that the overview reads one row per day shown rather than
    one per turn."""

    project = models.ForeignKey(
        "core.Project", on_delete=models.CASCADE, db_index=False, db_constraint=False, related_name="+"
    )
    day = models.DateField()
    turns = models.BigIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    cached_tokens = models.BigIntegerField(default=0)  # reported where reported, else expected
    expected_cached = models.BigIntegerField(default=0)
    reported_turns = models.BigIntegerField(default=0)
    breaks = models.BigIntegerField(default=0)
    cost_no_cache = models.FloatField(default=0.0)
    cost_expected = models.FloatField(default=0.0)
    cost_actual = models.FloatField(default=0.0)
    cost_lost = models.FloatField(default=0.0)
    priced_turns = models.BigIntegerField(default=0)

    class Meta:
        db_table = "insights_cacheday"
        constraints = [models.UniqueConstraint(fields=["project", "day"], name="insights_cacheday_uniq")]

    def __str__(self) -> str:
        return f"cache sums of {self.day}"


class CacheBreakDay(models.Model):
    """How many of one UTC day's turns broke the cache at one block for one reason."""

    project = models.ForeignKey(
        "core.Project", on_delete=models.CASCADE, db_index=False, db_constraint=False, related_name="+"
    )
    day = models.DateField()
    break_key = models.CharField(max_length=128)
    reason = models.CharField(max_length=32)
    break_kind = models.CharField(max_length=20, blank=True, default="")
    turns = models.BigIntegerField(default=0)

    class Meta:
        db_table = "insights_cachebreakday"
        constraints = [
            models.UniqueConstraint(
                fields=["project", "day", "break_key", "reason"], name="insights_cachebreakday_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"cache breaks at {self.break_key} on {self.day}"
