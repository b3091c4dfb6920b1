"""The snapshot wire contract, defined once.

The SDK builds snapshots in this shape and the ingest API validates every item with
`validate_snapshot()`. Standard library only: the server and any third-party sender
share exactly these rules, limits and field names.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeGuard

WIRE_VERSION = 1


@dataclass(frozen=True)
class Limits:
    """Enforced limits of the ingest API. Documented in the README and the OpenAPI schema."""

    max_items_per_batch: int = 500
    max_body_bytes: int = 16 * 1024 * 1024  # after gzip decompression too
    max_blocks_per_snapshot: int = 200
    max_chars_per_block: int = 500_000
    max_messages_per_block: int = 5_000
    max_list_items: int = 1_000  # compression events, recall items, validation outcomes each
    max_tags: int = 64
    max_id_chars: int = 256
    max_text_chars: int = 2_000  # previews, validation messages, tag values
    max_block_tokens: int = 10_000_000  # a block's token count (200 of them still fit a 32-bit total)
    max_int: int = 2**31 - 1  # turns, windows, token counts, attempts: stored as 32-bit integers


LIMITS = Limits()

BLOCK_KINDS = (
    "system",
    "tools",
    "constraints",
    "memory",
    "summary",
    "history",
    "retrieval",
    "tool_results",
    "user",
    "other",
)
MESSAGE_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
RECALL_CHANNELS = ("vector", "keyword", "structured", "hybrid", "other")
VALIDATION_LAYERS = ("structure", "semantic", "business")
COMPRESSION_STRATEGIES = (
    "drop_tool_output",
    "merge",
    "rolling_summary",
    "structural_trim",
    "externalize",
    "truncate",
    "other",
)

DEFAULT_RESERVE_FRACTION = 0.15


def default_reserve(context_window: int) -> int:
    """Safety margin kept free for the output and the compression call: 15% of the window."""
    return int(round(context_window * DEFAULT_RESERVE_FRACTION))


# One shared encoder: json.dumps() with options builds a new encoder on every call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
HASH_CHARS = 32  # 128 bits of sha256: content addresses are per project


def canonical_json(value: Any) -> str:
    return _CANONICAL.encode(value)


_SIMPLE_KEYS = frozenset(("role", "content", "name", "tool_call_id"))
_hash_memo: dict[tuple[Any, ...], str] = {}
_pair_memo: dict[tuple[str, str], str] = {}
_pair_memo_chars = 0
_PAIR_MEMO_MAX_CHARS = 50_000_000
_block_memo: dict[tuple[str, ...], str] = {}
_HASH_MEMO_MAX = 100_000


def message_hash(message: dict[str, Any]) -> str:
    """Content address of one message: sha256 of its canonical JSON.

    Plain text messages (the system prompt, memory, documents) repeat on every turn; they are
    memoised by value, which skips the JSON encoding that dominates hashing them.
    """
    if len(message) == 2:
        # {"role": str, "content": str}: the shape of nearly every repeated message.
        role, content = message.get("role"), message.get("content")
        if type(role) is str and type(content) is str:
            pair = (role, content)
            found = _pair_memo.get(pair)
            if found is None:
                global _pair_memo_chars
                text = _CANONICAL.encode(message).encode("utf-8", "surrogatepass")
                found = hashlib.sha256(text).hexdigest()[:HASH_CHARS]
                # The memo holds the texts themselves: bounded by their size as well as their number.
                if len(_pair_memo) >= _HASH_MEMO_MAX or _pair_memo_chars > _PAIR_MEMO_MAX_CHARS:
                    _pair_memo.clear()
                    _pair_memo_chars = 0
                _pair_memo[pair] = found
                _pair_memo_chars += len(content)
            return found
    memo_key: tuple[Any, ...] | None = None
    if message.keys() <= _SIMPLE_KEYS and isinstance(message.get("content"), str | None):
        memo_key = (
            message.get("role"), message.get("content"), message.get("name"), message.get("tool_call_id"),
            len(message),
        )
        hit = _hash_memo.get(memo_key)
        if hit is not None:
            return hit
    # surrogatepass: an unpaired surrogate (binary decoded with surrogateescape) hashes as
    # itself; valid text hashes exactly as with plain UTF-8.
    h = hashlib.sha256(_CANONICAL.encode(message).encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    if memo_key is not None:
        if len(_hash_memo) >= _HASH_MEMO_MAX:
            _hash_memo.clear()
        _hash_memo[memo_key] = h
    return h


def block_hashes(messages: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """(content address of a block, content addresses of its messages in order).

    A block is addressed by the sequence of its message addresses, so a history block that
    gains one message per turn shares every earlier message with the previous turn.
    """
    mh = [message_hash(m) for m in messages]
    key = tuple(mh)
    h = _block_memo.get(key)
    if h is None:
        h = hashlib.sha256("".join(mh).encode("ascii")).hexdigest()[:HASH_CHARS]
        if len(_block_memo) >= _HASH_MEMO_MAX:
            _block_memo.clear()
        _block_memo[key] = h
    return h, mh


def content_hash(messages: list[dict[str, Any]]) -> str:
    """Content address of a block (see block_hashes)."""
    return block_hashes(messages)[0]


def block_chars(messages: list[dict[str, Any]]) -> int:
    """Characters of a block's message text (content parts and tool-call arguments included)."""
    total = 0
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            total += len(c)
        elif isinstance(c, list):
            for part in c:
                if isinstance(part, dict):
                    t = part.get("text")
                    total += len(t) if isinstance(t, str) else len(canonical_json(part))
        calls = m.get("tool_calls")
        if calls:
            total += len(canonical_json(calls))
    return total


