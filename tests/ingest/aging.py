"""Stored turns moved into the past, as if they had arrived days ago (the tests of day partitions
and retention)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import connection

from core.models import Project
from ingest import partitions, store


def age(project: Project, days: int, *, legacy: bool = False) -> None:
    """Move PROJECT's stored turns, their sessions' first turns and the days its texts were last
    seen DAYS days back; LEGACY: as sessions stored before ingest recorded `first_received`. This
    process then forgets which texts it knows are stored, as on a new day."""
    partitions.partitions_ensure(start=datetime.now(tz=UTC).date() - timedelta(days=days + 1))
    with connection.cursor() as cur:
        for table in partitions.PARTITIONED_TABLES:
            cur.execute(
                f"UPDATE {table} SET received_at = received_at - make_interval(days => %s) "
                "WHERE project_id = %s",
                [days, project.pk],
            )
        cur.execute(
            "UPDATE ingest_session SET first_received = CASE WHEN %s THEN NULL "
            "ELSE first_received - make_interval(days => %s) END WHERE project_id = %s",
            [legacy, days, project.pk],
        )
        for table in ("ingest_blockcontent", "ingest_messagecontent"):
            cur.execute(
                f"UPDATE {table} SET last_seen = last_seen - %s WHERE project_id = %s", [days, project.pk]
            )
    forget_contents()


def forget_contents() -> None:
    """As on a new day: this process no longer knows which texts are stored."""
    store._known_blocks.clear()
    store._known_messages.clear()
