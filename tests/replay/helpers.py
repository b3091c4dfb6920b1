"""Snapshots the replay tests share."""

from __future__ import annotations

from typing import Any

from tests import factories as f

PLANTED_SYSTEM = "You are a travel assistant. Answer the user's question in one short sentence."
PLANTED_MEMORY = "Memory: the user's destination city is Guangzhou."
PLANTED_QUESTION = "Which city am I flying to?"


def planted_fact_snapshot(**kw: Any) -> dict[str, Any]:
    """A turn whose answer depends on a fact that lives only in the memory block (a second
    system message — the kind a chat template keeping only the first would drop)."""
    return f.snapshot(
        blocks=[
            f.block("system", "system", PLANTED_SYSTEM, pinned=True),
            f.block("memory", "memory", PLANTED_MEMORY),
            f.block("user", "user", PLANTED_QUESTION),
        ],
        output={
            "text": "Guangzhou.",
            "tool_calls": [],
            "finish_reason": "stop",
            "usage": {"prompt_tokens": 40, "completion_tokens": 3},
            "latency_ms": 300,
        },
        **kw,
    )


def post(api: Any, wire: dict[str, Any]) -> None:
    resp = api.post_snapshots([wire])
    assert resp.status_code in (200, 207), resp.content
    assert resp.json()["results"][0]["status"] in ("accepted", "created"), resp.content
