"""The prompt-cache lens's rules, ORM-free: the shared prefix, why it ends, the providers'
caching rules and the cost."""

from __future__ import annotations

import json
from typing import Any

import pytest

from insights import cache as C
from insights.prices import DEFAULT_PRICES, Price


def msg(content: Any, role: str = "system", **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, **extra}


def turn(
    blocks: list[tuple[str, str, int, list[dict[str, Any]]]], params: dict[str, Any] | None = None
) -> C.TurnBlocks:
    """BLOCKS as (key, kind, tokens, messages); the content hash is the messages' JSON."""
    return C.TurnBlocks(
        hashes=[json.dumps(m, sort_keys=True) for _, _, _, m in blocks],
        keys=[k for k, _, _, _ in blocks],
        kinds=[kd for _, kd, _, _ in blocks],
        tokens=[t for _, _, t, _ in blocks],
        params=params or {},
        messages={i: m for i, (_, _, _, m) in enumerate(blocks)},
    )


SYSTEM = ("system", "system", 1500, [msg("You are a travel assistant.")])
TOOLS = ("tools", "tools", 600, [msg('[{"name": "search"}, {"name": "book"}]')])
MEMORY = ("memory", "memory", 300, [msg("Memory: window seat")])


def user(n: int) -> tuple[str, str, int, list[dict[str, Any]]]:
    return ("user", "user", 20, [msg(f"question {n}", role="user")])


def test_first_turn_shares_nothing() -> None:
    p = C.shared_prefix(None, turn([SYSTEM, user(0)]))
    assert (p.blocks, p.tokens, p.reason) == (0, 0, C.FIRST_TURN)


def test_appended_turn_keeps_the_whole_previous_prompt() -> None:
    prev = turn([SYSTEM, MEMORY])
    cur = turn([SYSTEM, MEMORY, user(1)])
    p = C.shared_prefix(prev, cur)
    assert (p.blocks, p.tokens, p.reason) == (2, 1800, C.KEPT)


def test_only_a_new_question_at_the_end_is_no_break() -> None:
    p = C.shared_prefix(turn([SYSTEM, MEMORY, user(0)]), turn([SYSTEM, MEMORY, user(1)]))
    assert (p.blocks, p.tokens, p.reason, p.key, p.position) == (2, 1800, C.TAIL, "user", 2)
    assert p.reason in C.NOT_BREAKS


def test_the_previous_question_moved_into_history_keeps_the_whole_prompt() -> None:
    q0 = msg("question 0", role="user")
    prev = turn([SYSTEM, ("history", "history", 100, [msg("hi", role="user")]), ("user", "user", 20, [q0])])
    cur = turn(
        [
            SYSTEM,
            ("history", "history", 160, [msg("hi", role="user"), q0, msg("answer", role="assistant")]),
            user(1),
        ]
    )
    p = C.shared_prefix(prev, cur)
    assert (p.reason, p.tokens, p.blocks) == (C.KEPT, 1620, 1)  # history now runs past the prefix


@pytest.mark.parametrize(
    ("before", "after", "reason"),
    [
        ("Today is 2026-12-01T08:00:00Z. Be brief.", "Today is 2026-12-01T08:05:13Z. Be brief.", C.TIMESTAMP),
        ("Now: Tue 08:00. Be brief.", "Now: Tue 08:05. Be brief.", C.TIMESTAMP),
        (
            "request 0b6f3c1e-6a43-4d0e-9a53-3f1f0f8f2a10 follows",
            "request 9d2a1c7e-1b43-4e0e-8a53-1f1f0f8f2a77 follows",
            C.VOLATILE_ID,
        ),
        ("trace req-1234 follows", "trace req-9876 follows", C.VOLATILE_ID),
        ('{"a": 1, "b": [1, 2]}', '{"b":[1,2],"a":1}', C.JSON_RESERIALISED),
        ("You are a travel assistant.", "You are a hotel assistant.", C.NEW_CONTENT),
    ],
    ids=["iso-timestamp", "clock-time", "uuid", "request-id", "json-bytes", "new-text"],
)
def test_why_an_early_block_changed(before: str, after: str, reason: str) -> None:
    prev = turn([("system", "system", 1500, [msg(before)]), MEMORY, user(0)])
    cur = turn([("system", "system", 1500, [msg(after)]), MEMORY, user(0)])
    p = C.shared_prefix(prev, cur)
    assert p.reason == reason, p.detail
    assert (p.blocks, p.tokens, p.key, p.position) == (0, 0, "system", 0)


def test_timestamp_detail_names_the_values() -> None:
    _, detail = C.content_reason([msg("at 2026-12-01 08:00")], [msg("at 2026-12-01 09:30")])
    assert "08:00" in detail and "09:30" in detail


def test_tool_definitions_reordered_in_a_block() -> None:
    reordered = ("tools", "tools", 600, [msg('[{"name": "book"}, {"name": "search"}]')])
    p = C.shared_prefix(turn([SYSTEM, TOOLS, user(0)]), turn([SYSTEM, reordered, user(0)]))
    assert (p.reason, p.key, p.blocks, p.tokens) == (C.TOOLS_REORDERED, "tools", 1, 1500)