class _Errors:
    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def add(self, loc: tuple[Any, ...], msg: str, hint: str) -> None:
        self.items.append({"loc": list(loc), "msg": msg, "hint": hint})


def _is_int(v: Any) -> TypeGuard[int | float]:
    # JSON has one number type: 5.0 is the integer 5 (JSON Schema says so too), as some
    # encoders write whole floats.
    if isinstance(v, float):
        return v.is_integer()
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool)) and math.isfinite(v)


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


def _opt_str(
    obj: dict[str, Any], key: str, loc: tuple[Any, ...], err: _Errors, max_len: int, default: str = "",
    ident: bool = False,
) -> str:
    v = obj.get(key)
    if v is None:
        return default
    if not isinstance(v, str):
        err.add((*loc, key), f"must be a string, got {type(v).__name__}", f"send {key} as a JSON string")
        return default
    if ident:
        # Content is stored escaped when it holds these; an identifier is matched, joined and shown
        # as it is, so it must be plain text.
        problem = unstorable(v)
        if problem is not None:
            err.add((*loc, key), f"{problem}, which an identifier cannot hold",
                    f"remove control characters and invalid text from {key}")
            return default
    if len(v) > max_len:
        err.add((*loc, key), f"longer than {max_len} characters", f"shorten {key} to at most {max_len}")
        return v[:max_len]
    return v


def _req_str(obj: dict[str, Any], key: str, loc: tuple[Any, ...], err: _Errors, max_len: int) -> str:
    """A required identifier (non-empty, storable as it is)."""
    v = obj.get(key)
    if v is None or v == "":
        err.add((*loc, key), "field required", f"add a non-empty string {key!r}")
        return ""
    return _opt_str(obj, key, loc, err, max_len, ident=True)


def _opt_bool(obj: dict[str, Any], key: str, loc: tuple[Any, ...], err: _Errors, default: bool) -> bool:
    v = obj.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        err.add((*loc, key), "must be a boolean", f"send {key} as true or false")
        return default
    return v


def _opt_int(
    obj: dict[str, Any], key: str, loc: tuple[Any, ...], err: _Errors, minimum: int = 0,
    maximum: int = LIMITS.max_int,
) -> int | None:
    v = obj.get(key)
    if v is None:
        return None
    if not _is_int(v) or v < minimum or v > maximum:
        err.add((*loc, key), f"must be an integer from {minimum} to {maximum}",
                f"send {key} as a whole number from {minimum} to {maximum}")
        return None
    return int(v)


