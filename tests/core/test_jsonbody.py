"""Request bodies are parsed by msgspec with the standard parser as the judge of everything msgspec
does not take: the same values, the same accepted inputs and the same errors as `json.loads`."""

from __future__ import annotations

import json
import random

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
