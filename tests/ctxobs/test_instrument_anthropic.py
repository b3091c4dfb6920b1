"""instrument_anthropic() with real anthropic clients against a local Messages API server.

`AnthropicServer` answers `/v1/messages` (and the beta `/v1/messages?beta=true`) with the JSON
and the server-sent events of the real API, rebuilt from one reply message per test: the events
of a stream are the API's recorded sequence (message_start, content_block_start, ping,
content_block_delta, content_block_stop, message_delta, message_stop).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from types import SimpleNamespace
from typing import Any

import anthropic
import pytest
from anthropic.types import RawContentBlockStartEvent, RawMessageStartEvent, RawMessageStopEvent

import ctxobs
from ctxobs.instrument_anthropic import chat_messages
from tests.ctxobs.conftest import _Server

MODEL = "claude-sonnet-4-5-20250929"


def usage(inp: int, out: int, read: int = 0, write: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": inp,
        "cache_creation_input_tokens": write,
        "cache_read_input_tokens": read,
        "output_tokens": out,
        "service_tier": "standard",
    }


def message(content: list[dict[str, Any]], stop_reason: str = "end_turn", **extra: Any) -> dict[str, Any]:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage(12, 6),
        **extra,
    }


TEXT_REPLY = message([{"type": "text", "text": "Hello there, traveller."}])
TOOL_USE = {
    "type": "tool_use",
    "id": "toolu_01A09q90qw90lq917835lq9",
    "name": "search_flights",
    "input": {"day": "friday", "seats": 2},
}
TOOL_REPLY = message([{"type": "text", "text": "Let me search."}, TOOL_USE], "tool_use")


class AnthropicServer(_Server):
    """The Messages API: REPLY as JSON, or as its event stream when the request asks for one."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.reply: dict[str, Any] = TEXT_REPLY
        self.fail_next: int | None = None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                req = json.loads(raw)
                with server.lock:
                    server.requests.append(req)
                    server.paths.append(self.path)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    fail, server.fail_next = server.fail_next, None
                    reply = copy.deepcopy(server.reply)
                if fail:
                    body = {
                        "type": "error",
                        "error": {"type": "invalid_request_error", "message": "messages: field required"},
                        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
                    }
                    self._send(fail, "application/json", json.dumps(body).encode())
                    return
                reply["model"] = req.get("model", MODEL)
                if not req.get("stream"):
                    self._send(200, "application/json", json.dumps(reply).encode())
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for event in stream_events(reply):
                    self._chunk(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n")
                self.wfile.write(b"0\r\n\r\n")

            def _send(self, status: int, ctype: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("request-id", "req_011CSHoEeqs5C35K2UUqR7Fy")
                self.end_headers()
                self.wfile.write(body)

            def _chunk(self, text: str) -> None:
                data = text.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        return Handler


def stream_events(reply: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The events the Messages API streams for REPLY, in the API's order and shapes."""
    u = reply["usage"]
    start_usage = {**u, "output_tokens": 1}
    yield {
        "type": "message_start",
        "message": {**reply, "content": [], "stop_reason": None, "usage": start_usage},
    }
    for i, block in enumerate(reply["content"]):
        if block["type"] == "text":
            yield {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}
            if i == 0:
                yield {"type": "ping"}
            words = block["text"].split(" ")
            for j, w in enumerate(words):
                delta = {"type": "text_delta", "text": w if j == 0 else " " + w}
                yield {"type": "content_block_delta", "index": i, "delta": delta}
        elif block["type"] == "tool_use":
            yield {"type": "content_block_start", "index": i, "content_block": {**block, "input": {}}}
            args = json.dumps(block["input"])
            for j in range(0, len(args), 7):
                delta = {"type": "input_json_delta", "partial_json": args[j : j + 7]}
                yield {"type": "content_block_delta", "index": i, "delta": delta}
        elif block["type"] == "compaction":
            yield {
                "type": "content_block_start",
                "index": i,
                "content_block": {"type": "compaction", "content": None},
            }
            delta = {
                "type": "compaction_delta",
                "content": block.get("content"),
                "encrypted_content": block.get("encrypted_content"),
            }
            yield {"type": "content_block_delta", "index": i, "delta": delta}
        yield {"type": "content_block_stop", "index": i}
    end: dict[str, Any] = {
        "type": "message_delta",
        "delta": {"stop_reason": reply["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": u["output_tokens"]},
    }
    if reply.get("context_management") is not None:
        end["context_management"] = reply["context_management"]
    yield end
    yield {"type": "message_stop"}


@pytest.fixture
def claude() -> Iterator[AnthropicServer]:
    server = AnthropicServer()
    server.start()
    yield server
    server.stop()


SYSTEM = [
    {"type": "text", "text": "You are a travel assistant. Answer briefly."},
    {"type": "text", "text": "Policy: never book without consent.", "cache_control": {"type": "ephemeral"}},
]
TOOLS = [
    {
        "name": "search_flights",
        "description": "Search flights",
        "input_schema": {"type": "object", "properties": {"day": {"type": "string"}}},
        "cache_control": {"type": "ephemeral"},
    }
]


def conversation() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Find me a flight"},
        {"role": "assistant", "content": "Which day?"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Friday please", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Searching."}, TOOL_USE]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": TOOL_USE["id"],
                    "content": '{"flights": ["CA123"]}',
                    "cache_control": {"type": "ephemeral"},
                },
            ],
        },
    ]


