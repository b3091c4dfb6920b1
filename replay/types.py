"""What crosses replay's modules: operations on a saved context, a job's plan and its results.

TypedDicts, not classes: operations travel as JSON (the API, ReplayVariant.operations) and the
result rows are rendered key by key by the pages and the read API, exactly as before.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from ingest.types import Message, SnapshotRef

if TYPE_CHECKING:
    # Only for annotations: replay.ablation, which uses these types, stays ORM-free.
    from replay.models import ReplayRun, ReplayVariant


class Operation(TypedDict, total=False):
    """One operation on a block list (see replay.ablation): `op` and the fields it needs."""

    op: str  # remove | move | truncate | replace | keep_only | keep_sentences, or replay.compression.OPS
    key: str
    to: str
    anchor: str
    tokens: int
    text: str
    keys: list[str]
    keep: list[int]  # keep_sentences: the sentence numbers kept
    older_than: int  # drop_tool_output: turns kept whole
    before_last_turns: int  # summarize: the history before the last N turns
    budget: int  # summarize: tokens the summary may take
    ratio: float  # summarize: the summary's budget as a share of what it replaces
    prompt: str  # summarize: the instruction to the summarising model
    summary: str  # summarize: the model's summary, once computed
    fields: list[str]  # trim_json: the fields kept
    max_items: int  # trim_json: the items kept of each list
    n: int  # keep_last_turns
    k: int  # top_k: the documents kept


class VariantBlock(TypedDict, total=False):
    """A block of a variant's context: a stored block (ingest.types.StoredBlock), with `tokens`
    None and `modified` set once an operation changed its messages."""

    key: str
    kind: str
    messages: list[Message]
    tokens: int | None
    modified: bool


class ChatRequest(TypedDict, total=False):
    """A chat request rebuilt from a saved turn: its saved parameters plus `messages`."""

    messages: list[Message]


class SkippedTurn(TypedDict):
    """A turn a job leaves out because its variant does not apply to it."""

    snapshot_id: str
    session_id: str
    turn: int
    reason: str


class PlanEstimate(TypedDict):
    model_calls: int
    prompt_tokens: int
    snapshots: int
    variants: int
    skipped: int
    reused: int  # baseline samples answered by earlier runs of the same call
    no_change: int  # variants whose request equals the baseline's (not run)


class VariantResult(TypedDict):
    """A variant of one turn with its runs and, once measured, its effect against the baseline."""

    variant: ReplayVariant
    runs: list[ReplayRun]
    run: NotRequired[ReplayRun | None]
    effect: NotRequired[dict[str, Any] | None]  # replay.diff.effect
    tool_calls_match: NotRequired[bool | None]
    changed: NotRequired[bool | None]
    verdict: NotRequired[str | None]  # replay.measures.VERDICTS
    verdict_words: NotRequired[str | None]  # the verdict in a sentence (replay.measures.compare)
    p: NotRequired[float | None]  # the verdict's p-value (Bonferroni over its tests)
    prompt_tokens_delta: NotRequired[int | None]  # replay model's count: variant - baseline
    no_change: NotRequired[bool]  # its request equals the baseline's: not run


class AttributionSource(TypedDict):
    """One ablated source (a block, or a sentence of one) with its surrogate score."""

    index: int
    key: str
    text: str  # the sentence, at sentence level
    position: int | None  # the block's position on the turn page
    score: float
    within_noise: bool
    rank: int


class AttributionResult(TypedDict):
    """An attribution over one turn: the sources ranked by score, the fit and its noise band."""

    level: str  # block | sentence
    block: str | None
    block_position: int | None
    planned: int
    measured: int
    samples: int
    noise: float
    fit: Any  # replay.attribution.Fit | None
    sources: list[AttributionSource]
    top: str | None
    top_alone: bool | None


class TurnResult(TypedDict):
    """One replayed turn: its baseline samples, their spread (the noise floor), its variants."""

    snapshot_ref: int
    snapshot_uuid: uuid.UUID
    session_id: str
    turn: int
    baseline: VariantResult | None
    variants: list[VariantResult]
    noise: NotRequired[dict[str, Any]]  # replay.diff.noise_floor
    baseline_done: NotRequired[int]
    baseline_runs: NotRequired[list[ReplayRun]]
    ranking: NotRequired[list[str]]  # variants' target keys, largest effect first
    fixed_keys: NotRequired[list[str]]  # a leave-one-out's blocks kept out of the ranking
    attribution: NotRequired[AttributionResult]


class VariantSummary(TypedDict):
    """One variant label over the turns of a many-turn job."""

    label: str
    turns: int
    measured: int
    changed: int
    exact: int


class JobResults(TypedDict):
    turns: list[TurnResult]
    summary: list[VariantSummary]
    failures: list[ReplayRun]
    variants: list[ReplayVariant]
    runs: list[ReplayRun]


class RunComparison(TypedDict):
    """A run beside the original answer of its turn and beside the first baseline sample."""

    snapshot: SnapshotRef | None
    original: dict[str, Any]  # the saved answer, as a page shows it
    baseline: ReplayRun | None
    vs_original: dict[str, Any] | None  # replay.diff.compare
    vs_baseline: dict[str, Any] | None
    variant: ReplayVariant
    request_differences: list[dict[str, str]] | None  # replay.ablation.request_differences
