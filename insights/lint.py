"""Contamination lint: the checks, ORM-free.

Each check reads one turn's context (and the session's turn before it) and says whether a known
fault sits in it, with the blocks involved and the text that shows it. The rules are exact and
documented, with an example each, in docs/insights.md; `insights.lint_analyzer` runs them after
ingest and stores what they find, and bench/lint.py measures their precision and recall.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from insights.lint_injection import asked_about_injection, injection_hint

ECHO_CHAMBER = "echo_chamber"
SUPERSEDED_CONSTRAINT = "superseded_constraint"
STALE_MEMORY = "stale_memory"
DUPLICATED_HISTORY = "duplicated_history"
LOST_IN_MIDDLE = "lost_in_middle"
PINNED_COMPRESSED = "pinned_compressed"
TOOL_OUTPUT_BLOAT = "tool_output_bloat"
PROMPT_INJECTION = "prompt_injection"

CHECKS: dict[str, str] = {
    ECHO_CHAMBER: "Echo chamber",
    SUPERSEDED_CONSTRAINT: "Superseded constraint",
    STALE_MEMORY: "Stale or duplicate memory",
    DUPLICATED_HISTORY: "Duplicated history",
    LOST_IN_MIDDLE: "Lost in the middle",
    PINNED_COMPRESSED: "Red line compressed",
    TOOL_OUTPUT_BLOAT: "Tool-output bloat",
    PROMPT_INJECTION: "Prompt-injection hint",
}
SEVERITY: dict[str, str] = {
    ECHO_CHAMBER: "warning",
    SUPERSEDED_CONSTRAINT: "warning",
    STALE_MEMORY: "info",
    DUPLICATED_HISTORY: "info",
    LOST_IN_MIDDLE: "info",
    PINNED_COMPRESSED: "critical",
    TOOL_OUTPUT_BLOAT: "warning",
    PROMPT_INJECTION: "critical",
}
EVIDENCE_CHARS = 300
# The block kinds whose messages the checks read (memory and summary for prompt_injection alone);
# of the others (system, tools) only the size, flags and place count.
MESSAGE_KINDS = ("constraints", "history", "tool_results", "retrieval", "user", "other", "memory", "summary")


@dataclass(frozen=True, slots=True)
class LintSettings:
    bloat_share: float = 0.30  # a tool result above this share of the context window
    middle_min_tokens: int = 8000  # lost-in-the-middle applies to contexts at least this long
    near_duplicate: float = 0.8  # word-set Jaccard similarity of two memories
    near_duplicate_min_words: int = 3
    user_repeat_min_chars: int = 20  # shorter user messages ("ok", "go on") may repeat
    tool_repeat_min_chars: int = 40  # tool results without a call id compared by text from here


DEFAULT_SETTINGS = LintSettings()


@dataclass(frozen=True, slots=True)
class LintBlock:
    key: str
    kind: str
    tokens: int
    messages: Sequence[Mapping[str, Any]] = ()
    pinned: bool = False
    compressed: bool = False
    n_messages: int | None = None  # when the block was read without its messages

    @property
    def message_count(self) -> int:
        return len(self.messages) if self.n_messages is None else self.n_messages


@dataclass(frozen=True, slots=True)
class LintTurn:
    """One turn's context as the checks read it."""

    turn: int
    context_window: int
    blocks: Sequence[LintBlock]
    compression: Sequence[Mapping[str, Any]] = ()
    recall: Sequence[Mapping[str, Any]] = ()
    output: Mapping[str, Any] | None = None

    @property
    def total_tokens(self) -> int:
        return sum(b.tokens for b in self.blocks)


@dataclass(frozen=True, slots=True)
class Issue:
    check: str
    block_keys: tuple[str, ...]
    evidence: str
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def severity(self) -> str:
        return SEVERITY[self.check]


