"""The body of a snapshot batch, decoded with each repeated block checked once.

Most blocks of a turn are the blocks of the turn before, sent again byte for byte (the system
prompt, the tools, the memory, the documents). Decoded as plain JSON, each of them would be parsed,
checked and hashed again on every turn. Here the batch is decoded with its blocks left as their
bytes (msgspec's `Raw`); a block whose bytes this process holds (from the second time they
come) is the same `CheckedBlock` again (validation takes it as it is, and its messages' texts,
the same string objects, hash from their cached hashes), and only the others are parsed and
checked.

A block passes into the cache only through the one-pass check of the usual case
(`ctxobs.validate.block_checked`); any other block is left parsed for `validate_snapshot`, which
words its errors. A body this decoder does not take as `{"snapshots": [{...}, ...]}` with lists of
blocks (invalid JSON, another shape) gets None, and the caller decodes it the general way
(`core.jsonbody.loads`), which decides what is accepted and words the errors, as before.
"""

from __future__ import annotations

import sys
from typing import Any

import msgspec
from isal import isal_zlib

from core.jsonbody import MSGSPEC_RECURSION_SAFE, TooDeep, value_depth
from ctxobs import hashing
from ctxobs.validate import CheckedBlock, block_checked
from ctxobs.wire import LIMITS, Block, WireBlock, WireSnapshot

_UNSET: Any = msgspec.UNSET


# The fields of a wire snapshot (`ctxobs.wire.WireSnapshot`), each as the sender sent it (absent:
# UNSET), the blocks as their bytes. A field beyond these leaves the body to the general decoding,
# which measures how deep it nests.
_Item = msgspec.defstruct(
    "_Item",
    [(name, list[msgspec.Raw] if name == "blocks" else Any, _UNSET) for name in WireSnapshot.__annotations__],
    forbid_unknown_fields=True,
)
_Body = msgspec.defstruct("_Body", [("snapshots", list[_Item])], forbid_unknown_fields=True)  # type: ignore[valid-type]


_BODY: msgspec.json.Decoder[Any] = msgspec.json.Decoder(_Body)
_PLAIN = msgspec.json.Decoder()
_FIELDS = _Item.__struct_fields__
# Levels above a snapshot's own fields: the body object and its "snapshots" array; above a
# block's, the snapshot and its "blocks" array as well.
_ITEM_LEVEL = 2
_BLOCK_LEVEL = 4
_BLOCK_FIELDS = frozenset(WireBlock.__annotations__)
_PLAIN_BLOCK_DEPTH = 3  # a block of plain messages: the block, its messages, a message


class _Held:
    """A checked block the cache holds: its bytes, and its content addresses once hashed."""

    __slots__ = ("raw", "checked", "hashes")

    def __init__(self, raw: bytes, checked: CheckedBlock) -> None:
        self.raw = raw
        self.checked = checked
        self.hashes: tuple[str, list[str]] | None = None


class CheckedBlocks:
    """Blocks this process checked, by their bytes. Bounded by the bytes it holds (the parsed
    blocks take a few times that): cleared when full. Checking is a function of the bytes alone,
    so one cache serves every project.

    Keyed by the bytes' length and CRC-32, which ISA-L computes at several GB/s (a dict keyed by
    the bytes themselves ran SipHash over every block of every batch: 2% of a batch's CPU); a hit
    compares the bytes, so two blocks sharing a key are told apart, the later one replacing the
    earlier.

    A held block's content addresses are kept with it (`block_hashes`): the blocks repeated turn
    after turn are hashed once, not once per turn.

    With REPEATS_ONLY a block is held from the second time its bytes come, its key alone kept
    the first time (at most SEEN_MAX keys, forgotten all at once when full). The block that grows
    every turn (the history) or comes once (a user's input, a tool's result) is then never held:
    held, it filled most of the cache, and its parsed messages, surviving the batch, were walked
    again and again by the cyclic garbage collector as they aged through its generations."""

    def __init__(
        self, max_bytes: int = 32 << 20, *, repeats_only: bool = False, seen_max: int = 1 << 16
    ) -> None:
        self.max_bytes = max_bytes
        self.held_bytes = 0
        self.repeats_only = repeats_only
        self.seen_max = seen_max
        self._blocks: dict[int, _Held] = {}
        # The same, by the identity of the normalised block validation takes from them.
        self._by_block: dict[int, _Held] = {}
        # The keys of blocks seen once and not held (REPEATS_ONLY): ints, which the collector skips.
        self._seen: set[int] = set()

    def __len__(self) -> int:
        return len(self._blocks)

    def get(self, raw: bytes, address: int | None = None) -> CheckedBlock | None:
        """The checked block held for the bytes RAW (ADDRESS: their key, if already computed)."""
        found = self._blocks.get(_address(raw) if address is None else address)
        if found is not None and found.raw == raw:
            return found.checked
        return None

    def put(self, raw: bytes, block: CheckedBlock, address: int | None = None) -> None:
        """Hold BLOCK, checked from the bytes RAW (ADDRESS: their key, if already computed); with
        `repeats_only`, only if these bytes came before."""
        if len(raw) > self.max_bytes:
            return  # never kept: it would empty the cache for nothing
        if address is None:
            address = _address(raw)
        if self.repeats_only and address not in self._seen:
            if len(self._seen) >= self.seen_max:
                self._seen.clear()
            self._seen.add(address)
            return
        self._seen.discard(address)
        replaced = self._blocks.pop(address, None)
        if replaced is not None:
            self.held_bytes -= len(replaced.raw)
            del self._by_block[id(replaced.checked.block)]
        if self.held_bytes + len(raw) > self.max_bytes:
            self._blocks.clear()
            self._by_block.clear()
            self.held_bytes = 0
        held = _Held(raw, block)
        self._blocks[address] = held
        self._by_block[id(block.block)] = held
        self.held_bytes += len(raw)

    def block_hashes(self, block: Block) -> tuple[str, list[str]]:
        """The content addresses of BLOCK and of its messages (`ctxobs.hashing.block_hashes`):
        kept with the checked block BLOCK is, if it is one this cache holds (the lists are shared:
        read, never change them)."""
        held = self._by_block.get(id(block))
        if held is None or held.checked.block is not block:
            return hashing.block_hashes(block["messages"])
        if held.hashes is None:
            held.hashes = hashing.block_hashes(block["messages"])
        return held.hashes


