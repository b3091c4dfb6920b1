"""Anthropic's prompt-cache rules at message granularity, checked against turns computed by hand.

Each row gives the previous turn, this turn, the model, the time between them and what the
provider reported; the expected read, write (and the part of it with the 1-hour TTL), the
potential read (the whole previous prompt kept, in time) and whether the reported read is
flagged as short. Blocks are (key, kind, tokens, messages) in ctxobs order; a breakpoint at the
end of a ctxobs block sits at an exact position, one inside a block at its share of the block's
tokens (the rows only use messages of equal weight there)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ingest import selectors
from insights import cache as C
from insights.cache_analysis import cache_analyze
from insights.cache_extensions import turn_context
from insights.cache_models import TurnCache
from insights.prices import Price
from tests.factories import block, snapshot

Block = tuple[str, str, int, list[dict[str, Any]]]
SONNET = "claude-sonnet-4"
HAIKU = "claude-3-5-haiku"


def text(role: str, body: str, ttl: str | None = None, cached: bool = False) -> dict[str, Any]:
    """A message with one text content block, carrying a breakpoint when CACHED (or TTL)."""
    part: dict[str, Any] = {"type": "text", "text": body}
    if cached or ttl:
        part["cache_control"] = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    return {"role": role, "content": [part]}


def turn(blocks: list[Block], params: dict[str, Any] | None = None) -> C.TurnBlocks:
    return C.TurnBlocks(
        hashes=[json.dumps([k, m], sort_keys=True) for k, _, _, m in blocks],
        keys=[k for k, _, _, _ in blocks],
        kinds=[kd for _, kd, _, _ in blocks],
        tokens=[t for _, _, t, _ in blocks],
        params=params or {},
        messages={i: m for i, (_, _, _, m) in enumerate(blocks)},
    )


def system(tokens: int = 1500, body: str = "You are a travel assistant.", **cc: Any) -> Block:
    return ("system", "system", tokens, [text("system", body, **cc)])


def history(tokens: int, turns: int, ttl: str | None = None) -> Block:
    """The questions and answers of TURNS earlier turns; no breakpoint (they moved on)."""
    messages = []
    for t in range(turns):
        messages += [text("user", f"question {t}", ttl=None), text("assistant", f"answer {t}")]
    return ("history", "history", tokens, messages)


def question(t: int, tokens: int = 100, ttl: str | None = None) -> Block:
    """This turn's question, with the breakpoint of incremental conversation caching."""
    return ("user", "user", tokens, [text("user", f"question {t}", ttl=ttl, cached=True)])


@dataclass(frozen=True)
class Row:
    prev: C.TurnBlocks | None
    cur: C.TurnBlocks
    read: int
    written: int
    potential: int
    model: str = SONNET
    gap_s: float | None = 30.0
    written_long: int = 0
    reported: int | None = None
    flagged: bool = False
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


TOOLS = [
    {"name": "search_flights", "description": "Search flights", "input_schema": {"type": "object"}},
    {
        "name": "book_flight",
        "description": "Book a flight",
        "input_schema": {"type": "object"},
        "cache_control": {"type": "ephemeral"},
    },
]
TOOLS_BLOCK: Block = ("tools", "tools", 1200, [])
MANY = [text("user" if i % 2 else "assistant", f"step {i}") for i in range(21)]

