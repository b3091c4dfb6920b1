"""The prompt-cache lens, ORM-free: how much of a turn's prompt repeats the previous turn's as
a prefix, what broke the prefix and why, what the provider's rules say should have been read
from its prompt cache, and what the turn cost.

Providers cache identical prompt prefixes. The rendered request starts with what the request
parameters put in front of the messages (tool definitions, response format), then the blocks
in prompt order; the shared prefix is therefore empty when those parameters differ, and
otherwise runs over the blocks whose content hashes are equal, into the first changed block
as far as its messages are equal.

- OpenAI (and, lacking better knowledge, any other provider): automatic caching of a prefix of
  at least 1,024 tokens, in 128-token steps, for about ten minutes of inactivity (24 hours when
  the request asks for `prompt_cache_retention: "24h"`).
- Anthropic: only at `cache_control` breakpoints (at most 4) recorded in the blocks' messages;
  a read needs a breakpoint of the previous turn inside the shared prefix, a breakpoint of this
  turn at or after it, a time since the previous turn within the breakpoint's TTL (5 minutes,
  or 1 hour for `"ttl": "1h"`) and at least 1,024 tokens (2,048 for Haiku models). What the
  last breakpoint adds beyond the read is written at 1.25x the input price (2x for 1 hour).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ctxobs.hashing import canonical_json
from insights.prices import Price

OPENAI, ANTHROPIC, OTHER = "openai", "anthropic", "other"
PROVIDERS = (OPENAI, ANTHROPIC, OTHER)

OPENAI_MIN_TOKENS = 1024
OPENAI_STEP = 128
OPENAI_TTL_S = 600.0
OPENAI_EXTENDED_TTL_S = 86_400.0
ANTHROPIC_MAX_BREAKPOINTS = 4
ANTHROPIC_MIN_TOKENS = 1024
ANTHROPIC_HAIKU_MIN_TOKENS = 2048
ANTHROPIC_TTL_S = 300.0
ANTHROPIC_LONG_TTL_S = 3600.0

# Request parameters rendered in front of the messages: a change in any of them changes the
# prompt from its first token.
PREFIX_PARAMS = ("tools", "functions", "tool_choice", "response_format", "system")

# Why the prefix ended where it did.
FIRST_TURN = "first_turn"  # no previous turn in the session
KEPT = "kept"  # the whole previous prompt is a prefix of this one: nothing broke
TAIL = "tail"  # all but the previous turn's last, volatile block (its input) is kept
PARAMS_CHANGED = "params_changed"
TOOLS_REORDERED = "tools_reordered"
JSON_RESERIALISED = "json_reserialised"
TIMESTAMP = "timestamp"
VOLATILE_ID = "volatile_id"
REORDER = "reorder"
INSERTED = "inserted"
REMOVED = "removed"
GREW = "grew"  # a block grew in front of blocks that were after it
NEW_CONTENT = "new_content"

REASONS: dict[str, str] = {
    FIRST_TURN: "first turn of the session",
    KEPT: "the whole previous prompt is kept as the prefix",
    TAIL: "only the previous turn's input is not repeated",
    PARAMS_CHANGED: "request parameters rendered before the messages changed",
    TOOLS_REORDERED: "tool definitions reordered",
    JSON_RESERIALISED: "same JSON, serialised differently",
    TIMESTAMP: "a date or time changed in an early block",
    VOLATILE_ID: "an id changed in an early block",
    REORDER: "blocks reordered",
    INSERTED: "a new block inserted before older ones",
    REMOVED: "a block removed",
    GREW: "a block grew in front of later blocks",
    NEW_CONTENT: "new content",
}
# Reasons that do not break the cache.
NOT_BREAKS = frozenset((FIRST_TURN, KEPT, TAIL))
# Kinds of block that change every turn by nature: a previous turn's last block of one of these
# kinds not repeated is not a break.
VOLATILE_TAIL_KINDS = frozenset(("user", "tool_results", "retrieval"))

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_DATETIME = (
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
    r"|\d{1,2}/\d{1,2}/\d{2,4}"
    r"|\b\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:\s?[AaPp][Mm])?\b"
    r"|\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*\b"
    r"|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.? \d{1,2}(?:, \d{4})?"
)
_ID = _UUID + r"|\b[0-9a-fA-F]{12,}\b|\b\d{9,}\b|\b[A-Za-z]+[-_][A-Za-z0-9]*\d[A-Za-z0-9]*\b"
_DATETIME_RE = re.compile(_DATETIME)
_ID_RE = re.compile(_ID)


@dataclass(frozen=True, slots=True)
class TurnBlocks:
    """One turn as the lens compares it: the blocks' content hashes and tokens in prompt order,
    and the messages of each block (only those of the blocks the comparison reads need be
    there)."""

    hashes: Sequence[str]
    keys: Sequence[str]
    kinds: Sequence[str]
    tokens: Sequence[int]
    params: Mapping[str, Any]
    messages: Mapping[int, Sequence[Mapping[str, Any]]]


@dataclass(frozen=True, slots=True)
class Prefix:
    """The prefix a turn shares with the previous one: whole blocks, tokens (whole blocks and
    the equal leading messages of the first changed block), and the first changed block."""

    blocks: int
    tokens: int
    reason: str
    detail: str = ""
    position: int | None = None  # the first changed block of this turn (or the previous one's, when removed)
    key: str = ""
    kind: str = ""


def provider_of(model: str, params: Mapping[str, Any], tags: Mapping[str, Any]) -> str:
    """The provider whose caching rules apply: a `provider` (or `gen_ai.system`) tag or
    parameter naming openai or anthropic, else the model name's family."""
    for source in (tags, params):
        for field in ("provider", "gen_ai.system", "ctxobs.provider"):
            value = str(source.get(field) or "").lower()
            if value in (OPENAI, ANTHROPIC):
                return value
    name = model.lower().rsplit("/", 1)[-1]
    if "claude" in name or model.lower().startswith("anthropic"):
        return ANTHROPIC
    if name.startswith(("gpt-", "gpt4", "o1", "o3", "o4", "chatgpt", "ft:gpt", "text-", "davinci")):
        return OPENAI
    return OTHER


