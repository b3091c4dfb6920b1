"""instrument_openai() with real openai clients against a local OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
import threading
from types import SimpleNamespace
from typing import Any

import openai
import pytest

import ctxobs
from tests.waiting import wait_until

SYSTEM = {"role": "system", "content": "You are a travel assistant. Answer briefly."}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_flights",
            "description": "Search flights",
            "parameters": {"type": "object", "properties": {"day": {"type": "string"}}},
        },
    }
]


def conversation() -> list[dict[str, Any]]:
    return [
        SYSTEM,
        ctxobs.tag({"role": "system", "content": "Memory: prefers a window seat"}, "memory", kind="memory"),
        {"role": "user", "content": "Find me a flight"},
        {"role": "assistant", "content": "Which day?"},
        {"role": "user", "content": "Friday please"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "search_flights", "arguments": '{"day":"fri"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"flights": ["CA123"]}'},
    ]


def snapshots_of(ingest, obs: ctxobs.Client) -> list[dict[str, Any]]:
    assert obs.flush(timeout=10)
    return sorted(ingest.stored.values(), key=lambda s: (s["session_id"], s["turn"]))


def no_ctxobs_fields(request: dict[str, Any]) -> bool:
    text = json.dumps(request)
    return "ctxobs" not in text


def test_sync_call_is_recorded_with_default_blocks_and_tags_never_reach_the_provider(
    ingest, provider, make_client
) -> None:
    obs = make_client(ingest.url)
    llm = ctxobs.instrument_openai(openai.OpenAI(base_url=provider.url + "/v1", api_key="x"), obs)
    resp = llm.chat.completions.create(
        model="gpt-4o-mini",
        messages=conversation(),
        tools=TOOLS,
        temperature=0,
        ctxobs_session="trip-1",
        ctxobs_tags={"env": "test"},
    )
    assert resp.choices[0].message.content == provider.reply_text
    sent = provider.requests[0]
    assert no_ctxobs_fields(sent)
    assert sent["messages"][1] == {"role": "system", "content": "Memory: prefers a window seat"}
    [snap] = snapshots_of(ingest, obs)
    assert ctxobs.validate_snapshot(snap)[1] == []
    assert [(b["key"], b["kind"]) for b in snap["blocks"]] == [
        ("system", "system"),
        ("tools", "tools"),
        ("memory", "memory"),
        ("history", "history"),
        ("user", "user"),
        ("tool_results", "tool_results"),
    ]
    assert [m for b in snap["blocks"] for m in b["messages"]] == sent["messages"]
    assert snap["params"]["tools"] == TOOLS and snap["params"]["temperature"] == 0
    assert snap["session_id"] == "trip-1" and snap["tags"] == {"env": "test"}
    assert snap["output"]["text"] == provider.reply_text
    assert snap["output"]["usage"]["prompt_tokens"] == 42 and snap["output"]["finish_reason"] == "stop"
    assert snap["output"]["latency_ms"] > 0
    assert snap["model"]["context_window"] == 128_000


def test_agents_message_list_is_left_untouched(ingest, provider, make_client) -> None:
    obs = make_client(ingest.url)
    llm = ctxobs.instrument_openai(openai.OpenAI(base_url=provider.url + "/v1", api_key="x"), obs)
    msgs = conversation()
    before = json.dumps(msgs)
    llm.chat.completions.create(model="gpt-4o-mini", messages=msgs)
    assert json.dumps(msgs) == before


def test_message_edited_in_place_after_the_call_is_recorded_as_sent(ingest, provider, make_client) -> None:
    # The sender thread makes the snapshot later (here: only at flush), so the call's messages
    # must have been captured when it was made.
    obs = make_client(ingest.url, flush_interval=60)
    llm = ctxobs.instrument_openai(openai.OpenAI(base_url=provider.url + "/v1", api_key="x"), obs)
    msgs = [{"role": "user", "content": "Here is a long tool output to trim later"}]
    llm.chat.completions.create(model="gpt-4o-mini", messages=msgs)
    msgs[0]["content"] = "trimmed"
    msgs.append({"role": "assistant", "content": "next turn"})
    [snap] = snapshots_of(ingest, obs)
    assert [m for b in snap["blocks"] for m in b["messages"]] == [
        {"role": "user", "content": "Here is a long tool output to trim later"}
    ]


class _Watched:
    """A provider reply (or stream chunk) that notes which threads read it, as the openai
    package's pydantic objects would be read: attributes, or `model_dump()`."""

    def __init__(self, data: dict[str, Any], seen: list[str]) -> None:
        self._data = data
        self._seen = seen

    def model_dump(self, **kw: Any) -> dict[str, Any]:
        self._seen.append(threading.current_thread().name)
        return self._data

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        self._seen.append(threading.current_thread().name)
        return self._data.get(name)


