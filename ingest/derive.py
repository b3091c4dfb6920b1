"""Values derived from snapshots, ORM-free: watermark, count drift, turn-to-turn change."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from ctxobs.tokens import REPLY_PRIMING
from ctxobs.wire import occurrence_keys, usable_window
from ingest.types import BlockChange, BlockMoved, BlockResized


class BlockRef(NamedTuple):
    """What a turn-to-turn comparison needs of one block (a tuple: ingest builds one per block)."""

    key: str
    kind: str
    hash: str
    tokens: int


def watermark(total_tokens: int, context_window: int, reserve_tokens: int) -> float:
    """Fill of the usable window: total / (window - reserve)."""
    return total_tokens / usable_window(context_window, reserve_tokens)


def count_drift(total_tokens: int, reported_prompt_tokens: int | None) -> float | None:
    """(ours - provider's) / provider's, with the reply priming the provider also counts."""
    if not reported_prompt_tokens:
        return None
    ours = total_tokens + REPLY_PRIMING
    return (ours - reported_prompt_tokens) / reported_prompt_tokens


def _keyed(blocks: list[BlockRef]) -> dict[str, BlockRef]:
    return dict(zip(occurrence_keys(b.key for b in blocks), blocks, strict=True))


def _names_distinct(keys: list[str]) -> bool:
    """Whether the occurrence names of KEYS are all different: a key spelled like another's
    occurrence name ("doc#2" beside two "doc") makes two blocks one name, and the comparison by name
    then keeps the later of them, which a comparison by position would not."""
    if len(set(keys)) == len(keys):
        return True
    names = occurrence_keys(keys)
    return len(set(names)) == len(names)


def block_change(prev: list[BlockRef] | None, cur: list[BlockRef], prev_turn: int | None) -> BlockChange:
    """Blocks that entered, left, grew, shrank or changed (same size, new content) since PREV."""
    if prev is None:
        return {
            "prev_turn": None,
            "entered": [{"key": b.key, "kind": b.kind, "tokens": b.tokens} for b in cur],
            "left": [],
            "grew": [],
            "shrank": [],
            "changed": [],
            "unchanged": 0,
            "delta_tokens": sum(b.tokens for b in cur),
        }
    entered: list[BlockMoved] = []
    left: list[BlockMoved] = []  # only where the keys differ
    grew: list[BlockResized] = []
    shrank: list[BlockResized] = []
    changed: list[BlockResized] = []
    unchanged = 0
    pairs: Iterable[tuple[str, BlockRef | None, BlockRef]]
    prev_keys = [b.key for b in prev]
    if prev_keys == [b.key for b in cur] and _names_distinct(prev_keys):
        # The same keys in the same order, as on most turns: each occurrence meets its own, and
        # their occurrence names are needed only for the blocks that differ.
        named: list[str] | None = None
        pairs = []
        for i, (old, b) in enumerate(zip(prev, cur, strict=True)):
            if old.hash == b.hash:
                unchanged += 1
            else:
                named = named or occurrence_keys(prev_keys)
                pairs.append((named[i], old, b))
    else:
        p, c = _keyed(prev), _keyed(cur)
        pairs = [(key, p.get(key), b) for key, b in c.items()]
        left = [{"key": k, "kind": old.kind, "tokens": old.tokens} for k, old in p.items() if k not in c]
    for key, found, b in pairs:
        if found is None:
            entered.append({"key": key, "kind": b.kind, "tokens": b.tokens})
        elif found.hash == b.hash:
            unchanged += 1
        else:
            row: BlockResized = {"key": key, "kind": b.kind, "before": found.tokens, "after": b.tokens}
            if b.tokens > found.tokens:
                grew.append(row)
            elif b.tokens < found.tokens:
                shrank.append(row)
            else:
                changed.append(row)
    return {
        "prev_turn": prev_turn,
        "entered": entered,
        "left": left,
        "grew": grew,
        "shrank": shrank,
        "changed": changed,
        "unchanged": unchanged,
        "delta_tokens": sum(b.tokens for b in cur) - sum(b.tokens for b in prev),
    }
