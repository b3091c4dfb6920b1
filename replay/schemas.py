"""Ninja schemas of the replay API."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from ninja import Schema
from pydantic import ConfigDict, Field, model_validator

from core.params import FiniteFloat, Id
from core.schemas import ObjectIn


class Operation(ObjectIn):
    op: Literal["remove", "move", "truncate", "replace", "keep_only", "keep_sentences"]
    key: str | None = None
    to: Literal["front", "end", "middle", "before", "after"] | None = None
    anchor: str | None = None
    tokens: int | None = None
    text: str | None = None
    keys: list[str] | None = None
    keep: list[int] | None = Field(None, description="keep_sentences: the sentence numbers kept")


class TurnFilter(ObjectIn):
    q: str | None = None
    agent: str | None = None
    model: str | None = None
    tier: str | None = None
    min_watermark: FiniteFloat | None = None
    turn_from: int | None = None
    turn_to: int | None = None


class Overrides(ObjectIn):
    """Parameters sent instead of the turn's saved ones, on every call of the job (recorded on
    it). Leave a field out to send the saved value; without `seed`, baseline resamples after
    the first carry no seed."""

    model_config = ConfigDict(extra="forbid")

    temperature: FiniteFloat | None = Field(None, ge=0, le=2)
    top_p: FiniteFloat | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1, le=100_000)
    seed: int | None = Field(None, ge=-(2**63), lt=2**63)


class ReplayIn(ObjectIn):
    """A replay job. Name the turns (snapshot_id, or session_id / filter for many turns) and
    what to do: kind plain | without | move | loo | batch | custom | attribution.

    An attribution job makes `ablations` random ablations (each source kept with probability
    1/2, seeded by `seed`) of the turn's blocks other than the system prompt and the question,
    or, with `block`, of that block's sentences, and fits a sparse linear surrogate to them.

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

    kind: Literal["plain", "without", "move", "loo", "batch", "custom", "attribution"] = "plain"
    snapshot_id: str | None = Field(None, min_length=1)
    session_id: str | None = Field(None, min_length=1)
    filter: TurnFilter | None = None
    block: str | None = Field(
        None, description="the block key for without / move / batch; attribution: over its sentences"
    )
    to: Literal["front", "end", "middle", "before", "after"] | None = None
    anchor: str | None = None
    operations: list[Operation] | None = None
    samples: int = Field(3, description="baseline replays (the noise floor)", ge=1, le=10)
    params: Overrides | None = Field(
        None, description="overrides of the saved parameters; by default every call sends them as saved"
    )
    ablations: int | None = Field(
        None, description="attribution: random ablations (default 32)", ge=8, le=128
    )
    seed: int | None = Field(None, description="attribution: the ablations' random seed", ge=0, le=2**31 - 1)
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
    reused: int = Field(0, description="baseline samples answered by earlier runs of the same request")
    no_change: int = Field(0, description="variants whose request equals the baseline's (not run)")


class PreviewVariant(Schema):
    snapshot_id: str
    session_id: str
    turn: int
    label: str
    operations: list[dict[str, Any]]
    is_baseline: bool
    samples: int
    no_change: bool = Field(False, description="no change to the request: the variant is not run")


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
    api_mode: str = Field("", description="chat, or completions (transcript)")
    mode_note: str = Field("", description="why the API mode is not the turn's own")
    request_path: str = Field("", description="the API path called; the body sent is on the run's page")
    reused_from: int | None = Field(None, description="the earlier run whose answer this sample reuses")


class VerdictTestOut(Schema):
    measure: str = Field(description="a check (fact, field, tool call) or a distance (task, edit, semantic)")
    what: str
    p: float = Field(description="Fisher's exact test (a check), a one-sided permutation test (a distance)")
    baseline: float = Field(description="baseline answers with the check, or their mean distance apart")
    variant: float = Field(description="variant answers with the check, or their mean distance to baseline")
    words: str
    decides: bool = Field(description="whether the verdict rests on it (with checks: checks and task)")


class EffectOut(Schema):
    distance: float | None = Field(
        None, description="edit distance (characters and words), mean over the baseline samples"
    )
    word_distance: float | None = None
    task_distance: float | None = Field(
        None, description="share of the baseline's tool calls, JSON fields and key facts lost"
    )
    semantic_distance: float | None = Field(
        None, description="1 - cosine of embeddings, when the endpoint has them"
    )
    within_noise: bool | None
    exact_baseline: bool | None
    verdict: str | None = Field(None, description="within noise | changed | needs more samples")
    verdict_words: str | None = Field(None, description="the verdict in a sentence, with its p-value")
    p: float | None = Field(
        None, description="the verdict's p-value: its smallest test's, times the number of tests"
    )
    tests: list[VerdictTestOut] | None = Field(None, description="each check's and measure's test")
    samples: int | None = Field(None, description="baseline samples the verdict rests on")
    variant_samples: int | None = Field(None, description="answers of the variant the verdict rests on")


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
    verdict: str | None = Field(None, description="within noise | changed | needs more samples")
    verdict_words: str | None = Field(
        None, description='the verdict in words: "the fact “4417” was in 8 of 8 baseline answers and …"'
    )
    p: float | None = Field(None, description="the verdict's p-value")
    tool_calls_match: bool | None = None
    prompt_tokens_delta: int | None = Field(
        None, description="the replay model's prompt tokens: this variant minus the baseline"
    )
    no_change: bool = Field(False, description="no change to the request: not run")


class NoiseOut(Schema):
    samples: int = Field(description="baseline samples the spread is measured on")
    max: float
    mean: float
    exact_all: bool
    enough: bool = Field(False, description="whether there are enough samples (3) for a verdict")
    measures: dict[str, Any] | None = Field(None, description="the spread under each measure")


class AttributionSourceOut(Schema):
    rank: int
    key: str
    text: str
    score: float
    within_noise: bool


class AttributionOut(Schema):
    level: str
    block: str | None
    planned: int
    measured: int
    samples: int
    noise: float
    r2_holdout: float | None
    r2_train: float | None
    top: str | None
    top_alone: bool | None
    sources: list[AttributionSourceOut]


class TurnOut(Schema):
    snapshot_id: str
    session_id: str
    turn: int
    noise: NoiseOut
    ranking: list[str] = Field(default_factory=list, description="variants by effect, largest first")
    attribution: AttributionOut | None = None
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
    # Where its calls wait in the replay queue: "person" ahead of "triage" ahead of "experiment".
    priority: Literal["person", "triage", "experiment"]
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
