"""POST /api/v1/snapshots: dedup, partial failure, limits, auth, gzip, derived values."""

from __future__ import annotations

import gzip
import json
import uuid

import pytest

from core.models import IngestKey
from core.services import ingest_key_revoke, project_create
from ctxobs.wire import LIMITS
from ingest.models import BLOCK_PINNED, AgentSession, BlockContent, Snapshot
from tests.factories import SYSTEM_PROMPT, block, full_snapshot, message, snapshot

pytestmark = pytest.mark.django_db


def test_same_batch_sent_twice_is_stored_once(api, project):
    batch = [snapshot(turn=i) for i in range(3)]
    first = api.post_snapshots(batch)
    again = api.post_snapshots(batch)
    assert first.status_code == 200 and again.status_code == 200
    assert [r["status"] for r in first.json()["results"]] == ["created"] * 3
    assert [r["status"] for r in again.json()["results"]] == ["duplicate"] * 3
    assert again.json()["duplicate"] == 3
    assert Snapshot.objects.filter(project=project).count() == 3
    assert AgentSession.objects.get(project=project).turn_count == 3


def test_duplicate_inside_one_batch_is_stored_once(api, project):
    s = snapshot()
    r = api.post_snapshots([s, s])
    assert [x["status"] for x in r.json()["results"]] == ["created", "duplicate"]
    assert Snapshot.objects.filter(project=project).count() == 1


def test_mixed_batch_stores_good_items_and_rejects_bad_with_field_errors(api, project):
    good = snapshot(turn=0)
    bad = snapshot(turn=1)
    bad["blocks"][0]["kind"] = "weird"
    del bad["model"]["context_window"]
    r = api.post_snapshots([good, bad, "not an object"])
    assert r.status_code == 207
    body = r.json()
    assert body["created"] == 1 and body["rejected"] == 2
    results = body["results"]
    assert results[0] == {"index": 0, "snapshot_id": good["snapshot_id"], "status": "created"}
    assert results[1]["status"] == "rejected"
    locs = {tuple(e["loc"]) for e in results[1]["errors"]}
    assert ("snapshots", 1, "blocks", 0, "kind") in locs
    assert ("snapshots", 1, "model", "context_window") in locs
    assert all(e["msg"] and e["hint"] for e in results[1]["errors"])
    assert results[2]["status"] == "rejected"
    assert Snapshot.objects.filter(project=project).count() == 1


def test_batch_with_only_bad_items_is_422(api):
    bad = snapshot()
    bad["ts"] = "2026-12-02T08:00:00"  # no timezone
    r = api.post_snapshots([bad])
    assert r.status_code == 422
    assert r.json()["results"][0]["errors"][0]["loc"] == ["snapshots", 0, "ts"]


@pytest.mark.parametrize(
    ("mutate", "limit_name"),
    [
        pytest.param(
            lambda s: s.update(
                blocks=[block(f"b{i}", "other", "x") for i in range(LIMITS.max_blocks_per_snapshot + 1)]
            ),
            "max_blocks_per_snapshot", id="blocks-per-snapshot",
        ),
        pytest.param(
            lambda s: s.update(blocks=[block("big", "retrieval", "y" * (LIMITS.max_chars_per_block + 1))]),
            "max_chars_per_block", id="chars-per-block",
        ),
    ],
)
def test_item_limits_reject_the_item_and_name_the_limit(api, project, mutate, limit_name):
    over = snapshot(turn=1)
    mutate(over)
    r = api.post_snapshots([snapshot(turn=0), over])
    assert r.status_code == 207
    err = r.json()["results"][1]["errors"][0]
    assert limit_name in err["msg"]
    assert Snapshot.objects.filter(project=project).count() == 1


def test_too_many_items_is_413_naming_the_limit(api, project):
    r = api.post_snapshots([snapshot(turn=i) for i in range(LIMITS.max_items_per_batch + 1)])
    assert r.status_code == 413
    assert "max_items_per_batch" in r.json()["detail"]
    assert Snapshot.objects.filter(project=project).count() == 0


