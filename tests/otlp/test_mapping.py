"""ingest.otlp.mapping: model-call spans of each convention as wire snapshots (pure, no database)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ctxobs.validate import validate_snapshot
from ingest.otlp.decode import Event, LogRecord, Span
from ingest.otlp.mapping import (
    DETAILS_EVENT,
    TAG_CONTENT,
    TAG_CONTENT_REASON,
    TAG_PARENT,
    calls_stored_before,
    innermost_model_calls,
    log_to_span,
    snapshot_id_for,
    span_to_snapshot,
    spans_to_snapshots,
)

TRACE = "0af7651916cd43dd8448eb211c80319c"
T0 = 1_764_750_000_000_000_000


def span(
    attrs: dict[str, Any],
    *,
    span_id: str = "b7ad6b7169203331",
    parent: str = "",
    resource: dict[str, Any] | None = None,
    events: tuple[Event, ...] = (),
    start: int = T0,
    status: int = 0,
) -> Span:
    return Span(
        trace_id=TRACE,
        span_id=span_id,
        parent_span_id=parent,
        name="chat gpt-4o",
        start_ns=start,
        end_ns=start + 250_000_000,
        attributes=attrs,
        resource=resource or {"service.name": "svc"},
        events=events,
        status_code=status,
    )


WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}

GENAI_INPUT = [
    {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
    {
        "role": "assistant",
        "parts": [
            {"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}
        ],
    },
    {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "18C, sunny"}]},
]
GENAI_OUTPUT = [
    {
        "role": "assistant",
        "parts": [{"type": "text", "content": "It is 18C and sunny."}],
        "finish_reason": "stop",
    }
]


def genai_attrs(**extra: Any) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "You are a weather bot."}]),
        "gen_ai.input.messages": json.dumps(GENAI_INPUT),
        "gen_ai.output.messages": json.dumps(GENAI_OUTPUT),
        "gen_ai.tool.definitions": json.dumps([WEATHER_TOOL]),
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 9,
        "gen_ai.request.temperature": 0.2,
        **extra,
    }


def valid(snap: dict[str, Any]) -> dict[str, Any]:
    out, errors = validate_snapshot(snap)
    assert errors == []
    assert out is not None
    return out


def layout(snap: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(b["key"], b["kind"], len(b["messages"])) for b in snap["blocks"]]


def test_genai_span_becomes_a_partitioned_snapshot_with_tools_and_output() -> None:
    snap = valid(span_to_snapshot(span(genai_attrs())))
    assert layout(snap) == [
        ("system", "system", 1),
        ("tools", "tools", 0),
        ("user", "user", 1),
        ("tool_results", "tool_results", 2),
    ]
    call = snap["blocks"][3]["messages"][0]["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert snap["blocks"][3]["messages"][1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "18C, sunny",
    }
    assert snap["params"]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather of a city",
                "parameters": WEATHER_TOOL["parameters"],
            },
        }
    ]
    assert snap["params"]["temperature"] == 0.2
    assert snap["output"]["text"] == "It is 18C and sunny."
    assert snap["output"]["finish_reason"] == "stop"
    assert snap["output"]["usage"] == {"prompt_tokens": 120, "completion_tokens": 9, "total_tokens": 129}
    assert snap["output"]["latency_ms"] == 250.0
    assert snap["model"]["name"] == "gpt-4o" and snap["model"]["context_window"] == 128_000
    assert snap["tags"]["ctxobs.otel.convention"] == "genai"
    assert TAG_CONTENT not in snap["tags"]


def test_genai_content_on_the_details_event_is_used_when_the_span_has_none() -> None:
    content = {
        k: v
        for k, v in genai_attrs().items()
        if k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.system_", "gen_ai.tool"))
    }
    bare = {k: v for k, v in genai_attrs().items() if k not in content}
    snap = valid(span_to_snapshot(span(bare, events=(Event(DETAILS_EVENT, T0, content),))))
    assert [b["kind"] for b in snap["blocks"]] == ["system", "tools", "user", "tool_results"]
    assert snap["output"]["text"] == "It is 18C and sunny."


def test_genai_details_log_record_joined_on_ids_supplies_the_content() -> None:
    content = {k: v for k, v in genai_attrs().items() if k.startswith(("gen_ai.input", "gen_ai.output"))}
    bare = {k: v for k, v in genai_attrs().items() if k not in content}
    s = span(bare)
    record = LogRecord(
        trace_id=TRACE,
        span_id=s.span_id,
        event_name=DETAILS_EVENT,
        time_ns=T0,
        attributes=content,
        resource={},
    )
    [(_, snap)] = spans_to_snapshots([s], [record])
    assert [b["kind"] for b in valid(snap)["blocks"]] == ["system", "tools", "user", "tool_results"]


def test_a_details_log_record_alone_is_a_snapshot_with_its_span_identity() -> None:
    record = LogRecord(
        trace_id=TRACE,
        span_id="b7ad6b7169203331",
        event_name=DETAILS_EVENT,
        time_ns=T0,
        attributes=genai_attrs(),
        resource={"service.name": "svc"},
    )
    s = log_to_span(record)
    assert s is not None
    snap = valid(span_to_snapshot(s))
    assert snap["snapshot_id"] == snapshot_id_for(TRACE, "b7ad6b7169203331")
    assert snap["blocks"][0]["messages"] == [{"role": "system", "content": "You are a weather bot."}]


def test_openinference_flattened_messages_tools_and_usage() -> None:
    attrs = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4o-mini",
        "llm.input_messages.0.message.role": "system",
        "llm.input_messages.0.message.content": "Be brief.",
        "llm.input_messages.1.message.role": "user",
        "llm.input_messages.1.message.content": "Weather in Paris?",
        "llm.input_messages.2.message.role": "assistant",
        "llm.input_messages.2.message.tool_calls.0.tool_call.id": "call_9",
        "llm.input_messages.2.message.tool_calls.0.tool_call.function.name": "get_weather",
        "llm.input_messages.2.message.tool_calls.0.tool_call.function.arguments": '{"city": "Paris"}',
        "llm.input_messages.3.message.role": "tool",
        "llm.input_messages.3.message.tool_call_id": "call_9",
        "llm.input_messages.3.message.content": "18C",
        "llm.tools.0.tool.json_schema": json.dumps({"type": "function", "function": {"name": "get_weather"}}),
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "18C in Paris.",
        "llm.token_count.prompt": 80,
        "llm.token_count.completion": 5,
        "llm.token_count.total": 85,
        "llm.token_count.prompt_details.cache_read": 64,
        "llm.token_count.completion_details.reasoning": 3,
        "llm.invocation_parameters": json.dumps({"temperature": 0, "tool_choice": "auto"}),
        "session.id": "sess-oi",
    }
    snap = valid(span_to_snapshot(span(attrs)))
    assert layout(snap) == [
        ("system", "system", 1),
        ("tools", "tools", 0),
        ("user", "user", 1),
        ("tool_results", "tool_results", 2),
    ]
    assert snap["blocks"][3]["messages"][1] == {"role": "tool", "content": "18C", "tool_call_id": "call_9"}
    assert snap["params"]["tools"] == [{"type": "function", "function": {"name": "get_weather"}}]
    assert snap["params"]["tool_choice"] == "auto"
    assert snap["output"]["text"] == "18C in Paris."
    assert snap["output"]["usage"] == {
        "prompt_tokens": 80,
        "completion_tokens": 5,
        "total_tokens": 85,
        "cached_tokens": 64,
    }
    assert snap["tags"]["ctxobs.usage.reasoning_tokens"] == "3"
    assert snap["session_id"] == "sess-oi"
    assert snap["tags"]["ctxobs.otel.convention"] == "openinference"


def test_openllmetry_prompts_completions_and_functions() -> None:
    attrs = {
        "llm.request.type": "chat",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.prompt.0.role": "system",
        "gen_ai.prompt.0.content": "Be brief.",
        "gen_ai.prompt.1.role": "user",
        "gen_ai.prompt.1.content": "Hi",
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.finish_reason": "tool_calls",
        "gen_ai.completion.0.tool_calls.0.id": "c1",
        "gen_ai.completion.0.tool_calls.0.name": "lookup",
        "gen_ai.completion.0.tool_calls.0.arguments": '{"q": "x"}',
        "llm.request.functions.0.name": "lookup",
        "llm.request.functions.0.parameters": json.dumps({"type": "object"}),
        "gen_ai.usage.prompt_tokens": 30,
        "gen_ai.usage.completion_tokens": 7,
        "traceloop.association.properties.session_id": "sess-ollm",
    }
    snap = valid(span_to_snapshot(span(attrs)))
    assert layout(snap) == [("system", "system", 1), ("tools", "tools", 0), ("user", "user", 1)]
    assert snap["params"]["tools"] == [
        {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    ]
    assert snap["output"]["finish_reason"] == "tool_calls"
    assert snap["output"]["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"q": "x"}'}
    assert snap["session_id"] == "sess-ollm"


def test_deprecated_per_message_events_are_the_last_resort() -> None:
    events = (
        Event("gen_ai.system.message", T0, {"content": "Be brief."}),
        Event("gen_ai.user.message", T0, {"content": "Hi"}),
        Event("gen_ai.choice", T0, {"finish_reason": "stop", "message": {"content": "Hello"}}),
    )
    snap = valid(
        span_to_snapshot(
            span({"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}, events=events)
        )
    )
    assert layout(snap) == [("system", "system", 1), ("user", "user", 1)]
    assert snap["output"]["text"] == "Hello"


def test_framework_span_wrapping_a_provider_span_keeps_only_the_innermost() -> None:
    outer = span(
        {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o", "llm.token_count.prompt": 50},
        span_id="1111111111111111",
    )
    middle = span(
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"},
        span_id="2222222222222222",
        parent="1111111111111111",
    )
    inner = span(genai_attrs(), span_id="3333333333333333", parent="2222222222222222")
    other = span(genai_attrs(), span_id="4444444444444444", start=T0 + 10**9)
    kept = innermost_model_calls([outer, middle, inner, other])
    assert [s.span_id for s in kept] == ["3333333333333333", "4444444444444444"]
    pairs = spans_to_snapshots([outer, middle, inner, other])
    assert [s.span_id for s, _ in pairs] == ["3333333333333333", "4444444444444444"]
    # The agent span between them names the agent of the inner call.
    assert pairs[0][1]["agent"] == "planner"
    assert pairs[1][1]["agent"] == "svc"


@pytest.mark.parametrize(
    ("attrs", "resource", "expected"),
    [
        ({"gen_ai.conversation.id": "conv", "session.id": "sess"}, {}, "conv"),
        ({"session.id": "sess", "traceloop.association.properties.session_id": "assoc"}, {}, "sess"),
        ({"traceloop.association.properties.session_id": "assoc"}, {}, "assoc"),
        ({}, {"session.id": "from-resource"}, "from-resource"),
        ({}, {}, TRACE),
    ],
    ids=["conversation-id", "session-id", "association-property", "resource", "trace-id"],
)
def test_session_precedence(attrs: dict[str, Any], resource: dict[str, Any], expected: str) -> None:
    snap = span_to_snapshot(span(genai_attrs(**attrs), resource=resource))
    assert snap["session_id"] == expected


def test_agent_is_gen_ai_agent_name_then_service_name() -> None:
    assert span_to_snapshot(span(genai_attrs(**{"gen_ai.agent.name": "triage"})))["agent"] == "triage"
    assert span_to_snapshot(span(genai_attrs(), resource={"service.name": "billing"}))["agent"] == "billing"


@pytest.mark.parametrize(
    ("model", "extra", "window", "assumed"),
    [
        ("gpt-4o", {}, 128_000, False),
        ("my-finetune", {"ctxobs.context.window_size": 32_000}, 32_000, False),
        ("gpt-4o", {"ctxobs.context.window_size": 64_000}, 64_000, False),
        ("my-finetune", {}, 8192, True),
    ],
    ids=["registry", "attribute", "attribute-over-registry", "assumed"],
)
def test_context_window(model: str, extra: dict[str, Any], window: int, assumed: bool) -> None:
    snap = valid(span_to_snapshot(span(genai_attrs(**{"gen_ai.request.model": model, **extra}))))
    assert snap["model"]["context_window"] == window
    assert (snap["tags"].get("ctxobs.window") == "assumed") is assumed


PROJECT_WINDOWS = {"my-finetune": 16_384, "gpt-4o": 96_000, "acme/llama-3.1-8b": 20_000}


@pytest.mark.parametrize(
    ("model", "extra", "window"),
    [
        ("my-finetune", {}, 16_384),
        ("my-finetune-v2", {}, 16_384),
        ("My-Finetune", {}, 16_384),
        ("gpt-4o", {}, 96_000),
        ("gpt-4o-mini", {}, 96_000),
        ("llama-3.1-8b-instruct", {}, 20_000),
        ("openai/my-finetune", {}, 16_384),
        ("gpt-4.1", {}, 1_047_576),
        ("my-finetune", {"ctxobs.context.window_size": 4096}, 4096),
    ],
    ids=[
        "override-unknown-model",
        "override-by-prefix",
        "override-any-case",
        "override-over-registry",
        "override-prefix-over-registry",
        "override-key-provider-prefix-ignored",
        "model-provider-prefix-ignored",
        "registry-when-no-override-matches",
        "attribute-over-override",
    ],
)
def test_project_model_windows_override_the_registry(model: str, extra: dict[str, Any], window: int) -> None:
    attrs = genai_attrs(**{"gen_ai.request.model": model, **extra})
    snap = valid(span_to_snapshot(span(attrs), model_windows=PROJECT_WINDOWS))
    assert snap["model"]["context_window"] == window
    assert "ctxobs.window" not in snap["tags"]


def test_project_model_windows_reach_every_span_of_an_export() -> None:
    attrs = genai_attrs(**{"gen_ai.request.model": "my-finetune"})
    spans = [span(attrs, span_id=f"00000000000000a{i}", start=T0 + i) for i in range(2)]
    pairs = spans_to_snapshots(spans, model_windows={"my-finetune": 12_000})
    assert [snap["model"]["context_window"] for _, snap in pairs] == [12_000, 12_000]


def compacted_input(compaction: dict[str, Any], *, as_part: bool = True) -> list[dict[str, Any]]:
    """A conversation resumed after a compaction: the compaction, then the next user question."""
    first: dict[str, Any] = {"role": "user", "parts": [compaction]} if as_part else compaction
    return [
        first,
        {"role": "assistant", "parts": [{"type": "text", "content": "Noted."}]},
        {"role": "user", "parts": [{"type": "text", "content": "And tomorrow?"}]},
    ]


SUMMARY = "The user asked for the weather in Paris: 18C and sunny. They are flying there on Friday."


@pytest.mark.parametrize(
    ("compaction", "as_part", "text", "tokens_before", "ref"),
    [
        (
            {"type": "compaction", "id": "cmp_1", "content": SUMMARY, "tokens_before": 5210},
            True,
            SUMMARY,
            5210,
            "cmp_1",
        ),
        (
            {"type": "compaction", "summary": [{"type": "summary_text", "text": SUMMARY}]},
            True,
            SUMMARY,
            None,
            "",
        ),
        ({"type": "compaction", "id": "cmp_2", "content": SUMMARY}, False, SUMMARY, None, "cmp_2"),
    ],
    ids=["part-with-text-and-tokens-before", "part-with-summary-parts", "bare-compaction-item"],
)
def test_a_compaction_becomes_a_summary_block_and_a_compression_event(
    compaction: dict[str, Any], as_part: bool, text: str, tokens_before: int | None, ref: str
) -> None:
    attrs = genai_attrs(**{"gen_ai.input.messages": json.dumps(compacted_input(compaction, as_part=as_part))})
    snap = valid(span_to_snapshot(span(attrs)))
    assert layout(snap) == [
        ("system", "system", 1),
        ("tools", "tools", 0),
        ("summary", "summary", 1),
        ("history", "history", 1),
        ("user", "user", 1),
    ]
    assert snap["blocks"][2]["messages"] == [{"role": "user", "content": text}]
    [event] = snap["compression"]
    assert event["strategy"] == "summarize"
    assert event["block"] == "summary"
    assert event["tokens_before"] == tokens_before
    # The summary's own tokens, counted the way the server counts the block.
    assert event["tokens_after"] is not None and 20 < event["tokens_after"] < 40
    assert event["ref"] == ref
    assert event["items"] == ([ref] if ref else [])
    assert TAG_CONTENT not in snap["tags"]


def test_an_encrypted_compaction_is_kept_and_said_to_be_unreadable() -> None:
    compaction = {"type": "compaction", "id": "cmp_9", "encrypted_content": "gAAAAABo-opaque"}
    attrs = genai_attrs(**{"gen_ai.input.messages": json.dumps(compacted_input(compaction, as_part=False))})
    snap = valid(span_to_snapshot(span(attrs)))
    summary = next(b for b in snap["blocks"] if b["key"] == "summary")
    assert summary["messages"] == [{"role": "user", "content": "gAAAAABo-opaque"}]
    assert snap["compression"][0]["ref"] == "cmp_9"
    assert snap["tags"][TAG_CONTENT] == "incomplete"
    assert "encrypted" in snap["tags"][TAG_CONTENT_REASON]


def test_a_compaction_part_beside_text_keeps_both_in_order() -> None:
    first = {
        "role": "user",
        "parts": [
            {"type": "compaction", "content": SUMMARY},
            {"type": "text", "content": "Earlier question"},
        ],
    }
    inputs = [first, {"role": "user", "parts": [{"type": "text", "content": "Now?"}]}]
    snap = valid(span_to_snapshot(span(genai_attrs(**{"gen_ai.input.messages": json.dumps(inputs)}))))
    assert layout(snap)[2:] == [("summary", "summary", 1), ("history", "history", 1), ("user", "user", 1)]
    assert snap["blocks"][3]["messages"] == [{"role": "user", "content": "Earlier question"}]
    assert len(snap["compression"]) == 1


def test_no_compaction_no_compression_events() -> None:
    assert "compression" not in span_to_snapshot(span(genai_attrs()))


def test_litellm_shapes_openai_messages_beside_parts_and_openllmetry_tools() -> None:
    """LiteLLM's OpenTelemetry callback: GenAI messages whose tool calls and ids are in the
    OpenAI shape beside the parts, tools as `llm.request.functions.N.*`, the reply's tool call
    as `gen_ai.completion.0.function_call.*`."""
    call = {
        "id": "call_7",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
    }
    attrs = {
        "gen_ai.operation.name": "chat",
        "llm.request.type": "completion",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.input.messages": json.dumps(
            [
                {"role": "system", "parts": [{"type": "text", "content": "You answer about weather."}]},
                {"role": "user", "parts": [{"type": "text", "content": "Oslo?"}]},
                {"role": "assistant", "parts": [], "tool_calls": [call]},
                {"role": "tool", "parts": [{"type": "text", "content": "4C"}], "tool_call_id": "call_7"},
            ]
        ),
        "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [], "finish_reason": "tool_calls"}]
        ),
        "gen_ai.completion.0.function_call.name": "get_weather",
        "gen_ai.completion.0.function_call.arguments": '{"city":"Bergen"}',
        "llm.request.functions.0.name": "get_weather",
        "llm.request.functions.0.description": "Weather of a city",
        "llm.request.functions.0.parameters": json.dumps(WEATHER_TOOL["parameters"]),
    }
    snap = valid(span_to_snapshot(span(attrs)))
    assert layout(snap) == [
        ("system", "system", 1),
        ("tools", "tools", 0),
        ("user", "user", 1),
        ("tool_results", "tool_results", 2),
    ]
    assert snap["blocks"][3]["messages"] == [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "4C", "tool_call_id": "call_7"},
    ]
    assert [t["function"]["name"] for t in snap["params"]["tools"]] == ["get_weather"]
    assert snap["output"]["tool_calls"] == [
        {"id": "", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Bergen"}'}}
    ]
    assert snap["output"]["finish_reason"] == "tool_calls"
    assert TAG_CONTENT not in snap["tags"]


@pytest.mark.parametrize(
    ("tool_fields", "reason"),
    [
        ({}, "a tool result has no tool_call_id"),
        (
            {"llm.input_messages.1.message.tool_call_id": "call_9"},
            "answers a call that is not in the messages",
        ),
    ],
    ids=["no-id", "no-call"],
)
def test_a_tool_result_that_cannot_be_tied_to_its_call_is_flagged(
    tool_fields: dict[str, Any], reason: str
) -> None:
    attrs = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4o-mini",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "Oslo?",
        "llm.input_messages.1.message.role": "tool",
        "llm.input_messages.1.message.content": "4C",
        **tool_fields,
    }
    snap = valid(span_to_snapshot(span(attrs)))
    assert snap["tags"][TAG_CONTENT] == "incomplete"
    assert reason in snap["tags"][TAG_CONTENT_REASON]


def test_anthropic_input_tokens_get_the_cached_tokens_added_back() -> None:
    attrs = genai_attrs(
        **{
            "gen_ai.provider.name": "anthropic",
            "gen_ai.request.model": "claude-sonnet-4",
            "gen_ai.usage.input_tokens": 20,
            "gen_ai.usage.cache_read.input_tokens": 1000,
            "gen_ai.usage.cache_creation.input_tokens": 300,
        }
    )
    snap = valid(span_to_snapshot(span(attrs)))
    assert snap["output"]["usage"]["prompt_tokens"] == 1320
    assert snap["output"]["usage"]["cached_tokens"] == 1000
    assert snap["tags"]["ctxobs.usage.cache_write_tokens"] == "300"
    assert snap["output"]["usage"]["cache_write_tokens"] == 300


def test_openai_input_tokens_already_include_the_cached_ones() -> None:
    attrs = genai_attrs(
        **{
            "gen_ai.provider.name": "openai",
            "gen_ai.usage.input_tokens": 1200,
            "gen_ai.usage.cache_read.input_tokens": 1000,
        }
    )
    assert span_to_snapshot(span(attrs))["output"]["usage"]["prompt_tokens"] == 1200


@pytest.mark.parametrize(
    ("attrs", "reason"),
    [
        (genai_attrs(**{"gen_ai.input.messages": json.dumps(GENAI_INPUT)[:60]}), "not complete JSON"),
        (
            genai_attrs(
                **{
                    "gen_ai.input.messages": json.dumps(
                        [{"role": "user", "parts": [{"type": "text", "content": "__REDACTED__"}]}]
                    )
                }
            ),
            "redacted",
        ),
        (
            {
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-4o",
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": "a",
                "llm.input_messages.2.message.role": "user",
                "llm.input_messages.2.message.content": "c",
            },
            "gaps",
        ),
        (
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 77,
            },
            "no message content",
        ),
    ],
    ids=["truncated-json", "redacted", "index-gap", "no-content"],
)
def test_missing_content_is_flagged_and_token_counts_kept(attrs: dict[str, Any], reason: str) -> None:
    snap = valid(span_to_snapshot(span(attrs)))
    assert snap["tags"][TAG_CONTENT] == "incomplete"
    assert reason in snap["tags"][TAG_CONTENT_REASON]


def test_a_span_without_content_keeps_the_provider_count_in_one_block() -> None:
    snap = valid(
        span_to_snapshot(
            span(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.usage.input_tokens": 77,
                }
            )
        )
    )
    assert layout(snap) == [("context", "other", 0)]
    assert snap["blocks"][0]["tokens"] == 77


def test_ctxobs_blocks_attribute_names_the_senders_own_blocks() -> None:
    spec = [
        {"key": "system", "messages": 1},
        {"key": "memory", "kind": "memory", "messages": 1},
        {"key": "tool_results", "messages": 2},
    ]
    snap = valid(span_to_snapshot(span(genai_attrs(**{"ctxobs.blocks": json.dumps(spec)}))))
    assert layout(snap) == [
        ("system", "system", 1),
        ("tools", "tools", 0),
        ("memory", "memory", 1),
        ("tool_results", "tool_results", 2),
    ]


def test_a_ctxobs_blocks_attribute_that_does_not_fit_falls_back_and_says_so() -> None:
    snap = valid(
        span_to_snapshot(span(genai_attrs(**{"ctxobs.blocks": json.dumps([{"key": "x", "messages": 1}])})))
    )
    assert [b["kind"] for b in snap["blocks"]] == ["system", "tools", "user", "tool_results"]
    assert "ctxobs.blocks covers 1 of 4" in snap["tags"][TAG_CONTENT_REASON]


def test_snapshot_id_is_stable_per_trace_and_span() -> None:
    a = span_to_snapshot(span(genai_attrs()))["snapshot_id"]
    assert a == span_to_snapshot(span(genai_attrs(), start=T0 + 5))["snapshot_id"]
    assert a != span_to_snapshot(span(genai_attrs(), span_id="00000000000000aa"))["snapshot_id"]


def test_non_model_spans_are_not_snapshots() -> None:
    assert (
        spans_to_snapshots(
            [
                span({"http.method": "GET"}),
                span({"gen_ai.operation.name": "embeddings"}, span_id="aaaaaaaaaaaaaaaa"),
            ]
        )
        == []
    )


def test_an_errored_span_is_tagged() -> None:
    snap = span_to_snapshot(span(genai_attrs(), status=2))
    assert snap["tags"]["error"] == "error"


# --- content the mapping used to lose or distort ------------------------------------------


def pydantic_ai_input(tool_part: dict[str, Any]) -> list[dict[str, Any]]:
    """pydantic-ai's GenAI messages: its tool return parts carry the content under `result`."""
    return [
        {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}
            ],
        },
        {"role": "user", "parts": [tool_part]},
    ]


