"""A realistic agent session for the dashboard tests: the context fills turn by turn, a
compression replaces history with a summary, validation starts failing when it is full."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from core.models import Project
from ingest.services import snapshot_batch_ingest
from tests.factories import SYSTEM_PROMPT, block, message, snapshot

WINDOW = 8000  # usable = 8000 - 1200 reserve = 6800
HOSTILE = "<script>window.__pwned=1</script>"


def demo_session(
    *,
    session_id: str = "support-7431",
    turns: int = 24,
    compress_at: int = 14,
    start: datetime | None = None,
    agent: str = "travel-bot",
) -> list[dict[str, Any]]:
    """Wire snapshots of one session. Tokens are given explicitly so the watermark is known:
    history grows by 320 tokens a turn until COMPRESS_AT, where a rolling summary replaces it."""
    base = start or datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    out = []
    history: list[dict[str, Any]] = []
    for t in range(turns):
        history.append(message("user", f"Turn {t}: can you look for a flight to Guangzhou on Friday?"))
        history.append(message("assistant", f"Searching flights, attempt {t}. Window seat noted."))
        compressed = t >= compress_at
        if t == compress_at:
            history = history[-4:]
        hist_tokens = 320 * (t + 1) if not compressed else 320 * (t - compress_at + 2)
        blocks = [
            block("system", "system", SYSTEM_PROMPT, pinned=True, tokens=420),
            block(
                "tools",
                "tools",
                messages=[message("system", '{"tools":[{"name":"search_flights"}]}')],
                tokens=600,
            ),
            block(
                "constraints",
                "constraints",
                "Constraint: budget under 500 EUR; no red-eye flights",
                pinned=True,
                tokens=60,
            ),
            block(
                "memory",
                "memory",
                "Memory: destination Guangzhou; window seat"
                + ("; prefers morning flights" if t >= 6 else ""),
                tokens=120 if t < 6 else 140,
            ),
        ]
        if compressed:
            blocks.append(
                block(
                    "summary",
                    "summary",
                    f"Summary of turns 0-{compress_at - 1}: user wants a Friday flight to Guangzhou, "
                    "window seat, budget 500 EUR. Searches timed out twice.",
                    tokens=300,
                    compressed=True,
                )
            )
        blocks.append(block("history", "history", messages=list(history), tokens=hist_tokens))
        blocks.append(
            block(
                "tool_results",
                "tool_results",
                messages=[
                    message("tool", f'{{"status":"error","message":"timeout #{t}"}}', tool_call_id=f"c{t}")
                ],
                tokens=180 + 10 * t,
            )
        )
        blocks.append(block("user", "user", f"Try again please (turn {t})", tokens=30))
        total = sum(b["tokens"] for b in blocks)
        extra: dict[str, Any] = {
            "output": {
                "text": f"Searching again for turn {t}.",
                "tool_calls": [],
                "finish_reason": "stop",
                "usage": {
                    "prompt_tokens": total + 3 if t != 9 else int(total * 0.7),
                    "completion_tokens": 12,
                },
                "latency_ms": 600 + t,
            },
            "recall": [
                {
                    "memory_id": "m-88",
                    "channel": "vector",
                    "score": 0.82,
                    "rank": 1,
                    "injected": True,
                    "block": "memory",
                    "preview": "destination Guangzhou",
                },
                {
                    "memory_id": "m-12",
                    "channel": "keyword",
                    "score": 0.31,
                    "rank": 2,
                    "injected": False,
                    "stale": True,
                    "preview": "old hotel booking",
                },
            ],
            "validation": [
                {
                    "layer": "structure",
                    "check": "json_schema",
                    "passed": total < 5600,
                    "code": "" if total < 5600 else "E_MISSING_FIELD",
                    "message": "" if total < 5600 else "order_id missing",
                    "attempt": 1,
                }
            ],
        }
        if t == compress_at:
            extra["compression"] = [
                {
                    "strategy": "rolling_summary",
                    "block": "history",
                    "tokens_before": 320 * (t + 1),
                    "tokens_after": 300 + 640,
                    "watermark": 0.74,
                    "items": ["h0", "h1"],
                    "ref": "spool/h0",
                }
            ]
        out.append(
            snapshot(
                session_id=session_id,
                turn=t,
                blocks=blocks,
                context_window=WINDOW,
                ts=base + timedelta(seconds=30 * t),
                agent=agent,
                **extra,
            )
        )
    return out


def ingest(project: Project, snaps: list[dict[str, Any]]) -> None:
    res = snapshot_batch_ingest(project=project, batch=snaps)
    assert res.rejected == 0, res.results


def hostile_session(*, session_id: str = f"s-{HOSTILE}") -> list[dict[str, Any]]:
    """Two turns whose session id, block key, message and output carry HTML."""
    snaps = []
    for t in range(2):
        blocks = [
            block("system", "system", SYSTEM_PROMPT, pinned=True, tokens=100),
            block(f"key-{HOSTILE}", "retrieval", f"Document: {HOSTILE} turn {t}", tokens=200 + 50 * t),
            block("user", "user", f"Hello {HOSTILE} {t}", tokens=20),
        ]
        snaps.append(
            snapshot(
                session_id=session_id,
                turn=t,
                blocks=blocks,
                agent=f"agent-{HOSTILE}",
                output={"text": f"Reply {HOSTILE}", "finish_reason": "stop"},
                validation=[
                    {
                        "layer": "business",
                        "check": f"check-{HOSTILE}",
                        "passed": False,
                        "code": f"E_{HOSTILE}",
                        "message": HOSTILE,
                        "attempt": 1,
                    }
                ],
                compression=[
                    {
                        "strategy": f"strat-{HOSTILE}",
                        "block": f"key-{HOSTILE}",
                        "tokens_before": 10,
                        "tokens_after": 5,
                        "watermark": 0.5,
                        "items": [],
                        "ref": HOSTILE,
                    }
                ],
                recall=[
                    {
                        "memory_id": f"m-{HOSTILE}",
                        "channel": "vector",
                        "score": 0.5,
                        "rank": 1,
                        "injected": True,
                        "block": f"key-{HOSTILE}",
                        "preview": HOSTILE,
                    }
                ],
                snapshot_id=str(uuid.uuid4()),
            )
        )
    return snaps


def many_sessions(n: int, *, turns: int = 3, prefix: str = "bulk") -> list[dict[str, Any]]:
    base = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    out = []
    for i in range(n):
        for t in range(turns):
            out.append(
                snapshot(
                    session_id=f"{prefix}-{i:05d}",
                    turn=t,
                    context_window=WINDOW,
                    ts=base + timedelta(minutes=i, seconds=t),
                    blocks=[
                        block("system", "system", SYSTEM_PROMPT, tokens=400),
                        block("history", "history", f"h {i} {t}", tokens=500 * (t + 1) + i),
                        block("user", "user", f"u {i} {t}", tokens=20),
                    ],
                    validation=[{"layer": "structure", "check": "json", "passed": t % 2 == 0, "attempt": 1}],
                )
            )
    return out


def long_session(*, session_id: str = "marathon", turns: int = 2000) -> list[dict[str, Any]]:
    """A session of TURNS turns: a growing history cut back by a rolling summary every 50 turns,
    so the chart has every kind, compressions and tier changes across its width."""
    base = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
    out = []
    for t in range(turns):
        since_summary = t % 50
        blocks = [
            block("system", "system", SYSTEM_PROMPT, pinned=True, tokens=400),
            block(
                "summary", "summary", f"Summary up to turn {t - since_summary}", compressed=True, tokens=300
            ),
            block("history", "history", f"history at turn {t}", tokens=120 * (since_summary + 1)),
            block("user", "user", f"step {t}", tokens=20),
        ]
        extra: dict[str, Any] = {}
        if since_summary == 0 and t > 0:
            extra["compression"] = [{"strategy": "rolling_summary", "block": "history", "tokens_before": 6000,
                                     "tokens_after": 120}]
        out.append(
            snapshot(
                session_id=session_id,
                turn=t,
                blocks=blocks,
                context_window=WINDOW,
                ts=base + timedelta(seconds=5 * t),
                **extra,
            )
        )
    return out
