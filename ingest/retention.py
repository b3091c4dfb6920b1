"""Retention: each project keeps its turns for `Project.retention_days` after they arrived.

`expire` (Celery beat, task `ingest.expire`) removes what is past each project's cutoff:

1. Whole day partitions whose every row is past every project's cutoff (older than the longest
   retention of any project) are dropped, after the rows of registered derived tables
   (core.registry.expiring_tables) and the sessions they held are dealt with.
2. Otherwise a project whose retention is shorter than the partition's age loses its rows of it by
   bounded deletes, batch by batch, each in a transaction of its own.
3. Sessions left with no turn are deleted; the others get their turn count and first time again.
   Each session records the turn numbers that expired (`expired_turns`), and a session deleted
   whole leaves a row in `ingest_session_expired` for EXPIRED_SESSION_DAYS: pages and the API say
   "expired" for those and "not found" for what was never sent.
4. Overview rollup days before the cutoff, and block and message texts that no kept turn refers to
   (their `last_seen` day is before the cutoff's day: see ingest.store), are deleted in batches.

No step holds a lock long: row deletes are bounded batches, and every statement runs under a short
`lock_timeout` (a partition drop that cannot get its lock at once is tried on the next run).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from core import registry
from core.models import Project
from ingest.partitions import PARTITIONED_TABLES, Partition, partition_drop, partitions_list

logger = logging.getLogger(__name__)

BATCH = 5_000
LOCK_TIMEOUT = "1s"
# How long a session expired whole is remembered as such (then it is just not found).
EXPIRED_SESSION_DAYS = 365

# The turn numbers of the rows of {source} (project_id, session_ref, turn) added to their sessions'
# expired turns.
_MARK_EXPIRED = """
    UPDATE ingest_session s SET expired_turns = s.expired_turns + x.turns
    FROM (SELECT project_id, session_ref, range_agg(int8range(turn, turn, '[]')) AS turns FROM {source}
          GROUP BY project_id, session_ref) x
    WHERE s.project_id = x.project_id AND s.id = x.session_ref
"""
CHILD_TABLES = PARTITIONED_TABLES[1:]


@dataclass
class ExpiryReport:
    partitions_dropped: list[str] = field(default_factory=list)
    snapshots_deleted: int = 0
    sessions_deleted: int = 0
    blocks_deleted: int = 0
    messages_deleted: int = 0
    derived_deleted: int = 0
    seconds: float = 0.0


def project_cutoff(project: Project, now: datetime | None = None) -> datetime:
    """The time before which PROJECT's turns have expired."""
    return (now or timezone.now()) - timedelta(days=project.retention_days)


def _rest(started: float) -> None:
    """After a batch that began at STARTED (perf_counter): rest CTXOBS_EXPIRE_PAUSE times its
    duration, so that ingest, which shares the database, keeps its rate while expiry runs."""
    pause = float(settings.CTXOBS_EXPIRE_PAUSE)
    if pause > 0:
        time.sleep(min(5.0, pause * (time.perf_counter() - started)))


def _delete_batches(sql: str, params: list[Any]) -> int:
    """Run a bounded DELETE (SQL must delete at most BATCH rows) until it deletes fewer; the rows
    deleted. Each batch commits on its own, then rests (`_rest`)."""
    total = 0
    while True:
        started = time.perf_counter()
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            cur.execute(sql, params)
            n: int = cur.rowcount
        total += n
        if n < BATCH:
            return total
        _rest(started)


def _derived_delete(*, project_id: int | None, before: datetime) -> int:
    """Rows of the registered derived tables older than BEFORE (of one project, or of all)."""
    n = 0
    for t in registry.expiring_tables():
        # A day of sums stays while part of it is kept: it goes once the cutoff has passed its end.
        where = (f'"{t.time_column}" < (%s::timestamptz AT TIME ZONE \'UTC\')::date' if t.days
                 else f'"{t.time_column}" < %s')
        if project_id is not None:
            where += f' AND "{t.project_column}" = %s'
        params: list[Any] = [before] + ([project_id] if project_id is not None else [])
        n += _delete_batches(
            f'DELETE FROM "{t.table}" WHERE {where} AND (tableoid, ctid) IN '
            f'(SELECT tableoid, ctid FROM "{t.table}" WHERE {where} LIMIT {BATCH})',
            params + params,
        )
    return n