def test_a_pydantic_ai_tool_result_under_result_is_kept() -> None:
    result = {"city": "Paris", "temperature_c": 18, "sky": "sunny", "wind_kmh": 12}
    part = {"type": "tool_call_response", "id": "call_1", "name": "get_weather", "result": result}
    snap = valid(
        span_to_snapshot(span(genai_attrs(**{"gen_ai.input.messages": json.dumps(pydantic_ai_input(part))})))
    )
    [tool_msg] = [m for b in snap["blocks"] for m in b["messages"] if m["role"] == "tool"]
    content = json.dumps(result, sort_keys=True)
    assert tool_msg == {"role": "tool", "tool_call_id": "call_1", "content": content}
    assert TAG_CONTENT not in snap["tags"]


def test_a_tool_result_part_without_readable_content_marks_the_turn_incomplete() -> None:
    part = {"type": "tool_call_response", "id": "call_1", "name": "get_weather"}
    snap = valid(
        span_to_snapshot(span(genai_attrs(**{"gen_ai.input.messages": json.dumps(pydantic_ai_input(part))})))
    )
    assert snap["tags"][TAG_CONTENT] == "incomplete"
    assert "tool result part has no readable content" in snap["tags"][TAG_CONTENT_REASON]


ANTHROPIC_TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
ONE_CALL = [
    {
        "id": "toolu_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
]


def assistant_turn(snap: dict[str, Any]) -> dict[str, Any]:
    [msg] = [m for b in snap["blocks"] for m in b["messages"] if m["role"] == "assistant"]
    return msg


@pytest.mark.parametrize(
    "assistant",
    [
        # LiteLLM: Anthropic content blocks as the content, the same call as OpenAI tool_calls.
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Let me check."}, ANTHROPIC_TOOL_USE],
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "assistant", "parts": [{"type": "text", "content": "Let me check."}, ANTHROPIC_TOOL_USE]},
    ],
    ids=["content-blocks-and-tool-calls", "parts"],
)
def test_an_anthropic_tool_use_part_is_kept_once_as_the_tool_call(assistant: dict[str, Any]) -> None:
    messages = [
        {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
        assistant,
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "toolu_1", "response": "18C"}]},
    ]
    snap = valid(span_to_snapshot(span(genai_attrs(**{"gen_ai.input.messages": json.dumps(messages)}))))
    msg = assistant_turn(snap)
    assert msg["content"] == "Let me check."
    assert msg["tool_calls"] == ONE_CALL
    assert TAG_CONTENT not in snap["tags"]


