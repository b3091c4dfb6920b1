"""Compression operations on a saved context's blocks (ORM-free): what a strategy does to every
item of an evaluation set. replay.ablation applies them among its own operations:

    {"op": "drop_tool_output", "older_than": 2}                   # optional "key"
    {"op": "summarize", "before_last_turns": 3, "ratio": 0.2}      # or "key"; "budget"; "prompt"; "summary"
    {"op": "trim_json", "key": "tool_results", "fields": ["id", "title"], "max_items": 5}
    {"op": "keep_last_turns", "n": 3}                              # optional "key"
    {"op": "top_k", "key": "retrieval", "k": 2}
    {"op": "pin_to_prefix", "key": "memory"}

A turn starts at a user message; "the last N turns" are counted over the whole context, user
block included. No operation leaves a tool call without its results or a result without its
call: messages of one call and its results are kept, summarised or removed together. An
operation with nothing to act on raises NotApplicable, so that a strategy can skip the item.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any, TypedDict, cast

from ctxobs import tokens as tok
from ingest.types import Message, StoredBlock
from replay.errors import NotApplicable, VariantError
from replay.types import (
    CompressionOp,
    DropToolOutputOp,
    KeepLastTurnsOp,
    PinToPrefixOp,
    SummarizeOp,
    TopKOp,
    TrimJsonOp,
    VariantBlock,
)

ContextBlock = StoredBlock | VariantBlock

OPS = ("drop_tool_output", "summarize", "trim_json", "keep_last_turns", "top_k", "pin_to_prefix")
TOOL_ROLES = ("tool", "function")
PREFIX_KINDS = ("system", "tools")
HISTORY_KIND = "history"
DROPPED_PREFIX = "[tool output dropped: "
PREVIEW_CHARS = 60
SUMMARY_HEADER = "Summary of the earlier conversation:\n"
# A smaller budget cannot hold the four sections of the default prompt.
MIN_SUMMARY_BUDGET = 16
BUDGET_PLACEHOLDER = "{budget}"
DEFAULT_SUMMARY_PROMPT = (
    "Summarise the conversation below for an assistant that will continue it without seeing it. "
    "Use at most {budget} tokens, in four sections:\n"
    "Goal: what the user is trying to achieve.\n"
    "Confirmed facts: facts, values, ids, file names and error codes established so far, "
    "written exactly as in the conversation.\n"
    "Open items: questions and tasks not yet resolved.\n"
    "Decisions: what was decided or ruled out, and every constraint the user set.\n"
    "Add nothing that is not in the conversation."
)

# Document headers of a retrieval block's single message, strongest first: numbered ("[1]",
# "1.", "Doc 1:"), separator lines ("---"), bullets. Without any, paragraphs are documents.
_NUMBERED = re.compile(
    r"^[ \t]*(?:\[\d+\]|\d+[.)][ \t]|(?:doc(?:ument)?|source|passage|result)[ \t]*#?\d+[ \t]*[:.)\]-])",
    re.IGNORECASE | re.MULTILINE,
)
_SEPARATOR = re.compile(r"^[ \t]*(?:-{3,}|\*{3,}|={3,})[ \t]*$", re.MULTILINE)
_BULLET = re.compile(r"^[ \t]*[-*•][ \t]", re.MULTILINE)
_BLANK = re.compile(r"\n[ \t]*\n\s*")


@dataclass(frozen=True)
class SummarizeInput:
    """What a summarize operation sends to the summarising model: the transcript of the messages
    it replaces, their count and tokens, the summary's budget, the full prompt, and the sha256
    of the canonical messages (the same messages give the same hash)."""

    text: str
    messages_count: int
    tokens: int
    budget_tokens: int
    prompt: str
    content_hash: str


class StrategyEffect(TypedDict):
    """What a strategy did to one context: prompt tokens before and after (their ratio), what
    it removed or rewrote per block, and the blocks it moved."""

    tokens_before: int
    tokens_after: int
    ratio: float
    removed: list[str]
    moved: list[str]


# --- validation ------------------------------------------------------------------------------
def _whole(op: dict[str, Any], name: str, minimum: int, why: str) -> int:
    value = op.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise VariantError(f"{op['op']} needs {name!r}: {why}, an integer >= {minimum}")
    return value


def _key(op: dict[str, Any], *, required: bool) -> str | None:
    key = op.get("key")
    if key is None and not required:
        return None
    if not isinstance(key, str) or not key:
        raise VariantError(f"{op['op']} needs 'key': the block to act on")
    return key


def validate(op: dict[str, Any]) -> CompressionOp:
    """OP (whose "op" is one of OPS) as a clean dict, or VariantError saying what is wrong."""
    kind = op["op"]
    if kind == "drop_tool_output":
        older_than = _whole(op, "older_than", 0, "the turns whose tool outputs stay")
        drop: DropToolOutputOp = {"op": "drop_tool_output", "older_than": older_than}
        if (key := _key(op, required=False)) is not None:
            drop["key"] = key
        return drop
    if kind == "summarize":
        return _validate_summarize(op)
    if kind == "trim_json":
        return _validate_trim_json(op)
    if kind == "keep_last_turns":
        keep: KeepLastTurnsOp = {"op": "keep_last_turns", "n": _whole(op, "n", 0, "the turns kept")}
        if (key := _key(op, required=False)) is not None:
            keep["key"] = key
        return keep
    if kind == "top_k":
        key = cast(str, _key(op, required=True))
        return {"op": "top_k", "key": key, "k": _whole(op, "k", 0, "the documents kept")}
    if kind == "pin_to_prefix":
        return {"op": "pin_to_prefix", "key": cast(str, _key(op, required=True))}
    raise VariantError(f"an operation is an object with 'op' one of {', '.join(OPS)}")


def _validate_summarize(op: dict[str, Any]) -> SummarizeOp:
    out: SummarizeOp = {"op": "summarize"}
    if ("key" in op) == ("before_last_turns" in op):
        raise VariantError("summarize needs either 'key' (a block) or 'before_last_turns' (the history)")
    if "key" in op:
        out["key"] = cast(str, _key(op, required=True))
    else:
        out["before_last_turns"] = _whole(op, "before_last_turns", 0, "the turns kept verbatim")
    if ("budget" in op) == ("ratio" in op):
        raise VariantError("summarize needs either 'budget' (tokens) or 'ratio' (a share of the tokens)")
    if "budget" in op:
        out["budget"] = _whole(op, "budget", MIN_SUMMARY_BUDGET, "the summary's tokens")
    else:
        ratio = op.get("ratio")
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio <= 1:
            raise VariantError("summarize needs 'ratio': the summary's share of the tokens, in (0, 1]")
        out["ratio"] = float(ratio)
    if "prompt" in op:
        if not isinstance(op["prompt"], str) or not op["prompt"].strip():
            raise VariantError("summarize's 'prompt' must be a text: the summarising instruction")
        out["prompt"] = op["prompt"]
    if "summary" in op:
        if not isinstance(op["summary"], str):
            raise VariantError("summarize's 'summary' must be a text")
        out["summary"] = op["summary"]
    return out


def _validate_trim_json(op: dict[str, Any]) -> TrimJsonOp:
    out: TrimJsonOp = {"op": "trim_json", "key": cast(str, _key(op, required=True))}
    if "fields" not in op and "max_items" not in op:
        raise VariantError("trim_json needs 'fields' (fields kept), 'max_items' (list items kept) or both")
    if "fields" in op:
        fields = op["fields"]
        if not isinstance(fields, list) or not fields or not all(isinstance(f, str) and f for f in fields):
            raise VariantError("trim_json's 'fields' must be a non-empty list of field names")
        out["fields"] = list(dict.fromkeys(fields))
    if "max_items" in op:
        out["max_items"] = _whole(op, "max_items", 1, "the items kept of each list")
    return out


# --- shared pieces ---------------------------------------------------------------------------
def _find(blocks: Sequence[ContextBlock], key: str) -> int:
    for i, b in enumerate(blocks):
        if b.get("key") == key:
            return i
    raise NotApplicable(f"no block with key {key[:128]!r} in this context")


def _flat(blocks: Sequence[ContextBlock]) -> list[tuple[int, int, Message]]:
    """Every message of BLOCKS as (block index, message index, message), in prompt order."""
    return [(bi, mi, m) for bi, b in enumerate(blocks) for mi, m in enumerate(b.get("messages") or [])]


def _turn_start(flat: Sequence[tuple[int, int, Message]], n: int) -> int:
    """The flat index where the last N turns start: the Nth user message from the end; the end
    for N = 0; 0 when the context has no more than N turns."""
    if n == 0:
        return len(flat)
    users = [i for i, (_, _, m) in enumerate(flat) if m.get("role") == "user"]
    return users[-n] if len(users) >= n else 0


def _tool_groups(messages: Sequence[Message]) -> list[int | None]:
    """For each message, the index of the assistant message whose tool call it is or answers
    (None outside any call)."""
    owner: dict[str, int] = {}
    groups: list[int | None] = [None] * len(messages)
    for i, m in enumerate(messages):
        calls = m.get("tool_calls")
        if m.get("role") == "assistant" and isinstance(calls, list) and calls:
            groups[i] = i
            for c in calls:
                if isinstance(c, dict) and isinstance(c.get("id"), str):
                    owner[c["id"]] = i
        elif m.get("role") in TOOL_ROLES:
            ref = m.get("tool_call_id")
            if isinstance(ref, str) and ref in owner:
                groups[i] = owner[ref]
    return groups


def _whole_calls(selected: set[int], messages: Sequence[Message]) -> set[int]:
    """SELECTED without the messages of any tool call that is only partly selected: a call and
    its results stay together."""
    groups = _tool_groups(messages)
    members: dict[int, set[int]] = {}
    for i, g in enumerate(groups):
        if g is not None:
            members.setdefault(g, set()).add(i)
    partial = {g for g, ms in members.items() if ms & selected and not ms <= selected}
    return {i for i in selected if groups[i] not in partial}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return "" if content is None else json.dumps(content, ensure_ascii=False)


def _counter() -> tok.Counter:
    # The count block_tokens makes for a block without a stored count.
    return tok.get_counter("cl100k_base")


def _changed(block: VariantBlock, messages: list[Message]) -> None:
    block["messages"] = messages
    block["tokens"] = None
    block["modified"] = True


def _remove_positions(blocks: list[VariantBlock], positions: set[tuple[int, int]]) -> None:
    for bi in sorted({bi for bi, _ in positions}):
        msgs = blocks[bi].get("messages") or []
        _changed(blocks[bi], [m for mi, m in enumerate(msgs) if (bi, mi) not in positions])


# --- drop_tool_output ------------------------------------------------------------------------
def dropped_tool_output(message: Message) -> str:
    """The one line a dropped tool output leaves: its start, its size, and the id its original
    can be fetched back by."""
    text = _text(message.get("content"))
    line = " ".join(text.split())
    preview = line[:PREVIEW_CHARS].rstrip() + ("…" if len(line) > PREVIEW_CHARS else "")
    ref = message.get("tool_call_id") or message.get("name")
    where = f" ref={ref}" if ref else ""
    return f"{DROPPED_PREFIX}{preview} ({_counter().count_text(text)} tokens){where}]"


def _is_dropped(message: Message) -> bool:
    content = message.get("content")
    return isinstance(content, str) and content.startswith(DROPPED_PREFIX)


def _drop_tool_output(blocks: list[VariantBlock], op: DropToolOutputOp) -> None:
    only = _find(blocks, op["key"]) if "key" in op else None
    flat = _flat(blocks)
    start = _turn_start(flat, op["older_than"])
    rewritten: dict[int, list[Message]] = {}
    for bi, mi, m in flat[:start]:
        if (only is not None and bi != only) or m.get("role") not in TOOL_ROLES or _is_dropped(m):
            continue
        msgs = rewritten.setdefault(bi, list(blocks[bi].get("messages") or []))
        msgs[mi] = {**m, "content": dropped_tool_output(m)}
    if not rewritten:
        where = f" in block {op['key'][:128]!r}" if "key" in op else ""
        raise NotApplicable(f"no tool output older than {_last_turns(op['older_than'])}{where}")
    for bi, msgs in rewritten.items():
        _changed(blocks[bi], msgs)


# --- summarize -------------------------------------------------------------------------------
def _summary_positions(blocks: Sequence[ContextBlock], op: SummarizeOp) -> list[tuple[int, int]]:
    flat = _flat(blocks)
    if "key" in op:
        bi = _find(blocks, op["key"])
        chosen = {i for i, (b, _, _) in enumerate(flat) if b == bi}
        if not chosen:
            raise NotApplicable(f"block {op['key'][:128]!r} has no messages to summarise")
        what = f"block {op['key'][:128]!r}"
    else:
        n = op["before_last_turns"]
        start = _turn_start(flat, n)
        chosen = {i for i, (b, _, _) in enumerate(flat[:start]) if blocks[b].get("kind") == HISTORY_KIND}
        if not chosen:
            raise NotApplicable(f"no history before {_last_turns(n)} in this context")
        what = f"the history before {_last_turns(n)}"
    kept = _whole_calls(chosen, [m for _, _, m in flat])
    if not kept:
        raise NotApplicable(f"every message of {what} belongs to a tool call answered outside it")
    return [(flat[i][0], flat[i][1]) for i in sorted(kept)]


def summarize_input(blocks: Sequence[ContextBlock], operation: Mapping[str, Any]) -> SummarizeInput:
    """What the summarize OPERATION (validated here) replaces in BLOCKS and the prompt that asks
    a model for its summary; VariantError when it is invalid, NotApplicable when there is
    nothing to summarise."""
    from replay import ablation  # ablation imports this module

    op = validate(dict(operation))
    if op["op"] != "summarize":
        raise VariantError("summarize_input takes a summarize operation")
    positions = _summary_positions(blocks, op)
    messages = [(blocks[bi].get("messages") or [])[mi] for bi, mi in positions]
    text = ablation.render_transcript(messages).removesuffix("\nAssistant:")
    tokens = tok.messages_tokens(messages, _counter())
    budget = op["budget"] if "budget" in op else max(MIN_SUMMARY_BUDGET, round(op["ratio"] * tokens))
    instruction = op.get("prompt") or DEFAULT_SUMMARY_PROMPT
    return SummarizeInput(
        text=text,
        messages_count=len(messages),
        tokens=tokens,
        budget_tokens=budget,
        prompt=f"{instruction.replace(BUDGET_PLACEHOLDER, str(budget))}\n\nThe conversation:\n{text}",
        content_hash=ablation.request_hash(messages),
    )


def summary_message(summary: str) -> Message:
    """The message a computed summary takes the place of the summarised messages as."""
    return {"role": "system", "content": SUMMARY_HEADER + summary}


def _summarize(blocks: list[VariantBlock], op: SummarizeOp) -> None:
    positions = _summary_positions(blocks, op)
    if "summary" not in op:
        raise VariantError("the summary has not been computed")
    # POSITIONS are in prompt order: the first one is where the summary goes.
    first_bi, first_mi = positions[0]
    _remove_positions(blocks, set(positions))
    msgs = list(blocks[first_bi].get("messages") or [])
    msgs.insert(first_mi, summary_message(op["summary"]))
    _changed(blocks[first_bi], msgs)


# --- trim_json -------------------------------------------------------------------------------
def _parse_json(content: Any) -> tuple[Any, bool] | None:
    """(value, fenced) when CONTENT is a JSON object or array, bare or in one ```json fence."""
    if not isinstance(content, str):
        return None
    s = content.strip()
    fenced = s.startswith("```")
    if fenced:
        line_end = s.find("\n")
        if line_end < 0 or not s.endswith("```") or s[3:line_end].strip().lower() not in ("", "json"):
            return None
        s = s[line_end + 1 : -3].strip()
    if not s or s[0] not in "[{":
        return None
    try:
        value = json.loads(s)
    except ValueError:
        return None
    return (value, fenced) if isinstance(value, dict | list) else None