def test_body_over_the_byte_limit_is_413(api):
    big = b'{"snapshots": [], "pad": "' + b"x" * (LIMITS.max_body_bytes + 10) + b'"}'
    r = api.client.post("/api/v1/snapshots", data=big, content_type="application/json", **api.headers())
    assert r.status_code == 413
    assert "max_body_bytes" in r.json()["detail"]


def test_gzip_body_over_the_limit_after_decompression_is_413(api):
    raw = b'{"snapshots": [], "pad": "' + b"x" * (LIMITS.max_body_bytes + 10) + b'"}'
    packed = gzip.compress(raw)
    assert len(packed) < LIMITS.max_body_bytes
    r = api.client.post("/api/v1/snapshots", data=packed, content_type="application/json",
                        HTTP_CONTENT_ENCODING="gzip", **api.headers())
    assert r.status_code == 413
    assert "decompressed" in r.json()["detail"]


def test_gzip_encoded_batch_is_accepted(api, project):
    r = api.post_snapshots([snapshot(turn=0), snapshot(turn=1)], gzip_body=True)
    assert r.status_code == 200, r.content
    assert r.json()["created"] == 2


def test_truncated_gzip_body_is_400_and_stores_nothing(api, project):
    packed = gzip.compress(json.dumps({"snapshots": [snapshot(turn=0)]}).encode())
    r = api.client.post("/api/v1/snapshots", data=packed[: len(packed) // 2], content_type="application/json",
                        HTTP_CONTENT_ENCODING="gzip", **api.headers())
    assert r.status_code == 400 and "gzip" in r.json()["detail"]
    assert not Snapshot.objects.filter(project=project).exists()


def test_corrupt_gzip_and_bad_json_are_400(api):
    r = api.client.post("/api/v1/snapshots", data=b"not gzip", content_type="application/json",
                        HTTP_CONTENT_ENCODING="gzip", **api.headers())
    assert r.status_code == 400 and "gzip" in r.json()["detail"]
    r = api.client.post("/api/v1/snapshots", data=b"{nope", content_type="application/json", **api.headers())
    assert r.status_code == 400 and "JSON" in r.json()["detail"]


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        pytest.param(None, "missing", id="missing"),
        pytest.param("Bearer cx_not-a-real-key", "unknown", id="unknown"),
        pytest.param("Basic dXNlcjpwYXNz", "missing", id="wrong-scheme"),
    ],
)
def test_bad_credentials_get_401_with_detail(client, db, header, detail):
    extra = {"HTTP_AUTHORIZATION": header} if header else {}
    r = client.post("/api/v1/snapshots", data=json.dumps({"snapshots": [snapshot()]}),
                    content_type="application/json", **extra)
    assert r.status_code == 401
    assert detail in r.json()["detail"]
    assert Snapshot.objects.count() == 0


def test_revoked_key_gets_401(api, project):
    prefix = IngestKey.objects.get(project=project).prefix
    ingest_key_revoke(prefix=prefix)
    r = api.post_snapshots([snapshot()])
    assert r.status_code == 401
    assert "revoked" in r.json()["detail"]


def test_keys_are_stored_hashed_with_only_a_prefix(project, ingest_key):
    key = IngestKey.objects.get(project=project)
    assert ingest_key not in (key.key_hash, key.prefix)
    assert ingest_key.startswith(key.prefix) and len(key.prefix) < len(ingest_key) // 3


