"""`instrument_openai()`: record every `chat.completions.create` call of an openai client,
and its `responses.create` / `.parse` calls (converted by ctxobs.instrument_responses).

The agent's code stays as it is. Each call's messages are split into blocks by a partitioner
(default below; a message can name its block with `ctxobs_block` or `ctxobs.tag()`), the
ctxobs fields and `ctxobs_*` keyword arguments are stripped before the request reaches the
provider, and the snapshot is recorded after the reply — for a stream, after its last chunk,
with the chunks passed through unchanged. The openai package is never imported here: the
client is duck-typed, so the SDK keeps its dependencies.

One module, over the usual size, for one wrapper: the request stripping, the call record
(`_Call`) and the sync and async stream wrappers all feed the one `_Instrumentation`, which
records a call once its reply has been read.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple

from ctxobs.catalog import DEFAULT_CONTEXT_WINDOW, context_window_for
from ctxobs.client import (
    TAG_BLOCK,
    TAG_KIND,
    TAG_PINNED,
    Client,
    Message,
    Turn,
    clean_message,
    current_session,
    default_client,
    kind_for_key,
    output_from,
    usage_from,
)
from ctxobs.wire import WireOutput, WireSnapshot, WireUsage

log = logging.getLogger("ctxobs.instrument")

Partitioner = Callable[[list[Message]], list[dict[str, Any]]]

# Request arguments that are transport details, not model parameters.
_NOT_PARAMS = frozenset(
    {"messages", "model", "tools", "functions", "extra_headers", "extra_query", "extra_body", "timeout"}
)


def _is_tool_exchange(m: Message) -> bool:
    # A Responses reasoning item (ctxobs.instrument_responses) belongs to the calls it led to.
    return m.get("role") in ("tool", "function") or (
        m.get("role") == "assistant" and (bool(m.get("tool_calls")) or m.get("type") == "reasoning")
    )


def default_partitioner(messages: list[Message]) -> list[dict[str, Any]]:
    """Split a chat request into blocks.

    Leading system/developer messages -> `system`; the last user message -> `user`; the tool
    exchange after it (assistant tool calls and tool results of this turn) -> `tool_results`;
    everything else, earlier tool results included, -> `history`. A message tagged with
    `ctxobs_block` goes to that block. Consecutive messages of one key form one block; a key
    that comes back later gets a suffix (`history.2`) because blocks are kept in send order.
    """
    n = len(messages)
    untagged = [not m.get(TAG_BLOCK) for m in messages]
    last_user = next(
        (i for i in range(n - 1, -1, -1) if untagged[i] and messages[i].get("role") == "user"), -1
    )
    exchange_from = n
    while exchange_from > last_user + 1 and _is_tool_exchange(messages[exchange_from - 1]):
        exchange_from -= 1
    keys: list[str] = []
    leading = True
    for i, m in enumerate(messages):
        if not untagged[i]:
            keys.append(str(m[TAG_BLOCK]))
            continue
        if leading and m.get("role") in ("system", "developer"):
            keys.append("system")
            continue
        leading = False
        if i == last_user:
            keys.append("user")
        elif i >= exchange_from:
            keys.append("tool_results")
        else:
            keys.append("history")
    blocks: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for key, m in zip(keys, messages, strict=True):
        if blocks and blocks[-1]["_base"] == key:
            blocks[-1]["messages"].append(m)
            blocks[-1]["pinned"] = blocks[-1]["pinned"] or bool(m.get(TAG_PINNED))
            continue
        seen[key] = seen.get(key, 0) + 1
        blocks.append(
            {
                "_base": key,
                "key": key if seen[key] == 1 else f"{key}.{seen[key]}",
                "kind": str(m.get(TAG_KIND) or kind_for_key(key)),
                "messages": [m],
                "pinned": bool(m.get(TAG_PINNED)),
            }
        )
    for b in blocks:
        del b["_base"]
    return blocks


# Every field of an OpenAI chat message: a message whose keys are all among these has no tag,
# and that is decided by one C-level set comparison instead of a scan of its keys.
_MESSAGE_FIELDS = frozenset(
    {"role", "content", "name", "tool_calls", "tool_call_id", "function_call", "refusal", "audio"}
)


def _has_tags(m: Any) -> bool:
    if m.__class__ is dict and m.keys() <= _MESSAGE_FIELDS:
        return False
    return isinstance(m, dict) and any(isinstance(k, str) and k.startswith("ctxobs_") for k in m)


def strip_request(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(kwargs without any ctxobs field, the popped `ctxobs_*` options). Never mutates input."""
    opts = {k: v for k, v in kwargs.items() if k.startswith("ctxobs_")}
    clean = {k: v for k, v in kwargs.items() if not k.startswith("ctxobs_")} if opts else dict(kwargs)
    msgs = clean.get("messages")
    if isinstance(msgs, list):
        fields = _MESSAGE_FIELDS
        # Inline rather than any(_has_tags(...)): this runs on every call, for every message. A
        # {role, content} dict (most of them) is recognised by three probes, cheaper than the
        # keys-view comparison that covers the others.
        for m in msgs:
            if m.__class__ is dict and (
                (len(m) == 2 and "role" in m and "content" in m) or m.keys() <= fields
            ):
                continue
            if _has_tags(m):
                clean["messages"] = [clean_message(m) if _has_tags(m) else m for m in msgs]
                break
    return clean, opts


