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
- Anthropic (https://platform.claude.com/docs/en/build-with-claude/prompt-caching): only at
  `cache_control` breakpoints (at most 4), on tool definitions (`params.tools`), `params.system`
  parts, messages or their content parts. The prompt renders tools, then system, then messages,
  and a breakpoint marks the end of the content block that carries it, at that block's token
  position in the prompt (not at the end of the ctxobs block around it). A breakpoint of this
  turn finds a cache entry at its own content block or at one of the 20 content blocks before
  it (the lookback that page describes: about 20 blocks before each explicit breakpoint); the
  entries are the previous turn's breakpoints whose prefix this turn repeats (`cache_control`
  itself is not part of the prefix), within their TTL (5 minutes, or 1 hour for `"ttl": "1h"`)
  and of at least 1,024 tokens (2,048 for Haiku models). The longest such entry is read. What
  this turn's last breakpoint of the minimum size covers beyond the read is written, at 1.25x the
  input price (2x up to the last 1-hour breakpoint); nothing after the last breakpoint is. A
  change of `tool_choice` or `thinking` keeps the tools and system entries only.

Token positions inside a ctxobs block are not recorded, only the block's count: they split the
block's count in proportion to each content block's own count with cl100k_base (the message's
framing with its first content block), so positions at block ends are exact and those inside a
block are estimates. A read's size is the position of the entry in the previous turn, where it
was written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ctxobs.hashing import canonical_json
from ctxobs.tokens import Counter, get_counter, message_tokens
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
ANTHROPIC_LOOKBACK_BLOCKS = 20
# Reported reads this far under the expected ones are put down to the lens's estimates (per-message
# token positions, counts of a tokenizer that is not Claude's), not to the provider.
ANTHROPIC_SHORTFALL_TOKENS = 64
ANTHROPIC_SHORTFALL_SHARE = 0.05
CACHE_CONTROL = "cache_control"
# Request parameters whose change leaves Anthropic's cached tools and system but not its messages.
ANTHROPIC_MESSAGE_PARAMS = ("tool_choice", "thinking")

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
    for m in map(_without_cache_control, messages):
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


def _without_cache_control(value: Any) -> Any:
    """VALUE (a message, a content part, a tool definition) without its `cache_control` nor
    its content parts': a breakpoint marks where to cache, it is not part of the prompt, and an
    incremental cache moves it from message to message on every turn."""
    if not isinstance(value, Mapping):
        return value
    content = value.get("content")
    if CACHE_CONTROL not in value and not isinstance(content, list):
        return value
    out = {k: v for k, v in value.items() if k != CACHE_CONTROL}
    if isinstance(content, list):
        out["content"] = [_without_cache_control(p) for p in content]
    return out


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a is b or canonical_json(_without_cache_control(a)) == canonical_json(_without_cache_control(b))


def _counter() -> Counter:
    return get_counter("cl100k_base")


def _message_weight(m: Mapping[str, Any]) -> int:
    """A message's share of its block's tokens: its own count (cl100k_base, framing included)."""
    return message_tokens(dict(_without_cache_control(m)), _counter())


def _part_text(part: Any) -> str:
    if isinstance(part, Mapping) and isinstance(part.get("text"), str):
        return str(part["text"])
    return canonical_json(_without_cache_control(part))


def _estimate_within(total: int, weights: Sequence[int], upto: int) -> int:
    """Tokens of the first UPTO of a block's items out of the block's TOTAL, in proportion to
    the items' WEIGHTS; exact at both ends of the block."""
    if upto <= 0:
        return 0
    if upto >= len(weights):
        return int(total)
    whole = sum(weights)
    if whole <= 0:
        return round(int(total) * upto / len(weights))
    return round(int(total) * sum(weights[:upto]) / whole)


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
    while m < len(pflat) and m < len(cflat) and _same(pflat[m][1], cflat[m][1]):
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
        tokens += _estimate_within(int(prev.tokens[pb]), [_message_weight(x) for x in before_all], p_local)
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
    """An Anthropic `cache_control` breakpoint: the block it sits in (-1: in `params.system`, or
    on a tool definition with no tools block), its TTL, the content block it ends (counted in
    Anthropic's render order: tool definitions, system parts, message content parts) and the
    prompt's tokens up to and including that content block."""

    position: int
    ttl_s: float
    unit: int = 0
    tokens: int = 0