def test_fifty_turns_sharing_a_system_prompt_store_it_once(api, project):
    batch = [
        snapshot(turn=i, blocks=[block("system", "system", SYSTEM_PROMPT, pinned=True),
                                 block("user", "user", f"question {i}")])
        for i in range(50)
    ]
    assert api.post_snapshots(batch[:25]).status_code == 200
    assert api.post_snapshots(batch[25:]).status_code == 200
    rows = list(
        Snapshot.objects.filter(project=project).values_list("block_keys", "block_hashes", "block_flags")
    )
    assert len(rows) == 50
    assert all(keys == ["system", "user"] for keys, _, _ in rows)
    assert all(flags[0] & BLOCK_PINNED and not flags[1] & BLOCK_PINNED for _, _, flags in rows)
    system_hashes = {hashes[0] for _, hashes, _ in rows}
    assert len(system_hashes) == 1
    assert BlockContent.objects.filter(project=project, hash__in=system_hashes).count() == 1
    assert BlockContent.objects.filter(project=project).count() == 51


def test_watermark_tier_share_and_drift_are_derived(api, project):
    s = snapshot(
        context_window=1000,
        blocks=[block("system", "system", "s", tokens=300), block("retrieval", "retrieval", "r", tokens=300),
                block("user", "user", "u", tokens=100)],
        output={"text": "ok", "usage": {"prompt_tokens": 500}},
    )
    assert api.post_snapshots([s]).status_code == 200
    body = api.get(f"/snapshots/{s['snapshot_id']}").json()
    d = body["derived"]
    assert d["total_tokens"] == 700
    assert d["usable_tokens"] == 850  # reserve defaults to 15% of the window
    assert d["watermark"] == pytest.approx(700 / 850)
    assert d["tier"] == "compress"
    assert d["kind_tokens"] == {"system": 300, "retrieval": 300, "user": 100}
    assert d["count_drift"] == pytest.approx((703 - 500) / 500)
    assert [b["share"] for b in body["blocks"]] == pytest.approx([300 / 700, 300 / 700, 100 / 700])


def test_project_thresholds_decide_the_tier(api, project):
    project.tier_warn, project.tier_compress = 0.2, 0.3
    project.save()
    s = snapshot(context_window=1000, blocks=[block("user", "user", "u", tokens=200)])
    api.post_snapshots([s])
    assert Snapshot.objects.get(project=project).tier == "warn"


def test_tokens_omitted_are_counted_on_the_server(api, project):
    s = snapshot(model="gpt-3.5-turbo", blocks=[
        block("system", "system", messages=[message("system", "You are a helpful assistant.")]),
        block("user", "user", messages=[message("user", "Hello there, how are you?")]),
    ])
    api.post_snapshots([s])
    body = api.get(f"/snapshots/{s['snapshot_id']}").json()
    # 3 overhead + role + content, as in OpenAI's counting rule.
    assert [b["tokens"] for b in body["blocks"]] == [3 + 1 + 6, 3 + 1 + 7]
    assert [b["estimated"] for b in body["blocks"]] == [False, False]
    assert body["model"]["counts"] == "exact"


def test_counts_for_a_model_without_its_tokenizer_are_marked_estimated(api, project):
    s = snapshot(model="gemma-3-270m", blocks=[block("user", "user", "Hello there")])
    api.post_snapshots([s])
    body = api.get(f"/snapshots/{s['snapshot_id']}").json()
    assert body["blocks"][0]["estimated"] is True
    assert body["model"]["counts"] == "estimated"


def _history(i: int) -> dict:
    return block("history", "history", messages=[message("user", f"turn {j}") for j in range(i + 1)])


def _turn(i: int, **kw):
    return snapshot(turn=i, blocks=[block("system", "system", SYSTEM_PROMPT), _history(i),
                                    block("user", "user", f"question {i}")], **kw)


def test_change_from_the_previous_turn_is_by_content_hash(api, project):
    t0, t1 = _turn(0), _turn(1)
    t1["blocks"].append(block("retrieval", "retrieval", "doc"))
    api.post_snapshots([t0, t1])
    change = api.get(f"/snapshots/{t1['snapshot_id']}").json()["derived"]["change"]
    assert change["prev_turn"] == 0
    assert [e["key"] for e in change["entered"]] == ["retrieval"]
    assert [g["key"] for g in change["grew"]] == ["history"]
    assert change["unchanged"] == 1  # the system prompt
    assert [c["key"] for c in change["changed"]] == ["user"]  # same size, new text
    assert change["left"] == [] and change["shrank"] == []


