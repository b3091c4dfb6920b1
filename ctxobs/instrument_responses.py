"""The OpenAI Responses API (`client.responses.create` / `.parse`, streamed or not) in the block model.

`instrument_openai()` hooks these methods through ctxobs.instrument, so a call goes the same way
as a chat completion: the agent's thread strips ctxobs fields and copies the input list, the
sender thread does the rest. Here a Responses request becomes chat-shaped messages (what the
server renders and counts) that the partitioner splits as it splits a chat request:
`instructions` is a system message, function calls and their outputs are assistant tool calls
and tool messages, reasoning and compaction items keep their type and id, and encrypted content
is recorded by its size only. State the provider keeps between calls (`previous_response_id`,
`conversation`, a stored `prompt`, `item_reference` items) is one `server_state` block whose
tokens are estimated from the reported usage. The reply (a Response, or the events of a stream)
becomes the wire output.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from typing import Any, cast

from ctxobs import tokens
from ctxobs.client import TAG_BLOCK, TAG_KIND, Client, Message, Turn, clean_message
from ctxobs.instrument import (
    _UNREAD,
    Partitioner,
    _Call,
    _has_tags,
    _Instrumentation,
    hook_create,
    report_uncaptured,
    strip_request,
    unhook_create,
)
from ctxobs.wire import MESSAGE_ROLES, WireOutput, WireSnapshot

log = logging.getLogger("ctxobs.instrument")

SERVER_STATE = "server_state"
TAG_SERVER_STATE = "ctxobs.server_state"
TAG_API = "ctxobs.api"
# A message field: the length of an item's encrypted content, which is never recorded itself.
ENCRYPTED_CHARS = "encrypted_chars"
# encrypted_content is base64 (4 characters per 3 bytes) of a ciphertext about as long as the
# text it hides, and text runs about 4 bytes a token: 16/3 characters a token.
_CHARS_PER_TOKEN = 16 / 3
# The strategy of a provider's compaction, as ingest/otlp names the same item.
COMPACTION_STRATEGY = "summarize"

# Request arguments that are blocks or transport details, not model parameters.
_NOT_PARAMS = frozenset(
    {
        "input",
        "instructions",
        "model",
        "tools",
        "text_format",
        "parse_as",
        "extra_headers",
        "extra_query",
        "extra_body",
        "timeout",
    }
)
# Fields of a chat message that the model reads; the others travel along for the pages.
_COUNTED = ("role", "content", "name", "tool_calls", "tool_call_id")
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_FINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
_INCOMPLETE_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}
# Item types read here; any other is recorded as its JSON and reported once.
_KNOWN_ITEMS = frozenset(
    {
        "message",
        "function_call",
        "custom_tool_call",
        "function_call_output",
        "custom_tool_call_output",
        "reasoning",
        "compaction",
        "item_reference",
    }
)


def _given(v: Any) -> bool:
    # openai's NOT_GIVEN / Omit sentinels mean "not sent".
    return v is not None and type(v).__name__ not in ("NotGiven", "Omit")


def _as_dict(obj: Any) -> dict[str, Any] | None:
    if isinstance(obj, dict):
        return obj
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        data = dump(exclude_none=True)
        return data if isinstance(data, dict) else None
    return None


def opaque_tokens(chars: int) -> int:
    """Estimated tokens of encrypted content CHARS characters long."""
    return math.ceil(chars / _CHARS_PER_TOKEN)


# --- the request --------------------------------------------------------------------------


def _part(p: Any) -> Any:
    d = _as_dict(p)
    if d is None:
        return p
    t = d.get("type")
    if t in _TEXT_PARTS:
        return {"type": "text", "text": d.get("text") or ""}
    if t == "input_image" and d.get("image_url"):
        image: dict[str, Any] = {"url": d["image_url"]}
        if d.get("detail"):
            image["detail"] = d["detail"]
        return {"type": "image_url", "image_url": image}
    return d


def _content(content: Any) -> str | list[Any] | None:
    """Responses content (a string or input/output parts) as chat content."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list | tuple):
        parts = [_part(p) for p in content]
        if len(parts) == 1 and isinstance(parts[0], dict) and parts[0].get("type") == "text":
            return str(parts[0]["text"])
        return parts
    return json.dumps(content, ensure_ascii=False, default=str)


