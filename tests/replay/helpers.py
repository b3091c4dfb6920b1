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


PLANTED_CODE_MEMORY = "Memory: the user's locker code is 4417."
PLANTED_CODE_QUESTION = "What is my locker code? Answer with the code."


def planted_code_snapshot(**kw: Any) -> dict[str, Any]:
    """A planted-fact turn with irrelevant blocks around the fact: tool definitions, an old
    exchange about the weather and a retrieved document about opening hours."""
    return f.snapshot(
        blocks=[
            f.block(
                "system", "system", "You are a helpful assistant. Answer in one short sentence.", pinned=True
            ),
            f.block("tools", "tools", "Tools: get_weather(city) returns today's forecast."),
            f.block("memory", "memory", PLANTED_CODE_MEMORY),
            f.block(
                "history",
                "history",
                messages=[
                    {"role": "user", "content": "Is it sunny today?"},
                    {"role": "assistant", "content": "Yes, it is sunny and warm."},
                ],
            ),
            f.block(
                "retrieval",
                "retrieval",
                "The gym opens at six. The pool closes at nine. Towels are at the front desk.",
            ),
            f.block("user", "user", PLANTED_CODE_QUESTION),
        ],
        output={
            "text": "Your locker code is 4417.",
            "tool_calls": [],
            "finish_reason": "stop",
            "usage": {"prompt_tokens": 90, "completion_tokens": 8},
            "latency_ms": 300,
        },
        **kw,
    )


def queued_tasks(priority: int, task: str) -> list[list[Any]]:
    """The positional arguments of the TASK messages waiting in the replay queue's list for
    PRIORITY (the Redis transport keeps a list per priority step), oldest last."""
    import base64
    import json

    from django.conf import settings
    from kombu import Connection

    with Connection(settings.REDIS_URL) as conn:
        channel: Any = conn.default_channel
        key = channel._q_for_pri("replay", priority)
        messages = [json.loads(m) for m in channel.client.lrange(key, 0, -1)]
    return [json.loads(base64.b64decode(m["body"]))[0] for m in messages if m["headers"]["task"] == task]


def queued_run_ids(priority: int) -> list[int]:
    """The runs whose `replay.run_execute` messages wait in the replay queue at PRIORITY."""
    return [int(args[0]) for args in queued_tasks(priority, "replay.run_execute")]
