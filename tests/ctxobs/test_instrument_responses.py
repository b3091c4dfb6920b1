"""instrument_openai() records Responses API calls: real openai clients against a local server
that answers /v1/responses with the API's JSON and SSE event streams."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import openai
import pytest

import ctxobs

INSTRUCTIONS = "You are a travel assistant. Answer briefly."
TOOLS = [
    {
        "type": "function",
        "name": "search_flights",
        "description": "Search flights",
        "parameters": {"type": "object", "properties": {"day": {"type": "string"}}, "required": ["day"]},
        "strict": True,
    }
]
CALL = {
    "type": "function_call",
    "id": "fc_67ccf18ef5fc8190b16dbee19bc54e5f",
    "call_id": "call_unLAR8MvFNptuiZK6K6HCy5k",
    "name": "search_flights",
    "arguments": '{"day":"friday"}',
    "status": "completed",
}
# The shape of an encrypted reasoning item (include=["reasoning.encrypted_content"]).
CIPHERTEXT = "gAAAAABoIPOE" + "Zk3qR1x9Vb0wP2sT8mYcL4nHa6Ju7Ke5Gd" * 60
REASONING = {
    "type": "reasoning",
    "id": "rs_6820f383d7c08191846711c5df8233bc",
    "summary": [{"type": "summary_text", "text": "The user wants a Friday flight."}],
    "encrypted_content": CIPHERTEXT,
}


def conversation() -> list[dict[str, Any]]:
    return [
        ctxobs.tag(
            {"role": "developer", "content": "Memory: prefers a window seat"}, "memory", kind="memory"
        ),
        {"role": "user", "content": "Find me a flight"},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Which day?", "annotations": []}],
        },
        {"role": "user", "content": [{"type": "input_text", "text": "Friday please"}]},
    ]


def llm_for(provider: Any, obs: ctxobs.Client, **kw: Any) -> Any:
    return ctxobs.instrument_openai(openai.OpenAI(base_url=provider.url + "/v1", api_key="x", **kw), obs)


def snapshots_of(ingest: Any, obs: ctxobs.Client) -> list[dict[str, Any]]:
    assert obs.flush(timeout=10)
    return sorted(ingest.stored.values(), key=lambda s: (s["session_id"], s["turn"]))


def layout(snap: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(b["key"], b["kind"], len(b["messages"])) for b in snap["blocks"]]


def block(snap: dict[str, Any], key: str) -> dict[str, Any]:
    return next(b for b in snap["blocks"] if b["key"] == key)


def test_call_is_recorded_as_blocks_with_the_reply_and_tags_never_reach_the_provider(
    ingest, provider, make_client
) -> None:
    obs = make_client(ingest.url)
    llm = llm_for(provider, obs)
    resp = llm.responses.create(
        model="gpt-4.1",
        instructions=INSTRUCTIONS,
        input=conversation(),
        tools=TOOLS,
        temperature=0,
        ctxobs_session="trip-1",
        ctxobs_tags={"env": "test"},
    )
    assert resp.output_text == provider.reply_text
    sent = provider.requests[0]
    assert "ctxobs" not in json.dumps(sent)
    assert sent["input"][0] == {"role": "developer", "content": "Memory: prefers a window seat"}
    [snap] = snapshots_of(ingest, obs)
    assert ctxobs.validate_snapshot(snap)[1] == []
    assert layout(snap) == [
        ("system", "system", 1),
        ("tools", "tools", 0),
        ("memory", "memory", 1),
        ("history", "history", 2),
        ("user", "user", 1),
    ]
    assert block(snap, "system")["messages"] == [{"role": "system", "content": INSTRUCTIONS}]
    assert block(snap, "history")["messages"] == [
        {"role": "user", "content": "Find me a flight"},
        {"role": "assistant", "content": "Which day?"},
    ]
    assert block(snap, "user")["messages"] == [{"role": "user", "content": "Friday please"}]
    assert snap["params"]["tools"] == TOOLS and snap["params"]["temperature"] == 0
    assert "input" not in snap["params"] and "instructions" not in snap["params"]
    # The flat Responses function tool is counted as its chat form is, not as JSON text.
    assert 10 < block(snap, "tools")["tokens"] < 40
    assert snap["session_id"] == "trip-1"
    assert snap["tags"] == {"env": "test", "ctxobs.api": "responses"}
    assert snap["output"]["text"] == provider.reply_text
    assert snap["output"]["finish_reason"] == "stop" and snap["output"]["tool_calls"] == []
    assert snap["output"]["usage"] == {
        "prompt_tokens": 36,
        "completion_tokens": 87,
        "total_tokens": 123,
        "cached_tokens": 0,
        "cache_write_tokens": 0,
    }
    assert snap["output"]["latency_ms"] > 0


def test_string_input_is_the_user_block(ingest, provider, make_client) -> None:
    obs = make_client(ingest.url)
    llm_for(provider, obs).responses.create(model="gpt-4.1", input="Tell me a story")
    [snap] = snapshots_of(ingest, obs)
    assert layout(snap) == [("user", "user", 1)]
    assert snap["blocks"][0]["messages"] == [{"role": "user", "content": "Tell me a story"}]
    assert snap["blocks"][0]["tokens"] > 3


def test_tool_call_and_its_output_round_trip_in_the_chat_shape(ingest, provider, make_client) -> None:
    obs = make_client(ingest.url)
    llm = llm_for(provider, obs)
    provider.response_output = [CALL]
    items: list[Any] = [{"role": "user", "content": "Book a flight on Friday"}]
    first = llm.responses.create(model="gpt-4.1", input=items, tools=TOOLS, ctxobs_session="tc")
    # The agent appends the reply's items (pydantic objects) and its tool's output.
    items += first.output
    items.append(
        {"type": "function_call_output", "call_id": CALL["call_id"], "output": '{"flights": ["CA123"]}'}
    )
    provider.response_output = None
    llm.responses.create(model="gpt-4.1", input=items, tools=TOOLS, ctxobs_session="tc")
    one, two = snapshots_of(ingest, obs)
    chat_call = {
        "id": CALL["call_id"],
        "type": "function",
        "function": {"name": "search_flights", "arguments": '{"day":"friday"}'},
    }
    assert one["output"]["tool_calls"] == [chat_call]
    assert one["output"]["text"] is None and one["output"]["finish_reason"] == "tool_calls"
    assert layout(two) == [("tools", "tools", 0), ("user", "user", 1), ("tool_results", "tool_results", 2)]
    assert block(two, "tool_results")["messages"] == [
        {"role": "assistant", "content": None, "tool_calls": [chat_call]},
        {"role": "tool", "tool_call_id": CALL["call_id"], "content": '{"flights": ["CA123"]}'},
    ]
    assert two["output"]["text"] == provider.reply_text


def test_parallel_function_calls_make_one_assistant_message(ingest, provider, make_client) -> None:
    obs = make_client(ingest.url)
    second = {**CALL, "id": "fc_2", "call_id": "call_2", "arguments": '{"day":"saturday"}'}
    items = [
        {"role": "user", "content": "Friday or Saturday?"},
        CALL,
        second,
        {"type": "function_call_output", "call_id": CALL["call_id"], "output": "none"},
        {"type": "function_call_output", "call_id": "call_2", "output": "CA9"},
    ]
    llm_for(provider, obs).responses.create(model="gpt-4.1", input=items)
    [snap] = snapshots_of(ingest, obs)
    calls = block(snap, "tool_results")["messages"][0]["tool_calls"]
    assert [c["id"] for c in calls] == [CALL["call_id"], "call_2"]
    assert len(block(snap, "tool_results")["messages"]) == 3


def test_encrypted_reasoning_is_recorded_by_size_only(ingest, provider, make_client) -> None:
    obs = make_client(ingest.url)
    items = [
        {"role": "user", "content": "Book a flight on Friday"},
        REASONING,
        CALL,
        {"type": "function_call_output", "call_id": CALL["call_id"], "output": "CA123"},
    ]
    llm_for(provider, obs).responses.create(
        model="o4-mini", input=items, include=["reasoning.encrypted_content"], store=False
    )
    assert provider.requests[0]["input"][1]["encrypted_content"] == CIPHERTEXT  # the provider got it
    [snap] = snapshots_of(ingest, obs)
    assert CIPHERTEXT[:40] not in json.dumps(snap)
    results = block(snap, "tool_results")
    reasoning = results["messages"][0]
    assert reasoning == {
        "role": "assistant",
        "content": "The user wants a Friday flight.",
        "type": "reasoning",
        "id": REASONING["id"],
        "encrypted_chars": len(CIPHERTEXT),
    }
    # The reasoning is counted by its size (3 tokens per 16 characters), not by its summary.
    assert results["tokens"] >= len(CIPHERTEXT) * 3 // 16
    assert results["estimated"] is True
    assert "estimated" not in block(snap, "user")


@pytest.mark.parametrize(
    ("input_tokens", "hidden"),
    [
        pytest.param(5000, "rest", id="usage-reported"),
        pytest.param(3, 0, id="fewer-than-sent-is-zero"),
        pytest.param(None, 0, id="no-usage"),
    ],
)
def test_previous_response_id_adds_an_estimated_server_state_block(
    ingest, provider, make_client, input_tokens: int | None, hidden: Any
) -> None:
    if input_tokens is None:
        provider.response_usage = None
    else:
        provider.response_usage = {**provider.response_usage, "input_tokens": input_tokens}
    obs = make_client(ingest.url)
    llm_for(provider, obs).responses.create(
        model="gpt-4.1",
        instructions=INSTRUCTIONS,
        previous_response_id="resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
        input=[{"role": "user", "content": "And on Saturday?"}],
    )
    [snap] = snapshots_of(ingest, obs)
    assert layout(snap) == [("system", "system", 1), ("server_state", "history", 0), ("user", "user", 1)]
    assert snap["tags"]["ctxobs.server_state"] == "previous_response_id"
    assert snap["params"]["previous_response_id"].startswith("resp_")
    state = block(snap, "server_state")
    assert state["estimated"] is True
    sent = block(snap, "system")["tokens"] + block(snap, "user")["tokens"] + 3  # + the reply priming
    assert state["tokens"] == (input_tokens - sent if hidden == "rest" else 0)
    if hidden == "rest":
        assert 4900 < state["tokens"] < 5000


def test_compaction_item_is_a_provider_compression_recorded_opaque(ingest, provider, make_client) -> None:
    obs = make_client(ingest.url)
    compaction = {"type": "compaction", "id": "cmp_68de7d3e7b6c8190", "encrypted_content": CIPHERTEXT}
    items = [compaction, {"role": "user", "content": "So which flight?"}]
    llm_for(provider, obs).responses.create(model="gpt-4.1", input=items)
    [snap] = snapshots_of(ingest, obs)
    assert CIPHERTEXT[:40] not in json.dumps(snap)
    assert layout(snap) == [("summary", "summary", 1), ("user", "user", 1)]
    summary = block(snap, "summary")
    assert summary["compressed"] is True and summary["estimated"] is True
    [event] = snap["compression"]
    assert event["source"] == "provider" and event["opaque"] is True
    assert event["block"] == "summary" and event["ref"] == compaction["id"]
    assert event["tokens_after"] == summary["tokens"] >= len(CIPHERTEXT) * 3 // 16


def test_stream_passes_events_through_and_records_the_completed_response(
    ingest, provider, make_client
) -> None:
    obs = make_client(ingest.url)
    stream = llm_for(provider, obs).responses.create(
        model="gpt-4.1", input=conversation(), stream=True, ctxobs_session="st"
    )
    kinds: list[str] = []
    text = []
    for event in stream:
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            text.append(event.delta)
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "".join(text) == provider.reply_text
    assert "ctxobs" not in json.dumps(provider.requests[0])
    [snap] = snapshots_of(ingest, obs)
    assert snap["output"]["text"] == provider.reply_text
    assert snap["output"]["usage"]["prompt_tokens"] == 36 and snap["output"]["finish_reason"] == "stop"
    assert "ctxobs.stream" not in snap["tags"]


def test_streamed_function_call_is_recorded_from_the_final_response(ingest, provider, make_client) -> None:
    provider.response_output = [CALL]
    obs = make_client(ingest.url)
    with llm_for(provider, obs).responses.create(model="gpt-4.1", input="Fly Friday", stream=True) as stream:
        events = list(stream)
    assert any(e.type == "response.function_call_arguments.delta" for e in events)
    [snap] = snapshots_of(ingest, obs)
    assert snap["output"]["tool_calls"][0]["function"] == {
        "name": "search_flights",
        "arguments": CALL["arguments"],
    }
    assert snap["output"]["finish_reason"] == "tool_calls"


def test_stream_closed_early_is_recorded_as_incomplete_with_the_text_so_far(
    ingest, provider, make_client
) -> None:
    obs = make_client(ingest.url)
    stream = llm_for(provider, obs).responses.create(model="gpt-4.1", input="hi", stream=True)
    for event in stream:
        if event.type == "response.output_text.delta":
            break
    stream.close()
    [snap] = snapshots_of(ingest, obs)
    assert snap["tags"]["ctxobs.stream"] == "incomplete"
    assert snap["output"]["text"] == provider.reply_text.split(" ")[0]


def test_stream_helper_is_recorded(ingest, provider, make_client) -> None:
    obs = make_client(ingest.url)
    llm = llm_for(provider, obs)
    with ctxobs.session("helper"), llm.responses.stream(model="gpt-4.1", input="hi", tools=TOOLS) as stream:
        final = stream.get_final_response()
    assert final.output_text == provider.reply_text
    [snap] = snapshots_of(ingest, obs)
    assert snap["session_id"] == "helper" and snap["output"]["text"] == provider.reply_text


def test_async_client_create_and_stream_are_recorded(ingest, provider, make_client) -> None:
    obs = make_client(ingest.url)

    async def main() -> str:
        llm: Any = ctxobs.instrument_openai(
            openai.AsyncOpenAI(base_url=provider.url + "/v1", api_key="x"), obs
        )
        with ctxobs.session("async-s"):
            r = await llm.responses.create(model="gpt-4.1", input=conversation())
            stream = await llm.responses.create(model="gpt-4.1", input=conversation(), stream=True)
            text = "".join([e.delta async for e in stream if e.type == "response.output_text.delta"])
        await llm.close()
        assert r.output_text == text
        return text

    text = asyncio.run(main())
    snaps = snapshots_of(ingest, obs)
    assert [(s["session_id"], s["turn"]) for s in snaps] == [("async-s", 0), ("async-s", 1)]
    assert all(s["output"]["text"] == text for s in snaps)
    assert all(layout(s)[-1] == ("user", "user", 1) for s in snaps)
    assert all("ctxobs" not in json.dumps(r) for r in provider.requests)


def test_provider_error_propagates_and_the_failed_call_is_recorded(ingest, provider, make_client) -> None:
    provider.fail_next = 400
    obs = make_client(ingest.url)
    llm = llm_for(provider, obs, max_retries=0)
    with pytest.raises(openai.BadRequestError):
        llm.responses.create(model="gpt-4.1", input=conversation(), ctxobs_session="err")
    [snap] = snapshots_of(ingest, obs)
    assert snap["tags"]["error"] == "BadRequestError" and "output" not in snap
    assert layout(snap)[-1] == ("user", "user", 1)


def test_raw_response_call_is_reported_once_and_still_reaches_the_agent(
    ingest, provider, make_client, caplog: pytest.LogCaptureFixture
) -> None:
    obs = make_client(ingest.url)
    llm: Any = openai.OpenAI(base_url=provider.url + "/v1", api_key="x")
    cached_before = llm.responses.with_raw_response  # made before instrumenting: must not bypass it
    ctxobs.instrument_openai(llm, obs)
    assert llm.responses.with_raw_response is not cached_before
    with caplog.at_level(logging.WARNING, logger="ctxobs.instrument"):
        for _ in range(2):
            raw = llm.responses.with_raw_response.create(model="gpt-4.1", input="hi", ctxobs_session="raw")
            assert raw.parse().output_text == provider.reply_text
    warnings = [
        r for r in caplog.records if "uncaptured" in r.getMessage() and "with_raw_response" in r.getMessage()
    ]
    # Once per process: no other test makes this kind of call.
    assert len(warnings) == 1
    assert obs.stats()["uncaptured"] == 2
    assert "ctxobs" not in json.dumps(provider.requests)
    assert snapshots_of(ingest, obs) == []


def test_unknown_input_item_is_kept_as_json_and_reported(
    ingest, provider, make_client, caplog: pytest.LogCaptureFixture
) -> None:
    obs = make_client(ingest.url)
    odd = {"type": "future_tool_call", "id": "ft_1", "query": "weather in Paris"}
    with caplog.at_level(logging.WARNING, logger="ctxobs.instrument"):
        llm_for(provider, obs).responses.create(
            model="gpt-4.1", input=[odd, {"role": "user", "content": "hi"}]
        )
        [snap] = snapshots_of(ingest, obs)
    assert any("responses.input_item.future_tool_call" in r.getMessage() for r in caplog.records)
    assert obs.stats()["uncaptured"] == 1
    [m] = block(snap, "history")["messages"]
    assert m["type"] == "future_tool_call" and json.loads(m["content"])["query"] == "weather in Paris"


def test_instrumenting_twice_records_once_and_uninstrument_restores_both_apis(
    ingest, provider, make_client
) -> None:
    obs = make_client(ingest.url)
    llm: Any = openai.OpenAI(base_url=provider.url + "/v1", api_key="x")
    ctxobs.instrument_openai(llm, obs)
    ctxobs.instrument_openai(llm, obs)
    llm.responses.create(model="gpt-4.1", input="hi")
    llm.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    assert len(snapshots_of(ingest, obs)) == 2
    ctxobs.uninstrument_openai(llm)
    llm.responses.create(model="gpt-4.1", input="hi")
    llm.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    assert len(snapshots_of(ingest, obs)) == 2


def test_parse_is_recorded(ingest, provider, make_client) -> None:
    obs = make_client(ingest.url)
    provider.reply_text = '{"day": "friday"}'
    from pydantic import BaseModel

    class Day(BaseModel):
        day: str

    parsed = llm_for(provider, obs).responses.parse(model="gpt-4.1", input="Which day?", text_format=Day)
    assert parsed.output_parsed == Day(day="friday")
    [snap] = snapshots_of(ingest, obs)
    assert snap["output"]["text"] == '{"day": "friday"}'
    assert "text_format" not in snap["params"]
