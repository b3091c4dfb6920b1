"""Celery tasks of the ingest app: the storage upkeep that beat runs (settings.CELERY_BEAT_SCHEDULE)."""

from __future__ import annotations

from celery import shared_task

from ingest import partitions, retention


@shared_task(name="ingest.partitions_ensure", acks_late=True, ignore_result=True)
def partitions_ensure_task() -> int:
    """Create the day partitions of the coming days (ingest.partitions.DAYS_AHEAD)."""
    return len(partitions.partitions_ensure())


@shared_task(name="ingest.expire", acks_late=True, ignore_result=True)
def expire_task() -> int:
    """Remove the turns past each project's retention (ingest.retention); the turns removed."""
    return retention.expire().snapshots_deleted