def test_tools_in_the_request_parameters_reordered_share_nothing() -> None:
    a = {
        "tools": [
            {"type": "function", "function": {"name": "search"}},
            {"type": "function", "function": {"name": "book"}},
        ],
        "temperature": 0,
    }
    b = {**a, "tools": list(reversed(a["tools"])), "temperature": 0.7}
    p = C.shared_prefix(turn([SYSTEM, user(0)], a), turn([SYSTEM, user(0)], b))
    assert (p.reason, p.blocks, p.tokens, p.key) == (C.TOOLS_REORDERED, 0, 0, "params")


def test_sampling_parameters_do_not_change_the_prefix() -> None:
    p = C.shared_prefix(
        turn([SYSTEM, user(0)], {"temperature": 0}), turn([SYSTEM, user(1)], {"temperature": 1})
    )
    assert (p.reason, p.blocks, p.key) == (C.TAIL, 1, "user")


def test_response_format_change_breaks_from_the_start() -> None:
    p = C.shared_prefix(turn([SYSTEM], {"response_format": {"type": "json_object"}}), turn([SYSTEM, user(0)]))
    assert (p.reason, p.blocks) == (C.PARAMS_CHANGED, 0)
    assert "params.response_format" in p.detail


def test_volatile_block_moved_in_front_is_a_reorder() -> None:
    p = C.shared_prefix(turn([SYSTEM, MEMORY, user(0)]), turn([MEMORY, SYSTEM, user(0)]))
    assert (p.reason, p.blocks, p.key) == (C.REORDER, 0, "memory")


def test_new_block_inserted_before_older_ones() -> None:
    retrieval = ("retrieval", "retrieval", 400, [msg("doc 1")])
    p = C.shared_prefix(turn([SYSTEM, MEMORY, user(0)]), turn([SYSTEM, retrieval, MEMORY, user(0)]))
    assert (p.reason, p.blocks, p.key, p.tokens) == (C.INSERTED, 1, "retrieval", 1500)


def test_block_removed() -> None:
    p = C.shared_prefix(turn([SYSTEM, MEMORY, user(0)]), turn([SYSTEM, user(0)]))
    assert (p.reason, p.blocks, p.key) == (C.REMOVED, 1, "memory")


def test_history_that_grows_in_front_of_later_blocks_keeps_its_old_messages() -> None:
    h0 = ("history", "history", 400, [msg("hi", role="user"), msg("hello", role="assistant")])
    h1 = ("history", "history", 500, [*h0[3], msg("more", role="user")])
    p = C.shared_prefix(turn([SYSTEM, h0, MEMORY]), turn([SYSTEM, h1, MEMORY]))
    assert (p.reason, p.blocks, p.tokens, p.key) == (C.GREW, 1, 1900, "history")


def test_partly_equal_block_counts_its_equal_leading_messages() -> None:
    h0 = ("history", "history", 400, [msg("a" * 100, role="user"), msg("x" * 100, role="assistant")])
    h1 = ("history", "history", 400, [msg("a" * 100, role="user"), msg("y" * 100, role="assistant")])
    p = C.shared_prefix(turn([SYSTEM, h0]), turn([SYSTEM, h1]))
    assert p.reason == C.NEW_CONTENT
    assert 1500 + 150 <= p.tokens <= 1500 + 250


# --- providers -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "params", "tags", "provider"),
    [
        ("gpt-4o-2024-08-06", {}, {}, C.OPENAI),
        ("o4-mini", {}, {}, C.OPENAI),
        ("openai/gpt-5", {}, {}, C.OPENAI),
        ("claude-sonnet-4-20250514", {}, {}, C.ANTHROPIC),
        ("anthropic/claude-3-5-haiku", {}, {}, C.ANTHROPIC),
        ("my-proxy-model", {}, {"provider": "anthropic"}, C.ANTHROPIC),
        ("gemma-3-270m", {}, {}, C.OTHER),
    ],
)
def test_provider_from_model_name_or_field(
    model: str, params: dict[str, Any], tags: dict[str, Any], provider: str
) -> None:
    assert C.provider_of(model, params, tags) == provider


def _expected(
    provider: str,
    prev: C.TurnBlocks | None,
    cur: C.TurnBlocks,
    gap: float | None = 10.0,
    model: str = "gpt-4o",
) -> C.Expected:
    prefix = C.shared_prefix(prev, cur)
    return C.expected_cache(
        provider=provider,
        model=model,
        prefix=prefix,
        prev=prev,
        cur=cur,
        prompt_tokens=sum(cur.tokens),
        gap_s=gap,
    )