def _opt_num(obj: dict[str, Any], key: str, loc: tuple[Any, ...], err: _Errors) -> float | None:
    v = obj.get(key)
    if v is None:
        return None
    if not _is_num(v):
        err.add((*loc, key), "must be a finite number", f"send {key} as a JSON number")
        return None
    return float(v)


def _list(
    obj: dict[str, Any], key: str, loc: tuple[Any, ...], err: _Errors, max_items: int, limit_name: str
) -> list[Any]:
    v = obj.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        err.add((*loc, key), "must be a list", f"send {key} as a JSON array")
        return []
    if len(v) > max_items:
        err.add(
            (*loc, key),
            f"{len(v)} items exceed the limit {limit_name}={max_items}",
            f"send at most {max_items} items in {key}",
        )
        return []
    return v


def parse_ts(value: Any) -> datetime | None:
    """Parse an ISO 8601 timestamp; None unless it is timezone-aware."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        ts = datetime.fromisoformat(text)
    except ValueError:
        return None
    if ts.tzinfo is None or ts.utcoffset() is None:
        return None
    try:
        # In UTC: PostgreSQL refuses offsets beyond ±15:59 that ISO 8601 text may carry.
        return ts.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 moved out of range by its offset
        return None


def _message(m: Any, loc: tuple[Any, ...], err: _Errors) -> dict[str, Any] | None:
    if not isinstance(m, dict):
        err.add(loc, "must be an object", "send each message as {'role': ..., 'content': ...}")
        return None
    role = m.get("role")
    if role not in MESSAGE_ROLES:
        err.add(
            (*loc, "role"),
            f"unknown role {str(role)[:40]!r}",
            f"use one of: {', '.join(MESSAGE_ROLES)}",
        )
    content = m.get("content")
    if content is not None and not isinstance(content, str | list):
        err.add(
            (*loc, "content"),
            "must be a string, a list of content parts or null",
            "send the message content exactly as it went to the model",
        )
    calls = m.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        err.add((*loc, "tool_calls"), "must be a list", "send tool_calls as the provider's list of calls")
    for k in ("name", "tool_call_id"):
        if m.get(k) is not None and not isinstance(m.get(k), str):
            err.add((*loc, k), "must be a string", f"send {k} as a string")
    return m


# A server stores a string holding U+0000, or starting with this mark, escaped behind the mark
# (core.pgtext). Validation notes the blocks that need no such care, where it looks at every
# message anyway: a block is `verbatim` when its messages are {role, content} with such text.
STORE_ESCAPE = "\u241b"
_KIND_SET = frozenset(BLOCK_KINDS)
_ROLE_SET = frozenset(MESSAGE_ROLES)


def _block_fast(b: Any) -> dict[str, Any] | None:
    """The normalised block when B is plainly valid, else None and `_block` finds the errors.

    The common case (every field of the expected type and within limits) decides in one pass
    over the messages; anything unusual goes the full way, so the errors stay the same.
    """
    if type(b) is not dict:
        return None
    key = b.get("key")
    kind = b.get("kind")
    if kind is None or kind == "":
        kind = "other"
    msgs = b.get("messages")
    if (type(key) is not str or not key or len(key) > 128 or unstorable(key)
            or type(kind) is not str or kind not in _KIND_SET
            or type(msgs) is not list or len(msgs) > LIMITS.max_messages_per_block):
        return None
    chars = 0
    plain = True
    verbatim = True
    for m in msgs:
        if type(m) is not dict:
            return None
        role = m.get("role")
        if type(role) is not str or role not in _ROLE_SET:
            return None
        c = m.get("content")
        if type(c) is str:
            chars += len(c)
            if "\x00" in c or c[:1] == STORE_ESCAPE:
                verbatim = False
        elif c is not None:
            if type(c) is not list:
                return None
            plain = False
        if len(m) != 2 or "content" not in m:  # more than {role, content}
            verbatim = False
            calls = m.get("tool_calls")
            if calls is not None:
                if type(calls) is not list:
                    return None
                plain = False
            for k in ("name", "tool_call_id"):
                v = m.get(k)
                if v is not None and type(v) is not str:
                    return None
    if not plain:
        chars = block_chars(msgs)
        verbatim = False
    if chars > LIMITS.max_chars_per_block:
        return None
    tokens = b.get("tokens")
    if tokens is not None and (type(tokens) is not int or tokens < 0 or tokens > LIMITS.max_block_tokens):
        return None
    flags = []
    for k in ("estimated", "pinned", "compressed"):
        v = b.get(k)
        if v is None:
            v = False
        elif type(v) is not bool:
            return None
        flags.append(v)
    refs = b.get("refs")
    if refs is None:
        refs = []
    elif type(refs) is not list or len(refs) > LIMITS.max_list_items or any(type(r) is not str for r in refs):
        return None
    return {
        "key": key,
        "kind": kind,
        "messages": list(msgs),
        "tokens": tokens,
        "estimated": flags[0],
        "pinned": flags[1],
        "compressed": flags[2],
        "refs": refs,
        "chars": chars,
        "verbatim": verbatim,
    }


def _verbatim(messages: list[dict[str, Any]]) -> bool:
    """What `_block_fast` finds in passing: every message is {role, content} with no text a store
    has to escape (see STORE_ESCAPE)."""
    for m in messages:
        if len(m) != 2 or "content" not in m:
            return False
        c = m["content"]
        if c is not None and (type(c) is not str or "\x00" in c or c[:1] == STORE_ESCAPE):
            return False
    return True


def _block(b: Any, loc: tuple[Any, ...], err: _Errors) -> dict[str, Any] | None:
    fast = _block_fast(b)
    if fast is not None:
        return fast
    return _block_full(b, loc, err)


def _block_full(b: Any, loc: tuple[Any, ...], err: _Errors) -> dict[str, Any] | None:
    if not isinstance(b, dict):
        err.add(loc, "must be an object", "send each block as {'key': ..., 'kind': ..., 'messages': [...]}")
        return None
    key = _req_str(b, "key", loc, err, 128)
    kind = b.get("kind")
    if kind is None or kind == "":
        kind = "other"
    if not isinstance(kind, str) or kind not in BLOCK_KINDS:
        err.add((*loc, "kind"), f"unknown kind {str(kind)[:40]!r}", f"use one of: {', '.join(BLOCK_KINDS)}")
        kind = "other"
    raw_msgs = b.get("messages")
    if not isinstance(raw_msgs, list):
        err.add((*loc, "messages"), "field required: a list of messages", "send the block's messages as sent")
        raw_msgs = []
    if len(raw_msgs) > LIMITS.max_messages_per_block:
        err.add(
            (*loc, "messages"),
            f"{len(raw_msgs)} messages exceed the limit max_messages_per_block="
            f"{LIMITS.max_messages_per_block}",
            "split the block into several blocks",
        )
        raw_msgs = []
    msgs = [_message(m, (*loc, "messages", i), err) for i, m in enumerate(raw_msgs)]
    messages = [m for m in msgs if m is not None]
    chars = block_chars(messages)
    if chars > LIMITS.max_chars_per_block:
        err.add(
            (*loc, "messages"),
            f"{chars} characters exceed the limit max_chars_per_block={LIMITS.max_chars_per_block}",
            "truncate or externalise the block's content and send a reference instead",
        )
    tokens = _opt_int(b, "tokens", loc, err, maximum=LIMITS.max_block_tokens)
    refs = _list(b, "refs", loc, err, LIMITS.max_list_items, "max_list_items")
    if any(not isinstance(r, str) for r in refs):
        err.add(
            (*loc, "refs"), "must be a list of strings", "send each externalised original's id as a string"
        )
        refs = []
    return {
        "key": key,
        "kind": kind,
        "messages": messages,
        "tokens": tokens,
        "estimated": _opt_bool(b, "estimated", loc, err, False),
        "pinned": _opt_bool(b, "pinned", loc, err, False),
        "compressed": _opt_bool(b, "compressed", loc, err, False),
        "refs": refs,
        "chars": chars,
        "verbatim": _verbatim(messages),
    }


def _model(m: Any, loc: tuple[Any, ...], err: _Errors) -> dict[str, Any]:
    if not isinstance(m, dict):
        err.add(loc, "field required: an object", "send model as {'name': ..., 'context_window': ...}")
        return {"name": "", "context_window": 1, "reserve_tokens": 0, "encoding": "", "counts": "estimated"}
    name = _req_str(m, "name", loc, err, LIMITS.max_id_chars)
    window = m.get("context_window")
    if not _is_int(window) or window <= 0 or window > LIMITS.max_int:
        err.add(
            (*loc, "context_window"),
            "field required: a positive integer",
            "send the model's context window in tokens, e.g. 128000",
        )
        window = 1
    reserve = m.get("reserve_tokens")
    if reserve is None:
        reserve = default_reserve(int(window))
    elif not _is_int(reserve) or reserve < 0 or reserve >= window:
        err.add(
            (*loc, "reserve_tokens"),
            "must be an integer >= 0 and smaller than context_window",
            "omit it to use 15% of the window",
        )
        reserve = default_reserve(int(window))
    counts = m.get("counts")
    if counts not in (None, "exact", "estimated"):
        err.add((*loc, "counts"), "must be 'exact' or 'estimated'", "omit it if unsure")
        counts = None
    return {
        "name": name,
        "context_window": int(window),
        "reserve_tokens": int(reserve),
        "encoding": _opt_str(m, "encoding", loc, err, 64, ident=True),
        "counts": counts,
    }


def _compression(c: Any, loc: tuple[Any, ...], err: _Errors) -> dict[str, Any] | None:
    if not isinstance(c, dict):
        err.add(loc, "must be an object", "send each compression event as an object")
        return None
    items = _list(c, "items", loc, err, LIMITS.max_list_items, "max_list_items")
    return {
        "strategy": _req_str(c, "strategy", loc, err, 64),
        "block": _opt_str(c, "block", loc, err, 128, ident=True),
        "tokens_before": _opt_int(c, "tokens_before", loc, err),
        "tokens_after": _opt_int(c, "tokens_after", loc, err),
        "watermark": _opt_num(c, "watermark", loc, err),
        "items": [str(i)[: LIMITS.max_id_chars] for i in items],
        "ref": _opt_str(c, "ref", loc, err, LIMITS.max_text_chars),
    }


def _recall(r: Any, loc: tuple[Any, ...], err: _Errors) -> dict[str, Any] | None:
    if not isinstance(r, dict):
        err.add(loc, "must be an object", "send each recall item as an object")
        return None
    channel = r.get("channel")
    if channel is None or channel == "":
        channel = "other"
    if not isinstance(channel, str) or channel not in RECALL_CHANNELS:
        err.add(
            (*loc, "channel"),
            f"unknown channel {str(channel)[:40]!r}",
            f"use one of: {', '.join(RECALL_CHANNELS)}",
        )
        channel = "other"
    return {
        "memory_id": _req_str(r, "memory_id", loc, err, LIMITS.max_id_chars),
        "channel": channel,
        "score": _opt_num(r, "score", loc, err),
        "rank": _opt_int(r, "rank", loc, err),
        "injected": _opt_bool(r, "injected", loc, err, False),
        "stale": _opt_bool(r, "stale", loc, err, False),
        "conflicting": _opt_bool(r, "conflicting", loc, err, False),
        "block": _opt_str(r, "block", loc, err, 128, ident=True),
        "preview": _opt_str(r, "preview", loc, err, LIMITS.max_text_chars),
    }


def _validation(v: Any, loc: tuple[Any, ...], err: _Errors) -> dict[str, Any] | None:
    if not isinstance(v, dict):
        err.add(loc, "must be an object", "send each validation outcome as an object")
        return None
    layer = v.get("layer")
    if layer not in VALIDATION_LAYERS:
        err.add(
            (*loc, "layer"),
            f"unknown layer {str(layer)[:40]!r}",
            f"use one of: {', '.join(VALIDATION_LAYERS)}",
        )
        layer = "structure"
    passed = v.get("passed")
    if not isinstance(passed, bool):
        err.add((*loc, "passed"), "field required: a boolean", "send passed as true or false")
        passed = False
    attempt = _opt_int(v, "attempt", loc, err, minimum=1)
    return {
        "layer": layer,
        "check": _opt_str(v, "check", loc, err, 128, ident=True),
        "passed": passed,
        "code": _opt_str(v, "code", loc, err, 128, ident=True),
        "message": _opt_str(v, "message", loc, err, LIMITS.max_text_chars),
        "attempt": attempt or 1,
    }


def _output(o: Any, loc: tuple[Any, ...], err: _Errors) -> dict[str, Any] | None:
    if o is None:
        return None
    if not isinstance(o, dict):
        err.add(loc, "must be an object", "send output as {'text': ..., 'usage': {...}}")
        return None
    text = o.get("text")
    if text is not None and not isinstance(text, str):
        err.add((*loc, "text"), "must be a string or null", "send the model's reply text")
        text = None
    if isinstance(text, str) and len(text) > LIMITS.max_chars_per_block:
        err.add(
            (*loc, "text"),
            f"longer than the limit max_chars_per_block={LIMITS.max_chars_per_block}",
            "truncate the output text",
        )
    calls = o.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        err.add((*loc, "tool_calls"), "must be a list", "send the reply's tool calls as a list")
        calls = None
    raw_usage = o.get("usage")
    usage: dict[str, int] = {}
    if raw_usage is not None:
        if not isinstance(raw_usage, dict):
            err.add((*loc, "usage"), "must be an object", "send the provider's usage object")
        else:
            for k in ("prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens"):
                val = _opt_int(raw_usage, k, (*loc, "usage"), err)
                if val is not None:
                    usage[k] = val
    return {
        "text": text,
        "tool_calls": calls or [],
        "finish_reason": _opt_str(o, "finish_reason", loc, err, 64),
        "usage": usage,
        "latency_ms": _opt_num(o, "latency_ms", loc, err),
    }


def validate_snapshot(item: Any, index: int = 0) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Check one wire snapshot; return (normalised snapshot, []) or (None, field errors).

    Each error is {"loc": [...], "msg": ..., "hint": ...}; `loc` starts at the batch
    ("snapshots", index, ...), so a sender can find the offending field.
    """
    err = _Errors()
    loc: tuple[Any, ...] = ("snapshots", index)
    if not isinstance(item, dict):
        err.add(loc, "must be an object", "send each snapshot as a JSON object")
        return None, err.items
    raw_id = item.get("snapshot_id")
    snapshot_id = ""
    try:
        snapshot_id = str(uuid.UUID(str(raw_id))) if raw_id is not None else ""
    except ValueError:
        pass
    if not snapshot_id:
        err.add((*loc, "snapshot_id"), "field required: a UUID", "generate one with uuid4() per snapshot")
    session_id = _req_str(item, "session_id", loc, err, LIMITS.max_id_chars)
    turn = item.get("turn")
    if not _is_int(turn) or turn < 0 or turn > 2**31 - 1:
        err.add((*loc, "turn"), "field required: an integer >= 0", "send the call's index in its session")
        turn = 0
    ts = parse_ts(item.get("ts"))
    if ts is None:
        err.add(
            (*loc, "ts"),
            "field required: an ISO 8601 timestamp with a timezone",
            "send e.g. 2026-12-02T08:15:03.120Z",
        )
    model = _model(item.get("model"), (*loc, "model"), err)
    params = item.get("params")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        err.add((*loc, "params"), "must be an object", "send the request parameters as an object")
        params = {}
    raw_blocks = item.get("blocks")
    blocks: list[dict[str, Any]] = []
    if not isinstance(raw_blocks, list) or not raw_blocks:
        err.add(
            (*loc, "blocks"), "field required: a non-empty list", "send the blocks of the prompt in order"
        )
    elif len(raw_blocks) > LIMITS.max_blocks_per_snapshot:
        err.add(
            (*loc, "blocks"),
            f"{len(raw_blocks)} blocks exceed the limit "
            f"max_blocks_per_snapshot={LIMITS.max_blocks_per_snapshot}",
            "merge small blocks of the same kind",
        )
    else:
        for i, b in enumerate(raw_blocks):
            nb = _block(b, (*loc, "blocks", i), err)
            if nb is not None:
                blocks.append(nb)
    compression = [
        c
        for i, raw in enumerate(_list(item, "compression", loc, err, LIMITS.max_list_items, "max_list_items"))
        if (c := _compression(raw, (*loc, "compression", i), err)) is not None
    ]
    recall = [
        r
        for i, raw in enumerate(_list(item, "recall", loc, err, LIMITS.max_list_items, "max_list_items"))
        if (r := _recall(raw, (*loc, "recall", i), err)) is not None
    ]
    validation = [
        v
        for i, raw in enumerate(_list(item, "validation", loc, err, LIMITS.max_list_items, "max_list_items"))
        if (v := _validation(raw, (*loc, "validation", i), err)) is not None
    ]
    output = _output(item.get("output"), (*loc, "output"), err)
    tags = item.get("tags")
    if tags is None:
        tags = {}
    if not isinstance(tags, dict):
        err.add((*loc, "tags"), "must be an object of string values", "send tags as {'env': 'prod'}")
        tags = {}
    elif len(tags) > LIMITS.max_tags:
        err.add(
            (*loc, "tags"), f"{len(tags)} tags exceed the limit max_tags={LIMITS.max_tags}", "send fewer tags"
        )
        tags = {}
    elif any(not isinstance(v, str | int | float | bool) for v in tags.values()):
        bad = next(k for k, v in tags.items() if not isinstance(v, str | int | float | bool))
        err.add((*loc, "tags", bad), "must be a string (or a number or boolean, stored as text)",
                "send each tag value as a string")
        tags = {}
    else:
        tags = {str(k)[:128]: str(v)[: LIMITS.max_text_chars] for k, v in tags.items()}
    retries = _opt_int(item, "retries", loc, err) or 0
    fallback_used = _opt_bool(item, "fallback_used", loc, err, False)
    agent = _opt_str(item, "agent", loc, err, LIMITS.max_id_chars, ident=True)
    if err.items:
        return None, err.items
    return {
        "snapshot_id": snapshot_id,
        "session_id": session_id,
        "turn": int(turn),
        "agent": agent,
        "ts": ts,
        "model": model,
        "params": params,
        "blocks": blocks,
        "compression": compression,
        "recall": recall,
        "validation": validation,
        "output": output,
        "tags": tags,
        "retries": retries,
        "fallback_used": fallback_used,
    }, []