def _keep_fields(value: Any, fields: Sequence[str]) -> Any:
    """VALUE with only FIELDS in its top-level objects (the value itself, or the items of a
    top-level list) and, one level down, in the objects under a kept field. An object with none
    of FIELDS is left whole: a field list meant for another shape does not empty it."""
    wanted = set(fields)

    def pick(obj: Any, nested: bool) -> Any:
        if not isinstance(obj, dict) or not wanted & obj.keys():
            return obj
        return {k: (below(v) if nested else v) for k, v in obj.items() if k in wanted}

    def below(v: Any) -> Any:
        if isinstance(v, list):
            return [pick(x, False) for x in v]
        return pick(v, False)

    if isinstance(value, list):
        return [pick(x, True) for x in value]
    return pick(value, True)


def _cut_lists(value: Any, max_items: int) -> Any:
    if isinstance(value, list):
        items = [_cut_lists(v, max_items) for v in value[:max_items]]
        if len(value) > max_items:
            items.append(f"… {len(value) - max_items} more of {len(value)}")
        return items
    if isinstance(value, dict):
        return {k: _cut_lists(v, max_items) for k, v in value.items()}
    return value


def trim_json_text(content: Any, *, fields: Sequence[str] | None, max_items: int | None) -> str | None:
    """CONTENT's JSON with only FIELDS kept (see _keep_fields) and every list cut to MAX_ITEMS
    items and a note of how many more there were, written compactly (in its fence, if it had
    one); None when CONTENT is not JSON."""
    parsed = _parse_json(content)
    if parsed is None:
        return None
    value, fenced = parsed
    if fields:
        value = _keep_fields(value, fields)
    if max_items is not None:
        value = _cut_lists(value, max_items)
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return f"```json\n{text}\n```" if fenced else text


