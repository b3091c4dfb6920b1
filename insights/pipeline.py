"""Analysis after commit, off the request path.

Each ingest batch records the analysis its new snapshots are owed (`PendingAnalysis`, in the
batch's own transaction); after the commit a task on the default queue runs every registered
analyzer over them, in registration order, then forgets the debt. A sweeper re-queues debts
whose task never ran (broker down, worker killed).

An analyzer is `fn(*, project_id: int, snapshot_refs: list[int]) -> None`, registered with
`analyzer_add(name, fn)` in its module's AppConfig.ready(). It must be idempotent (it may run
twice over the same snapshots) and read ingest only through its facade. An analyzer that raises
is logged and does not stop the others; the debt stays for the sweeper to retry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from insights.models import PendingAnalysis

logger = logging.getLogger(__name__)

Analyzer = Callable[..., None]
_analyzers: dict[str, Analyzer] = {}

SWEEP_GRACE = timedelta(seconds=60)
SWEEP_LIMIT = 500
MAX_SWEEPS = 20


def analyzer_add(name: str, fn: Analyzer) -> None:
    """Run FN over every new batch; registering NAME again replaces it."""
    _analyzers[name] = fn


def analyzers() -> list[tuple[str, Analyzer]]:
    return list(_analyzers.items())


def on_snapshots_stored(sender: Any, *, project_id: int, snapshot_refs: list[int], **kwargs: Any) -> None:
    """Record the analysis the new snapshots are owed, inside the ingest transaction, and queue
    it after the commit. A broker outage must not fail the ingest: the sweeper queues it later."""
    if not snapshot_refs or not _analyzers:
        return
    refs = list(snapshot_refs)
    now = timezone.now()
    row = PendingAnalysis.objects.create(
        project_id=project_id, snapshot_refs=refs, created_at=now, due_at=now + SWEEP_GRACE
    )
    pending_id = int(row.pk)
    transaction.on_commit(lambda: _enqueue(project_id, refs, pending_id))


def _enqueue(project_id: int, refs: list[int], pending_id: int) -> None:
    from insights.tasks import insights_analyze_task

    try:
        insights_analyze_task.apply_async(
            kwargs={"project_id": project_id, "snapshot_refs": refs, "pending_id": pending_id}
        )
    except Exception:  # noqa: BLE001 - the broker is down; the sweeper queues it later
        logger.exception("insights.enqueue_failed project_id=%s pending_id=%s", project_id, pending_id)


def analyze(*, project_id: int, snapshot_refs: list[int]) -> list[str]:
    """Run every analyzer over SNAPSHOT_REFS; the names of those that failed."""
    failed: list[str] = []
    for name, fn in analyzers():
        try:
            fn(project_id=project_id, snapshot_refs=snapshot_refs)
        except Exception:  # noqa: BLE001 - one analyzer's fault must not stop the others
            logger.exception("insights.analyzer_failed name=%s project_id=%s n=%d",
                             name, project_id, len(snapshot_refs))
            failed.append(name)
    return failed


def pending_done(*, pending_id: int, failed: list[str]) -> None:
    """Forget the debt once every analyzer ran; keep it for the sweeper when one failed."""
    qs = PendingAnalysis.objects.filter(pk=pending_id)
    if failed:
        qs.update(due_at=timezone.now() + SWEEP_GRACE)
    else:
        qs.delete()


@dataclass(frozen=True, slots=True)
class SweepResult:
    queued: int
    dropped: int


def sweep(*, limit: int = SWEEP_LIMIT) -> SweepResult:
    """Queue again the debts still here a grace after they were due. Each is claimed by moving
    its due time ahead before it is queued, so concurrent sweeps do not queue it twice; a debt
    swept MAX_SWEEPS times is dropped with an error in the log."""
    from insights.tasks import insights_analyze_task

    now = timezone.now()
    queued = dropped = 0
    with transaction.atomic():
        rows = list(
            PendingAnalysis.objects.select_for_update(skip_locked=True)
            .filter(due_at__lte=now).order_by("due_at", "id")[:limit]
        )
        for row in rows:
            if row.sweeps >= MAX_SWEEPS:
                logger.error("insights.pending_dropped id=%s project_id=%s n=%d",
                             row.pk, row.project_id, len(row.snapshot_refs))
                row.delete()
                dropped += 1
                continue
            row.sweeps += 1
            row.due_at = now + SWEEP_GRACE
            row.save(update_fields=["sweeps", "due_at"])
    for row in rows:
        if row.pk is None:
            continue
        try:
            insights_analyze_task.apply_async(kwargs={
                "project_id": row.project_id, "snapshot_refs": list(row.snapshot_refs), "pending_id": row.pk})
            queued += 1
        except Exception:  # noqa: BLE001 - still down; the next sweep tries again
            logger.exception("insights.sweep_enqueue_failed id=%s", row.pk)
    return SweepResult(queued=queued, dropped=dropped)