def limits_doc() -> dict[str, int]:
    return {k: getattr(LIMITS, k) for k in LIMITS.__dataclass_fields__}


# JSON Schema of one snapshot, published in the OpenAPI document of the ingest API. It states what
# validate_snapshot() accepts, field by field: null stands for an absent optional field.
# Two rules it cannot state are checked by validate_snapshot() alone: reserve_tokens below
# context_window, and a block's characters within max_chars_per_block.
_NO_NUL = "^[^\\u0000]*$"  # identifiers; content may hold U+0000 (stored escaped)


def _ident(max_len: int, *, required: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "maxLength": max_len, "pattern": _NO_NUL}
    if required:
        return {**schema, "minLength": 1}
    return {"type": ["string", "null"], "maxLength": max_len, "pattern": _NO_NUL}


def _opt(type_: str, **kw: Any) -> dict[str, Any]:
    return {"type": [type_, "null"], **kw}


def _count(maximum: int = LIMITS.max_int, minimum: int = 0, **kw: Any) -> dict[str, Any]:
    return _opt("integer", minimum=minimum, maximum=maximum, **kw)


def _events(item: dict[str, Any]) -> dict[str, Any]:
    return _opt("array", maxItems=LIMITS.max_list_items, items=item)


_MESSAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"enum": list(MESSAGE_ROLES)},
        "content": {"type": ["string", "array", "null"]},
        "name": _opt("string"),
        "tool_call_id": _opt("string"),
        "tool_calls": _opt("array"),
    },
}
SNAPSHOT_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["snapshot_id", "session_id", "turn", "ts", "model", "blocks"],
    "properties": {
        "snapshot_id": {"type": "string", "format": "uuid", "description": "idempotency key"},
        "session_id": _ident(LIMITS.max_id_chars, required=True),
        "turn": {"type": "integer", "minimum": 0, "maximum": LIMITS.max_int},
        "agent": _ident(LIMITS.max_id_chars),
        "ts": {"type": "string", "format": "date-time", "description": "with a UTC offset"},
        "model": {
            "type": "object",
            "required": ["name", "context_window"],
            "properties": {
                "name": _ident(LIMITS.max_id_chars, required=True),
                "context_window": {"type": "integer", "minimum": 1, "maximum": LIMITS.max_int},
                "reserve_tokens": _count(description="smaller than context_window; default: 15% of it"),
                "encoding": _ident(64),
                "counts": {"enum": ["exact", "estimated", None]},
            },
        },
        "params": _opt("object"),
        "blocks": {
            "type": "array",
            "minItems": 1,
            "maxItems": LIMITS.max_blocks_per_snapshot,
            "items": {
                "type": "object",
                "required": ["key", "messages"],
                "properties": {
                    "key": _ident(128, required=True),
                    "kind": {"enum": [*BLOCK_KINDS, "", None], "description": "default: other"},
                    "messages": {"type": "array", "maxItems": LIMITS.max_messages_per_block,
                                 "items": _MESSAGE_SCHEMA},
                    "tokens": _count(LIMITS.max_block_tokens, description="omit to have the server count it"),
                    "estimated": _opt("boolean"),
                    "pinned": _opt("boolean"),
                    "compressed": _opt("boolean"),
                    "refs": _opt("array", maxItems=LIMITS.max_list_items, items={"type": "string"}),
                },
            },
        },
        "compression": _events({
            "type": "object",
            "required": ["strategy"],
            "properties": {
                "strategy": _ident(64, required=True),
                "block": _ident(128),
                "tokens_before": _count(),
                "tokens_after": _count(),
                "watermark": _opt("number"),
                "items": _opt("array", maxItems=LIMITS.max_list_items),
                "ref": _opt("string", maxLength=LIMITS.max_text_chars),
            },
        }),
        "recall": _events({
            "type": "object",
            "required": ["memory_id"],
            "properties": {
                "memory_id": _ident(LIMITS.max_id_chars, required=True),
                "channel": {"enum": [*RECALL_CHANNELS, "", None]},
                "score": _opt("number"),
                "rank": _count(),
                "injected": _opt("boolean"),
                "stale": _opt("boolean"),
                "conflicting": _opt("boolean"),
                "block": _ident(128),
                "preview": _opt("string", maxLength=LIMITS.max_text_chars),
            },
        }),
        "validation": _events({
            "type": "object",
            "required": ["layer", "passed"],
            "properties": {
                "layer": {"enum": list(VALIDATION_LAYERS)},
                "passed": {"type": "boolean"},
                "check": _ident(128),
                "code": _ident(128),
                "message": _opt("string", maxLength=LIMITS.max_text_chars),
                "attempt": _count(minimum=1),
            },
        }),
        "output": _opt("object", properties={
            "text": _opt("string", maxLength=LIMITS.max_chars_per_block),
            "tool_calls": _opt("array"),
            "finish_reason": _opt("string", maxLength=64),
            "usage": _opt("object", properties={
                k: _count() for k in ("prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens")
            }),
            "latency_ms": _opt("number"),
        }),
        "tags": _opt("object", maxProperties=LIMITS.max_tags,
                     additionalProperties={"type": ["string", "number", "boolean"]}),
        "retries": _count(),
        "fallback_used": _opt("boolean"),
    },
}


# --- shared policy -----------------------------------------------------------------------
# How a snapshot is read, the same in the SDK, ingest, the pages and alerts: the usable window,
# the tiers and the names of repeated block keys. One copy each, so the watermark an agent computes
# is the one the dashboard shows and the one an alert fires on.

TIERS = ("ok", "warn", "compress", "force", "break")
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


def tier_for(
    watermark: float, thresholds: tuple[float, float, float, float] = DEFAULT_TIER_THRESHOLDS
) -> str:
    """Tier of a watermark: ok < warn < compress < force < break (thresholds are fractions)."""
    warn, compress, force, brk = thresholds
    if watermark >= brk:
        return "break"
    if watermark >= force:
        return "force"
    if watermark >= compress:
        return "compress"
    if watermark >= warn:
        return "warn"
    return "ok"


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