@pytest.mark.parametrize(
    ("system_tokens", "cached"),
    [(1000, 0), (1023, 0), (1024, 1024), (1151, 1024), (1152, 1152), (5000, 4992)],
)
def test_openai_caches_from_1024_tokens_in_128_token_steps(system_tokens: int, cached: int) -> None:
    sysb = ("system", "system", system_tokens, [msg("rules")])
    e = _expected(C.OPENAI, turn([sysb, user(0)]), turn([sysb, user(1)]))
    assert e.cached == cached
    assert e.written == 0


def test_openai_cache_expires_after_inactivity() -> None:
    e = _expected(C.OPENAI, turn([SYSTEM, user(0)]), turn([SYSTEM, user(1)]), gap=3600)
    assert e.cached == 0 and "lifetime" in e.note
    params = {"prompt_cache_retention": "24h"}
    e = _expected(C.OPENAI, turn([SYSTEM, user(0)], params), turn([SYSTEM, user(1)], params), gap=3600)
    assert e.cached == 1408


def cc(text: str, ttl: str | None = None) -> dict[str, Any]:
    control: dict[str, Any] = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    return msg([{"type": "text", "text": text, "cache_control": control}])


def test_anthropic_without_breakpoints_caches_nothing() -> None:
    e = _expected(C.ANTHROPIC, turn([SYSTEM, user(0)]), turn([SYSTEM, user(1)]), model="claude-sonnet-4")
    assert (e.cached, e.written) == (0, 0)
    assert "breakpoints" in e.note


def test_anthropic_reads_up_to_the_breakpoint_and_writes_the_rest() -> None:
    sysb = ("system", "system", 1500, [cc("rules")])
    hist0 = ("history", "history", 800, [cc("h0")])
    hist1 = ("history", "history", 900, [cc("h1")])
    first = _expected(C.ANTHROPIC, None, turn([sysb, hist0, user(0)]), gap=None, model="claude-sonnet-4")
    assert (first.cached, first.written) == (0, 2300)
    e = _expected(
        C.ANTHROPIC, turn([sysb, hist0, user(0)]), turn([sysb, hist1, user(1)]), model="claude-sonnet-4"
    )
    assert e.cached == 1500  # the system breakpoint; history changed after it
    assert e.written == 900  # up to this turn's last breakpoint
    assert not e.write_long


def test_anthropic_ttl_five_minutes_or_one_hour() -> None:
    short = ("system", "system", 1500, [cc("rules")])
    long = ("system", "system", 1500, [cc("rules", "1h")])
    late = 600.0
    assert (
        _expected(
            C.ANTHROPIC, turn([short, user(0)]), turn([short, user(1)]), gap=late, model="claude-sonnet-4"
        ).cached
        == 0
    )
    e = _expected(
        C.ANTHROPIC, turn([long, user(0)]), turn([long, user(1)]), gap=late, model="claude-sonnet-4"
    )
    assert e.cached == 1500 and e.write_long is False  # nothing new written after the read


def test_anthropic_haiku_needs_2048_tokens() -> None:
    sysb = ("system", "system", 1500, [cc("rules")])
    assert (
        _expected(C.ANTHROPIC, turn([sysb, user(0)]), turn([sysb, user(1)]), model="claude-3-5-haiku").cached
        == 0
    )


def test_at_most_four_breakpoints_count() -> None:
    blocks = [(f"b{i}", "other", 100, [cc(f"t{i}")]) for i in range(6)]
    assert [b.position for b in C.breakpoints(turn(blocks))] == [0, 1, 2, 3]


# --- cost ----------------------------------------------------------------------------------
def test_cost_with_and_without_cache_and_money_lost() -> None:
    price = DEFAULT_PRICES["gpt-4o"]
    expected = C.Expected(cached=1024, written=0, write_long=False)
    potential = C.Expected(cached=2048, written=0, write_long=False)
    c = C.cost(
        price=price,
        prompt_tokens=3000,
        completion_tokens=100,
        expected=expected,
        potential=potential,
        reported_cached=512,
    )
    assert c.no_cache == pytest.approx((3000 * 2.5 + 100 * 10) / 1e6)
    assert c.expected == pytest.approx(((3000 - 1024) * 2.5 + 1024 * 1.25 + 100 * 10) / 1e6)
    assert c.actual == pytest.approx(((3000 - 512) * 2.5 + 512 * 1.25 + 100 * 10) / 1e6)
    assert c.lost == pytest.approx((2048 - 512) * (2.5 - 1.25) / 1e6)


def test_anthropic_cache_writes_cost_more() -> None:
    price = Price(3.0, 0.3, 3.75, 15.0)
    write5 = C.cost(
        price=price,
        prompt_tokens=2000,
        completion_tokens=0,
        expected=C.Expected(0, 2000, False),
        potential=C.Expected(0, 0, False),
        reported_cached=None,
    )
    write60 = C.cost(
        price=price,
        prompt_tokens=2000,
        completion_tokens=0,
        expected=C.Expected(0, 2000, True),
        potential=C.Expected(0, 0, False),
        reported_cached=None,
    )
    assert write5.expected == pytest.approx(2000 * 3.75 / 1e6)
    assert write60.expected == pytest.approx(2000 * 6.0 / 1e6)
    assert write5.actual is None
