"""The batch body decoded with its repeated blocks checked once (ingest.wirebody): the same
snapshots, the same errors and the same nesting bound as the general decoding, whichever way a
block goes."""

from __future__ import annotations

import hashlib
import json
import zlib
from typing import Any

import pytest

from core.jsonbody import TooDeep, loads, nesting_depth
from ctxobs import hashing
from ctxobs.validate import CheckedBlock, validate_snapshot
from ctxobs.wire import LIMITS
from ingest.wirebody import CheckedBlocks, batch_decode
from tests.factories import block, full_snapshot, message, snapshot
from tests.ingest.test_hostile_json import nested


def _odd_snapshots() -> list[Any]:
    """Snapshots whose blocks take every way: the usual case, the full check, and errors."""
    odd_blocks: list[Any] = [
        block("system", "system", "Plain text, a \"quote\", a \\ backslash and ünïcödé"),
        block("doc", "retrieval", "A NUL \x00 inside"),
        block("doc", "retrieval", "\x1bstarts with the store's escape"),
        block("parts", "user", messages=[message("user", [{"type": "text", "text": "in parts"}])]),
        {"key": "by-hash", "kind": "memory", "hash": "0" * 32, "tokens": 12},
        {"key": "", "kind": "system", "messages": [message("system", "no key")]},
        {"key": "k", "kind": "no-such-kind", "messages": [message("system", "x")]},
        {"key": "k", "kind": "system", "messages": "not a list"},
        {"key": "k", "kind": "system", "messages": [{"role": "wizard", "content": "x"}]},
        {"key": "k", "kind": "system", "messages": [message("system", "x")], "tokens": -1},
        {"key": "k", "kind": "system", "messages": [message("system", "x")], "pinned": "yes"},
        {"key": "k", "kind": "system", "messages": [message("system", "x")], "unknown": [1, {"a": 2}]},
        "not an object",
        None,
    ]
    return [
        full_snapshot(turn=0),
        snapshot(turn=1, blocks=odd_blocks),
        snapshot(turn=2, blocks=[]),
        {"snapshot_id": "not a uuid", "blocks": [block("system", "system", "x")]},
        {"session_id": "only this"},
        dict(snapshot(turn=3), params={"deep": nested(LIMITS.max_depth + 2)}),
    ]


def test_snapshots_validate_as_they_do_decoded_the_general_way() -> None:
    body = json.dumps({"snapshots": _odd_snapshots()}).encode()
    general = loads(body)["snapshots"]
    cache = CheckedBlocks()
    for _ in range(2):  # the second time, the blocks checked the first time come from the cache
        decoded = batch_decode(body, checked=cache)
        assert decoded is not None
        assert [validate_snapshot(s, i) for i, s in enumerate(decoded)] == [
            validate_snapshot(s, i) for i, s in enumerate(general)]
    # Some snapshots are rejected, with their field errors, and some are taken.
    results = [validate_snapshot(s, i) for i, s in enumerate(general)]
    assert any(snap is None for snap, _ in results) and any(snap is not None for snap, _ in results)


def test_a_block_seen_before_is_taken_checked_without_parsing_it_again() -> None:
    system = block("system", "system", "You are a travel assistant.")
    odd = {"key": "k", "kind": "system", "messages": [message("system", "x")], "tokens": -1}
    cache = CheckedBlocks()
    first = batch_decode(json.dumps({"snapshots": [snapshot(turn=0, blocks=[system, odd])]}).encode(),
                         checked=cache)
    again = batch_decode(json.dumps({"snapshots": [snapshot(turn=1, blocks=[system, odd])]}).encode(),
                         checked=cache)
    assert first is not None and again is not None
    assert type(first[0]["blocks"][0]) is CheckedBlock
    assert again[0]["blocks"][0] is first[0]["blocks"][0]
    # A block the usual check does not take is parsed each time and never cached: the full check
    # words its errors.
    assert again[0]["blocks"][1] == odd and type(again[0]["blocks"][1]) is dict
    assert len(cache) == 1


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"[]", id="not-an-object"),
        pytest.param(b'{"other": []}', id="no-snapshots"),
        pytest.param(b'{"snapshots": {}}', id="snapshots-not-a-list"),
        pytest.param(b'{"snapshots": [1, {}]}', id="an-item-not-an-object"),
        pytest.param(b'{"snapshots": [{"blocks": null}]}', id="blocks-null"),
        pytest.param(b'{"snapshots": [{"blocks": "x"}]}', id="blocks-not-a-list"),
        pytest.param(b'{"snapshots": [', id="truncated"),
        pytest.param(b'{"snapshots": [{"blocks": [{"key": "\xff"}]}]}', id="invalid-utf8-in-a-block"),
        pytest.param(b'{"snapshots": [{"turn": NaN}]}', id="nan"),
    ],
)
def test_bodies_of_another_shape_are_left_to_the_general_decoding(body: bytes) -> None:
    assert batch_decode(body, checked=CheckedBlocks()) is None


def _in_params(levels: int) -> dict[str, Any]:
    # {"snapshots": [ {item: "params": {"x": ...}} ]}: 4 levels before the nested value.
    return dict(snapshot(), params={"x": nested(levels - 4)})