# --- text helpers ----------------------------------------------------------------------------
def message_text(m: Mapping[str, Any]) -> str:
    """A message's text: a string content as is, the text parts of a list content joined."""
    c = m.get("content")
    if c is None:
        return ""
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        parts = [p.get("text", "") for p in c if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "\n".join(parts)
    return json.dumps(c, ensure_ascii=False)


def _clip(text: str, n: int = EVIDENCE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


_WORD = re.compile(r"[\w']+", re.UNICODE)


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _norm(text: str) -> str:
    return " ".join(_words(text))


def _messages(turn: LintTurn) -> Iterable[tuple[LintBlock, int, Mapping[str, Any]]]:
    for b in turn.blocks:
        for i, m in enumerate(b.messages):
            if isinstance(m, dict):
                yield b, i, m


# --- 1. echo chamber --------------------------------------------------------------------------
_ERROR_TEXT = re.compile(
    r"^\s*(?:(?:error|exception|fatal|failed|failure)\b|traceback \(most recent call last\))"
    r"|^\s*[A-Z]\w*(?:Error|Exception)\b\s*:",
    re.IGNORECASE,
)
_ERROR_STATES = {"error", "failed", "failure", "fail", "exception"}


def is_error_result(text: str) -> bool:
    """Whether a tool result reports a failure: a JSON object whose `status`/`state` is error,
    failed or failure, whose `error` is set, or whose `ok`/`success` is false; or a text that
    starts with Error, Exception, Fatal, Failed, Failure, a Traceback or `SomethingError:`."""
    s = text.strip()
    if s.startswith("{"):
        try:
            obj = json.loads(s)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            for k in ("status", "state"):
                v = obj.get(k)
                if isinstance(v, str) and v.strip().lower() in _ERROR_STATES:
                    return True
            if obj.get("error") not in (None, "", False, {}, []):
                return True
            return obj.get("ok") is False or obj.get("success") is False
    return bool(_ERROR_TEXT.search(s))


def _call_names(turn: LintTurn) -> dict[str, str]:
    out: dict[str, str] = {}
    for _b, _i, m in _messages(turn):
        for call in m.get("tool_calls") or ():
            if isinstance(call, Mapping) and call.get("id"):
                fn = call.get("function") or {}
                out[str(call["id"])] = str(fn.get("name") or call.get("name") or "")
    return out


def _output_calls(turn: LintTurn) -> set[str]:
    names: set[str] = set()
    for call in (turn.output or {}).get("tool_calls") or ():
        if isinstance(call, Mapping):
            fn = call.get("function") or {}
            name = fn.get("name") if isinstance(fn, Mapping) else None
            names.add(str(name or call.get("name") or ""))
    names.discard("")
    return names


def echo_chamber(turn: LintTurn, prev: LintTurn | None, s: LintSettings) -> Issue | None:
    """A tool call that failed, its error text still in the context, and this turn's output
    calling the same tool again: the retry is made with the error fed back in."""
    retried = _output_calls(turn)
    if not retried:
        return None
    names = _call_names(turn)
    hits: list[tuple[str, str, str]] = []
    for b, _i, m in _messages(turn):
        if m.get("role") != "tool":
            continue
        name = names.get(str(m.get("tool_call_id") or ""), "") or str(m.get("name") or "")
        text = message_text(m)
        if name in retried and is_error_result(text):
            hits.append((b.key, name, text))
    if not hits:
        return None
    key, name, text = hits[0]
    return Issue(
        ECHO_CHAMBER,
        tuple(dict.fromkeys(h[0] for h in hits)),
        f"{name} failed and is called again with its error in the context: {_clip(text, 200)}",
        {"tool": name, "errors": len(hits)},
    )


# --- 2. superseded constraint ---------------------------------------------------------------
_CONSTRAINT_LINE = re.compile(
    r"^\s*(?:[-*\u2022]\s*|\d+[.)]\s*)?([A-Za-z][\w \-/]{0,39}?)\s*[:=]\s*(\S.*?)\s*$"
)


def constraint_items(text: str) -> dict[str, str]:
    """`name: value` (or `name = value`) lines of a constraints message, by normalised name; a
    name given more than once in the message is a list, not a setting, and is left out."""
    seen: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = _CONSTRAINT_LINE.match(line)
        if m:
            seen.setdefault(_norm(m.group(1)), []).append(m.group(2))
    return {k: v[0] for k, v in seen.items() if len(v) == 1 and k}


def superseded_constraint(turn: LintTurn, prev: LintTurn | None, s: LintSettings) -> Issue | None:
    """Two messages of the constraints blocks (kind `constraints`) set the same constraint to
    different values: the later one is the newer version, the earlier one is superseded and still
    in the context for the model to follow."""
    first: dict[str, tuple[str, str]] = {}
    conflicts: list[dict[str, str]] = []
    for b, _i, m in _messages(turn):
        if b.kind != "constraints":
            continue
        for name, value in constraint_items(message_text(m)).items():
            if name not in first:
                first[name] = (b.key, value)
                continue
            old_key, old_value = first[name]
            if _norm(old_value) != _norm(value):
                conflicts.append({"name": name, "old": old_value, "new": value, "old_block": old_key,
                                  "new_block": b.key})
                first[name] = (b.key, value)
    if not conflicts:
        return None
    c = conflicts[0]
    keys = tuple(dict.fromkeys(k for c2 in conflicts for k in (c2["old_block"], c2["new_block"])))
    return Issue(
        SUPERSEDED_CONSTRAINT,
        keys,
        _clip(f"{c['name']}: {c['old']!r} (superseded) is still present beside {c['new']!r}"),
        {"conflicts": conflicts[:10]},
    )


# --- 3. stale or near-duplicate memories ----------------------------------------------------
def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def stale_memory(turn: LintTurn, prev: LintTurn | None, s: LintSettings) -> Issue | None:
    """Among the recall list's injected items: one flagged stale or conflicting (superseded by a
    newer memory), or two different memories whose texts are the same or near-duplicates (word
    sets at least `near_duplicate` similar, both of at least `near_duplicate_min_words` words)."""
    injected = [r for r in turn.recall if r.get("injected")]
    stale = [r for r in injected if r.get("stale") or r.get("conflicting")]
    dups: list[tuple[Mapping[str, Any], Mapping[str, Any], float]] = []
    texts = [(r, set(_words(str(r.get("preview") or "")))) for r in injected]
    for i, (a, wa) in enumerate(texts):
        for b, wb in texts[i + 1:]:
            if a.get("memory_id") == b.get("memory_id") or not wa or not wb:
                continue
            sim = _jaccard(wa, wb)
            same = _norm(str(a.get("preview"))) == _norm(str(b.get("preview")))
            if same or (sim >= s.near_duplicate and min(len(wa), len(wb)) >= s.near_duplicate_min_words):
                dups.append((a, b, sim))
    if not stale and not dups:
        return None
    keys = tuple(dict.fromkeys(str(r.get("block") or "") for r in [*stale, *(x for d in dups for x in d[:2])]
                               if r.get("block")))
    if stale:
        r = stale[0]
        why = "conflicting" if r.get("conflicting") else "stale"
        evidence = f"memory {r.get('memory_id')} injected while {why}: {r.get('preview') or ''}"
    else:
        a, b, sim = dups[0]
        evidence = (f"memories {a.get('memory_id')} and {b.get('memory_id')} injected as near-duplicates"
                    f" ({sim:.0%} alike): {a.get('preview') or ''}")
    return Issue(
        STALE_MEMORY,
        keys,
        _clip(evidence),
        {"stale": [str(r.get("memory_id")) for r in stale],
         "duplicates": [[str(a.get("memory_id")), str(b.get("memory_id"))] for a, b, _ in dups]},
    )


# --- 4. duplicated history ------------------------------------------------------------------
HISTORY_KINDS = ("history", "tool_results", "user", "other")


def _repeat_key(m: Mapping[str, Any], s: LintSettings) -> tuple[str, ...] | None:
    role = m.get("role")
    text = message_text(m)
    if role == "user":
        norm = " ".join(text.split())
        return ("user", norm) if len(norm) >= s.user_repeat_min_chars else None
    if role == "tool":
        cid = str(m.get("tool_call_id") or "")
        if cid:
            return ("tool", cid, text)
        return ("tool", "", text) if len(text.strip()) >= s.tool_repeat_min_chars else None
    return None


def _history_messages(turn: LintTurn) -> int:
    return sum(b.message_count for b in turn.blocks if b.kind == "history")


def duplicated_history(turn: LintTurn, prev: LintTurn | None, s: LintSettings) -> Issue | None:
    """The same user message (at least `user_repeat_min_chars` characters) or the same tool result
    (same call id and text; by text alone from `tool_repeat_min_chars` when it has no call id)
    twice in the history, tool-result, user or other blocks; or, from the session's previous turn
    (the turn just before), more history messages added than that turn could add: its user and
    tool-result messages, its answer and one result per tool call it made."""
    seen: dict[tuple[str, ...], str] = {}
    repeats: list[tuple[str, str, str]] = []
    for b, _i, m in _messages(turn):
        if b.kind not in HISTORY_KINDS:
            continue
        key = _repeat_key(m, s)
        if key is None:
            continue
        if key in seen:
            repeats.append((seen[key], b.key, message_text(m)))
        else:
            seen[key] = b.key
    if repeats:
        first, second, text = repeats[0]
        return Issue(
            DUPLICATED_HISTORY,
            tuple(dict.fromkeys(k for r in repeats for k in r[:2])),
            _clip(f"{len(repeats)} message(s) sent twice, e.g.: {text}"),
            {"repeats": len(repeats)},
        )
    if prev is None or prev.turn != turn.turn - 1:
        return None
    before, after = _history_messages(prev), _history_messages(turn)
    if not before:
        return None
    could = (sum(b.message_count for b in prev.blocks if b.kind in ("user", "tool_results"))
             + 1 + len((prev.output or {}).get("tool_calls") or ()) * 2)
    added = after - before
    if added > could and added >= 3:
        keys = tuple(b.key for b in turn.blocks if b.kind == "history")
        return Issue(
            DUPLICATED_HISTORY,
            keys,
            f"history grew by {added} messages since turn {prev.turn}; that turn could add at most {could}",
            {"added": added, "could_add": could},
        )
    return None


# --- 5. lost in the middle ------------------------------------------------------------------
def _relevant_blocks(turn: LintTurn) -> list[str]:
    """Blocks holding the top-ranked injected memory (rank 1, or the best score without ranks)."""
    injected = [r for r in turn.recall if r.get("injected") and r.get("block")]
    if not injected:
        return []
    top = [r for r in injected if r.get("rank") == 1]
    if not top and all(r.get("rank") is None for r in injected):
        scored = [r for r in injected if r.get("score") is not None]
        if scored:
            best = max(float(r["score"]) for r in scored)
            top = [r for r in scored if float(r["score"]) == best]
    return list(dict.fromkeys(str(r["block"]) for r in top))


def lost_in_the_middle(turn: LintTurn, prev: LintTurn | None, s: LintSettings) -> Issue | None:
    """In a context of at least `middle_min_tokens`, the block that received the top-ranked
    injected memory lies wholly inside the middle third of the context (by token position), where
    models attend least."""
    total = turn.total_tokens
    if total < s.middle_min_tokens:
        return None
    wanted = set(_relevant_blocks(turn))
    if not wanted:
        return None
    lo, hi = total / 3, 2 * total / 3
    at = 0
    buried: list[tuple[str, int, int]] = []
    for b in turn.blocks:
        start, end = at, at + b.tokens
        at = end
        if b.key in wanted and b.tokens > 0 and start >= lo and end <= hi:
            buried.append((b.key, start, end))
    if not buried:
        return None
    key, start, end = buried[0]
    return Issue(
        LOST_IN_MIDDLE,
        tuple(k for k, _, _ in buried),
        f"block '{key}' holds the top-ranked memory and sits at tokens {start:,}-{end:,} of {total:,},"
        " inside the middle third",
        {"start": start, "end": end, "total": total},
    )


# --- 6. pinned content compressed or dropped ------------------------------------------------
def pinned_compressed(turn: LintTurn, prev: LintTurn | None, s: LintSettings) -> Issue | None:
    """A red line touched by compression: a compression event on a block that is pinned in this
    turn or was in the previous one, a pinned block flagged compressed, or a block pinned in the
    previous turn missing from a turn that compressed."""
    pinned_now = {b.key for b in turn.blocks if b.pinned}
    pinned_before = {b.key for b in prev.blocks if b.pinned} if prev is not None else set()
    present = {b.key for b in turn.blocks}
    hits: list[tuple[str, str]] = []
    for e in turn.compression:
        block = str(e.get("block") or "")
        if block and block in pinned_now | pinned_before:
            hits.append((block, f"{e.get('strategy') or 'compression'} on pinned block '{block}'"))
    for b in turn.blocks:
        if b.pinned and b.compressed:
            hits.append((b.key, f"pinned block '{b.key}' is marked compressed"))
    if turn.compression:
        for key in sorted(pinned_before - present):
            hits.append((key, f"pinned block '{key}' dropped by a compression"))
    if not hits:
        return None
    return Issue(
        PINNED_COMPRESSED,
        tuple(dict.fromkeys(k for k, _ in hits)),
        "; ".join(dict.fromkeys(h for _, h in hits))[:EVIDENCE_CHARS],
        {"events": len(turn.compression)},
    )


# --- 7. tool-output bloat -------------------------------------------------------------------
def tool_output_bloat(turn: LintTurn, prev: LintTurn | None, s: LintSettings) -> Issue | None:
    """One tool result above `bloat_share` of the context window: a tool message (its block's
    tokens shared out by characters), or a whole `tool_results` block without tool messages."""
    window = max(1, turn.context_window)
    worst: tuple[float, str, int, str] | None = None
    for b in turn.blocks:
        texts = [(m, message_text(m)) for m in b.messages if isinstance(m, dict)]
        chars = sum(len(t) for _, t in texts) or 1
        tool_msgs = [(m, t) for m, t in texts if m.get("role") == "tool"]
        sizes: list[tuple[int, str]] = [(round(b.tokens * len(t) / chars), t) for _, t in tool_msgs]
        if not tool_msgs and b.kind == "tool_results":
            sizes = [(b.tokens, " ".join(t for _, t in texts))]
        for tokens, text in sizes:
            share = tokens / window
            if share > s.bloat_share and (worst is None or share > worst[0]):
                worst = (share, b.key, tokens, text)
    if worst is None:
        return None
    share, key, tokens, text = worst
    return Issue(
        TOOL_OUTPUT_BLOAT,
        (key,),
        f"a tool result in '{key}' takes about {tokens:,} tokens, {share:.0%} of the {window:,}-token window:"
        f" {_clip(text, 120)}",
        {"tokens": tokens, "share": round(share, 4), "limit": s.bloat_share},
    )


# --- 8. prompt-injection hint ---------------------------------------------------------------
INJECTION_KINDS = ("tool_results", "retrieval")
# Text the agent carries from turn to turn, which may hold what a tool or a page once said; it
# addresses the model by design, so only the attack signals count in it.
CARRIED_KINDS = ("memory", "summary")


def _last_user_text(turn: LintTurn) -> str:
    """The user's last message: the user blocks', else the history's."""
    last: dict[bool, str] = {}
    for b, _i, m in _messages(turn):
        if m.get("role") == "user" and b.kind in ("user", "history"):
            last[b.kind == "user"] = message_text(m)
    return last.get(True, last.get(False, ""))


def prompt_injection(turn: LintTurn, prev: LintTurn | None, s: LintSettings) -> Issue | None:
    """Instructions addressed to the model inside tool output or retrieved documents (tool
    messages anywhere, every message of `tool_results` and `retrieval` blocks) or carried in
    memory and summaries, told apart from quotation, discussion and documentation of attacks by
    `insights.lint_injection`. User and system text is never searched; the user's last message
    only says whether they asked about the topic."""
    topic: bool | None = None
    hits: list[tuple[str, str, str]] = []
    for b, _i, m in _messages(turn):
        carried = b.kind in CARRIED_KINDS and m.get("role") != "tool"
        if m.get("role") != "tool" and b.kind not in INJECTION_KINDS and not carried:
            continue
        text = message_text(m)
        if not text.strip():
            continue
        if topic is None:
            topic = asked_about_injection(_last_user_text(turn))
        hint = injection_hint(text, topic=topic, carried=carried)
        if hint is not None:
            hits.append((b.key, *hint))
    if not hits:
        return None
    key, name, snippet = hits[0]
    return Issue(
        PROMPT_INJECTION,
        tuple(dict.fromkeys(h[0] for h in hits)),
        _clip(f"{name} in '{key}': {snippet}"),
        {"patterns": sorted({h[1] for h in hits})},
    )


RULES = {
    ECHO_CHAMBER: echo_chamber,
    SUPERSEDED_CONSTRAINT: superseded_constraint,
    STALE_MEMORY: stale_memory,
    DUPLICATED_HISTORY: duplicated_history,
    LOST_IN_MIDDLE: lost_in_the_middle,
    PINNED_COMPRESSED: pinned_compressed,
    TOOL_OUTPUT_BLOAT: tool_output_bloat,
    PROMPT_INJECTION: prompt_injection,
}


def lint_turn(
    turn: LintTurn, prev: LintTurn | None = None, settings: LintSettings = DEFAULT_SETTINGS
) -> list[Issue]:
    """Every check's finding on TURN (PREV: the session's turn before it, when stored)."""
    out: list[Issue] = []
    for rule in RULES.values():
        issue = rule(turn, prev, settings)
        if issue is not None:
            out.append(issue)
    return out


def turn_from_wire(snapshot: Mapping[str, Any], tokens: Sequence[int] | None = None) -> LintTurn:
    """A snapshot in its wire form as the checks read it (TOKENS per block when the blocks carry
    none)."""
    blocks = []
    for i, b in enumerate(snapshot.get("blocks") or ()):
        n = b.get("tokens")
        if n is None:
            n = tokens[i] if tokens is not None else 0
        blocks.append(LintBlock(key=b["key"], kind=b.get("kind", "other"), tokens=int(n),
                                messages=b.get("messages") or (), pinned=bool(b.get("pinned")),
                                compressed=bool(b.get("compressed"))))
    model = snapshot.get("model") or {}
    return LintTurn(turn=int(snapshot.get("turn", 0)), context_window=int(model.get("context_window") or 0),
                    blocks=blocks, compression=snapshot.get("compression") or (),
                    recall=snapshot.get("recall") or (), output=snapshot.get("output"))
