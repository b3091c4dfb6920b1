"""Ingest storage.

Hot tables (sessions, snapshots, block contents, message contents, compression events,
recall items, validation outcomes) have composite primary keys led by `project_id`, the
distribution column if the store is ever sharded by project. They reference each other by
(project_id, id) pairs rather than ForeignKeys, which Django cannot point at composite keys.

Snapshots and their child rows (compression, recall, validation) live in tables range-partitioned
by `received_at`, one partition per day (migration 0008, ingest.partitions): their real primary
keys end with `received_at`, which the keys declared here leave out (the ORM reads and writes them
by those). Retention drops whole days (ingest.retention).
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.contrib.postgres.fields import ArrayField
from django.db import models

from core.models import EscapedJSONField, EscapedTextField
from ctxobs.wire import TIERS

TIER_CHOICES = [(t, t) for t in TIERS]
# Before any turn was received: where the per-session lookups of a session stored before
# `AgentSession.first_received` existed start.
RECEIVED_EVER = datetime(1970, 1, 1, tzinfo=UTC)


def next_id(sequence: str) -> models.Func:
    """DB-side id default for composite-key tables (AutoField must be a lone primary key)."""
    return models.Func(function="nextval", template=f"nextval('{sequence}'::regclass)",
                       output_field=models.BigIntegerField())


class AgentSession(models.Model):
    """One agent conversation (`session_id`), with aggregates kept current at ingest."""

    pk = models.CompositePrimaryKey("project_id", "id")
    project = models.ForeignKey("core.Project", on_delete=models.CASCADE, db_index=False)
    id = models.BigIntegerField(db_default=next_id("ingest_session_id_seq"))
    session_id = models.CharField(max_length=256)
    agent = models.CharField(max_length=256, default="", blank=True)
    model = models.CharField(max_length=256, default="", blank=True)
    turn_count = models.IntegerField(default=0)
    max_turn = models.IntegerField(default=0)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    max_watermark = models.FloatField(default=0.0)
    max_tier = models.CharField(max_length=10, choices=TIER_CHOICES, default="ok")
    failed_validations = models.IntegerField(default=0)
    compression_events = models.IntegerField(default=0)
    alert_count = models.IntegerField(default=0)
    # When ingest stored the session's first turn (the server's clock, not the agent's): no turn of
    # the session lies in a day partition before it, so ingest's per-session lookups (duplicates,
    # the previous turn) visit only the partitions from there on. NULL for sessions stored before
    # the column existed: their lookups visit every partition.
    first_received = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "ingest_session"
        constraints = [
            models.UniqueConstraint(fields=["project", "session_id"], name="uniq_session_per_project"),
        ]
        indexes = [
            models.Index(fields=["project", "-last_seen"], name="session_recent_idx"),
            # The overview counts a period's sessions (hot, alerted) from this index alone.
            models.Index(fields=["project", "last_seen"], include=["max_tier", "alert_count"],
                         name="session_seen_cover_idx"),
            models.Index(fields=["project", "agent", "-last_seen"], name="session_agent_idx"),
            models.Index(fields=["project", "-max_watermark"], name="session_watermark_idx"),
        ]

    def __str__(self) -> str:
        return self.session_id

    @property
    def received_since(self) -> datetime:
        """No turn of the session was received before this: a query of its turns that also says
        `received_at >= received_since` visits only the day partitions from its first turn on."""
        return self.first_received or RECEIVED_EVER


class Snapshot(models.Model):
    """One model call as the agent assembled it. The payload fields are write-once;
    `change`/`prev_turn` are derived and recomputed when an earlier turn arrives late."""

    pk = models.CompositePrimaryKey("project_id", "id")
    # No database-level constraint: a deferred per-row check and share lock on the project row at
    # every commit cost ingest more than the rest of the row. Ingest writes only the authenticated
    # key's project, and deleting a project cascades in Django.
    project = models.ForeignKey("core.Project", on_delete=models.CASCADE, db_index=False, db_constraint=False)
    id = models.BigIntegerField(db_default=next_id("ingest_snapshot_id_seq"))
    snapshot_id = models.UUIDField()
    session_ref = models.BigIntegerField()  # AgentSession.id within the same project
    session_id = models.CharField(max_length=256)
    turn = models.IntegerField()
    agent = models.CharField(max_length=256, default="", blank=True)
    ts = models.DateTimeField()
    received_at = models.DateTimeField()
    model_name = models.CharField(max_length=256)
    context_window = models.IntegerField()
    reserve_tokens = models.IntegerField()
    encoding = models.CharField(max_length=64, default="", blank=True)
    counts_estimated = models.BooleanField(default=False)
    params = EscapedJSONField(default=dict)
    tags = EscapedJSONField(default=dict)
    total_tokens = models.IntegerField()
    watermark = models.FloatField()
    tier = models.CharField(max_length=10, choices=TIER_CHOICES)
    kind_tokens = models.JSONField(default=dict)  # {kind: tokens}, for the timeline
    n_blocks = models.IntegerField(default=0)
    n_compression = models.IntegerField(default=0)
    n_recall = models.IntegerField(default=0)
    n_recall_injected = models.IntegerField(default=0)
    n_validation = models.IntegerField(default=0)
    n_validation_failed = models.IntegerField(default=0)
    retries = models.IntegerField(default=0)
    fallback_used = models.BooleanField(default=False)
    output = EscapedJSONField(null=True, blank=True)
    prompt_tokens_reported = models.IntegerField(null=True, blank=True)
    completion_tokens = models.IntegerField(null=True, blank=True)
    cached_tokens = models.IntegerField(null=True, blank=True)
    latency_ms = models.FloatField(null=True, blank=True)
    # (our prompt count - provider's prompt count) / provider's; None when unreported.
    count_drift = models.FloatField(null=True, blank=True)
    prev_turn = models.IntegerField(null=True, blank=True)
    change = models.JSONField(default=dict)
    # The blocks in prompt order, as parallel arrays on the snapshot row: one row per snapshot
    # instead of one per block makes ingest and turn-to-turn reads several times cheaper.
    # ingest.selectors.snapshots_blocks turns them back into one block each.
    block_keys = ArrayField(models.CharField(max_length=128), default=list)
    block_kinds = ArrayField(models.CharField(max_length=20), default=list)
    block_hashes = ArrayField(models.CharField(max_length=32), default=list)  # BlockContent.hash
    block_tokens = ArrayField(models.IntegerField(), default=list)
    block_flags = ArrayField(models.SmallIntegerField(), default=list)  # BLOCK_ESTIMATED | BLOCK_PINNED | …
    block_refs = EscapedJSONField(null=True, blank=True)  # refs per block; null when no block has any

    class Meta:
        # snapshot_id is unique per project within each day partition (ingest.partitions).
        indexes = [
            models.Index(fields=["project", "session_ref", "turn"], name="snapshot_session_turn_idx"),
            models.Index(fields=["project", "ts"], name="snapshot_ts_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id} turn {self.turn}"


BLOCK_ESTIMATED, BLOCK_PINNED, BLOCK_COMPRESSED = 1, 2, 4


class BlockContent(models.Model):
    """A block's content, stored once per project under its content hash: the sequence of
    its messages' hashes (see ctxobs.hashing.block_hashes)."""

    pk = models.CompositePrimaryKey("project_id", "hash")
    project = models.ForeignKey("core.Project", on_delete=models.CASCADE, db_index=False, db_constraint=False)
    hash = models.CharField(max_length=32)
    message_hashes = ArrayField(models.CharField(max_length=32))
    chars = models.IntegerField()
    tokens = models.IntegerField(null=True)
    encoding = models.CharField(max_length=64, default="", blank=True)
    created_at = models.DateTimeField()
    last_seen = models.DateField()  # the last UTC day a stored turn referred to it

    def __str__(self) -> str:
        return f"block {self.hash}"


