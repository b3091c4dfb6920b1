"""The embedded model answers the chat API from a transcript (replay.localmodel.ChatAsTranscript in
front of llama-cpp-python's server): every message shape the OpenAI API accepts reaches the
model whole, and no other model's chat-template tokens appear in its answers."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from replay import localmodel
from replay.ablation import render_transcript
from replay.localmodel import chat_as_completion, completion_as_chat, forces_a_tool, normalize_chat_messages

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
TOOLS = [
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
# Chat-template tokens of other model families: Llama 2 (llama-cpp-python's fallback for a GGUF
# with no template), ChatML, Llama 3, and Gemma's own turn markers.
TEMPLATE_TOKENS = (
    "[INST]",
    "[/INST]",
    "<<SYS>>",
    "<</SYS>>",
    "<|im_start|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<start_of_turn>",
    "<end_of_turn>",
)


def test_a_chat_request_becomes_the_transcript_with_every_message_and_its_stops() -> None:
    body = chat_as_completion(
        {
            "model": "gemma-3-270m",
            "messages": TOOL_EXCHANGE,
            "tools": TOOLS,
            "max_completion_tokens": 9,
            "temperature": 0,
            "stop": "END",
            "stream": True,
            "tool_choice": "auto",
        }
    )
    assert body["prompt"] == render_transcript(TOOL_EXCHANGE, TOOLS)
    for text in (
        "You are a weather assistant.",
        "Answer in one short sentence.",
        "Weather in Paris?",
        'get_weather({"city": "Paris"})',
        "18C and sunny",
        "Tools available",
    ):
        assert text in body["prompt"]
    assert body["prompt"].endswith("Assistant:")
    assert body["stop"][0] == "END" and "\nUser:" in body["stop"] and "\nAssistant:" in body["stop"]
    assert (body["max_tokens"], body["temperature"], body["stream"]) == (9, 0, True)
    assert "tool_choice" not in body and "messages" not in body


def test_a_completion_reply_reads_as_the_chat_reply() -> None:
    chat = completion_as_chat(
        {
            "id": "cmpl-1",
            "created": 5,
            "model": "gemma-3-270m",
            "choices": [{"index": 0, "text": " It is sunny.", "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 4, "total_tokens": 44},
        }
    )
    assert chat["object"] == "chat.completion" and chat["id"] == "chatcmpl-1"
    assert chat["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "It is sunny."},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    assert chat["usage"]["prompt_tokens"] == 40


@pytest.fixture
def chat(local_model: localmodel.LocalModelServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=local_model.base_url, api_key="unused", max_retries=0)


def test_the_local_server_answers_a_tool_exchange_with_every_message_in_the_prompt(
    chat: openai.OpenAI,
) -> None:
    def prompt_tokens(messages: list[Any]) -> int:
        r = chat.chat.completions.create(
            model="gemma-3-270m",
            messages=messages,
            tools=TOOLS,
            max_tokens=4,
            temperature=0,  # type: ignore[arg-type]
        )
        assert r.usage is not None
        return r.usage.prompt_tokens

    full = prompt_tokens(TOOL_EXCHANGE)
    # Each part of the exchange reaches the model, the second system message too: leaving one
    # out shortens the prompt.
    for i in (1, 3, 4):
        assert prompt_tokens(TOOL_EXCHANGE[:i] + TOOL_EXCHANGE[i + 1 :]) < full, (
            f"message {i} was not in the prompt"
        )


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        [
            {"role": "user", "content": "a"},
            {"role": "system", "content": "late rule"},
            {"role": "user", "content": "b"},
        ],
        [{"role": "assistant", "content": "Hello, how can I help?"}, {"role": "user", "content": "Hi"}],
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look:"},
                    {"type": "image_url", "image_url": {"url": "https://x/cat.png"}},
                ],
            }
        ],
        [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
            {"role": "function", "name": "f", "content": "42"},
        ],
    ],
    ids=["developer-role", "late-system", "assistant-first", "content-parts", "legacy-function"],
)
def test_every_openai_message_shape_is_answered(chat: openai.OpenAI, messages: list[Any]) -> None:
    r = chat.chat.completions.create(model="gemma-3-270m", messages=messages, max_tokens=4, temperature=0)
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert r.usage is not None and r.usage.prompt_tokens > 0


def test_answers_hold_no_chat_template_tokens_and_a_stream_says_the_same(chat: openai.OpenAI) -> None:
    messages = [
        {"role": "system", "content": "You are a travel assistant. The user's budget is 600 EUR."},
        {"role": "user", "content": "What is my budget?"},
    ]
    whole = chat.chat.completions.create(
        model="gemma-3-270m", messages=messages, max_tokens=24, temperature=0
    )
    text = whole.choices[0].message.content or ""
    assert text and not text[0].isspace()
    assert not [t for t in TEMPLATE_TOKENS if t in text], text
    # The transcript's labels stop the answer before the model writes another turn.
    assert "\nUser:" not in text and "\nAssistant:" not in text
    pieces = []
    roles = []
    with chat.chat.completions.create(
        model="gemma-3-270m", messages=messages, max_tokens=24, temperature=0, stream=True
    ) as stream:
        for chunk in stream:
            assert chunk.object == "chat.completion.chunk"
            for ch in chunk.choices:
                pieces.append(ch.delta.content or "")
                roles.append(ch.delta.role)
    assert "".join(pieces) == text
    assert roles.count("assistant") == 1


# --- a call that forces a tool: llama-cpp-python's handler, messages in the shapes it takes ---
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
def test_message_shapes_for_the_tool_forcing_handler(
    messages: list[dict[str, Any]], expected: list[tuple[str, str]]
) -> None:
    assert [(m["role"], m["content"]) for m in normalize_chat_messages(messages)] == expected


def test_only_a_call_that_forces_a_tool_leaves_the_transcript() -> None:
    assert forces_a_tool({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "x"}}})
    assert forces_a_tool({"tools": TOOLS, "tool_choice": "required"})
    assert not forces_a_tool({"tools": TOOLS, "tool_choice": "auto"})
    assert not forces_a_tool({"tools": TOOLS})
    assert not forces_a_tool({"tool_choice": "required"})


def test_a_forced_tool_call_comes_back_as_the_call_with_its_arguments(chat: openai.OpenAI) -> None:
    r = chat.chat.completions.create(
        model="gemma-3-270m",
        messages=[
            {"role": "system", "content": "You are a weather assistant."},
            {"role": "user", "content": "Weather in Oslo?"},
        ],
        tools=TOOLS,  # type: ignore[arg-type]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=40,
        temperature=0,
    )
    calls = r.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "get_weather"  # type: ignore[union-attr]
    args = json.loads(calls[0].function.arguments)  # type: ignore[union-attr]
    assert isinstance(args, dict) and "city" in args
    assert not [t for t in TEMPLATE_TOKENS if t in calls[0].function.arguments]  # type: ignore[union-attr]
