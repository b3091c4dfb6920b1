"""Agent frameworks captured through OTLP: the framework's own model client instrumented by
OpenInference, exported by the standard exporter to the real API, run against the embedded
local model. Each model call is checked from storage."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openinference.instrumentation import using_session
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from core.models import Project
from ingest import selectors
from replay import localmodel
from tests.ctxobs.conftest import ApiServer


@tool
def get_weather(city: str) -> str:
    """The current weather of a city."""
    return f"18C and sunny in {city}"


def test_a_langchain_chat_openai_agent_with_a_tool_call(
    otlp_server: tuple[ApiServer, Project, str],
    traced: TracerProvider,
    local_model: localmodel.LocalModelServer,
) -> None:
    _, project, _ = otlp_server
    llm = ChatOpenAI(  # type: ignore[call-arg]  # max_tokens is a pydantic alias
        model="gemma-3-270m",
        base_url=local_model.base_url,
        api_key="unused",  # type: ignore[arg-type]
        temperature=0,
        max_tokens=24,
        max_retries=0,
    )
    messages: list[BaseMessage] = [
        SystemMessage("You are a weather assistant."),
        HumanMessage("Weather in Oslo?"),
    ]
    with using_session("langchain-session"):
        # A named tool choice: llama.cpp then follows a grammar, so the small model calls the tool.
        ai = llm.bind_tools([get_weather], tool_choice="get_weather").invoke(messages)
        call: dict[str, Any] = dict(ai.tool_calls[0])  # type: ignore[attr-defined]
        messages += [ai, ToolMessage(str(get_weather.invoke(call["args"])), tool_call_id=call["id"])]
        # LangChain sends the assistant turn back with its tool calls: the shape llama.cpp refused.
        final = llm.bind_tools([get_weather]).invoke(messages)
    assert traced.force_flush(30_000)

    session = selectors.session_get(project=project, session_id="langchain-session")
    assert session is not None and session.turn_count == 2
    timeline, _ = selectors.session_timeline_turns(project=project, session=session)
    stored = [selectors.snapshot_by_uuid(project=project, snapshot_id=t["snapshot_id"]) for t in timeline]
    first, second = [selectors.snapshot_full(snapshot=s) for s in stored if s is not None]
    assert [b["key"] for b in first["blocks"]] == ["system", "tools", "user"]
    assert [b["key"] for b in second["blocks"]] == ["system", "tools", "user", "tool_results"]
    assert first["output"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert first["output"]["tool_calls"][0]["id"] == call["id"]
    exchange = second["blocks"][3]["messages"]
    assert exchange[0]["tool_calls"][0]["id"] == call["id"]
    assert exchange[1]["role"] == "tool" and exchange[1]["tool_call_id"] == call["id"]
    assert exchange[1]["content"] == get_weather.invoke(call["args"])
    assert (second["output"]["text"] or "") == (final.content or "")
    for snap in (first, second):
        assert [t["function"]["name"] for t in snap["params"]["tools"]] == ["get_weather"]


def stored_turns(project: Project, session_id: str, turns: int) -> list[dict[str, Any]]:
    """The snapshots of SESSION_ID, in turn order; the session must have TURNS turns."""
    session = selectors.session_get(project=project, session_id=session_id)
    assert session is not None and session.turn_count == turns
    timeline, _ = selectors.session_timeline_turns(project=project, session=session)
    stored = [selectors.snapshot_by_uuid(project=project, snapshot_id=t["snapshot_id"]) for t in timeline]
    return [selectors.snapshot_full(snapshot=s) for s in stored if s is not None]


@function_tool
def city_weather(city: str) -> str:
    """The current weather of a city."""
    return f"18C and sunny in {city}"


def test_an_openai_agents_sdk_agent_with_a_function_tool(
    otlp_server: tuple[ApiServer, Project, str],
    traced: TracerProvider,
    local_model: localmodel.LocalModelServer,
) -> None:
    _, project, _ = otlp_server
    # The Agents SDK's own tracing exports to OpenAI's servers: off, the OTLP spans are the record.
    set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=local_model.base_url, api_key="unused", max_retries=0)
    agent = Agent(
        name="weather",
        instructions="You are a weather assistant.",
        model=OpenAIChatCompletionsModel(model="gemma-3-270m", openai_client=client),
        tools=[city_weather],
        # A named tool choice: llama.cpp then follows a grammar, so the small model calls the
        # tool. The SDK resets it after the tool ran (reset_tool_choice), so the second call
        # answers with the tool's result.
        model_settings=ModelSettings(tool_choice="city_weather", temperature=0, max_tokens=24),
    )
    with using_session("agents-session"):
        result = asyncio.run(Runner.run(agent, "Weather in Oslo?", max_turns=3))
    assert traced.force_flush(30_000)

    calls = result.raw_responses
    assert len(calls) == 2
    first, second = stored_turns(project, "agents-session", 2)
    assert [b["key"] for b in first["blocks"]] == ["system", "tools", "user"]
    assert [b["key"] for b in second["blocks"]] == ["system", "tools", "user", "tool_results"]
    assert first["blocks"][0]["messages"] == [{"role": "system", "content": "You are a weather assistant."}]
    assert first["blocks"][2]["messages"] == [{"role": "user", "content": "Weather in Oslo?"}]
    call = first["output"]["tool_calls"][0]
    assert call["function"]["name"] == "city_weather"
    exchange = second["blocks"][3]["messages"]
    assert exchange[0]["role"] == "assistant"
    assert exchange[0]["tool_calls"][0]["id"] == call["id"]
    assert exchange[0]["tool_calls"][0]["function"]["name"] == "city_weather"
    assert exchange[1]["role"] == "tool" and exchange[1]["tool_call_id"] == call["id"]
    assert exchange[1]["content"].startswith("18C and sunny in ")
    assert (second["output"]["text"] or "") == (result.final_output or "")
    for snap, raw in zip((first, second), calls, strict=True):
        assert [t["function"]["name"] for t in snap["params"]["tools"]] == ["city_weather"]
        assert snap["blocks"][1]["tokens"] > 0
        assert snap["model"]["name"] == "gemma-3-270m"
        assert raw.usage is not None
        assert snap["output"]["usage"]["prompt_tokens"] == raw.usage.input_tokens
        assert "ctxobs.content" not in snap["tags"]


@pytest.fixture
def litellm_traced(
    otlp_server: tuple[ApiServer, Project, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[TracerProvider]:
    """OpenInference's LiteLLM instrumentation beside its OpenAI one (LiteLLM's `openai/`
    provider calls the openai client), exporting with the standard exporter, configured the
    documented way (OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_HEADERS)."""
    # LiteLLM fetches its model price map at import unless told to use the bundled one.
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from openinference.instrumentation.litellm import LiteLLMInstrumentor

    server, _, key = otlp_server
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"{server.url}/api/v1/otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer%20{key}")
    provider = TracerProvider(resource=Resource.create({"service.name": "litellm-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    instrumentors = [LiteLLMInstrumentor(), OpenAIInstrumentor()]
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=provider)
    try:
        yield provider
    finally:
        for instrumentor in instrumentors:
            instrumentor.uninstrument()
        provider.shutdown()


LITELLM_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def test_a_litellm_agent_with_a_tool_call(
    otlp_server: tuple[ApiServer, Project, str],
    litellm_traced: TracerProvider,
    local_model: localmodel.LocalModelServer,
) -> None:
    import litellm

    _, project, _ = otlp_server
    model = {"model": "openai/gemma-3-270m", "api_base": local_model.base_url, "api_key": "unused"}
    messages: list[Any] = [
        {"role": "system", "content": "You are a weather assistant. Use the tools."},
        {"role": "user", "content": "Weather in Lisbon?"},
    ]
    with using_session("litellm-session"):
        first = litellm.completion(
            **model,
            messages=messages,
            tools=LITELLM_TOOLS,
            # A named tool choice: llama.cpp then follows a grammar, so the small model calls the tool.
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            temperature=0,
            max_tokens=40,
        )
        call = first.choices[0].message.tool_calls[0]
        # LiteLLM's own message object goes back into the history, as its documentation does it.
        messages.append(first.choices[0].message)
        city = json.loads(call.function.arguments).get("city", "Lisbon")
        messages.append({"role": "tool", "tool_call_id": call.id, "content": f"18C and sunny in {city}"})
        second = litellm.completion(
            **model, messages=messages, tools=LITELLM_TOOLS, temperature=0, max_tokens=24
        )
    assert litellm_traced.force_flush(30_000)

    # LiteLLM's span wraps the openai client's: the inner one, with the tool call ids, is the turn.
    one, two = stored_turns(project, "litellm-session", 2)
    assert [b["key"] for b in one["blocks"]] == ["system", "tools", "user"]
    assert [b["key"] for b in two["blocks"]] == ["system", "tools", "user", "tool_results"]
    assert one["blocks"][2]["messages"] == [{"role": "user", "content": "Weather in Lisbon?"}]
    assert one["output"]["tool_calls"][0]["id"] == call.id
    assert one["output"]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": call.function.arguments,
    }
    exchange = two["blocks"][3]["messages"]
    assert exchange[0]["role"] == "assistant"
    assert exchange[0]["tool_calls"][0]["id"] == call.id
    assert exchange[0]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert exchange[1] == {"role": "tool", "tool_call_id": call.id, "content": f"18C and sunny in {city}"}
    assert (two["output"]["text"] or "") == (second.choices[0].message.content or "")
    for snap, reply in ((one, first), (two, second)):
        assert [t["function"]["name"] for t in snap["params"]["tools"]] == ["get_weather"]
        assert snap["blocks"][1]["tokens"] > 0
        assert snap["agent"] == "litellm-agent"
        assert snap["model"]["name"] == "gemma-3-270m"  # the openai client's span, not LiteLLM's
        assert snap["output"]["usage"]["prompt_tokens"] == reply.usage.prompt_tokens
        assert "ctxobs.content" not in snap["tags"]
