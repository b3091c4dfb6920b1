"""Comparison of model outputs (ORM-free): similarity, word diff, tool calls, noise floor."""

from __future__ import annotations

import json
import re
from difflib import SequenceMatcher
from typing import Any

from core import textdiff
from replay import measures

_WORDS = re.compile(r"\S+")
NOISE_EPS = measures.NOISE_EPS


def words(text: str | None) -> list[str]:
    return _WORDS.findall(text or "")


def similarity(a: str | None, b: str | None) -> float:
    """Edit-distance based similarity of two texts on words: 1.0 same words, 0.0 nothing shared."""
    wa, wb = words(a), words(b)
    if not wa and not wb:
        return 1.0
    return SequenceMatcher(None, wa, wb, autojunk=False).ratio()


def distance(a: str | None, b: str | None) -> float:
    return 1.0 - similarity(a, b)


def word_diff(a: str | None, b: str | None) -> list[dict[str, str]]:
    """Segments turning A into B word by word (core.textdiff.prose_diff), as
    [{"op": "equal"|"delete"|"insert", "text": ...}]. The text is raw: templates escape it."""
    return [{"op": op, "text": text} for op, text in textdiff.prose_diff(a, b)]


def canonical_tool_calls(tool_calls: list[Any] | None) -> list[tuple[str, str]]:
    """(name, arguments as canonical JSON) per call; arguments that are not JSON stay as text."""
    out = []
    for c in tool_calls or []:
        fn = (c or {}).get("function") or {}
        name = str(fn.get("name") or (c or {}).get("name") or "")
        args = fn.get("arguments", (c or {}).get("arguments", ""))
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                out.append((name, args))
                continue
        out.append((name, json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)))
    return out


def tool_calls_match(a: list[Any] | None, b: list[Any] | None) -> bool:
    return canonical_tool_calls(a) == canonical_tool_calls(b)


cosine = measures.cosine
# The noise floor and a variant's effect against it: replay.measures.
noise_floor = measures.noise_floor
effect = measures.effect


def compare(
    *,
    a_text: str | None,
    b_text: str | None,
    a_tool_calls: list[Any] | None = None,
    b_tool_calls: list[Any] | None = None,
    a_usage: dict[str, Any] | None = None,
    b_usage: dict[str, Any] | None = None,
    a_embedding: list[float] | None = None,
    b_embedding: list[float] | None = None,
) -> dict[str, Any]:
    """Everything the side-by-side page shows about B against A."""
    au, bu = a_usage or {}, b_usage or {}

    def delta(key: str) -> float | None:
        x, y = au.get(key), bu.get(key)
        return None if x is None or y is None else y - x

    return {
        "exact": (a_text or "") == (b_text or "") and tool_calls_match(a_tool_calls, b_tool_calls),
        "text_exact": (a_text or "") == (b_text or ""),
        "similarity": similarity(a_text, b_text),
        "edit_distance": measures.edit_distance(a_text, b_text),
        "task_distance": measures.task_distance(
            a_text, b_text, reference_tool_calls=a_tool_calls, tool_calls=b_tool_calls
        ),
        "embedding_similarity": cosine(a_embedding, b_embedding),
        "tool_calls_match": tool_calls_match(a_tool_calls, b_tool_calls),
        "a_tool_calls": canonical_tool_calls(a_tool_calls),
        "b_tool_calls": canonical_tool_calls(b_tool_calls),
        "prompt_tokens_delta": delta("prompt_tokens"),
        "completion_tokens_delta": delta("completion_tokens"),
        "latency_ms_delta": delta("latency_ms"),
        "diff": word_diff(a_text, b_text),
    }