def _trim_json(blocks: list[VariantBlock], op: TrimJsonOp) -> None:
    bi = _find(blocks, op["key"])
    msgs = list(blocks[bi].get("messages") or [])
    found = False
    for mi, m in enumerate(msgs):
        text = trim_json_text(m.get("content"), fields=op.get("fields"), max_items=op.get("max_items"))
        if text is None:
            continue
        found = True
        if text != m.get("content"):
            msgs[mi] = {**m, "content": text}
    if not found:
        raise NotApplicable(f"no message of block {op['key'][:128]!r} is JSON")
    if msgs != (blocks[bi].get("messages") or []):
        _changed(blocks[bi], msgs)


# --- keep_last_turns -------------------------------------------------------------------------
def _keep_last_turns(blocks: list[VariantBlock], op: KeepLastTurnsOp) -> None:
    if "key" in op:
        targets = {_find(blocks, op["key"])}
        what = f"block {op['key'][:128]!r}"
    else:
        targets = {i for i, b in enumerate(blocks) if b.get("kind") == HISTORY_KIND}
        what = "the history"
        if not targets:
            raise NotApplicable("no history block in this context")
    flat = _flat(blocks)
    start = _turn_start(flat, op["n"])
    chosen = {i for i, (bi, _, _) in enumerate(flat[:start]) if bi in targets}
    dropped = _whole_calls(chosen, [m for _, _, m in flat])
    if not dropped:
        raise NotApplicable(f"nothing in {what} before {_last_turns(op['n'])}")
    _remove_positions(blocks, {(flat[i][0], flat[i][1]) for i in dropped})