def _param_value(v: Any) -> bool:
    # openai's NOT_GIVEN / Omit sentinels mean "not sent".
    return type(v).__name__ not in ("NotGiven", "Omit")


class _Call:
    """One call as the agent's thread captured it, queued as it is: the sender thread makes its
    snapshot (partitioning, reading the reply, counting), so the agent's thread pays only for
    capturing the call. Slotted, and the queue item itself: the fewer objects a call keeps alive
    until the sender takes it, the less the garbage collector has to walk on the agent's thread.
    """

    __slots__ = (
        "_inst", "session_id", "turn", "agent", "model", "context_window", "tags", "messages",
        "tools", "request", "ts", "t0", "latency_ms", "response", "chunks", "error", "_snapshot_id",
        "_output",
    )

    def __init__(
        self,
        inst: _Instrumentation,
        session_id: str,
        turn: int,
        agent: str,
        model: str,
        context_window: int,
        tags: dict[str, str],
        messages: list[Any],
        tools: list[Any] | None,
        request: dict[str, Any],
    ) -> None:
        self._inst = inst
        self.session_id = session_id
        self.turn = turn
        self.agent = agent
        self.model = model
        self.context_window = context_window
        self.tags = tags
        self.messages = messages
        self.tools = tools
        self.request = request  # the request as sent; its params are picked on the sender thread
        # Both clocks are read here, each for ~50 ns: the wall clock stamps the snapshot, the
        # monotonic one times the call.
        self.ts = time.time()
        self.latency_ms: float | None = None
        self.response: Any = None  # the reply object, read on the sender thread
        self.chunks: list[Any] | None = None  # a stream's chunks, rebuilt on the sender thread
        self.error: str | None = None
        self._snapshot_id: str | None = None
        self._output: Any = _UNREAD
        self.t0 = time.perf_counter()

    @property
    def snapshot_id(self) -> str:
        # Made when first asked for (on the sender thread): uuid4 reads os.urandom.
        if self._snapshot_id is None:
            self._snapshot_id = str(uuid.uuid4())
        return self._snapshot_id

    def digest(self) -> None:
        """Read the reply now, on the transport's reader thread, and let go of it: a stream's
        chunks and a reply are dozens of small objects each, and while they wait in the queue
        for their batch (minutes, when the server is down) the garbage collector walks them
        again and again on whichever thread allocates: mostly the agent's."""
        if self._output is not _UNREAD:
            return
        output = _read_reply(self.chunks, self.response)
        # Published before the reply is dropped: snapshot() reads them in the opposite order.
        self._output = output
        self.chunks = None
        self.response = None

    def snapshot(self) -> WireSnapshot:
        chunks, response = self.chunks, self.response
        output = self._output
        if output is _UNREAD:
            output = _read_reply(chunks, response)
        if output is not None and self.latency_ms is not None:
            output["latency_ms"] = round(self.latency_ms, 3)
        turn = self._inst._turn(self)
        turn.snapshot_id = self.snapshot_id
        if self.error is not None:
            turn.tags.setdefault("error", self.error)
        turn._output = output
        return turn.snapshot()


