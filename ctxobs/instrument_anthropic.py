"""`instrument_anthropic()`: record every Messages API call of an anthropic client.

Hooks `messages.create` (with and without `stream=True`), `messages.parse` and the
`messages.stream(...)` helper, on `client.messages` and `client.beta.messages` (where context
management and compaction live). The machinery is ctxobs.instrument's: the same options, the
same copy of the request on the agent's thread and the same stream wrappers; what differs is how
a request and a reply read. The anthropic package is never imported here: the client is
duck-typed.

In a snapshot the `system` parameter is the system block, `tools` the tools block (before it: the
provider renders tools first), and the messages are split by the partitioner after they are put
in the chat shape: an assistant's `tool_use` parts become its `tool_calls`, a user's
`tool_result` parts become `tool` messages; every other part stays in the message's list of parts
as sent, `cache_control` included. Edits the provider makes on its side (a `compaction` block,
`context_management.applied_edits`) are recorded as compression events with source "provider".
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

from ctxobs import tokens
from ctxobs.client import Client, Message, Turn, clean_message
from ctxobs.instrument import (
    _NOT_PARAMS,
    _UNREAD,
    AsyncInstrumentedStream,
    InstrumentedStream,
    Partitioner,
    _Call,
    _get,
    _Instrumentation,
    hook_create,
    report_uncaptured,
    strip_request,
    unhook_create,
)
from ctxobs.instrument_responses import _forget_raw_wrappers
from ctxobs.wire import WireSnapshot

log = logging.getLogger("ctxobs.instrument")

# Request arguments recorded elsewhere than in `params`: the system prompt is a block.
_NOT_ANTHROPIC_PARAMS = _NOT_PARAMS | {"system"}

COMPACTION = "compaction"

# Methods of a messages resource that make one model call and return its reply (or, with
# `stream=True`, its event stream).
_REPLY_METHODS = ("create", "parse")


# --- the request, in the chat shape -------------------------------------------------------------


def _part(p: Any) -> Any:
    if isinstance(p, dict):
        return p
    dump = getattr(p, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json", exclude_none=True)
        except Exception:  # noqa: BLE001 - an odd part is recorded as text below
            log.debug("ctxobs.instrument.part_dump_failed type=%s", type(p).__name__)
    return {"type": "text", "text": str(p)}


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _tool_call(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": str(p.get("id") or ""),
        "type": "function",
        "function": {"name": str(p.get("name") or ""), "arguments": _arguments(p.get("input", {}))},
    }


def chat_messages(messages: list[Any]) -> list[Message]:
    """Anthropic messages in the chat shape the partitioner and the server read.

    An assistant's `tool_use` parts become its `tool_calls` (and nothing else: the call is kept
    once) and a user's `tool_result` parts become `tool` messages, in front of what else the
    user message says; a `cache_control` on such a part moves to the message it became, so the
    breakpoint stays where it was. Every other part stays in the message's list of parts.
    `ctxobs_*` tags are kept on every message a tagged message becomes.
    """
    out: list[Message] = []
    for raw in messages:
        m = raw if isinstance(raw, dict) else clean_message(raw)
        content = m.get("content")
        role = m.get("role")
        if not isinstance(content, list) or role not in ("user", "assistant"):
            out.append(m)
            continue
        parts = [_part(p) for p in content]
        tags = {k: v for k, v in m.items() if isinstance(k, str) and k.startswith("ctxobs_")}
        rest_of = {k: v for k, v in m.items() if k != "content"}
        if role == "assistant":
            uses = [p for p in parts if p.get("type") == "tool_use"]
            if not uses:
                out.append({**rest_of, "content": parts})
                continue
            kept = [p for p in parts if p.get("type") != "tool_use"]
            msg: Message = {**rest_of, "content": kept or None, "tool_calls": [_tool_call(p) for p in uses]}
            cc = next((p["cache_control"] for p in reversed(uses) if p.get("cache_control")), None)
            if cc is not None and "cache_control" not in msg:
                msg["cache_control"] = cc
            out.append(msg)
            continue
        results = [p for p in parts if p.get("type") == "tool_result"]
        if not results:
            out.append({**rest_of, "content": parts})
            continue
        for r in results:
            tool: Message = {
                "role": "tool",
                "tool_call_id": str(r.get("tool_use_id") or ""),
                "content": r.get("content"),
            }
            for k in ("is_error", "cache_control"):
                if r.get(k):
                    tool[k] = r[k]
            out.append({**tool, **tags})
        others = [p for p in parts if p.get("type") != "tool_result"]
        if others:
            out.append({**rest_of, "content": others})
    return out


def _capture(messages: list[Any] | tuple[Any, ...], system: Any) -> list[Any]:
    # On the agent's thread: the system prompt becomes the leading message, and each message's
    # list of parts is copied with its parts, because agents move a `cache_control` breakpoint
    # from part to part in place between calls, while this call may still be queued.
    out: list[Any] = []
    if (isinstance(system, str) and system) or (isinstance(system, list | tuple) and system):
        if not isinstance(system, str):
            system = [p.copy() if p.__class__ is dict else p for p in system]
        out.append({"role": "system", "content": system})
    for m in messages:
        if m.__class__ is dict:
            c = m.get("content")
            if c.__class__ is list:
                m = {**m, "content": [p.copy() if p.__class__ is dict else p for p in c]}
        out.append(m)
    return out


# --- the reply ------------------------------------------------------------------------------


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def anthropic_usage(raw: Any) -> dict[str, int]:
    """The wire usage of an Anthropic usage object: the prompt is input + cache reads + cache
    writes (Anthropic's `input_tokens` counts only what was neither read nor written)."""
    if raw is None:
        return {}
    data = (
        raw
        if isinstance(raw, dict)
        else {
            k: getattr(raw, k, None)
            for k in (
                "input_tokens",
                "output_tokens",
                "cache_read_input_tokens",
                "cache_creation_input_tokens",
            )
        }
    )
    inp = _int(data.get("input_tokens"))
    output = _int(data.get("output_tokens"))
    read = _int(data.get("cache_read_input_tokens"))
    write = _int(data.get("cache_creation_input_tokens"))
    out: dict[str, int] = {}
    if inp is not None or read is not None or write is not None:
        out["prompt_tokens"] = (inp or 0) + (read or 0) + (write or 0)
    if output is not None:
        out["completion_tokens"] = output
    if "prompt_tokens" in out and output is not None:
        out["total_tokens"] = out["prompt_tokens"] + output
    if read is not None:
        out["cached_tokens"] = read
    if write is not None:
        out["cache_write_tokens"] = write
    return out


class _Reply:
    """A reply as the snapshot needs it: the wire output and what the provider edited."""

    __slots__ = ("output", "compactions", "edits")

    def __init__(
        self, output: dict[str, Any] | None, compactions: list[dict[str, Any]], edits: list[dict[str, Any]]
    ) -> None:
        self.output = output
        self.compactions = compactions
        self.edits = edits


def _reply_from(
    content: list[dict[str, Any]], stop_reason: Any, usage: dict[str, int], context_management: Any
) -> _Reply:
    text = [p["text"] for p in content if p.get("type") == "text" and isinstance(p.get("text"), str)]
    calls = [_tool_call(p) for p in content if p.get("type") == "tool_use"]
    cm = _part(context_management) if context_management is not None else {}
    edits = cm.get("applied_edits") if isinstance(cm, dict) else None
    return _Reply(
        {
            "text": "".join(text) if text or not calls else None,
            "tool_calls": calls,
            "finish_reason": str(stop_reason or ""),
            "usage": usage,
        },
        [p for p in content if p.get("type") == COMPACTION],
        [e for e in edits if isinstance(e, dict)] if isinstance(edits, list) else [],
    )


def _read_message(resp: Any) -> _Reply | None:
    """A `Message` (or `BetaMessage`, `ParsedMessage`, or its dict)."""
    content = _get(resp, "content")
    if not isinstance(content, list):
        return None  # not a Message: a raw HTTP response (`with_raw_response`) is not read
    return _reply_from(
        [_part(p) for p in content],
        _get(resp, "stop_reason"),
        anthropic_usage(_get(resp, "usage")),
        _get(resp, "context_management"),
    )


class _EventAccumulator:
    """Rebuilds the reply from the raw stream events (message_start, content_block_start and
    _delta, message_delta, message_stop)."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json: dict[int, list[str]] = {}
        self.usage: dict[str, Any] = {}
        self.stop_reason: Any = None
        self.context_management: Any = None

    def _usage(self, raw: Any) -> None:
        if raw is None:
            return
        data = _part(raw)
        if isinstance(data, dict):
            # Later events repeat the counts cumulatively; a field they leave out keeps its value.
            self.usage.update({k: v for k, v in data.items() if v is not None})

    def feed(self, event: Any) -> None:
        kind = _get(event, "type")
        if kind == "message_start":
            message = _get(event, "message")
            self._usage(_get(message, "usage"))
            for i, p in enumerate(_get(message, "content") or []):
                self.blocks[i] = dict(_part(p))
        elif kind == "content_block_start":
            index = _get(event, "index") or 0
            self.blocks[index] = dict(_part(_get(event, "content_block")))
        elif kind == "content_block_delta":
            index = _get(event, "index") or 0
            block = self.blocks.setdefault(index, {})
            delta = _get(event, "delta")
            dt = _get(delta, "type")
            if dt == "text_delta":
                block["text"] = str(block.get("text") or "") + str(_get(delta, "text") or "")
            elif dt == "input_json_delta":
                self.json.setdefault(index, []).append(str(_get(delta, "partial_json") or ""))
            elif dt == "compaction_delta":
                block["content"] = _get(delta, "content")
                if _get(delta, "encrypted_content") is not None:
                    block["encrypted_content"] = _get(delta, "encrypted_content")
        elif kind == "message_delta":
            delta = _get(event, "delta")
            if _get(delta, "stop_reason") is not None:
                self.stop_reason = _get(delta, "stop_reason")
            self._usage(_get(event, "usage"))
            if _get(event, "context_management") is not None:
                self.context_management = _get(event, "context_management")

    def reply(self) -> _Reply:
        content = []
        for i in sorted(self.blocks):
            block = self.blocks[i]
            if i in self.json:
                raw = "".join(self.json[i])
                try:
                    block["input"] = json.loads(raw) if raw else {}
                except ValueError:
                    block["input"] = raw  # cut short: kept as it came
            content.append(block)
        return _reply_from(content, self.stop_reason, anthropic_usage(self.usage), self.context_management)


def _read_reply(chunks: list[Any] | None, response: Any) -> _Reply | None:
    try:
        if chunks is not None:
            acc = _EventAccumulator()
            for event in chunks:
                try:
                    acc.feed(event)
                except Exception:  # noqa: BLE001 - an unexpected event must not lose the turn
                    log.debug("ctxobs.instrument.event_unreadable")
            return acc.reply()
        return _read_message(response) if response is not None else None
    except Exception:  # noqa: BLE001
        log.debug("ctxobs.instrument.output_unreadable type=%s", type(response).__name__)
        return None


# --- provider edits as compression events ------------------------------------------------------


def _strategy(edit_type: Any) -> str:
    # "clear_tool_uses_20250919" -> "clear_tool_uses": the version date is not the strategy.
    name = str(edit_type or "context_edit")
    head, _, tail = name.rpartition("_")
    return head if head and tail.isdigit() else name


def _compaction_fields(part: dict[str, Any], turn: Turn) -> tuple[int | None, bool] | None:
    """(tokens of the summary, opaque), or None for a failed compaction (the server ignores it)."""
    summary = part.get("content")
    if isinstance(summary, str) and summary:
        return turn.counting.counter.count_text(summary), False
    if part.get("encrypted_content"):
        return None, True
    return None


def _cleared_tool_uses(chat: list[Message], n: int, config: Any) -> list[str]:
    # The provider clears the oldest tool uses first, skipping the tools the edit excludes; the
    # reply says only how many, so the ids are those of the first N in the request.
    exclude: set[str] = set()
    if isinstance(config, dict):
        for edit in config.get("edits") or []:
            if isinstance(edit, dict) and str(edit.get("type", "")).startswith("clear_tool_uses"):
                exclude.update(str(x) for x in edit.get("exclude_tools") or [])
    ids = [
        str(c.get("id"))
        for m in chat
        for c in m.get("tool_calls") or []
        if isinstance(c, dict) and (c.get("function") or {}).get("name") not in exclude
    ]
    return ids[:n]


class _Record:
    """One instrumented Anthropic call in the transport's queue: the `_Call` the agent's thread
    captured, read into a snapshot on the sender thread."""

    __slots__ = ("inst", "call", "_reply")

    def __init__(self, inst: _AnthropicInstrumentation, call: _Call) -> None:
        self.inst = inst
        self.call = call
        self._reply: Any = _UNREAD

    @property
    def snapshot_id(self) -> str:
        return self.call.snapshot_id

    def digest(self) -> None:
        """Read the reply on the transport's reader thread and let go of it (see `_Call.digest`)."""
        if self._reply is not _UNREAD:
            return
        call = self.call
        self._reply = _read_reply(call.chunks, call.response)
        call.chunks = None
        call.response = None

    def snapshot(self) -> WireSnapshot:
        call = self.call
        # Read in the opposite order to digest(), which publishes the reply before dropping what
        # it was read from: one of the two is always there.
        chunks, response = call.chunks, call.response
        reply = self._reply
        if reply is _UNREAD:
            reply = _read_reply(chunks, response)
        turn, chat, conversation = self.inst._anthropic_turn(call)
        turn.snapshot_id = call.snapshot_id
        if call.error is not None:
            turn.tags.setdefault("error", call.error)
        if reply is not None:
            output = reply.output
            if output is not None and call.latency_ms is not None:
                output["latency_ms"] = round(call.latency_ms, 3)
            turn._output = output
            self._provider_edits(turn, chat, conversation, reply)
        return turn.snapshot()

    def _provider_edits(
        self, turn: Turn, chat: list[Message], conversation: list[str], reply: _Reply
    ) -> None:
        # Compacted on this call: the conversation as sent became the summary.
        for part in reply.compactions:
            fields = _compaction_fields(part, turn)
            if fields is None:
                continue
            sent = sum(turn.block_tokens(k) for k in conversation)
            turn.compression(
                COMPACTION,
                tokens_before=sent or None,
                tokens_after=fields[0],
                source="provider",
                opaque=fields[1],
            )
        config = self.call.request.get("context_management")
        for edit in reply.edits:
            strategy = _strategy(edit.get("type"))
            n = _int(edit.get("cleared_tool_uses"))
            items = _cleared_tool_uses(chat, n, config) if n else None
            turn.compression(
                strategy, tokens_before=_int(edit.get("cleared_input_tokens")), items=items, source="provider"
            )


# --- the instrumentation ----------------------------------------------------------------------


class _AnthropicInstrumentation(_Instrumentation):
    def begin(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], _Call | None]:
        clean, opts = strip_request(kwargs)
        try:
            messages = kwargs.get("messages")
            if not isinstance(messages, list | tuple):
                return clean, None  # an iterator would be used up by copying it
            return clean, self._call(clean, opts, _capture(messages, clean.get("system")))
        except Exception:  # noqa: BLE001 - observing must never stop the request
            log.exception("ctxobs.instrument.begin_failed")
            return clean, None

    def _queued(self, call: _Call) -> _Record:
        # Anthropic's reply is read into a snapshot of its own shape, on the transport's threads.
        return _Record(self, call)

    def _anthropic_turn(self, call: _Call) -> tuple[Turn, list[Message], list[str]]:
        """The call's Turn, its messages in the chat shape and the keys of its conversation
        blocks (neither system prompt nor tools)."""
        turn = self._new_turn(call, _NOT_ANTHROPIC_PARAMS)
        chat = chat_messages(call.messages)
        blocks = self.partitioner(chat)
        # Anthropic renders the tool definitions first, then the system prompt, then the messages:
        # a cache breakpoint on the system prompt covers the tools too.
        if call.tools:
            turn.tools(call.tools)
        seen: set[str] = {"tools"} if call.tools else set()
        compaction_at: str | None = None
        conversation: list[str] = []
        for b in blocks:
            key = str(b.get("key") or "other")
            while key in seen:
                key += "+"
            seen.add(key)
            msgs = list(b.get("messages") or [])
            turn.block(key, msgs, kind=b.get("kind"), pinned=bool(b.get("pinned")))
            if b.get("kind") != "system":
                conversation.append(key)
            if any(_compaction_part(m) is not None for m in msgs):
                compaction_at = key
        if compaction_at is not None:
            self._sent_compaction(turn, chat, compaction_at)
        return turn, chat, conversation

    def _sent_compaction(self, turn: Turn, chat: list[Message], block: str) -> None:
        # The provider drops every message before the last compaction block and reads its summary
        # instead, on every call that sends one: the messages recorded there never reach the model.
        at = max(i for i, m in enumerate(chat) if _compaction_part(m) is not None)
        part = _compaction_part(chat[at])
        fields = _compaction_fields(part, turn) if part is not None else None
        if fields is None:
            return
        dropped = [m for m in chat[:at] if m.get("role") != "system"]
        before = (
            tokens.cached_messages_tokens(
                [clean_message(m) for m in dropped], turn.counting.counter, self.obs.token_cache
            )
            if dropped
            else None
        )
        turn.compression(
            COMPACTION,
            block=block,
            tokens_before=before,
            tokens_after=fields[0],
            source="provider",
            opaque=fields[1],
        )


