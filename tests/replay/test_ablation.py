"""Variant operations and rendering: the unchanged context reproduces the original request."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ingest import selectors as ingest_selectors
from replay import ablation
from replay.errors import VariantError
from tests import factories as f


def _blocks(*keys: str) -> list[dict[str, Any]]:
    return [
        {"key": k, "kind": k, "tokens": 10, "messages": [{"role": "system", "content": f"{k} text"}]}
        for k in keys
    ]


def _keys(blocks: list[dict[str, Any]]) -> list[str]:
    return [b["key"] for b in blocks]


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        ({"op": "remove", "key": "memory"}, ["system", "tools", "history", "user"]),
        ({"op": "move", "key": "user", "to": "front"}, ["user", "system", "tools", "memory", "history"]),
        ({"op": "move", "key": "system", "to": "end"}, ["tools", "memory", "history", "user", "system"]),
        ({"op": "move", "key": "system", "to": "middle"}, ["tools", "memory", "system", "history", "user"]),
        (
            {"op": "move", "key": "memory", "to": "before", "anchor": "system"},
            ["memory", "system", "tools", "history", "user"],
        ),
        (
            {"op": "move", "key": "system", "to": "after", "anchor": "history"},
            ["tools", "memory", "history", "system", "user"],
        ),
        ({"op": "keep_only", "keys": ["user", "system"]}, ["system", "user"]),
    ],
    ids=["remove", "move-front", "move-end", "move-middle", "move-before", "move-after", "keep-only"],
)
def test_operations_reorder_the_block_list(op: dict[str, Any], expected: list[str]) -> None:
    blocks = _blocks("system", "tools", "memory", "history", "user")
    assert _keys(ablation.apply_operations(blocks, [op])) == expected
    assert _keys(blocks) == ["system", "tools", "memory", "history", "user"]  # input untouched


def test_truncate_keeps_the_first_n_tokens_and_the_message_structure() -> None:
    long = " ".join(f"word{i}" for i in range(200))
    blocks = [
        {
            "key": "retrieval",
            "kind": "retrieval",
            "tokens": 400,
            "messages": [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": long},
            ],
        }
    ]
    out = ablation.apply_operations(blocks, [{"op": "truncate", "key": "retrieval", "tokens": 20}])
    msgs = out[0]["messages"]
    assert [m["role"] for m in msgs] == ["assistant", "tool"]
    assert msgs[0]["tool_calls"] == blocks[0]["messages"][0]["tool_calls"]
    assert msgs[1]["tool_call_id"] == "c1"
    assert ablation.count_tokens(msgs[1]["content"]) == 20
    assert long.startswith(msgs[1]["content"])


def test_replace_swaps_the_block_text_and_keeps_its_role() -> None:
    blocks = [
        {"key": "memory", "kind": "memory", "tokens": 5, "messages": [{"role": "system", "content": "old"}]}
    ]
    out = ablation.apply_operations(blocks, [{"op": "replace", "key": "memory", "text": "Memory: Paris"}])
    assert out[0]["messages"] == [{"role": "system", "content": "Memory: Paris"}]


@pytest.mark.parametrize(
    "op",
    [
        {"op": "remove", "key": "nope"},
        {"op": "move", "key": "memory", "to": "sideways"},
        {"op": "move", "key": "memory", "to": "before"},
        {"op": "move", "key": "memory", "to": "after", "anchor": "nope"},
        {"op": "truncate", "key": "memory", "tokens": -1},
        {"op": "replace", "key": "memory"},
        {"op": "keep_only", "keys": []},
        {"op": "explode", "key": "memory"},
    ],
    ids=[
        "unknown-key",
        "bad-target",
        "no-anchor",
        "unknown-anchor",
        "negative-tokens",
        "no-text",
        "empty-keep",
        "unknown-op",
    ],
)
def test_invalid_operations_are_refused_with_a_reason(op: dict[str, Any]) -> None:
    with pytest.raises(VariantError):
        ablation.apply_operations(_blocks("system", "memory", "user"), [op])


@pytest.mark.django_db
@pytest.mark.parametrize("builder", [f.full_snapshot, f.snapshot], ids=["tool-calls", "plain"])
def test_rendering_an_unchanged_context_reproduces_the_original_request(
    api: Any, project: Any, builder: Any
) -> None:
    wire = builder(
        params={
            "temperature": 0.3,
            "max_tokens": 99,
            "seed": 7,
            "tools": [
                {"type": "function", "function": {"name": "search_flights", "parameters": {"type": "object"}}}
            ],
            "tool_choice": "auto",
        }
    )
    assert api.post_snapshots([wire]).status_code in (200, 207)
    snap = ingest_selectors.snapshot_by_uuid(project=project, snapshot_id=wire["snapshot_id"])
    blocks = ingest_selectors.snapshot_blocks(project_id=project.pk, snapshot_ref=snap.id)

    rendered = ablation.render_request(ablation.apply_operations(blocks, []), snap.params)

    original = {**wire["params"], "messages": [m for b in wire["blocks"] for m in b["messages"]]}
    assert rendered == original
    assert json.dumps(rendered, sort_keys=True) == json.dumps(original, sort_keys=True)
    if builder is f.full_snapshot:
        calls = [m for m in rendered["messages"] if m.get("tool_calls")]
        assert calls and calls[0]["tool_calls"][0]["function"]["arguments"] == '{"day":"fri"}'
        assert [m["role"] for m in rendered["messages"]] == [
            "system",
            "system",
            "user",
            "assistant",
            "tool",
            "user",
        ]


def test_the_transcript_keeps_every_system_message_and_tool_call() -> None:
    msgs = ablation.render_messages(
        [
            {"key": "system", "messages": [{"role": "system", "content": "You are terse."}]},
            {"key": "memory", "messages": [{"role": "system", "content": "Memory: destination Guangzhou"}]},
            {
                "key": "history",
                "messages": [
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "search_flights", "arguments": '{"day":"fri"}'},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c1", "content": "timeout"},
                ],
            },
            {"key": "user", "messages": [{"role": "user", "content": "Where to?"}]},
        ]
    )
    text = ablation.render_transcript(msgs)
    assert "System: You are terse." in text
    assert "System: Memory: destination Guangzhou" in text
    # The call keeps its id, and its result names the call it answers.
    assert '[tool call c1: search_flights({"day":"fri"})]' in text
    assert "Tool result (c1): timeout" in text
    assert text.endswith("User: Where to?\nAssistant:")
    # Every label the transcript writes at a line start stops the answer, "Assistant:" too.
    stop = ablation.transcript_stop(msgs)
    labels = {line.split(":", 1)[0] for line in text.split("\n") if ":" in line}
    assert labels == {"System", "Assistant", "Tool result (c1)", "User"}
    for label in labels:
        assert any(("\n" + label + ":").startswith(s) for s in stop), (label, stop)
    assert "\nAssistant:" in stop and "\nTool result (" in stop


def test_the_saved_parameters_go_as_saved_defaults_fill_in_and_overrides_win() -> None:
    req = {
        "temperature": 0.2,
        "max_tokens": 256,
        "stop": ["END"],
        "tools": [{"x": 1}],
        "seed": 7,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    path, body = ablation.call_body(
        request=req,
        model="m",
        mode="chat",
        endpoint_params={"seed": 42, "temperature": 0, "max_tokens": 64, "top_p": 0.5},
    )
    _, unseeded = ablation.call_body(
        request={"messages": req["messages"]}, model="m", mode="chat",
        endpoint_params={"seed": 42, "stop": ["\n"], "max_tokens": 64},
    )
    assert unseeded == {"model": "m", "messages": req["messages"], "max_tokens": 64}
    assert path == "/chat/completions"
    # The endpoint's defaults never replace a saved value; they fill in only top_p (never a seed).
    assert body == {
        "model": "m",
        "messages": req["messages"],
        "temperature": 0.2,
        "max_tokens": 256,
        "stop": ["END"],
        "tools": [{"x": 1}],
        "seed": 7,
        "top_p": 0.5,
    }
    _, body = ablation.call_body(request=req, model="m", mode="chat", overrides={"max_tokens": 16})
    assert body["max_tokens"] == 16 and body["temperature"] == 0.2
    # A baseline resample leaves the saved seed out unless the job fixes one.
    _, body = ablation.call_body(request=req, model="m", mode="chat", resample=True)
    assert "seed" not in body and body["temperature"] == 0.2
    _, body = ablation.call_body(request=req, model="m", mode="chat", resample=True, overrides={"seed": 3})
    assert body["seed"] == 3


def test_the_transcript_is_used_only_where_the_endpoint_needs_it() -> None:
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "system", "content": "Memory: M"},
        {"role": "user", "content": "Q"},
    ]
    req = {"temperature": 0, "stop": ["END"], "tools": [{"x": 1}], "messages": msgs}
    plan = ablation.build_call(request=req, model="m", mode="chat")
    assert plan.path == "/chat/completions" and plan.mode == "chat" and not plan.note
    plan = ablation.build_call(request=req, model="m", mode="chat", drops_later_system=True)
    assert plan.path == "/completions" and "drops system messages after the first" in plan.note
    assert "tools" not in plan.body and plan.body["prompt"].startswith("System: Tools available:")
    # The saved stop stays, and every label of the transcript stops the answer.
    assert plan.body["stop"] == ["END", "\nSystem:", "\nUser:", "\nAssistant:"]
    # Without a later system message the chat template loses nothing: chat.
    plan = ablation.build_call(
        request={**req, "messages": msgs[1:]}, model="m", mode="chat", drops_later_system=True
    )
    assert plan.path == "/chat/completions"
    plan = ablation.build_call(request=req, model="m", mode="completions")
    assert plan.path == "/completions" and "set to the completions API" in plan.note


def test_removing_the_block_that_holds_the_tool_definitions_removes_them_from_the_request() -> None:
    blocks = [
        {"key": "system", "kind": "system", "tokens": 10, "messages": [{"role": "system", "content": "S"}]},
        {"key": "tools", "kind": "tools", "tokens": 30, "messages": []},
        {"key": "user", "kind": "user", "tokens": 10, "messages": [{"role": "user", "content": "Q"}]},
    ]
    tools = [{"type": "function", "function": {"name": "f"}}]
    params = {"temperature": 0, "tools": tools, "tool_choice": "auto"}
    base = ablation.render_variant(blocks, [], params)
    without = ablation.render_variant(blocks, [{"op": "remove", "key": "tools"}], params)
    assert "tools" in base and "tools" not in without and "tool_choice" not in without
    assert without["temperature"] == 0 and without["messages"] == base["messages"]
    plans = ablation.plan_variants(kind="loo", blocks=blocks, samples=2, params=params)
    assert [(p.target_key, p.no_change) for p in plans[1:]] == [
        ("system", False), ("tools", False), ("user", False)
    ]
    # Moving a block without messages changes nothing that is sent: detected, not run.
    (_, moved) = ablation.plan_variants(
        kind="move", blocks=blocks, block_key="tools", to="end", params=params
    )
    assert moved.no_change and moved.samples == 0
    assert ablation.estimate([plans[0], moved], blocks)["model_calls"] == 2


def test_leave_one_out_plans_one_variant_per_block_with_as_many_samples_as_the_baseline() -> None:
    blocks = _blocks("system", "tools", "memory", "user")
    plans = ablation.plan_variants(kind="loo", blocks=blocks, samples=3)
    assert [p.target_key for p in plans] == ["", "system", "tools", "memory", "user"]
    assert plans[0].is_baseline and [p.samples for p in plans] == [3] * 5
    est = ablation.estimate(plans, blocks)
    assert est["model_calls"] == 3 * len(blocks) + 3
    # Each variant costs its own (smaller) context three times; the baseline three full ones.
    full = ablation.context_tokens(blocks)
    assert est["prompt_tokens"] == 3 * full + sum(3 * (full - 10) for _ in blocks)
