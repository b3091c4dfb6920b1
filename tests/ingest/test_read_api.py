"""Read API, project isolation, OpenAPI, 503 when the store is down, 429 per key."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from core.models import Membership
from core.services import project_create
from ctxobs.wire import LIMITS
from ingest.models import Snapshot
from tests.conftest import Api
from tests.factories import block, snapshot

pytestmark = pytest.mark.django_db


def _seed(api: Api) -> None:
    base = datetime(2026, 12, 1, tzinfo=UTC)
    api.post_snapshots([
        snapshot(session_id="a-1", turn=0, agent="travel-bot", model="gpt-4o", ts=base,
                 context_window=1000, blocks=[block("u", "user", "x", tokens=100)]),
        snapshot(session_id="a-1", turn=1, agent="travel-bot", model="gpt-4o", ts=base + timedelta(minutes=1),
                 context_window=1000, blocks=[block("u", "user", "y", tokens=700)],
                 compression=[{"strategy": "merge"}], recall=[{"memory_id": "m1", "injected": True}],
                 validation=[{"layer": "semantic", "passed": False, "code": "E_NEG"}]),
        snapshot(session_id="b-1", turn=0, agent="coder", model="gpt-4.1", ts=base + timedelta(days=2),
                 context_window=1000, blocks=[block("u", "user", "z", tokens=50)]),
    ])


def test_sessions_list_filters_and_paginates(api):
    _seed(api)
    ids = lambda r: [s["session_id"] for s in r.json()["items"]]  # noqa: E731
    assert ids(api.get("/sessions")) == ["b-1", "a-1"]
    assert ids(api.get("/sessions", agent="travel-bot")) == ["a-1"]
    assert ids(api.get("/sessions", model="gpt-4.1")) == ["b-1"]
    assert ids(api.get("/sessions", min_watermark=0.5)) == ["a-1"]
    assert ids(api.get("/sessions", since="2026-12-02T00:00:00Z")) == ["b-1"]
    assert ids(api.get("/sessions", until="2026-12-01T12:00:00Z")) == ["a-1"]
    page = api.get("/sessions", limit=1, offset=1).json()
    assert page["count"] == 2 and [s["session_id"] for s in page["items"]] == ["a-1"]


def test_timeline_lists_turns_with_tokens_by_kind_and_counts(api):
    _seed(api)
    r = api.get("/sessions/a-1/timeline")
    assert r.status_code == 200
    body = r.json()
    assert body["session"]["turn_count"] == 2
    assert body["thresholds"] == {"warn": 0.6, "compress": 0.7, "force": 0.85, "break": 0.95}
    t0, t1 = body["turns"]
    assert (t0["turn"], t0["kind_tokens"], t0["tier"]) == (0, {"user": 100}, "ok")
    assert (t1["compression_events"], t1["recall_items"], t1["failed_validations"]) == (1, 1, 1)
    assert t1["tier"] == "compress"  # 700 / 850
    assert api.get("/sessions/nope/timeline").status_code == 404


def test_a_key_of_project_a_never_reads_or_writes_project_b(client, db):
    a, key_a = project_create(name="A")
    b, key_b = project_create(name="B")
    api_a, api_b = Api(client, key_a), Api(client, key_b)
    s = snapshot(session_id="secret-b")
    api_b.post_snapshots([s])
    assert api_a.get(f"/snapshots/{s['snapshot_id']}").status_code == 404
    assert api_a.get("/sessions/secret-b/timeline").status_code == 404
    assert api_a.get("/sessions").json()["count"] == 0
    # The same snapshot id sent with A's key is A's own, separate row; B's is untouched.
    assert api_a.post_snapshots([s]).json()["results"][0]["status"] == "created"
    assert Snapshot.objects.filter(project=b).count() == 1
    assert Snapshot.objects.filter(project=a).count() == 1


def test_logged_in_member_reads_with_a_session_and_outsiders_get_404(client, db):
    p, key = project_create(name="P")
    Api(client, key).post_snapshots([snapshot(session_id="mine")])
    user = get_user_model().objects.create_user("ann", password="pw-ann-123")
    outsider = get_user_model().objects.create_user("bob", password="pw-bob-123")
    Membership.objects.create(project=p, user=user, role="viewer")
    c = Client()
    c.force_login(user)
    r = c.get("/api/v1/sessions")
    assert r.status_code == 200 and r.json()["items"][0]["session_id"] == "mine"
    c2 = Client()
    c2.force_login(outsider)
    assert c2.get(f"/api/v1/sessions?project={p.pk}").status_code == 404
    assert Client().get("/api/v1/sessions").status_code == 401


def test_openapi_documents_the_endpoints_and_limits(client, db):
    spec = client.get("/api/v1/openapi.json").json()
    assert {"/api/v1/snapshots", "/api/v1/sessions", "/api/v1/sessions/{session_id}/timeline",
            "/api/v1/snapshots/{snapshot_id}"} <= set(spec["paths"])
    post = spec["paths"]["/api/v1/snapshots"]["post"]
    assert post["x-ctxobs-limits"]["max_items_per_batch"] == LIMITS.max_items_per_batch
    assert "max_body_bytes" in post["description"]
    body_schema = post["requestBody"]["content"]["application/json"]["schema"]
    assert "snapshot_id" in body_schema["properties"]["snapshots"]["items"]["properties"]
    assert client.get("/api/v1/docs").status_code == 200


def test_store_unreachable_answers_503_with_retry_after(api):
    body = json.dumps({"snapshots": [snapshot()]})
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict["HOST"] = "127.0.0.1"
    connection.settings_dict["PORT"] = "1"  # nothing listens there
    try:
        r = api.client.post("/api/v1/snapshots", data=body, content_type="application/json", **api.headers())
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
    assert r.status_code == 503
    assert int(r["Retry-After"]) > 0
    assert "nothing was stored" in r.json()["detail"]


def test_per_key_rate_limit_answers_429_with_retry_after(api, settings):
    settings.CTXOBS_INGEST_RATE_LIMIT = 2
    settings.CTXOBS_INGEST_RATE_BURST = 2
    responses = [api.post_snapshots([snapshot(turn=i)]) for i in range(6)]
    codes = [r.status_code for r in responses]
    assert codes[:2] == [200, 200]
    limited = [r for r in responses if r.status_code == 429]
    assert limited, codes
    assert int(limited[0]["Retry-After"]) >= 1
    assert "rate limit" in limited[0].json()["detail"]


# --- the timeline document: the schema's bytes, a fixed number of queries ------------------------
def _timeline_as_the_schema_renders_it(project, session_id: str) -> bytes:
    """The timeline document built the way ninja renders TimelineOut: every turn validated by
    the schema from the ORM row, dumped, and encoded by ninja's JSON encoder."""
    from ninja.responses import NinjaJSONEncoder

    from ingest.models import AgentSession
    from ingest.schemas import SessionOut, TimelineOut, TimelineTurn

    s = AgentSession.objects.get(project=project, session_id=session_id)
    rows = list(
        Snapshot.objects.filter(project=project, session_ref=s.id).order_by("turn", "ts", "snapshot_id")
    )
    last = rows[-1]
    doc = TimelineOut(
        session=SessionOut(**{f: getattr(s, f) for f in SessionOut.model_fields}),
        context_window=last.context_window,
        usable_tokens=last.context_window - last.reserve_tokens,
        thresholds=dict(zip(("warn", "compress", "force", "break"), project.thresholds, strict=True)),
        turns=[
            TimelineTurn(
                turn=r.turn, snapshot_id=str(r.snapshot_id), ts=NinjaJSONEncoder().default(r.ts),
                total_tokens=r.total_tokens,
                watermark=r.watermark, tier=r.tier, kind_tokens=r.kind_tokens,
                compression_events=r.n_compression,
                recall_items=r.n_recall, recall_injected=r.n_recall_injected,
                failed_validations=r.n_validation_failed, count_drift=r.count_drift, prev_turn=r.prev_turn,
            )
            for r in rows
        ],
    )
    return json.dumps(doc.model_dump(), cls=NinjaJSONEncoder).encode()