def _in_a_block(levels: int) -> dict[str, Any]:
    # {"snapshots": [ {item: "blocks": [ {block: "messages": [ {message: "content": ...}]}]}]}: 7 levels.
    parts = nested(levels - 7)
    return snapshot(blocks=[block("deep", "user", messages=[{"role": "user", "content": parts}])])


@pytest.mark.parametrize("make", [_in_params, _in_a_block], ids=["params", "block"])
def test_the_body_nesting_bound_holds_in_a_snapshot_and_in_its_blocks(make: Any) -> None:
    bound = LIMITS.max_body_depth
    within = json.dumps({"snapshots": [make(bound)]}).encode()
    beyond = json.dumps({"snapshots": [make(bound + 1)]}).encode()
    assert nesting_depth(within) == bound and nesting_depth(beyond) == bound + 1
    decoded = batch_decode(within, checked=CheckedBlocks())
    assert decoded is not None and len(decoded) == 1
    with pytest.raises(TooDeep):
        batch_decode(beyond, checked=CheckedBlocks())
    # The general decoding draws the same line.
    loads(within)
    with pytest.raises(TooDeep):
        loads(beyond)


def _blocks_sharing_a_crc() -> tuple[dict[str, Any], dict[str, Any]]:
    """Two blocks whose bytes differ, of the same length and CRC-32: found by trying, as the
    birthday bound allows (a few hundred thousand tries at most)."""
    seen: dict[int, dict[str, Any]] = {}
    for i in range(2_000_000):
        # Texts as varied as hashes: CRC-32 is linear, so texts differing only in a counter's
        # digits might never meet.
        candidate = block("note", "memory", f"Remember {hashlib.sha256(str(i).encode()).hexdigest()[:16]}")
        crc = zlib.crc32(json.dumps(candidate).encode())
        if crc in seen:
            return seen[crc], candidate
        seen[crc] = candidate
    raise AssertionError("no two blocks share a CRC-32")


def test_blocks_whose_bytes_share_the_cache_s_key_are_told_apart() -> None:
    first, second = _blocks_sharing_a_crc()
    raw_first, raw_second = json.dumps(first).encode(), json.dumps(second).encode()
    assert raw_first != raw_second and len(raw_first) == len(raw_second)
    cache = CheckedBlocks()

    def decoded(b: dict[str, Any]) -> Any:
        found = batch_decode(json.dumps({"snapshots": [snapshot(blocks=[b])]}).encode(), checked=cache)
        assert found is not None
        return found[0]["blocks"][0]

    one = decoded(first)
    assert type(one) is CheckedBlock and one.block["messages"] == first["messages"]
    # The second block, under the same key, is its own and replaces the first.
    two = decoded(second)
    assert type(two) is CheckedBlock and two.block["messages"] == second["messages"]
    assert (len(cache), cache.held_bytes) == (1, len(raw_second))
    assert decoded(second) is two
    assert decoded(first) is not one and decoded(first).block["messages"] == first["messages"]


def test_the_cache_holds_no_more_bytes_than_its_bound() -> None:
    cache = CheckedBlocks(max_bytes=2_000)
    for turn in range(40):
        blocks = [block(f"doc{i}", "retrieval", f"Document {turn}-{i} " + "words " * 20) for i in range(3)]
        decoded = batch_decode(json.dumps({"snapshots": [snapshot(turn=turn, blocks=blocks)]}).encode(),
                               checked=cache)
        assert decoded is not None
        assert all(type(b) is CheckedBlock for b in decoded[0]["blocks"])
        assert 0 < cache.held_bytes <= 2_000
    assert 0 < len(cache) < 40 * 3


def test_a_block_bigger_than_the_cache_is_checked_and_leaves_the_cache_as_it_was() -> None:
    cache = CheckedBlocks(max_bytes=2_000)
    small = block("system", "system", "A short system prompt")
    batch_decode(json.dumps({"snapshots": [snapshot(blocks=[small])]}).encode(), checked=cache)
    held = (len(cache), cache.held_bytes)
    big = block("doc", "retrieval", "words " * 1_000)
    decoded = batch_decode(json.dumps({"snapshots": [snapshot(blocks=[small, big])]}).encode(), checked=cache)
    assert decoded is not None and all(type(b) is CheckedBlock for b in decoded[0]["blocks"])
    assert (len(cache), cache.held_bytes) == held


def test_the_decoder_knows_every_field_of_the_wire_snapshot() -> None:
    """A field it did not know would leave every batch that sends it to the general decoding."""
    from ctxobs.wire import WireSnapshot
    from ingest.wirebody import _Item

    assert set(_Item.__struct_fields__) == set(WireSnapshot.__annotations__)


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param({"snapshots": [dict(snapshot(), unknown=1)]}, id="a-field-beyond-the-contract"),
        pytest.param({"snapshots": [snapshot()], "extra": 1}, id="a-key-beside-snapshots"),
    ],
)
def test_what_the_contract_does_not_name_is_left_to_the_general_decoding(doc: Any) -> None:
    """Such a field is never read, and the general decoding measures how deep it nests."""
    assert batch_decode(json.dumps(doc).encode(), checked=CheckedBlocks()) is None


