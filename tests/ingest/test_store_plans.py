"""The store's lookups read what their batch needs, however many turns the day already holds."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection

from core.models import Project
from ingest import partitions, store
from ingest.models import AgentSession, Snapshot
from ingest.services import snapshot_batch_ingest
from tests.factories import snapshot

SESSIONS = 40
TURNS = 25


def _rows_read(plan: dict[str, Any], table: str) -> int:
    """Rows the scans of TABLE (its partitions) read in PLAN, outside its sub- and init-plans
    (the bounds' lookups, which read one row per session at most)."""
    read = 0
    if plan.get("Relation Name", "").startswith(table):
        loops = plan["Actual Loops"]
        read += loops * (plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0))
    for child in plan.get("Plans", []):
        if child.get("Parent Relationship") not in ("SubPlan", "InitPlan"):
            read += _rows_read(child, table)
    return read


def _day_stored_and_explained(
    project: Project, sql: str, params: Callable[[list[int], datetime], list[Any]]
) -> dict[str, Any]:
    """Store TURNS turns of SESSIONS sessions today, then EXPLAIN ANALYZE SQL with PARAMS (a
    function of the refs of sessions s0-s2 and the start of today), today's partition analysed first:
    statistics left by whatever ran before (autovacuum's view of rows other tests wrote and rolled
    back) would decide the plan."""
    for turn in range(TURNS):
        snapshot_batch_ingest(
            project=project, batch=[snapshot(session_id=f"s{i}", turn=turn) for i in range(SESSIONS)]
        )
    refs = list(
        AgentSession.objects.filter(project=project, session_id__in=["s0", "s1", "s2"])
        .order_by("id").values_list("id", flat=True)
    )
    since = partitions.day_start(datetime.now(tz=UTC))
    today = partitions.partition_name("ingest_snapshot", since.date())
    with connection.cursor() as cur:
        cur.execute(f'ANALYZE "{today}"')
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params(refs, since))
        (explained,) = cur.fetchone()
    plan: dict[str, Any] = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
    return plan


@pytest.mark.django_db
@pytest.mark.parametrize("later", [True, False], ids=["turns-after-looked-for", "none-after"])
def test_the_previous_turn_lookup_reads_each_session_s_neighbours_not_the_day(
    project: Project, later: bool
) -> None:
    pid = project.pk
    # The next turn of three sessions: each one's neighbourhood is its last stored turn. Without the
    # OFFSET 0 fence the planner reads the whole day even with true statistics (a hash join over the
    # day's turns).
    plan = _day_stored_and_explained(project, store._NEIGHBOURS_SQL, lambda refs, since: [
        refs, [TURNS] * 3, [TURNS] * 3, [later] * 3, pid, since, pid, since, pid, since])

    assert plan["Actual Rows"] == 3
    # Three rows read, not the day's SESSIONS * TURNS turns (nor the three sessions' turns).
    assert _rows_read(plan, "ingest_snapshot") == 3


@pytest.mark.django_db
def test_the_next_turns_of_sessions_read_only_each_session_s_last_stored_turn(project: Project) -> None:
    """The short way (new turns after every stored one): one index lookup per session."""
    plan = _day_stored_and_explained(
        project, store._TAILS_SQL, lambda refs, since: [refs, [TURNS - 1] * 3, project.pk, since])

    assert plan["Actual Rows"] == 3
    assert _rows_read(plan, "ingest_snapshot") == 3


@pytest.mark.django_db
def test_a_session_whose_last_stored_turn_is_gone_finds_the_turn_before_it(project: Project) -> None:
    """The session's `max_turn` names a turn no longer stored (retention took its day): the
    next turn falls back to the full lookup and finds the latest turn still stored."""
    snapshot_batch_ingest(project=project, batch=[snapshot(session_id="s", turn=t) for t in range(3)])
    Snapshot.objects.filter(project=project, session_id="s", turn=2).delete()
    snapshot_batch_ingest(project=project, batch=[snapshot(session_id="s", turn=3)])
    assert Snapshot.objects.get(project=project, session_id="s", turn=3).prev_turn == 1


@pytest.mark.django_db
def test_the_store_s_lookups_are_prepared_and_work_unprepared_too(project: Project) -> None:
    """The per-batch statements are prepared on the connection (CTXOBS_DB_PREPARED, on by
    default); with preparation off (a pooler that cannot keep them) the same batch is stored."""
    snapshot_batch_ingest(project=project, batch=[snapshot(session_id="p", turn=0)])
    with connection.cursor() as cur:
        cur.execute("SELECT statement FROM pg_prepared_statements")
        statements = " ".join(r[0] for r in cur.fetchall())
    assert "FROM ingest_snapshot" in statements and "INSERT INTO ingest_session" in statements
    pg = connection.connection
    pg.execute("DEALLOCATE ALL")  # through psycopg, which forgets its prepared statements too
    threshold = pg.prepare_threshold
    pg.prepare_threshold = None
    try:
        snapshot_batch_ingest(project=project, batch=[snapshot(session_id="p", turn=1)])
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_prepared_statements")
            assert cur.fetchone()[0] == 0
    finally:
        pg.prepare_threshold = threshold
    assert Snapshot.objects.get(project=project, session_id="p", turn=1).prev_turn == 0


