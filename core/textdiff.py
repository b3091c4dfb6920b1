"""The one word diff, ORM-free: a list of (op, text) segments for a template to render. The turn
page diffs block contents with `word_diff`; replay compares model outputs with `prose_diff`.

Ops: "equal", "insert", "delete", and "skip" (a long unchanged run shortened to its edges; the
text of a skip segment is a human note). The texts are never marked up here: the template
escapes every segment.

Lines are matched first and words only inside changed line runs, so a 500 kB block costs a
line diff, not a quadratic word diff.

The matching is difflib's algorithm as cydifflib implements it in C++: the same opcodes as the
standard library's SequenceMatcher (tested), about ten times faster on prose, where the
whitespace and short common words make difflib's longest-match search the turn page's largest
cost (a rewritten 450-word summary took ~100 ms).
"""

from __future__ import annotations

import json
import re
from typing import Any

from cydifflib import SequenceMatcher

Segment = tuple[str, str]

_WORDS = re.compile(r"\s+|\w+|[^\w\s]", re.UNICODE)
_SPACES = re.compile(r"(\s+)")
# Word-diff a replaced line run only when it is small; beyond this, show it as delete + insert.
MAX_WORD_TOKENS = 4000
CONTEXT_CHARS = 160


def messages_text(messages: list[dict[str, Any]]) -> str:
    """A block's messages as one readable text: role header, content, tool calls as JSON."""
    parts = []
    for m in messages or []:
        head = f"[{m.get('role', '?')}]"
        if m.get("name"):
            head += f" name={m['name']}"
        if m.get("tool_call_id"):
            head += f" tool_call_id={m['tool_call_id']}"
        body = m.get("content")
        if isinstance(body, list | dict):
            body = json.dumps(body, ensure_ascii=False, indent=1)
        lines = [head]
        if body:
            lines.append(str(body))
        if m.get("tool_calls"):
            lines.append("tool_calls: " + json.dumps(m["tool_calls"], ensure_ascii=False))
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _words(text: str) -> list[str]:
    return _WORDS.findall(text)


def _push(out: list[Segment], op: str, text: str) -> None:
    if not text:
        return
    if out and out[-1][0] == op:
        out[-1] = (op, out[-1][1] + text)
    else:
        out.append((op, text))


def _word_diff(a: str, b: str, out: list[Segment]) -> None:
    wa, wb = _words(a), _words(b)
    if len(wa) + len(wb) > MAX_WORD_TOKENS:
        _push(out, "delete", a)
        _push(out, "insert", b)
        return
    sm = SequenceMatcher(None, wa, wb, autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            _push(out, "equal", "".join(wa[i1:i2]))
        else:
            _push(out, "delete", "".join(wa[i1:i2]))
            _push(out, "insert", "".join(wb[j1:j2]))


def word_diff(a: str, b: str, *, context: int = CONTEXT_CHARS) -> list[Segment]:
    """Segments turning A into B; unchanged runs longer than 2*CONTEXT+ are shortened."""
    la, lb = a.splitlines(keepends=True), b.splitlines(keepends=True)
    sm = SequenceMatcher(None, la, lb, autojunk=False)
    out: list[Segment] = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            _push(out, "equal", "".join(la[i1:i2]))
        elif op == "replace":
            _word_diff("".join(la[i1:i2]), "".join(lb[j1:j2]), out)
        elif op == "delete":
            _push(out, "delete", "".join(la[i1:i2]))
        else:
            _push(out, "insert", "".join(lb[j1:j2]))
    return _shorten(out, context)


def _shorten(segments: list[Segment], context: int) -> list[Segment]:
    if context <= 0:
        return segments
    out: list[Segment] = []
    last = len(segments) - 1
    for i, (op, text) in enumerate(segments):
        keep_head = context if i > 0 else 0
        keep_tail = context if i < last else 0
        if op != "equal" or len(text) <= keep_head + keep_tail + 40:
            out.append((op, text))
            continue
        if keep_head:
            out.append(("equal", text[:keep_head]))
        out.append(("skip", f"⋯ {len(text) - keep_head - keep_tail:,} unchanged characters ⋯"))
        if keep_tail:
            out.append(("equal", text[-keep_tail:]))
    return out


def prose_diff(a: str | None, b: str | None) -> list[Segment]:
    """Segments turning A into B word by word, where spacing is not a change: each word carries
    the whitespace after it, words are compared without it, and an unchanged run shows B's text.
    Joining the non-insert segments gives A up to spacing; the non-delete ones give B exactly."""
    ua, ub = _units(a or ""), _units(b or "")
    sm = SequenceMatcher(None, [u.strip() for u in ua], [u.strip() for u in ub], autojunk=False)
    out: list[Segment] = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            _push(out, "equal", "".join(ub[j1:j2]))
        else:
            _push(out, "delete", "".join(ua[i1:i2]))
            _push(out, "insert", "".join(ub[j1:j2]))
    return out


def _units(text: str) -> list[str]:
    # Leading whitespace is a unit of its own; every later run joins the word before it.
    units: list[str] = []
    for t in _SPACES.split(text):
        if not t:
            continue
        if t.isspace() and units:
            units[-1] += t
        else:
            units.append(t)
    return units


def diff_stats(segments: list[Segment]) -> dict[str, int]:
    """Characters inserted and deleted."""
    ins = sum(len(t) for op, t in segments if op == "insert")
    dele = sum(len(t) for op, t in segments if op == "delete")
    return {"inserted": ins, "deleted": dele}
