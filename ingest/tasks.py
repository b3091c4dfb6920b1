"""Celery tasks of the ingest app: the storage upkeep that beat runs (settings.CELERY_BEAT_SCHEDULE)."""

from __future__ import annotations

from celery import shared_task

from ingest import dashboard, partitions, retention


@shared_task(name="ingest.partitions_ensure", acks_late=True, ignore_result=True)
def partitions_ensure_task() -> int:
    """Create the day partitions of the coming days (ingest.partitions.DAYS_AHEAD)."""
    return len(partitions.partitions_ensure())


@shared_task(name="ingest.expire", acks_late=True, ignore_result=True)
def expire_task() -> int:
    """Remove the turns past each project's retention (ingest.retention); the turns removed."""
    return retention.expire().snapshots_deleted


@shared_task(name="ingest.overview_refresh", acks_late=True, ignore_result=True)
def overview_refresh_task() -> int:
    """Bring every project's overview rollup up to date (ingest.dashboard); the projects refreshed."""
    return dashboard.overview_refresh_all()
