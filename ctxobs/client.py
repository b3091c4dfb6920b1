"""The agent-facing API: `Client`, `Client.turn()` and the `Turn` builder, `session()`, `tag()`.

A `Turn` is one model call. The agent declares the blocks (partitions) of its prompt in the
order they are sent; `Turn.messages()` is exactly the message list those blocks make, so the
snapshot records what the model was given. Leaving the `with` block records the snapshot:
token counts are taken on the agent's thread (cached by content, so unchanged blocks cost a
dict probe), redaction, encoding and delivery happen on the transport's thread.

One module, over the usual size: `Client` makes `Turn`s and a `Turn` records through its
`Client`, and the message helpers here (cleaning, usage, output, redaction) define what a
turn's snapshot holds; ctxobs.instrument builds on all of them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, cast

from ctxobs import tokens
from ctxobs.catalog import DEFAULT_CONTEXT_WINDOW, context_window_for
from ctxobs.transport import CtxobsDeliveryError, Transport
from ctxobs.validate import validate_snapshot
from ctxobs.wire import (
    BLOCK_KINDS,
    BlockKind,
    CompressionSource,
    FieldError,
    RecallChannel,
    ValidationLayer,
    WireBlock,
    WireCompressionEvent,
    WireMessage,
    WireOutput,
    WireRecallItem,
    WireSnapshot,
    WireUsage,
    WireValidationOutcome,
    default_reserve,
    tier_for,
    usable_window,
)

log = logging.getLogger("ctxobs")

Redactor = Callable[[str], str]
Message = dict[str, Any]

# Message fields the SDK reads and strips before anything reaches a provider.
TAG_BLOCK = "ctxobs_block"
TAG_KIND = "ctxobs_kind"
TAG_PINNED = "ctxobs_pinned"


# --- sessions and tags ------------------------------------------------------------------


@dataclass(frozen=True)
class SessionContext:
    """What `session()` puts in scope for instrumented calls in this thread or task."""

    session_id: str
    agent: str | None = None
    tags: dict[str, str] = field(default_factory=dict)


_current_session: ContextVar[SessionContext | None] = ContextVar("ctxobs_session", default=None)


@contextmanager
def session(
    session_id: str, *, agent: str | None = None, tags: dict[str, str] | None = None
) -> Iterator[SessionContext]:
    """Scope model calls to SESSION_ID (a context variable: safe across threads and asyncio tasks)."""
    ctx = SessionContext(str(session_id), agent, dict(tags or {}))
    token = _current_session.set(ctx)
    try:
        yield ctx
    finally:
        _current_session.reset(token)


def current_session() -> SessionContext | None:
    """The innermost active `session()`, if any."""
    return _current_session.get()


def tag(message: Message, block: str, *, kind: str | None = None, pinned: bool | None = None) -> Message:
    """Mark MESSAGE (in place; returned for convenience) as belonging to block BLOCK.

    Instrumented clients strip these fields before the request reaches the provider.
    """
    message[TAG_BLOCK] = block
    if kind is not None:
        message[TAG_KIND] = kind
    if pinned is not None:
        message[TAG_PINNED] = pinned
    return message


def kind_for_key(key: str) -> str:
    """A block's default kind: its key when that is a known kind, else `other`."""
    base = key.split(".", 1)[0]
    return base if base in BLOCK_KINDS else "other"


def _has_other_tags(message: Message) -> bool:
    # Cheap common case first: a message with only the standard chat fields has no tags.
    if len(message) <= 2:
        return False
    return any(isinstance(k, str) and k.startswith("ctxobs_") for k in message)


_BYTES = (bytes, bytearray, memoryview)


def bytes_as_text(value: bytes | bytearray | memoryview) -> str:
    """Bytes (a tool's raw output) as text, every byte kept: valid UTF-8 reads as itself, other
    bytes become unpaired surrogates that `.encode("utf-8", "surrogateescape")` turns back."""
    return bytes(value).decode("utf-8", "surrogateescape")


def _content_as_text(content: Any) -> Any:
    if isinstance(content, _BYTES):
        return bytes_as_text(content)
    return [
        {**p, "text": bytes_as_text(p["text"])}
        if isinstance(p, dict) and isinstance(p.get("text"), _BYTES) else p
        for p in content
    ]


