"""An OpenTelemetry-instrumented agent end to end: the `openai` client instrumented by
OpenInference, the OTel SDK and its standard OTLP/HTTP exporter configured by environment
variables, the real API (gunicorn) and the embedded local model. Each model call is checked
from storage: one snapshot, with its blocks, tools and output."""

from __future__ import annotations

import json
from typing import Any

import openai
from openinference.instrumentation import using_session
from opentelemetry.sdk.trace import TracerProvider

from core.models import Project
from ingest import selectors
from replay import localmodel
from tests.ctxobs.conftest import ApiServer

TOOLS: list[Any] = [
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


# llama.cpp follows a named tool choice with a grammar; the small model would not call a tool otherwise.
FORCE_TOOL: Any = {"type": "function", "function": {"name": "get_weather"}}


def get_weather(city: str) -> str:
    return f"18C and sunny in {city}"


def run_agent(client: openai.OpenAI, question: str) -> list[Any]:
    """A small tool-calling agent: the model is made to call the tool, the tool runs, the model
    answers with its result. Returns the replies of the model calls."""
    messages: list[Any] = [
        {"role": "system", "content": "You are a weather assistant. Use the tools."},
        {"role": "user", "content": question},
    ]
    first = client.chat.completions.create(
        model="gemma-3-270m",
        messages=messages,
        tools=TOOLS,
        max_tokens=40,
        temperature=0,  # type: ignore[arg-type]
        tool_choice=FORCE_TOOL,
    )
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    city = json.loads(call.function.arguments).get("city", "Paris")  # type: ignore[union-attr]
    messages.append({"role": "tool", "tool_call_id": call.id, "content": get_weather(city)})
    second = client.chat.completions.create(
        model="gemma-3-270m",
        messages=messages,
        tools=TOOLS,
        max_tokens=24,
        temperature=0,  # type: ignore[arg-type]
    )
    return [first, second]


def test_an_instrumented_agent_exports_each_model_call_as_one_snapshot(
    otlp_server: tuple[ApiServer, Project, str],
    traced: TracerProvider,
    local_model: localmodel.LocalModelServer,
) -> None:
    _, project, _ = otlp_server
    client = openai.OpenAI(base_url=local_model.base_url, api_key="unused", max_retries=0)
    with using_session("weather-session-1"):
        replies = run_agent(client, "What is the weather in Paris?")
    assert traced.force_flush(30_000)

    session = selectors.session_get(project=project, session_id="weather-session-1")
    assert session is not None
    assert session.turn_count == 2
    assert session.agent == "weather-agent"
    timeline, _ = selectors.session_timeline_turns(project=project, session=session)
    stored = [selectors.snapshot_by_uuid(project=project, snapshot_id=t["snapshot_id"]) for t in timeline]
    snaps = [selectors.snapshot_full(snapshot=s) for s in stored if s is not None]
    first, second = snaps
    assert [b["key"] for b in first["blocks"]] == ["system", "tools", "user"]
    assert [b["key"] for b in second["blocks"]] == ["system", "tools", "user", "tool_results"]
    for snap in snaps:
        assert [t["function"]["name"] for t in snap["params"]["tools"]] == ["get_weather"]
        assert snap["blocks"][1]["tokens"] > 0
        assert snap["model"]["name"] == "gemma-3-270m"
        assert snap["tags"]["ctxobs.otel.convention"] == "openinference"
        assert "ctxobs.content" not in snap["tags"]

    user = first["blocks"][2]["messages"]
    assert [m["content"] for m in user] == ["What is the weather in Paris?"]
    expected_call = replies[0].choices[0].message.tool_calls[0]
    assert [c["function"]["name"] for c in first["output"]["tool_calls"]] == ["get_weather"]
    assert first["output"]["tool_calls"][0]["function"]["arguments"] == expected_call.function.arguments
    assert first["output"]["usage"]["prompt_tokens"] == replies[0].usage.prompt_tokens

    exchange = second["blocks"][3]["messages"]
    assert exchange[0]["role"] == "assistant"
    assert exchange[0]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert exchange[1] == {
        "role": "tool",
        "tool_call_id": expected_call.id,
        "content": get_weather(json.loads(expected_call.function.arguments).get("city", "Paris")),
    }
    assert (second["output"]["text"] or "") == (replies[1].choices[0].message.content or "")
    assert second["output"]["usage"]["completion_tokens"] == replies[1].usage.completion_tokens