ROWS: dict[str, Row] = {
    # First turn of an incremental conversation: nothing to read; the breakpoint on the question
    # covers system + question = 1500 + 100 = 1600, all written.
    "incremental-first-turn": Row(
        prev=None, cur=turn([system(), question(0)]), read=0, written=1600, potential=0, gap_s=None
    ),
    # Turn 1: last turn's question (its breakpoint at 1500 + 100 = 1600) now sits inside the
    # history block. Its prefix is repeated (cache_control itself is not part of the prompt): read
    # 1600. This turn's breakpoint ends at 1500 + 300 + 100 = 1900: written 1900 - 1600 = 300.
    "incremental-second-turn": Row(
        prev=turn([system(), question(0)]),
        cur=turn([system(), history(300, 1), question(1)]),
        read=1600,
        written=300,
        potential=1600,
        reported=1600,
    ),
    # Turn 2: last turn's breakpoint at 1500 + 300 + 100 = 1900 is read; this one ends at
    # 1500 + 600 + 100 = 2200: written 2200 - 1900 = 300.
    "incremental-third-turn": Row(
        prev=turn([system(), history(300, 1), question(1)]),
        cur=turn([system(), history(600, 2), question(2)]),
        read=1900,
        written=300,
        potential=1900,
    ),
    # Breakpoint on the system prompt only: read its 2000 tokens; nothing after the last
    # breakpoint is written, however the history grows: written 2000 - 2000 = 0.
    "system-only": Row(
        prev=turn([system(2000, cached=True), ("user", "user", 50, [text("user", "question 0")])]),
        cur=turn(
            [system(2000, cached=True), history(100, 1), ("user", "user", 50, [text("user", "question 1")])]
        ),
        read=2000,
        written=0,
        potential=2000,
    ),
    # Breakpoint on the last tool definition. Anthropic renders tools before system, so the
    # breakpoint sits at 1200 (the tools block's tokens), not at 500 + 1200 where ctxobs keeps the
    # block. The system prompt changed (a timestamp): the tools are still read, 1200; this turn's
    # last breakpoint is that same one: written 0. Potential: the same 1200.
    "tools-only-system-changed": Row(
        prev=turn([system(500, "Now: 2026-12-01 08:00"), TOOLS_BLOCK, question(0, 50)], {"tools": TOOLS}),
        cur=turn(
            [system(500, "Now: 2026-12-01 08:01"), TOOLS_BLOCK, ("user", "user", 50, [text("user", "q")])],
            {"tools": TOOLS},
        ),
        read=1200,
        written=0,
        potential=1200,
    ),
    # Six minutes later with the default 5-minute TTL: last turn's entry (1600) expired; this
    # turn's breakpoint writes its whole prefix again, 1900. In time it would have read 1600.
    "ttl-5m-after-6-minutes": Row(
        prev=turn([system(), question(0)]),
        cur=turn([system(), history(300, 1), question(1)]),
        gap_s=360.0,
        read=0,
        written=1900,
        potential=1600,
        note="past the 5-minute TTL",
    ),
    # The same with `"ttl": "1h"`: read 1600; written 1900 - 1600 = 300, all at the 1-hour rate.
    "ttl-1h-after-6-minutes": Row(
        prev=turn([system(), question(0, ttl="1h")]),
        cur=turn([system(), history(300, 1), question(1, ttl="1h")]),
        gap_s=360.0,
        read=1600,
        written=300,
        written_long=300,
        potential=1600,
    ),
    # Under the minimum: system 800 + question 100 = 900 < 1,024 is neither written nor read.
    "minimum-1024": Row(
        prev=turn([system(800), question(0)]),
        cur=turn([system(800), history(50, 1), question(1)]),
        read=0,
        written=0,
        potential=0,
        note="no breakpoint of this turn reaches 1,024 tokens",
    ),
    # Haiku needs 2,048: 1600 and 1900 are both under it.
    "minimum-2048-haiku": Row(
        prev=turn([system(), question(0)]),
        cur=turn([system(), history(300, 1), question(1)]),
        model=HAIKU,
        read=0,
        written=0,
        potential=0,
    ),
    # Haiku with a bigger system prompt: 2500 + 100 = 2600 read; 2500 + 300 + 100 = 2900,
    # written 2900 - 2600 = 300.
    "minimum-2048-haiku-met": Row(
        prev=turn([system(2500), question(0)]),
        cur=turn([system(2500), history(300, 1), question(1)]),
        model=HAIKU,
        read=2600,
        written=300,
        potential=2600,
    ),
    # The provider read nothing although last turn's 1600 were there to read: flagged.
    "provider-reads-nothing": Row(
        prev=turn([system(), question(0)]),
        cur=turn([system(), history(300, 1), question(1)]),
        read=1600,
        written=300,
        potential=1600,
        reported=0,
        flagged=True,
    ),
    # 100 short of 1600: beyond max(64, 5% of 1600 = 80) tokens: flagged.
    "provider-reads-100-less": Row(
        prev=turn([system(), question(0)]),
        cur=turn([system(), history(300, 1), question(1)]),
        read=1600,
        written=300,
        potential=1600,
        reported=1500,
        flagged=True,
    ),
    # 20 short: within the tolerance (the lens's positions are estimates): not flagged.
    "provider-reads-20-less": Row(
        prev=turn([system(), question(0)]),
        cur=turn([system(), history(300, 1), question(1)]),
        read=1600,
        written=300,
        potential=1600,
        reported=1580,
    ),
    # Content blocks: system 0, question 0 at 1; this turn: system 0, question 0 at 1, 21 steps at
    # 2..22, question 1 at 23. 23 - 1 = 22 > 20: the lookback does not reach last turn's entry;
    # the whole 1500 + 2300 + 100 = 3900 is written again.
    "lookback-past-20-blocks": Row(
        prev=turn([system(), question(0)]),
        cur=turn(
            [
                system(),
                ("history", "history", 2300, [text("user", "question 0"), *MANY]),
                question(1),
            ]
        ),
        read=0,
        written=3900,
        potential=0,
        note="over 20 blocks",
    ),
    # With 19 steps this turn's breakpoint is at 1 + 1 + 19 = 21: 21 - 1 = 20, in reach: read 1600;
    # written 1500 + 2100 + 100 - 1600 = 2100.
    "lookback-within-20-blocks": Row(
        prev=turn([system(), question(0)]),
        cur=turn(
            [
                system(),
                ("history", "history", 2100, [text("user", "question 0"), *MANY[:19]]),
                question(1),
            ]
        ),
        read=1600,
        written=2100,
        potential=1600,
    ),
    # A breakpoint inside a block, on the first of two messages of equal weight (7 tokens each):
    # at 1500 + 400 * 7 / 14 = 1700; the 200 tokens after it are not written.
    "breakpoint-inside-a-block": Row(
        prev=None,
        cur=turn(
            [system(), ("notes", "other", 400, [text("user", "note 1", cached=True), text("user", "note 2")])]
        ),
        gap_s=None,
        read=0,
        written=1700,
        potential=0,
    ),
    # The system prompt changed: nothing read. Keeping the whole previous prompt would have read
    # its breakpoint at 1500 + 300 = 1800, the previous prompt's size; not this turn's grown
    # history block's end (1500 + 600 = 2100).
    "potential-capped-at-previous-prompt": Row(
        prev=turn(
            [
                system(body="rules v1"),
                ("history", "history", 300, [text("user", "q0"), text("assistant", "a0", cached=True)]),
            ]
        ),
        cur=turn(
            [
                system(body="rules v2"),
                (
                    "history",
                    "history",
                    600,
                    [
                        text("user", "q0"),
                        text("assistant", "a0"),
                        text("user", "q1"),
                        text("assistant", "a1", cached=True),
                    ],
                ),
            ]
        ),
        read=0,
        written=2100,
        potential=1800,
    ),
    # tool_choice changed: Anthropic keeps the tools and system entries, not the messages'. The
    # system breakpoint (1200 tools + 1500 system = 2700) is read, not last turn's question
    # (2700 + 100 = 2800); this turn's breakpoint ends at 2700 + 300 + 100 = 3100: written 400.
    "tool-choice-changed-keeps-system": Row(
        prev=turn(
            [system(cached=True), TOOLS_BLOCK, question(0)], {"tools": TOOLS, "tool_choice": {"type": "auto"}}
        ),
        cur=turn(
            [system(cached=True), TOOLS_BLOCK, history(300, 1), question(1)],
            {"tools": TOOLS, "tool_choice": {"type": "any"}},
        ),
        read=2700,
        written=400,
        potential=2800,
    ),
}


