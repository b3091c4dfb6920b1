"""The snapshot wire contract, defined once: its limits, its enums and its typed structures.

`WireSnapshot` and the structures under it are what a sender puts on the wire; `Snapshot` and
the structures under it are what `ctxobs.validate.validate_snapshot()` returns after checking and
normalising one item. The JSON Schema published in the OpenAPI document and shipped as
`docs/snapshot.schema.json` is generated from the wire structures (`ctxobs.schema`), and
tests/ctxobs/test_wire_contract.py holds the schema, the OpenAPI document and the validator to the
same fields, types, enums and limits. Standard library only: the server and any third-party sender
share exactly these rules, limits and field names.

No `from __future__ import annotations` here: TypedDict reads Required/NotRequired from evaluated
annotations only (on Python 3.11), and `ctxobs.schema` reads the `Spec` of each field at run time.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Annotated, Any, Literal, NotRequired, Required, TypedDict, get_args

WIRE_VERSION = 1


@dataclass(frozen=True)
class Limits:
    """Enforced limits of the ingest API. Documented in the README and the OpenAPI schema."""

    max_items_per_batch: int = 500
    max_body_bytes: int = 16 * 1024 * 1024  # after decompression too (gzip or zstd)
    max_blocks_per_snapshot: int = 200
    max_chars_per_block: int = 500_000
    max_messages_per_block: int = 5_000
    max_list_items: int = 1_000  # compression events, recall items, validation outcomes each
    max_tags: int = 64
    max_id_chars: int = 256
    max_text_chars: int = 2_000  # previews, validation messages, tag values
    max_block_tokens: int = 10_000_000  # a block's token count (200 of them still fit a 32-bit total)
    max_int: int = 2**31 - 1  # turns, windows, token counts, attempts: stored as 32-bit integers
    # Levels of arrays and objects nested in one snapshot, the snapshot object itself being level 1
    # (params, message content and tool calls are free-form JSON; storing and hashing them walks
    # them recursively).
    max_depth: int = 128
    # Levels of arrays and objects in a whole request body, checked on its bytes before it is parsed
    # (a parser recurses per level): room for a batch whose items go beyond max_depth, so that
    # such an item is rejected alone.
    max_body_depth: int = 512


LIMITS = Limits()


def limits_doc() -> dict[str, int]:
    """The limits by name, as the API documents them."""
    return {f.name: getattr(LIMITS, f.name) for f in fields(LIMITS)}


# Lengths of the short identifiers (columns of these sizes hold them).
KEY_CHARS = 128  # block keys and names that point at a block, validation checks and codes
NAME_CHARS = 64  # encodings, compression strategies, finish reasons

BlockKind = Literal[
    "system", "tools", "constraints", "memory", "summary", "history", "retrieval", "tool_results", "user",
    "other",
]
MessageRole = Literal["system", "developer", "user", "assistant", "tool", "function"]
RecallChannel = Literal["vector", "keyword", "structured", "hybrid", "other"]
# Who edited the context: the agent's own code, the ctxobs SDK, or the model provider (Anthropic's
# compaction and context editing, OpenAI's compaction items), whose edits the client never sees.
CompressionSource = Literal["client", "sdk", "provider"]
ValidationLayer = Literal["structure", "semantic", "business"]
TokenCounts = Literal["exact", "estimated"]
Tier = Literal["ok", "warn", "compress", "force", "break"]

BLOCK_KINDS: tuple[BlockKind, ...] = get_args(BlockKind)
MESSAGE_ROLES: tuple[MessageRole, ...] = get_args(MessageRole)
RECALL_CHANNELS: tuple[RecallChannel, ...] = get_args(RecallChannel)
COMPRESSION_SOURCES: tuple[CompressionSource, ...] = get_args(CompressionSource)
VALIDATION_LAYERS: tuple[ValidationLayer, ...] = get_args(ValidationLayer)
TOKEN_COUNTS: tuple[TokenCounts, ...] = get_args(TokenCounts)
TIERS: tuple[Tier, ...] = get_args(Tier)  # in order of severity


@dataclass(frozen=True)
class Spec:
    """What a wire field must satisfy beyond its type, attached with `Annotated[type, Spec(...)]`.

    `ctxobs.schema` turns it into JSON Schema keywords; the validator enforces the same numbers
    (it uses the same constants), and the contract test checks both at every boundary.
    """

    min_chars: int | None = None
    max_chars: int | None = None
    minimum: int | None = None
    maximum: int | None = None
    min_items: int | None = None
    max_items: int | None = None
    max_props: int | None = None
    plain: bool = False  # an identifier: matched, joined and shown as it is, so no U+0000
    pattern: str | None = None  # a regular expression the whole string matches (implies plain)
    format: str | None = None
    doc: str | None = None


# Field types used below. On the wire, an optional field may be absent or null: the same thing.
Ident = Annotated[str, Spec(min_chars=1, max_chars=LIMITS.max_id_chars, plain=True)]
OptIdent = Annotated[str | None, Spec(max_chars=LIMITS.max_id_chars, plain=True)]
OptKey = Annotated[str | None, Spec(max_chars=KEY_CHARS, plain=True)]
OptText = Annotated[str | None, Spec(max_chars=LIMITS.max_text_chars)]
OptFlag = bool | None
OptNumber = float | None
Count = Annotated[int | None, Spec(minimum=0, maximum=LIMITS.max_int)]
JSONObject = dict[str, Any]
# The request parameters as sent to the model (temperature, tools...): a free-form object whose
# `tools` list, when present, is counted as the tool definitions.
Params = JSONObject


class WireMessage(TypedDict):
    """One chat message exactly as it went to the model; other provider fields travel along."""

    role: Required[MessageRole]
    content: NotRequired[str | list[Any] | None]  # text, or the provider's list of content parts
    name: NotRequired[str | None]
    tool_call_id: NotRequired[str | None]
    tool_calls: NotRequired[list[Any] | None]


# A block's content address as ctxobs.hashing makes it: 32 lowercase hex digits.
BLOCK_HASH_PATTERN = "^[0-9a-f]{32}$"
# A block carries its messages or, for content the project holds, its hash and token count.
BLOCK_ONE_OF = [
    {"required": ["messages"], "not": {"required": ["hash"]}},
    {"required": ["hash", "tokens"], "not": {"required": ["messages"]},
     "properties": {"tokens": {"type": "integer"}}},
]


class WireBlock(TypedDict):
    """A named, contiguous part of the prompt (system prompt, history, retrieved documents...)."""

    key: Required[Annotated[str, Spec(min_chars=1, max_chars=KEY_CHARS, plain=True)]]
    kind: NotRequired[Annotated[BlockKind | Literal[""] | None, Spec(doc="default: other")]]
    messages: NotRequired[Annotated[list[WireMessage], Spec(
        max_items=LIMITS.max_messages_per_block, doc="the block's messages; or send `hash` instead")]]
    # A block whose content the project already holds may travel as its content address instead of
    # its messages (with its token count): the SDK does so for blocks the server has acknowledged.
    hash: NotRequired[Annotated[str, Spec(pattern=BLOCK_HASH_PATTERN, doc=(
        "instead of messages: the content address of a block this project already holds "
        "(ctxobs.hashing.block_hashes), with tokens; an unknown one rejects the snapshot"))]]
    tokens: NotRequired[Annotated[int | None, Spec(
        minimum=0, maximum=LIMITS.max_block_tokens,
        doc="omit to have the server count it (required with hash)")]]
    estimated: NotRequired[OptFlag]
    pinned: NotRequired[OptFlag]
    compressed: NotRequired[OptFlag]
    refs: NotRequired[Annotated[list[str] | None, Spec(max_items=LIMITS.max_list_items)]]


class WireModel(TypedDict):
    name: Required[Ident]
    context_window: Required[Annotated[int, Spec(minimum=1, maximum=LIMITS.max_int)]]
    reserve_tokens: NotRequired[Annotated[int | None, Spec(
        minimum=0, maximum=LIMITS.max_int, doc="smaller than context_window; default: 15% of it")]]
    encoding: NotRequired[Annotated[str | None, Spec(max_chars=NAME_CHARS, plain=True)]]
    counts: NotRequired[TokenCounts | None]


class WireCompressionEvent(TypedDict):
    """The agent compressed its context (dropped tool output, summarised, truncated...)."""

    strategy: Required[Annotated[str, Spec(min_chars=1, max_chars=NAME_CHARS, plain=True)]]
    block: NotRequired[OptKey]
    tokens_before: NotRequired[Count]
    tokens_after: NotRequired[Count]
    watermark: NotRequired[OptNumber]
    items: NotRequired[Annotated[list[Any] | None, Spec(max_items=LIMITS.max_list_items)]]
    ref: NotRequired[OptText]
    source: NotRequired[Annotated[CompressionSource | Literal[""] | None, Spec(doc="default: client")]]
    opaque: NotRequired[Annotated[OptFlag, Spec(
        doc="the removed content is encrypted or unreadable and measured by size only")]]


class WireRecallItem(TypedDict):
    """A memory the agent's recall found, and whether it went into the prompt."""

    memory_id: Required[Ident]
    channel: NotRequired[RecallChannel | Literal[""] | None]
    score: NotRequired[OptNumber]
    rank: NotRequired[Count]
    injected: NotRequired[OptFlag]
    stale: NotRequired[OptFlag]
    conflicting: NotRequired[OptFlag]
    block: NotRequired[OptKey]
    preview: NotRequired[OptText]