# Not read yet (None is a reply that could not be read, or no reply).
_UNREAD: Any = object()


def _read_reply(chunks: list[Any] | None, response: Any) -> WireOutput | None:
    if chunks is not None:
        acc = _StreamAccumulator()
        for chunk in chunks:
            try:
                acc.feed(chunk)
            except Exception:  # noqa: BLE001 - an unexpected chunk shape must not lose the turn
                log.debug("ctxobs.instrument.chunk_unreadable")
        return acc.output()
    return _safe_output(response) if response is not None else None


# Models whose context window is remembered; the cache starts over past this many.
_WINDOW_CACHE = 256


class _Envelope(NamedTuple):
    session_id: str
    turn: int
    agent: str
    model: str
    context_window: int
    tags: dict[str, str]


_reported: set[str] = set()
_reported_lock = threading.Lock()


def report_uncaptured(obs: Client | None, kind: str) -> None:
    """Note a model call an instrumentation saw but could not record, or not wholly: counted
    in OBS's `stats()["uncaptured"]` every time, logged as a warning once per process per KIND
    (a call shape repeats on every turn; one line says what to look at)."""
    try:
        if obs is not None:
            obs.count_uncaptured()
        with _reported_lock:
            if kind in _reported:
                return
            _reported.add(kind)
        log.warning("ctxobs.instrument.uncaptured kind=%s", kind)
    except Exception:  # noqa: BLE001 - reporting must never reach the agent
        log.debug("ctxobs.instrument.report_failed")


