"""What crosses ingest's boundary: the shapes ingest.selectors and ingest.dashboard return.

Rows that pages and the read API render key by key are TypedDicts (they stay plain dicts, so
templates, JSON encoding and `pgtext.shown` treat them as before); a stored snapshot handed to
another app is a frozen dataclass. Message contents are kept exactly as sent, so they stay
`dict[str, Any]`: their shape is the agent's, not ours.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Annotated, Any, NotRequired, TypedDict, cast

import typing_extensions
from pydantic import WithJsonSchema

from core import pgtext
from ctxobs.wire import FieldError
from ingest.tools_view import ToolCallView

Message = dict[str, Any]  # one chat message exactly as the agent sent it


# --- a stored snapshot ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)


class SnapshotRef:
    """A stored snapshot as other apps see it: its ids, place in its session, and what a replay
    needs of it besides its blocks (the saved parameters and answer)."""

    ref: int  # Snapshot.id within the project
    snapshot_id: uuid.UUID
    session_id: str
    turn: int
    params: dict[str, Any]
    output: dict[str, Any] | None

    def output_shown(self) -> dict[str, Any]:
        """The saved answer for a page: a NUL or an unpaired surrogate shown visibly ({} when
        none was saved)."""
        return cast(dict[str, Any], pgtext.shown(self.output or {}))


class StoredBlock(TypedDict):
    """One block of a stored snapshot, in prompt order, with its messages exactly as sent."""

    snapshot_ref: int
    position: int
    key: str
    kind: str
    content_hash: str
    tokens: int
    estimated: bool
    pinned: bool
    compressed: bool
    refs: list[str]
    messages: list[Message]
    chars: int


class ShownBlock(StoredBlock):
    """A block as the turn page shows it: cut messages and its share of the prompt and window."""

    shown: list[ShownMessage]
    cut: bool
    n_messages: int
    share: float
    window_share: float


class ShownMessage(TypedDict):
    role: str
    name: str
    tool_call_id: str
    text: str
    tool_calls: str
    calls: list[ToolCallView]  # the same calls, readable (ingest.tools_view)


# --- the events of a turn -------------------------------------------------------------------
# As stored: the validated wire events (ctxobs.wire.CompressionEvent, RecallItem, ValidationOutcome)
# field for field, with enums read back as text. tests/ingest/test_wire_rows.py holds these, the
# wire types and the store's COPY rows to the same fields.
class CompressionEventRow(TypedDict):
    strategy: str
    block: str
    tokens_before: int | None
    tokens_after: int | None
    watermark: float | None
    items: list[Any]
    ref: str
    source: str  # client, sdk or provider
    opaque: bool


class RecallItemRow(TypedDict):
    memory_id: str
    channel: str
    score: float | None
    rank: int | None
    injected: bool
    stale: bool
    conflicting: bool
    block: str
    preview: str


class ValidationOutcomeRow(TypedDict):
    layer: str
    check: str
    passed: bool
    code: str
    message: str
    attempt: int


class SnapshotEvents(TypedDict):
    """Compression events, recall items and validation outcomes of one turn, in order."""

    compression: list[CompressionEventRow]
    recall: list[RecallItemRow]
    validation: list[ValidationOutcomeRow]


# --- a change between turns -----------------------------------------------------------------
class BlockMoved(TypedDict):
    """A block that entered or left the prompt."""

    key: str
    kind: str
    tokens: int


class BlockResized(TypedDict):
    """A block present in both turns whose content differs (grew, shrank or changed)."""

    key: str
    kind: str
    before: int
    after: int


class BlockChange(TypedDict):
    """What changed from one turn's blocks to the next's (stored as Snapshot.change)."""

    prev_turn: int | None
    entered: list[BlockMoved]
    left: list[BlockMoved]
    grew: list[BlockResized]
    shrank: list[BlockResized]
    changed: list[BlockResized]
    unchanged: int
    delta_tokens: int


class BlockDiff(TypedDict):
    """The word diff of one block present in both compared turns."""

    key: str
    kind: str
    before: int
    after: int
    delta: int
    segments: list[tuple[str, str]]  # (op, text), see the word diff
    inserted: int
    deleted: int


class TurnComparison(BlockChange):
    """A BlockChange between any two turns of a session, with the word diff of each changed block."""

    diffs: list[BlockDiff]
    other_turn: int
    is_previous: bool


# --- one snapshot in full (the read API) ---------------------------------------------------
class SnapshotModel(TypedDict):
    name: str
    context_window: int
    reserve_tokens: int
    encoding: str
    counts: str  # exact | estimated


class SnapshotBlock(TypedDict):
    """A block in the wire form, with its content hash and share of the prompt and usable window."""

    key: str
    kind: str
    messages: list[Message]
    tokens: int
    estimated: bool
    pinned: bool
    compressed: bool
    refs: list[str]
    hash: str
    chars: int
    share: float
    window_share: float


class SnapshotDerived(TypedDict):
    total_tokens: int
    usable_tokens: int
    watermark: float
    tier: str
    kind_tokens: dict[str, int]
    count_drift: float | None
    # The drift against the model's usual ratio (core.registry.CountDrift's fields), where an app
    # calibrates counts and has analysed the turn; else None.
    count_calibration: dict[str, Any] | None
    prompt_tokens_reported: int | None
    prev_turn: int | None
    change: BlockChange | dict[str, Any]  # {} until the turn-to-turn change is derived
    received_at: datetime


class SnapshotDetail(TypedDict):
    """One snapshot in its wire form plus everything derived at ingest (ingest.schemas.SnapshotOut)."""

    snapshot_id: str
    session_id: str
    turn: int
    agent: str
    ts: datetime
    model: SnapshotModel
    params: dict[str, Any]
    blocks: list[SnapshotBlock]
    compression: list[CompressionEventRow]
    recall: list[RecallItemRow]
    validation: list[ValidationOutcomeRow]
    output: dict[str, Any] | None
    tags: dict[str, Any]
    retries: int
    fallback_used: bool
    derived: SnapshotDerived


# --- turns of a session ---------------------------------------------------------------------
class TimelineRow(TypedDict):
    """One turn of a session as other apps select turns by it (ingest.selectors.session_timeline)."""

    id: int
    snapshot_id: uuid.UUID
    turn: int
    ts: datetime
    total_tokens: int
    watermark: float
    tier: str
    kind_tokens: dict[str, int]
    n_compression: int
    n_recall: int
    n_recall_injected: int
    n_validation_failed: int
    count_drift: float | None
    prev_turn: int | None
    context_window: int
    reserve_tokens: int
    model_name: str
    latency_ms: float | None
    counts_estimated: bool
    prompt_tokens_reported: int | None


# One turn in the read API's form, `ts` already as JSON text: what ingest.selectors returns and the
# items of the timeline document (ingest.schemas.TimelineOut), whose OpenAPI schema pydantic builds
# from this class (from a typing_extensions TypedDict only, on Python 3.11). No docstring: pydantic
# would publish it as the schema's description.
class TimelineTurn(typing_extensions.TypedDict):
    turn: int
    snapshot_id: str
    ts: Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
    total_tokens: int
    watermark: float
    tier: str
    kind_tokens: dict[str, int]
    compression_events: int
    recall_items: int
    recall_injected: int
    failed_validations: int
    count_drift: float | None
    prev_turn: int | None


class TurnChartRow(TypedDict):
    """What the timeline chart needs of one turn."""

    turn: int
    watermark: float
    kind_tokens: dict[str, int]
    n_compression: int
    n_validation_failed: int
    n_provider_edits: NotRequired[int]  # compression events the model provider made


class TurnSegment(TypedDict):
    cls: str
    width: str


class TurnTableRow(TypedDict):
    """One row of the turns table; the page adds the bar segments, alert count and drift flag."""

    id: int
    snapshot_id: uuid.UUID
    turn: int
    ts: datetime
    total_tokens: int
    watermark: float
    tier: str
    kind_tokens: dict[str, int]
    n_compression: int
    n_recall: int
    n_recall_injected: int
    n_validation: int
    n_validation_failed: int
    count_drift: float | None
    context_window: int
    reserve_tokens: int
    latency_ms: float | None
    prompt_tokens_reported: int | None
    segments: NotRequired[list[TurnSegment]]
    segments_title: NotRequired[str]
    alerts: NotRequired[int]
    drift_flag: NotRequired[bool]
    drift_shown: NotRequired[float | None]
    drift_title: NotRequired[str]


class TurnsPage(TypedDict):
    rows: list[TurnTableRow]
    page: int
    pages: int
    per_page: int
    total: int
    has_prev: bool
    has_next: bool


class AlertMarker(TypedDict):
    """An alert on a turn of a session, as the timeline and turn pages mark it."""

    turn: int
    rule_kind: str
    severity: str
    title: str
    alert_id: int
    state: str
    source: NotRequired[str]  # "alert", or what else put the marker there ("lint": a lint finding)


# --- the project overview -------------------------------------------------------------------
class OverviewTotals(TypedDict):
    turns: int
    recalled: int
    injected: int
    validated: int
    failed: int
    compressions: int
    max_watermark: float
    sessions: int
    hot_sessions: int
    alerted_sessions: int


class ProjectOverview(TypedDict):
    """A project's aggregates per day from a given day on, for the overview page."""

    since: date | None  # the period's first day; None: all time
    as_of: datetime | None  # when the rollup was last brought up to date
    behind: bool  # turns arrived since then that the beat task has yet to count
    days: list[datetime]
    sessions: list[int]
    turns: list[int]
    recalled: list[int]
    injected: list[int]
    totals: OverviewTotals
    wm_buckets: list[tuple[float, int]]  # (watermark from, turns)
    bands: list[tuple[float, int, int]]  # (watermark band from, validated turns, failed turns)
    tiers: list[tuple[str, float, int]]  # (tier, hours spent in it, turns)
    compression: list[tuple[datetime, str, int]]  # (day, strategy, events)


