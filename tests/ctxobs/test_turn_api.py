"""The explicit Turn API: blocks, events, outputs, turn numbering — as the server receives them."""

from __future__ import annotations

import threading
from typing import Any

import openai
import pytest

import ctxobs

SYSTEM = "You are a travel assistant. Reply in JSON."


def test_the_documented_example_builds_a_valid_snapshot_that_reaches_the_server(ingest, make_client) -> None:
    obs = make_client(ingest.url)
    memory_messages = [{"role": "system", "content": "Memory: destination Guangzhou; window seat"}]
    with obs.turn(session_id="s1", agent="travel-bot", model="gpt-4o", context_window=128_000) as t:
        t.block("system", [{"role": "system", "content": SYSTEM}], kind="system", pinned=True)
        t.block("memory", memory_messages, kind="memory")
        t.block(
            "history",
            [{"role": "user", "content": "Book a flight"}, {"role": "assistant", "content": "When?"}],
        )
        t.block("user", [{"role": "user", "content": "Friday"}])
        t.recall(memory_id="m-88", score=0.82, injected=True, block="memory")
        t.compression(strategy="drop_tool_output", block="history", tokens_before=5210, tokens_after=640)
        messages = t.messages()
        t.output('{"order_id": null}')
        t.validation(layer="structure", check="json_schema", passed=False, code="E_MISSING_FIELD", attempt=1)
    assert obs.flush(timeout=10)
    snap = ingest.stored[t.snapshot_id]
    assert ctxobs.validate_snapshot(snap)[1] == []
    assert [m for b in snap["blocks"] for m in b["messages"]] == messages
    assert [b["key"] for b in snap["blocks"]] == ["system", "memory", "history", "user"]
    system, _, history, _ = snap["blocks"]
    assert system["pinned"] is True and history["compressed"] is True
    assert snap["recall"] == [
        {"memory_id": "m-88", "injected": True, "rank": 1, "score": 0.82, "block": "memory"}
    ]
    assert snap["compression"][0]["tokens_before"] == 5210
    assert snap["validation"][0]["code"] == "E_MISSING_FIELD"
    assert snap["output"]["text"] == '{"order_id": null}' and snap["output"]["latency_ms"] >= 0
    assert snap["agent"] == "travel-bot" and snap["model"]["reserve_tokens"] == 19_200
    assert sum(b["tokens"] for b in snap["blocks"]) + 3 == t.tokens()


def test_turn_numbers_auto_increment_per_session_and_follow_an_explicit_turn() -> None:
    obs = ctxobs.Client(disabled=True)
    a = [obs.turn(session_id="a", model="gpt-4o").turn for _ in range(3)]
    b = obs.turn(session_id="b", model="gpt-4o").turn
    jumped = obs.turn(session_id="a", model="gpt-4o", turn=10).turn
    after = obs.turn(session_id="a", model="gpt-4o").turn
    assert (a, b, jumped, after) == ([0, 1, 2], 0, 10, 11)


def test_session_context_supplies_the_session_for_explicit_turns() -> None:
    obs = ctxobs.Client(disabled=True)
    with ctxobs.session("ctx-s", agent="bot", tags={"env": "dev"}):
        t = obs.turn(model="gpt-4o")
    assert (t.session_id, t.agent, t.tags) == ("ctx-s", "bot", {"env": "dev"})


class _WatchedReply:
    """A reply read the way an openai ChatCompletion is (`model_dump()`), noting the reader's thread."""

    def __init__(self) -> None:
        self.read_on: list[str] = []

    def model_dump(self, **kw: Any) -> dict[str, Any]:
        self.read_on.append(threading.current_thread().name)
        return {"choices": [{"index": 0, "message": {"content": "ok"}, "finish_reason": "stop"}]}


def test_reply_given_to_output_is_read_on_the_sender_thread(ingest, make_client) -> None:
    obs = make_client(ingest.url)
    reply = _WatchedReply()
    with obs.turn(session_id="s", model="gpt-4o-mini") as t:
        t.block("user", [{"role": "user", "content": "hi"}])
        t.messages()
        t.output(reply)
    assert obs.flush(timeout=10)
    [snap] = ingest.stored.values()
    assert snap["output"]["text"] == "ok" and snap["output"]["latency_ms"] >= 0
    assert reply.read_on and threading.current_thread().name not in reply.read_on