def _figures(row: Row) -> tuple[C.Expected, C.Expected]:
    """Expected and potential reads as the analyzer computes them."""
    prompt = sum(row.cur.tokens)
    prefix = C.shared_prefix(row.prev, row.cur)
    expected = C.expected_cache(
        provider=C.ANTHROPIC,
        model=row.model,
        prefix=prefix,
        prev=row.prev,
        cur=row.cur,
        prompt_tokens=prompt,
        gap_s=row.gap_s,
    )
    whole = (
        C.Prefix(blocks=len(row.prev.hashes), tokens=sum(row.prev.tokens), reason=C.KEPT)
        if row.prev
        else prefix
    )
    potential = C.expected_cache(
        provider=C.ANTHROPIC,
        model=row.model,
        prefix=whole,
        prev=row.prev,
        cur=row.cur,
        prompt_tokens=prompt,
        gap_s=row.gap_s,
        ignore_ttl=True,
        whole=True,
    )
    return expected, potential if potential.cached >= expected.cached else expected


@pytest.mark.parametrize("row", list(ROWS.values()), ids=list(ROWS))
def test_anthropic_reads_writes_and_potential_match_the_hand_computed_table(row: Row) -> None:
    expected, potential = _figures(row)
    assert (expected.cached, expected.written, expected.long_tokens, potential.cached) == (
        row.read,
        row.written,
        row.written_long,
        row.potential,
    ), expected.note
    assert row.note in expected.note
    if row.prev is not None:
        assert potential.cached <= sum(row.prev.tokens)
    flagged = C.read_shortfall(
        provider=C.ANTHROPIC, expected_cached=expected.cached, reported_cached=row.reported
    )
    assert flagged is row.flagged