# --- ingest results -------------------------------------------------------------------------
class BatchItemResult(TypedDict):
    """The fate of one item of an ingest batch."""

    index: int
    snapshot_id: str | None
    status: str  # created | duplicate | rejected
    errors: NotRequired[list[FieldError]]


class BatchReport(TypedDict):
    """The response body of an ingest batch."""

    results: list[BatchItemResult]
    created: int
    duplicate: int
    rejected: int


__all__ = [
    "AlertMarker",
    "BatchItemResult",
    "BatchReport",
    "BlockChange",
    "BlockDiff",
    "BlockMoved",
    "BlockResized",
    "CacheTurn",
    "CompressionEventRow",
    "CountInput",
    "Message",
    "OverviewTotals",
    "ProjectOverview",
    "RecallItemRow",
    "ShownBlock",
    "ShownMessage",
    "SnapshotBlock",
    "SnapshotDerived",
    "SnapshotDetail",
    "SnapshotEvents",
    "SnapshotModel",
    "SnapshotRef",
    "StoredBlock",
    "TimelineRow",
    "TimelineTurn",
    "TurnChartRow",
    "TurnComparison",
    "TurnSegment",
    "TurnTableRow",
    "TurnsPage",
    "ValidationOutcomeRow",
]


# --- for other apps: per-turn evaluation (alerts) ------------------------------
@dataclass(frozen=True, slots=True)


