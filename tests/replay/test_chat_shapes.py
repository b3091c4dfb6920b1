"""The embedded model server takes every chat message shape the OpenAI API accepts
(replay.localmodel.normalize_chat_messages in front of llama-cpp-python's server)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from replay import localmodel
from replay.localmodel import normalize_chat_messages

TOOL_EXCHANGE: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a weather assistant."},
    {"role": "system", "content": [{"type": "text", "text": "Answer in one short sentence."}]},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"},
]


def _texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages]


def test_tool_calls_tool_results_and_a_second_system_message_are_all_kept() -> None:
    out = normalize_chat_messages(TOOL_EXCHANGE)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[0]["content"] == "You are a weather assistant.\n\nAnswer in one short sentence."
    assert out[2]["content"] == '[tool call call_1: get_weather({"city": "Paris"})]'
    assert out[3]["content"] == "[tool result call_1] 18C and sunny"


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        (
            [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
            [("system", "Be brief."), ("user", "Hi")],
        ),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "system", "content": "late rule"},
                {"role": "user", "content": "b"},
            ],
            [("user", "a\n\n[system] late rule\n\nb")],
        ),
        (
            [{"role": "assistant", "content": "Hello, how can I help?"}, {"role": "user", "content": "Hi"}],
            [("user", ""), ("assistant", "Hello, how can I help?"), ("user", "Hi")],
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Look:"},
                        {"type": "image_url", "image_url": {"url": "https://x/cat.png"}},
                    ],
                }
            ],
            [("user", "Look:\n[image: https://x/cat.png]")],
        ),
        (
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "refusal": "I can't."}],
            [("user", "q"), ("assistant", "I can't.")],
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
                {"role": "function", "name": "f", "content": "42"},
            ],
            [("user", "q"), ("assistant", "[tool call: f({})]"), ("user", "[function result f] 42")],
        ),
    ],
    ids=["developer-role", "late-system", "assistant-first", "content-parts", "refusal", "legacy-function"],
)
def test_message_shapes(messages: list[dict[str, Any]], expected: list[tuple[str, str]]) -> None:
    assert [(m["role"], m["content"]) for m in normalize_chat_messages(messages)] == expected


def test_the_local_server_answers_a_tool_exchange_with_every_message_in_the_prompt(
    local_model: localmodel.LocalModelServer,
) -> None:
    client = openai.OpenAI(base_url=local_model.base_url, api_key="unused", max_retries=0)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]

    def prompt_tokens(messages: list[Any]) -> int:
        r = client.chat.completions.create(
            model="gemma-3-270m",
            messages=messages,
            tools=tools,  # type: ignore[arg-type]
            max_tokens=4,
            temperature=0,
        )
        assert r.usage is not None
        return r.usage.prompt_tokens

    full = prompt_tokens(TOOL_EXCHANGE)
    # Each part of the exchange reaches the model: leaving one out shortens the prompt.
    for i in (1, 3, 4):
        assert prompt_tokens(TOOL_EXCHANGE[:i] + TOOL_EXCHANGE[i + 1 :]) < full, (
            f"message {i} was not in the prompt"
        )
