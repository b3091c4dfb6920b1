"""Sessions whose prompt cache behaves in known ways, in the wire form."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.factories import block, message, snapshot

BASE = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
SYSTEM_TOKENS = 3000


def cache_turn(
    turn: int,
    *,
    session_id: str = "cache-1",
    system: str = "You are a travel assistant. Answer in JSON.",
    model: str = "gpt-4o",
    cached: int | None = None,
    version: str | None = None,
    seconds: float = 30.0,
    params: dict[str, Any] | None = None,
    base: datetime = BASE,
) -> dict[str, Any]:
    """A turn with a big system block, a memory block, the history so far and a question;
    COMPLETION 50 tokens, the provider reporting CACHED (when given)."""
    history = [message("user" if i % 2 == 0 else "assistant", f"message {i}") for i in range(2 * turn)]
    blocks = [
        block("system", "system", system, tokens=SYSTEM_TOKENS, pinned=True),
        block("memory", "memory", "Memory: window seat; destination Guangzhou", tokens=200),
    ]
    if history:
        blocks.append(block("history", "history", messages=history, tokens=40 * len(history)))
    blocks.append(block("user", "user", f"question {turn}", tokens=20))
    total = sum(b["tokens"] for b in blocks)
    usage: dict[str, Any] = {"prompt_tokens": total, "completion_tokens": 50}
    if cached is not None:
        usage["cached_tokens"] = cached
    extra: dict[str, Any] = {"output": {"text": "ok", "usage": usage}}
    if version is not None:
        extra["tags"] = {"assembly_version": version}
    snap = snapshot(
        session_id=session_id,
        turn=turn,
        blocks=blocks,
        model=model,
        context_window=128000,
        ts=base + timedelta(seconds=seconds * turn),
        **extra,
    )
    if params is not None:
        snap["params"] = params
    return snap