def clean_message(message: Any) -> Message:
    """A plain-dict copy of MESSAGE without ctxobs fields (pydantic messages are dumped)."""
    if isinstance(message, dict):
        copy = dict(message)
        if TAG_BLOCK in copy or TAG_KIND in copy or TAG_PINNED in copy or _has_other_tags(copy):
            for k in [k for k in copy if isinstance(k, str) and k.startswith("ctxobs_")]:
                del copy[k]
        return copy
    dump = getattr(message, "model_dump", None)
    if callable(dump):
        try:
            data = dump(exclude_none=True)
            if isinstance(data, dict):
                return data
        except Exception:  # noqa: BLE001 - an odd object is recorded as text below
            log.debug("ctxobs.message_dump_failed")
    return {"role": "user", "content": str(message)}


# --- outputs ----------------------------------------------------------------------------


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def usage_from(raw: Any) -> WireUsage:
    """The wire usage object from a provider usage (dict or object); unknown fields dropped."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        dump = getattr(raw, "model_dump", None)
        raw = dump() if callable(dump) else {}
    out: WireUsage = {}
    prompt, completion, total = (
        _int_or_none(raw.get(k)) for k in ("prompt_tokens", "completion_tokens", "total_tokens")
    )
    if prompt is not None:
        out["prompt_tokens"] = prompt
    if completion is not None:
        out["completion_tokens"] = completion
    if total is not None:
        out["total_tokens"] = total
    details = raw.get("prompt_tokens_details")
    cached = _int_or_none(details.get("cached_tokens")) if isinstance(details, dict) else None
    if cached is None:
        cached = _int_or_none(raw.get("cached_tokens"))
    if cached is not None:
        out["cached_tokens"] = cached
    return out


def output_from(response: Any, latency_ms: float | None = None) -> WireOutput | None:
    """The wire `output` of a reply: an openai ChatCompletion, its dict, a wire dict or text."""
    if response is None:
        return None
    if isinstance(response, str):
        out: WireOutput = {"text": response}
    else:
        data = response
        if not isinstance(data, dict):
            dump = getattr(response, "model_dump", None)
            data = dump() if callable(dump) else {"text": str(response)}
        choices = data.get("choices")
        if isinstance(choices, list):
            first = choices[0] if choices and isinstance(choices[0], dict) else {}
            message = first.get("message") if isinstance(first.get("message"), dict) else {}
            text = message.get("content") if message else first.get("text")
            out = {
                "text": text if isinstance(text, str) else None,
                "tool_calls": list(message.get("tool_calls") or []) if message else [],
                "finish_reason": first.get("finish_reason") or "",
                "usage": usage_from(data.get("usage")),
            }
        else:
            # A wire output given by the caller: its fields go as they are, for the validator to judge.
            out = cast(WireOutput, {
                k: data[k]
                for k in ("text", "tool_calls", "finish_reason", "usage", "latency_ms")
                if k in data
            })
            if "usage" in out:
                out["usage"] = usage_from(out["usage"])
    if latency_ms is not None:
        out["latency_ms"] = round(float(latency_ms), 3)
    return out


# --- redaction --------------------------------------------------------------------------


def redact_snapshot(snapshot: WireSnapshot, redact: Redactor) -> WireSnapshot:
    """A copy of SNAPSHOT with REDACT applied to every text that came from a prompt or reply.

    Covered: message content (strings and text parts), tool-call arguments, output text and
    tool calls, recall previews, validation messages. Token counts are left as counted on
    the original text — they describe what the model saw.
    """
    out = snapshot.copy()
    out["blocks"] = [
        {**b, "messages": [_redact_message(m, redact) for m in b.get("messages", [])]}
        for b in snapshot.get("blocks", [])
    ]
    output = snapshot.get("output")
    if isinstance(output, dict):
        o = output.copy()
        text = o.get("text")
        if isinstance(text, str):
            o["text"] = redact(text)
        calls = o.get("tool_calls")
        if calls:
            o["tool_calls"] = [_redact_call(c, redact) for c in calls]
        out["output"] = o
    recall = snapshot.get("recall")
    if recall:
        out["recall"] = [_redact_recall(r, redact) for r in recall]
    validation = snapshot.get("validation")
    if validation:
        out["validation"] = [_redact_validation(v, redact) for v in validation]
    return out


def _redact_recall(r: WireRecallItem, redact: Redactor) -> WireRecallItem:
    preview = r.get("preview")
    return {**r, "preview": redact(preview)} if isinstance(preview, str) else r


def _redact_validation(v: WireValidationOutcome, redact: Redactor) -> WireValidationOutcome:
    message = v.get("message")
    return {**v, "message": redact(message)} if isinstance(message, str) else v


def _redact_message(message: WireMessage, redact: Redactor) -> WireMessage:
    # dict(): a hand-built snapshot's message may be any mapping.
    m = cast(WireMessage, dict(message))
    c = m.get("content")
    if isinstance(c, str):
        m["content"] = redact(c)
    elif isinstance(c, list):
        m["content"] = [
            {**p, "text": redact(p["text"])} if isinstance(p, dict) and isinstance(p.get("text"), str) else p
            for p in c
        ]
    calls = m.get("tool_calls")
    if calls:
        m["tool_calls"] = [_redact_call(call, redact) for call in calls]
    return m


def _redact_call(call: Any, redact: Redactor) -> Any:
    if not isinstance(call, dict):
        return call
    fn = call.get("function")
    if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
        return {**call, "function": {**fn, "arguments": redact(fn["arguments"])}}
    return call


# --- blocks and turns -------------------------------------------------------------------


@dataclass
class _Block:
    key: str
    kind: str
    messages: list[Message]
    pinned: bool = False
    compressed: bool = False
    refs: list[str] = field(default_factory=list)
    tool_definitions: list[Any] | None = None
    tokens: int | None = None  # memo; reset when the block changes


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Turn:
    """One model call being assembled. Build it with `Client.turn()`; methods never raise
    for bad data (the wire validator reports it through `on_error`)."""

    def __init__(
        self,
        client: Client,
        *,
        session_id: str,
        turn: int,
        agent: str,
        model: str,
        context_window: int,
        reserve_tokens: int | None,
        encoding: str | None,
        params: dict[str, Any] | None,
        tags: dict[str, str],
    ) -> None:
        self._client = client
        self.snapshot_id = str(uuid.uuid4())
        self.session_id = session_id
        self.turn = turn
        self.agent = agent
        self.model = model
        self.context_window = context_window
        self.reserve_tokens = (
            reserve_tokens if reserve_tokens is not None else default_reserve(context_window)
        )
        self.counting = tokens.counting_for(model, encoding)
        self.params: dict[str, Any] = dict(params or {})
        self.tags = tags
        self.ts = now_iso()
        self._blocks: OrderedDict[str, _Block] = OrderedDict()
        self._compression: list[WireCompressionEvent] = []
        self._recall: list[WireRecallItem] = []
        self._validation: list[WireValidationOutcome] = []
        self._output: WireOutput | None = None
        self._reply: tuple[Any, float | None] | None = None
        self._retries: int | None = None
        self._fallback = False
        self._messages_at: float | None = None
        self._recorded = False

    # blocks

    def block(
        self,
        key: str,
        messages: list[Any],
        *,
        kind: str | None = None,
        pinned: bool = False,
        compressed: bool = False,
        refs: list[str] | None = None,
    ) -> Turn:
        """Add block KEY with MESSAGES (copied). A second call with the same key appends.

        `kind` defaults to the key when it names a kind (system, memory, history...).
        A `tools` block given tool definitions (no `role`) is recorded as with `tools()`.
        """
        kind = kind or kind_for_key(key)
        if kind == "tools" and messages and all(isinstance(m, dict) and "role" not in m for m in messages):
            return self.tools(messages, key=key)
        # Plain {role, content} dicts (most messages) cannot carry tags: copied without the checks.
        copies = [
            dict(m) if m.__class__ is dict and len(m) == 2 and "role" in m and "content" in m
            else clean_message(m)
            for m in messages
        ]
        for m in copies:
            c = m.get("content")
            if isinstance(c, _BYTES) or (isinstance(c, list) and any(
                    isinstance(p, dict) and isinstance(p.get("text"), _BYTES) for p in c)):
                m["content"] = _content_as_text(c)
        existing = self._blocks.get(key)
        if existing is not None:
            existing.messages.extend(copies)
            existing.pinned = existing.pinned or pinned
            existing.compressed = existing.compressed or compressed
            existing.refs.extend(refs or [])
            existing.tokens = None
        else:
            self._blocks[key] = _Block(key, kind, copies, pinned, compressed, list(refs or []))
        return self

    def tools(self, definitions: list[Any], *, key: str = "tools") -> Turn:
        """Record the tool definitions sent with the call (the `tools` request parameter).

        On the wire: a kind=tools block with no messages and the definitions' token count;
        the definitions themselves go to `params.tools`, as they were sent.
        """
        defs = list(definitions)
        self._blocks[key] = _Block(key, "tools", [], tool_definitions=defs)
        self.params["tools"] = defs
        return self

    def messages(self) -> list[Message]:
        """The exact message list the blocks make, in block order (tools are not messages)."""
        self._messages_at = time.perf_counter()
        return [m for b in self._blocks.values() for m in b.messages]

    def tool_definitions(self) -> list[Any] | None:
        """The tool definitions recorded with `tools()`, to pass as the request's `tools`."""
        defs = [d for b in self._blocks.values() if b.tool_definitions for d in b.tool_definitions]
        return defs or None

    def request(self, **extra: Any) -> dict[str, Any]:
        """Keyword arguments for `chat.completions.create`: model, messages, tools, params."""
        req: dict[str, Any] = {"model": self.model, "messages": self.messages()}
        req.update({k: v for k, v in self.params.items() if k != "tools"})
        defs = self.tool_definitions()
        if defs:
            req["tools"] = defs
        req.update(extra)
        return req

    # counts

    def block_tokens(self, key: str) -> int:
        """Tokens of block KEY (0 if absent), OpenAI's per-message overhead included."""
        b = self._blocks.get(key)
        return self._count(b) if b is not None else 0

    def tokens(self) -> int:
        """Prompt tokens of the call: every block plus the reply priming."""
        return sum(self._count(b) for b in self._blocks.values()) + tokens.REPLY_PRIMING

    def watermark(self) -> float:
        """Current fill: the blocks' tokens / (context window - reserve), exactly as the server
        derives it for the dashboard. Compress when this passes ~0.70."""
        usable = usable_window(self.context_window, self.reserve_tokens)
        return sum(self._count(b) for b in self._blocks.values()) / usable

    def tier(self) -> str:
        """The watermark's tier: ok, warn, compress, force or break."""
        return tier_for(self.watermark())

    def _count(self, b: _Block) -> int:
        if b.tokens is None:
            cache = self._client.token_cache
            counter = self.counting.counter
            if b.tool_definitions is not None:
                b.tokens = tokens.cached_tools_tokens(b.tool_definitions, counter, cache)
            else:
                b.tokens = tokens.cached_messages_tokens(b.messages, counter, cache)
        return b.tokens

    # events

    def recall(
        self,
        memory_id: str,
        *,
        score: float | None = None,
        injected: bool = False,
        block: str | None = None,
        channel: str | None = None,
        rank: int | None = None,
        stale: bool = False,
        conflicting: bool = False,
        preview: str | None = None,
    ) -> Turn:
        """Record a retrieved memory; `rank` defaults to the order of recall() calls."""
        item: WireRecallItem = {
            "memory_id": str(memory_id),
            "injected": injected,
            "rank": rank if rank is not None else len(self._recall) + 1,
        }
        if score is not None:
            item["score"] = score
        if block is not None:
            item["block"] = block
        if channel is not None:
            item["channel"] = cast(RecallChannel, channel)  # the validator reports an unknown one
        if preview is not None:
            item["preview"] = preview
        if stale:
            item["stale"] = True
        if conflicting:
            item["conflicting"] = True
        self._recall.append(item)
        return self

    def compression(
        self,
        strategy: str,
        *,
        block: str | None = None,
        tokens_before: int | None = None,
        tokens_after: int | None = None,
        watermark: float | None = None,
        items: list[str] | None = None,
        ref: str | None = None,
        source: str | None = None,
        opaque: bool = False,
    ) -> Turn:
        """Record a compression step and mark BLOCK compressed.

        SOURCE says who edited the context: "client" (the default: the agent's code), "sdk", or
        "provider" for an edit made server-side by the model provider; OPAQUE marks content that
        is encrypted or unreadable and measured by size only.
        """
        ev: WireCompressionEvent = {"strategy": strategy}
        if block is not None:
            ev["block"] = block
        if tokens_before is not None:
            ev["tokens_before"] = tokens_before
        if tokens_after is not None:
            ev["tokens_after"] = tokens_after
        if watermark is not None:
            ev["watermark"] = watermark
        if ref is not None:
            ev["ref"] = ref
        if source is not None:
            ev["source"] = cast(CompressionSource, source)  # the validator reports an unknown one
        if opaque:
            ev["opaque"] = True
        if items:
            ev["items"] = [str(i) for i in items]
        self._compression.append(ev)
        if block is not None and block in self._blocks:
            self._blocks[block].compressed = True
            if ref:
                self._blocks[block].refs.append(ref)
        return self

    def validation(
        self,
        layer: str,
        check: str | None = None,
        *,
        passed: bool,
        code: str | None = None,
        message: str | None = None,
        attempt: int = 1,
    ) -> Turn:
        """Record one validator outcome (layer: structure, semantic or business)."""
        v: WireValidationOutcome = {
            "layer": cast(ValidationLayer, layer),  # the validator reports an unknown one
            "passed": passed,
            "attempt": attempt,
        }
        if check is not None:
            v["check"] = check
        if code is not None:
            v["code"] = code
        if message is not None:
            v["message"] = message
        self._validation.append(v)
        return self

    def fallback(self, used: bool = True) -> Turn:
        """Record that the agent answered with its fixed fallback reply."""
        self._fallback = used
        return self

    def retries(self, n: int) -> Turn:
        """Retries used so far; by default the highest validation attempt minus one."""
        self._retries = n
        return self

    def tag(self, **tags: Any) -> Turn:
        self.tags.update({k: str(v) for k, v in tags.items()})
        return self

    def output(self, response: Any, *, latency_ms: float | None = None) -> Turn:
        """Record the reply: an openai ChatCompletion (or its dict), a wire output dict or text.

        Latency defaults to the time since the last `messages()` / `request()` call.
        """
        if latency_ms is None and self._messages_at is not None:
            latency_ms = (time.perf_counter() - self._messages_at) * 1000
        # Read when the snapshot is made (on the sender thread): dumping a ChatCompletion costs
        # more than the rest of recording the turn. Only the latency must be taken now.
        self._reply = (response, latency_ms)
        self._output = None
        return self

    def _read_reply(self) -> None:
        if self._reply is None:
            return
        response, latency_ms = self._reply
        self._reply = None
        try:
            self._output = output_from(response, latency_ms)
        except Exception:  # noqa: BLE001 - an unexpected response type must not break the agent
            log.warning(
                "ctxobs.output_unreadable snapshot_id=%s type=%s", self.snapshot_id, type(response).__name__
            )
            self._output = None

    # recording

    def snapshot(self) -> WireSnapshot:
        """The wire snapshot of this turn as it stands (before redaction)."""
        exact = self.counting.exact
        blocks: list[WireBlock] = []
        for b in self._blocks.values():
            # Kinds and messages are the agent's: the validator judges them.
            wb: WireBlock = {
                "key": b.key,
                "kind": cast(BlockKind, b.kind),
                "messages": cast(list[WireMessage], b.messages),
                "tokens": self._count(b),
            }
            if not exact:
                wb["estimated"] = True
            if b.pinned:
                wb["pinned"] = True
            if b.compressed:
                wb["compressed"] = True
            if b.refs:
                wb["refs"] = list(b.refs)
            blocks.append(wb)
        snap: WireSnapshot = {
            "snapshot_id": self.snapshot_id,
            "session_id": self.session_id,
            "turn": self.turn,
            "agent": self.agent,
            "ts": self.ts,
            "model": {
                "name": self.model,
                "context_window": self.context_window,
                "reserve_tokens": self.reserve_tokens,
                "encoding": self.counting.encoding,
                "counts": "exact" if exact else "estimated",
            },
            "params": self.params,
            "blocks": blocks,
        }
        if self._compression:
            snap["compression"] = self._compression
        if self._recall:
            snap["recall"] = self._recall
        if self._validation:
            snap["validation"] = self._validation
        self._read_reply()
        if self._output is not None:
            snap["output"] = self._output
        if self.tags:
            snap["tags"] = cast(dict[str, str | float | bool], self.tags)
        retries = self._retries
        if retries is None and self._validation:
            retries = max(int(v.get("attempt") or 1) for v in self._validation) - 1
        if retries:
            snap["retries"] = retries
        if self._fallback:
            snap["fallback_used"] = True
        return snap

    def record(self) -> bool:
        """Send the snapshot (once); called by `with` on exit. False if not queued."""
        if self._recorded:
            return False
        self._recorded = True
        if not self._blocks:
            log.warning("ctxobs.turn_without_blocks snapshot_id=%s", self.snapshot_id)
            return False
        try:
            # The snapshot is built (and counted) on the sender thread, off the agent's path;
            # the turn must not be changed after this point.
            return self._client.record(self)
        except Exception:  # noqa: BLE001
            log.exception("ctxobs.record_failed snapshot_id=%s", self.snapshot_id)
            return False

    def __enter__(self) -> Turn:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            # A failed call's context is often the interesting one: record it, tagged.
            self.tags.setdefault("error", exc_type.__name__)
        self.record()