def _sessions_settle(refs: Iterable[tuple[int, int]]) -> int:
    """Delete the sessions among REFS ((project_id, session id)) with no turn left; the others get
    their turn count and first time from the turns they keep. The sessions deleted."""
    pending = sorted(set(refs))
    deleted = 0
    started = time.perf_counter()
    for i in range(0, len(pending), 1000):
        if i:
            _rest(started)
            started = time.perf_counter()
        chunk = pending[i:i + 1000]
        pids, ids = [p for p, _ in chunk], [s for _, s in chunk]
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            cur.execute(
                """
                WITH gone AS (
                    DELETE FROM ingest_session s USING unnest(%s::bigint[], %s::bigint[]) AS x(project_id, id)
                    WHERE s.project_id = x.project_id AND s.id = x.id
                      AND NOT EXISTS (SELECT 1 FROM ingest_snapshot t
                                      WHERE t.project_id = s.project_id AND t.session_ref = s.id)
                    RETURNING s.project_id, s.session_id, s.expired_turns
                )
                INSERT INTO ingest_session_expired AS e (project_id, session_id, expired_turns, expired_at)
                SELECT project_id, session_id, expired_turns, now() FROM gone
                ON CONFLICT (project_id, session_id) DO UPDATE
                SET expired_turns = e.expired_turns + EXCLUDED.expired_turns, expired_at = EXCLUDED.expired_at
                """,
                [pids, ids],
            )
            deleted += cur.rowcount
            cur.execute(
                """
                UPDATE ingest_session s SET turn_count = a.n, first_seen = a.first
                FROM (SELECT t.project_id, t.session_ref, count(*) AS n, min(t.ts) AS first
                      FROM ingest_snapshot t JOIN unnest(%s::bigint[], %s::bigint[]) AS x(project_id, id)
                        ON t.project_id = x.project_id AND t.session_ref = x.id
                      GROUP BY t.project_id, t.session_ref) a
                WHERE s.project_id = a.project_id AND s.id = a.session_ref
                  AND (s.turn_count <> a.n OR s.first_seen <> a.first)
                """,
                [pids, ids],
            )
    return deleted


def _partition_sessions(p: Partition) -> list[tuple[int, int]]:
    """The sessions with turns in P, their turns there recorded as expired (before P is dropped:
    should the drop fail, a turn still stored is found before its record is looked at)."""
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cur.execute(_MARK_EXPIRED.format(source=f'"{p.name}"'))
        cur.execute(f'SELECT DISTINCT project_id, session_ref FROM "{p.name}"')
        return [(a, b) for a, b in cur.fetchall()]


def _project_rows_delete(project_id: int, cutoff: datetime, report: ExpiryReport) -> set[tuple[int, int]]:
    """Bounded deletes of one project's turns (and their child rows) received before CUTOFF; the
    sessions they belonged to."""
    sessions: set[tuple[int, int]] = set()
    while True:
        started = time.perf_counter()
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            cur.execute(
                f"""
                WITH doomed AS (
                    SELECT project_id, id, received_at FROM ingest_snapshot
                    WHERE project_id = %s AND received_at < %s LIMIT {BATCH}
                ), gone AS (
                    DELETE FROM ingest_snapshot s USING doomed d
                    WHERE s.project_id = d.project_id AND s.id = d.id AND s.received_at = d.received_at
                    RETURNING s.id, s.project_id, s.session_ref, s.received_at, s.turn
                ), marked AS ({_MARK_EXPIRED.format(source="gone")} RETURNING 1),
                {", ".join(
                    f'''{t[7:]} AS (DELETE FROM {t} c USING gone g
                        WHERE c.project_id = %s AND c.snapshot_ref = g.id AND c.received_at = g.received_at
                        RETURNING 1)'''
                    for t in CHILD_TABLES)}
                SELECT (SELECT count(*) FROM gone), ARRAY(SELECT DISTINCT session_ref FROM gone),
                       {", ".join(f"(SELECT count(*) FROM {t[7:]})" for t in CHILD_TABLES)}
                """,
                [project_id, cutoff, *[project_id] * len(CHILD_TABLES)],
            )
            row = cur.fetchone()
        assert row is not None
        n, refs = row[0], row[1]
        report.snapshots_deleted += n
        sessions.update((project_id, r) for r in refs)
        if n < BATCH:
            break
        _rest(started)
    # Child rows whose turn went in an earlier, interrupted run.
    for t in CHILD_TABLES:
        _delete_batches(
            f"DELETE FROM {t} WHERE project_id = %s AND received_at < %s AND (tableoid, ctid) IN "
            f"(SELECT tableoid, ctid FROM {t} WHERE project_id = %s AND received_at < %s LIMIT {BATCH})",
            [project_id, cutoff, project_id, cutoff],
        )
    return sessions