class _Instrumentation:
    def __init__(
        self,
        obs: Client | None,
        partitioner: Partitioner | None,
        context_window: int | None,
        agent: str | None,
    ) -> None:
        self._obs = obs
        self.partitioner = partitioner or default_partitioner
        self.context_window = context_window
        self.agent = agent
        self._windows: dict[str, int | None] = {}

    def obs_or_none(self) -> Client | None:
        """The Client, or None when it cannot be made (reporting must not fail for want of it)."""
        try:
            return self.obs
        except Exception:  # noqa: BLE001
            return None

    @property
    def obs(self) -> Client:
        # Resolved lazily so instrumenting at import time does not read the environment early.
        if self._obs is None:
            self._obs = default_client()
        return self._obs

    def begin(self, kwargs: dict[str, Any]) -> tuple[dict[str, Any], _Call | None]:
        clean, opts = strip_request(kwargs)
        try:
            return clean, self._call(clean, opts, kwargs.get("messages"))
        except Exception:  # noqa: BLE001 - observing must never stop the request
            log.exception("ctxobs.instrument.begin_failed")
            return clean, None

    def _window(self, model: str) -> int | None:
        # context_window_for() tries every known prefix; an agent uses a handful of models.
        try:
            return self._windows[model]
        except KeyError:
            window = context_window_for(model)
            if len(self._windows) >= _WINDOW_CACHE:
                self._windows.clear()
            self._windows[model] = window
            return window

    def _envelope(self, clean: dict[str, Any], opts: dict[str, Any]) -> _Envelope | None:
        """Who and where a call belongs (session, turn, agent, model, window, tags), taken on
        the agent's thread because they follow call order and the caller's context variables;
        None when the call is not recorded (disabled, sampled out). Numbers the turn."""
        obs = self.obs
        if obs.disabled:
            return None
        ctx = current_session()
        sid = str(opts.get("ctxobs_session") or (ctx.session_id if ctx else obs.default_session_id))
        if not obs.sampled(sid):
            obs.transport.count_sampled_out()
            return None
        model = str(clean.get("model") or "")
        extra = opts.get("ctxobs_tags")
        tags = {
            **obs.tags,
            **(ctx.tags if ctx else {}),
            **({k: str(v) for k, v in extra.items()} if extra else {}),
        }
        window = opts.get("ctxobs_context_window") or self.context_window or self._window(model)
        if not window:
            window = DEFAULT_CONTEXT_WINDOW
            tags.setdefault("ctxobs.window", "assumed")
        explicit_turn = opts.get("ctxobs_turn")
        return _Envelope(
            sid,
            obs.next_turn(sid, int(explicit_turn) if explicit_turn is not None else None),
            str(
                opts.get("ctxobs_agent")
                or (ctx.agent if ctx and ctx.agent else "")
                or self.agent
                or obs.agent
            ),
            model,
            int(window),
            tags,
        )

    def _call(self, clean: dict[str, Any], opts: dict[str, Any], messages: Any) -> _Call | None:
        # What stays on the agent's thread, and why: the envelope (see _envelope), the options
        # (stripped from the request above), and a copy of the message list and of each message
        # dict (the agent appends to its list and may edit a message in place, trimming a tool
        # output, for its next call while this one is still queued). Everything else waits for
        # the sender.
        if not isinstance(messages, list):
            return None
        env = self._envelope(clean, opts)
        if env is None:
            return None
        tools = clean.get("tools") or clean.get("functions")
        try:
            # Shallow copies made in C; a message that is not a dict (a pydantic message) is
            # kept as it is and dumped on the sender thread.
            copies = list(map(dict.copy, messages))
        except TypeError:
            copies = [m.copy() if isinstance(m, dict) else m for m in messages]
        return _Call(
            self,
            *env,
            copies,
            list(tools) if isinstance(tools, list | tuple) else None,
            clean,
        )

    def finish(
        self,
        call: _Call | None,
        response: Any = None,
        error: BaseException | None = None,
        *,
        chunks: list[Any] | None = None,
    ) -> None:
        """Queue the finished call. Only the latency is taken here; the reply is read later."""
        if call is None:
            return
        try:
            call.latency_ms = (time.perf_counter() - call.t0) * 1000
            call.response = response
            call.chunks = chunks
            if error is not None:
                call.error = type(error).__name__
            item = self._queued(call)
            self.obs.transport.enqueue(item, digest=item.digest)
        except Exception:  # noqa: BLE001
            log.exception("ctxobs.instrument.record_failed session_id=%s", call.session_id)

    def _queued(self, call: _Call) -> Any:
        """What goes on the transport's queue for the finished CALL: an item with `digest()` (read
        the reply on the reader thread) and `snapshot_id`."""
        return call

    def _turn(self, call: _Call) -> Turn:
        turn = self._new_turn(call, _NOT_PARAMS)
        normalized = [m if isinstance(m, dict) else clean_message(m) for m in call.messages]
        self._add_blocks(turn, self.partitioner(normalized), call.tools)
        return turn

    def _new_turn(self, call: _Call, not_params: frozenset[str]) -> Turn:
        """The call's Turn without blocks; its params are the request's but NOT_PARAMS."""
        params = {k: v for k, v in call.request.items() if k not in not_params and _param_value(v)}
        turn = Turn(
            self.obs,
            session_id=call.session_id,
            turn=call.turn,
            agent=call.agent,
            model=call.model,
            context_window=call.context_window,
            reserve_tokens=None,
            encoding=None,
            params=params,
            tags=call.tags,
        )
        ts = datetime.fromtimestamp(call.ts, UTC).isoformat(timespec="milliseconds")
        turn.ts = ts.replace("+00:00", "Z")
        return turn

    @staticmethod
    def _add_blocks(turn: Turn, blocks: list[dict[str, Any]], tools: list[Any] | None) -> None:
        """Add a partitioner's BLOCKS to TURN in order, with the TOOLS block after the system prompt."""
        # Tool definitions sit after the system prompt, where providers render them.
        tools_at = -1
        if tools:
            tools_at = next((i for i, b in enumerate(blocks) if b.get("kind") != "system"), len(blocks))
        seen: set[str] = {"tools"} if tools else set()
        for i, b in enumerate(blocks):
            if i == tools_at:
                turn.tools(tools or [])
            key = str(b.get("key") or "other")
            while key in seen:
                key += "+"
            seen.add(key)
            turn.block(key, list(b.get("messages") or []), kind=b.get("kind"), pinned=bool(b.get("pinned")))
        if tools and tools_at == len(blocks):
            turn.tools(tools)


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