def _address(raw: bytes) -> int:
    return len(raw) << 32 | isal_zlib.crc32(raw)


_checked = CheckedBlocks(repeats_only=True)


def block_hashes(block: Block) -> tuple[str, list[str]]:
    """The content addresses of the validated BLOCK and of its messages, hashed once for all the
    turns that send its bytes again once the cache holds it (see `CheckedBlocks.block_hashes`)."""
    return _checked.block_hashes(block)


def batch_decode(
    raw: bytes, *, max_depth: int = LIMITS.max_body_depth, checked: CheckedBlocks | None = None
) -> list[Any] | None:
    """The snapshots of the batch body RAW, each a dict of the fields `validate_snapshot` reads,
    its blocks checked (`CheckedBlock`) or parsed; None when RAW is not such a body (decode it with
    `core.jsonbody.loads`). TooDeep when it nests deeper than MAX_DEPTH."""
    if sys.getrecursionlimit() > MSGSPEC_RECURSION_SAFE:
        return None  # the general way measures the nesting on the bytes first
    cache = _checked if checked is None else checked
    try:
        body = _BODY.decode(raw)
    except RecursionError:
        raise TooDeep(max_depth) from None
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    levels = max_depth - _ITEM_LEVEL
    items: list[Any] = []
    try:
        for it in body.snapshots:
            item = {name: value for name in _FIELDS if (value := getattr(it, name)) is not _UNSET}
            blocks = it.blocks
            if blocks is not _UNSET:
                item["blocks"] = [_block(bytes(b), cache, max_depth) for b in blocks]
            # A checked block was measured when its bytes were first parsed; the walk measures the rest.
            if value_depth(item, levels) > levels:
                raise TooDeep(max_depth)
            items.append(item)
    except msgspec.DecodeError:
        # A block's bytes are only delimited by the first pass, not decoded (invalid UTF-8 in a
        # string, say): the general way words the error.
        return None
    return items


def _block(raw: bytes, cache: CheckedBlocks, max_depth: int) -> Any:
    """The block RAW: checked (from the cache, or now), or parsed as it is. DecodeError when its
    bytes are not JSON after all."""
    address = _address(raw)
    hit = cache.get(raw, address)
    if hit is not None:
        return hit
    try:
        value = _PLAIN.decode(raw)
    except RecursionError:
        raise TooDeep(max_depth) from None
    block = block_checked(value)
    # A block is cached with all of its bytes, so none of them may nest beyond the bound; the
    # check reads only the fields it knows. A block of plain messages ({role, content} texts) and
    # known fields nests three deep (block, messages, message): only the others are measured.
    levels = max_depth - _BLOCK_LEVEL
    plain = block is not None and block["verbatim"] and value.keys() <= _BLOCK_FIELDS
    if not plain or levels < _PLAIN_BLOCK_DEPTH:
        if value_depth(value, levels) > levels:
            raise TooDeep(max_depth)
    if block is None:
        return value
    found = CheckedBlock(block)
    cache.put(raw, found, address)
    return found
