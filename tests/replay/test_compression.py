"""Compression operations on a realistic saved context: the exact messages after each one, tool
calls kept with their results, the requests they render, and what a strategy removed."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from ctxobs import tokens as tok
from replay import ablation, compression
from replay.errors import NotApplicable, VariantError

COUNTER = tok.get_counter("cl100k_base")
FLIGHTS = [
    {"id": f"AF{100 + i}", "dep": f"0{i}:10", "price": 4000 + 10 * i, "fare": {"class": "Y", "rules": "..."}}
    for i in range(6)
]
BOOKING = {"status": "confirmed", "ref": "BK-7781", "seat": "14A", "price": 4210, "debug": {"trace": "x"}}
SEAT_MAP = {
    "booking": {"ref": "BK-7781", "seat": "14A", "fare": {"class": "Y", "price": 4210}},
    "alternatives": [
        {"seat": s, "price": 0, "notes": "aisle"} for s in ("15C", "21A", "22C", "30A", "31C", "40F")
    ],
    "trace": "abc",
}
DOCS = (
    "Retrieved documents:\n"
    "[1] CDG terminal 2E has lounges in halls K, L and M.\n"
    "[2] Seat changes on Air France are free up to 24 hours before departure.\n"
    "[3] Booking references have six characters.\n"
    "[4] Window seats are on the A and F sides.\n"
    "[5] Lounge access needs a business ticket or status."
)


def _call(cid: str, name: str, args: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        ],
    }


def _block(key: str, kind: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "key": key,
        "kind": kind,
        "messages": messages,
        "tokens": tok.messages_tokens(messages, COUNTER),
        "pinned": kind == "system",
    }


HISTORY = [
    {"role": "user", "content": "Find me a flight to Paris on Friday"},
    _call("c1", "search_flights", {"to": "CDG", "day": "fri"}),
    {"role": "tool", "tool_call_id": "c1", "content": json.dumps(FLIGHTS)},
    {"role": "assistant", "content": "AF100 leaves at 00:10 for 4,000 CNY."},
    {"role": "user", "content": "Book it. What is my booking reference?"},
    _call("c2", "get_booking", {"flight": "AF100"}),
    {"role": "tool", "tool_call_id": "c2", "content": json.dumps(BOOKING)},
    {"role": "assistant", "content": "Booked: reference BK-7781, seat 14A."},
    {"role": "user", "content": "Thanks. Is there a lounge at CDG?"},
    {"role": "assistant", "content": "Yes, terminal 2E has several lounges."},
]


def context() -> list[dict[str, Any]]:
    """system, tools, memory, a history with tool calls and results, retrieval with 5 documents,
    this turn's tool call and result, and the user's question: four turns in all."""
    return [
        _block("system", "system", [{"role": "system", "content": "You are a travel agent. Be brief."}]),
        _block(
            "tools", "tools", [{"role": "system", "content": '{"tools":["search_flights","get_booking"]}'}]
        ),
        _block(
            "memory", "memory", [{"role": "system", "content": "Prefers window seats. Home airport CAN."}]
        ),
        _block("history", "history", copy.deepcopy(HISTORY)),
        _block("retrieval", "retrieval", [{"role": "system", "content": DOCS}]),
        _block(
            "tool_results",
            "tool_results",
            [
                _call("c3", "seat_map", {"ref": "BK-7781"}),
                {
                    "role": "tool",
                    "tool_call_id": "c3",
                    "content": "```json\n" + json.dumps(SEAT_MAP) + "\n```",
                },
            ],
        ),
        _block("user", "user", [{"role": "user", "content": "Can I change my seat on BK-7781?"}]),
    ]


def _by_key(blocks: list[Any], key: str) -> dict[str, Any]:
    return next(b for b in blocks if b["key"] == key)


def _dropped(content: str, ref: str) -> str:
    line = " ".join(content.split())
    preview = line[:60].rstrip() + ("…" if len(line) > 60 else "")
    return f"[tool output dropped: {preview} ({COUNTER.count_text(content)} tokens) ref={ref}]"


def assert_valid_chat(messages: list[dict[str, Any]]) -> None:
    """Every tool message answers a call of the assistant message just before it (or of the
    other results of that message), and every call is answered before the next message."""
    pending: set[str] = set()
    for m in messages:
        if m["role"] == "tool":
            assert m["tool_call_id"] in pending, m
            pending.discard(m["tool_call_id"])
            continue
        assert not pending, f"calls {pending} have no result"
        if m["role"] == "assistant" and m.get("tool_calls"):
            pending = {c["id"] for c in m["tool_calls"]}
    assert not pending, f"calls {pending} have no result"


# --- drop_tool_output --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("op", "dropped"),
    [
        ({"op": "drop_tool_output", "older_than": 1}, {"c1", "c2", "c3"}),
        ({"op": "drop_tool_output", "older_than": 2}, {"c1", "c2"}),
        ({"op": "drop_tool_output", "older_than": 3}, {"c1"}),
        ({"op": "drop_tool_output", "older_than": 0, "key": "tool_results"}, {"c3"}),
        ({"op": "drop_tool_output", "older_than": 1, "key": "history"}, {"c1", "c2"}),
    ],
    ids=["last-turn", "last-two", "last-three", "one-block", "history-only"],
)
def test_tool_outputs_older_than_the_last_turns_leave_a_line_and_a_reference(
    op: dict[str, Any], dropped: set[str]
) -> None:
    blocks = context()
    out = ablation.apply_operations(blocks, [op])
    originals = {m["tool_call_id"]: m for b in context() for m in b["messages"] if m["role"] == "tool"}
    after = {m["tool_call_id"]: m for b in out for m in b["messages"] if m["role"] == "tool"}
    for cid, m in after.items():
        if cid in dropped:
            assert m == {
                "role": "tool",
                "tool_call_id": cid,
                "content": _dropped(originals[cid]["content"], cid),
            }
        else:
            assert m == originals[cid]
    assert blocks == context()  # the input is untouched
    for b, original in zip(out, context(), strict=True):
        if any(m.get("tool_call_id") in dropped for m in b["messages"]):
            assert b["modified"] is True and b["tokens"] is None
        else:
            assert b == original


def test_a_dropped_tool_output_reads_as_its_start_its_size_and_its_id() -> None:
    out = ablation.apply_operations(context(), [{"op": "drop_tool_output", "older_than": 2}])
    c2 = _by_key(out, "history")["messages"][6]
    n = COUNTER.count_text(json.dumps(BOOKING))
    assert c2["content"] == (
        '[tool output dropped: {"status": "confirmed", "ref": "BK-7781", "seat": "14A", "pr…'
        f" ({n} tokens) ref=c2]"
    )
    assert _by_key(out, "history")["tokens"] is None and _by_key(out, "history")["modified"] is True


def test_dropping_twice_finds_nothing_more_to_drop() -> None:
    once = ablation.apply_operations(context(), [{"op": "drop_tool_output", "older_than": 1}])
    with pytest.raises(NotApplicable, match="no tool output older than the last turn$"):
        ablation.apply_operations(once, [{"op": "drop_tool_output", "older_than": 1}])


def test_no_tool_output_old_enough_is_not_applicable() -> None:
    with pytest.raises(NotApplicable, match="older than the last 4 turns"):
        ablation.apply_operations(context(), [{"op": "drop_tool_output", "older_than": 4}])
    with pytest.raises(NotApplicable, match="in block 'tool_results'"):
        ablation.apply_operations(
            context(), [{"op": "drop_tool_output", "older_than": 2, "key": "tool_results"}]
        )


# --- summarize ---------------------------------------------------------------------------------
def test_the_summary_input_is_the_transcript_of_the_history_before_the_last_turns() -> None:
    op = {"op": "summarize", "before_last_turns": 2, "ratio": 0.25}
    si = compression.summarize_input(context(), op)
    assert si.messages_count == 8
    assert si.text == ablation.render_transcript(HISTORY[:8]).removesuffix("\nAssistant:")
    assert si.text.startswith(
        "User: Find me a flight to Paris on Friday\nAssistant: [tool call c1: search_flights("
    )
    assert si.text.endswith("Assistant: Booked: reference BK-7781, seat 14A.")
    assert si.tokens == tok.messages_tokens(HISTORY[:8], COUNTER)
    assert si.budget_tokens == round(0.25 * si.tokens)
    assert si.prompt.startswith("Summarise the conversation below")
    assert f"Use at most {si.budget_tokens} tokens" in si.prompt
    for section in ("Goal:", "Confirmed facts:", "Open items:", "Decisions:"):
        assert section in si.prompt
    assert si.prompt.endswith("\n\nThe conversation:\n" + si.text)
    assert si.content_hash == ablation.request_hash(HISTORY[:8])


def test_the_summary_budget_and_prompt_follow_the_operation() -> None:
    blocks = context()
    si = compression.summarize_input(blocks, {"op": "summarize", "key": "memory", "ratio": 0.1})
    assert si.messages_count == 1
    assert si.budget_tokens == compression.MIN_SUMMARY_BUDGET  # 10% of a short block is less
    si = compression.summarize_input(
        blocks,
        {"op": "summarize", "key": "history", "budget": 80, "prompt": "Keep the ids, {budget} tokens."},
    )
    assert si.budget_tokens == 80
    assert si.prompt.startswith("Keep the ids, 80 tokens.\n\nThe conversation:\nUser: Find me a flight")
    same = compression.summarize_input(context(), {"op": "summarize", "key": "history", "budget": 20})
    assert same.content_hash == si.content_hash
    assert compression.summarize_input(
        blocks, {"op": "summarize", "key": "memory", "budget": 20}
    ).content_hash != (si.content_hash)


def test_a_computed_summary_takes_the_place_of_the_history_before_the_last_turns() -> None:
    op = {
        "op": "summarize",
        "before_last_turns": 2,
        "ratio": 0.25,
        "summary": "Goal: fly to Paris. Ref BK-7781.",
    }
    out = ablation.apply_operations(context(), [op])
    history = _by_key(out, "history")
    assert history["messages"] == [
        {
            "role": "system",
            "content": "Summary of the earlier conversation:\nGoal: fly to Paris. Ref BK-7781.",
        },
        *HISTORY[8:],
    ]
    assert history["tokens"] is None and history["modified"] is True
    assert [b["key"] for b in out] == [b["key"] for b in context()]
    assert _by_key(out, "tool_results") == _by_key(context(), "tool_results")


def test_a_summarised_block_becomes_one_system_message() -> None:
    out = ablation.apply_operations(
        context(), [{"op": "summarize", "key": "history", "budget": 40, "summary": "Booked BK-7781."}]
    )
    assert _by_key(out, "history")["messages"] == [
        {"role": "system", "content": "Summary of the earlier conversation:\nBooked BK-7781."}
    ]


def test_summarising_spans_history_blocks_and_keeps_a_call_answered_outside_them() -> None:
    blocks = [
        _block("system", "system", [{"role": "system", "content": "Be brief."}]),
        _block("summary", "history", [{"role": "user", "content": "Earlier: plan a trip"}, HISTORY[3]]),
        _block("recent", "history", [HISTORY[4], _call("c9", "get_booking", {"ref": "BK-7781"})]),
        _block("tool_results", "tool_results", [{"role": "tool", "tool_call_id": "c9", "content": "ok"}]),
        _block("user", "user", [{"role": "user", "content": "And the seat?"}]),
    ]
    op = {"op": "summarize", "before_last_turns": 1, "budget": 20, "summary": "S"}
    assert compression.summarize_input(blocks, op).messages_count == 3
    out = ablation.apply_operations(blocks, [op])
    assert _by_key(out, "summary")["messages"] == [compression.summary_message("S")]
    # The call whose result sits in another block stays, right before that result.
    assert _by_key(out, "recent")["messages"] == [blocks[2]["messages"][1]]
    assert_valid_chat(ablation.render_messages(out))


def test_the_summary_input_takes_only_a_valid_summarize_operation() -> None:
    with pytest.raises(VariantError, match="either 'budget'"):
        compression.summarize_input(context(), {"op": "summarize", "key": "history"})
    with pytest.raises(VariantError, match="takes a summarize operation"):
        compression.summarize_input(context(), {"op": "top_k", "key": "retrieval", "k": 2})


def test_a_summary_not_yet_computed_cannot_be_applied() -> None:
    with pytest.raises(VariantError, match="the summary has not been computed") as exc:
        ablation.apply_operations(context(), [{"op": "summarize", "key": "history", "budget": 40}])
    assert not isinstance(exc.value, NotApplicable)


@pytest.mark.parametrize(
    ("op", "reason"),
    [
        ({"op": "summarize", "key": "nope", "budget": 40}, "no block with key 'nope' in this context"),
        ({"op": "summarize", "before_last_turns": 4, "budget": 40}, "no history before the last 4 turns"),
    ],
    ids=["unknown-key", "too-few-turns"],
)
def test_nothing_to_summarise_is_not_applicable(op: dict[str, Any], reason: str) -> None:
    with pytest.raises(NotApplicable, match=reason):
        compression.summarize_input(context(), op)
    with pytest.raises(NotApplicable, match=reason):
        ablation.apply_operations(context(), [{**op, "summary": "S"}])


# --- trim_json ---------------------------------------------------------------------------------
def test_trim_json_keeps_the_named_fields_and_the_first_items_in_the_fence() -> None:
    op = {
        "op": "trim_json",
        "key": "tool_results",
        "fields": ["booking", "ref", "seat", "alternatives"],
        "max_items": 2,
    }
    out = ablation.apply_operations(context(), [op])
    msgs = _by_key(out, "tool_results")["messages"]
    assert msgs[0] == context()[5]["messages"][0]  # the call is not JSON content: unchanged
    assert msgs[1] == {
        "role": "tool",
        "tool_call_id": "c3",
        "content": '```json\n{"booking":{"ref":"BK-7781","seat":"14A"},'
        '"alternatives":[{"seat":"15C"},{"seat":"21A"},"… 4 more of 6"]}\n```',
    }
    assert _by_key(out, "tool_results")["modified"] is True


def test_trim_json_cuts_lists_and_rewrites_compactly_leaving_text_alone() -> None:
    out = ablation.apply_operations(context(), [{"op": "trim_json", "key": "history", "max_items": 3}])
    msgs = _by_key(out, "history")["messages"]
    assert json.loads(msgs[2]["content"]) == [*FLIGHTS[:3], "… 3 more of 6"]
    assert msgs[2]["content"] == json.dumps(
        [*FLIGHTS[:3], "… 3 more of 6"], separators=(",", ":"), ensure_ascii=False
    )
    assert msgs[6]["content"] == json.dumps(BOOKING, separators=(",", ":"))
    assert [m for i, m in enumerate(msgs) if i not in (2, 6)] == [
        m for i, m in enumerate(HISTORY) if i not in (2, 6)
    ]


def test_trim_json_fields_reach_the_items_of_a_top_level_list_and_one_level_down() -> None:
    text = compression.trim_json_text(json.dumps(FLIGHTS[:2]), fields=["id", "fare", "class"], max_items=None)
    assert text == '[{"id":"AF100","fare":{"class":"Y"}},{"id":"AF101","fare":{"class":"Y"}}]'
    deep = {"a": {"b": {"b": 1, "c": 2}, "c": 3}, "z": 0}
    assert compression.trim_json_text(json.dumps(deep), fields=["a", "b"], max_items=None) == (
        '{"a":{"b":{"b":1,"c":2}}}'  # two levels down is left as it is
    )
    # An object with none of the fields is not emptied.
    assert compression.trim_json_text('{"x": {"y": 1}}', fields=["id"], max_items=None) == '{"x":{"y":1}}'
    assert compression.trim_json_text('[[1, 2, 3], {"l": [1, 2, 3]}]', fields=None, max_items=1) == (
        '[[1,"… 2 more of 3"],"… 1 more of 2"]'
    )
    assert compression.trim_json_text("not json {", fields=["id"], max_items=None) is None
    assert compression.trim_json_text("```python\n{}\n```", fields=None, max_items=1) is None


def test_trim_json_on_a_block_without_json_is_not_applicable() -> None:
    with pytest.raises(NotApplicable, match="no message of block 'memory' is JSON"):
        ablation.apply_operations(context(), [{"op": "trim_json", "key": "memory", "max_items": 2}])


# --- keep_last_turns ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "kept"),
    [(3, HISTORY[4:]), (2, HISTORY[8:]), (1, [])],
    ids=["three", "two", "one"],
)
def test_keep_last_turns_cuts_the_history_at_a_user_message(n: int, kept: list[dict[str, Any]]) -> None:
    out = ablation.apply_operations(context(), [{"op": "keep_last_turns", "n": n}])
    assert _by_key(out, "history")["messages"] == kept
    assert [b["key"] for b in out] == [b["key"] for b in context()]
    assert_valid_chat(ablation.render_messages(out))


def test_keep_last_turns_never_separates_a_call_from_its_results() -> None:
    blocks = [
        _block(
            "history", "history", [*HISTORY[:4], HISTORY[4], _call("c9", "get_booking", {"ref": "BK-7781"})]
        ),
        _block("tool_results", "tool_results", [{"role": "tool", "tool_call_id": "c9", "content": "ok"}]),
        _block("user", "user", [{"role": "user", "content": "And the seat?"}]),
    ]
    out = ablation.apply_operations(blocks, [{"op": "keep_last_turns", "n": 1}])
    assert _by_key(out, "history")["messages"] == [blocks[0]["messages"][5]]
    assert_valid_chat(ablation.render_messages(out))


def test_keep_last_turns_with_no_more_turns_than_kept_is_not_applicable() -> None:
    with pytest.raises(NotApplicable, match="nothing in the history before the last 4 turns"):
        ablation.apply_operations(context(), [{"op": "keep_last_turns", "n": 4}])
    with pytest.raises(NotApplicable, match="no history block"):
        ablation.apply_operations(context()[:3], [{"op": "keep_last_turns", "n": 1}])


# --- top_k -------------------------------------------------------------------------------------
def test_top_k_keeps_the_first_documents_of_one_message() -> None:
    out = ablation.apply_operations(context(), [{"op": "top_k", "key": "retrieval", "k": 2}])
    assert _by_key(out, "retrieval")["messages"] == [
        {
            "role": "system",
            "content": "Retrieved documents:\n"
            "[1] CDG terminal 2E has lounges in halls K, L and M.\n"
            "[2] Seat changes on Air France are free up to 24 hours before departure.",
        }
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Doc 1: alpha\nmore alpha\nDoc 2: beta\nDoc 3: gamma", "Doc 1: alpha\nmore alpha\nDoc 2: beta"),
        ("1. alpha\n2. beta\n3. gamma", "1. alpha\n2. beta"),
        ("alpha\n---\nbeta\n---\ngamma", "alpha\n---\nbeta"),
        ("- alpha\n- beta\n- gamma", "- alpha\n- beta"),
        ("alpha\nstill alpha\n\nbeta\n\n\ngamma", "alpha\nstill alpha\n\nbeta"),
    ],
    ids=["doc-headers", "numbered", "separators", "bullets", "paragraphs"],
)
def test_top_k_finds_documents_by_headers_separators_or_blank_lines(text: str, expected: str) -> None:
    blocks = [_block("retrieval", "retrieval", [{"role": "user", "content": text}])]
    out = ablation.apply_operations(blocks, [{"op": "top_k", "key": "retrieval", "k": 2}])
    assert out[0]["messages"] == [{"role": "user", "content": expected}]


def test_top_k_over_several_tool_results_keeps_the_calls_of_the_results_kept() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"s{i}",
                "type": "function",
                "function": {"name": "search", "arguments": f'{{"page":{i}}}'},
            }
            for i in range(3)
        ],
    }
    results = [{"role": "tool", "tool_call_id": f"s{i}", "content": f"result {i}"} for i in range(3)]
    blocks = [_block("retrieval", "retrieval", [call, *results]), _block("user", "user", [HISTORY[0]])]
    out = ablation.apply_operations(blocks, [{"op": "top_k", "key": "retrieval", "k": 1}])
    assert out[0]["messages"] == [{**call, "tool_calls": call["tool_calls"][:1]}, results[0]]
    assert_valid_chat(ablation.render_messages(out))


def test_top_k_keeps_results_whose_calls_are_in_another_block() -> None:
    blocks = [
        _block("history", "history", [HISTORY[0], _call("h1", "search", {"q": "lounge"})]),
        _block(
            "retrieval",
            "retrieval",
            [
                {"role": "tool", "tool_call_id": "h1", "content": "lounge K"},
                {"role": "system", "content": "doc A"},
                {"role": "system", "content": "doc B"},
            ],
        ),
        _block("user", "user", [HISTORY[4]]),
    ]
    out = ablation.apply_operations(blocks, [{"op": "top_k", "key": "retrieval", "k": 1}])
    assert out[1]["messages"] == blocks[1]["messages"][:2]
    assert_valid_chat(ablation.render_messages(out))


def test_top_k_with_no_more_documents_than_kept_is_not_applicable() -> None:
    with pytest.raises(NotApplicable, match="block 'retrieval' has no more than 5 documents"):
        ablation.apply_operations(context(), [{"op": "top_k", "key": "retrieval", "k": 5}])


# --- pin_to_prefix -----------------------------------------------------------------------------
def test_pin_to_prefix_moves_a_block_right_after_the_system_prompt_and_tools() -> None:
    out = ablation.apply_operations(context(), [{"op": "pin_to_prefix", "key": "retrieval"}])
    assert [b["key"] for b in out] == [
        "system",
        "tools",
        "retrieval",
        "memory",
        "history",
        "tool_results",
        "user",
    ]
    assert _by_key(out, "retrieval") == _by_key(context(), "retrieval")


@pytest.mark.parametrize("key", ["memory", "tools", "system"])
def test_pin_to_prefix_of_a_block_already_there_is_not_applicable(key: str) -> None:
    with pytest.raises(NotApplicable, match="already follows the system prompt and tools"):
        ablation.apply_operations(context(), [{"op": "pin_to_prefix", "key": key}])


# --- every operation ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "op",
    [
        {"op": "drop_tool_output", "older_than": 1, "key": "nope"},
        {"op": "summarize", "key": "nope", "budget": 40, "summary": "S"},
        {"op": "trim_json", "key": "nope", "max_items": 2},
        {"op": "keep_last_turns", "n": 1, "key": "nope"},
        {"op": "top_k", "key": "nope", "k": 2},
        {"op": "pin_to_prefix", "key": "nope"},
    ],
    ids=["drop_tool_output", "summarize", "trim_json", "keep_last_turns", "top_k", "pin_to_prefix"],
)
def test_an_operation_on_a_missing_block_is_not_applicable(op: dict[str, Any]) -> None:
    with pytest.raises(NotApplicable, match="^no block with key 'nope' in this context$"):
        ablation.apply_operations(context(), [op])


@pytest.mark.parametrize(
    ("op", "reason"),
    [
        ({"op": "drop_tool_output"}, "drop_tool_output needs 'older_than'"),
        ({"op": "drop_tool_output", "older_than": -1}, "needs 'older_than'"),
        ({"op": "drop_tool_output", "older_than": True}, "needs 'older_than'"),
        ({"op": "drop_tool_output", "older_than": 1, "key": ""}, "needs 'key'"),
        ({"op": "summarize", "budget": 40}, "either 'key' .* or 'before_last_turns'"),
        ({"op": "summarize", "key": "history", "before_last_turns": 2, "budget": 40}, "either 'key'"),
        ({"op": "summarize", "key": "history"}, "either 'budget' .* or 'ratio'"),
        ({"op": "summarize", "key": "history", "budget": 40, "ratio": 0.5}, "either 'budget'"),
        ({"op": "summarize", "key": "history", "budget": 8}, r"needs 'budget'.*>= 16"),
        ({"op": "summarize", "key": "history", "ratio": 0}, r"'ratio'.*\(0, 1\]"),
        ({"op": "summarize", "key": "history", "ratio": 1.5}, "'ratio'"),
        ({"op": "summarize", "key": "history", "ratio": 0.5, "prompt": " "}, "'prompt' must be a text"),
        ({"op": "summarize", "key": "history", "ratio": 0.5, "summary": 3}, "'summary' must be a text"),
        ({"op": "trim_json", "key": "tool_results"}, "'fields' .*'max_items'"),
        ({"op": "trim_json", "key": "tool_results", "fields": []}, "non-empty list of field names"),
        ({"op": "trim_json", "key": "tool_results", "max_items": 0}, "needs 'max_items'"),
        ({"op": "trim_json", "fields": ["id"]}, "trim_json needs 'key'"),
        ({"op": "keep_last_turns"}, "keep_last_turns needs 'n'"),
        ({"op": "top_k", "key": "retrieval", "k": "2"}, "top_k needs 'k'"),
        ({"op": "top_k", "k": 2}, "top_k needs 'key'"),
        ({"op": "pin_to_prefix"}, "pin_to_prefix needs 'key'"),
    ],
    ids=[
        "drop-no-turns",
        "drop-negative",
        "drop-bool",
        "drop-empty-key",
        "summarize-no-target",
        "summarize-two-targets",
        "summarize-no-size",
        "summarize-two-sizes",
        "summarize-tiny-budget",
        "summarize-zero-ratio",
        "summarize-big-ratio",
        "summarize-blank-prompt",
        "summarize-bad-summary",
        "trim-nothing",
        "trim-no-fields",
        "trim-zero-items",
        "trim-no-key",
        "keep-no-n",
        "top-k-text",
        "top-k-no-key",
        "pin-no-key",
    ],
)
def test_invalid_compression_operations_are_refused_with_a_reason(op: dict[str, Any], reason: str) -> None:
    with pytest.raises(VariantError, match=reason) as exc:
        ablation.validate_operation(op)
    assert not isinstance(exc.value, NotApplicable)


def test_validation_returns_only_the_fields_an_operation_takes() -> None:
    assert ablation.validate_operation({"op": "top_k", "key": "retrieval", "k": 2, "extra": 1}) == {
        "op": "top_k",
        "key": "retrieval",
        "k": 2,
    }
    assert ablation.validate_operation(
        {"op": "trim_json", "key": "t", "fields": ["id", "id", "title"], "max_items": 3}
    ) == {"op": "trim_json", "key": "t", "fields": ["id", "title"], "max_items": 3}
    assert ablation.validate_operation({"op": "summarize", "before_last_turns": 2, "ratio": 1}) == {
        "op": "summarize",
        "before_last_turns": 2,
        "ratio": 1.0,
    }


STRATEGY: list[dict[str, Any]] = [
    {"op": "drop_tool_output", "older_than": 2},
    {"op": "summarize", "before_last_turns": 2, "ratio": 0.25, "summary": "Goal: fly to Paris. Ref BK-7781."},
    {"op": "trim_json", "key": "tool_results", "fields": ["booking", "ref", "seat"]},
    {"op": "top_k", "key": "retrieval", "k": 2},
    {"op": "pin_to_prefix", "key": "retrieval"},
]


@pytest.mark.parametrize(
    "ops",
    [[op] for op in STRATEGY] + [[{"op": "keep_last_turns", "n": 2}], STRATEGY],
    ids=[op["op"] for op in STRATEGY] + ["keep_last_turns", "whole-strategy"],
)
def test_every_variant_renders_a_valid_chat_request(ops: list[dict[str, Any]]) -> None:
    params = {"temperature": 0.2, "tools": [{"type": "function", "function": {"name": "seat_map"}}]}
    request = ablation.render_variant(context(), ops, params)
    assert request["temperature"] == 0.2 and request["tools"] == params["tools"]
    assert_valid_chat(request["messages"])
    assert request["messages"] != ablation.render_request(context(), params)["messages"]
    assert request["messages"][-1] == {"role": "user", "content": "Can I change my seat on BK-7781?"}


def test_describe_labels_each_compression_operation() -> None:
    labels = [ablation.describe([ablation.validate_operation(op)]) for op in STRATEGY]
    assert labels == [
        "tool outputs older than the last 2 turns dropped",
        "history before the last 2 turns summarised to 25% of its tokens",
        "tool_results JSON trimmed (fields booking/ref/seat)",
        "top 2 documents of retrieval",
        "retrieval pinned after the system prompt and tools",
    ]
    assert ablation.describe(
        [
            {"op": "drop_tool_output", "older_than": 0, "key": "tool_results"},
            {"op": "summarize", "key": "memory", "budget": 40},
            {"op": "trim_json", "key": "t", "fields": ["id"], "max_items": 3},
            {"op": "keep_last_turns", "n": 3},
            {"op": "keep_last_turns", "n": 1, "key": "recent"},
        ]
    ) == (
        "tool outputs older than the last 0 turns dropped from tool_results; memory summarised to 40 tokens; "
        "t JSON trimmed (fields id, lists to 3 items); history cut to the last 3 turns; "
        "recent cut to the last turn"
    )


# --- a strategy's effect -----------------------------------------------------------------------
def test_strategy_effect_reports_tokens_and_what_each_block_lost() -> None:
    before = context()
    ops = [{"op": "remove", "key": "memory"}, *STRATEGY]
    after = ablation.apply_operations(before, ops)
    effect = compression.strategy_effect(before, after)
    assert effect["tokens_before"] == ablation.context_tokens(before)
    assert effect["tokens_after"] == ablation.context_tokens(after)
    assert effect["tokens_after"] < effect["tokens_before"]
    assert effect["ratio"] == pytest.approx(effect["tokens_after"] / effect["tokens_before"])

    def size(key: str) -> str:
        return f"({_by_key(before, key)['tokens']:,} → {ablation.block_tokens(_by_key(after, key)):,} tokens)"

    assert effect["removed"] == [
        f"memory removed ({_by_key(before, 'memory')['tokens']} tokens)",
        f"history: 8 messages summarised into 1 {size('history')}",
        f"retrieval: 1 message rewritten {size('retrieval')}",
        f"tool_results: 1 message rewritten {size('tool_results')}",
    ]
    assert effect["moved"] == ["retrieval"]


def test_strategy_effect_names_dropped_outputs_and_removed_messages() -> None:
    before = context()
    after = ablation.apply_operations(
        before, [{"op": "drop_tool_output", "older_than": 1}, {"op": "keep_last_turns", "n": 3}]
    )
    effect = compression.strategy_effect(before, after)
    history = (
        f"({_by_key(before, 'history')['tokens']:,} → {ablation.block_tokens(_by_key(after, 'history')):,}"
    )
    results = (
        f"({_by_key(before, 'tool_results')['tokens']:,} → "
        f"{ablation.block_tokens(_by_key(after, 'tool_results')):,}"
    )
    assert effect["removed"] == [
        f"history: 4 of 10 messages removed, 1 tool output dropped {history} tokens)",
        f"tool_results: 1 tool output dropped {results} tokens)",
    ]
    assert effect["moved"] == []
    unchanged = compression.strategy_effect(before, ablation.apply_operations(before, []))
    assert unchanged["removed"] == [] and unchanged["ratio"] == 1.0
