"""Content addresses of messages and blocks, and the size of a block's text.

The SDK and the server address content the same way, so a block stored once is found again by
its hash on every later turn and in every project's replay.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

# One shared encoder: json.dumps() with options builds a new encoder on every call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
HASH_CHARS = 32  # 128 bits of sha256: content addresses are per project


def canonical_json(value: Any) -> str:
    return _CANONICAL.encode(value)


_SIMPLE_KEYS = frozenset(("role", "content", "name", "tool_call_id"))
_ABSENT = object()
_hash_memo: dict[tuple[Any, ...], str] = {}
_pair_memo: dict[tuple[str, str], str] = {}
_pair_memo_chars = 0
_PAIR_MEMO_MAX_CHARS = 50_000_000
_block_memo: dict[tuple[str, ...], str] = {}
_HASH_MEMO_MAX = 100_000


def message_hash(message: Mapping[str, Any]) -> str:
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
                # The canonical JSON of the two keys, written out: the encoder's own setup cost
                # a third as much again as escaping the texts (json's own string escaping).
                canonical = f'{{"content":{encode_basestring(content)},"role":{encode_basestring(role)}}}'
                text = canonical.encode("utf-8", "surrogatepass")
                found = hashlib.sha256(text).hexdigest()[:HASH_CHARS]
                # The memo holds the texts themselves: bounded by their size as well as their number.
                if len(_pair_memo) >= _HASH_MEMO_MAX or _pair_memo_chars > _PAIR_MEMO_MAX_CHARS:
                    _pair_memo.clear()
                    _pair_memo_chars = 0
                _pair_memo[pair] = found
                _pair_memo_chars += len(content)
            return found
    memo_key: tuple[Any, ...] | None = None
    if message.keys() <= _SIMPLE_KEYS and all(type(v) is str or v is None for v in message.values()):
        # Absent and null are different JSON, so they key the memo apart.
        memo_key = (
            message.get("role", _ABSENT), message.get("content", _ABSENT), message.get("name", _ABSENT),
            message.get("tool_call_id", _ABSENT),
        )
        hit = _hash_memo.get(memo_key)
        if hit is not None:
            return hit
        # Its canonical JSON written out, as for a pair above (a tool's result, say: new text on
        # every turn, so the memo rarely has it).
        fields = (f'"{k}":{"null" if message[k] is None else encode_basestring(message[k])}'
                  for k in sorted(message))
        canonical = "{" + ",".join(fields) + "}"
    else:
        canonical = _CANONICAL.encode(message)
    # surrogatepass: an unpaired surrogate (binary decoded with surrogateescape) hashes as
    # itself; valid text hashes exactly as with plain UTF-8.
    h = hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    if memo_key is not None:
        if len(_hash_memo) >= _HASH_MEMO_MAX:
            _hash_memo.clear()
        _hash_memo[memo_key] = h
    return h


def block_hashes(messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[str]]:
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


def content_hash(messages: Sequence[Mapping[str, Any]]) -> str:
    """Content address of a block (see block_hashes)."""
    return block_hashes(messages)[0]


def block_chars(messages: Sequence[Mapping[str, Any]]) -> int:
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