def test_a_field_of_a_block_the_check_does_not_read_counts_towards_the_bound() -> None:
    bound = LIMITS.max_body_depth
    # body > snapshots > item > blocks > block > "extra": 5 levels before the nested value.
    deep = block("system", "system", "x", extra=nested(bound - 5 + 1))
    body = json.dumps({"snapshots": [snapshot(blocks=[deep])]}).encode()
    assert nesting_depth(body) == bound + 1
    with pytest.raises(TooDeep):
        batch_decode(body, checked=CheckedBlocks())


def test_a_held_block_is_hashed_once_and_every_other_block_as_its_messages_say() -> None:
    system = block("system", "system", "You are a travel assistant.")
    cache = CheckedBlocks(max_bytes=2_000)

    def validated(turn: int, blocks: list[Any]) -> list[Any]:
        decoded = batch_decode(json.dumps({"snapshots": [snapshot(turn=turn, blocks=blocks)]}).encode(),
                               checked=cache)
        assert decoded is not None
        snap, errors = validate_snapshot(decoded[0], 0)
        assert snap is not None, errors
        return list(snap["blocks"])

    first = validated(0, [system])[0]
    hashes = cache.block_hashes(first)
    assert hashes == hashing.block_hashes(system["messages"])
    # The next turn sends the same bytes: the same checked block, its addresses kept from before.
    again = validated(1, [system])[0]
    assert again is first and cache.block_hashes(again) is hashes
    # An equal block that is not the held one (another object) is hashed from its messages.
    other = dict(first)
    assert cache.block_hashes(other) == hashes and cache.block_hashes(other) is not hashes
    # Once the cache lets the block go (full: emptied), its addresses go with it.
    for i in range(20):
        validated(2 + i, [block(f"doc{i}", "retrieval", f"Document {i} " + "words " * 30)])
    assert cache.get(json.dumps(system).encode()) is None
    assert cache.block_hashes(first) == hashes and cache.block_hashes(first) is not hashes


def _turn(cache: CheckedBlocks, turn: int, blocks: list[Any]) -> list[Any]:
    body = json.dumps({"snapshots": [snapshot(turn=turn, blocks=blocks)]}).encode()
    decoded = batch_decode(body, checked=cache)
    assert decoded is not None
    found: list[Any] = decoded[0]["blocks"]
    return found


def test_with_repeats_only_a_block_is_held_from_the_second_time_its_bytes_come() -> None:
    system = block("system", "system", "You are a travel assistant.")
    cache = CheckedBlocks(repeats_only=True)
    history: list[Any] = []
    seen: list[Any] = []
    for turn in range(30):
        history.append(message("user" if turn % 2 == 0 else "assistant", f"Message {turn} " + "words " * 10))
        blocks = _turn(cache, turn, [system, block("history", "history", messages=list(history))])
        # Every block is checked, held or not.
        assert all(type(b) is CheckedBlock for b in blocks)
        seen.append(blocks[0])
        # The system prompt is held from its second turn on, and taken from the cache after that;
        # the history, new bytes every turn, is never held.
        assert len(cache) == (0 if turn == 0 else 1)
        if turn >= 2:
            assert blocks[0] is seen[1]
    assert seen[1] is not seen[0]
    assert cache.held_bytes == len(json.dumps(system).encode())


def test_the_keys_of_blocks_seen_once_are_bounded() -> None:
    cache = CheckedBlocks(repeats_only=True, seen_max=3)
    a, b, c, d = (block(f"doc{i}", "retrieval", f"Document {i}") for i in range(4))
    for x in (a, b, c):
        _turn(cache, 0, [x])
    assert len(cache) == 0
    # A fourth key finds the set full: the keys seen so far are forgotten, the fourth kept.
    _turn(cache, 1, [d])
    _turn(cache, 2, [a])
    assert len(cache) == 0  # a's first sighting was forgotten: this is its first again
    _turn(cache, 3, [a])
    _turn(cache, 4, [d])
    assert len(cache) == 2
    assert _turn(cache, 5, [a])[0] is _turn(cache, 6, [a])[0]


def test_the_server_s_cache_holds_only_blocks_that_repeat() -> None:
    from ingest import wirebody

    assert wirebody._checked.repeats_only


def test_a_block_of_plain_messages_counts_towards_the_bound_as_any_other() -> None:
    """Such a block is not walked (it nests three deep: block, messages, message); a bound that
    leaves it less than that still refuses it."""
    # body > snapshots > item > blocks > block > messages > message: 7 levels.
    body = json.dumps({"snapshots": [snapshot(blocks=[block("system", "system", "x")])]}).encode()
    assert nesting_depth(body) == 7
    decoded = batch_decode(body, max_depth=7, checked=CheckedBlocks())
    assert decoded is not None and len(decoded[0]["blocks"]) == 1
    with pytest.raises(TooDeep):
        batch_decode(body, max_depth=6, checked=CheckedBlocks())