def test_an_openinference_tool_use_content_part_is_kept_once_as_the_tool_call() -> None:
    attrs = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "claude-sonnet-4-5",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "Weather in Paris?",
        "llm.input_messages.1.message.role": "assistant",
        "llm.input_messages.1.message.contents.0.message_content.type": "text",
        "llm.input_messages.1.message.contents.0.message_content.text": "Let me check.",
        "llm.input_messages.1.message.contents.1.message_content.type": "tool_use",
        "llm.input_messages.1.message.contents.1.message_content.id": "toolu_1",
        "llm.input_messages.1.message.contents.1.message_content.name": "get_weather",
        "llm.input_messages.1.message.contents.1.message_content.input": '{"city": "Paris"}',
        "llm.input_messages.1.message.tool_calls.0.tool_call.id": "toolu_1",
        "llm.input_messages.1.message.tool_calls.0.tool_call.function.name": "get_weather",
        "llm.input_messages.1.message.tool_calls.0.tool_call.function.arguments": '{"city": "Paris"}',
        "llm.input_messages.2.message.role": "tool",
        "llm.input_messages.2.message.tool_call_id": "toolu_1",
        "llm.input_messages.2.message.content": "18C",
    }
    msg = assistant_turn(valid(span_to_snapshot(span(attrs))))
    assert msg["content"] == [{"type": "text", "text": "Let me check."}]
    assert msg["tool_calls"] == ONE_CALL


