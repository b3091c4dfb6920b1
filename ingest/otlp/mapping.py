"""Model-call spans as wire snapshots: the OTel GenAI, OpenInference and OpenLLMetry conventions.

Pure: spans in, wire snapshot dicts out (for `ctxobs.validate.validate_snapshot` and the snapshot
batch path). One model-call span is one snapshot; when a framework's span wraps a provider
SDK's span, only the innermost one is kept, so a call's usage is counted once.

Content is read from the first convention that carries it:
1. OTel GenAI: `gen_ai.system_instructions`, `gen_ai.input.messages`, `gen_ai.output.messages`,
   `gen_ai.tool.definitions` on the span, or on its `gen_ai.client.inference.operation.details`
   event (a span event, or a log record with the span's ids);
2. OpenInference: `llm.input_messages.N.message.*`, `llm.tools.N.tool.json_schema`,
   `llm.output_messages.N.message.*`;
3. OpenLLMetry: `gen_ai.prompt.N.*`, `gen_ai.completion.N.*`, `llm.request.functions.N.*`;
4. the deprecated per-message events (`gen_ai.system.message`, `gen_ai.user.message`, ...,
   `gen_ai.choice`).

One module, over the usual size, for one mapping: the readers of the four conventions all
fill one `_Content`, and `_span_content` tries them in the order above, so the precedence
between conventions is decided in one place.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from core import jsonbody
from ctxobs import tokens as tok
from ctxobs.catalog import DEFAULT_CONTEXT_WINDOW, context_window_for
from ctxobs.client import TAG_BLOCK, TAG_KIND
from ctxobs.instrument import default_partitioner
from ctxobs.wire import BLOCK_KINDS, LIMITS, NAME_CHARS
from ingest.otlp.decode import Event, LogRecord, Span

# Snapshot ids are derived from (trace id, span id): a re-exported span is the same snapshot.
SNAPSHOT_NAMESPACE = uuid.UUID("6f1c2d0e-8a4b-5c3d-9e7f-0a1b2c3d4e5f")

DETAILS_EVENT = "gen_ai.client.inference.operation.details"
GENAI_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
OPENLLMETRY_TYPES = frozenset({"chat", "completion"})
REDACTED = "__REDACTED__"
# Where a tool result part holds its content: the GenAI convention's key, then pydantic-ai's.
TOOL_RESULT_KEYS = ("response", "result")
# A compaction part (OpenAI Responses `compaction` item, Anthropic `compaction` block) stands for
# the history it replaced: it becomes a `summary` block and a compression event.
COMPACTION = "compaction"
COMPRESSION_STRATEGY = "summarize"
# A compaction the provider made that an instrumentation reports as a span event (or a log
# record with the span's ids) rather than as a part: ctxobs's own name, with attributes
# `gen_ai.compaction.{strategy,tokens_before,tokens_after,encrypted,id}` (docs/otlp.md).
COMPACTED_EVENT = "gen_ai.conversation.compacted"
# Marks a summary message until the partitioner has placed it; never stored.
_COMPACTION_MARK = "_ctxobs_compaction"
_GENAI_CONTENT = frozenset(
    {
        "gen_ai.system_instructions",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.definitions",
    }
)

# Tags that say how a snapshot came in and what it is missing.
TAG_SOURCE = "ctxobs.source"
TAG_CONVENTION = "ctxobs.otel.convention"
TAG_CONTENT = "ctxobs.content"  # "incomplete" when something is known to be missing
TAG_CONTENT_REASON = "ctxobs.content.reason"
TAG_WINDOW = "ctxobs.window"
TAG_TRACE = "otel.trace_id"
TAG_SPAN = "otel.span_id"
TAG_PARENT = "otel.parent_span_id"

_DEPRECATED_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}

_PARAMS = (
    ("temperature", ("gen_ai.request.temperature",)),
    ("top_p", ("gen_ai.request.top_p",)),
    ("max_tokens", ("gen_ai.request.max_tokens", "llm.request.max_tokens")),
    ("frequency_penalty", ("gen_ai.request.frequency_penalty",)),
    ("presence_penalty", ("gen_ai.request.presence_penalty",)),
    ("seed", ("gen_ai.request.seed",)),
    ("stop", ("gen_ai.request.stop_sequences",)),
)


def snapshot_id_for(trace_id: str, span_id: str) -> str:
    return str(uuid.uuid5(SNAPSHOT_NAMESPACE, f"{trace_id}:{span_id}"))


def convention_of(attrs: dict[str, Any]) -> str | None:
    """Which convention marks ATTRS as a model call ("genai", "openinference", "openllmetry"), or None."""
    if str(attrs.get("gen_ai.operation.name") or "") in GENAI_OPERATIONS:
        return "genai"
    if str(attrs.get("openinference.span.kind") or "").upper() == "LLM":
        return "openinference"
    if str(attrs.get("llm.request.type") or "") in OPENLLMETRY_TYPES:
        return "openllmetry"
    return None


def innermost_model_calls(spans: Iterable[Span]) -> list[Span]:
    """The model-call spans of SPANS that wrap no other model-call span of SPANS."""
    spans = list(spans)
    by_id = {(s.trace_id, s.span_id): s for s in spans}
    calls = [s for s in spans if convention_of(s.attributes) is not None]
    wrapping: set[tuple[str, str]] = set()
    for s in calls:
        parent = by_id.get((s.trace_id, s.parent_span_id))
        seen = 0
        while parent is not None and seen < 1000:
            if convention_of(parent.attributes) is not None:
                wrapping.add((parent.trace_id, parent.span_id))
            parent = by_id.get((parent.trace_id, parent.parent_span_id))
            seen += 1
    return [s for s in calls if (s.trace_id, s.span_id) not in wrapping]


def calls_stored_before(
    spans: list[Span],
    *,
    stored: Callable[[list[str]], Collection[str]],
    has_stored_child: Callable[[Span], bool],
) -> set[tuple[str, str]]:
    """(trace id, span id) of the innermost model-call spans of SPANS whose call is already a
    stored snapshot from an earlier export, so it is not stored twice whatever the exporter
    batches together: a model-call ancestor, or the nearest ancestor missing from SPANS, is a
    stored snapshot (the LLM span came first; STORED answers which snapshot ids exist), or a
    stored snapshot's span is a child of it (the client span came first; HAS_STORED_CHILD looks
    for a stored snapshot whose parent is the span)."""
    by_id = {(s.trace_id, s.span_id): s for s in spans}
    calls = innermost_model_calls(spans)
    outside: list[tuple[str, tuple[str, str]]] = []
    for s in calls:
        node, seen = s, 0
        while node.parent_span_id and (node.trace_id, node.parent_span_id) in by_id and seen < 1000:
            node = by_id[(node.trace_id, node.parent_span_id)]
            seen += 1
            if convention_of(node.attributes) is not None:
                # A wrapping model-call span stored alone by an earlier export.
                outside.append((snapshot_id_for(s.trace_id, node.span_id), (s.trace_id, s.span_id)))
        if node.parent_span_id and (node.trace_id, node.parent_span_id) not in by_id:
            outside.append((snapshot_id_for(s.trace_id, node.parent_span_id), (s.trace_id, s.span_id)))
    found = set(stored([sid for sid, _ in outside])) if outside else set()
    out = {key for sid, key in outside if sid in found}
    out.update(
        (s.trace_id, s.span_id) for s in calls if (s.trace_id, s.span_id) not in out and has_stored_child(s)
    )
    return out


@dataclass
class _Content:
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    output: dict[str, Any] | None = None
    found: bool = False
    problems: list[str] = field(default_factory=list)
    # One per compaction part: {"id", "tokens_before", "encrypted"}, in message order.
    compactions: list[dict[str, Any]] = field(default_factory=list)


# --- values -----------------------------------------------------------------------------


def _json_value(v: Any, what: str, problems: list[str]) -> Any:
    """V, parsed when it is JSON text (attributes carry structures as JSON strings)."""
    if isinstance(v, str):
        try:
            return jsonbody.loads(v, what=what)
        except jsonbody.TooDeep as exc:
            problems.append(str(exc))
            return None
        except ValueError:
            problems.append(f"{what} is not complete JSON (truncated?)")
            return None
    return v


def _text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if v is None:
        return ""
    return json.dumps(v, ensure_ascii=False, sort_keys=True, default=str)


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int) and 0 <= v <= LIMITS.max_int:
        return v
    if isinstance(v, float) and v.is_integer() and 0 <= v <= LIMITS.max_int:
        return int(v)
    if isinstance(v, str) and v.isascii() and v.isdigit() and int(v) <= LIMITS.max_int:
        return int(v)
    return None


def _first(attrs: dict[str, Any], *names: str) -> Any:
    for n in names:
        v = attrs.get(n)
        if v is not None and v != "":
            return v
    return None


def _indexed(attrs: dict[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """{N: {rest: value}} of the attributes `PREFIX.N.rest`."""
    out: dict[int, dict[str, Any]] = {}
    plen = len(prefix) + 1
    for k, v in attrs.items():
        if not k.startswith(prefix + "."):
            continue
        idx, _, rest = k[plen:].partition(".")
        if idx.isdigit() and rest:
            out.setdefault(int(idx), {})[rest] = v
    return out


def _gaps(indexes: Iterable[int]) -> bool:
    ix = sorted(indexes)
    return bool(ix) and ix != list(range(ix[-1] + 1))


# --- OTel GenAI (structured messages) ---------------------------------------------------


def _genai_arguments(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v if v is not None else {}, ensure_ascii=False)


def _summary_text(v: Any) -> str | None:
    """The readable text of a compaction's summary: a string, or a list of text parts."""
    if isinstance(v, str):
        return v or None
    if isinstance(v, list):
        texts = [
            str(p.get("text") if p.get("text") is not None else p.get("content") or "")
            for p in v
            if isinstance(p, dict)
        ]
        return "\n".join(t for t in texts if t) or None
    return None