def _ttl(control: Any) -> float | None:
    if not isinstance(control, Mapping):
        return None
    return ANTHROPIC_LONG_TTL_S if str(control.get("ttl", "")) == "1h" else ANTHROPIC_TTL_S


class _Rendered:
    """A turn as Anthropic renders it, one entry per content block: tool definitions (from
    `params.tools`, in the kind=tools block's tokens), `params.system`'s parts, then every
    message of the other blocks in block order, one entry per content part (a message with
    text content is one). Token positions are exact at the ends of blocks; inside a block they
    split the block's tokens in proportion to each content block's own count (see
    `_estimate_within`), computed only for the blocks a position falls inside."""

    def __init__(self, turn: TurnBlocks) -> None:
        self.keys: list[str] = []
        self._group: list[int] = []  # the token group of each content block
        self._weight: list[tuple[str, Any, int]] = []  # what to count for its share of the group
        self.controls: list[tuple[int, float, int]] = []  # (content block, ttl, block position)
        self._tokens: list[int] = []  # per group
        self._units: list[list[int]] = []  # per group
        self.messages_from = 0  # the first content block after tools and system
        tools_at = [b for b in range(len(turn.hashes)) if turn.kinds[b] == "tools"]
        definitions = turn.params.get("tools")
        definitions = list(definitions) if isinstance(definitions, list | tuple) else []
        for i, b in enumerate(tools_at):
            if i == 0 and definitions:
                self._group_of(int(turn.tokens[b]))
                for d in definitions:
                    self._add(canonical_json(_without_cache_control(d)), ("tool", d, 0), b, _ttl(_get(d)))
            else:
                self._group_of(int(turn.tokens[b]))
                self._add("block:" + turn.hashes[b], ("block", None, 0), b, None)
        if definitions and not tools_at:
            self._group_of(0)  # tokens not recorded: the definitions take no room
            for d in definitions:
                self._add(canonical_json(_without_cache_control(d)), ("tool", d, 0), -1, _ttl(_get(d)))
        system = turn.params.get("system")
        if system:
            self._group_of(0)
            parts = system if isinstance(system, list) else [system]
            for p in parts:
                self._add(
                    "system:" + canonical_json(_without_cache_control(p)), ("part", p, 0), -1, _ttl(_get(p))
                )
        leading = True
        for b in range(len(turn.hashes)):
            if turn.kinds[b] == "tools":
                continue
            if leading and turn.kinds[b] != "system":
                leading = False
                self.messages_from = len(self.keys)
            self._group_of(int(turn.tokens[b]))
            messages = turn.messages.get(b, ())
            if not messages:
                self._add("block:" + turn.hashes[b], ("block", None, 0), b, None)
            for m in messages:
                self._add_message(m, b)
        if leading:
            self.messages_from = len(self.keys)
        self._starts: list[int] = []
        acc = 0
        for t in self._tokens:
            self._starts.append(acc)
            acc += t
        self.total = acc
        self._estimates: dict[int, list[int]] = {}

    def _group_of(self, tokens: int) -> None:
        self._tokens.append(tokens)
        self._units.append([])

    def _add(self, key: str, weight: tuple[str, Any, int], position: int, ttl: float | None) -> None:
        u = len(self.keys)
        self.keys.append(key)
        self._group.append(len(self._tokens) - 1)
        self._units[-1].append(u)
        self._weight.append(weight)
        if ttl is not None:
            self.controls.append((u, ttl, position))

    def _add_message(self, m: Mapping[str, Any], position: int) -> None:
        content = m.get("content")
        frame = canonical_json({k: v for k, v in _without_cache_control(m).items() if k != "content"})
        own = _ttl(m.get(CACHE_CONTROL))
        if not isinstance(content, list) or not content:
            self._add(
                "message:" + canonical_json(_without_cache_control(m)), ("message", m, 0), position, own
            )
            return
        for i, part in enumerate(content):
            ttl = _ttl(_get(part))
            if i == len(content) - 1 and own is not None:
                ttl = max(ttl or 0.0, own)
            key = f"part:{frame}:{i}:" + canonical_json(_without_cache_control(part))
            # The message's framing (role, ids) counts with its first content block.
            self._add(
                key, ("part", part, _message_weight({**m, "content": ""}) if i == 0 else 0), position, ttl
            )

    def end(self, u: int) -> int:
        """Tokens of the prompt up to and including content block U."""
        if u < 0:
            return 0
        g = self._group[u]
        units = self._units[g]
        local = u - units[0] + 1
        if local == len(units):
            return self._starts[g] + self._tokens[g]
        weights = self._estimates.get(g)
        if weights is None:
            weights = [self._unit_weight(x) for x in units]
            self._estimates[g] = weights
        return self._starts[g] + _estimate_within(self._tokens[g], weights, local)

    def _unit_weight(self, u: int) -> int:
        kind, value, extra = self._weight[u]
        if kind == "message":
            return _message_weight(value)
        if kind == "block":
            return 1
        return _counter().count_text(_part_text(value)) + extra

    def breakpoints(self) -> list[Breakpoint]:
        return [
            Breakpoint(position=pos, ttl_s=ttl, unit=u, tokens=self.end(u))
            for u, ttl, pos in self.controls[:ANTHROPIC_MAX_BREAKPOINTS]
        ]


