"""Ninja schemas of the replay API."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from ninja import Schema
from pydantic import ConfigDict, Field, model_validator

from config.params import FiniteFloat, Id


class Operation(Schema):
    op: Literal["remove", "move", "truncate", "replace", "keep_only"]
    key: str | None = None
    to: Literal["front", "end", "middle", "before", "after"] | None = None
    anchor: str | None = None
    tokens: int | None = None
    text: str | None = None
    keys: list[str] | None = None


class TurnFilter(Schema):
    q: str | None = None
    agent: str | None = None
    model: str | None = None
    tier: str | None = None
    min_watermark: FiniteFloat | None = None
    turn_from: int | None = None
    turn_to: int | None = None


class ReplayIn(Schema):
    """A replay job. Name the turns (snapshot_id, or session_id / filter for many turns) and
    what to do: kind plain | without | move | loo | batch | custom.

    With both snapshot_id and session_id, the snapshot is the turn and must be of that session.
    A filter without conditions selects every session (up to the per-job bound)."""

    # What the validator below refuses, stated in the published schema.
    model_config = ConfigDict(json_schema_extra={
        "allOf": [
            {"anyOf": [
                {"required": ["snapshot_id"], "properties": {"snapshot_id": {"type": "string"}}},
                {"required": ["session_id"], "properties": {"session_id": {"type": "string"}}},
                {"required": ["filter"], "properties": {"filter": {"type": "object"}}},
            ]},
            {"if": {"required": ["kind"], "properties": {"kind": {"enum": ["without", "move"]}}},
             "then": {"required": ["block"], "properties": {"block": {"type": "string", "minLength": 1}}}},
        ],
    })

    kind: Literal["plain", "without", "move", "loo", "batch", "custom"] = "plain"
    snapshot_id: str | None = Field(None, min_length=1)
    session_id: str | None = Field(None, min_length=1)
    filter: TurnFilter | None = None
    block: str | None = Field(None, description="the block key for without / move / batch")
    to: Literal["front", "end", "middle", "before", "after"] | None = None
    anchor: str | None = None
    operations: list[Operation] | None = None
    samples: int = Field(3, description="baseline replays (the noise floor)", ge=1, le=10)
    params: dict[str, Any] | None = Field(
        None, description="sampling overrides, e.g. max_tokens, temperature"
    )
    endpoint_id: Id | None = None
    title: str | None = None

    @model_validator(mode="after")
    def _names_turns_and_block(self) -> ReplayIn:
        if self.snapshot_id is None and self.session_id is None and self.filter is None:
            raise ValueError("name the turns to replay: snapshot_id, session_id or filter")
        if self.kind in ("without", "move") and not self.block:
            raise ValueError(f"a {self.kind} job needs 'block': the key of the block")
        return self


class EstimateOut(Schema):
    model_calls: int
    prompt_tokens: int
    snapshots: int
    variants: int
    skipped: int


class PreviewVariant(Schema):
    snapshot_id: str
    session_id: str
    turn: int
    label: str
    operations: list[dict[str, Any]]
    is_baseline: bool
    samples: int


class PreviewOut(Schema):
    kind: str
    title: str
    estimate: EstimateOut
    variants: list[PreviewVariant]
    skipped: list[dict[str, Any]]


class RunOut(Schema):
    id: int
    sample: int
    status: str
    attempts: int
    error: str
    output_text: str
    tool_calls: list[Any]
    finish_reason: str
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_ms: float | None


class EffectOut(Schema):
    distance: float | None
    within_noise: bool | None
    exact_baseline: bool | None


class VariantOut(Schema):
    id: int
    snapshot_id: str
    session_id: str
    turn: int
    label: str
    operations: list[dict[str, Any]]
    is_baseline: bool
    target_key: str
    runs: list[RunOut]
    effect: EffectOut | None = None
    changed: bool | None = None
    tool_calls_match: bool | None = None
    prompt_tokens_delta: int | None = None


class NoiseOut(Schema):
    samples: int
    max: float
    mean: float
    exact_all: bool


class TurnOut(Schema):
    snapshot_id: str
    session_id: str
    turn: int
    noise: NoiseOut
    variants: list[VariantOut]


class JobOut(Schema):
    id: int
    kind: str
    title: str
    status: str
    endpoint: str
    samples: int
    estimate: dict[str, Any]
    n_runs: int
    n_done: int
    n_failed: int
    n_cancelled: int
    progress: float
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    url: str
    turns: list[TurnOut] | None = None
    summary: list[dict[str, Any]] | None = None


class TriageOut(Schema):
    """A turn's auto-triage: state, why it ran, the verdict once done, and its cost."""

    id: int
    status: str
    reason: str
    trigger: str
    snapshot_id: str
    session_id: str
    turn: int
    alert_ids: list[int]
    job_id: int | None
    job_kind: str
    job_status: str | None
    calls_reserved: int
    calls_made: int
    result: dict[str, Any] | None
    summary: str
    created_at: str | None
    finished_at: str | None
    url: str