def _compaction_part(m: Message) -> dict[str, Any] | None:
    content = m.get("content")
    if not isinstance(content, list):
        return None
    found = [p for p in content if isinstance(p, dict) and p.get("type") == COMPACTION]
    return found[-1] if found else None


class _StreamManager:
    """Wraps the manager `messages.stream()` returns (sync or async): entering it sends the
    request; the raw event stream under the helper's stream is tapped like `create(stream=True)`,
    so the helper's own events, text stream and final message work unchanged."""

    def __init__(self, manager: Any, inst: _AnthropicInstrumentation, call: _Call, surface: str) -> None:
        self._manager = manager
        self._inst = inst
        self._call = call
        self._surface = surface

    def _tap(self, stream: Any, wrapper: type[InstrumentedStream] | type[AsyncInstrumentedStream]) -> Any:
        raw = getattr(stream, "_raw_stream", None)
        if raw is None:
            # A helper of another shape: the call happened, its reply cannot be read.
            report_uncaptured(self._inst.obs_or_none(), f"{self._surface}.stream_unreadable")
            self._call.tags.setdefault("ctxobs.reply", "uncaptured")
            self._inst.finish(self._call)
            return stream
        stream._raw_stream = wrapper(raw, self._inst, self._call)
        return stream

    def __enter__(self) -> Any:
        try:
            stream = self._manager.__enter__()
        except BaseException as exc:
            self._inst.finish(self._call, None, exc)
            raise
        return self._tap(stream, InstrumentedStream)

    def __exit__(self, *exc: Any) -> Any:
        return self._manager.__exit__(*exc)

    async def __aenter__(self) -> Any:
        try:
            stream = await self._manager.__aenter__()
        except BaseException as exc:
            self._inst.finish(self._call, None, exc)
            raise
        return self._tap(stream, AsyncInstrumentedStream)

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._manager.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._manager, name)


