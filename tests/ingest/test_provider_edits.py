"""Compression events carry who made them: the agent, the SDK, or the model provider on its side
(Anthropic's compaction and context editing, OpenAI's compaction items), and whether what was
removed is opaque. Stored from the snapshot API and OTLP, shown on the turn page and the timeline."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from core.models import Membership, Project
from ctxobs.validate import validate_snapshot
from ingest import selectors
from ingest.models import AgentSession, CompressionEvent
from ingest.otlp.decode import Event, LogRecord, Span
from ingest.otlp.mapping import COMPACTED_EVENT, span_to_snapshot
from ingest.services import snapshot_batch_ingest
from tests.factories import snapshot

PROVIDER_EDIT = {
    "strategy": "clear_tool_uses",
    "block": "history",
    "tokens_before": 41_200,
    "tokens_after": 9_800,
    "items": ["toolu_01", "toolu_02"],
    "source": "provider",
    "opaque": False,
}
OPAQUE = {
    "strategy": "compaction",
    "block": "summary",
    "tokens_before": 80_000,
    "source": "provider",
    "opaque": True,
}


@pytest.fixture
def admin_client(project: Project) -> Client:
    user = get_user_model().objects.create_user(username="ada", password="pw-ada")
    Membership.objects.create(project=project, user=user, role="admin")
    c = Client()
    c.force_login(user)
    return c


def validate_batch(items: list[Any]) -> tuple[list[Any], list[Any]]:
    snaps, errors = [], []
    for i, item in enumerate(items):
        snap, errs = validate_snapshot(item, i)
        errors += errs
        if snap is not None:
            snaps.append(snap)
    return snaps, errors


def _stored(project: Project, session_id: str, turn: int) -> list[dict[str, Any]]:
    session = AgentSession.objects.get(project=project, session_id=session_id)
    snap = selectors.snapshot_by_turn(project=project, session=session, turn=turn)
    assert snap is not None
    return list(selectors.snapshot_events(project_id=project.pk, snapshot_ref=snap.id)["compression"])


def test_source_defaults_to_client_and_opaque_to_false() -> None:
    snaps, errors = validate_batch([snapshot(compression=[{"strategy": "truncate"}])])
    assert errors == []
    [event] = snaps[0]["compression"]
    assert event["source"] == "client" and event["opaque"] is False


@pytest.mark.parametrize(
    ("source", "msg"),
    [
        pytest.param("anthropic", "unknown source 'anthropic'", id="unknown-word"),
        pytest.param(3, "unknown source '3'", id="not-a-string"),
    ],
)
def test_an_unknown_source_is_refused_with_the_allowed_values(source: Any, msg: str) -> None:
    good = snapshot(compression=[PROVIDER_EDIT])
    bad = snapshot(compression=[{"strategy": "x", "source": source}])
    snaps, errors = validate_batch([good, bad])
    assert len(snaps) == 1
    [err] = errors
    assert err["loc"] == ["snapshots", 1, "compression", 0, "source"]
    assert err["msg"] == msg
    assert "client, sdk, provider" in err["hint"]


def test_a_provider_edit_is_stored_with_its_source_and_shown_as_such(
    project: Project, admin_client: Client
) -> None:
    res = snapshot_batch_ingest(
        project=project,
        batch=[
            snapshot(session_id="pe", turn=0),
            snapshot(
                session_id="pe", turn=1, compression=[{"strategy": "drop_tool_output"}, PROVIDER_EDIT, OPAQUE]
            ),
        ],
    )
    assert res.rejected == 0
    events = _stored(project, "pe", 1)
    assert [(e["source"], e["opaque"]) for e in events] == [
        ("client", False),
        ("provider", False),
        ("provider", True),
    ]
    assert CompressionEvent.objects.filter(project=project, source="provider").count() == 2

    body = admin_client.get(reverse("ingest:turn", args=[project.pk, "pe", 1])).content.decode()
    assert body.count('class="provider-edit"') == 2
    assert ">provider</span>" in body and ">opaque</span>" in body

    session = AgentSession.objects.get(project=project, session_id="pe")
    assert (
        "provider edit"
        in admin_client.get(
            reverse("ingest:timeline", args=[project.pk, session.session_id])
        ).content.decode()
    )
    fig = admin_client.get(reverse("ingest:chart_data", args=[project.pk, "pe"])).json()
    traces = {t.get("name"): t for t in fig["data"]}
    assert traces["provider edit"]["x"] == [1]
    assert traces["provider edit"]["text"] == ["2 edit(s) made by the provider"]
    assert traces["compression"]["text"] == ["1 compression event(s)"]


def _span(events: tuple[Event, ...] = ()) -> Span:
    return Span(
        trace_id="0af7651916cd43dd8448eb211c80319c",
        span_id="b7ad6b7169203331",
        parent_span_id="",
        name="chat claude-sonnet-4",
        start_ns=1_764_000_000_000_000_000,
        end_ns=1_764_000_001_000_000_000,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "anthropic",
            "gen_ai.request.model": "claude-sonnet-4",
            "gen_ai.conversation.id": "conv-compacted",
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": "Go on."}]}]
            ),
        },
        resource={"service.name": "agent"},
        events=events,
    )


def test_a_compacted_span_event_becomes_a_provider_compression_event() -> None:
    ev = Event(
        name=COMPACTED_EVENT,
        time_ns=1_764_000_000_500_000_000,
        attributes={
            "gen_ai.compaction.strategy": "clear_tool_uses",
            "gen_ai.compaction.tokens_before": 52_000,
            "gen_ai.compaction.tokens_after": 12_500,
            "gen_ai.compaction.id": "edit-1",
        },
    )
    snaps, errors = validate_batch([span_to_snapshot(_span((ev,)))])
    assert errors == []
    [event] = snaps[0]["compression"]
    assert event == {
        "strategy": "clear_tool_uses",
        "block": "",
        "tokens_before": 52_000,
        "tokens_after": 12_500,
        "watermark": None,
        "items": ["edit-1"],
        "ref": "edit-1",
        "source": "provider",
        "opaque": False,
    }


def test_a_compacted_log_record_joined_to_its_span_counts_too_and_may_be_opaque() -> None:
    record = LogRecord(
        trace_id="0af7651916cd43dd8448eb211c80319c",
        span_id="b7ad6b7169203331",
        event_name=COMPACTED_EVENT,
        time_ns=1,
        attributes={"gen_ai.compaction.encrypted": True, "gen_ai.compaction.tokens_before": -5},
        resource={},
    )
    snaps, errors = validate_batch([span_to_snapshot(_span(), details=[record])])
    assert errors == []
    [event] = snaps[0]["compression"]
    assert event["strategy"] == "compaction" and event["source"] == "provider" and event["opaque"] is True
    assert event["tokens_before"] is None  # a negative count is not a count


def test_a_compaction_part_is_a_provider_edit_opaque_when_encrypted() -> None:
    span = _span()
    messages = [
        {
            "role": "user",
            "parts": [{"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA-opaque"}],
        },
        {"role": "user", "parts": [{"type": "text", "content": "And tomorrow?"}]},
    ]
    span.attributes["gen_ai.input.messages"] = json.dumps(messages)
    snaps, errors = validate_batch([span_to_snapshot(span)])
    assert errors == []
    [event] = snaps[0]["compression"]
    assert (event["source"], event["opaque"], event["ref"]) == ("provider", True, "cmp_1")
