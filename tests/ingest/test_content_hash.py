"""Content addresses do not depend on the memos that make repeated hashing cheap."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from ctxobs import hashing
from ctxobs.hashing import HASH_CHARS, block_hashes, canonical_json, message_hash


def _fresh(message: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(message).encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]


@pytest.mark.parametrize(
    "message",
    [
        pytest.param({"role": "system", "content": "Ünïcode \"quoted\" \\ text"}, id="pair"),
        pytest.param({"content": "same text", "role": "user"}, id="pair-other-key-order"),
        pytest.param({"role": "user", "content": "\x00\x01\x1f\n\r\t\b\f\x7f \u2028\u2029 / </script>"},
                     id="pair-control-characters"),
        pytest.param({"role": "assistant", "content": "\U0001f600 non-BMP, and \ud800 a lone surrogate"},
                     id="pair-astral-and-lone-surrogate"),
        pytest.param({"role": "a \"role\"", "content": ""}, id="pair-escaped-role-empty-content"),
        pytest.param({"role": "user", "name": "ann"}, id="two-keys-no-content"),
        pytest.param({"role": "user", "content": None}, id="null-content"),
        pytest.param({"role": "tool", "tool_call_id": "c1", "content": "42"}, id="tool"),
        pytest.param({"role": "user", "content": [{"type": "text", "text": "hi"}]}, id="parts"),
        pytest.param({"tool_call_id": "c\"1\u2028", "role": "tool", "content": "\ud800 \x00 é"},
                     id="tool-escaped-fields"),
        pytest.param({"role": "user", "name": None, "content": None, "tool_call_id": "x"},
                     id="four-keys-nulls"),
        pytest.param({"role": 1, "content": "text", "name": "n"}, id="simple-keys-number-role"),
        pytest.param({"role": "user", "content": "t", "name": ["a"]}, id="simple-keys-list-name"),
    ],
)
def test_message_hash_is_the_sha256_of_canonical_json_on_every_call(message: dict[str, Any]) -> None:
    assert message_hash(message) == _fresh(message)
    assert message_hash(dict(message)) == _fresh(message)


def test_messages_with_the_same_text_and_another_role_hash_apart() -> None:
    user, assistant = {"role": "user", "content": "x"}, {"role": "assistant", "content": "x"}
    assert message_hash(user) != message_hash(assistant)


def test_block_hash_is_the_sha256_of_its_message_hashes_on_every_call() -> None:
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    expected = [_fresh(m) for m in messages]
    block = hashlib.sha256("".join(expected).encode("ascii")).hexdigest()[:HASH_CHARS]
    assert block_hashes(messages) == (block, expected)
    assert block_hashes([dict(m) for m in messages]) == (block, expected)
    assert block_hashes(messages[:1])[0] != block


def test_the_message_memo_is_bounded_by_the_size_of_its_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hashing, "_PAIR_MEMO_MAX_CHARS", 100)
    texts = [f"{i:03d}" * 20 for i in range(50)]  # 60 characters each
    for t in texts:
        assert message_hash({"role": "user", "content": t}) == _fresh({"role": "user", "content": t})
    assert len(hashing._pair_memo) <= 2
    assert hashing._pair_memo_chars <= 160


def test_an_absent_field_and_a_null_one_hash_apart() -> None:
    absent, null = {"role": "user", "name": None}, {"role": "user", "content": None}
    assert message_hash(absent) == _fresh(absent)
    assert message_hash(null) == _fresh(null)


def test_every_text_of_the_usual_message_hashes_as_its_canonical_json() -> None:
    """The usual message ({"role", "content"}, both text) is written out as its canonical JSON by
    hand: the same bytes as the encoder's for any text."""
    import random

    rng = random.Random(5)
    alphabet = [chr(c) for c in range(0x30)] + list("\\\"/aZ é€")
    alphabet += ["\u2028", "\ud83d", "\U0001f600", "\ufeff"]
    for _ in range(2_000):
        content = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        role = rng.choice(["user", "system", "a\"b", "\n"])
        message: dict[str, Any] = {"role": role, "content": content}
        if rng.random() < 0.5:
            message = {"content": content, "role": role}
        if rng.random() < 0.3:  # a tool's result or a named message: written out by hand as well
            extra = rng.choice(["tool_call_id", "name"])
            message[extra] = rng.choice(["c1", content[::-1], None])
        assert message_hash(message) == _fresh(message), message