def _text(messages: Sequence[Mapping[str, Any]]) -> str:
    parts: list[str] = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif content is not None:
            parts.append(canonical_json(content))
        if m.get("tool_calls"):
            parts.append(canonical_json(m["tool_calls"]))
    return "\n".join(parts)


def _parsed(text: str) -> Any:
    text = text.strip()
    if not text or text[0] not in "[{":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _same_items(a: Any, b: Any) -> bool:
    """Whether A and B are lists of the same items in another order."""
    if not isinstance(a, list) or not isinstance(b, list) or len(a) != len(b) or a == b:
        return False
    return sorted(canonical_json(x) for x in a) == sorted(canonical_json(x) for x in b)


def _tool_list(value: Any) -> Any:
    # {"tools": [...]} and a bare list are both a tool list.
    if isinstance(value, dict) and len(value) == 1:
        inner = next(iter(value.values()))
        if isinstance(inner, list):
            return inner
    return value


def content_reason(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]], *, kind: str = "", key: str = ""
) -> tuple[str, str]:
    """Why a block's content changed between two turns: (reason, detail)."""
    a, b = _text(before), _text(after)
    pa, pb = _parsed(a), _parsed(b)
    if pa is not None and pb is not None:
        if pa == pb:
            return JSON_RESERIALISED, "the parsed JSON is equal; only its bytes differ (key order, spacing)"
        ta, tb = _tool_list(pa), _tool_list(pb)
        if _same_items(ta, tb):
            if kind == "tools" or key.startswith("tool"):
                return TOOLS_REORDERED, "the same tool definitions in another order"
            return REORDER, "the same JSON items in another order"
    if a != b:
        if _DATETIME_RE.sub("\x01", a) == _DATETIME_RE.sub("\x01", b):
            found = _first_diff(_DATETIME_RE, a, b)
            return TIMESTAMP, f"date/time changed: {found}" if found else "a date or time changed"
        if _ID_RE.sub("\x01", _DATETIME_RE.sub("\x01", a)) == _ID_RE.sub("\x01", _DATETIME_RE.sub("\x01", b)):
            found = _first_diff(_ID_RE, a, b)
            return VOLATILE_ID, f"id changed: {found}" if found else "an id changed"
    return NEW_CONTENT, ""