def sync_client(server: AnthropicServer, obs: ctxobs.Client, **kw: Any) -> Any:
    # Any: the tests send the API's JSON shapes as plain dicts, not the client's TypedDicts.
    return ctxobs.instrument_anthropic(anthropic.Anthropic(base_url=server.url, api_key="x", **kw), obs)


def snapshots_of(ingest: Any, obs: ctxobs.Client) -> list[dict[str, Any]]:
    assert obs.flush(timeout=10)
    snaps = sorted(ingest.stored.values(), key=lambda s: (s["session_id"], s["turn"]))
    for s in snaps:
        assert ctxobs.validate_snapshot(s)[1] == []
    return snaps


def messages_of(snap: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for b in snap["blocks"] for m in b["messages"]]


def test_call_is_recorded_with_system_tools_and_chat_shaped_blocks_and_options_never_reach_the_provider(
    ingest, claude, make_client
) -> None:
    obs = make_client(ingest.url)
    llm = sync_client(claude, obs)
    resp = llm.messages.create(
        model=MODEL,
        max_tokens=256,
        system=SYSTEM,
        tools=TOOLS,
        messages=conversation(),
        stop_sequences=["END"],
        ctxobs_session="trip-1",
        ctxobs_tags={"env": "test"},
    )
    assert resp.content[0].text == "Hello there, traveller."
    sent = claude.requests[0]
    assert "ctxobs" not in json.dumps(sent)
    assert sent["system"] == SYSTEM and sent["messages"] == conversation()
    [snap] = snapshots_of(ingest, obs)
    assert [(b["key"], b["kind"]) for b in snap["blocks"]] == [
        ("tools", "tools"),
        ("system", "system"),
        ("history", "history"),
        ("user", "user"),
        ("tool_results", "tool_results"),
    ]
    blocks = {b["key"]: b["messages"] for b in snap["blocks"]}
    assert blocks["system"] == [{"role": "system", "content": SYSTEM}]
    assert blocks["tool_results"] == [
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Searching."}],
            "tool_calls": [
                {
                    "id": TOOL_USE["id"],
                    "type": "function",
                    "function": {"name": "search_flights", "arguments": '{"day": "friday", "seats": 2}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": TOOL_USE["id"],
            "content": '{"flights": ["CA123"]}',
            "cache_control": {"type": "ephemeral"},
        },
    ]
    assert snap["params"] == {"max_tokens": 256, "stop_sequences": ["END"], "tools": TOOLS}
    assert snap["session_id"] == "trip-1" and snap["tags"] == {"env": "test"}
    assert snap["model"]["context_window"] == 200_000
    out = snap["output"]
    assert out["text"] == "Hello there, traveller." and out["tool_calls"] == []
    assert out["finish_reason"] == "end_turn" and out["latency_ms"] > 0


def test_cache_control_breakpoints_are_kept_on_their_messages_as_sent(ingest, claude, make_client) -> None:
    # Agents move the breakpoint to the newest message in place between calls: the record keeps
    # where it was when this call went out.
    obs = make_client(ingest.url, flush_interval=60)
    llm = sync_client(claude, obs)
    msgs = conversation()
    llm.messages.create(model=MODEL, max_tokens=64, system=SYSTEM, messages=msgs)
    del msgs[2]["content"][0]["cache_control"]
    msgs[4]["content"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    [snap] = snapshots_of(ingest, obs)
    holders = [
        (b["key"], m["role"], h["cache_control"])
        for b in snap["blocks"]
        for m in b["messages"]
        for h in [m, *(m["content"] if isinstance(m["content"], list) else [])]
        if "cache_control" in h
    ]
    assert holders == [
        ("system", "system", {"type": "ephemeral"}),
        ("user", "user", {"type": "ephemeral", "ttl": "1h"}),
        ("tool_results", "tool", {"type": "ephemeral"}),
    ]


def test_native_usage_counts_cache_reads_and_writes_in_the_prompt(ingest, claude, make_client) -> None:
    claude.reply = {**TEXT_REPLY, "usage": usage(inp=50, out=20, read=1800, write=300)}
    obs = make_client(ingest.url)
    sync_client(claude, obs).messages.create(model=MODEL, max_tokens=64, messages=conversation())
    [snap] = snapshots_of(ingest, obs)
    assert snap["output"]["usage"] == {
        "prompt_tokens": 2150,
        "completion_tokens": 20,
        "total_tokens": 2170,
        "cached_tokens": 1800,
        "cache_write_tokens": 300,
    }


def test_tool_use_round_trip_records_each_call_once(ingest, claude, make_client) -> None:
    # The agent sends the reply's own content blocks (pydantic objects) back as the assistant turn.
    claude.reply = TOOL_REPLY
    obs = make_client(ingest.url)
    llm = sync_client(claude, obs)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Flights on Friday for two?"}]
    with ctxobs.session("loop"):
        first = llm.messages.create(model=MODEL, max_tokens=64, tools=TOOLS, messages=msgs)
        msgs.append({"role": "assistant", "content": first.content})
        msgs.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": TOOL_USE["id"], "content": "CA123"}],
            }
        )
        claude.reply = TEXT_REPLY
        llm.messages.create(model=MODEL, max_tokens=64, tools=TOOLS, messages=msgs)
    one, two = snapshots_of(ingest, obs)
    call = {
        "id": TOOL_USE["id"],
        "type": "function",
        "function": {"name": "search_flights", "arguments": '{"day": "friday", "seats": 2}'},
    }
    assert one["output"]["tool_calls"] == [call]
    assert one["output"]["text"] == "Let me search." and one["output"]["finish_reason"] == "tool_use"
    sent = messages_of(two)
    assert sent == [
        {"role": "user", "content": "Flights on Friday for two?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me search."}], "tool_calls": [call]},
        {"role": "tool", "tool_call_id": TOOL_USE["id"], "content": "CA123"},
    ]
    assert "tool_use" not in json.dumps(sent)
    assert [b["key"] for b in two["blocks"]] == ["tools", "user", "tool_results"]


