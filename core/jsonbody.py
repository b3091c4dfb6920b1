"""JSON from untrusted bytes, its nesting bounded.

The standard parser (and every walk of what it returns: escaping for storage, hashing, encoding)
recurses once per level of arrays and objects, so a few kilobytes of `[` end in a RecursionError
deep inside it. `loads` refuses a text nesting deeper than the bound with `TooDeep` (a ValueError,
like any other JSON that is not taken).

Bytes are parsed by msgspec first (about half the time of the standard parser on a batch of
snapshots, integers of any size kept exact). msgspec bounds its own recursion by the interpreter's
recursion limit (a RecursionError, taken as TooDeep), so the parsed value's depth is measured
afterwards, by a walk of its arrays and objects. Whatever msgspec does not take goes to the standard
parser, after the nesting is measured on the bytes, outside strings: the standard parser then
decides, so the values, what is accepted (NaN, Infinity, a UTF-8 byte-order mark, UTF-16, encoded
lone surrogates) and the errors are those of `json.loads`.

Why the walk, not the byte scan, on msgspec's path: telling the quotes that end strings from the
escaped ones takes a pass over the text's escapes, which cost 30-40 ms on a batch of 100 snapshots
whose messages hold newlines and quotes (8 MB), where msgspec parsed it in 15 ms and the walk takes
3 (bench/json_depth.py).
"""

from __future__ import annotations

import itertools
import json
import operator
import re
import sys
from typing import Any

import msgspec

from ctxobs.wire import LIMITS

_DECODER = msgspec.json.Decoder()

# The escapes that can hide or fake a quote: `\"` and `\\` (which may stand before a real
# quote). Taken left to right, a backslash run pairs up as JSON reads it; the other escapes
# (`\n`, `\u005b`...) cannot touch a quote, and their backslash is dropped with the text.
_ESCAPE = re.compile(rb'\\[\\"]')
# Every byte but a quote and the four brackets, deleted by bytes.translate.
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')
# An opening bracket counts 2 and a closing one 0, so that the running sum minus the number of
# brackets seen is the depth: all of it done by C loops over bytes.
_STEP = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


class TooDeep(ValueError):
    def __init__(self, limit: int, what: str = "body") -> None:
        self.limit = limit
        super().__init__(f"{what} nests arrays and objects more than {limit} levels deep "
                         f"(the limit max_body_depth={limit})")


def nesting_depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in the JSON text RAW; brackets inside strings do
    not count. RAW need not be valid JSON (the parser judges that afterwards)."""
    if raw.find(b"\\") != -1:  # one byte: a memchr, where a two-byte search is a slow scan
        # Dropped, so that every quote left opens or closes a string.
        raw = _ESCAPE.sub(b"", raw)
    # Outside strings: the even pieces between quotes.
    outside = b"".join(raw.translate(None, _NOT_STRUCTURE).split(b'"')[::2])
    if not outside:
        return 0
    running = itertools.accumulate(outside.translate(_STEP))
    deepest: int = max(map(operator.sub, running, itertools.count(1)))
    return max(0, deepest)


def check_depth(raw: bytes | str, *, max_depth: int = LIMITS.max_body_depth, what: str = "body") -> None:
    """Raise TooDeep when RAW nests deeper than MAX_DEPTH."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    # A text shorter than the limit cannot nest deeper (most bodies of the pages' API calls).
    if len(data) <= max_depth:
        return
    if nesting_depth(data) > max_depth:
        raise TooDeep(max_depth, what)


# msgspec recurses in C once per level, up to the interpreter's recursion limit: about 0.5 KB of C
# stack a level, so at the default limit (1,000) a thread needs 0.5 MB, where threads get 2-8 MB.
# An interpreter whose limit was raised past this parses only after the byte scan.
MSGSPEC_RECURSION_SAFE = 3000


def value_depth(value: Any, stop_after: int) -> int:
    """The nesting depth of arrays and objects in the parsed VALUE (a scalar is 0), measured
    without recursion; a result above STOP_AFTER is returned as soon as it is found."""
    if type(value) is not dict and type(value) is not list:
        return 0
    deepest = 1
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        container, depth = pop()
        inner = depth + 1
        for item in container.values() if type(container) is dict else container:
            kind = type(item)
            if kind is dict or kind is list:
                if inner > deepest:
                    deepest = inner
                    if deepest > stop_after:
                        return deepest
                push((item, inner))
    return deepest


def loads(raw: bytes | str, *, max_depth: int = LIMITS.max_body_depth, what: str = "body") -> Any:
    """json.loads(RAW), refusing nesting beyond MAX_DEPTH with TooDeep."""
    if isinstance(raw, bytes):
        scanned = sys.getrecursionlimit() > MSGSPEC_RECURSION_SAFE
        if scanned:
            check_depth(raw, max_depth=max_depth, what=what)
        try:
            value = _DECODER.decode(raw)
        except RecursionError:
            raise TooDeep(max_depth, what) from None
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass  # the standard parser decides, and words the error
        else:
            if not scanned and value_depth(value, max_depth) > max_depth:
                raise TooDeep(max_depth, what)
            return value
        if not scanned:
            check_depth(raw, max_depth=max_depth, what=what)
    else:
        check_depth(raw, max_depth=max_depth, what=what)
    try:
        return json.loads(raw)
    except RecursionError:
        # Only on a thread with little stack left: the bound is far below the parser's.
        raise TooDeep(max_depth, what) from None