def test_out_of_order_turns_give_the_same_derived_values_as_in_order(api, project):
    turns = [_turn(i) for i in range(5)]
    api.post_snapshots([turns[0], turns[3]])
    api.post_snapshots([turns[4], turns[1]])
    api.post_snapshots([turns[2], turns[2]])  # late and repeated
    got = {s.turn: (s.prev_turn, s.change) for s in Snapshot.objects.filter(project=project)}

    other, other_key = project_create(name="in-order")
    from django.test import Client

    c = Client()
    in_order = [dict(t, snapshot_id=str(uuid.uuid4())) for t in turns]
    c.post("/api/v1/snapshots", data=json.dumps({"snapshots": in_order}), content_type="application/json",
           HTTP_AUTHORIZATION=f"Bearer {other_key}")
    want = {s.turn: (s.prev_turn, s.change) for s in Snapshot.objects.filter(project=other)}
    assert got == want
    assert [got[i][0] for i in range(5)] == [None, 0, 1, 2, 3]
    sess = AgentSession.objects.get(project=project)
    assert (sess.turn_count, sess.max_turn) == (5, 4)
    assert sess.first_seen.isoformat().startswith("2026-12-01T08:00:00")


def test_session_aggregates_are_kept_current(api, project):
    api.post_snapshots([
        snapshot(turn=0, context_window=1000, blocks=[block("u", "user", "x", tokens=100)]),
        snapshot(turn=1, context_window=1000, blocks=[block("u", "user", "x", tokens=800)],
                 validation=[{"layer": "structure", "check": "json", "passed": False, "code": "E"}],
                 compression=[{"strategy": "truncate", "block": "u"}]),
    ])
    api.post_snapshots([snapshot(turn=2, context_window=1000, blocks=[block("u", "user", "x", tokens=200)],
                                 agent="other-agent", model="gpt-4.1")])
    s = AgentSession.objects.get(project=project)
    assert s.turn_count == 3 and s.max_turn == 2
    assert s.max_watermark == pytest.approx(800 / 850)
    assert s.max_tier == "force"
    assert s.failed_validations == 1 and s.compression_events == 1
    assert (s.agent, s.model) == ("other-agent", "gpt-4.1")


def test_full_snapshot_reads_back_as_sent(api, project):
    s = full_snapshot()
    assert api.post_snapshots([s]).status_code == 200
    got = api.get(f"/snapshots/{s['snapshot_id']}").json()
    for k in ("snapshot_id", "session_id", "turn", "agent", "params", "tags"):
        assert got[k] == s[k]
    assert [(b["key"], b["kind"], b["messages"]) for b in got["blocks"]] == [
        (b["key"], b["kind"], b["messages"]) for b in s["blocks"]]
    assert got["compression"] == [dict(c, source="client", opaque=False) for c in s["compression"]]
    assert got["recall"] == [dict(r, stale=False, conflicting=False) for r in s["recall"]]
    assert got["validation"] == s["validation"]
    assert got["output"]["text"] == s["output"]["text"]
    assert got["output"]["usage"] == s["output"]["usage"]


_WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location.",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city and state, e.g. Lisbon"},
                    "unit": {"type": "string", "description": "Unit", "enum": ["celsius", "fahrenheit"]},
                },
            },
        },
    },
    {"type": "function", "function": {"name": "book_table", "description": "Book a table"}},
]