def _hook_stream(owner: Any, inst: _AnthropicInstrumentation, surface: str) -> None:
    # The helper sends its request itself rather than through `create`: hooked on its own, with
    # the marker `hook_create` uses, so that `unhook_create` undoes it.
    if getattr(owner, "_ctxobs_original_stream", None) is not None:
        return
    original = owner.stream

    @functools.wraps(original)
    def stream(*args: Any, **kwargs: Any) -> Any:
        clean, call = inst.begin(kwargs)
        try:
            manager = original(*args, **clean)
        except BaseException as exc:
            inst.finish(call, None, exc)
            raise
        return manager if call is None else _StreamManager(manager, inst, call, surface)

    owner.stream = stream
    owner._ctxobs_original_stream = original


def _resources(client: Any) -> list[tuple[Any, str]]:
    found = [(getattr(client, "messages", None), "anthropic.messages")]
    try:
        beta = getattr(client, "beta", None)
    except Exception:  # noqa: BLE001 - a client without the beta resources
        beta = None
    if beta is not None:
        found.append((getattr(beta, "messages", None), "anthropic.beta.messages"))
    return [(r, surface) for r, surface in found if r is not None]


def instrument_anthropic(
    client: Any,
    obs: Client | None = None,
    partitioner: Partitioner | None = None,
    *,
    context_window: int | None = None,
    agent: str | None = None,
) -> Any:
    """Record every Messages API call of CLIENT (anthropic.Anthropic or AsyncAnthropic):
    `messages.create` (streamed or not), `messages.parse`, `messages.stream(...)`, and the same
    on `client.beta.messages`.

    Returns CLIENT, patched in place; instrumenting twice is a no-op. The options are those of
    `instrument_openai` (`ctxobs_session`, `ctxobs_turn`, `ctxobs_agent`, `ctxobs_tags`,
    `ctxobs_context_window` keyword arguments, stripped before the request goes out). PARTITIONER
    receives the messages in the chat shape, the system prompt first as a `system` message.
    """
    inst = _AnthropicInstrumentation(obs, partitioner, context_window, agent)
    for resource, surface in _resources(client):
        for name in _REPLY_METHODS:
            if callable(getattr(resource, name, None)):
                hook_create(resource, inst, surface, name)
        if callable(getattr(resource, "stream", None)):
            _hook_stream(resource, inst, surface)
        _forget_raw_wrappers(resource)
    return client


def uninstrument_anthropic(client: Any) -> Any:
    """Undo `instrument_anthropic(CLIENT)`."""
    for resource, _ in _resources(client):
        for name in (*_REPLY_METHODS, "stream"):
            unhook_create(resource, name)
    return client