def _tool_call(item: dict[str, Any]) -> dict[str, Any]:
    if item.get("type") == "custom_tool_call":
        return {
            "id": str(item.get("call_id") or ""),
            "type": "custom",
            "custom": {"name": str(item.get("name") or ""), "input": str(item.get("input") or "")},
        }
    return {
        "id": str(item.get("call_id") or ""),
        "type": "function",
        "function": {"name": str(item.get("name") or ""), "arguments": str(item.get("arguments") or "")},
    }


def _texts(parts: Any) -> list[str]:
    return [
        str(d["text"])
        for p in parts or []
        if (d := _as_dict(p)) is not None and isinstance(d.get("text"), str)
    ]


def _marked(m: Message, item: dict[str, Any]) -> Message:
    """M with the item's id, and its encrypted content's size instead of the content."""
    if item.get("id"):
        m["id"] = str(item["id"])
    encrypted = item.get("encrypted_content")
    if isinstance(encrypted, str) and encrypted:
        m[ENCRYPTED_CHARS] = len(encrypted)
    return m


def _item_message(item: dict[str, Any], obs: Client | None) -> Message:
    t = item.get("type")
    role = item.get("role")
    if role is not None and t in (None, "message"):
        return {
            "role": role if role in MESSAGE_ROLES else "assistant",
            "content": _content(item.get("content")),
        }
    if t in ("function_call", "custom_tool_call"):
        return {"role": "assistant", "content": None, "tool_calls": [_tool_call(item)]}
    if t in ("function_call_output", "custom_tool_call_output"):
        return {
            "role": "tool",
            "tool_call_id": str(item.get("call_id") or ""),
            "content": _content(item.get("output")),
        }
    if t == "reasoning":
        # The model reads the reasoning itself: its text when sent in the clear, else the
        # encrypted content (counted by size); the summary is shown, never counted then.
        text = _texts(item.get("content")) or _texts(item.get("summary"))
        return _marked({"role": "assistant", "content": "\n\n".join(text) or None, "type": t}, item)
    if t == "compaction":
        # The provider's summary of the conversation before it: the `summary` block.
        summary = _texts(item.get("summary")) if isinstance(item.get("summary"), list) else []
        m = {
            "role": "user",
            "content": "\n\n".join(summary) or None,
            "type": t,
            TAG_BLOCK: "summary",
            TAG_KIND: "summary",
        }
        return _marked(m, item)
    if t == "item_reference":
        return _marked({"role": "user", "content": None, "type": t}, item)
    if not isinstance(t, str) or t not in _KNOWN_ITEMS:
        report_uncaptured(obs, f"responses.input_item.{str(t)[:40]}")
    # Built-in tools' calls and outputs: recorded as their JSON, encrypted content by size.
    rest = {
        k: v
        for k, v in item.items()
        if k not in ("encrypted_content", "id", "status") and not str(k).startswith("ctxobs_")
    }
    body = json.dumps(rest, ensure_ascii=False, default=str)
    if isinstance(t, str) and t.endswith("_output") and item.get("call_id"):
        m = {"role": "tool", "tool_call_id": str(item["call_id"]), "content": body, "type": t}
    else:
        m = {"role": "assistant", "content": body, "type": t}
    return _marked(m, item)


def input_messages(instructions: Any, items: Any, obs: Client | None = None) -> list[Message]:
    """The chat-shaped messages of a Responses request, in the order the model reads them:
    INSTRUCTIONS as a system message, then each input item (ITEMS: a string or a list).
    Consecutive function calls make one assistant message, as parallel calls do in chat; an
    item's `ctxobs_*` tags stay on its message for the partitioner."""
    out: list[Message] = []
    if isinstance(instructions, str) and instructions:
        out.append({"role": "system", "content": instructions})
    elif isinstance(instructions, list):
        # A Response's instructions can be input items (from a stored prompt).
        out.extend(input_messages(None, instructions, obs))
    if isinstance(items, str):
        out.append({"role": "user", "content": items})
        return out
    for raw in items or []:
        if isinstance(raw, str):
            out.append({"role": "user", "content": raw})
            continue
        item = _as_dict(raw)
        if item is None:
            report_uncaptured(obs, f"responses.input_item.{type(raw).__name__[:40]}")
            out.append({"role": "user", "content": str(raw)})
            continue
        m = _item_message(item, obs)
        for k, v in item.items():
            if isinstance(k, str) and k.startswith("ctxobs_"):
                m[k] = v
        prev = out[-1] if out else None
        if (
            prev is not None
            and "tool_calls" in m
            and "type" not in m
            and len(m) == 3
            and prev.get("role") == "assistant"
            and prev.get("content") is None
            and "type" not in prev
            and prev.get("tool_calls")
            and len(prev) == 3
        ):
            prev["tool_calls"] = [*prev["tool_calls"], *m["tool_calls"]]
            continue
        out.append(m)
    return out


