"""The validator of the wire contract: one snapshot in, its normalised form or field errors out.

The SDK runs it before sending and the ingest API on every item. It enforces the structures of
`ctxobs.wire` with the same constants; tests/ctxobs/test_wire_contract.py probes every field of
the generated JSON Schema against it. Standard library only.

One module for one job, a little over the usual size: the one-pass check of a block
(`_block_fast`, the ingest hot path) must accept exactly what the full check accepts, so the two
stay side by side (tests/ingest/test_block_validation.py holds them together).
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypeGuard, cast

from ctxobs.hashing import block_chars
from ctxobs.wire import (
    BLOCK_HASH_PATTERN,
    BLOCK_KINDS,
    COMPRESSION_SOURCES,
    KEY_CHARS,
    LIMITS,
    MESSAGE_ROLES,
    NAME_CHARS,
    RECALL_CHANNELS,
    STORE_ESCAPE,
    TOKEN_COUNTS,
    VALIDATION_LAYERS,
    Block,
    BlockKind,
    CompressionEvent,
    CompressionSource,
    FieldError,
    Model,
    Output,
    RecallChannel,
    RecallItem,
    Snapshot,
    TokenCounts,
    Usage,
    ValidationLayer,
    ValidationOutcome,
    WireMessage,
    deeper_than,
    default_reserve,
    unstorable,
)

Loc = tuple[str | int, ...]
Obj = Mapping[str, Any]


class _Errors:
    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[FieldError] = []

    def add(self, loc: Loc, msg: str, hint: str) -> None:
        self.items.append({"loc": list(loc), "msg": msg, "hint": hint})


# Levels left below each free-form value, the snapshot being level 1 (LIMITS.max_depth).
_PARAMS_LEVELS = LIMITS.max_depth - 1  # snapshot > params
_MESSAGE_LEVELS = LIMITS.max_depth - 4  # snapshot > blocks > block > messages > message
_OUTPUT_CALLS_LEVELS = LIMITS.max_depth - 2  # snapshot > output > tool_calls
_COMPRESSION_ITEMS_LEVELS = LIMITS.max_depth - 3  # snapshot > compression > event > items
_TOO_DEEP = (f"arrays and objects nested more than the limit max_depth={LIMITS.max_depth} levels deep "
             "(counted from the snapshot)")
_TOO_DEEP_HINT = "flatten the structure, or send a deep value as a JSON string"


def _is_int(v: Any) -> TypeGuard[int | float]:
    # JSON has one number type: 5.0 is the integer 5 (JSON Schema says so too), as some
    # encoders write whole floats.
    if isinstance(v, float):
        return v.is_integer()
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> TypeGuard[int | float]:
    return (isinstance(v, int | float) and not isinstance(v, bool)) and math.isfinite(v)


def _opt_str(
    obj: Obj, key: str, loc: Loc, err: _Errors, max_len: int, default: str = "", ident: bool = False,
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


def _req_str(obj: Obj, key: str, loc: Loc, err: _Errors, max_len: int) -> str:
    """A required identifier (non-empty, storable as it is)."""
    v = obj.get(key)
    if v is None or v == "":
        err.add((*loc, key), "field required", f"add a non-empty string {key!r}")
        return ""
    return _opt_str(obj, key, loc, err, max_len, ident=True)


def _opt_bool(obj: Obj, key: str, loc: Loc, err: _Errors, default: bool) -> bool:
    v = obj.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        err.add((*loc, key), "must be a boolean", f"send {key} as true or false")
        return default
    return v


def _opt_int(
    obj: Obj, key: str, loc: Loc, err: _Errors, minimum: int = 0, maximum: int = LIMITS.max_int,
) -> int | None:
    v = obj.get(key)
    if v is None:
        return None
    if not _is_int(v) or v < minimum or v > maximum:
        err.add((*loc, key), f"must be an integer from {minimum} to {maximum}",
                f"send {key} as a whole number from {minimum} to {maximum}")
        return None
    return int(v)


def _opt_num(obj: Obj, key: str, loc: Loc, err: _Errors) -> float | None:
    v = obj.get(key)
    if v is None:
        return None
    if not _is_num(v):
        err.add((*loc, key), "must be a finite number", f"send {key} as a JSON number")
        return None
    return float(v)


def _list(obj: Obj, key: str, loc: Loc, err: _Errors, max_items: int, limit_name: str) -> list[Any]:
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


def _message(m: Any, loc: Loc, err: _Errors) -> WireMessage | None:
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
    for k, v in m.items():
        if isinstance(v, dict | list) and deeper_than(v, _MESSAGE_LEVELS - 1):
            err.add((*loc, k), _TOO_DEEP, _TOO_DEEP_HINT)
            return None  # left out of the block's measures, which walk it
    # Passed on as sent: a message is stored and replayed exactly as it went to the model.
    return cast(WireMessage, m)


_KIND_SET = frozenset(BLOCK_KINDS)
_ROLE_SET = frozenset(MESSAGE_ROLES)


def _block_fast(b: Any) -> Block | None:
    """The normalised block when B is plainly valid, else None and `_block_full` finds the errors.

    The common case (every field of the expected type and within limits) decides in one pass
    over the messages; anything unusual goes the full way, so the errors stay the same.
    """
    if type(b) is not dict:
        return None
    key = b.get("key")
    kind = b.get("kind")
    if kind is None or kind == "":
        kind = "other"
    if (type(key) is not str or not key or len(key) > KEY_CHARS or unstorable(key)
            or type(kind) is not str or kind not in _KIND_SET):
        return None
    msgs = b.get("messages")
    if msgs is None and "messages" not in b:
        return _block_by_hash_fast(b, key, kind)
    if type(msgs) is not list or len(msgs) > LIMITS.max_messages_per_block or "hash" in b:
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
        nested = False
        if type(c) is str:
            chars += len(c)
            if "\x00" in c or c[:1] == STORE_ESCAPE:
                verbatim = False
        elif c is not None:
            if type(c) is not list:
                return None
            plain = False
            nested = True
        if len(m) != 2 or "content" not in m:  # more than {role, content}
            nested = True
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
        if nested and deeper_than(m, _MESSAGE_LEVELS):
            return None
    if not plain:
        chars = block_chars(msgs)
        verbatim = False
    if chars > LIMITS.max_chars_per_block:
        return None
    tokens = b.get("tokens")
    if tokens is not None and (type(tokens) is not int or tokens < 0 or tokens > LIMITS.max_block_tokens):
        return None
    return _block_rest_fast(b, key, kind, list(msgs), None, tokens, chars, verbatim)


def _block_by_hash_fast(b: dict[str, Any], key: str, kind: str) -> Block | None:
    """`_block_fast` for a block sent as its content address: a hash, a token count, no messages."""
    h = b.get("hash")
    tokens = b.get("tokens")
    if (type(h) is not str or _HASH_RE.fullmatch(h) is None
            or type(tokens) is not int or tokens < 0 or tokens > LIMITS.max_block_tokens):
        return None
    return _block_rest_fast(b, key, kind, [], h, tokens, 0, True)


def _block_rest_fast(
    b: dict[str, Any], key: str, kind: str, messages: list[WireMessage], h: str | None, tokens: int | None,
    chars: int, verbatim: bool,
) -> Block | None:
    """The fields every block has besides its content, checked the fast way; the normalised block."""
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
    block: Block = {
        "key": key,
        "kind": cast(BlockKind, kind),
        "messages": messages,
        "hash": h,
        "tokens": tokens,
        "estimated": flags[0],
        "pinned": flags[1],
        "compressed": flags[2],
        "refs": refs,
        "chars": chars,
        "verbatim": verbatim,
    }
    return block


def _verbatim(messages: list[WireMessage]) -> bool:
    """What `_block_fast` finds in passing: every message is {role, content} with no text a store
    has to escape (see STORE_ESCAPE)."""
    for m in messages:
        if len(m) != 2 or "content" not in m:
            return False
        c = m["content"]
        if c is not None and (type(c) is not str or "\x00" in c or c[:1] == STORE_ESCAPE):
            return False
    return True


class CheckedBlock:
    """A block already checked by `block_checked` (the server checks a block whose bytes it saw
    before only once): `validate_snapshot` takes its normalised form as it is. Nothing may change
    it: one object stands for the same bytes in every snapshot that sends them."""

    __slots__ = ("block",)

    def __init__(self, block: Block) -> None:
        self.block = block


def block_checked(b: Any) -> Block | None:
    """Block B normalised, when it passes the one-pass check of the usual case (every field of
    the expected type and within limits, its messages nested no deeper than a message may be);
    None otherwise, and `validate_snapshot` then checks it the full way and words its errors."""
    return _block_fast(b)


def _block(b: Any, loc: Loc, err: _Errors) -> Block | None:
    if type(b) is CheckedBlock:
        return b.block
    fast = _block_fast(b)
    if fast is not None:
        return fast
    return _block_full(b, loc, err)


_HASH_RE = re.compile(BLOCK_HASH_PATTERN)


def _block_hash(b: Obj, loc: Loc, err: _Errors) -> str | None:
    """The content address block B came by instead of its messages; None when it brings its
    messages (or when the hash is refused, with the reason added to ERR)."""
    if "hash" not in b:
        return None
    h = b["hash"]
    if "messages" in b:
        err.add((*loc, "hash"), "send either messages or hash, not both",
                "leave hash out to send the block's messages")
        return None
    if type(h) is not str or _HASH_RE.fullmatch(h) is None:
        err.add((*loc, "hash"), "must be a block's content address: 32 lowercase hex digits",
                "send the hash ctxobs.hashing.block_hashes gives, or the block's messages")
        return None
    return h


def _block_full(b: Any, loc: Loc, err: _Errors) -> Block | None:
    if not isinstance(b, dict):
        err.add(loc, "must be an object", "send each block as {'key': ..., 'kind': ..., 'messages': [...]}")
        return None
    key = _req_str(b, "key", loc, err, KEY_CHARS)
    kind = b.get("kind")
    if kind is None or kind == "":
        kind = "other"
    if not isinstance(kind, str) or kind not in BLOCK_KINDS:
        err.add((*loc, "kind"), f"unknown kind {str(kind)[:40]!r}", f"use one of: {', '.join(BLOCK_KINDS)}")
        kind = "other"
    h = _block_hash(b, loc, err)
    by_hash = "hash" in b and "messages" not in b
    raw_msgs = b.get("messages")
    if by_hash:
        raw_msgs = []
    elif not isinstance(raw_msgs, list):
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
    if by_hash and b.get("tokens") is None:
        err.add((*loc, "tokens"), "field required with hash: the block's token count",
                "send the block's tokens with its hash, or its messages")
    refs = _list(b, "refs", loc, err, LIMITS.max_list_items, "max_list_items")
    if any(not isinstance(r, str) for r in refs):
        err.add(
            (*loc, "refs"), "must be a list of strings", "send each externalised original's id as a string"
        )
        refs = []
    return {
        "key": key,
        "kind": cast(BlockKind, kind),
        "messages": messages,
        "hash": h,
        "tokens": tokens,
        "estimated": _opt_bool(b, "estimated", loc, err, False),
        "pinned": _opt_bool(b, "pinned", loc, err, False),
        "compressed": _opt_bool(b, "compressed", loc, err, False),
        "refs": refs,
        "chars": chars,
        "verbatim": _verbatim(messages),
    }


def _model(m: Any, loc: Loc, err: _Errors) -> Model:
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
    if counts is not None and counts not in TOKEN_COUNTS:
        err.add((*loc, "counts"), "must be 'exact' or 'estimated'", "omit it if unsure")
        counts = None
    return {
        "name": name,
        "context_window": int(window),
        "reserve_tokens": int(reserve),
        "encoding": _opt_str(m, "encoding", loc, err, NAME_CHARS, ident=True),
        "counts": cast(TokenCounts | None, counts),
    }


def _compression(c: Any, loc: Loc, err: _Errors) -> CompressionEvent | None:
    if not isinstance(c, dict):
        err.add(loc, "must be an object", "send each compression event as an object")
        return None
    items = _list(c, "items", loc, err, LIMITS.max_list_items, "max_list_items")
    if deeper_than(items, _COMPRESSION_ITEMS_LEVELS):
        err.add((*loc, "items"), _TOO_DEEP, _TOO_DEEP_HINT)
        items = []
    return {
        "strategy": _req_str(c, "strategy", loc, err, NAME_CHARS),
        "block": _opt_str(c, "block", loc, err, KEY_CHARS, ident=True),
        "tokens_before": _opt_int(c, "tokens_before", loc, err),
        "tokens_after": _opt_int(c, "tokens_after", loc, err),
        "watermark": _opt_num(c, "watermark", loc, err),
        "items": [str(i)[: LIMITS.max_id_chars] for i in items],
        "ref": _opt_str(c, "ref", loc, err, LIMITS.max_text_chars),
        "source": _compression_source(c, loc, err),
        "opaque": _opt_bool(c, "opaque", loc, err, False),
    }


def _compression_source(c: dict[str, Any], loc: Loc, err: _Errors) -> CompressionSource:
    source = c.get("source")
    if source is None or source == "":
        return "client"
    if not isinstance(source, str) or source not in COMPRESSION_SOURCES:
        err.add((*loc, "source"), f"unknown source {str(source)[:40]!r}",
                f"use one of: {', '.join(COMPRESSION_SOURCES)}")
        return "client"
    return source


def _recall(r: Any, loc: Loc, err: _Errors) -> RecallItem | None:
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
        "channel": cast(RecallChannel, channel),
        "score": _opt_num(r, "score", loc, err),
        "rank": _opt_int(r, "rank", loc, err),
        "injected": _opt_bool(r, "injected", loc, err, False),
        "stale": _opt_bool(r, "stale", loc, err, False),
        "conflicting": _opt_bool(r, "conflicting", loc, err, False),
        "block": _opt_str(r, "block", loc, err, KEY_CHARS, ident=True),
        "preview": _opt_str(r, "preview", loc, err, LIMITS.max_text_chars),
    }


def _validation(v: Any, loc: Loc, err: _Errors) -> ValidationOutcome | None:
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
        "layer": cast(ValidationLayer, layer),
        "check": _opt_str(v, "check", loc, err, KEY_CHARS, ident=True),
        "passed": passed,
        "code": _opt_str(v, "code", loc, err, KEY_CHARS, ident=True),
        "message": _opt_str(v, "message", loc, err, LIMITS.max_text_chars),
        "attempt": attempt or 1,
    }


_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens", "cache_write_tokens")


def _output(o: Any, loc: Loc, err: _Errors) -> Output | None:
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
    elif calls is not None and deeper_than(calls, _OUTPUT_CALLS_LEVELS):
        err.add((*loc, "tool_calls"), _TOO_DEEP, _TOO_DEEP_HINT)
        calls = None
    raw_usage = o.get("usage")
    usage: dict[str, int] = {}
    if raw_usage is not None:
        if not isinstance(raw_usage, dict):
            err.add((*loc, "usage"), "must be an object", "send the provider's usage object")
        else:
            for k in _USAGE_KEYS:
                val = _opt_int(raw_usage, k, (*loc, "usage"), err)
                if val is not None:
                    usage[k] = val
    return {
        "text": text,
        "tool_calls": calls or [],
        "finish_reason": _opt_str(o, "finish_reason", loc, err, NAME_CHARS),
        "usage": cast(Usage, usage),
        "latency_ms": _opt_num(o, "latency_ms", loc, err),
    }


def validate_snapshot(item: Any, index: int = 0) -> tuple[Snapshot | None, list[FieldError]]:
    """Check one wire snapshot; return (normalised snapshot, []) or (None, field errors).

    Each error is {"loc": [...], "msg": ..., "hint": ...}; `loc` starts at the batch
    ("snapshots", index, ...), so a sender can find the offending field.
    """
    err = _Errors()
    loc: Loc = ("snapshots", index)
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
    if not _is_int(turn) or turn < 0 or turn > LIMITS.max_int:
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
    elif deeper_than(params, _PARAMS_LEVELS):
        err.add((*loc, "params"), _TOO_DEEP, _TOO_DEEP_HINT)
        params = {}
    raw_blocks = item.get("blocks")
    blocks: list[Block] = []
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
    raw_tags = item.get("tags")
    tags: dict[str, str] = {}
    if raw_tags is None:
        pass
    elif not isinstance(raw_tags, dict):
        err.add((*loc, "tags"), "must be an object of string values", "send tags as {'env': 'prod'}")
    elif len(raw_tags) > LIMITS.max_tags:
        err.add(
            (*loc, "tags"), f"{len(raw_tags)} tags exceed the limit max_tags={LIMITS.max_tags}",
            "send fewer tags",
        )
    elif any(not isinstance(v, str | int | float | bool) for v in raw_tags.values()):
        bad = next(k for k, v in raw_tags.items() if not isinstance(v, str | int | float | bool))
        err.add((*loc, "tags", bad), "must be a string (or a number or boolean, stored as text)",
                "send each tag value as a string")
    else:
        tags = {str(k)[:KEY_CHARS]: str(v)[: LIMITS.max_text_chars] for k, v in raw_tags.items()}
    retries = _opt_int(item, "retries", loc, err) or 0
    fallback_used = _opt_bool(item, "fallback_used", loc, err, False)
    agent = _opt_str(item, "agent", loc, err, LIMITS.max_id_chars, ident=True)
    if err.items or ts is None:
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