def _get(value: Any) -> Any:
    return value.get(CACHE_CONTROL) if isinstance(value, Mapping) else None


def breakpoints(blocks: TurnBlocks) -> list[Breakpoint]:
    """Anthropic `cache_control` breakpoints of a turn (on tool definitions, `params.system`
    parts, messages or their content parts), in render order, at most four: each at the end of
    the content block that carries it."""
    return _Rendered(blocks).breakpoints()


def _shared_content_blocks(
    prev: _Rendered, cur: _Rendered, prev_params: Mapping[str, Any], cur_params: Mapping[str, Any]
) -> int:
    """How many leading content blocks CUR renders as PREV did."""
    n = 0
    while n < len(prev.keys) and n < len(cur.keys) and prev.keys[n] == cur.keys[n]:
        n += 1
    if any(
        canonical_json(prev_params.get(k)) != canonical_json(cur_params.get(k))
        for k in ANTHROPIC_MESSAGE_PARAMS
    ):
        n = min(n, prev.messages_from, cur.messages_from)
    return n


@dataclass(frozen=True, slots=True)
class Expected:
    cached: int  # tokens read from the cache
    written: int  # tokens written to the cache (Anthropic)
    write_long: bool  # some of them written with the 1-hour TTL
    note: str = ""
    written_long: int | None = None  # of WRITTEN, those with the 1-hour TTL (None: all when write_long)

    @property
    def long_tokens(self) -> int:
        if self.written_long is not None:
            return min(self.written_long, self.written)
        return self.written if self.write_long else 0


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
    whole: bool = False,
) -> Expected:
    """The cache reads (and writes) the provider's rules expect for CUR after PREV, GAP_S
    seconds apart, given their shared PREFIX. IGNORE_TTL gives what a prompt sent in time
    would have read; WHOLE what keeping the whole previous prompt as the prefix would have read
    (PREFIX is then the whole previous prompt). Reads never exceed the previous prompt."""
    if provider != ANTHROPIC:
        if prev is None:
            return Expected(0, 0, False)
        if not ignore_ttl and gap_s is not None and gap_s > openai_ttl(cur.params):
            return Expected(0, 0, False, f"{gap_s:.0f} s since the previous turn: past the cache's lifetime")
        cached = _openai_cached(min(prefix.tokens, sum(int(t) for t in prev.tokens)), prompt_tokens)
        note = "" if cached or not prefix.tokens else f"shared prefix under {OPENAI_MIN_TOKENS} tokens"
        return Expected(cached, 0, False, note)
    return _anthropic_expected(
        model=model,
        prev=prev,
        cur=cur,
        prompt_tokens=prompt_tokens,
        gap_s=gap_s,
        ignore_ttl=ignore_ttl,
        whole=whole,
    )


