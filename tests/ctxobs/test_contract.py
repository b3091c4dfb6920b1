"""The wire contract from both sides: real SDK output posted to the real ingest API and read back.

What the server returns for a snapshot must equal what the SDK sent, as normalised by the one
shared validator (ctxobs.validate.validate_snapshot): same blocks in the same order, the same
messages byte for byte, the same counts, events, output and tags.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

import ctxobs
from core.services import project_create
from ctxobs.hashing import canonical_json, content_hash
from ctxobs.validate import parse_ts, validate_snapshot

pytestmark = pytest.mark.django_db(transaction=True)

BLOCK_FIELDS = ("key", "kind", "messages", "tokens", "estimated", "pinned", "compressed", "refs", "chars")


@pytest.fixture
def server(live_server: Any) -> tuple[str, str]:
    _, key = project_create(name="contract")
    return live_server.url, key


def read_back(url: str, key: str, snapshot_id: str) -> dict[str, Any]:
    r = httpx.get(f"{url}/api/v1/snapshots/{snapshot_id}", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return r.json()


def assert_round_trip(sent: dict[str, Any], stored: dict[str, Any]) -> None:
    norm, errors = validate_snapshot(sent)
    assert errors == [] and norm is not None
    for field in (
        "snapshot_id",
        "session_id",
        "turn",
        "agent",
        "params",
        "compression",
        "recall",
        "validation",
        "output",
        "tags",
        "retries",
        "fallback_used",
    ):
        assert stored[field] == norm[field], field
    assert parse_ts(stored["ts"]) == norm["ts"]
    assert {k: stored["model"][k] for k in norm["model"]} == norm["model"]
    assert len(stored["blocks"]) == len(norm["blocks"])
    for got, want in zip(stored["blocks"], norm["blocks"], strict=True):
        assert {k: got[k] for k in BLOCK_FIELDS} == {k: want[k] for k in BLOCK_FIELDS}
        assert canonical_json(got["messages"]) == canonical_json(want["messages"])
        assert got["hash"] == content_hash(want["messages"])
    assert stored["derived"]["total_tokens"] == sum(b["tokens"] for b in norm["blocks"])


def test_explicit_turn_snapshot_is_stored_and_read_back_identical(server) -> None:
    url, key = server
    sent: list[dict[str, Any]] = []
    obs = ctxobs.Client(url, key, flush_interval=0.05, flush_at_exit=False)
    tools_list = [
        {"type": "function", "function": {"name": "search_flights", "parameters": {"type": "object"}}}
    ]
    with obs.turn(
        session_id="contract-1",
        agent="travel-bot",
        model="gpt-4o",
        context_window=128_000,
        params={"temperature": 0},
        tags={"env": "test"},
    ) as t:
        t.block(
            "system",
            [{"role": "system", "content": "You are a travel assistant. Réponds en JSON. 旅行"}],
            pinned=True,
        )
        t.tools(tools_list)
        t.block("memory", [{"role": "system", "content": "Memory: destination Guangzhou; window seat"}])
        t.block(
            "history",
            [
                {"role": "user", "content": "Book me a flight on Friday"},
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
                {"role": "tool", "tool_call_id": "c1", "content": '{"status":"error","message":"timeout"}'},
            ],
        )
        t.block("user", [{"role": "user", "content": "Try again please", "name": "ann"}])
        t.recall("m-88", score=0.82, injected=True, block="memory", channel="vector", preview="Guangzhou")
        t.compression(
            "drop_tool_output",
            block="history",
            tokens_before=5210,
            tokens_after=640,
            watermark=0.68,
            items=["c0"],
            ref="spool/c0",
        )
        t.validation(
            "structure", "json_schema", passed=False, code="E_MISSING_FIELD", message="order_id missing"
        )
        t.validation("structure", "json_schema", passed=True, attempt=2)
        t.output(
            {
                "choices": [
                    {
                        "message": {"role": "assistant", "content": '{"order_id": "A1"}'},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 180, "completion_tokens": 9},
            },
            latency_ms=812.5,
        )
        sent.append(t.snapshot())
    assert obs.flush(timeout=20)
    assert obs.stats()["sent"] == 1 and obs.stats()["failed"] == 0
    assert_round_trip(sent[0], read_back(url, key, t.snapshot_id))

    # A resend (e.g. `ctxobs push` of a spool) is acknowledged as a duplicate, stored once.
    obs.record(sent[0])
    assert obs.flush(timeout=20)
    assert obs.stats()["duplicates"] == 1
    obs.close(timeout=2)


def test_instrumented_openai_call_is_stored_and_read_back_identical(server, provider) -> None:
    url, key = server
    obs = ctxobs.Client(url, key, flush_interval=0.05, flush_at_exit=False)
    llm = ctxobs.instrument_openai(openai.OpenAI(base_url=provider.url + "/v1", api_key="x"), obs)
    messages = [
        {"role": "system", "content": "You are terse."},
        ctxobs.tag({"role": "system", "content": "Retrieved: visa rules for China"}, "retrieval"),
        {"role": "user", "content": "Do I need a visa?"},
    ]
    llm.chat.completions.create(model="gpt-4o-mini", messages=messages, ctxobs_session="contract-2", seed=7)
    assert obs.flush(timeout=20)
    [snapshot_id] = [s["snapshot_id"] for s in _sessions_snapshots(url, key, "contract-2")]
    stored = read_back(url, key, snapshot_id)
    assert [b["key"] for b in stored["blocks"]] == ["system", "retrieval", "user"]
    assert [m for b in stored["blocks"] for m in b["messages"]] == provider.requests[0]["messages"]
    assert stored["params"] == {"seed": 7}
    assert stored["output"]["text"] == provider.reply_text
    assert stored["derived"]["prompt_tokens_reported"] == 42
    obs.close(timeout=2)


def test_an_item_the_api_rejects_is_reported_once_with_its_field_errors(server) -> None:
    url, key = server
    errors: list[ctxobs.CtxobsDeliveryError] = []
    # validate=False lets the bad item reach the server, as from an SDK with a stale validator.
    obs = ctxobs.Client(
        url, key, validate=False, on_error=errors.append, flush_interval=0.05, flush_at_exit=False
    )
    t = obs.turn(session_id="contract-3", model="gpt-4o")
    t.block("user", [{"role": "robot", "content": "hi"}])
    t.record()
    assert obs.flush(timeout=20)
    assert [e.kind for e in errors] == ["rejected"]
    assert errors[0].errors[0]["loc"][-1] == "role" and errors[0].errors[0]["hint"]
    obs.close(timeout=2)


def _sessions_snapshots(url: str, key: str, session_id: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{url}/api/v1/sessions/{session_id}/timeline", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return r.json()["turns"]