# --- top_k -----------------------------------------------------------------------------------
def documents(text: str) -> list[tuple[int, int]]:
    """The (start, end) of each document in one message's TEXT: from each numbered header
    ("[1]", "1.", "Doc 1:") when there are two or more (text before the first is a preamble,
    not a document), else the pieces between separator lines ("---"), else from each bullet
    (two or more), else the paragraphs."""
    headers = [m.start() for m in _NUMBERED.finditer(text)]
    if len(headers) < 2:
        separators = [(m.start(), m.end()) for m in _SEPARATOR.finditer(text)]
        if separators:
            return _between(text, separators)
        headers = [m.start() for m in _BULLET.finditer(text)]
        if len(headers) < 2:
            return _between(text, [(m.start(), m.end()) for m in _BLANK.finditer(text)])
    return list(zip(headers, [*headers[1:], len(text)], strict=True))


def _between(text: str, separators: list[tuple[int, int]]) -> list[tuple[int, int]]:
    bounds = [0, *(x for start, end in separators for x in (start, end)), len(text)]
    pieces = [(bounds[i], bounds[i + 1]) for i in range(0, len(bounds), 2)]
    return [(start, end) for start, end in pieces if text[start:end].strip()]


def _top_k_text(text: str, k: int) -> str | None:
    docs = documents(text)
    if len(docs) <= k:
        return None
    return text[: docs[k - 1][1] if k else docs[0][0]].rstrip()