def test_breakpoints_sit_at_their_message_in_render_order() -> None:
    cur = turn([system(500, cached=True), TOOLS_BLOCK, history(300, 1), question(1)], {"tools": TOOLS})
    # Content blocks: tool 0, tool 1 (breakpoint), system (breakpoint), q0, a0, q1 (breakpoint).
    got = [(b.unit, b.tokens) for b in C.breakpoints(cur)]
    assert got == [(1, 1200), (2, 1200 + 500), (5, 1200 + 500 + 300 + 100)]


def test_a_breakpoint_inside_the_history_is_at_its_message_not_at_the_block_end() -> None:
    # Four messages of equal weight (question 0/answer 0/question 1/answer 1 are 7 tokens each in
    # cl100k_base with their framing): a breakpoint on the second is at 1500 + 400 * 2 / 4 = 1700.
    block = [text("user", "question 0"), text("assistant", "answer 0", cached=True)]
    block += [text("user", "question 1"), text("assistant", "answer 1")]
    cur = turn([system(), ("history", "history", 400, block)])
    assert [b.tokens for b in C.breakpoints(cur)] == [1700]


def test_an_unchanged_conversation_moving_its_breakpoint_is_no_cache_break() -> None:
    prefix = C.shared_prefix(turn([system(), question(0)]), turn([system(), history(300, 1), question(1)]))
    assert prefix.reason == C.KEPT and prefix.tokens == 1600


def test_openai_shortfall_keeps_its_128_token_step() -> None:
    assert C.read_shortfall(provider=C.OPENAI, expected_cached=1152, reported_cached=1024)
    assert not C.read_shortfall(provider=C.OPENAI, expected_cached=1152, reported_cached=1100)
    assert not C.read_shortfall(provider=C.ANTHROPIC, expected_cached=1600, reported_cached=None)


def test_reported_writes_price_the_actual_cost_and_show_what_was_written_beyond_the_rules() -> None:
    price = Price(3.0, 0.3, 3.75, 15.0)
    expected = C.Expected(cached=1600, written=300, write_long=False)
    # The provider missed the entry and rewrote the whole 1900-token prefix.
    c = C.cost(
        price=price,
        prompt_tokens=2000,
        completion_tokens=0,
        expected=expected,
        potential=expected,
        reported_cached=0,
        reported_written=1900,
    )
    assert c.expected == pytest.approx((100 * 3.0 + 1600 * 0.3 + 300 * 3.75) / 1e6)
    assert c.actual == pytest.approx((100 * 3.0 + 1900 * 3.75) / 1e6)
    assert C.writes_beyond(expected=expected, reported_written=1900) == 1600
    assert C.writes_beyond(expected=expected, reported_written=None) == 0


def test_one_hour_writes_up_to_the_last_long_breakpoint_cost_twice_the_input() -> None:
    price = Price(3.0, 0.3, 3.75, 15.0)
    # System (1h) at 1500, question (5m) at 1900: first turn writes 1500 at 2x and 400 at 1.25x.
    cur = turn([system(ttl="1h"), history(300, 1), question(1)])
    e = C.expected_cache(
        provider=C.ANTHROPIC,
        model=SONNET,
        prefix=C.shared_prefix(None, cur),
        prev=None,
        cur=cur,
        prompt_tokens=1900,
        gap_s=None,
    )
    assert (e.cached, e.written, e.long_tokens) == (0, 1900, 1500)
    c = C.cost(
        price=price, prompt_tokens=1900, completion_tokens=0, expected=e, potential=e, reported_cached=None
    )
    assert c.expected == pytest.approx((1500 * 6.0 + 400 * 3.75) / 1e6)