def test_timeline_document_is_byte_for_byte_what_the_schema_renders(api):
    # Timestamps with and without fractions (the JSON form keeps milliseconds, truncated), given in
    # another offset, out of order; a late turn, drift, compression, a turn arriving twice.
    stamps = ["2026-12-01T08:00:00Z", "2026-12-01T08:00:01.999999Z", "2026-12-01T10:00:02.0015+02:00",
              "2026-12-01T08:00:03.123Z", "2026-12-31T23:59:59.000001Z",
              "2026-12-01T08:00:05.5-03:30"]
    snaps = [
        snapshot(session_id="fmt", turn=t, ts=datetime.fromisoformat(ts), context_window=1000 + t,
                 blocks=[block("sys", "system", "s", tokens=10 * t + 1),
                         block("h", "history", f"h{t}", tokens=7),
                         *([block("r", "retrieval", "doc", tokens=3)] if t % 2 else [])],
                 compression=[{"strategy": "merge"}] * (t % 3),
                 validation=[{"layer": "semantic", "passed": t % 2 == 0}],
                 **({"output": {"text": "ok", "usage": {"prompt_tokens": 13 + t}}} if t in (1, 4) else {}))
        for t, ts in enumerate(stamps)
    ]
    api.post_snapshots([snaps[0], snaps[3], snaps[1], snaps[5], snaps[2]])
    api.post_snapshots([snaps[4], snaps[3]])  # one late, one again
    r = api.get("/sessions/fmt/timeline")
    assert r.status_code == 200
    assert r["Content-Type"] == "application/json; charset=utf-8"
    project = Snapshot.objects.filter(session_id="fmt").first().project
    assert r.content == _timeline_as_the_schema_renders_it(project, "fmt")
    turns = r.json()["turns"]
    assert [t["ts"] for t in turns] == [
        "2026-12-01T08:00:00Z", "2026-12-01T08:00:01.999Z", "2026-12-01T08:00:02.001Z",
        "2026-12-01T08:00:03.123Z",
        "2026-12-31T23:59:59.000Z", "2026-12-01T11:30:05.500Z",
    ]
    assert turns[1]["count_drift"] is not None and turns[0]["count_drift"] is None


def test_timeline_query_count_is_the_same_for_a_short_and_a_long_session(
    api, django_assert_max_num_queries
):
    api.post_snapshots([snapshot(session_id="short", turn=t) for t in range(3)])
    api.post_snapshots([snapshot(session_id="long", turn=t) for t in range(150)])
    counts = {}
    for sid, turns in (("short", 3), ("long", 150)):
        with django_assert_max_num_queries(3) as ctx:
            r = api.get(f"/sessions/{sid}/timeline")
        assert r.status_code == 200 and len(r.json()["turns"]) == turns
        counts[sid] = len(ctx.captured_queries)
    assert counts["short"] == counts["long"]
