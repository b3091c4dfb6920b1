"""The COPY path's column lists against the models: a renamed or added column fails here."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import connection, models

from core.models import Project
from ingest import store
from ingest.models import CompressionEvent, RecallItem, Snapshot, ValidationOutcome
from ingest.services import snapshot_batch_ingest
from tests.factories import full_snapshot


def _columns(model: type[models.Model]) -> list[str]:
    # A composite primary key is a field without a column of its own.
    return [f.column for f in model._meta.concrete_fields if f.column]


@pytest.mark.parametrize(
    "model", [Snapshot, CompressionEvent, RecallItem, ValidationOutcome],
    ids=["snapshot", "compression", "recall", "validation"],
)
def test_copy_columns_are_the_models_columns(model: type[models.Model]) -> None:
    assert list(store.COPY_COLUMNS[model._meta.db_table]) == _columns(model)


def test_copy_statements_name_the_columns_of_their_row_type() -> None:
    assert store.copy_sql("ingest_validationoutcome", store.ValidationRow._fields) == (
        'COPY ingest_validationoutcome ("project_id", "snapshot_ref", "position", "received_at", "layer",'
        ' "check", "passed", "code", "message", "attempt") FROM STDIN'
    )


def test_each_copied_table_is_an_ingest_model() -> None:
    tables = {m._meta.db_table for m in apps.get_app_config("ingest").get_models()}
    assert set(store.COPY_COLUMNS) <= tables


@pytest.mark.django_db
def test_copy_columns_exist_in_the_database() -> None:
    with connection.cursor() as cur:
        for table, columns in store.COPY_COLUMNS.items():
            cur.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s", [table])
            assert set(columns) == {r[0] for r in cur.fetchall()}


@pytest.mark.django_db
def test_a_stored_snapshot_holds_each_value_in_its_column(project: Project) -> None:
    snap = full_snapshot(turn=3, agent="planner", model="gpt-x", context_window=9000)
    res = snapshot_batch_ingest(project=project, batch=[snap])
    assert res.created == 1
    row = Snapshot.objects.get(project=project, snapshot_id=snap["snapshot_id"])
    assert (row.turn, row.agent, row.model_name, row.context_window, row.session_id) == (
        3, "planner", "gpt-x", 9000, snap["session_id"])
    assert (row.params, row.tags, row.output) == (snap["params"], snap["tags"], snap["output"])
    assert (row.prompt_tokens_reported, row.completion_tokens, row.cached_tokens, row.latency_ms) == (
        120, 5, None, 812)
    assert row.block_keys == [b["key"] for b in snap["blocks"]]
    assert row.block_kinds == [b["kind"] for b in snap["blocks"]]
    assert row.n_blocks == len(row.block_hashes) == len(row.block_flags) == len(snap["blocks"])
    assert row.total_tokens == sum(row.block_tokens) == sum(row.kind_tokens.values())
    assert (row.n_compression, row.n_recall, row.n_recall_injected, row.n_validation,
            row.n_validation_failed) == (1, 1, 1, 1, 1)
    flt = {"project": project, "snapshot_ref": row.id}
    c = CompressionEvent.objects.get(**flt)
    assert (c.strategy, c.block, c.tokens_before, c.tokens_after, c.items, c.ref) == (
        "drop_tool_output", "history", 5210, 640, ["c0"], "spool/c0")
    r = RecallItem.objects.get(**flt)
    assert (r.memory_id, r.channel, r.rank, r.injected, r.block, r.preview) == (
        "m-88", "vector", 1, True, "memory", "destination Guangzhou")
    v = ValidationOutcome.objects.get(**flt)
    assert (v.layer, v.check_name, v.passed, v.code, v.message, v.attempt) == (
        "structure", "json_schema", False, "E_MISSING_FIELD", "order_id missing", 1)


def test_hashes_known_after_a_commit_are_per_project_per_day_and_bounded() -> None:
    from datetime import date

    from ingest.store import _KnownHashes

    known = _KnownHashes(maxsize=5)
    today, tomorrow = date(2026, 12, 6), date(2026, 12, 7)
    assert known.unknown(1, ["a", "b"], today) == ["a", "b"]
    known.add(1, ["a", "b"], today)
    assert known.unknown(1, ["b", "c", "a"], today) == ["c"]
    # Another project's hashes are its own: the same content address is not known there.
    assert known.unknown(2, ["a", "c"], today) == ["a", "c"]
    known.add(2, ["a", "c", "d"], today)
    assert known.unknown(2, ["a", "b"], today) == ["b"]
    # Held past its bound, it starts over.
    known.add(1, ["e", "f"], today)
    known.add(1, ["g"], today)
    assert known.unknown(1, ["a", "g"], today) == ["a"]
    assert known.unknown(2, ["a"], today) == ["a"]
    # A new day forgets the last (`last_seen` is per day), and what comes late for it is not kept.
    assert known.unknown(1, ["g"], tomorrow) == ["g"]
    known.add(1, ["h"], today)
    assert known.unknown(1, ["h"], tomorrow) == ["h"]


@pytest.mark.django_db(transaction=True)
def test_the_store_logs_its_steps_with_the_commit_apart_from_the_hooks_after_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`ingest.store_steps` (DEBUG): the steps in the order they ran; "commit" ends at the COMMIT
    (the session locks are released there) and "hooks" is the on-commit queueing after it."""
    import logging

    project = Project.objects.create(name="steps")
    with caplog.at_level(logging.DEBUG, logger="ingest.store"):
        res = snapshot_batch_ingest(project=project, batch=[full_snapshot(turn=t) for t in range(3)])
    assert res.created == 3
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ingest.store_steps")]
    steps = [part.split("=")[0] for part in line.split()[3:]]
    assert steps[:2] == ["duplicates", "by_hash"]
    # The other apps' follow-up work is recorded before the session rows are locked.
    assert steps.index("rows") < steps.index("signals") < steps.index("sessions") < steps.index("snapshots")
    assert steps[-3:] == ["late", "commit", "hooks"]
