"""Context windows of well-known models, so agents need not pass `context_window`.

Matched by longest prefix of the lower-cased model name (a provider prefix like
`openai/` is ignored). Values are the providers' published input windows in tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

DEFAULT_CONTEXT_WINDOW = 8192

_WINDOWS: dict[str, int] = {
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.5": 128_000,
    "gpt-4o": 128_000,
    "chatgpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4-1106": 128_000,
    "gpt-4-0125": 128_000,
    "gpt-4-32k": 32_768,
    "gpt-4": 8_192,
    "gpt-3.5-turbo-instruct": 4_096,
    "gpt-3.5-turbo": 16_385,
    "o1-mini": 128_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude": 200_000,
    "gemini-1.5": 1_048_576,
    "gemini-2": 1_048_576,
    "gemma-3-270m": 32_768,
    "gemma-3-1b": 32_768,
    "gemma-3": 131_072,
    "gemma-2": 8_192,
    "gemma3": 32_768,
    "llama-3.1": 131_072,
    "llama-3.2": 131_072,
    "llama-3.3": 131_072,
    "llama-3": 8_192,
    "qwen2.5": 32_768,
    "qwen3": 32_768,
    "mistral": 32_768,
    "mixtral": 32_768,
    "deepseek": 65_536,
}
_BY_LENGTH = sorted(_WINDOWS.items(), key=lambda kv: -len(kv[0]))


def _longest_prefix(name: str, table: Iterable[tuple[str, int]]) -> int | None:
    for prefix, window in table:
        if name.startswith(prefix):
            return window
    return None


def context_window_for(model: str, overrides: Mapping[str, int] | None = None) -> int | None:
    """The known context window of MODEL in tokens, or None when the model is unknown.

    OVERRIDES ({model name: window}, e.g. a project's) come first and match the same way: the
    full name, else the longest name that begins MODEL (provider prefix ignored, any case)."""
    name = (model or "").lower().split("/")[-1]
    if overrides:
        own = {n: v for k, v in overrides.items() if (n := str(k).lower().split("/")[-1])}
        hit = _longest_prefix(name, sorted(own.items(), key=lambda kv: -len(kv[0])))
        if hit is not None:
            return hit
    return _longest_prefix(name, _BY_LENGTH)
