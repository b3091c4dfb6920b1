"""Typed values that cross from the ingest app to other apps (through its selectors/services)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict
from uuid import UUID


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
    snapshot_id: UUID
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


class ChangeEntered(TypedDict):
    key: str
    kind: str
    tokens: int


class ChangeResized(TypedDict):
    key: str
    kind: str
    before: int
    after: int


class BlockChange(TypedDict, total=False):
    """The turn-to-turn change of a snapshot's blocks (`ingest.derive.block_change`); keys are
    numbered `key#n` for the n-th repeat of a key. Empty before it is derived."""

    prev_turn: int | None
    entered: list[ChangeEntered]
    left: list[ChangeEntered]
    grew: list[ChangeResized]
    shrank: list[ChangeResized]
    changed: list[ChangeResized]
    unchanged: int
    delta_tokens: int


@dataclass(frozen=True, slots=True)
class SnapshotOutline:
    """The blocks of one snapshot in prompt order, and its change since the previous turn."""

    blocks: list[BlockOutline]
    change: BlockChange