class WireValidationOutcome(TypedDict):
    """One check of the model's reply (schema, semantics, business rule) and its verdict."""

    layer: Required[ValidationLayer]
    passed: Required[bool]
    check: NotRequired[OptKey]
    code: NotRequired[OptKey]
    message: NotRequired[OptText]
    attempt: NotRequired[Annotated[int | None, Spec(minimum=1, maximum=LIMITS.max_int)]]


class WireUsage(TypedDict, total=False):
    """The provider's token usage of the call."""

    prompt_tokens: Count
    completion_tokens: Count
    total_tokens: Count
    cached_tokens: Count  # read from the provider's prompt cache
    cache_write_tokens: Count  # written to it on this call


class WireOutput(TypedDict, total=False):
    """The model's reply."""

    text: Annotated[str | None, Spec(max_chars=LIMITS.max_chars_per_block)]
    tool_calls: list[Any] | None
    finish_reason: Annotated[str | None, Spec(max_chars=NAME_CHARS)]
    usage: WireUsage | None
    latency_ms: OptNumber


_EVENTS = Spec(max_items=LIMITS.max_list_items)


class WireSnapshot(TypedDict):
    """One model call: what was in the context window, block by block, and what came back."""

    snapshot_id: Required[Annotated[str, Spec(format="uuid", doc="idempotency key")]]
    session_id: Required[Ident]
    turn: Required[Annotated[int, Spec(minimum=0, maximum=LIMITS.max_int)]]
    agent: NotRequired[OptIdent]
    ts: Required[Annotated[str, Spec(format="date-time", doc="with a UTC offset")]]
    model: Required[WireModel]
    params: NotRequired[Params | None]
    blocks: Required[Annotated[list[WireBlock], Spec(min_items=1, max_items=LIMITS.max_blocks_per_snapshot)]]
    compression: NotRequired[Annotated[list[WireCompressionEvent] | None, _EVENTS]]
    recall: NotRequired[Annotated[list[WireRecallItem] | None, _EVENTS]]
    validation: NotRequired[Annotated[list[WireValidationOutcome] | None, _EVENTS]]
    output: NotRequired[WireOutput | None]
    # Numbers and booleans are stored as text.
    tags: NotRequired[Annotated[dict[str, str | float | bool] | None, Spec(max_props=LIMITS.max_tags)]]
    retries: NotRequired[Count]
    fallback_used: NotRequired[OptFlag]