def _anthropic_expected(
    *,
    model: str,
    prev: TurnBlocks | None,
    cur: TurnBlocks,
    prompt_tokens: int,
    gap_s: float | None,
    ignore_ttl: bool,
    whole: bool,
) -> Expected:
    """Anthropic's rules: a breakpoint of this turn looks for a cache entry at its own content
    block and at the ANTHROPIC_LOOKBACK_BLOCKS before it; the entries are the previous turn's
    breakpoints (written or refreshed by it) whose prefix this turn repeats, alive (TTL) and of
    the model's minimum size. The longest such entry is read; what this turn's last cached
    breakpoint covers beyond the read is written (nothing after it)."""
    rendered = _Rendered(cur)
    mine = rendered.breakpoints()
    if not mine:
        return Expected(0, 0, False, "no cache_control breakpoints recorded")
    minimum = anthropic_min_tokens(model)
    read = 0
    notes: list[str] = []
    if prev is not None:
        before = _Rendered(prev)
        shared = (
            len(before.keys) if whole else _shared_content_blocks(before, rendered, prev.params, cur.params)
        )
        theirs = before.breakpoints()
        for bp in theirs:
            if bp.unit >= shared:
                continue
            if not any(0 <= c.unit - bp.unit <= ANTHROPIC_LOOKBACK_BLOCKS for c in mine):
                notes.append(
                    f"the previous turn's breakpoint is over {ANTHROPIC_LOOKBACK_BLOCKS} blocks back"
                )
                continue
            if not ignore_ttl and gap_s is not None and gap_s > bp.ttl_s:
                notes.append(
                    f"{gap_s:.0f} s since the previous turn: past the {bp.ttl_s / 60:.0f}-minute TTL"
                )
                continue
            if bp.tokens < minimum:
                notes.append(f"the previous turn's breakpoint is under {minimum:,} tokens")
                continue
            read = max(read, bp.tokens)
        if theirs and not read and not notes:
            notes.append("the prompt changed before the previous turn's breakpoints")
        # The previous turn's breakpoints lie within its prompt; the reported prompt bounds the rest.
        read = min(read, before.total)
        if prompt_tokens > 0:
            read = min(read, prompt_tokens)
    cached_at = [c for c in mine if c.tokens >= minimum]
    top = max((c.tokens for c in cached_at), default=0)
    long_top = max((c.tokens for c in cached_at if c.ttl_s > ANTHROPIC_TTL_S), default=0)
    written = max(0, top - read)
    written_long = max(0, min(long_top, top) - read)
    if not cached_at:
        notes.append(f"no breakpoint of this turn reaches {minimum:,} tokens")
    note = "" if read else (notes[-1] if notes else "")
    return Expected(read, written, written_long > 0, note, written_long)


def read_shortfall(*, provider: str, expected_cached: int, reported_cached: int | None) -> bool:
    """Whether the provider read less from its cache than its rules allow, beyond what the
    lens's own estimates explain: one 128-token step for OpenAI; for Anthropic, whose reads the
    lens places with per-message estimates, ANTHROPIC_SHORTFALL_TOKENS or
    ANTHROPIC_SHORTFALL_SHARE of the expected read, whichever is more."""
    if reported_cached is None:
        return False
    if provider == ANTHROPIC:
        slack = max(ANTHROPIC_SHORTFALL_TOKENS, ANTHROPIC_SHORTFALL_SHARE * expected_cached)
        return expected_cached - reported_cached > slack
    return reported_cached + OPENAI_STEP <= expected_cached


def writes_beyond(*, expected: Expected, reported_written: int | None) -> int:
    """Tokens the provider reports writing to its cache beyond what its rules lead to expect
    (a prefix rewritten because the previous entry was not found); 0 when not reported."""
    if reported_written is None:
        return 0
    return max(0, reported_written - expected.written)


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
    reported_written: int | None = None,
) -> Cost:
    """The turn's cost in dollars with no cache, with the expected cache, with the cache the
    provider reported (None when it reported no reads; its reported writes, else the expected
    ones) and the money lost to misses: the tokens the whole previous prompt could have had read
    from the cache (POTENTIAL) that were not (reported, else expected), at the difference between
    the input and cached input prices. 1-hour writes cost twice the input price."""
    m = 1_000_000.0
    out = completion_tokens * price.output / m

    def with_cache(read: int, written: int, long: int) -> float:
        read = max(0, min(read, prompt_tokens))
        written = max(0, min(written, prompt_tokens - read))
        long = min(long, written)
        plain = max(0, prompt_tokens - read - written)
        writes = (written - long) * price.cache_write + long * 2 * price.input
        return (plain * price.input + read * price.cached_input + writes) / m + out

    no_cache = prompt_tokens * price.input / m + out
    exp = with_cache(expected.cached, expected.written, expected.long_tokens)
    actual = None
    if reported_cached is not None:
        written = reported_written if reported_written is not None else expected.written
        actual = with_cache(reported_cached, written, min(expected.long_tokens, written))
    basis = reported_cached if reported_cached is not None else expected.cached
    lost_tokens = max(0, min(potential.cached, prompt_tokens) - basis)
    lost = lost_tokens * max(0.0, price.input - price.cached_input) / m
    return Cost(no_cache=no_cache, expected=exp, actual=actual, lost=lost)


def gap_seconds(prev_ts: datetime | None, ts: datetime) -> float | None:
    return (ts - prev_ts).total_seconds() if prev_ts is not None else None