class TurnRow:
    """One stored snapshot as a per-turn evaluation reads it: its place in the session, its
    derived measures and, when asked for, its blocks as parallel sequences in prompt order.
    The field order is the column order of `ingest.selectors.TURN_ROW_COLUMNS`."""

    ref: int
    session_ref: int
    turn: int
    ts: datetime
    snapshot_id: uuid.UUID
    watermark: float
    tier: str
    context_window: int
    reserve_tokens: int
    total_tokens: int
    n_compression: int
    n_validation: int
    n_validation_failed: int
    n_recall: int
    n_recall_injected: int
    count_drift: float | None
    agent: str
    model_name: str
    session_id: str
    received_at: datetime
    block_keys: Sequence[str] = ()
    block_kinds: Sequence[str] = ()
    block_tokens: Sequence[int] = ()


class BlockOutline(TypedDict):
    """A stored block without its messages: what it is and how big, at its prompt position.
    A projection of the snapshot's stored block (see `Snapshot.blocks`)."""

    position: int
    key: str
    kind: str
    tokens: int


@dataclass(frozen=True, slots=True)
class SnapshotOutline:
    """The blocks of one snapshot in prompt order, and its change since the previous turn."""

    blocks: list[BlockOutline]
    change: BlockChange


class TurnContent(TypedDict):
    """One stored snapshot with what a content analysis reads of it: its place in the session,
    its size, its blocks with their messages, its compression events and recall list, its output,
    and the ref of the session's turn before it (None for the first)."""

    ref: int
    session_ref: int
    session_id: str
    turn: int
    received_at: datetime
    total_tokens: int
    context_window: int
    reserve_tokens: int
    output: dict[str, Any] | None
    blocks: list[StoredBlock]
    message_counts: list[int]  # per block, also when its messages were not read
    compression: list[CompressionEventRow]
    recall: list[RecallItemRow]
    prev_ref: int | None


# --- for other apps: token-count calibration (insights.counts) -------------------
@dataclass(frozen=True, slots=True)


class CountInput:
    """What the count calibration needs of one snapshot: its prompt tokens as ingest counted
    them (blocks + reply priming), the provider's reported prompt tokens and the params as sent
    (their `tools`)."""

    ref: int
    received_at: datetime
    model_name: str
    counted: int
    reported: int | None
    counts_estimated: bool
    encoding: str
    tools: Any


@dataclass(frozen=True, slots=True)


class CacheTurn:
    """What the prompt-cache lens reads of one stored snapshot: its place in the session, the
    request parameters and tags, the model's reported usage and its blocks as parallel
    sequences in prompt order (see `ingest.selectors.cache_turn_pairs`)."""

    ref: int
    session_ref: int
    turn: int
    ts: datetime
    received_at: datetime
    model_name: str
    params: dict[str, Any]
    tags: dict[str, Any]
    total_tokens: int
    prompt_tokens_reported: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    block_keys: Sequence[str]
    block_kinds: Sequence[str]
    block_hashes: Sequence[str]
    block_tokens: Sequence[int]
    cache_write_tokens: int | None = None  # the provider's reported prompt-cache writes
