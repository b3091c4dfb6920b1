"""Celery tasks of the ingest app: the storage upkeep that beat runs (settings.CELERY_BEAT_SCHEDULE)."""

from __future__ import annotations

import logging

from celery import Task

from core.tasking import project_task
from ingest import dashboard, partitions, retention

logger = logging.getLogger(__name__)


# A day partition that could not get its locks (expiry or a long query held them) is tried again
# this many times, this many seconds apart, before the next beat tick tries it anyway.
PARTITIONS_RETRIES = 5
PARTITIONS_RETRY_S = 10.0


@project_task("ingest.partitions_ensure", bind=True, max_retries=PARTITIONS_RETRIES)
def partitions_ensure_task(self: Task) -> int:
    """Create the day partitions of the coming days (ingest.partitions.DAYS_AHEAD); the ones created."""
    created = len(partitions.partitions_ensure())
    missing = partitions.partitions_missing()
    if missing and self.request.retries < PARTITIONS_RETRIES:
        logger.warning("ingest.partitions_retry missing=%d first=%s retry=%d",
                       len(missing), missing[0], self.request.retries + 1)
        raise self.retry(countdown=PARTITIONS_RETRY_S)
    return created


@project_task("ingest.expire")
def expire_task() -> int:
    """Remove the turns past each project's retention (ingest.retention); the turns removed."""
    return retention.expire().snapshots_deleted


@project_task("ingest.overview_refresh")
def overview_refresh_task() -> int:
    """Bring every project's overview rollup up to date (ingest.dashboard); the projects refreshed."""
    return dashboard.overview_refresh_all()