def test_openai_chat_completion_object_is_read_as_output() -> None:
    resp = openai.types.chat.ChatCompletion.model_validate(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                        ],
                    },
                }
            ],
            "usage": {
                "prompt_tokens": 100,
                "completion_tokens": 5,
                "total_tokens": 105,
                "prompt_tokens_details": {"cached_tokens": 64},
            },
        }
    )
    t = ctxobs.Client(disabled=True).turn(session_id="s", model="gpt-4o")
    t.block("user", [{"role": "user", "content": "hi"}])
    t.output(resp, latency_ms=12.5)
    out = t.snapshot()["output"]
    assert out["tool_calls"][0]["function"]["name"] == "f" and out["text"] is None
    assert out["usage"] == {
        "prompt_tokens": 100,
        "completion_tokens": 5,
        "total_tokens": 105,
        "cached_tokens": 64,
    }
    assert out["finish_reason"] == "tool_calls" and out["latency_ms"] == 12.5
    assert ctxobs.validate_snapshot(t.snapshot())[1] == []


def test_retries_follow_the_last_attempt_and_fallback_is_flagged() -> None:
    t = ctxobs.Client(disabled=True).turn(session_id="s", model="gpt-4o")
    t.block("user", [{"role": "user", "content": "hi"}])
    t.validation("structure", "json", passed=False, code="E_JSON", attempt=3)
    t.fallback()
    snap = t.snapshot()
    assert snap["retries"] == 2 and snap["fallback_used"] is True


def test_tools_are_a_block_and_a_request_parameter_but_not_messages() -> None:
    tools_list = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    t = ctxobs.Client(disabled=True).turn(session_id="s", model="gpt-4o-mini")
    t.block("system", [{"role": "system", "content": SYSTEM}])
    t.block("tools", tools_list, kind="tools")
    t.block("user", [{"role": "user", "content": "hi"}])
    assert [m["role"] for m in t.messages()] == ["system", "user"]
    req = t.request(temperature=0)
    assert req["tools"] == tools_list and req["temperature"] == 0 and req["model"] == "gpt-4o-mini"
    snap = t.snapshot()
    tools_block = snap["blocks"][1]
    assert tools_block["kind"] == "tools" and tools_block["messages"] == [] and tools_block["tokens"] > 9
    assert snap["params"]["tools"] == tools_list


def test_watermark_climbs_as_blocks_grow() -> None:
    t = ctxobs.Client(disabled=True).turn(session_id="s", model="gemma-3-270m", context_window=2048)
    t.block("system", [{"role": "system", "content": SYSTEM}])
    low = t.watermark()
    t.block("history", [{"role": "user", "content": "lorem ipsum dolor " * 600}])
    assert t.watermark() > low and t.tier() in ("compress", "force", "break")


def test_same_block_key_twice_appends_in_place() -> None:
    t = ctxobs.Client(disabled=True).turn(session_id="s", model="gpt-4o")
    t.block("history", [{"role": "user", "content": "a"}])
    t.block("user", [{"role": "user", "content": "q"}])
    first = t.block_tokens("history")
    t.block("history", [{"role": "assistant", "content": "b"}])
    assert [m["content"] for m in t.messages()] == ["a", "b", "q"]
    assert t.block_tokens("history") > first


def test_block_copies_messages_and_drops_ctxobs_fields() -> None:
    history = [ctxobs.tag({"role": "user", "content": "a"}, "history")]
    t = ctxobs.Client(disabled=True).turn(session_id="s", model="gpt-4o")
    t.block("history", history)
    history.append({"role": "assistant", "content": "later"})
    assert t.messages() == [{"role": "user", "content": "a"}]


def test_exception_in_the_turn_propagates_and_the_turn_is_recorded_with_the_error(
    ingest, make_client
) -> None:
    obs = make_client(ingest.url)
    with pytest.raises(TimeoutError), obs.turn(session_id="s", model="gpt-4o") as t:
        t.block("user", [{"role": "user", "content": "hi"}])
        raise TimeoutError
    assert obs.flush(timeout=5)
    assert ingest.stored[t.snapshot_id]["tags"]["error"] == "TimeoutError"


def test_turn_without_blocks_is_not_sent(ingest, make_client) -> None:
    obs = make_client(ingest.url)
    with obs.turn(session_id="s", model="gpt-4o"):
        pass
    assert obs.flush(timeout=2)
    assert ingest.posts == []


def test_unknown_model_gets_a_default_window_and_says_so() -> None:
    t = ctxobs.Client(disabled=True).turn(session_id="s", model="homegrown-7b")
    assert t.context_window == 8192 and t.tags["ctxobs.window"] == "assumed"
