"""The one-pass block check of the ingest hot path agrees with the full check: the same normalised
block for every valid block, and no verdict at all (so the full check reports the errors) for
anything it does not plainly accept."""

from __future__ import annotations

from typing import Any

import pytest

from ctxobs.validate import _block_fast, _block_full, _Errors
from ctxobs.wire import LIMITS

HASH = "0123456789abcdef" * 2

VALID = [
    pytest.param({"key": "system", "kind": "system", "messages": [{"role": "system", "content": "be brief"}]},
                 id="plain"),
    pytest.param({"key": "k", "messages": []}, id="no-messages-default-kind"),
    pytest.param({"key": "k", "kind": "", "messages": [{"role": "user", "content": None}]},
                 id="empty-kind-null"),
    pytest.param({"key": "h", "kind": "history", "tokens": 12, "estimated": True, "pinned": False,
                  "compressed": True, "refs": ["r1", "r2"],
                  "messages": [{"role": "user", "content": "hi", "name": "ann"},
                               {"role": "assistant", "content": None,
                                "tool_calls": [{"id": "c1", "type": "function",
                                                "function": {"name": "f", "arguments": "{}"}}]},
                               {"role": "tool", "tool_call_id": "c1", "content": "42"}]},
                 id="tools-and-flags"),
    pytest.param({"key": "u", "kind": "user",
                  "messages": [{"role": "user",
                                "content": [{"type": "text", "text": "look"},
                                            {"type": "image_url", "image_url": {"url": "x"}}]}]},
                 id="content-parts"),
    pytest.param({"key": "t", "kind": "tools", "messages": [{"role": "assistant", "tool_calls": []}]},
                 id="tool-calls-without-content"),
    pytest.param({"key": "x" * 128, "kind": "other", "tokens": 0,
                  "messages": [{"role": "developer", "content": ""}]}, id="longest-key-zero-tokens"),
    pytest.param({"key": "system", "kind": "system", "hash": HASH, "tokens": 420}, id="by-hash"),
    pytest.param({"key": "m", "hash": HASH, "tokens": 0, "estimated": True, "pinned": True, "refs": ["r1"]},
                 id="by-hash-flags"),
]

INVALID = [
    pytest.param("not a block", id="not-object"),
    pytest.param({"kind": "system", "messages": []}, id="no-key"),
    pytest.param({"key": "", "messages": []}, id="empty-key"),
    pytest.param({"key": "x" * 129, "messages": []}, id="key-too-long"),
    pytest.param({"key": "k", "kind": "prompt", "messages": []}, id="unknown-kind"),
    pytest.param({"key": "k", "kind": ["system"], "messages": []}, id="unhashable-kind"),
    pytest.param({"key": "k"}, id="no-messages"),
    pytest.param({"key": "k", "hash": HASH}, id="hash-without-tokens"),
    pytest.param({"key": "k", "hash": HASH, "tokens": None}, id="hash-null-tokens"),
    pytest.param({"key": "k", "hash": HASH, "tokens": 3, "messages": []}, id="hash-and-messages"),
    pytest.param({"key": "k", "hash": HASH.upper(), "tokens": 3}, id="hash-upper-case"),
    pytest.param({"key": "k", "hash": HASH[:-1], "tokens": 3}, id="hash-short"),
    pytest.param({"key": "k", "hash": None, "tokens": 3}, id="hash-null"),
    pytest.param({"key": "k", "hash": 7, "tokens": 3}, id="hash-number"),
    pytest.param({"key": "k", "hash": HASH, "tokens": -1}, id="hash-negative-tokens"),
    pytest.param({"key": "k", "hash": HASH, "tokens": 3, "pinned": "yes"}, id="hash-string-flag"),
    pytest.param({"key": "k", "messages": [{"role": "robot", "content": "x"}]}, id="unknown-role"),
    pytest.param({"key": "k", "messages": [{"role": ["user"], "content": "x"}]}, id="unhashable-role"),
    pytest.param({"key": "k", "messages": [{"role": "user", "content": 3}]}, id="content-number"),
    pytest.param({"key": "k", "messages": [{"role": "user", "tool_calls": {}}]}, id="tool-calls-object"),
    pytest.param({"key": "k", "messages": [{"role": "tool", "content": "x", "tool_call_id": 7}]},
                 id="call-id-int"),
    pytest.param({"key": "k", "messages": ["hello"]}, id="message-not-object"),
    pytest.param({"key": "k", "tokens": -1, "messages": []}, id="negative-tokens"),
    pytest.param({"key": "k", "tokens": True, "messages": []}, id="bool-tokens"),
    pytest.param({"key": "k", "tokens": 1.5, "messages": []}, id="float-tokens"),
    pytest.param({"key": "k", "pinned": "yes", "messages": []}, id="string-flag"),
    pytest.param({"key": "k", "refs": "r1", "messages": []}, id="refs-string"),
    pytest.param({"key": "k", "refs": [1], "messages": []}, id="refs-not-strings"),
    pytest.param({"key": "k",
                  "messages": [{"role": "user", "content": "x" * (LIMITS.max_chars_per_block + 1)}]},
                 id="too-many-chars"),
]


@pytest.mark.parametrize("block", VALID)
def test_fast_check_normalises_a_valid_block_like_the_full_check(block: dict[str, Any]) -> None:
    err = _Errors()
    full = _block_full(block, ("snapshots", 0, "blocks", 0), err)
    assert err.items == []
    assert _block_fast(block) == full


@pytest.mark.parametrize("block", INVALID)
def test_fast_check_leaves_an_invalid_block_to_the_full_check(block: Any) -> None:
    err = _Errors()
    _block_full(block, ("snapshots", 0, "blocks", 0), err)
    assert err.items, "the case must be invalid for the full check"
    assert _block_fast(block) is None


@pytest.mark.parametrize(
    ("block", "field", "words"),
    [
        pytest.param({"key": "k", "hash": HASH}, "tokens", "required with hash", id="no-tokens"),
        pytest.param({"key": "k", "hash": HASH, "tokens": 3, "messages": []}, "hash", "not both", id="both"),
        pytest.param({"key": "k", "hash": "abc", "tokens": 3}, "hash", "32 lowercase hex", id="malformed"),
    ],
)
def test_a_block_by_hash_is_refused_naming_the_field(block: dict[str, Any], field: str, words: str) -> None:
    err = _Errors()
    _block_full(block, ("snapshots", 0, "blocks", 0), err)
    where = ["snapshots", 0, "blocks", 0, field]
    assert [(e["loc"], words in e["msg"]) for e in err.items] == [(where, True)]


def test_a_block_by_hash_comes_without_messages() -> None:
    block = _block_fast({"key": "s", "kind": "system", "hash": HASH, "tokens": 9})
    assert block is not None
    assert (block["hash"], block["messages"], block["tokens"], block["chars"]) == (HASH, [], 9, 0)
    whole = _block_fast({"key": "s", "kind": "system", "messages": []})
    assert whole is not None and whole["hash"] is None
