"""Preparing a validated snapshot for the store derives its blocks' hashes and counts beside it: the
validated value stays exactly as validation returned it."""

from __future__ import annotations

import copy

import pytest

from ctxobs.hashing import block_hashes
from ctxobs.validate import validate_snapshot
from ctxobs.wire import DEFAULT_TIER_THRESHOLDS
from ingest.services import _prepare
from tests.factories import block, full_snapshot, message


def test_preparing_leaves_the_validated_snapshot_unchanged_and_derives_beside_it() -> None:
    sent = full_snapshot()
    # One block counted by the sender, the others left for the server to count.
    sent["blocks"] = [
        {**b, "tokens": 42} if b["key"] == "system" else {k: v for k, v in b.items() if k != "tokens"}
        for b in sent["blocks"]
    ] + [block("notes", "memory", messages=[message("user", "remember the window seat")])]
    snap, errors = validate_snapshot(sent)
    assert snap is not None, errors
    as_validated = copy.deepcopy(snap)

    prepared = _prepare(0, snap, DEFAULT_TIER_THRESHOLDS)

    assert snap == as_validated
    # A block sent whole has no hash of its own (only one sent by hash has): preparing writes none in.
    assert all(b["hash"] is None and "message_hashes" not in b for b in snap["blocks"])
    assert [p.block for p in prepared.blocks] == snap["blocks"]
    for p in prepared.blocks:
        assert (p.hash, p.message_hashes) == block_hashes(p.block["messages"])
    tokens = {p.block["key"]: p.tokens for p in prepared.blocks}
    assert tokens["system"] == 42
    assert all(n > 0 for n in tokens.values())
    assert prepared.total == sum(tokens.values()) == sum(prepared.kind_tokens.values())
    assert snap["blocks"][0]["tokens"] == 42 and all(b["tokens"] is None for b in snap["blocks"][1:])
    # What preparing derived is frozen as well: the store reads it, nothing writes it again.
    with pytest.raises(AttributeError):
        prepared.blocks[0].tokens = 1  # type: ignore[misc]