# --- the client -------------------------------------------------------------------------


class Client:
    """Entry point of the SDK: builds turns and hands their snapshots to a `Transport`.

    Endpoint and key come from the arguments or CTXOBS_ENDPOINT / CTXOBS_API_KEY; without an
    endpoint (or with `disabled=True` or CTXOBS_DISABLED=1) nothing is sent, but turns still
    work so agent code runs unchanged. `sample_rate` keeps or drops whole sessions.
    What the server cannot take is kept in a spool directory (`spool=`, on by default) and sent
    when it answers again, or by the next Client for the same endpoint and key.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        api_key: str | None = None,
        *,
        agent: str = "",
        disabled: bool | None = None,
        sample_rate: float = 1.0,
        redact: Redactor | None = None,
        on_error: Callable[[CtxobsDeliveryError], None] | None = None,
        spool: bool | str | os.PathLike[str] | None = None,
        spool_path: str | os.PathLike[str] | None = None,
        tags: dict[str, str] | None = None,
        validate: bool = True,
        token_cache: tokens.TokenCache | None = None,
        transport: Transport | None = None,
        **transport_options: Any,
    ) -> None:
        self.endpoint = endpoint if endpoint is not None else os.environ.get("CTXOBS_ENDPOINT", "")
        api_key = api_key if api_key is not None else os.environ.get("CTXOBS_API_KEY", "")
        if disabled is None:
            disabled = os.environ.get("CTXOBS_DISABLED", "").strip().lower() in {"1", "true", "yes", "on"}
        if not self.endpoint and not disabled and transport is None:
            log.warning("ctxobs.disabled reason=no_endpoint hint=set CTXOBS_ENDPOINT")
            disabled = True
        self.agent = agent
        self.sample_rate = sample_rate
        self.redact = redact
        self.on_error = on_error
        self.validate = validate
        self.tags = {k: str(v) for k, v in (tags or {}).items()}
        self.token_cache = token_cache if token_cache is not None else tokens.default_cache()
        self.transport = transport or Transport(
            self.endpoint,
            api_key,
            # Default on: CTXOBS_SPOOL, else a directory per endpoint and key in the user's cache.
            spool=spool_path if spool_path is not None else (True if spool is None else spool),
            on_error=on_error,
            prepare=self._prepare,
            disabled=bool(disabled),
            **transport_options,
        )
        if self.transport.prepare is None:
            # A caller-built transport must still redact and validate.
            self.transport.prepare = self._prepare
        self._turns: OrderedDict[str, int] = OrderedDict()
        self._turns_lock = threading.Lock()
        self._uncaptured = 0
        self.default_session_id = f"auto-{uuid.uuid4()}"

    @property
    def disabled(self) -> bool:
        return self.transport.disabled

    def next_turn(self, session_id: str, explicit: int | None = None) -> int:
        """The turn number for SESSION_ID: EXPLICIT if given (later turns count on from it),
        else one more than the last turn this client saw for the session, from 0."""
        with self._turns_lock:
            n = explicit if explicit is not None else self._turns.get(session_id, 0)
            self._turns[session_id] = n + 1
            self._turns.move_to_end(session_id)
            # Bounded: a long-lived process may see millions of sessions.
            if len(self._turns) > 100_000:
                self._turns.popitem(last=False)
            return n

    def turn(
        self,
        session_id: str | None = None,
        *,
        model: str,
        agent: str | None = None,
        context_window: int | None = None,
        reserve_tokens: int | None = None,
        turn: int | None = None,
        encoding: str | None = None,
        params: dict[str, Any] | None = None,
        tags: Mapping[str, object] | None = None,
    ) -> Turn:
        """Start a turn (one model call). Use as a context manager; leaving it records it.

        SESSION_ID defaults to the active `session()` or a per-client id. CONTEXT_WINDOW
        defaults to the known window of MODEL.
        """
        ctx = current_session()
        sid = session_id or (ctx.session_id if ctx else self.default_session_id)
        merged_tags = {
            **self.tags,
            **(ctx.tags if ctx else {}),
            **{k: str(v) for k, v in (tags or {}).items()},
        }
        window = context_window or context_window_for(model)
        if window is None:
            window = DEFAULT_CONTEXT_WINDOW
            merged_tags.setdefault("ctxobs.window", "assumed")
        return Turn(
            self,
            session_id=sid,
            turn=self.next_turn(sid, turn),
            agent=agent or (ctx.agent if ctx and ctx.agent else "") or self.agent,
            model=model,
            context_window=int(window),
            reserve_tokens=reserve_tokens,
            encoding=encoding,
            params=params,
            tags=merged_tags,
        )

    def count_uncaptured(self) -> None:
        """Count a model call an instrumentation saw but could not record (ctxobs.instrument)."""
        with self._turns_lock:
            self._uncaptured += 1

    def sampled(self, session_id: str) -> bool:
        """Whether SESSION_ID is kept under `sample_rate` (stable per session)."""
        if self.sample_rate >= 1.0:
            return True
        if self.sample_rate <= 0.0:
            return False
        h = int.from_bytes(hashlib.blake2b(session_id.encode(), digest_size=8).digest(), "big")
        return h / 2**64 < self.sample_rate

    def record(self, snapshot: WireSnapshot | Turn) -> bool:
        """Queue a wire snapshot (a dict built by hand, or a finished Turn). Never raises, never blocks."""
        if self.transport.disabled:
            return False
        sid = snapshot.session_id if isinstance(snapshot, Turn) else str(snapshot.get("session_id", ""))
        if not self.sampled(sid):
            self.transport.count_sampled_out()
            return False
        return self.transport.enqueue(snapshot)

    def _prepare(self, item: Any) -> WireSnapshot:
        # Runs on the transport thread: counting, redaction and validation stay off the agent's thread.
        # A Turn, or an instrumented call (ctxobs.instrument) that is made into one here.
        snapshot: WireSnapshot = cast(WireSnapshot, item) if isinstance(item, dict) else item.snapshot()
        out = redact_snapshot(snapshot, self.redact) if self.redact is not None else snapshot
        if self.validate:
            _, errors = validate_snapshot(out)
            if errors:
                raise InvalidSnapshot(errors)
        return out

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Block until queued snapshots are sent (or TIMEOUT); True if the queue drained."""
        return self.transport.flush(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Send for up to TIMEOUT seconds, spool what is left, stop; returns within TIMEOUT (+0.5 s)."""
        self.transport.close(timeout)

    def stats(self) -> dict[str, int]:
        """Delivery counters: enqueued, sent, duplicates, dropped, failed, retried, spooled,
        spool_dropped, sampled_out, batches, blocks_by_hash, queued, backlog; plus the token cache's
        hits and misses and `uncaptured` (model calls an instrumented client made that could not be
        recorded)."""
        out = self.transport.stats()
        out["uncaptured"] = self._uncaptured
        out["token_cache_hits"] = self.token_cache.hits
        out["token_cache_misses"] = self.token_cache.misses
        return out


class InvalidSnapshot(ValueError):
    """A snapshot failed the wire validator locally; it is reported, not sent."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(f"{e['loc']}: {e['msg']}" for e in errors[:5]))
        self.errors = errors


_default_client: Client | None = None
_default_lock = threading.Lock()


def default_client() -> Client:
    """The process-wide Client built from the environment on first use."""
    global _default_client
    with _default_lock:
        if _default_client is None:
            _default_client = Client()
        return _default_client