# Two rules of the contract that JSON Schema cannot state; the validator alone checks them.
RULES_BEYOND_SCHEMA = (
    "model.reserve_tokens is smaller than model.context_window",
    "a block's message text (content parts and tool-call arguments included) is at most max_chars_per_block "
    "characters",
    "arrays and objects nest at most max_depth levels in a snapshot (the snapshot itself is level 1)",
)


# --- What validation returns: every field present, defaults filled in.


class Model(TypedDict):
    name: str
    context_window: int
    reserve_tokens: int
    encoding: str
    counts: TokenCounts | None


class Block(TypedDict):
    key: str
    kind: BlockKind
    messages: list[WireMessage]  # empty when the block came by hash
    hash: str | None  # the content address the block came by, instead of its messages
    tokens: int | None  # never None with hash
    estimated: bool
    pinned: bool
    compressed: bool
    refs: list[str]
    chars: int  # characters of message text (see ctxobs.hashing.block_chars)
    verbatim: bool  # every message is {role, content} with no text a store has to escape


class CompressionEvent(TypedDict):
    strategy: str
    block: str
    tokens_before: int | None
    tokens_after: int | None
    watermark: float | None
    items: list[str]
    ref: str
    source: CompressionSource
    opaque: bool


class RecallItem(TypedDict):
    memory_id: str
    channel: RecallChannel
    score: float | None
    rank: int | None
    injected: bool
    stale: bool
    conflicting: bool
    block: str
    preview: str


class ValidationOutcome(TypedDict):
    layer: ValidationLayer
    check: str
    passed: bool
    code: str
    message: str
    attempt: int


class Usage(TypedDict, total=False):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_tokens: int
    cache_write_tokens: int


class Output(TypedDict):
    text: str | None
    tool_calls: list[Any]
    finish_reason: str
    usage: Usage
    latency_ms: float | None


class Snapshot(TypedDict):
    snapshot_id: str
    session_id: str
    turn: int
    agent: str
    ts: datetime  # in UTC
    model: Model
    params: Params
    blocks: list[Block]
    compression: list[CompressionEvent]
    recall: list[RecallItem]
    validation: list[ValidationOutcome]
    output: Output | None
    tags: dict[str, str]
    retries: int
    fallback_used: bool