def _first_diff(pattern: re.Pattern[str], a: str, b: str) -> str:
    for x, y in zip(pattern.findall(a), pattern.findall(b), strict=False):
        if x != y:
            return f"{x[:40]} → {y[:40]}"
    return ""


def _params_prefix(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: params[k] for k in PREFIX_PARAMS if k in params and params[k] is not None}


def params_reason(prev: Mapping[str, Any], cur: Mapping[str, Any]) -> tuple[str, str] | None:
    """Why the parameters rendered before the messages differ; None when they do not."""
    a, b = _params_prefix(prev), _params_prefix(cur)
    if canonical_json(a) == canonical_json(b):
        return None
    changed = sorted(k for k in set(a) | set(b) if canonical_json(a.get(k)) != canonical_json(b.get(k)))
    if changed == ["tools"] and _same_items(a.get("tools"), b.get("tools")):
        return TOOLS_REORDERED, "params.tools: the same tool definitions in another order"
    return PARAMS_CHANGED, "changed: " + ", ".join(f"params.{k}" for k in changed)


def _leading_equal(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if canonical_json(x) != canonical_json(y):
            break
        n += 1
    return n


def _size(messages: Sequence[Mapping[str, Any]]) -> int:
    return sum(len(canonical_json(m)) for m in messages)


def shared_prefix(prev: TurnBlocks | None, cur: TurnBlocks) -> Prefix:
    """The prefix CUR shares with PREV, the previous turn of its session, and why it ends."""
    if prev is None:
        return Prefix(blocks=0, tokens=0, reason=FIRST_TURN)
    by_params = params_reason(prev.params, cur.params)
    if by_params is not None:
        return Prefix(
            blocks=0,
            tokens=0,
            reason=by_params[0],
            detail=by_params[1],
            position=0,
            key="params",
            kind="params",
        )
    n = 0
    while n < len(prev.hashes) and n < len(cur.hashes) and prev.hashes[n] == cur.hashes[n]:
        n += 1
    tokens = sum(int(t) for t in cur.tokens[:n])
    if n == len(prev.hashes):
        return Prefix(blocks=n, tokens=tokens, reason=KEPT)
    # Providers cache rendered messages, not blocks: follow the messages across block
    # boundaries (the previous turn's question moved into this turn's history keeps it all).
    pflat = [(b, m) for b in range(n, len(prev.hashes)) for m in prev.messages.get(b, ())]
    cflat = [(b, m) for b in range(n, len(cur.hashes)) for m in cur.messages.get(b, ())]
    m = 0
    while m < len(pflat) and m < len(cflat) and canonical_json(pflat[m][1]) == canonical_json(cflat[m][1]):
        m += 1
    if pflat and m == len(pflat):
        full = n + sum(
            1 for b in range(n, len(cur.hashes)) if all(i < m for i, (cb, _) in enumerate(cflat) if cb == b)
        )
        return Prefix(blocks=full, tokens=sum(int(t) for t in prev.tokens), reason=KEPT)
    pb = pflat[m][0] if m < len(pflat) else n
    p_local = sum(1 for i in range(m) if pflat[i][0] == pb)
    tokens = sum(int(t) for t in prev.tokens[:pb])
    before_all = list(prev.messages.get(pb, ()))
    if p_local and before_all:
        tokens += round(int(prev.tokens[pb]) * _size(before_all[:p_local]) / max(1, _size(before_all)))
    full = n + sum(1 for b in range(n, pb) if b < len(cur.hashes) and cur.hashes[b] == prev.hashes[b])
    pkey = prev.keys[pb]
    if m >= len(cflat):
        return Prefix(
            blocks=full,
            tokens=tokens,
            reason=REMOVED,
            detail=f"'{pkey}' left the end",
            position=pb,
            key=pkey,
            kind=prev.kinds[pb],
        )
    cb = cflat[m][0]
    c_local = sum(1 for i in range(m) if cflat[i][0] == cb)
    ckey = cur.keys[cb]

    def at(reason: str, detail: str = "") -> Prefix:
        return Prefix(
            blocks=full,
            tokens=tokens,
            reason=reason,
            detail=detail,
            position=cb,
            key=ckey,
            kind=cur.kinds[cb],
        )

    if pb == len(prev.hashes) - 1 and p_local == 0 and prev.kinds[pb] in VOLATILE_TAIL_KINDS:
        return at(TAIL, f"the previous turn's '{pkey}' is not repeated")
    if p_local == 0 and pb > 0 and ckey == prev.keys[pb - 1] and c_local > 0:
        grown = sum(1 for b, _ in cflat if b == cb) - c_local
        return at(GREW, f"'{ckey}' grew by {grown} message(s) in front of '{pkey}'")
    if ckey not in prev.keys:
        return at(INSERTED, f"'{ckey}' inserted before '{pkey}'")
    if pkey not in cur.keys:
        return Prefix(
            blocks=full,
            tokens=tokens,
            reason=REMOVED,
            detail=f"'{pkey}' left",
            position=pb,
            key=pkey,
            kind=prev.kinds[pb],
        )
    if pkey != ckey or (
        p_local == 0
        and c_local == 0
        and (cur.hashes[cb] in prev.hashes[pb + 1 :] or prev.hashes[pb] in cur.hashes[cb + 1 :])
    ):
        return at(REORDER, f"'{ckey}' now where '{pkey}' was")
    reason, detail = content_reason(
        before_all[p_local:], list(cur.messages.get(cb, ()))[c_local:], kind=cur.kinds[cb], key=ckey
    )
    return at(reason, detail)


# --- provider rules ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Breakpoint:
    position: int  # the block whose end it marks
    ttl_s: float


def breakpoints(blocks: TurnBlocks) -> list[Breakpoint]:
    """Anthropic `cache_control` breakpoints recorded in the blocks' messages (on a message or
    on one of its content parts), in prompt order, at most four."""
    out: list[Breakpoint] = []
    for pos in range(len(blocks.hashes)):
        ttl: float | None = None
        for m in blocks.messages.get(pos, ()):
            content = m.get("content")
            parts: list[Any] = list(content) if isinstance(content, list) else []
            for holder in [m, *parts]:
                cc = holder.get("cache_control") if isinstance(holder, Mapping) else None
                if isinstance(cc, Mapping):
                    t = ANTHROPIC_LONG_TTL_S if str(cc.get("ttl", "")) == "1h" else ANTHROPIC_TTL_S
                    ttl = max(ttl or 0.0, t)
        if ttl is not None:
            out.append(Breakpoint(pos, ttl))
    return out[:ANTHROPIC_MAX_BREAKPOINTS]


@dataclass(frozen=True, slots=True)
class Expected:
    cached: int  # tokens read from the cache
    written: int  # tokens written to the cache (Anthropic)
    write_long: bool  # written with the 1-hour TTL
    note: str = ""


def _openai_cached(prefix_tokens: int, prompt_tokens: int) -> int:
    if prompt_tokens < OPENAI_MIN_TOKENS or prefix_tokens < OPENAI_MIN_TOKENS:
        return 0
    return (min(prefix_tokens, prompt_tokens) // OPENAI_STEP) * OPENAI_STEP


def openai_ttl(params: Mapping[str, Any]) -> float:
    return OPENAI_EXTENDED_TTL_S if str(params.get("prompt_cache_retention", "")) == "24h" else OPENAI_TTL_S


def anthropic_min_tokens(model: str) -> int:
    return ANTHROPIC_HAIKU_MIN_TOKENS if "haiku" in model.lower() else ANTHROPIC_MIN_TOKENS


def expected_cache(
    *,
    provider: str,
    model: str,
    prefix: Prefix,
    prev: TurnBlocks | None,
    cur: TurnBlocks,
    prompt_tokens: int,
    gap_s: float | None,
    ignore_ttl: bool = False,
) -> Expected:
    """The cache reads (and writes) the provider's rules expect for CUR after PREV, GAP_S
    seconds apart, given their shared PREFIX. IGNORE_TTL gives what a prompt sent in time
    would have read."""
    if provider != ANTHROPIC:
        if prev is None:
            return Expected(0, 0, False)
        if not ignore_ttl and gap_s is not None and gap_s > openai_ttl(cur.params):
            return Expected(0, 0, False, f"{gap_s:.0f} s since the previous turn: past the cache's lifetime")
        cached = _openai_cached(prefix.tokens, prompt_tokens)
        note = "" if cached or not prefix.tokens else f"shared prefix under {OPENAI_MIN_TOKENS} tokens"
        return Expected(cached, 0, False, note)
    mine = breakpoints(cur)
    if not mine:
        return Expected(0, 0, False, "no cache_control breakpoints recorded")
    minimum = anthropic_min_tokens(model)
    ends = _ends(cur.tokens)
    read = 0
    note = ""
    if prev is not None:
        last_mine = mine[-1].position
        for bp in breakpoints(prev):
            if bp.position >= prefix.blocks or bp.position > last_mine:
                continue
            if not ignore_ttl and gap_s is not None and gap_s > bp.ttl_s:
                note = f"{gap_s:.0f} s since the previous turn: past the {bp.ttl_s / 60:.0f}-minute TTL"
                continue
            if ends[bp.position] >= minimum:
                read = max(read, ends[bp.position])
    top = ends[mine[-1].position]
    written = top - read if top >= minimum and top > read else 0
    return Expected(read, written, written > 0 and mine[-1].ttl_s > ANTHROPIC_TTL_S, note)


def _ends(tokens: Sequence[int]) -> list[int]:
    out, acc = [], 0
    for t in tokens:
        acc += int(t)
        out.append(acc)
    return out


# --- cost -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Cost:
    no_cache: float
    expected: float
    actual: float | None
    lost: float


def cost(
    *,
    price: Price,
    prompt_tokens: int,
    completion_tokens: int,
    expected: Expected,
    potential: Expected,
    reported_cached: int | None,
) -> Cost:
    """The turn's cost in dollars with no cache, with the expected cache, with the cache the
    provider reported (None when it reported none) and the money lost to misses: the tokens
    the whole previous prompt could have had read from the cache (POTENTIAL) that were not
    (reported, else expected), at the difference between the input and cached input prices."""
    m = 1_000_000.0
    out = completion_tokens * price.output / m

    def with_cache(read: int, written: int) -> float:
        read = max(0, min(read, prompt_tokens))
        write_price = 2 * price.input if expected.write_long else price.cache_write
        plain = max(0, prompt_tokens - read - written)
        return (plain * price.input + read * price.cached_input + written * write_price) / m + out

    no_cache = prompt_tokens * price.input / m + out
    exp = with_cache(expected.cached, expected.written)
    actual = with_cache(reported_cached, expected.written) if reported_cached is not None else None
    basis = reported_cached if reported_cached is not None else expected.cached
    lost_tokens = max(0, min(potential.cached, prompt_tokens) - basis)
    lost = lost_tokens * max(0.0, price.input - price.cached_input) / m
    return Cost(no_cache=no_cache, expected=exp, actual=actual, lost=lost)


def gap_seconds(prev_ts: datetime | None, ts: datetime) -> float | None:
    return (ts - prev_ts).total_seconds() if prev_ts is not None else None
