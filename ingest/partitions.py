"""Time partitions of the snapshot tables.

`ingest_snapshot` and its per-turn child tables are range-partitioned by `received_at`, one
partition per UTC day, plus a default partition that catches any time no day partition covers
(so ingest never fails for want of a partition). `partitions_ensure` creates the days ahead of
time; retention (ingest.retention) drops whole days once every project's cutoff has passed them.

A day partition is created as a plain table and then attached: ATTACH takes a SHARE UPDATE
EXCLUSIVE lock on the parent, which ingest's inserts do not wait for, where CREATE TABLE …
PARTITION OF would take an ACCESS EXCLUSIVE one. Every DDL statement here runs under a short
`lock_timeout`; a step that cannot get its lock fails and is tried again on the next tick.

Snapshot ids (`snapshot_id`) are unique per project within each partition (a unique index on a
partitioned table must contain the partition key). A resent snapshot is still found by the
duplicate check before a batch is written, which looks in every partition from the first turn of
its session on (`AgentSession.first_received`; ingest.store); only two concurrent batches carrying
the same new snapshot one on each side of midnight could both store it, and a snapshot id reused
by another session is found only in today's partition.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction

logger = logging.getLogger(__name__)

# The partitioned tables, parent first: all partitioned by received_at with the same bounds.
PARTITIONED_TABLES: tuple[str, ...] = (
    "ingest_snapshot",
    "ingest_compressionevent",
    "ingest_recallitem",
    "ingest_validationoutcome",
)
DAYS_AHEAD = 7
LOCK_TIMEOUT = "2s"

# Storage parameters of each partition of a table. A turn's row is about 2 KB (its block keys,
# kinds, hashes and tokens, its change, output and token counts by kind), just over the 2,032
# bytes from which PostgreSQL compresses a row's values one by one until it fits: every row paid
# for pglz on four values (two of them, the hex hashes and the output, hardly compress), a third
# of the COPY's CPU. Rows up to half a page are now stored as they are; larger ones are still
# compressed, down to that size.
PARTITION_OPTIONS: dict[str, str] = {"ingest_snapshot": "toast_tuple_target = 4080"}


@dataclass(frozen=True)
class Partition:
    table: str  # the partitioned parent
    name: str
    day: date | None  # None for the default partition

    @property
    def end(self) -> datetime | None:
        """Where the partition's range ends (exclusive)."""
        if self.day is None:
            return None
        return datetime(self.day.year, self.day.month, self.day.day, tzinfo=UTC) + timedelta(days=1)