def chat_tools(tools: list[Any]) -> list[Any]:
    """Responses tool definitions in the chat shape token counting knows (function tools
    nest under `function`); other tools as they are."""
    out: list[Any] = []
    for t in tools:
        d = _as_dict(t)
        if d is not None and d.get("type") == "function" and "function" not in d:
            fn = {k: d[k] for k in ("name", "description", "parameters") if d.get(k) is not None}
            out.append({"type": "function", "function": fn})
        else:
            out.append(d if d is not None else t)
    return out


def server_state(request: dict[str, Any], messages: list[Message]) -> list[str]:
    """What of the context the provider keeps and the request only points at."""
    reasons = [k for k in ("previous_response_id", "conversation", "prompt") if _given(request.get(k))]
    if any(m.get("type") == "item_reference" for m in messages):
        reasons.append("item_reference")
    return reasons


def strip_responses_request(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(kwargs without any ctxobs field, input items included; the popped `ctxobs_*` options)."""
    clean, opts = strip_request(kwargs)
    items = clean.get("input")
    if isinstance(items, list) and any(_has_tags(i) for i in items):
        clean["input"] = [clean_message(i) if _has_tags(i) else i for i in items]
    return clean, opts


# --- the reply ----------------------------------------------------------------------------


class _Reply:
    """A reply as read on the sender thread: the wire output, the provider's compactions (output
    items), and the provider's error code when the response failed."""

    __slots__ = ("output", "compactions", "failed")

    def __init__(
        self, output: dict[str, Any] | None, compactions: list[dict[str, Any]], failed: str | None
    ) -> None:
        self.output = output
        self.compactions = compactions
        self.failed = failed


def usage_of(raw: Any) -> dict[str, int]:
    """The wire usage of a Responses `usage`: input tokens are the prompt, cached ones included."""
    d = _as_dict(raw)
    if d is None:
        return {}
    out: dict[str, int] = {}
    for src, dst in (
        ("input_tokens", "prompt_tokens"),
        ("output_tokens", "completion_tokens"),
        ("total_tokens", "total_tokens"),
    ):
        v = d.get(src)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            out[dst] = v
    details = d.get("input_tokens_details")
    if isinstance(details, dict):
        for src, dst in (("cached_tokens", "cached_tokens"), ("cache_write_tokens", "cache_write_tokens")):
            v = details.get(src)
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                out[dst] = v
    return out


def _finish_reason(data: dict[str, Any], calls: list[Any]) -> str:
    # In chat's words where chat has them, so pages and alerts read both APIs alike.
    status = str(data.get("status") or "")
    if status == "completed":
        return "tool_calls" if calls else "stop"
    if status == "incomplete":
        details = data.get("incomplete_details")
        reason = str(details.get("reason") or "") if isinstance(details, dict) else ""
        return _INCOMPLETE_REASONS.get(reason, reason or status)
    return status


def read_response(response: Any) -> _Reply:
    """A Response (the SDK's object or its JSON) as the wire output. Raises ValueError for
    anything else."""
    data = _as_dict(response)
    if data is None or not isinstance(data.get("output"), list):
        raise ValueError(f"not a Response: {type(response).__name__}")
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    compactions: list[dict[str, Any]] = []
    for raw in data["output"]:
        item = _as_dict(raw) or {}
        t = item.get("type")
        if t == "message":
            texts.extend(
                str(p.get("text") or "")
                for p in item.get("content") or []
                if isinstance(p, dict) and p.get("type") == "output_text"
            )
        elif t in ("function_call", "custom_tool_call"):
            calls.append(_tool_call(item))
        elif t == "compaction":
            compactions.append(_marked({}, item))
    output: dict[str, Any] = {
        "text": "".join(texts) if texts or not calls else None,
        "tool_calls": calls,
        "finish_reason": _finish_reason(data, calls),
        "usage": usage_of(data.get("usage")),
    }
    failed = None
    if data.get("status") == "failed":
        error = data.get("error")
        failed = str(error.get("code") or "failed") if isinstance(error, dict) else "failed"
    return _Reply(output, compactions, failed)