def _top_k(blocks: list[VariantBlock], op: TopKOp) -> None:
    bi = _find(blocks, op["key"])
    msgs = list(blocks[bi].get("messages") or [])
    k = op["k"]
    where = f"block {op['key'][:128]!r}"
    if len(msgs) == 1:
        content = msgs[0].get("content")
        cut = _top_k_text(content, k) if isinstance(content, str) else None
        if cut is None:
            raise NotApplicable(f"{where} has no more than {k} documents")
        _changed(blocks[bi], [{**msgs[0], "content": cut}])
        return
    # Several messages: each is a document, but for assistant tool calls, which lose the calls
    # whose results go (and go themselves when nothing else is left), and results of calls
    # made in another block, which stay so that no call there loses its answer.
    calls = {i for i, m in enumerate(msgs) if m.get("role") == "assistant" and m.get("tool_calls")}
    flat = _flat(blocks)
    groups = _tool_groups([m for _, _, m in flat])
    answering_outside = {
        mi
        for i, (b, mi, _) in enumerate(flat)
        if b == bi and (g := groups[i]) is not None and flat[g][0] != bi
    }
    docs = [i for i in range(len(msgs)) if i not in calls and i not in answering_outside]
    if len(docs) <= k:
        raise NotApplicable(f"{where} has no more than {k} documents")
    dropped = set(docs[k:])
    gone_ids = {msgs[i].get("tool_call_id") for i in dropped} - {None}
    out: list[Message] = []
    for i, m in enumerate(msgs):
        if i in dropped:
            continue
        if i not in calls:
            out.append(m)
            continue
        kept = [c for c in m["tool_calls"] if not (isinstance(c, dict) and c.get("id") in gone_ids)]
        if kept:
            out.append({**m, "tool_calls": kept})
        elif m.get("content"):
            out.append({f: v for f, v in m.items() if f != "tool_calls"})
    _changed(blocks[bi], out)


