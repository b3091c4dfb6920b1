"""Builders of realistic wire snapshots and stored projects for tests and benchmarks."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

SYSTEM_PROMPT = (
    "You are a travel assistant. Answer in JSON with fields action and reply. "
    "Never book without the user's confirmation. Keep answers short."
)


def message(role: str, content: str | None, **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, **extra}


def block(
    key: str, kind: str | None = None, content: str = "", *,
    messages: list[dict[str, Any]] | None = None, tokens: int | None = None, **flags: Any,
) -> dict[str, Any]:
    msgs = messages if messages is not None else [message("user" if kind == "user" else "system", content)]
    out: dict[str, Any] = {"key": key, "kind": kind or key, "messages": msgs, **flags}
    if tokens is not None:
        out["tokens"] = tokens
    return out


def snapshot(
    *,
    session_id: str = "s-1",
    turn: int = 0,
    blocks: list[dict[str, Any]] | None = None,
    context_window: int = 8000,
    ts: datetime | None = None,
    snapshot_id: str | None = None,
    agent: str = "travel-bot",
    model: str = "gpt-4o",
    **extra: Any,
) -> dict[str, Any]:
    if blocks is None:
        blocks = [
            block("system", "system", SYSTEM_PROMPT, pinned=True),
            block("memory", "memory", "Memory: destination Guangzhou; window seat"),
            block("user", "user", f"Question number {turn}: find me a flight"),
        ]
    base = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    return {
        "snapshot_id": snapshot_id or str(uuid.uuid4()),
        "session_id": session_id,
        "turn": turn,
        "agent": agent,
        "ts": (ts or base + timedelta(seconds=10 * turn)).isoformat().replace("+00:00", "Z"),
        "model": {"name": model, "context_window": context_window},
        "params": {"temperature": 0, "max_tokens": 256},
        "blocks": blocks,
        **extra,
    }


def full_snapshot(**kw: Any) -> dict[str, Any]:
    """A snapshot with every optional part filled, tool calls included."""
    blocks = [
        block("system", "system", SYSTEM_PROMPT, pinned=True),
        block("tools", "tools", messages=[message("system", '{"tools":[{"name":"search_flights"}]}')]),
        block("history", "history", messages=[
            message("user", "Book me a flight on Friday"),
            message("assistant", None, tool_calls=[{"id": "c1", "type": "function", "function": {
                "name": "search_flights", "arguments": "{\"day\":\"fri\"}"}}]),
            message("tool", "{\"status\":\"error\",\"message\":\"timeout\"}", tool_call_id="c1"),
        ]),
        block("user", "user", "Try again please"),
    ]
    return snapshot(
        blocks=blocks,
        compression=[{"strategy": "drop_tool_output", "block": "history", "tokens_before": 5210,
                      "tokens_after": 640, "watermark": 0.68, "items": ["c0"], "ref": "spool/c0"}],
        recall=[{"memory_id": "m-88", "channel": "vector", "score": 0.82, "rank": 1, "injected": True,
                 "block": "memory", "preview": "destination Guangzhou"}],
        validation=[{"layer": "structure", "check": "json_schema", "passed": False,
                     "code": "E_MISSING_FIELD", "message": "order_id missing", "attempt": 1}],
        output={"text": "Searching again.", "tool_calls": [], "finish_reason": "stop",
                "usage": {"prompt_tokens": 120, "completion_tokens": 5}, "latency_ms": 812},
        tags={"env": "test", "assembly_version": "v14"},
        **kw,
    )