class _EventAccumulator:
    """The reply of a stream: the Response its last event carries, or, when the stream ended
    before one (closed early), what its deltas and finished items said."""

    def __init__(self) -> None:
        self.final: Any = None
        self.text: list[str] = []
        self.items: list[Any] = []
        self.error: str | None = None

    def feed(self, event: Any) -> None:
        d = event if isinstance(event, dict) else None
        t = d.get("type") if d is not None else getattr(event, "type", None)

        def get(name: str) -> Any:
            return d.get(name) if d is not None else getattr(event, name, None)

        if t in _FINAL_EVENTS:
            self.final = get("response")
        elif t == "response.output_text.delta":
            delta = get("delta")
            if isinstance(delta, str):
                self.text.append(delta)
        elif t == "response.output_item.done":
            self.items.append(get("item"))
        elif t == "error":
            self.error = str(get("code") or "error")

    def reply(self) -> _Reply:
        if self.final is not None:
            return read_response(self.final)
        calls = [
            _tool_call(d)
            for i in self.items
            if (d := _as_dict(i)) is not None and d.get("type") in ("function_call", "custom_tool_call")
        ]
        output: dict[str, Any] = {
            "text": "".join(self.text) if self.text or not calls else None,
            "tool_calls": calls,
            "finish_reason": "",
            "usage": {},
        }
        return _Reply(output, [], self.error)


# --- the call -----------------------------------------------------------------------------


class ResponsesCall(_Call):
    """A Responses call as captured on the agent's thread: `messages` holds the copied input
    items (the request keeps a string input, which cannot change)."""

    __slots__ = ()

    def _read(self) -> _Reply | None:
        chunks, response = self.chunks, self.response
        try:
            if chunks is not None:
                acc = _EventAccumulator()
                for event in chunks:
                    acc.feed(event)
                return acc.reply()
            return read_response(response) if response is not None else None
        except Exception:  # noqa: BLE001 - the request is still recorded
            kind = "stream" if chunks is not None else type(response).__name__[:40]
            report_uncaptured(self._inst.obs_or_none(), f"responses.reply.{kind}")
            return None

    def digest(self) -> None:
        if self._output is not _UNREAD:
            return
        reply = self._read()
        # Published before the reply is dropped: snapshot() reads them in the opposite order.
        self._output = reply
        self.chunks = None
        self.response = None

    def snapshot(self) -> WireSnapshot:
        raw = self._output
        reply: _Reply | None = self._read() if raw is _UNREAD else raw
        inst = self._inst
        obs = inst.obs
        turn = inst._new_turn(self, _NOT_PARAMS)
        turn.snapshot_id = self.snapshot_id
        turn.tags.setdefault(TAG_API, "responses")
        if self.error is not None:
            turn.tags.setdefault("error", self.error)
        items = self.request.get("input")
        try:
            messages = input_messages(
                self.request.get("instructions"), items if isinstance(items, str) else self.messages, obs
            )
        except Exception:
            report_uncaptured(obs, "responses.request_unreadable")
            raise
        blocks = inst.partitioner(messages)
        hidden = server_state(self.request, messages)
        if hidden:
            # The kept conversation comes before this call's input, after its instructions.
            at = next((i for i, b in enumerate(blocks) if b.get("kind") != "system"), len(blocks))
            blocks.insert(at, {"key": SERVER_STATE, "kind": "history", "messages": []})
            turn.tags[TAG_SERVER_STATE] = ",".join(hidden)
        inst._add_blocks(turn, blocks, self.tools)
        if not turn._blocks:
            report_uncaptured(obs, "responses.empty_request")
        estimated = _count_blocks(turn, obs, self.tools)
        if reply is not None and reply.output is not None:
            usage = reply.output.get("usage") or {}
            if self.latency_ms is not None:
                reply.output["latency_ms"] = round(self.latency_ms, 3)
        else:
            usage = {}
        if hidden:
            state = turn._blocks[SERVER_STATE]
            state.tokens = 0
            reported = usage.get("prompt_tokens")
            if reported is not None:
                state.tokens = max(0, int(reported) - turn.tokens())
            estimated.add(SERVER_STATE)
        if reply is not None:
            if reply.failed is not None:
                turn.tags.setdefault("error", reply.failed)
            for c in reply.compactions:
                chars = c.get(ENCRYPTED_CHARS)
                turn.compression(
                    COMPACTION_STRATEGY,
                    tokens_after=opaque_tokens(chars) if chars else None,
                    items=[c["id"]] if c.get("id") else None,
                    ref=c.get("id"),
                    source="provider",
                    opaque=bool(chars),
                )
            turn._output = cast(WireOutput | None, reply.output)
        snap = turn.snapshot()
        for b in snap["blocks"]:
            if b["key"] in estimated:
                b["estimated"] = True
        return snap