@pytest.mark.parametrize(
    ("model", "encoding"),
    [("gpt-4", "cl100k_base"), ("gpt-4o", "o200k_base")],
    ids=["cl100k_base", "o200k_base"],
)
def test_server_count_of_a_snapshot_sent_without_tokens_matches_the_sdk(
    api, project, request, model, encoding
):
    import ctxobs

    if encoding == "o200k_base":
        request.getfixturevalue("o200k_base")
    obs = ctxobs.Client(disabled=True)
    with obs.turn(session_id="same-count", model=model) as t:
        t.block("system", [message("system", "You answer about the weather."),
                           message("system", "Prefers celsius.", name="memory")])
        t.tools(_WEATHER_TOOLS)
        t.block("history", [
            message("user", [{"type": "text", "text": "Is it raining in Lisbon?"}]),
            message("assistant", None, tool_calls=[{"id": "c1", "type": "function", "function": {
                "name": "get_current_weather", "arguments": '{"location": "Lisbon"}'}}]),
            message("tool", '{"rain": false, "temp": 21}', tool_call_id="c1"),
        ])
        t.block("user", [message("user", "And in Porto tomorrow?")])
    counted = t.snapshot()
    assert counted["model"] == counted["model"] | {"encoding": encoding, "counts": "exact"}
    bare = json.loads(json.dumps(counted))
    for b in bare["blocks"]:
        del b["tokens"]
    bare["snapshot_id"] = str(uuid.uuid4())
    assert api.post_snapshots([counted, bare]).json()["created"] == 2
    sdk = api.get(f"/snapshots/{counted['snapshot_id']}").json()
    server = api.get(f"/snapshots/{bare['snapshot_id']}").json()
    sdk_tokens = [(b["key"], b["tokens"]) for b in sdk["blocks"]]
    assert [(b["key"], b["tokens"]) for b in server["blocks"]] == sdk_tokens
    assert dict(sdk_tokens)["tools"] > 0
    assert [b["estimated"] for b in server["blocks"]] == [False] * 4
    assert sum(n for _, n in sdk_tokens) == t.tokens() - ctxobs.tokens.REPLY_PRIMING


def _post_gzip(api, packed):
    return api.client.post("/api/v1/snapshots", data=packed, content_type="application/json",
                           HTTP_CONTENT_ENCODING="gzip", **api.headers())


def test_every_member_of_a_multi_member_gzip_body_is_read(api, project):
    """`cat a.gz b.gz` is one gzip body (RFC 1952): the JSON may be split anywhere across members."""
    snaps = [snapshot(turn=i) for i in range(3)]
    raw = json.dumps({"snapshots": snaps}).encode()
    cuts = [0, 17, len(raw) // 2, len(raw) - 3, len(raw)]
    packed = b"".join(gzip.compress(raw[a:b]) for a, b in zip(cuts, cuts[1:], strict=False))
    packed += gzip.compress(b"")  # an empty member counts too
    r = _post_gzip(api, packed)
    assert r.status_code == 200, r.content
    assert [x["status"] for x in r.json()["results"]] == ["created"] * 3
    assert Snapshot.objects.filter(project=project).count() == 3


def test_members_together_over_the_limit_are_413(api):
    half = b" " * (LIMITS.max_body_bytes // 2 + 1)
    packed = gzip.compress(b'{"snapshots": []}' + half) + gzip.compress(half)
    r = _post_gzip(api, packed)
    assert r.status_code == 413 and "max_body_bytes" in r.json()["detail"]
    # Each member alone is within it: the sum is what counts.
    assert _post_gzip(api, gzip.compress(b'{"snapshots": []}' + half)).status_code == 200


@pytest.mark.parametrize(
    ("tail", "status"),
    [
        pytest.param(b"\0" * 8, 200, id="zero-padding"),
        pytest.param(b"garbage", 400, id="garbage"),
        pytest.param(gzip.compress(b"x" * 100)[:-6], 400, id="truncated-second-member"),
    ],
)
def test_what_follows_the_last_member(api, project, tail, status):
    packed = gzip.compress(json.dumps({"snapshots": [snapshot()]}).encode()) + tail
    r = _post_gzip(api, packed)
    assert r.status_code == status, r.content
    if status == 400:
        assert "gzip" in r.json()["detail"]
    assert Snapshot.objects.filter(project=project).count() == (1 if status == 200 else 0)