def test_stream_passes_events_through_and_records_text_usage_and_tool_call(
    ingest, claude, make_client
) -> None:
    claude.reply = {**TOOL_REPLY, "usage": usage(inp=40, out=9, read=100, write=0)}
    obs = make_client(ingest.url)
    llm = sync_client(claude, obs)
    stream = llm.messages.create(
        model=MODEL, max_tokens=64, tools=TOOLS, messages=conversation(), stream=True, ctxobs_session="st"
    )
    events = list(stream)
    # The client's own event objects, passed through unchanged.
    assert [type(e) for e in events[:2]] == [RawMessageStartEvent, RawContentBlockStartEvent]
    assert type(events[-1]) is RawMessageStopEvent
    text = "".join(
        e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    assert text == "Let me search."
    assert "ctxobs" not in json.dumps(claude.requests[0])
    [snap] = snapshots_of(ingest, obs)
    out = snap["output"]
    assert out["text"] == "Let me search." and out["finish_reason"] == "tool_use"
    assert out["tool_calls"] == [
        {
            "id": TOOL_USE["id"],
            "type": "function",
            "function": {"name": "search_flights", "arguments": '{"day": "friday", "seats": 2}'},
        }
    ]
    assert out["usage"] == {
        "prompt_tokens": 140,
        "completion_tokens": 9,
        "total_tokens": 149,
        "cached_tokens": 100,
        "cache_write_tokens": 0,
    }
    assert "tags" not in snap


def test_stream_helper_is_recorded_once_and_works_unchanged(ingest, claude, make_client) -> None:
    obs = make_client(ingest.url)
    llm = sync_client(claude, obs)
    with llm.messages.stream(
        model=MODEL, max_tokens=64, system="Be brief.", messages=conversation(), ctxobs_session="helper"
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Hello there, traveller." and final.content[0].text == text
    assert "ctxobs" not in json.dumps(claude.requests[0]) and claude.requests[0]["stream"] is True
    [snap] = snapshots_of(ingest, obs)
    assert snap["session_id"] == "helper" and snap["output"]["text"] == text
    assert snap["output"]["finish_reason"] == "end_turn"
    assert snap["blocks"][0]["messages"] == [{"role": "system", "content": "Be brief."}]
    assert "tags" not in snap


@pytest.mark.parametrize("helper", [False, True], ids=["create-stream", "stream-helper"])
def test_stream_closed_early_is_recorded_as_incomplete(ingest, claude, make_client, helper: bool) -> None:
    obs = make_client(ingest.url)
    llm = sync_client(claude, obs)
    if helper:
        with llm.messages.stream(model=MODEL, max_tokens=64, messages=conversation()) as stream:
            next(iter(stream))
    else:
        stream = llm.messages.create(model=MODEL, max_tokens=64, messages=conversation(), stream=True)
        next(iter(stream))
        stream.close()
    [snap] = snapshots_of(ingest, obs)
    assert snap["tags"]["ctxobs.stream"] == "incomplete"


def test_async_create_stream_and_stream_helper_are_recorded(ingest, claude, make_client) -> None:
    obs = make_client(ingest.url)

    async def main() -> list[str]:
        llm: Any = ctxobs.instrument_anthropic(
            anthropic.AsyncAnthropic(base_url=claude.url, api_key="x"), obs
        )
        with ctxobs.session("async-s"):
            r = await llm.messages.create(model=MODEL, max_tokens=64, messages=conversation())
            stream = await llm.messages.create(
                model=MODEL, max_tokens=64, messages=conversation(), stream=True
            )
            streamed = "".join(
                [
                    e.delta.text
                    async for e in stream
                    if e.type == "content_block_delta" and e.delta.type == "text_delta"
                ]
            )
            async with llm.messages.stream(model=MODEL, max_tokens=64, messages=conversation()) as s:
                helped = "".join([t async for t in s.text_stream])
        await llm.close()
        return [r.content[0].text, streamed, helped]

    texts = asyncio.run(main())
    assert texts == ["Hello there, traveller."] * 3
    snaps = snapshots_of(ingest, obs)
    assert [(s["session_id"], s["turn"]) for s in snaps] == [("async-s", 0), ("async-s", 1), ("async-s", 2)]
    assert all(s["output"]["text"] == "Hello there, traveller." for s in snaps)
    assert all("tags" not in s for s in snaps)
    assert all("ctxobs" not in json.dumps(r) for r in claude.requests)


@pytest.mark.parametrize("helper", [False, True], ids=["create", "stream-helper"])
def test_provider_error_propagates_and_the_failed_call_is_recorded(
    ingest, claude, make_client, helper: bool
) -> None:
    claude.fail_next = 400
    obs = make_client(ingest.url)
    llm = sync_client(claude, obs, max_retries=0)
    with pytest.raises(anthropic.BadRequestError):
        if helper:
            with llm.messages.stream(
                model=MODEL, max_tokens=64, messages=conversation(), ctxobs_session="err"
            ):
                pass
        else:
            llm.messages.create(model=MODEL, max_tokens=64, messages=conversation(), ctxobs_session="err")
    [snap] = snapshots_of(ingest, obs)
    assert snap["tags"]["error"] == "BadRequestError" and "output" not in snap
    assert snap["blocks"][-1]["key"] == "tool_results"


SUMMARY = "The user is booking a Friday flight for two; CA123 was found and is being held."


def compacted_conversation() -> list[dict[str, Any]]:
    """A conversation sent after the provider compacted it: the old turns, the compaction block
    the provider returned (round-tripped), and what came after."""
    return [
        {"role": "user", "content": "Find me a flight to Guangzhou, any airline, window seat, two people."},
        {"role": "assistant", "content": "Which day would you like to fly?"},
        {"role": "user", "content": "Friday, returning Sunday evening if possible."},
        {"role": "assistant", "content": [{"type": "compaction", "content": SUMMARY}]},
        {"role": "user", "content": "Book the cheapest one."},
        {"role": "assistant", "content": [TOOL_USE]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": TOOL_USE["id"], "content": "held"}],
        },
        {"role": "assistant", "content": [{**TOOL_USE, "id": "toolu_02"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_02", "content": "paid"}]},
    ]


CONTEXT_MANAGEMENT = {
    "edits": [
        {"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": 1}},
        {"type": "compact_20260112"},
    ]
}
EDITED_REPLY = message(
    [
        {"type": "compaction", "content": None, "encrypted_content": "Eo8BCkYIBBgCKkBQ9mPJ"},
        {"type": "text", "text": "Your Friday flight is booked."},
    ],
    context_management={
        "applied_edits": [
            {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 1, "cleared_input_tokens": 1500}
        ]
    },
)


@pytest.mark.parametrize("stream", [False, True], ids=["reply", "stream"])
def test_provider_compaction_and_context_edits_are_recorded_as_provider_compression(
    ingest, claude, make_client, stream: bool
) -> None:
    claude.reply = EDITED_REPLY
    obs = make_client(ingest.url)
    llm = sync_client(claude, obs)
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 256,
        "messages": compacted_conversation(),
        "betas": ["compact-2026-01-12", "context-management-2025-06-27"],
        "context_management": CONTEXT_MANAGEMENT,
    }
    if stream:
        with llm.beta.messages.stream(**kwargs) as s:
            final = s.get_final_message()
    else:
        final = llm.beta.messages.create(**kwargs)
    assert final.content[-1].text == "Your Friday flight is booked."
    assert [p.split("?")[0] for p in claude.paths] == ["/v1/messages"]
    assert "compact-2026-01-12" in claude.headers[0]["anthropic-beta"]
    [snap] = snapshots_of(ingest, obs)
    events = snap["compression"]
    assert all(e["source"] == "provider" for e in events)
    sent, replied, cleared = events
    # Sent: the provider reads the summary instead of every message before it.
    assert sent["strategy"] == "compaction" and "opaque" not in sent
    assert sent["block"] == "history" and 20 < sent["tokens_before"] < 80 and 10 < sent["tokens_after"] < 30
    assert next(b for b in snap["blocks"] if b["key"] == "history")["compressed"] is True
    # Replied: compacted on this call, the summary is encrypted.
    assert replied["strategy"] == "compaction" and replied["opaque"] is True and replied["tokens_before"] > 0
    assert "tokens_after" not in replied and "block" not in replied
    # Context editing cleared the oldest tool use, keeping the newest.
    assert cleared == {
        "strategy": "clear_tool_uses",
        "tokens_before": 1500,
        "items": [TOOL_USE["id"]],
        "source": "provider",
    }
    assert snap["params"]["context_management"] == CONTEXT_MANAGEMENT
    assert snap["output"]["text"] == "Your Friday flight is booked."


def test_instrumenting_twice_records_once_and_uninstrument_restores(ingest, claude, make_client) -> None:
    obs = make_client(ingest.url)
    llm: Any = anthropic.Anthropic(base_url=claude.url, api_key="x")
    ctxobs.instrument_anthropic(llm, obs)
    ctxobs.instrument_anthropic(llm, obs)
    hi = [{"role": "user", "content": "hi"}]
    llm.messages.create(model=MODEL, max_tokens=8, messages=hi)
    assert len(snapshots_of(ingest, obs)) == 1
    ctxobs.uninstrument_anthropic(llm)
    llm.messages.create(model=MODEL, max_tokens=8, messages=hi)
    with llm.messages.stream(model=MODEL, max_tokens=8, messages=hi) as s:
        s.until_done()
    llm.beta.messages.create(model=MODEL, max_tokens=8, messages=hi)
    assert len(snapshots_of(ingest, obs)) == 1 and len(claude.requests) == 4


def test_raw_response_call_is_reported_as_uncaptured_and_goes_through(
    ingest, claude, make_client, caplog: pytest.LogCaptureFixture
) -> None:
    obs = make_client(ingest.url)
    llm: Any = anthropic.Anthropic(base_url=claude.url, api_key="x")
    assert llm.messages.with_raw_response is not None  # made before instrumenting, remade after
    ctxobs.instrument_anthropic(llm, obs)
    hi = [{"role": "user", "content": "hi"}]
    with caplog.at_level(logging.WARNING, logger="ctxobs.instrument"):
        raw = llm.messages.with_raw_response.create(
            model=MODEL, max_tokens=8, messages=hi, ctxobs_session="r"
        )
    assert raw.parse().content[0].text == "Hello there, traveller."
    assert "ctxobs" not in json.dumps(claude.requests[0])
    assert obs.stats()["uncaptured"] == 1 and snapshots_of(ingest, obs) == []
    assert [r.getMessage() for r in caplog.records if "uncaptured" in r.getMessage()] == [
        "ctxobs.instrument.uncaptured kind=anthropic.messages.with_raw_response"
    ]


class _OtherStreamManager:
    """The manager of a stream helper of another shape: its stream keeps no raw event stream."""

    def __enter__(self) -> Any:
        return iter([])

    def __exit__(self, *exc: Any) -> None:
        pass


def test_stream_helper_that_cannot_be_read_is_reported_not_missed(
    ingest, make_client, caplog: pytest.LogCaptureFixture
) -> None:
    obs = make_client(ingest.url)
    resource = SimpleNamespace(stream=lambda **kw: _OtherStreamManager())
    llm = ctxobs.instrument_anthropic(SimpleNamespace(messages=resource), obs)
    with caplog.at_level(logging.WARNING, logger="ctxobs.instrument"):
        for _ in range(2):
            with llm.messages.stream(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}]):
                pass
    warnings = [r for r in caplog.records if "uncaptured" in r.getMessage()]
    assert len(warnings) == 1
    snaps = snapshots_of(ingest, obs)
    assert [s["tags"]["ctxobs.reply"] for s in snaps] == ["uncaptured", "uncaptured"]
    assert all("output" not in s for s in snaps)
    assert obs.stats()["uncaptured"] == 2


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        pytest.param(
            [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image", "source": {}}]}],
            [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image", "source": {}}]}],
            id="parts-kept",
        ),
        pytest.param(
            [
                {
                    "role": "user",
                    "ctxobs_block": "retrieval",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [{"type": "text", "text": "r"}],
                            "is_error": True,
                        },
                        {"type": "text", "text": "and then?"},
                    ],
                }
            ],
            [
                {
                    "role": "tool",
                    "tool_call_id": "t1",
                    "content": [{"type": "text", "text": "r"}],
                    "is_error": True,
                    "ctxobs_block": "retrieval",
                },
                {
                    "role": "user",
                    "ctxobs_block": "retrieval",
                    "content": [{"type": "text", "text": "and then?"}],
                },
            ],
            id="tool-results-first-tags-kept",
        ),
        pytest.param(
            [{"role": "assistant", "content": [{**TOOL_USE, "cache_control": {"type": "ephemeral"}}]}],
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": TOOL_USE["id"],
                            "type": "function",
                            "function": {
                                "name": "search_flights",
                                "arguments": '{"day": "friday", "seats": 2}',
                            },
                        }
                    ],
                    "cache_control": {"type": "ephemeral"},
                }
            ],
            id="tool-use-breakpoint-moves-to-message",
        ),
    ],
)
def test_chat_messages(messages: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert chat_messages(messages) == expected
