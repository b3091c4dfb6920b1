"""A turn's events are the wire's validated events all the way down: the store's COPY rows, the rows
ingest reads back and ctxobs.wire hold the same fields, so a field added to one and not the others
fails here."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

from core.models import Project
from ctxobs import wire
from ctxobs.validate import validate_snapshot
from ingest import selectors, store, types
from ingest.models import Snapshot
from ingest.services import snapshot_batch_ingest
from tests.factories import full_snapshot

# The columns a COPY row has before its event's own fields: where the event belongs.
_ENVELOPE = ("project_id", "snapshot_ref", "position", "received_at")

EVENTS = [
    pytest.param(
        wire.CompressionEvent,
        store.CompressionRow,
        types.CompressionEventRow,
        (*_ENVELOPE, "ts"),
        id="compression",
    ),
    pytest.param(wire.RecallItem, store.RecallRow, types.RecallItemRow, _ENVELOPE, id="recall"),
    pytest.param(
        wire.ValidationOutcome, store.ValidationRow, types.ValidationOutcomeRow, _ENVELOPE, id="validation"
    ),
]


def _fields(typed_dict: Any) -> tuple[str, ...]:
    return tuple(typed_dict.__annotations__)


@pytest.mark.parametrize(("event", "copy_row", "read_row", "envelope"), EVENTS)
def test_copy_row_is_its_envelope_then_the_validated_event_field_for_field(
    event: Any, copy_row: type[NamedTuple], read_row: Any, envelope: tuple[str, ...]
) -> None:
    assert copy_row._fields == (*envelope, *_fields(event))


@pytest.mark.parametrize(("event", "copy_row", "read_row", "envelope"), EVENTS)
def test_read_back_row_has_the_validated_event_fields_in_order(
    event: Any, copy_row: type[NamedTuple], read_row: Any, envelope: tuple[str, ...]
) -> None:
    assert _fields(read_row) == _fields(event)


def test_every_wire_event_field_has_a_validated_counterpart() -> None:
    # The validated event fills in every field the wire may leave out.
    for sent, validated in (
        (wire.WireCompressionEvent, wire.CompressionEvent),
        (wire.WireRecallItem, wire.RecallItem),
        (wire.WireValidationOutcome, wire.ValidationOutcome),
    ):
        assert set(_fields(sent)) == set(_fields(validated)), sent.__name__


@pytest.mark.django_db
def test_events_read_back_are_the_validated_events(project: Project) -> None:
    snap = {
        **full_snapshot(),
        "compression": [
            {
                "strategy": "drop_tool_output",
                "block": "history",
                "tokens_before": 5210,
                "tokens_after": 640,
                "watermark": 0.68,
                "items": ["c0", "c1"],
                "ref": "spool/c0",
            },
            {"strategy": "compaction", "source": "provider", "opaque": True, "tokens_after": 310},
        ],
        "recall": [
            {
                "memory_id": "m-88",
                "channel": "vector",
                "score": 0.82,
                "rank": 1,
                "injected": True,
                "stale": True,
                "conflicting": True,
                "block": "memory",
                "preview": "destination Guangzhou",
            },
            {"memory_id": "m-89"},
        ],
        "validation": [
            {
                "layer": "structure",
                "check": "json_schema",
                "passed": False,
                "code": "E_MISSING_FIELD",
                "message": "order_id missing",
                "attempt": 2,
            },
            {"layer": "business", "passed": True},
        ],
    }
    validated, errors = validate_snapshot(snap)
    assert validated is not None, errors
    assert snapshot_batch_ingest(project=project, batch=[snap]).created == 1
    ref = Snapshot.objects.get(project=project, snapshot_id=snap["snapshot_id"]).id

    events = selectors.snapshot_events(project_id=project.pk, snapshot_ref=ref)

    assert events["compression"] == validated["compression"]
    assert events["recall"] == validated["recall"]
    assert events["validation"] == validated["validation"]
