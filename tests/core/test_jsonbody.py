"""Request bodies are parsed by msgspec with the standard parser as the judge of everything msgspec
does not take: the same values, the same accepted inputs and the same errors as `json.loads`."""

from __future__ import annotations

import json
import random
import sys

import pytest

from core import jsonbody

SAME_AS_JSON = [
    b'{"snapshots": [{"turn": 3, "tokens": 12, "t": 0.25}]}',
    # Integers beyond 64 bits stay exact (a float would lose them without a word).
    b"[-9223372036854775809, 18446744073709551616, 12345678901234567890123]",
    b"[-0, -0.0, 1e5, 1E-7, 1e308, 4.9e-324, 1e-400, 2.2250738585072011e-308]",
    b'{"a": {"a": 1}, "a": 2}',
    b'["\\u0000", "\\ud83d\\ude00", "\x7f", "caf\xc3\xa9"]',
    b" [\t1\r\n] ",
    # Taken by json only: NaN and Infinity, a lone surrogate escaped or encoded, a byte-order mark,
    # UTF-16; and a number too large (1e400) becomes infinity.
    b"[NaN, Infinity, -Infinity, 1e400]",
    b'["\\ud800"]',
    b'["\xed\xa0\x80"]',
    b"\xef\xbb\xbf[1]",
    '["é"]'.encode("utf-16"),
]

REFUSED_AS_JSON = [
    b'["a\x00b"]', b'["a\nb"]', b"[01]", b"[1.]", b"[.5]", b"[+1]", b"[1] x", b"[1,]", b'{"a":1,}',
    b"['a']", b"[tru]", b'["\\x"]', b"", b"  ", b"[1\x0b]",
    b'["\xff"]', b'["\xc0\x80"]', b'["\xf4\x90\x80\x80"]', b"[" + b"9" * 5000 + b"]",
]


@pytest.mark.parametrize("raw", SAME_AS_JSON)
def test_values_are_those_of_the_standard_parser(raw: bytes) -> None:
    assert repr(jsonbody.loads(raw)) == repr(json.loads(raw))


@pytest.mark.parametrize("raw", REFUSED_AS_JSON)
def test_what_json_refuses_is_refused_with_its_error(raw: bytes) -> None:
    with pytest.raises(ValueError) as expected:
        json.loads(raw)
    with pytest.raises(ValueError) as got:
        jsonbody.loads(raw)
    assert type(got.value) is type(expected.value) and str(got.value) == str(expected.value)


def test_floats_round_as_the_standard_parser_rounds_them() -> None:
    rng = random.Random(5)
    texts = []
    for _ in range(20_000):
        scaled = rng.random() * 10 ** rng.randint(-320, 308)
        x = rng.choice([scaled, rng.uniform(-1, 1), rng.getrandbits(64) / 7])
        texts.append(repr(x) if rng.random() < 0.5 else f"{x:.{rng.randint(1, 25)}g}")
    raw = ("[" + ",".join(texts) + "]").encode()
    assert repr(jsonbody.loads(raw)) == repr(json.loads(raw))


def test_text_bodies_are_parsed_too() -> None:
    assert jsonbody.loads('{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}


# --- the nesting bound, on msgspec's path (the parsed value walked) and on the standard parser's
# (the bytes scanned first) ---------------------------------------------------------------------------

DEPTHS = [
    (b"1", 0), (b'"[[["', 0), (b"[]", 1), (b'{"a": 1}', 1), (b'{"a": "[[[[{{{{", "b": [[1]]}', 3),
    (b'{"a": "\\"[[[", "b": []}', 2), (b'["\\\\", [[]]]', 3), (b'["a\\\\\\"[[", [[]]]', 3),
    (b'[{"a": [{}]}, [[[[]]]]]', 5), (b"[" * 700 + b"]" * 700, 700),
]


@pytest.mark.parametrize(("raw", "depth"), DEPTHS)
def test_the_walk_of_the_parsed_value_measures_what_the_byte_scan_measures(raw: bytes, depth: int) -> None:
    assert jsonbody.nesting_depth(raw) == depth
    assert jsonbody.value_depth(json.loads(raw), 10_000) == depth


def _nested(levels: int, nan: bool = False) -> bytes:
    inner = b"NaN" if nan else b"1"
    return b'{"a": ' * (levels - 1) + b"[" + inner + b"]" + b"}" * (levels - 1)


@pytest.mark.parametrize("path", ["msgspec", "standard parser"])
def test_the_bound_is_exact_on_either_path(path: str) -> None:
    """NaN is refused by msgspec, so those bodies take the standard parser's path."""
    nan = path == "standard parser"
    assert jsonbody.value_depth(jsonbody.loads(_nested(512, nan)), 10_000) == 512
    with pytest.raises(jsonbody.TooDeep, match="max_body_depth=512"):
        jsonbody.loads(_nested(513, nan))
    with pytest.raises(jsonbody.TooDeep, match="max_body_depth=8"):
        jsonbody.loads(_nested(9, nan), max_depth=8, what="field")


@pytest.mark.parametrize("raw", [b"[" * 100_000, b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000 + b"1"])
def test_nesting_past_the_recursion_limit_is_too_deep_not_a_crash(raw: bytes) -> None:
    with pytest.raises(jsonbody.TooDeep):
        jsonbody.loads(raw)


def test_an_interpreter_with_a_raised_recursion_limit_scans_the_bytes_before_msgspec(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """msgspec recurses in C up to the interpreter's limit: past the safe limit the bytes are
    scanned first, so msgspec never meets a deep text; the values are the same."""
    scanned: list[bytes] = []
    real = jsonbody.check_depth
    monkeypatch.setattr(jsonbody, "check_depth", lambda raw, **kw: (scanned.append(raw), real(raw, **kw)))
    monkeypatch.setattr(sys, "getrecursionlimit", lambda: 100_000)
    with pytest.raises(jsonbody.TooDeep):
        jsonbody.loads(b"[" * 100_000)
    assert jsonbody.loads(b'{"a": [12345678901234567890123]}') == {"a": [12345678901234567890123]}
    assert len(scanned) == 2
    monkeypatch.undo()
    assert jsonbody.loads(b'{"a": [1]}') == {"a": [1]}
    assert len(scanned) == 2  # the usual path walks the value instead
