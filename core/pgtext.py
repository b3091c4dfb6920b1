"""Text PostgreSQL cannot hold, stored reversibly.

PostgreSQL `text` and `jsonb` refuse U+0000 and unpaired UTF-16 surrogates (U+D800–U+DFFF),
yet both reach us in good faith: a tool result with a NUL byte, a JSON body with `"\\ud800"`, a
binary read decoded with `surrogateescape`. Content is stored as sent, escaped: a string that
needs it is stored as ESC + its text with ESC doubled, NUL as ESC "0" and a lone surrogate as
ESC "u" + 4 hex digits. The leading ESC is the flag, so every other string is stored (and
read) untouched, and a string that merely starts with ESC is escaped too, to stay unambiguous.
Reads undo it (core.models.EscapedJSONField and EscapedTextField), so the API and replays get the
original text back and the content hashes, taken before storage, are those of the original.

Identifiers (session ids, block keys, names) are never escaped: validation refuses them.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from ctxobs.wire import STORE_ESCAPE

ESC = STORE_ESCAPE  # SYMBOL FOR ESCAPE: rare in text, and readable if a stored value is ever seen raw
NUL_SHOWN = "\u2400"  # SYMBOL FOR NULL, how a page shows a U+0000 of the content
_NEEDS = re.compile("[\x00\ud800-\udfff]")
_ESCAPABLE = re.compile(f"[{ESC}\x00\ud800-\udfff]")
_ESCAPED = re.compile(f"{ESC}({ESC}|0|u[0-9a-f]{{4}})")


def _escape_char(m: re.Match[str]) -> str:
    c = m.group()
    if c == ESC:
        return ESC + ESC
    if c == "\x00":
        return ESC + "0"
    return f"{ESC}u{ord(c):04x}"


def _unescape_char(m: re.Match[str]) -> str:
    code = m.group(1)
    if code == ESC:
        return ESC
    if code == "0":
        return "\x00"
    return chr(int(code[1:], 16))


def escape_text(s: str) -> str:
    """S in a form PostgreSQL stores; `unescape_text` gives S back."""
    if not s.startswith(ESC) and _NEEDS.search(s) is None:
        return s
    return ESC + _ESCAPABLE.sub(_escape_char, s)


def unescape_text(s: str) -> str:
    if not s.startswith(ESC):
        return s
    return _ESCAPED.sub(_unescape_char, s[1:])


def escape_json(value: Any) -> Any:
    """VALUE with every string (object keys included) passed through `escape_text`."""
    if isinstance(value, str):
        return escape_text(value)
    if isinstance(value, dict):
        return {escape_text(k) if isinstance(k, str) else k: escape_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [escape_json(v) for v in value]
    return value


def unescape_json(value: Any) -> Any:
    if isinstance(value, str):
        return unescape_text(value)
    if isinstance(value, dict):
        return {unescape_text(k) if isinstance(k, str) else k: unescape_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unescape_json(v) for v in value]
    return value


_QUOTED_ESC = ('"' + ESC).encode()
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


def json_dumps(value: Any, *, checked: bool = False) -> str:
    """VALUE as JSON text PostgreSQL's jsonb accepts, escaped where it must be (see the module).

    CHECKED: the caller already escaped what holds U+0000 or starts with ESC (validation's
    `verbatim` blocks need nothing, `escape_message` does the others), so only unpaired
    surrogates (which orjson refuses) are left to find.
    """
    try:
        raw = orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        # orjson refuses integers beyond 64 bits (valid JSON, and jsonb holds them) and unpaired
        # surrogates; the second are escaped here, the first left to the standard encoder.
        return _ENCODER.encode(escape_json(value))
    # orjson writes U+0000 as \u0000 and ESC as itself: only then can a string need escaping
    # (a false alarm, e.g. a literal backslash-u0000 in the text, just costs the walk).
    if not checked and (b"\\u0000" in raw or _QUOTED_ESC in raw):
        return orjson.dumps(escape_json(value)).decode()
    return raw.decode()


def escape_message(message: dict[str, Any]) -> dict[str, Any]:
    """MESSAGE ready for `json_dumps(..., checked=True)`."""
    if len(message) == 2:
        content = message.get("content")
        if type(content) is str and type(message.get("role")) is str:
            if "\x00" in content or content.startswith(ESC):
                return {"role": message["role"], "content": escape_text(content)}
            return message
    if unescaped_text_in(message):
        return dict(escape_json(message))
    return message


def unescaped_text_in(value: Any) -> bool:
    """Whether some string of VALUE (keys included) holds U+0000 or starts with ESC."""
    if isinstance(value, str):
        return "\x00" in value or value.startswith(ESC)
    if isinstance(value, dict):
        return any(unescaped_text_in(k) or unescaped_text_in(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(unescaped_text_in(v) for v in value)
    return False


def shown(value: Any) -> Any:
    """VALUE for a page: U+0000 shown as NUL_SHOWN, an unpaired surrogate as U+FFFD (a page is
    UTF-8, which cannot carry it). Only for display: the API and replays get the original."""
    if isinstance(value, str):
        if _NEEDS.search(value) is None:
            return value
        return _NEEDS.sub(lambda m: NUL_SHOWN if m.group() == "\x00" else "\ufffd", value)
    if isinstance(value, dict):
        return {shown(k): shown(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [shown(v) for v in value]
    return value
