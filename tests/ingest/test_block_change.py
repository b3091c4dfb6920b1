"""The turn-to-turn change of a turn's blocks (ingest.derive.block_change): the n-th occurrence of a
key meets the n-th occurrence of that key in the other turn, whether the keys come in the same
order (compared by position) or not (compared by name)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxobs.wire import occurrence_keys
from ingest.derive import BlockRef, block_change

_blocks = st.lists(
    st.builds(BlockRef, key=st.sampled_from(["a", "b", "c", "c#2"]), kind=st.sampled_from(["x", "y"]),
              hash=st.sampled_from(["h1", "h2", "h3"]), tokens=st.integers(1, 3)),
    max_size=6,
)


def _by_name(prev: list[BlockRef], cur: list[BlockRef]) -> dict[str, Any]:
    """The change worked out from the definition, independently: blocks keyed by occurrence name (a
    key spelled like another's occurrence name, "c#2" beside two "c", is one name: the later block)."""
    p = dict(zip(occurrence_keys(b.key for b in prev), prev, strict=True))
    c = dict(zip(occurrence_keys(b.key for b in cur), cur, strict=True))
    out: dict[str, Any] = {"entered": [], "left": [], "grew": [], "shrank": [], "changed": [], "unchanged": 0}
    for key, b in c.items():
        old = p.get(key)
        if old is None:
            out["entered"].append({"key": key, "kind": b.kind, "tokens": b.tokens})
        elif old.hash == b.hash:
            out["unchanged"] += 1
        else:
            row = {"key": key, "kind": b.kind, "before": old.tokens, "after": b.tokens}
            kind = "grew" if b.tokens > old.tokens else "shrank" if b.tokens < old.tokens else "changed"
            out[kind].append(row)
    out["left"] = [{"key": k, "kind": o.kind, "tokens": o.tokens} for k, o in p.items() if k not in c]
    out["delta_tokens"] = sum(b.tokens for b in cur) - sum(b.tokens for b in prev)
    out["prev_turn"] = 4
    return out


@settings(max_examples=400, deadline=None)
@given(prev=_blocks, cur=_blocks, same_keys=st.booleans(), data=st.data())
def test_the_change_matches_each_occurrence_of_a_key_with_its_own(
    prev: list[BlockRef], cur: list[BlockRef], same_keys: bool, data: st.DataObject
) -> None:
    if same_keys:
        # The common case: the same keys in the same order, some contents changed.
        cur = [b._replace(hash=data.draw(st.sampled_from(["h1", "h2", "h3"])),
                          tokens=data.draw(st.integers(1, 3))) for b in prev]
    assert block_change(prev, cur, 4) == _by_name(prev, cur)


def test_a_repeated_key_that_changed_is_named_by_its_occurrence() -> None:
    prev = [BlockRef("doc", "retrieval", "h1", 10), BlockRef("doc", "retrieval", "h2", 10)]
    cur = [BlockRef("doc", "retrieval", "h1", 10), BlockRef("doc", "retrieval", "h3", 12)]
    change = block_change(prev, cur, 1)
    assert change["grew"] == [{"key": "doc#2", "kind": "retrieval", "before": 10, "after": 12}]
    assert change["unchanged"] == 1 and change["entered"] == [] and change["left"] == []