class _StreamAccumulator:
    """Rebuilds the reply (text, tool calls, finish reason, usage) from streamed chunks."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason = ""
        self.usage: WireUsage = {}
        self.chunks = 0

    def feed(self, chunk: Any) -> None:
        self.chunks += 1
        usage = _get(chunk, "usage")
        if usage is not None:
            self.usage = usage_from(usage)
        for choice in _get(chunk, "choices") or []:
            if (_get(choice, "index") or 0) != 0:
                continue
            delta = _get(choice, "delta")
            if delta is not None:
                content = _get(delta, "content")
                if isinstance(content, str) and content:
                    self.text.append(content)
                for tc in _get(delta, "tool_calls") or []:
                    idx = _get(tc, "index") or 0
                    call = self.calls.setdefault(
                        idx, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                    )
                    if _get(tc, "id"):
                        call["id"] = _get(tc, "id")
                    fn = _get(tc, "function")
                    if fn is not None:
                        if _get(fn, "name"):
                            call["function"]["name"] += _get(fn, "name")
                        if _get(fn, "arguments"):
                            call["function"]["arguments"] += _get(fn, "arguments")
            if _get(choice, "finish_reason"):
                self.finish_reason = str(_get(choice, "finish_reason"))

    def output(self) -> WireOutput:
        return {
            "text": "".join(self.text) if self.text or not self.calls else None,
            "tool_calls": [self.calls[i] for i in sorted(self.calls)],
            "finish_reason": self.finish_reason,
            "usage": self.usage,
        }


def _ignore(chunk: Any) -> None:
    pass


class _StreamBase:
    def __init__(self, stream: Any, inst: _Instrumentation, call: _Call | None) -> None:
        self._stream = stream
        self._inst = inst
        self._call = call
        # Chunks are kept, not read: rebuilding the reply from them is the sender thread's job.
        # Per chunk the agent's thread pays one C-level list append.
        self._chunks: list[Any] = []
        self._keep: Callable[[Any], None] = self._chunks.append if call is not None else _ignore
        self._done = False

    def _finish(self, *, complete: bool, error: BaseException | None = None) -> None:
        if self._done:
            return
        self._done = True
        if self._call is not None and not complete and error is None:
            self._call.tags.setdefault("ctxobs.stream", "incomplete")
        self._inst.finish(self._call, None, error, chunks=self._chunks)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class InstrumentedStream(_StreamBase):
    """Wraps an openai `Stream`: yields its chunks unchanged, records the snapshot at the end."""

    def __iter__(self) -> InstrumentedStream:
        return self

    def __next__(self) -> Any:
        try:
            chunk = next(self._stream)
        except StopIteration:
            self._finish(complete=True)
            raise
        except BaseException as exc:
            self._finish(complete=False, error=exc)
            raise
        self._keep(chunk)
        return chunk

    def __enter__(self) -> InstrumentedStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        try:
            close = getattr(self._stream, "close", None)
            if callable(close):
                close()
        finally:
            self._finish(complete=False)


class AsyncInstrumentedStream(_StreamBase):
    """Wraps an openai `AsyncStream` like `InstrumentedStream`."""

    def __aiter__(self) -> AsyncInstrumentedStream:
        return self

    async def __anext__(self) -> Any:
        try:
            chunk = await self._stream.__anext__()
        except StopAsyncIteration:
            self._finish(complete=True)
            raise
        except BaseException as exc:
            self._finish(complete=False, error=exc)
            raise
        self._keep(chunk)
        return chunk

    async def __aenter__(self) -> AsyncInstrumentedStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        try:
            close = getattr(self._stream, "close", None)
            if callable(close):
                result = close()
                if inspect.isawaitable(result):
                    await result
        finally:
            self._finish(complete=False)

    async def aclose(self) -> None:
        await self.close()


# openai's `with_raw_response` / `with_streaming_response` wrappers call the hooked `create` with
# this header; they hand the agent an unread HTTP response, which is the agent's to read.
_RAW_RESPONSE_HEADER = "X-Stainless-Raw-Response"


def _raw_response_kind(kwargs: dict[str, Any]) -> str | None:
    headers = kwargs.get("extra_headers")
    if not isinstance(headers, dict):
        return None
    value = headers.get(_RAW_RESPONSE_HEADER)
    if value is None:
        return None
    return "with_streaming_response" if value == "stream" else "with_raw_response"


def hook_create(owner: Any, inst: _Instrumentation, surface: str, name: str = "create") -> bool:
    """Replace OWNER.NAME (a `create`-like method, sync or async) by one that records each call
    through INST; SURFACE names the API in reports. False if OWNER.NAME is already hooked."""
    marker = f"_ctxobs_original_{name}"
    if getattr(owner, marker, None) is not None:
        return False
    original = getattr(owner, name)

    # openai wraps `create` in decorators that can hide that the async one is a coroutine.
    is_async = (
        inspect.iscoroutinefunction(original)
        or inspect.iscoroutinefunction(inspect.unwrap(original))
        or type(owner).__name__.startswith("Async")
    )
    if is_async:

        @functools.wraps(original)
        async def acreate(*args: Any, **kwargs: Any) -> Any:
            raw = _raw_response_kind(kwargs)
            if raw is not None:
                report_uncaptured(inst.obs_or_none(), f"{surface}.{raw}")
                return await original(*args, **strip_request(kwargs)[0])
            clean, call = inst.begin(kwargs)
            try:
                resp = await original(*args, **clean)
            except BaseException as exc:
                inst.finish(call, None, exc)
                raise
            if clean.get("stream") is True:
                return AsyncInstrumentedStream(resp, inst, call)
            inst.finish(call, resp)
            return resp

        setattr(owner, name, acreate)
    else:

        @functools.wraps(original)
        def create(*args: Any, **kwargs: Any) -> Any:
            raw = _raw_response_kind(kwargs)
            if raw is not None:
                report_uncaptured(inst.obs_or_none(), f"{surface}.{raw}")
                return original(*args, **strip_request(kwargs)[0])
            clean, call = inst.begin(kwargs)
            try:
                resp = original(*args, **clean)
            except BaseException as exc:
                inst.finish(call, None, exc)
                raise
            if clean.get("stream") is True:
                return InstrumentedStream(resp, inst, call)
            inst.finish(call, resp)
            return resp

        setattr(owner, name, create)
    setattr(owner, marker, original)
    return True


def unhook_create(owner: Any, name: str = "create") -> None:
    """Undo `hook_create(OWNER, ..., NAME)`."""
    marker = f"_ctxobs_original_{name}"
    if getattr(owner, marker, None) is not None:
        delattr(owner, name)
        setattr(owner, marker, None)


def instrument_openai(
    client: Any,
    obs: Client | None = None,
    partitioner: Partitioner | None = None,
    *,
    context_window: int | None = None,
    agent: str | None = None,
) -> Any:
    """Record every `client.chat.completions.create` and `client.responses.create` / `.parse`
    call (openai.OpenAI or AsyncOpenAI), streamed or not.

    Returns CLIENT, patched in place; instrumenting twice is a no-op. Per-call options go in
    stripped keyword arguments: `ctxobs_session`, `ctxobs_turn`, `ctxobs_agent`,
    `ctxobs_tags`, `ctxobs_context_window`; or use `with ctxobs.session(...)`.
    """
    # Imported here: ctxobs.instrument_responses builds on this module.
    from ctxobs.instrument_responses import instrument_responses

    hook_create(client.chat.completions, _Instrumentation(obs, partitioner, context_window, agent), "chat")
    instrument_responses(client, obs, partitioner, context_window=context_window, agent=agent)
    return client


def uninstrument_openai(client: Any) -> Any:
    """Undo `instrument_openai(CLIENT)`."""
    from ctxobs.instrument_responses import uninstrument_responses

    unhook_create(client.chat.completions)
    uninstrument_responses(client)
    return client


def _safe_output(resp: Any) -> WireOutput | None:
    try:
        return output_from(resp)
    except Exception:  # noqa: BLE001
        log.debug("ctxobs.instrument.output_unreadable type=%s", type(resp).__name__)
        return None
