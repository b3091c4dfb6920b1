"""Ninja schemas of the ingest and read API (fields listed explicitly)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Schema

from ctxobs.schema import batch_json_schema
from ctxobs.wire import LIMITS
from ingest.types import TimelineTurn

# The body of POST /snapshots, generated from the wire contract. The handler reads and checks the
# body itself (gzip, byte limits, item by item verdicts), so ninja publishes this schema as given.
SNAPSHOTS_BATCH_SCHEMA = batch_json_schema(LIMITS.max_items_per_batch)


class FieldError(Schema):
    """ctxobs.wire.FieldError in the answer of an ingest request."""

    loc: list[str | int]
    msg: str
    hint: str


class ItemResult(Schema):
    index: int
    snapshot_id: str | None = None
    status: str  # created | duplicate | rejected
    errors: list[FieldError] | None = None


class BatchOut(Schema):
    results: list[ItemResult]
    created: int
    duplicate: int
    rejected: int


class SessionOut(Schema):
    session_id: str
    agent: str
    model: str
    turn_count: int
    max_turn: int
    first_seen: datetime
    last_seen: datetime
    max_watermark: float
    max_tier: str
    failed_validations: int
    compression_events: int
    alert_count: int


class SessionPage(Schema):
    count: int
    limit: int
    offset: int
    items: list[SessionOut]


class TimelineOut(Schema):
    session: SessionOut
    context_window: int | None
    usable_tokens: int | None
    thresholds: dict[str, float]
    turns: list[TimelineTurn]


class SnapshotOut(Schema):
    snapshot_id: str
    session_id: str
    turn: int
    agent: str
    ts: datetime
    model: dict[str, Any]
    params: dict[str, Any]
    blocks: list[dict[str, Any]]
    compression: list[dict[str, Any]]
    recall: list[dict[str, Any]]
    validation: list[dict[str, Any]]
    output: dict[str, Any] | None
    tags: dict[str, str]
    retries: int
    fallback_used: bool
    derived: dict[str, Any]