def _contents_delete(project_id: int, cutoff: datetime, report: ExpiryReport) -> None:
    # A text last seen on a day before the cutoff's day is referred to only by turns received
    # before the cutoff; a block's messages are never last seen before it (ingest.store).
    day = cutoff.astimezone(UTC).date()
    tables = (("ingest_blockcontent", "blocks_deleted"), ("ingest_messagecontent", "messages_deleted"))
    for table, attr in tables:
        n = _delete_batches(
            f"DELETE FROM {table} WHERE project_id = %s AND last_seen < %s AND hash IN "
            f"(SELECT hash FROM {table} WHERE project_id = %s AND last_seen < %s LIMIT {BATCH})",
            [project_id, day, project_id, day],
        )
        setattr(report, attr, getattr(report, attr) + n)


def _rollups_delete(project_id: int, cutoff: datetime) -> None:
    """The overview's rollup rows of the days before CUTOFF's (a day stays while part of it is kept):
    its per-session rows in bounded batches, then the day rows."""
    day = cutoff.astimezone(UTC).date()
    where = "project_id = %s AND day < %s"
    _delete_batches(
        f"DELETE FROM ingest_overview_session_day WHERE {where} AND (project_id, day, session_ref) IN "  # noqa: S608
        f"(SELECT project_id, day, session_ref FROM ingest_overview_session_day WHERE {where} LIMIT {BATCH})",
        [project_id, day, project_id, day],
    )
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        cur.execute(f"DELETE FROM ingest_overview_day WHERE {where}", [project_id, day])  # noqa: S608


def expire(*, now: datetime | None = None) -> ExpiryReport:
    """Remove every project's turns past its retention, and what only they used."""
    started = time.monotonic()
    now = now or timezone.now()
    report = ExpiryReport()
    projects = list(Project.objects.only("id", "retention_days"))
    if not projects:
        return report
    cutoffs = {p.pk: project_cutoff(p, now) for p in projects}
    common = min(cutoffs.values())
    sessions: set[tuple[int, int]] = set()

    # 1. Whole days that every project's retention has passed.
    for p in partitions_list("ingest_snapshot"):
        if p.day is None or p.end is None or p.end > common:
            continue
        _derived_delete(project_id=None, before=p.end)
        try:
            # Marking the turns expired takes the sessions' row locks under the same short
            # lock_timeout: a busy session puts the day off to the next run too (marking is idempotent).
            part_sessions = _partition_sessions(p)
            with connection.cursor() as cur:
                cur.execute(f'SELECT count(*) FROM "{p.name}"')
                count = cur.fetchone()[0]
            for table in reversed(PARTITIONED_TABLES):
                partition_drop(Partition(table, p.name.replace("ingest_snapshot", table, 1), p.day))
        except DatabaseError as exc:
            logger.warning("ingest.expire_partition_busy partition=%s error=%s", p.name, type(exc).__name__)
            continue
        report.partitions_dropped.append(p.name)
        report.snapshots_deleted += count
        sessions.update(part_sessions)

    # 2. Per project, the rest of what its own cutoff has passed.
    for pid, cutoff in cutoffs.items():
        sessions |= _project_rows_delete(pid, cutoff, report)
        report.derived_deleted += _derived_delete(project_id=pid, before=cutoff)

    # 3. Sessions.
    report.sessions_deleted = _sessions_settle(sessions)

    # 4. Rollups and contents, and the memory of sessions expired long ago.
    for pid, cutoff in cutoffs.items():
        _rollups_delete(pid, cutoff)
        _contents_delete(pid, cutoff, report)
    _delete_batches(
        "DELETE FROM ingest_session_expired WHERE (project_id, session_id) IN (SELECT project_id, session_id "
        f"FROM ingest_session_expired WHERE expired_at < %s LIMIT {BATCH})",
        [now - timedelta(days=EXPIRED_SESSION_DAYS)],
    )
    report.seconds = time.monotonic() - started
    logger.info(
        "ingest.expired partitions=%d snapshots=%d sessions=%d blocks=%d messages=%d derived=%d seconds=%.2f",
        len(report.partitions_dropped), report.snapshots_deleted, report.sessions_deleted,
        report.blocks_deleted, report.messages_deleted, report.derived_deleted, report.seconds,
    )
    return report
