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

from core import debts
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
    pending_id = debts.debt_record(
        PendingAnalysis, project_id=project_id, snapshot_refs=refs, grace=SWEEP_GRACE
    )
    transaction.on_commit(lambda: _enqueue(project_id, refs, pending_id))


def _enqueue(project_id: int, refs: list[int], pending_id: int) -> None:
    from insights.tasks import insights_analyze_task

    try:
        debts.debt_enqueue(insights_analyze_task, project_id=project_id, snapshot_refs=refs,
                           pending_id=pending_id)
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
    if failed:
        debts.debt_keep(PendingAnalysis, pending_id=pending_id, due=timezone.now() + SWEEP_GRACE)
    else:
        debts.debt_forget(PendingAnalysis, pending_id=pending_id)


@dataclass(frozen=True, slots=True)
class SweepResult:
    queued: int
    dropped: int


def sweep(*, limit: int = SWEEP_LIMIT) -> SweepResult:
    """Queue again the debts still here a grace after they were due (core.debts: claimed first, so
    concurrent sweeps do not queue one twice); a debt swept MAX_SWEEPS times is dropped with an
    error in the log."""
    from insights.tasks import insights_analyze_task

    claimed = debts.debts_claim(PendingAnalysis, grace=SWEEP_GRACE, limit=limit, max_sweeps=MAX_SWEEPS)
    queued = debts.debts_queue(insights_analyze_task, claimed, label="insights")
    return SweepResult(queued=queued, dropped=claimed.dropped)