@pytest.mark.parametrize(
    "attrs",
    [
        {
            "openinference.span.kind": "LLM",
            "llm.invocation_parameters": json.dumps({"model": "gpt-4o", "temperature": 0}),
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Weather in Paris?",
        },
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.input.messages": json.dumps(GENAI_INPUT[:1]),
        },
    ],
    ids=["openinference-invocation-parameters", "genai-request-model"],
)
def test_a_failed_call_takes_its_model_from_the_request(attrs: dict[str, Any]) -> None:
    snap = valid(span_to_snapshot(span(attrs, status=2)))
    assert (snap["model"]["name"], snap["model"]["context_window"]) == ("gpt-4o", 128_000)
    assert "ctxobs.window" not in snap["tags"]
    assert snap["tags"]["error"] == "error"


def test_a_conversation_id_over_the_limit_is_never_cut() -> None:
    from ctxobs.wire import LIMITS

    long_id = "c" * LIMITS.max_id_chars + "-second"
    snap = span_to_snapshot(span(genai_attrs(**{"gen_ai.conversation.id": long_id})))
    assert snap["session_id"] == long_id
    out, errors = validate_snapshot(snap)
    assert out is None
    assert [e["loc"][-1] for e in errors] == ["session_id"]


def test_a_client_span_of_an_llm_span_stored_before_is_not_mapped_again() -> None:
    parent = span(genai_attrs(), span_id="1111111111111111")
    child = span(genai_attrs(), span_id="2222222222222222", parent="1111111111111111")
    stored_ids = {snapshot_id_for(TRACE, "1111111111111111")}
    asked: list[list[str]] = []

    def stored(ids: list[str]) -> set[str]:
        asked.append(ids)
        return stored_ids & set(ids)

    assert calls_stored_before([child], stored=stored, has_stored_child=lambda s: False) == {
        (TRACE, "2222222222222222")
    }
    assert asked == [[snapshot_id_for(TRACE, "1111111111111111")]]
    # The LLM span exported again with its client span: the call is still the stored one.
    again = calls_stored_before([parent, child], stored=stored, has_stored_child=lambda s: False)
    assert again == {(TRACE, "2222222222222222")}
    fresh = calls_stored_before([parent, child], stored=lambda ids: set(), has_stored_child=lambda s: False)
    assert fresh == set()


def test_an_llm_span_whose_client_span_was_stored_before_is_not_mapped_again() -> None:
    parent = span(genai_attrs(), span_id="1111111111111111")
    other = span(genai_attrs(), span_id="3333333333333333")
    found = calls_stored_before(
        [parent, other], stored=lambda ids: set(), has_stored_child=lambda s: s.span_id == "1111111111111111"
    )
    assert found == {(TRACE, "1111111111111111")}
    snap = span_to_snapshot(span(genai_attrs(), span_id="2222222222222222", parent="1111111111111111"))
    assert snap["tags"][TAG_PARENT] == "1111111111111111"