class _StandInCompletions:
    """`chat.completions` of a client that answers from memory (instrument_openai is duck-typed)."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def create(self, **kw: Any) -> Any:
        if kw.get("stream"):
            chunks = [
                {"choices": [{"index": 0, "delta": {"content": "o"}, "finish_reason": None}]},
                {"choices": [{"index": 0, "delta": {"content": "k"}, "finish_reason": "stop"}]},
            ]
            return iter([_Watched(c, self.seen) for c in chunks])
        return _Watched(
            {
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
            },
            self.seen,
        )


@pytest.mark.parametrize("stream", [False, True], ids=["reply", "stream"])
def test_reply_is_read_on_the_sender_thread_never_the_agents(ingest, make_client, stream: bool) -> None:
    obs = make_client(ingest.url)
    seen: list[str] = []
    client = SimpleNamespace(chat=SimpleNamespace(completions=_StandInCompletions(seen)))
    llm = ctxobs.instrument_openai(client, obs)
    hi = [{"role": "user", "content": "hi"}]
    resp = llm.chat.completions.create(model="gpt-4o-mini", messages=hi, stream=stream)
    if stream:
        assert len(list(resp)) == 2
    [snap] = snapshots_of(ingest, obs)
    assert snap["output"]["text"] == "ok"
    assert seen and threading.current_thread().name not in seen


@pytest.mark.parametrize("stream", [False, True], ids=["reply", "stream"])
def test_reply_is_read_and_released_before_its_batch_is_sent(ingest, make_client, stream: bool) -> None:
    # The reply's objects must not wait in the queue for their batch (garbage-collector work on
    # the agent's thread): the transport's reader thread reads them soon after the call.
    obs = make_client(ingest.url, flush_interval=60)
    seen: list[str] = []
    client = SimpleNamespace(chat=SimpleNamespace(completions=_StandInCompletions(seen)))
    llm = ctxobs.instrument_openai(client, obs)
    resp = llm.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
                                       stream=stream)
    if stream:
        assert len(list(resp)) == 2
    wait_until(lambda: seen, 10, "the reply to be read")
    assert obs.stats()["queued"] == 1 and set(seen) == {"ctxobs-reader"}
    [snap] = snapshots_of(ingest, obs)
    assert snap["output"]["text"] == "ok"
    assert set(seen) == {"ctxobs-reader"}


def test_turns_auto_increment_per_session_from_the_context_variable(ingest, provider, make_client) -> None:
    obs = make_client(ingest.url)
    llm = ctxobs.instrument_openai(openai.OpenAI(base_url=provider.url + "/v1", api_key="x"), obs)
    with ctxobs.session("a", agent="bot-a"):
        for _ in range(3):
            llm.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    with ctxobs.session("b"):
        llm.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    snaps = snapshots_of(ingest, obs)
    assert [(s["session_id"], s["turn"], s["agent"]) for s in snaps] == [
        ("a", 0, "bot-a"),
        ("a", 1, "bot-a"),
        ("a", 2, "bot-a"),
        ("b", 0, ""),
    ]


def test_stream_passes_chunks_through_and_records_text_and_usage_at_the_end(
    ingest, provider, make_client
) -> None:
    obs = make_client(ingest.url)
    llm = ctxobs.instrument_openai(openai.OpenAI(base_url=provider.url + "/v1", api_key="x"), obs)
    stream = llm.chat.completions.create(
        model="gpt-4o-mini",
        messages=conversation(),
        stream=True,
        stream_options={"include_usage": True},
        ctxobs_session="st",
    )
    pieces = []
    for chunk in stream:
        assert isinstance(chunk, openai.types.chat.ChatCompletionChunk)
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
    assert "".join(pieces) == provider.reply_text
    assert no_ctxobs_fields(provider.requests[0])
    [snap] = snapshots_of(ingest, obs)
    assert snap["output"]["text"] == provider.reply_text
    assert snap["output"]["finish_reason"] == "stop"
    assert snap["output"]["usage"] == {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}
    assert "tags" not in snap


def test_streamed_tool_call_is_reassembled(ingest, provider, make_client) -> None:
    provider.tool_call = {
        "id": "call_9",
        "type": "function",
        "function": {"name": "search_flights", "arguments": '{"day": "friday"}'},
    }
    obs = make_client(ingest.url)
    llm = ctxobs.instrument_openai(openai.OpenAI(base_url=provider.url + "/v1", api_key="x"), obs)
    with llm.chat.completions.create(
        model="gpt-4o-mini", messages=conversation(), tools=TOOLS, stream=True
    ) as stream:
        chunks = list(stream)
    assert chunks
    [snap] = snapshots_of(ingest, obs)
    assert snap["output"]["tool_calls"] == [provider.tool_call]
    assert snap["output"]["text"] is None and snap["output"]["finish_reason"] == "tool_calls"


def test_stream_closed_early_is_recorded_as_incomplete(ingest, provider, make_client) -> None:
    obs = make_client(ingest.url)
    llm = ctxobs.instrument_openai(openai.OpenAI(base_url=provider.url + "/v1", api_key="x"), obs)
    stream = llm.chat.completions.create(model="gpt-4o-mini", messages=conversation(), stream=True)
    next(iter(stream))
    stream.close()
    [snap] = snapshots_of(ingest, obs)
    assert snap["tags"]["ctxobs.stream"] == "incomplete"


def test_async_client_create_and_stream_are_recorded(ingest, provider, make_client) -> None:
    obs = make_client(ingest.url)

    async def main() -> str:
        llm = ctxobs.instrument_openai(openai.AsyncOpenAI(base_url=provider.url + "/v1", api_key="x"), obs)
        with ctxobs.session("async-s"):
            r = await llm.chat.completions.create(model="gpt-4o-mini", messages=conversation())
            stream = await llm.chat.completions.create(
                model="gpt-4o-mini", messages=conversation(), stream=True
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await llm.close()
        assert r.choices[0].message.content == text
        return text

    text = asyncio.run(main())
    snaps = snapshots_of(ingest, obs)
    assert [(s["session_id"], s["turn"]) for s in snaps] == [("async-s", 0), ("async-s", 1)]
    assert all(s["output"]["text"] == text for s in snaps)
    assert all(no_ctxobs_fields(r) for r in provider.requests)


def test_concurrent_async_tasks_keep_their_own_sessions(ingest, provider, make_client) -> None:
    obs = make_client(ingest.url)

    async def agent(llm: Any, name: str) -> None:
        with ctxobs.session(name):
            for _ in range(3):
                await llm.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": name}]
                )

    async def main() -> None:
        llm = ctxobs.instrument_openai(openai.AsyncOpenAI(base_url=provider.url + "/v1", api_key="x"), obs)
        await asyncio.gather(*(agent(llm, f"task-{i}") for i in range(4)))
        await llm.close()

    asyncio.run(main())
    snaps = snapshots_of(ingest, obs)
    assert len(snaps) == 12
    for s in snaps:
        assert s["blocks"][-1]["messages"][0]["content"] == s["session_id"]


def test_provider_error_propagates_and_the_failed_call_is_recorded(ingest, provider, make_client) -> None:
    provider.fail_next = 400
    obs = make_client(ingest.url)
    llm = ctxobs.instrument_openai(
        openai.OpenAI(base_url=provider.url + "/v1", api_key="x", max_retries=0), obs
    )
    with pytest.raises(openai.BadRequestError):
        llm.chat.completions.create(model="gpt-4o-mini", messages=conversation(), ctxobs_session="err")
    [snap] = snapshots_of(ingest, obs)
    assert snap["tags"]["error"] == "BadRequestError" and "output" not in snap


def test_custom_partitioner_and_context_window_argument(ingest, provider, make_client) -> None:
    def one_block(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"key": "everything", "kind": "other", "messages": messages}]

    obs = make_client(ingest.url)
    llm = ctxobs.instrument_openai(
        openai.OpenAI(base_url=provider.url + "/v1", api_key="x"), obs, one_block, context_window=2048
    )
    llm.chat.completions.create(model="gemma-3-270m-it", messages=conversation())
    [snap] = snapshots_of(ingest, obs)
    assert [b["key"] for b in snap["blocks"]] == ["everything"]
    assert all("ctxobs_block" not in m for m in snap["blocks"][0]["messages"])
    assert snap["model"]["context_window"] == 2048 and snap["model"]["counts"] == "estimated"


def test_instrumenting_twice_records_once_and_uninstrument_restores(ingest, provider, make_client) -> None:
    obs = make_client(ingest.url)
    llm = openai.OpenAI(base_url=provider.url + "/v1", api_key="x")
    ctxobs.instrument_openai(llm, obs)
    ctxobs.instrument_openai(llm, obs)
    llm.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    assert len(snapshots_of(ingest, obs)) == 1
    ctxobs.uninstrument_openai(llm)
    llm.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    assert len(snapshots_of(ingest, obs)) == 1


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        pytest.param([{"role": "user", "content": "q"}], [("user", 1)], id="user-only"),
        pytest.param(
            [
                {"role": "developer", "content": "d"},
                {"role": "system", "content": "s"},
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {"role": "user", "content": "c"},
            ],
            [("system", 2), ("history", 2), ("user", 1)],
            id="system-history-user",
        ),
        pytest.param(
            [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "a"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "1", "content": "old"},
                {"role": "assistant", "content": "done"},
                {"role": "user", "content": "b"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "2", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "2", "content": "new"},
            ],
            [("system", 1), ("history", 4), ("user", 1), ("tool_results", 2)],
            id="old-tools-stay-in-history",
        ),
        pytest.param(
            [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "doc", "ctxobs_block": "retrieval"},
                {"role": "user", "content": "a"},
                {"role": "user", "content": "doc2", "ctxobs_block": "retrieval"},
                {"role": "user", "content": "b"},
            ],
            [("system", 1), ("retrieval", 1), ("history", 1), ("retrieval.2", 1), ("user", 1)],
            id="tagged-block-returning-later-gets-a-suffix",
        ),
    ],
)
def test_default_partitioner(messages: list[dict[str, Any]], expected: list[tuple[str, int]]) -> None:
    blocks = ctxobs.default_partitioner(messages)
    assert [(b["key"], len(b["messages"])) for b in blocks] == expected
    assert [m for b in blocks for m in b["messages"]] == messages