class MessageContent(models.Model):
    """One message exactly as sent, stored once per project under its content hash."""

    pk = models.CompositePrimaryKey("project_id", "hash")
    project = models.ForeignKey("core.Project", on_delete=models.CASCADE, db_index=False, db_constraint=False)
    hash = models.CharField(max_length=32)
    message = EscapedJSONField()
    last_seen = models.DateField()  # never before the last_seen of a block that holds it

    def __str__(self) -> str:
        return f"message {self.hash}"


class CompressionEvent(models.Model):
    pk = models.CompositePrimaryKey("project_id", "snapshot_ref", "position")
    project = models.ForeignKey("core.Project", on_delete=models.CASCADE, db_index=False, db_constraint=False)
    snapshot_ref = models.BigIntegerField()
    position = models.SmallIntegerField()
    received_at = models.DateTimeField()  # the snapshot's: the partition key
    ts = models.DateTimeField()
    strategy = models.CharField(max_length=64)
    block = models.CharField(max_length=128, default="", blank=True)
    tokens_before = models.IntegerField(null=True)
    tokens_after = models.IntegerField(null=True)
    watermark = models.FloatField(null=True)
    items = EscapedJSONField(default=list)
    ref = EscapedTextField(default="", blank=True)
    source = models.CharField(max_length=16, default="client")  # client, sdk or provider
    opaque = models.BooleanField(default=False)  # encrypted content, measured by size only

    class Meta:
        indexes = [models.Index(fields=["project", "ts"], name="compression_ts_idx")]

    def __str__(self) -> str:
        return f"compression {self.snapshot_ref}/{self.position}"


class RecallItem(models.Model):
    pk = models.CompositePrimaryKey("project_id", "snapshot_ref", "position")
    project = models.ForeignKey("core.Project", on_delete=models.CASCADE, db_index=False, db_constraint=False)
    snapshot_ref = models.BigIntegerField()
    position = models.SmallIntegerField()
    received_at = models.DateTimeField()  # the snapshot's: the partition key
    memory_id = models.CharField(max_length=256)
    channel = models.CharField(max_length=20)
    score = models.FloatField(null=True)
    rank = models.IntegerField(null=True)
    injected = models.BooleanField(default=False)
    stale = models.BooleanField(default=False)
    conflicting = models.BooleanField(default=False)
    block = models.CharField(max_length=128, default="", blank=True)
    preview = EscapedTextField(default="", blank=True)

    def __str__(self) -> str:
        return f"recall {self.snapshot_ref}/{self.position}"


class ValidationOutcome(models.Model):
    pk = models.CompositePrimaryKey("project_id", "snapshot_ref", "position")
    project = models.ForeignKey("core.Project", on_delete=models.CASCADE, db_index=False, db_constraint=False)
    snapshot_ref = models.BigIntegerField()
    position = models.SmallIntegerField()
    received_at = models.DateTimeField()  # the snapshot's: the partition key
    layer = models.CharField(max_length=20)
    check_name = models.CharField(max_length=128, default="", blank=True, db_column="check")
    passed = models.BooleanField()
    code = models.CharField(max_length=128, default="", blank=True)
    message = EscapedTextField(default="", blank=True)
    attempt = models.IntegerField(default=1)

    def __str__(self) -> str:
        return f"validation {self.snapshot_ref}/{self.position}"