def day_start(moment: datetime) -> datetime:
    """Where the day partition holding MOMENT begins: its UTC midnight."""
    return moment.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def partition_name(table: str, day: date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def default_name(table: str) -> str:
    return f"{table}_default"


def _bound(day: date) -> str:
    return f"{day.isoformat()} 00:00:00+00"


def _unique_snapshot_index(cur: Any, name: str) -> None:
    cur.execute(f'CREATE UNIQUE INDEX IF NOT EXISTS "{name}_uniq_snapshot_id" '
                f'ON "{name}" (project_id, snapshot_id)')


def partitions_list(table: str, *, using: str = DEFAULT_DB_ALIAS) -> list[Partition]:
    """TABLE's partitions, the default one first, then by day. Reads the catalog only: it never
    waits for a lock someone holds on a partition (deparsing a bound against its relation would
    take one, and queue behind a drop or an attach)."""
    with connections[using].cursor() as cur:
        cur.execute(
            """
            SELECT c.relname, pg_get_expr(c.relpartbound, 0)
            FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = %s::regclass
            """,
            [table],
        )
        rows = cur.fetchall()
    out: list[Partition] = []
    for name, bound in rows:
        if bound is None:  # dropped by a concurrent transaction since the catalog scan began
            continue
        if bound == "DEFAULT":
            out.append(Partition(table, name, None))
            continue
        # FOR VALUES FROM ('2026-12-03 00:00:00+00') TO (…)
        start = bound.split("'")[1]
        out.append(Partition(table, name, datetime.fromisoformat(start).astimezone(UTC).date()))
    out.sort(key=lambda p: (p.day is not None, p.day or date.min))
    return out


def _with(table: str) -> str:
    """The WITH clause of TABLE's partitions (PARTITION_OPTIONS), or nothing."""
    options = PARTITION_OPTIONS.get(table)
    return f" WITH ({options})" if options else ""


def default_partition_create(cur: Any, table: str) -> None:
    name = default_name(table)
    cur.execute(f'CREATE TABLE IF NOT EXISTS "{name}" PARTITION OF "{table}" DEFAULT{_with(table)}')
    if table == "ingest_snapshot":
        _unique_snapshot_index(cur, name)


def _day_create(cur: Any, table: str, day: date) -> None:
    """Create and attach TABLE's partition for DAY, moving in any rows the default partition
    holds for that day (ATTACH refuses to cover rows that sit in the default partition)."""
    name = partition_name(table, day)
    lo, hi = _bound(day), _bound(day + timedelta(days=1))
    cur.execute(f'CREATE TABLE "{name}" (LIKE "{table}" INCLUDING DEFAULTS INCLUDING STORAGE){_with(table)}')
    # The range as a check constraint lets ATTACH skip scanning the new table.
    cur.execute(f'ALTER TABLE "{name}" ADD CONSTRAINT "{name}_range" '
                f"CHECK (received_at IS NOT NULL AND received_at >= '{lo}' AND received_at < '{hi}')")
    default = default_name(table)
    cur.execute(
        f'WITH moved AS (DELETE FROM "{default}" WHERE received_at >= %s AND received_at < %s RETURNING *) '
        f'INSERT INTO "{name}" SELECT * FROM moved',
        [lo, hi],
    )
    if table == "ingest_snapshot":
        _unique_snapshot_index(cur, name)
    cur.execute(f"ALTER TABLE \"{table}\" ATTACH PARTITION \"{name}\" FOR VALUES FROM ('{lo}') TO ('{hi}')")
    cur.execute(f'ALTER TABLE "{name}" DROP CONSTRAINT "{name}_range"')


def partitions_ensure(*, days_ahead: int = DAYS_AHEAD, start: date | None = None,
                      today: date | None = None, using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """Create the day partitions from START (default: yesterday) to DAYS_AHEAD days after TODAY
    that do not exist yet, and the default partitions; the names created. A day that cannot get
    its locks within LOCK_TIMEOUT is left for the next run."""
    today = today or datetime.now(tz=UTC).date()
    first = start or today - timedelta(days=1)
    days = [first + timedelta(days=n) for n in range((today - first).days + days_ahead + 1)]
    created: list[str] = []
    for table in PARTITIONED_TABLES:
        with transaction.atomic(using=using), connections[using].cursor() as cur:
            cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            default_partition_create(cur, table)
        existing = {p.day for p in partitions_list(table, using=using)}
        for day in days:
            if day in existing:
                continue
            try:
                with transaction.atomic(using=using), connections[using].cursor() as cur:
                    cur.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                    _day_create(cur, table, day)
                created.append(partition_name(table, day))
            except Exception as exc:  # a lock not granted in time, or a concurrent run made it
                logger.warning("ingest.partition_create_failed table=%s day=%s error=%s",
                               table, day, type(exc).__name__)
    if created:
        logger.info("ingest.partitions_created count=%d first=%s last=%s",
                    len(created), created[0], created[-1])
    return created


def partitions_missing(*, days_ahead: int = DAYS_AHEAD, today: date | None = None,
                       using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """The partitions of today and the DAYS_AHEAD days after it that do not exist (yet)."""
    today = today or datetime.now(tz=UTC).date()
    days = [today + timedelta(days=n) for n in range(days_ahead + 1)]
    missing: list[str] = []
    for table in PARTITIONED_TABLES:
        existing = {p.day for p in partitions_list(table, using=using)}
        missing += [partition_name(table, day) for day in days if day not in existing]
    return missing


DROP_LOCK_TIMEOUT = "500ms"


def partition_drop(partition: Partition) -> None:
    """Drop one day partition (its rows go with it). Dropping a partition takes an ACCESS EXCLUSIVE
    lock on the parent for an instant; while it waits for one, new ingest waits behind it, so the
    wait is cut short at DROP_LOCK_TIMEOUT (the caller tries again later). DETACH … CONCURRENTLY is
    not open to a table with a default partition."""
    assert partition.day is not None, "the default partition is never dropped"
    with transaction.atomic(), connections[DEFAULT_DB_ALIAS].cursor() as cur:
        cur.execute(f"SET LOCAL lock_timeout = '{DROP_LOCK_TIMEOUT}'")
        cur.execute(f'DROP TABLE IF EXISTS "{partition.name}"')