def test_a_breakpoint_that_moved_does_not_hide_why_a_block_changed() -> None:
    prev = turn([system(body="Now: 2026-12-01 08:00", cached=True), question(0)])
    cur = turn([system(body="Now: 2026-12-01 08:05"), question(1)])
    prefix = C.shared_prefix(prev, cur)
    assert (prefix.reason, prefix.key) == (C.TIMESTAMP, "system")


# --- through ingest and the analyzer ---------------------------------------------------------
def _wire_turn(t: int, *, cached: int, written: int | None = None) -> dict[str, Any]:
    blocks = [
        block("system", "system", messages=[text("system", "You are a travel assistant.")], tokens=1500)
    ]
    if t:
        past: list[dict[str, Any]] = []
        for i in range(t):
            past += [text("user", f"question {i}"), text("assistant", f"answer {i}")]
        blocks.append(block("history", "history", messages=past, tokens=300 * t))
    blocks.append(block("user", "user", messages=[text("user", f"question {t}", cached=True)], tokens=100))
    prompt = sum(b["tokens"] for b in blocks)
    return snapshot(
        session_id="claude-incremental",
        turn=t,
        blocks=blocks,
        model=SONNET,
        context_window=200_000,
        ts=datetime(2026, 12, 1, 8, 0, tzinfo=UTC) + timedelta(seconds=30 * t),
        output={
            "text": "ok",
            "usage": {"prompt_tokens": prompt, "completion_tokens": 10, "cached_tokens": cached}
            | ({"cache_write_tokens": written} if written is not None else {}),
        },
    )


@pytest.mark.django_db
def test_an_incremental_claude_conversation_is_read_written_and_flagged_after_ingest(
    api: Any, project: Any
) -> None:
    # Turn 1 reads turn 0's 1600 as reported; turn 2 should read turn 1's 1500 + 300 + 100 = 1900
    # but the provider reports 0.
    snaps = [_wire_turn(0, cached=0), _wire_turn(1, cached=1600), _wire_turn(2, cached=0)]
    r = api.post_snapshots(snaps)
    assert r.status_code == 200 and r.json()["created"] == 3, r.content
    found = [selectors.snapshot_by_uuid(project=project, snapshot_id=s["snapshot_id"]) for s in snaps]
    stored = [s for s in found if s is not None]
    assert len(stored) == 3
    cache_analyze(project_id=project.pk, snapshot_refs=[s.id for s in stored])
    rows = {row.turn: row for row in TurnCache.objects.filter(project=project)}
    assert [(rows[t].expected_cached, rows[t].expected_written) for t in range(3)] == [
        (0, 1600),
        (1600, 300),  # 1900 - 1600
        (1900, 300),  # 2200 - 1900
    ]
    assert rows[2].reason == C.KEPT
    assert rows[2].potential_cached == 1900 <= stored[1].total_tokens
    # Lost: the 1900 tokens that could have been read at 3.00 - 0.30 dollars per million.
    assert rows[2].cost_lost == pytest.approx(1900 * (3.0 - 0.3) / 1e6)
    assert turn_context(project=project, snapshot=stored[1])["cache_shortfall"] is False
    assert turn_context(project=project, snapshot=stored[2])["cache_shortfall"] is True


@pytest.mark.django_db
def test_the_providers_reported_writes_price_the_actual_cost_after_ingest(api: Any, project: Any) -> None:
    # Turn 1 (1500 + 300 + 100 = 1900 tokens) reports 1000 read and 900 written where the rules
    # expect 1600 read and 300 written: the actual cost is priced with what the provider reported.
    snaps = [_wire_turn(0, cached=0, written=1600), _wire_turn(1, cached=1000, written=900)]
    assert api.post_snapshots(snaps).json()["created"] == 2
    stored = [selectors.snapshot_by_uuid(project=project, snapshot_id=s["snapshot_id"]) for s in snaps]
    cache_analyze(project_id=project.pk, snapshot_refs=[s.id for s in stored if s is not None])
    row = TurnCache.objects.get(project=project, turn=1)
    assert (row.expected_cached, row.expected_written, row.reported_cached) == (1600, 300, 1000)
    out = 10 * 15.0  # completion tokens at the output price
    # Prices per million: input 3.00, cache read 0.30, cache write 3.75.
    assert row.cost_actual == pytest.approx((0 * 3.0 + 1000 * 0.3 + 900 * 3.75 + out) / 1e6)
    assert row.cost_expected == pytest.approx((0 * 3.0 + 1600 * 0.3 + 300 * 3.75 + out) / 1e6)
