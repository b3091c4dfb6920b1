"""What crosses replay's modules: operations on a saved context, a job's spec, plan and results.

TypedDicts, not classes: operations and job specs travel as JSON (the API, ReplayVariant.operations,
ReplayJob.spec) and the result rows are rendered key by key by the pages and the read API.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

from ingest.types import Message, SnapshotRef

if TYPE_CHECKING:
    # Only for annotations: replay.ablation, which uses these types, stays ORM-free.
    from replay.models import ReplayRun, ReplayVariant


MoveTarget = Literal["front", "end", "middle", "before", "after"]


# One operation on a block list (see replay.ablation and replay.compression): one TypedDict per
# operation, its `op` the tag that tells them apart.
class RemoveOp(TypedDict):
    op: Literal["remove"]
    key: str


class MoveOp(TypedDict):
    op: Literal["move"]
    key: str
    to: MoveTarget
    anchor: NotRequired[str]  # before | after: the block it goes next to


class TruncateOp(TypedDict):
    op: Literal["truncate"]
    key: str
    tokens: int


class ReplaceOp(TypedDict):
    op: Literal["replace"]
    key: str
    text: str


class KeepOnlyOp(TypedDict):
    op: Literal["keep_only"]
    keys: list[str]


class KeepSentencesOp(TypedDict):
    """Attribution's ablations: the sentence numbers of the block that are kept."""

    op: Literal["keep_sentences"]
    key: str
    keep: list[int]


class DropToolOutputOp(TypedDict):
    op: Literal["drop_tool_output"]
    older_than: int  # turns kept whole
    key: NotRequired[str]


class SummarizeOp(TypedDict):
    """Either `key` (a block) or `before_last_turns` (the history before the last N turns); either
    `budget` (tokens the summary may take) or `ratio` (its share of what it replaces)."""

    op: Literal["summarize"]
    key: NotRequired[str]
    before_last_turns: NotRequired[int]
    budget: NotRequired[int]
    ratio: NotRequired[float]
    prompt: NotRequired[str]  # the instruction to the summarising model
    summary: NotRequired[str]  # the model's summary, once computed


class TrimJsonOp(TypedDict):
    op: Literal["trim_json"]
    key: str
    fields: NotRequired[list[str]]  # the fields kept
    max_items: NotRequired[int]  # the items kept of each list


class KeepLastTurnsOp(TypedDict):
    op: Literal["keep_last_turns"]
    n: int
    key: NotRequired[str]


class TopKOp(TypedDict):
    op: Literal["top_k"]
    key: str
    k: int  # the documents kept


class PinToPrefixOp(TypedDict):
    op: Literal["pin_to_prefix"]
    key: str


# replay.compression's operations: they raise NotApplicable on a context with nothing to act on.
CompressionOp = DropToolOutputOp | SummarizeOp | TrimJsonOp | KeepLastTurnsOp | TopKOp | PinToPrefixOp
Operation = RemoveOp | MoveOp | TruncateOp | ReplaceOp | KeepOnlyOp | KeepSentencesOp | CompressionOp


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


JobKind = Literal["plain", "without", "move", "loo", "batch", "custom", "attribution"]


class TurnFilter(TypedDict, total=False):
    """The turns of a many-turn job: sessions by text, agent and model, then their turns by tier,
    watermark and turn number. No condition selects every session."""

    q: str
    agent: str
    model: str
    tier: str
    min_watermark: float
    turn_from: int
    turn_to: int


class Overrides(TypedDict, total=False):
    """Parameters a job sends instead of the turns' saved ones (replay.ablation.OVERRIDE_PARAMS)."""

    temperature: float
    top_p: float
    max_tokens: int
    seed: int


class ReplayJobSpec(TypedDict, total=False):
    """What a replay job was asked to do, stored as it was given (ReplayJob.spec): the turns
    (snapshot_id, or session_id / filter for many), the kind of variant and what it needs, the
    samples and parameter overrides; the turns it skipped are added when it is created. A job
    another app planned over frozen contexts names only what it runs for (experiment_id).
    replay.services.jobs.replay_job_plan checks every field of a spec it is given."""

    kind: JobKind
    snapshot_id: str
    session_id: str
    filter: TurnFilter
    block: str  # without / move / batch: the block key; attribution: over its sentences
    to: MoveTarget
    anchor: str
    operations: list[Operation]
    samples: int
    params: Overrides
    ablations: int  # attribution: random ablations
    seed: int  # attribution: the ablations' random seed
    title: str
    skipped: list[SkippedTurn]
    experiment_id: int


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