@pytest.mark.django_db
def test_the_duplicate_lookup_reads_one_entry_per_stored_id_though_the_day_s_statistics_are_stale(
    project: Project,
) -> None:
    """Today's partition was analysed while it held one batch (as autovacuum finds every new day
    partition in its first hours), then took the day's turns: the lookup of a batch's snapshot ids
    still probes each partition's unique index once per id instead of reading the day's turns."""
    pid = project.pk
    since = partitions.day_start(datetime.now(tz=UTC))
    today = partitions.partition_name("ingest_snapshot", since.date())
    snapshot_batch_ingest(
        project=project, batch=[snapshot(session_id=f"s{i}", turn=0) for i in range(SESSIONS)]
    )
    with connection.cursor() as cur:
        cur.execute(f'ANALYZE "{today}"')
        # Autovacuum would bring the statistics up to date at its own moment: not during this test.
        cur.execute(f'ALTER TABLE "{today}" SET (autovacuum_enabled = false)')
    try:
        for turn in range(1, TURNS):
            snapshot_batch_ingest(
                project=project, batch=[snapshot(session_id=f"s{i}", turn=turn) for i in range(SESSIONS)]
            )
        last = Snapshot.objects.filter(project=project, session_id__in=["s0", "s1", "s2"], turn=TURNS - 1)
        stored = [str(u) for u in last.values_list("snapshot_id", flat=True)]
        ids = [*stored, *(str(uuid.uuid4()) for _ in range(SESSIONS - 3))]
        with connection.cursor() as cur:
            cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + store._DUPLICATES_SQL, [ids, pid, since, 1])
            (explained,) = cur.fetchone()
    finally:
        with connection.cursor() as cur:
            cur.execute(f'ALTER TABLE "{today}" RESET (autovacuum_enabled)')
    plan: dict[str, Any] = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
    lookup = next(p for p in plan["Plans"] if p.get("Subplan Name", "").startswith("InitPlan 1"))

    assert lookup["Actual Rows"] == 3
    # Today's partition is probed by id on its unique index (a loop per id, EXPLAIN's row counts
    # averaged per loop), not read through its primary key: the day's SESSIONS * TURNS turns.
    # (an index scan, or a bitmap scan of that index: one probe either way).
    (scan,) = _scans(lookup, today)
    probe = scan if scan["Node Type"] == "Index Scan" else scan["Plans"][0]
    assert probe["Node Type"] in ("Index Scan", "Bitmap Index Scan")
    assert probe["Index Name"] == f"{today}_uniq_snapshot_id"
    assert "snapshot_id = b.snapshot_id" in probe["Index Cond"]
    assert scan["Actual Loops"] == len(ids)


def _scans(plan: dict[str, Any], relation: str) -> list[dict[str, Any]]:
    """The nodes of PLAN that scan RELATION."""
    found = [plan] if plan.get("Relation Name") == relation else []
    for child in plan.get("Plans", []):
        found.extend(_scans(child, relation))
    return found


@pytest.mark.django_db
def test_the_store_reads_timestamps_with_psycopg_s_own_loader_and_the_same_instants() -> None:
    """Django's connections load timestamptz in Python; the store's cursor uses psycopg's C loader
    (3% of a batch's CPU) and reads the same UTC instants."""
    import psycopg

    oid = psycopg.adapters.types["timestamptz"].oid
    sql = "SELECT '2020-01-01 10:00:00.123456+02'::timestamptz, NULL::timestamptz"
    with connection.cursor() as django_cur:
        cur = store._store_cursor(django_cur.cursor.connection)
        loader = cur.adapters.get_loader(oid, psycopg.pq.Format.TEXT)
        assert loader is psycopg.adapters.get_loader(oid, psycopg.pq.Format.TEXT)
        assert loader is not django_cur.cursor.adapters.get_loader(oid, psycopg.pq.Format.TEXT)
        assert loader is not None and loader.__module__.startswith("psycopg_binary")
        cur.execute(sql)
        ours = cur.fetchone()
        django_cur.execute(sql)
        djangos = django_cur.fetchone()
    expected = datetime(2020, 1, 1, 8, 0, 0, 123456, tzinfo=UTC)
    assert ours == djangos == (expected, None)
    assert ours is not None and ours[0].utcoffset() == djangos[0].utcoffset()
