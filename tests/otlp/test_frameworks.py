"""Agent frameworks captured through OTLP: the framework's own model client instrumented by
OpenInference, exported by the standard exporter to the real API, run against the embedded
local model. Each model call is checked from storage."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
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
from opentelemetry.sdk.trace import TracerProvider

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