def _count_blocks(turn: Turn, obs: Client, tools: list[Any] | None) -> set[str]:
    """Count TURN's blocks as the model reads them (the chat fields of each message, encrypted
    content by its size), record each compaction item as the provider's compression of the
    block it sits in, and return the keys of the blocks whose count is an estimate."""
    counter = turn.counting.counter
    cache = obs.token_cache
    estimated: set[str] = set()
    for key, b in turn._blocks.items():
        if b.tool_definitions is not None:
            b.tokens = tokens.cached_tools_tokens(chat_tools(b.tool_definitions), counter, cache)
            continue
        n = 0
        for m in b.messages:
            chars = m.get(ENCRYPTED_CHARS)
            counted = {k: m[k] for k in _COUNTED if k in m and not (chars and k == "content")}
            own = tokens.cached_messages_tokens([counted], counter, cache)
            if isinstance(chars, int) and chars > 0:
                own += opaque_tokens(chars)
                estimated.add(key)
            n += own
            if m.get("type") == "compaction":
                turn.compression(
                    COMPACTION_STRATEGY,
                    block=key,
                    tokens_after=own,
                    items=[m["id"]] if m.get("id") else None,
                    ref=m.get("id"),
                    source="provider",
                    opaque=bool(chars),
                )
        b.tokens = n
    return estimated


class ResponsesInstrumentation(_Instrumentation):
    """Records `responses.create` / `.parse` calls as `ResponsesCall`s."""

    def begin(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], _Call | None]:
        try:
            clean, opts = strip_responses_request(kwargs)
        except Exception:  # noqa: BLE001 - observing must never stop the request
            report_uncaptured(self.obs_or_none(), "responses.request_unreadable")
            return {k: v for k, v in kwargs.items() if not k.startswith("ctxobs_")}, None
        try:
            return clean, self._call(clean, opts, kwargs.get("input"))
        except Exception:  # noqa: BLE001
            log.exception("ctxobs.instrument.begin_failed")
            report_uncaptured(self.obs_or_none(), "responses.request_unreadable")
            return clean, None

    def _call(self, clean: dict[str, Any], opts: dict[str, Any], messages: Any) -> _Call | None:
        # MESSAGES is the request's `input`: a string (kept in the request), a list of items
        # (copied, as chat messages are), or not given (the provider's state is the context).
        if _given(messages) and not isinstance(messages, str | list | tuple):
            report_uncaptured(self.obs_or_none(), f"responses.input.{type(messages).__name__[:40]}")
            return None
        env = self._envelope(clean, opts)
        if env is None:
            return None
        items = messages if isinstance(messages, list | tuple) else []
        copies = [i.copy() if i.__class__ is dict else i for i in items]
        tools = clean.get("tools")
        return ResponsesCall(
            self, *env, copies, list(tools) if isinstance(tools, list | tuple) else None, clean
        )


def instrument_responses(
    client: Any,
    obs: Client | None = None,
    partitioner: Partitioner | None = None,
    *,
    context_window: int | None = None,
    agent: str | None = None,
) -> Any:
    """Record every `client.responses.create` and `.parse` call; a client without the Responses
    API is left as it is. `responses.stream(...)` goes through `create` and is recorded too."""
    responses = getattr(client, "responses", None)
    if responses is None or not callable(getattr(responses, "create", None)):
        return client
    inst = ResponsesInstrumentation(obs, partitioner, context_window, agent)
    hook_create(responses, inst, "responses")
    if callable(getattr(responses, "parse", None)):
        hook_create(responses, inst, "responses", "parse")
    _forget_raw_wrappers(responses)
    return client


def uninstrument_responses(client: Any) -> Any:
    """Undo `instrument_responses(CLIENT)`."""
    responses = getattr(client, "responses", None)
    if responses is not None:
        unhook_create(responses)
        unhook_create(responses, "parse")
        _forget_raw_wrappers(responses)
    return client


def _forget_raw_wrappers(responses: Any) -> None:
    # openai caches its raw-response wrappers, which hold the methods they wrapped when made:
    # they are made again, around the methods of now, when next asked for.
    for name in ("with_raw_response", "with_streaming_response"):
        if isinstance(getattr(type(responses), name, None), functools.cached_property):
            vars(responses).pop(name, None)
