"""Day partitions of the snapshot tables on the real PostgreSQL: created ahead, a default partition
for any other time, rows moved out of it when their day's partition is made, and a database with
rows migrated into (and back out of) the partitioned tables."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import OperationalError, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.executor import MigrationExecutor

from core.models import Project
from ingest import dashboard, partitions, selectors
from ingest.models import AgentSession, CompressionEvent, Snapshot
from ingest.services import snapshot_batch_ingest
from tests.factories import block, full_snapshot, snapshot
from tests.ingest.aging import age
from tests.scratch_db import migrate, scratch_database


def _where(table: str, **eq: Any) -> list[str]:
    cond = " AND ".join(f"{k} = %s" for k in eq)
    with connection.cursor() as cur:
        cur.execute(f"SELECT tableoid::regclass::text FROM {table} WHERE {cond}", list(eq.values()))
        return [r[0] for r in cur.fetchall()]


@pytest.mark.django_db
def test_the_snapshot_tables_are_partitioned_by_day_with_a_week_ahead() -> None:
    today = datetime.now(tz=UTC).date()
    for table in partitions.PARTITIONED_TABLES:
        with connection.cursor() as cur:
            cur.execute("SELECT relkind FROM pg_class WHERE oid = %s::regclass", [table])
            assert cur.fetchone()[0] == "p"
            cur.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary "
                "ORDER BY array_position(i.indkey, a.attnum)",
                [table],
            )
            key = [r[0] for r in cur.fetchall()]
        assert key[0] == "project_id" and key[-1] == "received_at"
        days = {p.day for p in partitions.partitions_list(table)}
        assert None in days  # the default partition
        assert {today + timedelta(days=n) for n in range(partitions.DAYS_AHEAD + 1)} <= days


@pytest.mark.django_db
def test_ingest_writes_into_todays_partition_and_ensure_is_idempotent(project: Project) -> None:
    res = snapshot_batch_ingest(project=project, batch=[full_snapshot()])
    assert res.created == 1
    ref = Snapshot.objects.get(project=project).id
    today = datetime.now(tz=UTC).date()
    assert _where("ingest_snapshot", project_id=project.pk, id=ref) == [
        partitions.partition_name("ingest_snapshot", today)
    ]
    assert _where("ingest_compressionevent", project_id=project.pk, snapshot_ref=ref) == [
        partitions.partition_name("ingest_compressionevent", today)
    ]
    assert partitions.partitions_ensure() == []


@pytest.mark.django_db
def test_rows_beyond_the_partitions_land_in_the_default_one_and_move_when_their_day_is_made(
    project: Project,
) -> None:
    snapshot_batch_ingest(project=project, batch=[snapshot(session_id="far", turn=0)])
    far = datetime.now(tz=UTC) + timedelta(days=30)
    with connection.cursor() as cur:  # as if a clock ran ahead: the row moves to the default partition
        cur.execute("UPDATE ingest_snapshot SET received_at = %s WHERE project_id = %s", [far, project.pk])
    snap = Snapshot.objects.get(project=project)
    assert _where("ingest_snapshot", id=snap.id) == ["ingest_snapshot_default"]

    created = partitions.partitions_ensure(today=far.date(), days_ahead=0)

    assert partitions.partition_name("ingest_snapshot", far.date()) in created
    assert _where("ingest_snapshot", id=snap.id) == [partitions.partition_name("ingest_snapshot", far.date())]
    # A resend is still found across partitions.
    assert (
        snapshot_batch_ingest(
            project=project, batch=[snapshot(session_id="far", turn=0, snapshot_id=str(snap.snapshot_id))]
        ).duplicate
        == 1
    )


# --- ingest's lookups visit the partitions from a session's first turn on ---------------------
@pytest.mark.django_db
@pytest.mark.parametrize("legacy", [False, True], ids=["first-received", "stored-before-first-received"])
def test_a_session_received_days_ago_still_finds_its_resends_and_its_previous_turn(
    project: Project, legacy: bool
) -> None:
    first = [snapshot(session_id="old", turn=t) for t in (0, 2)]
    snapshot_batch_ingest(project=project, batch=first)
    age(project, 3, legacy=legacy)
    old_day = partitions.partition_name("ingest_snapshot", datetime.now(tz=UTC).date() - timedelta(days=3))
    assert set(_where("ingest_snapshot", project_id=project.pk)) == {old_day}

    # A resend, a late turn (1, between the two stored) and the next turn (3).
    late, nxt = snapshot(session_id="old", turn=1), snapshot(session_id="old", turn=3)
    again = snapshot_batch_ingest(project=project, batch=[first[1], late, nxt])

    assert (again.duplicate, again.created) == (1, 2)
    prev = dict(Snapshot.objects.filter(project=project, session_id="old").values_list("turn", "prev_turn"))
    assert prev == {0: None, 1: 0, 2: 1, 3: 2}  # turn 2, stored days ago, now follows the late turn
    assert (AgentSession.objects.get(project=project, session_id="old").first_received is None) == legacy


@pytest.mark.django_db(transaction=True)
def test_ingest_does_not_wait_for_partitions_older_than_its_sessions(project: Project) -> None:
    """A day partition locked by someone else (expiry detaching it, a long report) holds up only
    the batches, and the session pages, whose sessions have turns in it or before it."""
    import psycopg

    snapshot_batch_ingest(project=project, batch=[snapshot(session_id="old", turn=0)])
    age(project, 2)
    old_day = partitions.partition_name("ingest_snapshot", datetime.now(tz=UTC).date() - timedelta(days=2))
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"], port=settings["PORT"] or 5432, user=settings["USER"], dbname=settings["NAME"]
    ) as other:
        other.execute(f'LOCK TABLE "{old_day}" IN ACCESS EXCLUSIVE MODE')
        with connection.cursor() as cur:
            cur.execute("SET lock_timeout = '2s'")
        # A new session, then its next turn: neither visits the locked day.
        assert snapshot_batch_ingest(project=project, batch=[snapshot(session_id="new", turn=0)]).created == 1
        assert snapshot_batch_ingest(project=project, batch=[snapshot(session_id="new", turn=1)]).created == 1
        # Nor do the reads of that session's pages.
        new = AgentSession.objects.get(project=project, session_id="new")
        assert [r["turn"] for r in selectors.session_timeline(project=project, session=new)] == [0, 1]
        turns, _ = selectors.session_timeline_turns(project=project, session=new)
        assert [t["turn"] for t in turns] == [0, 1]
        assert [r["turn"] for r in dashboard.timeline_rows(project=project, session=new)] == [0, 1]
        assert dashboard.turns_page(project=project, session=new, page=1, per_page=10)["pages"] == 1
        assert len(dashboard.sessions_sparklines(project_id=project.pk, sessions=[new])[new.id]) == 2
        one = selectors.snapshot_by_turn(project=project, session=new, turn=1)
        assert one is not None
        assert selectors.snapshot_neighbours(project=project, session=new, snapshot=one) == (0, None)
        # The old session's next turn must look there for its previous turn.
        with pytest.raises(OperationalError):
            snapshot_batch_ingest(project=project, batch=[snapshot(session_id="old", turn=1)])
        other.rollback()
    assert snapshot_batch_ingest(project=project, batch=[snapshot(session_id="old", turn=1)]).created == 1
    for sid in ("new", "old"):
        assert Snapshot.objects.get(project=project, session_id=sid, turn=1).prev_turn == 0
    with connection.cursor() as cur:
        cur.execute("RESET lock_timeout")


# --- the migration, with rows present -------------------------------------------------------
BEFORE = [("ingest", "0007_tenancy_moves_to_core")]
ALIAS = "partition_move"


@pytest.fixture
def scratch_db(django_db_setup: Any, django_db_blocker: Any) -> Iterator[BaseDatabaseWrapper]:
    with scratch_database(django_db_blocker, prefix="ctxobs_parts", alias=ALIAS) as conn:
        yield conn


def _seed(executor: MigrationExecutor) -> dict[str, Any]:
    apps = executor.loader.project_state(BEFORE, at_end=True).apps
    db = ALIAS
    old = datetime.now(tz=UTC) - timedelta(days=12)
    project = apps.get_model("core", "Project").objects.using(db).create(name="shop")
    apps.get_model("ingest", "AgentSession").objects.using(db).create(
        project=project, session_id="s-1", first_seen=old, last_seen=old, turn_count=2
    )
    ids = [uuid.uuid4(), uuid.uuid4()]
    for turn, (sid, at) in enumerate(zip(ids, (old, old + timedelta(days=11)), strict=True)):
        apps.get_model("ingest", "Snapshot").objects.using(db).create(
            project=project,
            id=turn + 1,
            snapshot_id=sid,
            session_ref=1,
            session_id="s-1",
            turn=turn,
            ts=at,
            received_at=at,
            model_name="m",
            context_window=1000,
            reserve_tokens=100,
            total_tokens=10,
            watermark=0.01,
            tier="ok",
            block_hashes=["a" * 32],
        )
        apps.get_model("ingest", "CompressionEvent").objects.using(db).create(
            project=project, snapshot_ref=turn + 1, position=0, ts=at, strategy="truncate"
        )
    apps.get_model("ingest", "BlockContent").objects.using(db).create(
        project=project, hash="a" * 32, message_hashes=["b" * 32], chars=3, created_at=old
    )
    return {"project_id": project.pk, "ids": ids, "days": [old.date(), (old + timedelta(days=11)).date()]}


def _check(seed: dict[str, Any]) -> None:
    db = ALIAS
    snaps = list(Snapshot.objects.using(db).filter(project_id=seed["project_id"]).order_by("turn"))
    assert [s.snapshot_id for s in snaps] == seed["ids"]
    events = list(
        CompressionEvent.objects.using(db).filter(project_id=seed["project_id"]).order_by("snapshot_ref")
    )
    assert [(e.snapshot_ref, e.received_at) for e in events] == [(s.id, s.received_at) for s in snaps]
    with connections[db].cursor() as cur:
        cur.execute("SELECT tableoid::regclass::text FROM ingest_snapshot ORDER BY turn")
        assert [r[0] for r in cur.fetchall()] == [
            partitions.partition_name("ingest_snapshot", d) for d in seed["days"]
        ]
        cur.execute("SELECT last_seen FROM ingest_blockcontent")
        assert cur.fetchone()[0] == datetime.now(tz=UTC).date()


def test_existing_rows_move_into_the_day_partitions_and_back(scratch_db: BaseDatabaseWrapper) -> None:
    seed = _seed(migrate(scratch_db, BEFORE))
    migrate(scratch_db)
    _check(seed)

    migrate(scratch_db, BEFORE)
    with scratch_db.cursor() as cur:
        cur.execute("SELECT relkind FROM pg_class WHERE oid = 'ingest_snapshot'::regclass")
        assert cur.fetchone()[0] == "r"
        cur.execute("SELECT count(*) FROM ingest_snapshot")
        assert cur.fetchone()[0] == 2

    migrate(scratch_db)
    _check(seed)


def _reloptions(name: str) -> list[str]:
    with connection.cursor() as cur:
        cur.execute("SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = %s::regclass", [name])
        return list(cur.fetchone()[0])


@pytest.mark.django_db
def test_every_turn_partition_stores_rows_up_to_half_a_page_uncompressed(project: Project) -> None:
    """A turn of 16 blocks makes a row of about 2.5 KB, over the size from which PostgreSQL
    compresses a row's values by default: stored as it is, in a day partition made by the
    migrations, in one made later and in the default partition."""
    later = datetime.now(tz=UTC).date() + timedelta(days=partitions.DAYS_AHEAD + 3)
    partitions.partitions_ensure(start=later, today=later, days_ahead=0)
    names = [p.name for p in partitions.partitions_list("ingest_snapshot")]
    assert partitions.partition_name("ingest_snapshot", later) in names
    for name in names:
        assert "toast_tuple_target=4080" in _reloptions(name), name

    blocks = [block(f"doc-{i:02d}", "retrieval", f"Document {i} about the fare rules") for i in range(15)]
    blocks.append(block("user", "user", "Which fare can I change for free?"))
    snap = snapshot(blocks=blocks, output={"text": "The flexible fare. " * 20})
    assert snapshot_batch_ingest(project=project, batch=[snap]).created == 1
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_column_size(s.*), pg_column_compression(change), pg_column_compression(kind_tokens), "
            "pg_column_compression(output), pg_column_compression(block_hashes) "
            "FROM ingest_snapshot s WHERE project_id = %s",
            [project.pk],
        )
        size, *compressed = cur.fetchone()
    assert 2032 < size <= 4080
    assert compressed == [None, None, None, None]