# --- pin_to_prefix ---------------------------------------------------------------------------
def _pin_to_prefix(blocks: list[VariantBlock], op: PinToPrefixOp) -> None:
    i = _find(blocks, op["key"])
    prefix = 0
    while prefix < len(blocks) and blocks[prefix].get("kind") in PREFIX_KINDS:
        prefix += 1
    if i <= prefix:
        raise NotApplicable(f"block {op['key'][:128]!r} already follows the system prompt and tools")
    blocks.insert(prefix, blocks.pop(i))


def apply(blocks: list[VariantBlock], op: CompressionOp) -> None:
    """Apply the validated compression operation OP to BLOCKS in place. The blocks' message
    lists and messages are never changed in place (they may be the saved ones): a changed block
    gets new ones, `tokens` None and `modified` True."""
    if op["op"] == "drop_tool_output":
        _drop_tool_output(blocks, op)
    elif op["op"] == "summarize":
        _summarize(blocks, op)
    elif op["op"] == "trim_json":
        _trim_json(blocks, op)
    elif op["op"] == "keep_last_turns":
        _keep_last_turns(blocks, op)
    elif op["op"] == "top_k":
        _top_k(blocks, op)
    else:
        _pin_to_prefix(blocks, op)


def describe(op: CompressionOp) -> str:
    """A short label for one compression operation."""
    key = op.get("key")
    if op["op"] == "drop_tool_output":
        where = f" from {key}" if key else ""
        return f"tool outputs older than {_last_turns(op['older_than'])} dropped{where}"
    if op["op"] == "summarize":
        what = key if key else f"history before {_last_turns(op['before_last_turns'])}"
        size = f"{op['budget']} tokens" if "budget" in op else f"{op['ratio']:.0%} of its tokens"
        return f"{what} summarised to {size}"
    if op["op"] == "trim_json":
        parts = []
        if op.get("fields"):
            parts.append("fields " + "/".join(op["fields"]))
        if "max_items" in op:
            parts.append(f"lists to {op['max_items']} items")
        return f"{key} JSON trimmed ({', '.join(parts)})"
    if op["op"] == "keep_last_turns":
        return f"{key or 'history'} cut to {_last_turns(op['n'])}"
    if op["op"] == "top_k":
        return f"top {op['k']} documents of {key}"
    return f"{key} pinned after the system prompt and tools"