def _compaction_message(
    p: dict[str, Any], role: str, compactions: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """The summary message a compaction part stands for, marked for the `summary` block. Its
    text is the summary when the part carries one; an encrypted summary is kept as sent."""
    text = next(
        (t for k in ("content", "summary", "text") if (t := _summary_text(p.get(k))) is not None), None
    )
    encrypted = text is None
    if text is None:
        text = _text(p.get("encrypted_content"))
    msg: dict[str, Any] = {
        "role": role if role in ("system", "user", "assistant", "developer") else "user",
        "content": text,
        TAG_BLOCK: "summary",
        TAG_KIND: "summary",
    }
    if compactions is not None:
        compactions.append(
            {
                "id": str(p.get("id") or ""),
                "tokens_before": _int(p.get("tokens_before")),
                "encrypted": encrypted,
            }
        )
        msg[_COMPACTION_MARK] = len(compactions) - 1
    return msg


def _tool_use_call(p: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic `tool_use` content part ({id, name, input}) as a tool call."""
    return {
        "id": str(p.get("id") or ""),
        "type": "function",
        "function": {
            "name": str(p.get("name") or ""),
            "arguments": _genai_arguments(p.get("input", p.get("arguments"))),
        },
    }


def _tool_response(p: dict[str, Any], problems: list[str] | None) -> str:
    """A tool result part's content: `response` in the GenAI convention, `result` from
    pydantic-ai. A part with neither is noted, so the turn is marked incomplete."""
    for key in TOOL_RESULT_KEYS:
        if key in p:
            return _text(p[key])
    if problems is not None:
        problems.append("a tool result part has no readable content (no response or result)")
    return ""


def _genai_parts(m: dict[str, Any]) -> list[Any]:
    """The parts of GenAI message M; a message with `content` and no `parts` is one text part."""
    parts = m.get("parts")
    if parts is None and "content" in m:
        content = m.get("content")
        if isinstance(content, list) and content and all(isinstance(p, dict) for p in content):
            # Provider content blocks as the message's content (Anthropic's text / tool_use).
            parts = content
        else:
            parts = [{"type": "text", "content": content}]
    return parts if isinstance(parts, list) else []


@dataclass
class _Parts:
    """A GenAI message's parts by what each becomes."""

    summaries: list[dict[str, Any]] = field(default_factory=list)  # summary messages, first
    texts: list[str] = field(default_factory=list)
    others: list[dict[str, Any]] = field(default_factory=list)  # kept as content parts, as sent
    calls: list[dict[str, Any]] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)  # tool messages


def _sorted_parts(
    parts: list[Any], role: str, compactions: list[dict[str, Any]] | None, problems: list[str] | None
) -> _Parts:
    out = _Parts()
    for p in parts:
        if not isinstance(p, dict):
            continue
        ptype = p.get("type")
        if ptype == "text":
            out.texts.append(_text(p.get("content") if "content" in p else p.get("text")))
        elif ptype == "tool_call":
            out.calls.append(
                {
                    "id": str(p.get("id") or ""),
                    "type": "function",
                    "function": {
                        "name": str(p.get("name") or ""),
                        "arguments": _genai_arguments(p.get("arguments")),
                    },
                }
            )
        elif ptype == "tool_use":
            out.calls.append(_tool_use_call(p))
        elif ptype == "tool_call_response":
            out.results.append(
                {
                    "role": "tool",
                    "tool_call_id": str(p.get("id") or ""),
                    "content": _tool_response(p, problems),
                }
            )
        elif ptype == COMPACTION:
            out.summaries.append(_compaction_message(p, role, compactions))
        else:
            out.others.append(p)
    return out


def _genai_message(
    m: Any, compactions: list[dict[str, Any]] | None = None, problems: list[str] | None = None
) -> list[dict[str, Any]]:
    """One GenAI message ({role, parts}) as chat messages: tool responses become tool messages,
    a compaction part (or a bare compaction item) a summary message before the rest. A
    `tool_use` part is a tool call, kept once as the call and never as content."""
    if not isinstance(m, dict):
        return []
    if m.get("type") == COMPACTION and "parts" not in m:
        return [_compaction_message(m, str(m.get("role") or "user"), compactions)]
    role = str(m.get("role") or "user")
    parts = _sorted_parts(_genai_parts(m), role, compactions, problems)
    calls = parts.calls
    if isinstance(m.get("tool_calls"), list):
        # The OpenAI chat shape beside the parts (LiteLLM writes its messages so); a call that
        # is also a `tool_use` part is the same call.
        have = {c["id"] for c in calls}
        calls += [c for c in _event_calls(m["tool_calls"]) if not have or (c["id"] and c["id"] not in have)]
    if role == "tool" and parts.results:
        return parts.summaries + parts.results
    msg: dict[str, Any] = {
        "role": role if role in ("system", "user", "assistant", "tool", "developer") else "user"
    }
    if parts.others:
        msg["content"] = [{"type": "text", "text": t} for t in parts.texts] + parts.others
    else:
        msg["content"] = "\n".join(parts.texts) if parts.texts else None
    if calls:
        msg["tool_calls"] = calls
    if role == "tool" and (m.get("tool_call_id") or m.get("id")):
        msg["tool_call_id"] = str(m.get("tool_call_id") or m.get("id"))
    out = [msg] if (msg.get("content") is not None or calls) else []
    return parts.summaries + out + parts.results


def _genai_tool(t: Any) -> dict[str, Any] | None:
    if not isinstance(t, dict):
        return None
    if "function" in t:
        return t
    fn = {k: t[k] for k in ("name", "description", "parameters") if k in t}
    return {"type": str(t.get("type") or "function"), "function": fn}


def _genai_content(attrs: dict[str, Any], content: _Content) -> bool:
    problems = content.problems
    sys_raw = attrs.get("gen_ai.system_instructions")
    inp_raw = attrs.get("gen_ai.input.messages")
    out_raw = attrs.get("gen_ai.output.messages")
    tools_raw = attrs.get("gen_ai.tool.definitions")
    if sys_raw is None and inp_raw is None and out_raw is None:
        return False
    messages: list[dict[str, Any]] = []
    system = _json_value(sys_raw, "gen_ai.system_instructions", problems)
    if isinstance(system, list):
        text = "\n".join(
            _text(p.get("content")) for p in system if isinstance(p, dict) and p.get("type") == "text"
        )
        if text:
            messages.append({"role": "system", "content": text})
    elif isinstance(system, str) and system:
        messages.append({"role": "system", "content": system})
    inputs = _json_value(inp_raw, "gen_ai.input.messages", problems)
    for m in inputs if isinstance(inputs, list) else []:
        messages.extend(_genai_message(m, content.compactions, problems))
    content.messages = messages
    tools = _json_value(tools_raw, "gen_ai.tool.definitions", problems) if tools_raw is not None else None
    content.tools = [d for t in tools if (d := _genai_tool(t)) is not None] if isinstance(tools, list) else []
    outputs = _json_value(out_raw, "gen_ai.output.messages", problems) if out_raw is not None else None
    if isinstance(outputs, list) and outputs:
        first = outputs[0] if isinstance(outputs[0], dict) else {}
        reply = _genai_message(first, problems=problems)
        am = next((m for m in reply if m.get("role") == "assistant"), {})
        c = am.get("content")
        content.output = {
            "text": c if isinstance(c, str) else None,
            "tool_calls": list(am.get("tool_calls") or []),
            "finish_reason": str(first.get("finish_reason") or ""),
        }
    content.found = True
    return True


# --- OpenInference (flattened) ----------------------------------------------------------


def _oi_message(fields: dict[str, Any], problems: list[str], what: str) -> dict[str, Any]:
    role = str(fields.get("message.role") or "user")
    msg: dict[str, Any] = {
        "role": role if role in ("system", "user", "assistant", "tool", "developer") else "user"
    }
    contents = _indexed(fields, "message.contents")
    uses: list[dict[str, Any]] = []
    if "message.content" in fields:
        msg["content"] = _text(fields.get("message.content"))
    elif contents:
        if _gaps(contents):
            problems.append(f"{what} content parts have gaps")
        parts = []
        for _, part in sorted(contents.items()):
            if part.get("message_content.type") == "tool_use":
                uses.append(_tool_use_call({k.removeprefix("message_content."): v for k, v in part.items()}))
                continue
            if part.get("message_content.type", "text") == "text":
                parts.append({"type": "text", "text": _text(part.get("message_content.text"))})
            else:
                parts.append(
                    {
                        "type": str(part.get("message_content.type")),
                        **{k.removeprefix("message_content."): v for k, v in part.items()},
                    }
                )
        msg["content"] = parts
    else:
        msg["content"] = None
    calls = _indexed(fields, "message.tool_calls")
    if calls:
        if _gaps(calls):
            problems.append(f"{what} tool calls have gaps")
        msg["tool_calls"] = [
            {
                "id": str(c.get("tool_call.id") or ""),
                "type": "function",
                "function": {
                    "name": str(c.get("tool_call.function.name") or ""),
                    "arguments": _genai_arguments(c.get("tool_call.function.arguments")),
                },
            }
            for _, c in sorted(calls.items())
        ]
    if uses:
        # An Anthropic tool_use part is the call itself: kept once, as a tool call.
        have = {c["id"] for c in msg.get("tool_calls") or []}
        extra = [u for u in uses if not u["id"] or u["id"] not in have]
        if extra:
            msg["tool_calls"] = [*(msg.get("tool_calls") or []), *extra]
        if msg.get("content") == []:
            msg["content"] = None
    if fields.get("message.tool_call_id"):
        msg["tool_call_id"] = str(fields["message.tool_call_id"])
    if fields.get("message.name"):
        msg["name"] = str(fields["message.name"])
    return msg


def _oi_content(attrs: dict[str, Any], content: _Content) -> bool:
    inputs = _indexed(attrs, "llm.input_messages")
    outputs = _indexed(attrs, "llm.output_messages")
    if not inputs and not outputs:
        return False
    problems = content.problems
    if _gaps(inputs):
        problems.append("llm.input_messages has gaps in its indexes")
    content.messages = [
        _oi_message(f, problems, f"llm.input_messages.{i}") for i, f in sorted(inputs.items())
    ]
    tools = _indexed(attrs, "llm.tools")
    for _, t in sorted(tools.items()):
        schema = _json_value(t.get("tool.json_schema"), "llm.tools.N.tool.json_schema", problems)
        d = _genai_tool(schema)
        if d is not None:
            content.tools.append(d)
    if outputs:
        first = _oi_message(outputs[min(outputs)], problems, "llm.output_messages")
        c = first.get("content")
        if isinstance(c, list):
            c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
        content.output = {"text": c, "tool_calls": list(first.get("tool_calls") or []), "finish_reason": ""}
    content.found = True
    return True


# --- OpenLLMetry (flattened) ------------------------------------------------------------


def _ollm_message(fields: dict[str, Any]) -> dict[str, Any]:
    role = str(fields.get("role") or "user")
    msg: dict[str, Any] = {
        "role": role if role in ("system", "user", "assistant", "tool", "developer") else "user"
    }
    msg["content"] = _text(fields["content"]) if "content" in fields else None
    calls = _indexed(fields, "tool_calls")
    if calls:
        msg["tool_calls"] = [
            {
                "id": str(c.get("id") or ""),
                "type": "function",
                "function": {
                    "name": str(c.get("name") or ""),
                    "arguments": _genai_arguments(c.get("arguments")),
                },
            }
            for _, c in sorted(calls.items())
        ]
    elif fields.get("function_call.name"):
        # The legacy single function call (LiteLLM's `gen_ai.completion.N.function_call.*`).
        msg["tool_calls"] = [
            {
                "id": "",
                "type": "function",
                "function": {
                    "name": str(fields["function_call.name"]),
                    "arguments": _genai_arguments(fields.get("function_call.arguments")),
                },
            }
        ]
    if fields.get("tool_call_id"):
        msg["tool_call_id"] = str(fields["tool_call_id"])
    return msg


def _ollm_tools(attrs: dict[str, Any], problems: list[str]) -> list[dict[str, Any]]:
    """Tool definitions from `llm.request.functions.N.{name,description,parameters}`."""
    tools = []
    for _, f in sorted(_indexed(attrs, "llm.request.functions").items()):
        params = (
            _json_value(f.get("parameters"), "llm.request.functions.N.parameters", problems)
            if f.get("parameters") is not None
            else None
        )
        fn: dict[str, Any] = {"name": str(f.get("name") or "")}
        if f.get("description"):
            fn["description"] = str(f["description"])
        if params is not None:
            fn["parameters"] = params
        tools.append({"type": "function", "function": fn})
    return tools


def _ollm_content(attrs: dict[str, Any], content: _Content) -> bool:
    prompts = _indexed(attrs, "gen_ai.prompt")
    completions = _indexed(attrs, "gen_ai.completion")
    if not prompts and not completions:
        return False
    if _gaps(prompts):
        content.problems.append("gen_ai.prompt has gaps in its indexes")
    content.messages = [_ollm_message(f) for _, f in sorted(prompts.items())]
    content.tools = _ollm_tools(attrs, content.problems)
    if completions:
        first_fields = completions[min(completions)]
        first = _ollm_message(first_fields)
        content.output = {
            "text": first.get("content"),
            "tool_calls": list(first.get("tool_calls") or []),
            "finish_reason": str(first_fields.get("finish_reason") or ""),
        }
    content.found = True
    return True


# --- deprecated per-message events ------------------------------------------------------


def _event_content(events: Iterable[Event | LogRecord], content: _Content) -> bool:
    messages: list[dict[str, Any]] = []
    output: dict[str, Any] | None = None
    for e in events:
        name = e.name if isinstance(e, Event) else e.event_name
        body = e.body if isinstance(e, LogRecord) and isinstance(e.body, dict) else e.attributes
        if name in _DEPRECATED_EVENTS:
            role = _DEPRECATED_EVENTS[name]
            msg: dict[str, Any] = {"role": str(body.get("role") or role), "content": body.get("content")}
            if msg["content"] is not None and not isinstance(msg["content"], str | list):
                msg["content"] = _text(msg["content"])
            if body.get("tool_calls"):
                msg["tool_calls"] = _event_calls(body["tool_calls"])
            if body.get("id") and role == "tool":
                msg["tool_call_id"] = str(body["id"])
            messages.append(msg)
        elif name == "gen_ai.choice" and output is None:
            m: dict[str, Any] = body["message"] if isinstance(body.get("message"), dict) else {}
            c = m.get("content")
            output = {
                "text": c if isinstance(c, str) else None,
                "tool_calls": _event_calls(m.get("tool_calls") or body.get("tool_calls") or []),
                "finish_reason": str(body.get("finish_reason") or ""),
            }
    if not messages and output is None:
        return False
    content.messages = messages
    content.output = output
    content.found = True
    return True


def _event_calls(calls: Any) -> list[dict[str, Any]]:
    out = []
    for c in calls if isinstance(calls, list) else []:
        if not isinstance(c, dict):
            continue
        fn: dict[str, Any] = c["function"] if isinstance(c.get("function"), dict) else {}
        out.append(
            {
                "id": str(c.get("id") or ""),
                "type": "function",
                "function": {
                    "name": str(fn.get("name") or ""),
                    "arguments": _genai_arguments(fn.get("arguments")),
                },
            }
        )
    return out


# --- identity, usage, flags -------------------------------------------------------------


def _session_id(chain: list[dict[str, Any]], resource: dict[str, Any], trace_id: str) -> str:
    """Conversation id > session id > an OpenLLMetry association property > the trace id; each
    looked up on the span, then its ancestors, then the resource."""
    for attrs in (*chain, resource):
        v = _first(attrs, "gen_ai.conversation.id")
        if v is not None:
            return str(v)
    for attrs in (*chain, resource):
        v = _first(attrs, "session.id")
        if v is not None:
            return str(v)
    for attrs in (*chain, resource):
        for k, v in attrs.items():
            if (
                k.startswith("traceloop.association.properties.")
                and v not in (None, "")
                and (k.endswith(("session_id", "conversation_id", "thread_id", "chat_id")))
            ):
                return str(v)
    return trace_id


def _usage(attrs: dict[str, Any], convention: str) -> tuple[dict[str, int], dict[str, str]]:
    """(wire usage, extra usage tags) from ATTRS, whichever names the convention uses."""
    if convention == "openinference":
        prompt = _int(attrs.get("llm.token_count.prompt"))
        completion = _int(attrs.get("llm.token_count.completion"))
        total = _int(attrs.get("llm.token_count.total"))
        cache_read = _int(attrs.get("llm.token_count.prompt_details.cache_read"))
        cache_write = _int(attrs.get("llm.token_count.prompt_details.cache_write"))
        reasoning = _int(attrs.get("llm.token_count.completion_details.reasoning"))
    else:
        prompt = _int(_first(attrs, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"))
        completion = _int(_first(attrs, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"))
        total = _int(_first(attrs, "llm.usage.total_tokens", "gen_ai.usage.total_tokens"))
        cache_read = _int(
            _first(attrs, "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_read_input_tokens")
        )
        cache_write = _int(
            _first(
                attrs, "gen_ai.usage.cache_creation.input_tokens", "gen_ai.usage.cache_creation_input_tokens"
            )
        )
        reasoning = _int(
            _first(
                attrs,
                "gen_ai.usage.reasoning.output_tokens",
                "gen_ai.usage.reasoning_tokens",
                "llm.usage.reasoning_tokens",
            )
        )
        provider = str(_first(attrs, "gen_ai.provider.name", "gen_ai.system") or "").lower()
        if (
            prompt is not None
            and provider in ("anthropic", "aws.bedrock", "gcp.vertex_ai")
            and (
                "claude" in str(_first(attrs, "gen_ai.request.model", "gen_ai.response.model") or "").lower()
                or provider == "anthropic"
            )
        ):
            # Anthropic reports input_tokens without the cached part; the context held both.
            prompt += (cache_read or 0) + (cache_write or 0)
    usage: dict[str, int] = {}
    if prompt is not None:
        usage["prompt_tokens"] = prompt
    if completion is not None:
        usage["completion_tokens"] = completion
    if total is None and prompt is not None and completion is not None:
        total = prompt + completion
    if total is not None:
        usage["total_tokens"] = min(total, LIMITS.max_int)
    if cache_read is not None:
        usage["cached_tokens"] = cache_read
    extra: dict[str, str] = {}
    if cache_write is not None:
        # In the usage, where the prompt-cache lens prices the writes; the tag stays for filters.
        usage["cache_write_tokens"] = cache_write
        extra["ctxobs.usage.cache_write_tokens"] = str(cache_write)
    if reasoning is not None:
        extra["ctxobs.usage.reasoning_tokens"] = str(reasoning)
    return usage, extra


def _tool_result_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Tool results that cannot be tied to a call: an instrumentation dropped the id, or the
    assistant message that made the call."""
    problems = []
    calls: set[str] = set()
    for m in messages:
        for c in m.get("tool_calls") or []:
            if isinstance(c, dict) and c.get("id"):
                calls.add(str(c["id"]))
        if m.get("role") != "tool":
            continue
        if not m.get("tool_call_id"):
            problems.append("a tool result has no tool_call_id (the instrumentation did not record it)")
        elif m["tool_call_id"] not in calls:
            problems.append("a tool result answers a call that is not in the messages")
    return problems


def _redacted(messages: list[dict[str, Any]], output: dict[str, Any] | None) -> bool:
    # A walk without recursion: attribute values nest as deep as a body may (max_body_depth).
    stack: list[Any] = [messages, output.get("text") if output is not None else None]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if REDACTED in v:
                return True
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
    return False


def _invocation_model(attrs: dict[str, Any]) -> str | None:
    """The model named in the request's parameters (`llm.invocation_parameters` JSON): all a
    failed call carries when the instrumentation takes the model name from the response."""
    inv = attrs.get("llm.invocation_parameters")
    parsed = _json_value(inv, "llm.invocation_parameters", []) if isinstance(inv, str) else inv
    if isinstance(parsed, dict):
        model = parsed.get("model") or parsed.get("model_name")
        if isinstance(model, str) and model:
            return model
    return None


def _params(attrs: dict[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name, keys in _PARAMS:
        v = _first(attrs, *keys)
        if v is not None and not isinstance(v, bytes):
            params[name] = v
    inv = attrs.get("llm.invocation_parameters")
    if isinstance(inv, str):
        try:
            parsed = jsonbody.loads(inv, what="llm.invocation_parameters")
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            for k, v in parsed.items():
                if k not in ("messages", "tools", "model", "functions") and k not in params:
                    params[k] = v
    return params


def _named_blocks(
    spec: Any, messages: list[dict[str, Any]], problems: list[str]
) -> list[dict[str, Any]] | None:
    """Blocks from a `ctxobs.blocks` attribute: [{"key", "kind", "messages": N}, ...] takes the
    messages in order, N at a time. None (and a problem noted) when it does not fit."""
    spec = _json_value(spec, "ctxobs.blocks", problems)
    if not isinstance(spec, list):
        return None
    blocks = []
    at = 0
    for b in spec:
        n = _int(b.get("messages")) if isinstance(b, dict) else None
        key = b.get("key") if isinstance(b, dict) else None
        if n is None or not isinstance(key, str) or not key:
            problems.append("ctxobs.blocks: each entry needs a key and a message count")
            return None
        kind = b.get("kind") if b.get("kind") in BLOCK_KINDS else ("other" if key not in BLOCK_KINDS else key)
        blocks.append(
            {"key": key, "kind": kind, "messages": messages[at : at + n], "pinned": bool(b.get("pinned"))}
        )
        at += n
    if at != len(messages):
        problems.append(f"ctxobs.blocks covers {at} of {len(messages)} messages")
        return None
    return blocks


def _compression_events(
    blocks: list[dict[str, Any]], content: _Content, model: str
) -> list[dict[str, Any]]:
    """The compression event of each compaction, naming the block its summary landed in, with
    the summary's tokens (counted as the server counts blocks) and the tokens it replaced when
    the part said. The summary messages lose their marks here, in place."""
    counter = tok.get_counter(None, model)
    events: list[dict[str, Any]] = []
    for b in blocks:
        clean = []
        for m in b["messages"]:
            at = m.get(_COMPACTION_MARK)
            if at is None:
                clean.append(m)
                continue
            m = {k: v for k, v in m.items() if k not in (_COMPACTION_MARK, TAG_BLOCK, TAG_KIND)}
            clean.append(m)
            c = content.compactions[at]
            if c["encrypted"]:
                content.problems.append(
                    "a compaction summary is encrypted by the provider: its text is not readable"
                )
            events.append(
                {
                    "strategy": COMPRESSION_STRATEGY,
                    "block": b["key"],
                    "tokens_before": c["tokens_before"],
                    "tokens_after": tok.message_tokens(m, counter),
                    "items": [c["id"]] if c["id"] else [],
                    "ref": c["id"],
                    "source": "provider",
                    "opaque": bool(c["encrypted"]),
                }
            )
        b["messages"] = clean
    return events


def _compacted_events(events: Iterable[Event | LogRecord]) -> list[dict[str, Any]]:
    """A compression event, made by the provider, for each `gen_ai.conversation.compacted` event."""
    out: list[dict[str, Any]] = []
    for e in events:
        name = e.name if isinstance(e, Event) else e.event_name
        if name != COMPACTED_EVENT:
            continue
        a = e.attributes
        strategy = a.get("gen_ai.compaction.strategy")
        ref = a.get("gen_ai.compaction.id")
        ev: dict[str, Any] = {
            "strategy": str(strategy)[:NAME_CHARS] if isinstance(strategy, str) and strategy else COMPACTION,
            "source": "provider",
            "opaque": a.get("gen_ai.compaction.encrypted") is True,
        }
        for key in ("tokens_before", "tokens_after"):
            n = _int(a.get(f"gen_ai.compaction.{key}"))
            if n is not None and n >= 0:
                ev[key] = n
        if isinstance(ref, str) and ref:
            ev["ref"] = ref[: LIMITS.max_id_chars]
            ev["items"] = [ev["ref"]]
        out.append(ev)
    return out


def _iso(ns: int) -> str:
    ts = datetime.fromtimestamp(ns / 1e9 if ns > 0 else 0, UTC)
    return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# --- the mapping ------------------------------------------------------------------------


def _genai_attributes(span: Span, details: list[LogRecord]) -> dict[str, Any]:
    """The GenAI content attributes of SPAN's call, gathered from wherever they were sent."""
    # The GenAI content may sit on the span, its details event or a details log record; each
    # attribute is taken from the last of these that has it: the span's own attributes win over
    # its details event, which wins over a details log record.
    genai: dict[str, Any] = {}
    for source in (
        *(
            r.attributes | (r.body if isinstance(r.body, dict) else {})
            for r in details
            if r.event_name == DETAILS_EVENT
        ),
        *(e.attributes for e in span.events if e.name == DETAILS_EVENT),
        span.attributes,
    ):
        genai.update({k: v for k, v in source.items() if k in _GENAI_CONTENT and v is not None})
    return genai


def _span_content(span: Span, details: list[LogRecord]) -> _Content:
    """The messages, tools and output of SPAN's call from the first convention that carries
    them (the module's docstring gives the order), with the problems found in them."""
    attrs = span.attributes
    content = _Content()
    (
        _genai_content(_genai_attributes(span, details), content)
        or _oi_content(attrs, content)
        or _ollm_content(attrs, content)
        or _event_content([*span.events, *details], content)
    )
    # GenAI messages with OpenLLMetry's tool attributes beside them (LiteLLM sends so).
    if not content.tools:
        content.tools = _ollm_tools(attrs, content.problems)
    if content.output is not None and not content.output["tool_calls"]:
        completions = _indexed(attrs, "gen_ai.completion")
        if completions:
            reply = _ollm_message(completions[min(completions)])
            content.output["tool_calls"] = reply.get("tool_calls") or []
    content.problems.extend(_tool_result_problems(content.messages))
    if _redacted(content.messages, content.output):
        content.problems.append("content was redacted (__REDACTED__)")
    return content


def _model_name(attrs: dict[str, Any]) -> str:
    return str(
        _first(attrs, "gen_ai.request.model", "llm.model_name", "gen_ai.response.model", "llm.request.model")
        or _invocation_model(attrs)
        or "unknown"
    )


def _span_tags(span: Span, convention: str) -> dict[str, str]:
    """The tags naming where the snapshot came from: source, convention and the span's ids."""
    tags: dict[str, str] = {
        TAG_SOURCE: "otlp",
        TAG_CONVENTION: convention,
        TAG_TRACE: span.trace_id,
        TAG_SPAN: span.span_id,
    }
    if span.parent_span_id:
        tags[TAG_PARENT] = span.parent_span_id
    return tags


def _context_window(
    span: Span, model: str, model_windows: Mapping[str, int] | None, tags: dict[str, str]
) -> int:
    """The window the span names, else MODEL's (MODEL_WINDOWS first), else the default, which
    TAGS then mark as assumed."""
    key = "ctxobs.context.window_size"
    sent = _int(_first(span.attributes, key) or span.resource.get(key))
    window = sent or context_window_for(model, overrides=model_windows)
    if not window:
        window = DEFAULT_CONTEXT_WINDOW
        tags[TAG_WINDOW] = "assumed"
    return int(window)


def _with_tools_block(raw_blocks: list[dict[str, Any]], has_tools: bool) -> list[dict[str, Any]]:
    """RAW_BLOCKS as wire blocks, with the message-less block the tool definitions are counted on
    (when the call sent tools) after the leading system blocks."""
    blocks: list[dict[str, Any]] = []
    tools_at = -1
    if has_tools:
        tools_at = next((i for i, b in enumerate(raw_blocks) if b.get("kind") != "system"), len(raw_blocks))
    for i, b in enumerate(raw_blocks):
        if i == tools_at:
            blocks.append({"key": "tools", "kind": "tools", "messages": []})
        wb: dict[str, Any] = {"key": b["key"], "kind": b["kind"], "messages": b["messages"]}
        if b.get("pinned"):
            wb["pinned"] = True
        blocks.append(wb)
    if has_tools and tools_at == len(raw_blocks):
        blocks.append({"key": "tools", "kind": "tools", "messages": []})
    return blocks


def _span_blocks(
    span: Span, details: list[LogRecord], content: _Content, model: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The wire blocks of the call's messages (as a `ctxobs.blocks` attribute names them, else as
    the SDK partitions them) and its compression events."""
    messages = content.messages
    blocks_spec = span.attributes.get("ctxobs.blocks")
    raw_blocks = _named_blocks(blocks_spec, messages, content.problems) if blocks_spec is not None else None
    if raw_blocks is None:
        raw_blocks = default_partitioner(messages) if messages else []
    compression = _compression_events(raw_blocks, content, model) if content.compactions else []
    compression += _compacted_events([*span.events, *details])
    return _with_tools_block(raw_blocks, bool(content.tools)), compression


def _span_output(span: Span, content: _Content, usage: dict[str, int]) -> dict[str, Any]:
    """The wire output: the reply read, its finish reason, USAGE and the call's latency."""
    output = dict(content.output) if content.output is not None else {"text": None, "tool_calls": []}
    if not output.get("finish_reason"):
        reasons = span.attributes.get("gen_ai.response.finish_reasons")
        if isinstance(reasons, list) and reasons:
            output["finish_reason"] = str(reasons[0])
    output["usage"] = usage
    if span.end_ns > span.start_ns > 0:
        output["latency_ms"] = round((span.end_ns - span.start_ns) / 1e6, 3)
    return output


def _agent(span: Span, ancestors: list[Span]) -> str:
    """The agent named on the span, else on its nearest ancestor naming one, else the service."""
    agent = _first(span.attributes, "gen_ai.agent.name")
    if agent is None:
        agent = next(
            (a.attributes["gen_ai.agent.name"] for a in ancestors if a.attributes.get("gen_ai.agent.name")),
            None,
        )
    if agent is None:
        agent = span.resource.get("service.name") or ""
    return str(agent)[: LIMITS.max_id_chars]


def span_to_snapshot(
    span: Span,
    *,
    ancestors: list[Span] | None = None,
    details: list[LogRecord] | None = None,
    turn: int = 0,
    model_windows: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The wire snapshot of the model-call SPAN (turn TURN). ANCESTORS (innermost first) lend
    identity attributes (conversation, agent); DETAILS are log records joined on the span's ids;
    MODEL_WINDOWS (the project's) override the model registry's context windows."""
    attrs = span.attributes
    ancestors = ancestors or []
    details = details or []
    convention = convention_of(attrs) or "genai"
    content = _span_content(span, details)
    problems = content.problems
    model = _model_name(attrs)
    tags = _span_tags(span, convention)
    window = _context_window(span, model, model_windows, tags)
    blocks, compression = _span_blocks(span, details, content, model)
    usage, usage_tags = _usage(attrs, convention)
    tags.update(usage_tags)
    if not content.found:
        problems.append("the span carries no message content (content capture is off in the instrumentation)")
    if not blocks:
        # Nothing to partition: one empty block holding what the provider counted, so the
        # turn keeps its size on the timeline.
        blocks.append(
            {
                "key": "context",
                "kind": "other",
                "messages": [],
                "tokens": usage.get("prompt_tokens", 0),
                "estimated": True,
            }
        )
    if problems:
        tags[TAG_CONTENT] = "incomplete"
        tags[TAG_CONTENT_REASON] = "; ".join(dict.fromkeys(problems))[: LIMITS.max_text_chars]

    params = _params(attrs)
    if content.tools:
        params["tools"] = content.tools
    output = _span_output(span, content, usage)
    if span.status_code == 2:
        tags["error"] = (span.status_message or "error")[:200]
    chain = [attrs, *(a.attributes for a in ancestors)]
    snapshot: dict[str, Any] = {
        "snapshot_id": snapshot_id_for(span.trace_id, span.span_id),
        # Never cut: two long ids sharing a prefix would merge two conversations. An id over the
        # limit is refused by validation and reported in the export's partial_success.
        "session_id": _session_id(chain, span.resource, span.trace_id),
        "turn": turn,
        "agent": _agent(span, ancestors),
        "ts": _iso(span.start_ns),
        "model": {"name": model[: LIMITS.max_id_chars], "context_window": window},
        "params": params,
        "blocks": blocks,
        "output": output,
        "tags": tags,
    }
    if compression:
        snapshot["compression"] = compression
    return snapshot


def log_to_span(record: LogRecord) -> Span | None:
    """A `gen_ai.client.inference.operation.details` log record as a span-like value (its
    attributes describe the call as the span's would), or None for other records."""
    if record.event_name != DETAILS_EVENT or not record.trace_id or not record.span_id:
        return None
    attrs = dict(record.attributes)
    if isinstance(record.body, dict):
        attrs.update(record.body)
    attrs.setdefault("gen_ai.operation.name", "chat")
    return Span(
        trace_id=record.trace_id,
        span_id=record.span_id,
        parent_span_id="",
        name="",
        start_ns=record.time_ns,
        end_ns=record.time_ns,
        attributes=attrs,
        resource=record.resource,
    )


def spans_to_snapshots(
    spans: list[Span],
    logs: list[LogRecord] | None = None,
    *,
    model_windows: Mapping[str, int] | None = None,
) -> list[tuple[Span, dict[str, Any]]]:
    """Each innermost model-call span of SPANS with its snapshot (turn 0: numbered on storage),
    in start order. LOGS are joined to their span on trace and span id; MODEL_WINDOWS override
    the model registry."""
    by_id = {(s.trace_id, s.span_id): s for s in spans}
    joined: dict[tuple[str, str], list[LogRecord]] = {}
    for r in logs or []:
        joined.setdefault((r.trace_id, r.span_id), []).append(r)
    out = []
    for s in sorted(innermost_model_calls(spans), key=lambda s: (s.start_ns, s.span_id)):
        ancestors: list[Span] = []
        p = by_id.get((s.trace_id, s.parent_span_id))
        while p is not None and len(ancestors) < 1000:
            ancestors.append(p)
            p = by_id.get((p.trace_id, p.parent_span_id))
        details = joined.get((s.trace_id, s.span_id))
        snap = span_to_snapshot(s, ancestors=ancestors, details=details, model_windows=model_windows)
        out.append((s, snap))
    return out