class FieldError(TypedDict):
    """Why a field was refused: `loc` starts at the batch ("snapshots", index, ...)."""

    loc: list[str | int]
    msg: str
    hint: str


# --- Text a store can hold.

# A server stores a string holding U+0000, or starting with this mark, escaped behind the mark
# (core.pgtext). Validation notes the blocks that need no such care, where it looks at every
# message anyway: a block is `verbatim` when its messages are {role, content} with such text.
STORE_ESCAPE = "\u241b"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def unstorable(s: str) -> str | None:
    """Why S cannot be stored as PostgreSQL text (a NUL or an unpaired surrogate), or None."""
    if s.isascii():  # a flag of the string: the common case skips the regex
        return "contains U+0000 (NUL)" if "\x00" in s else None
    m = _UNSTORABLE.search(s)
    if m is None:
        return None
    c = m.group()
    return "contains U+0000 (NUL)" if c == "\x00" else f"contains an unpaired surrogate U+{ord(c):04X}"


def deeper_than(value: Any, levels: int) -> bool:
    """Whether VALUE nests arrays and objects more than LEVELS deep (a scalar is 0 deep, `[]` 1).

    Iterative, so that it is safe on any value a JSON parser returned."""
    if levels < 0:
        return True
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            children: Iterable[Any] = v.values()
        elif isinstance(v, list | tuple):
            children = v
        else:
            continue
        if depth > levels:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list | tuple))
    return False


# --- The usable window and watermark tiers.

DEFAULT_RESERVE_FRACTION = 0.15


def default_reserve(context_window: int) -> int:
    """Safety margin kept free for the output and the compression call: 15% of the window."""
    return int(round(context_window * DEFAULT_RESERVE_FRACTION))


def tier_for(
    watermark: float, thresholds: tuple[float, float, float, float] | None = None
) -> Tier:
    """Tier of a watermark: ok < warn < compress < force < break (thresholds are fractions;
    the project default when not given)."""
    warn, compress, force, brk = thresholds or DEFAULT_TIER_THRESHOLDS
    if watermark >= brk:
        return "break"
    if watermark >= force:
        return "force"
    if watermark >= compress:
        return "compress"
    if watermark >= warn:
        return "warn"
    return "ok"


# --- shared policy -----------------------------------------------------------------------
# How a snapshot is read, the same in the SDK, ingest, the pages and alerts: the usable window,
# the tiers and the names of repeated block keys. One copy each, so the watermark an agent computes
# is the one the dashboard shows and the one an alert fires on.

# Fractions of the usable window where warn, compress, force and break start: a project's default.
DEFAULT_TIER_THRESHOLDS: tuple[float, float, float, float] = (0.60, 0.70, 0.85, 0.95)


# |our prompt count - the provider's| / the provider's beyond which a turn's count is suspect: the
# turn pages flag it and a count-drift alert rule fires on it unless told otherwise. 10%, not less:
# estimated counts (an unknown encoding) and per-message overheads that differ between providers
# already move counts by a few percent, while what the flag is for (messages dropped or truncated
# on the way) moves them by much more.
COUNT_DRIFT_WARN = 0.10


def usable_window(context_window: int, reserve_tokens: int) -> int:
    """Tokens a prompt may fill: the context window less the reserve, and at least 1 so that a
    reserve as large as the window gives a huge watermark instead of a division by zero."""
    return max(1, context_window - reserve_tokens)


def occurrence_keys(keys: Iterable[str]) -> list[str]:
    """KEYS with repeats told apart: a key may repeat within a snapshot (two retrieval blocks), and
    its n-th occurrence (n >= 2) is named "key#n", so that a turn-to-turn comparison matches the
    n-th occurrence of a key with the n-th occurrence in the other turn."""
    seen: dict[str, int] = {}
    out: list[str] = []
    for key in keys:
        n = seen.get(key, 0)
        seen[key] = n + 1
        out.append(key if n == 0 else f"{key}#{n + 1}")
    return out


# --- evaluation sets and experiments (the server's experiments app and `ctxobs experiment run`) -----
# Items in one version of an evaluation set: every addition makes a new version, so a file pushed
# with `ctxobs push --dataset` must fit in one request.
MAX_ITEMS_PER_SET = 2000
# The figures an experiment reports against its control, by their API names.
EXPERIMENT_METRICS = (
    "fact_fidelity",
    "constraint_violations",
    "repeat_questions",
    "consistency",
    "task_success",
    "prompt_tokens",
    "compression_ratio",
    "cost",
)