def _last_turns(n: int) -> str:
    return "the last turn" if n == 1 else f"the last {n} turns"


# --- a strategy's effect ---------------------------------------------------------------------
def strategy_effect(before: Sequence[ContextBlock], after: Sequence[ContextBlock]) -> StrategyEffect:
    """Prompt tokens of the context BEFORE and AFTER a strategy, their ratio, a line per block
    it removed or rewrote ("history: 14 messages summarised into 1 (3,120 → 410 tokens)",
    "memory removed (120 tokens)"), and the keys of the blocks it moved."""
    from replay import ablation  # ablation imports this module

    first_before = _first_by_key(before)
    first_after = _first_by_key(after)
    removed: list[str] = []
    for b in before:
        key = b.get("key")
        if key not in first_after:
            removed.append(f"{key} removed ({ablation.block_tokens(b):,} tokens)")
            continue
        if first_before[key] is not b:
            continue
        line = _block_change(b, first_after[key], ablation.canonical_json, ablation.block_tokens)
        if line:
            removed.append(f"{key}: {line}")
    for b in after:
        if b.get("key") not in first_before:
            removed.append(f"{b.get('key')} added ({ablation.block_tokens(b):,} tokens)")
    order_before = [k for k in first_before if k in first_after]
    order_after = [k for k in first_after if k in first_before]
    matcher = SequenceMatcher(None, order_before, order_after, autojunk=False)
    in_place = {k for m in matcher.get_matching_blocks() for k in order_after[m.b : m.b + m.size]}
    tokens_before = ablation.context_tokens(before)
    tokens_after = ablation.context_tokens(after)
    return {
        "tokens_before": tokens_before,
        "tokens_after": tokens_after,
        "ratio": tokens_after / tokens_before if tokens_before else 1.0,
        "removed": removed,
        "moved": [str(k) for k in order_after if k not in in_place],
    }


def _first_by_key(blocks: Sequence[ContextBlock]) -> dict[Any, ContextBlock]:
    """Each key's first block, in the order of the blocks."""
    out: dict[Any, ContextBlock] = {}
    for b in blocks:
        out.setdefault(b.get("key"), b)
    return out


def _block_change(
    before: ContextBlock,
    after: ContextBlock,
    canonical: Callable[[Any], str],
    block_tokens: Callable[[ContextBlock], int],
) -> str:
    old = [canonical(m) for m in before.get("messages") or []]
    new = [canonical(m) for m in after.get("messages") or []]
    if old == new:
        return ""
    remaining = list(old)
    added: list[Message] = []
    for m, c in zip(after.get("messages") or [], new, strict=True):
        if c in remaining:
            remaining.remove(c)
        else:
            added.append(m)
    summaries = sum(1 for m in added if str(m.get("content") or "").startswith(SUMMARY_HEADER))
    dropped = sum(1 for m in added if m.get("role") in TOOL_ROLES and _is_dropped(m))
    # Other new messages stand for one original each (a trimmed JSON, a cut text); the
    # originals left over were summarised when a summary came in, else removed.
    rewritten = len(added) - summaries - dropped
    left = len(remaining) - dropped - rewritten
    parts = []
    if summaries:
        parts.append(f"{left} {_plural(left, 'message')} summarised into {summaries}")
    elif left:
        parts.append(f"{left} of {len(old)} {_plural(len(old), 'message')} removed")
    if dropped:
        parts.append(f"{dropped} tool {_plural(dropped, 'output')} dropped")
    if rewritten:
        parts.append(f"{rewritten} {_plural(rewritten, 'message')} rewritten")
    return f"{', '.join(parts)} ({block_tokens(before):,} → {block_tokens(after):,} tokens)"


def _plural(n: int, word: str) -> str:
    return word if n == 1 else word + "s"
