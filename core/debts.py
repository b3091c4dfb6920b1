"""Work owed to stored snapshots, kept in the database until it is done.

An ingest batch's new snapshots are owed work that runs after the commit, on a Celery queue (alert
evaluation, insights' analysis). The debt is a row written in the batch's own transaction, so it is
stored with the snapshots or not at all; the task deletes it once the work is done. A broker
outage or a killed worker therefore cannot lose it: a beat sweeper claims the rows still there a
grace after they were due and queues them again. This module is that policy, once: the abstract
row (`PendingWork`, each app keeps its own table) and the recording, finishing and claiming of it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.contrib.postgres.fields import ArrayField
from django.db import connection, models, transaction
from django.db.models import F
from django.utils import timezone

logger = logging.getLogger(__name__)


class PendingWork(models.Model):
    """The work owed to one ingest batch's new snapshots (SNAPSHOT_REFS of PROJECT), due for the
    sweeper at `due_at`; `sweeps` counts how often the sweeper queued it again."""

    project = models.ForeignKey("core.Project", on_delete=models.CASCADE, related_name="+")
    snapshot_refs = ArrayField(models.BigIntegerField())
    created_at = models.DateTimeField()
    due_at = models.DateTimeField()
    sweeps = models.IntegerField(default=0)

    class Meta:
        abstract = True
        ordering = ["due_at", "id"]

    def __str__(self) -> str:
        return f"{self._meta.verbose_name} #{self.pk} ({len(self.snapshot_refs)} snapshots)"


W = TypeVar("W", bound=PendingWork)


def debt_record(model: type[W], *, project_id: int, snapshot_refs: list[int], grace: timedelta) -> int:
    """Record that SNAPSHOT_REFS are owed MODEL's work, due for the sweeper after GRACE; its id.
    Call it inside the ingest transaction."""
    now = timezone.now()
    # One INSERT by hand: on the ingest path, the ORM's create cost more than the statement. The
    # ids go as one array literal: adapted as a list, element by element, they cost more again.
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {model._meta.db_table} (project_id, snapshot_refs, created_at, due_at, sweeps)"  # noqa: S608 - a model's table
            " VALUES (%s, %s::bigint[], %s, %s, 0) RETURNING id",
            [project_id, "{" + ",".join(map(str, map(int, snapshot_refs))) + "}", now, now + grace],
        )
        row = cur.fetchone()
    assert row is not None  # INSERT ... RETURNING returns its row
    return int(row[0])


def debt_enqueue(task: Any, *, project_id: int, snapshot_refs: list[int], pending_id: int) -> None:
    """Queue TASK for a debt (kwargs project_id, snapshot_refs, pending_id). The message's
    printable form names the number of snapshots instead of listing them: Celery would otherwise
    build a repr of every id on the ingest path. Raises what the broker raises."""
    task.apply_async(
        kwargs={"project_id": project_id, "snapshot_refs": snapshot_refs, "pending_id": pending_id},
        kwargsrepr=f"{{'project_id': {project_id}, 'snapshot_refs': <{len(snapshot_refs)} ids>, "
                   f"'pending_id': {pending_id}}}",
    )


def debt_forget(model: type[W], *, pending_id: int) -> None:
    """The work of PENDING_ID is done: forget the debt."""
    model._default_manager.filter(pk=pending_id).delete()


def debt_keep(model: type[W], *, pending_id: int, due: datetime,
              snapshot_refs: list[int] | None = None) -> None:
    """The work of PENDING_ID is not all done: keep the debt for the sweeper at DUE, narrowed to
    SNAPSHOT_REFS when given (a non-empty list: the snapshots still owed)."""
    if snapshot_refs is not None and not snapshot_refs:
        raise ValueError("no snapshots left: forget the debt (debt_forget)")
    qs = model._default_manager.filter(pk=pending_id)
    if snapshot_refs is None:
        qs.update(due_at=due)
    else:
        qs.update(snapshot_refs=snapshot_refs, due_at=due)


@dataclass(frozen=True, slots=True)
class Claimed:
    """Debts the sweeper claimed, as (id, project_id, snapshot_refs), and how many it dropped."""

    rows: list[tuple[int, int, list[int]]]
    dropped: int


def debts_claim(model: type[W], *, grace: timedelta, limit: int, max_sweeps: int | None = None,
                now: datetime | None = None) -> Claimed:
    """Claim up to LIMIT of MODEL's debts that are due: each one's due time moves GRACE ahead (and
    its sweep count up) before the caller queues it, so concurrent sweepers never queue one twice,
    and rows another transaction holds are skipped. A debt already swept MAX_SWEEPS times is
    dropped, with an error in the log."""
    now = now or timezone.now()
    label = model._meta.label_lower
    with transaction.atomic():
        due = list(
            model._default_manager.select_for_update(skip_locked=True).filter(due_at__lte=now)
            .order_by("due_at", "id").values_list("id", "project_id", "snapshot_refs", "sweeps")[:limit]
        )
        drop = [d for d in due if max_sweeps is not None and d[3] >= max_sweeps]
        for pk, project_id, refs, _ in drop:
            logger.error("debts.dropped model=%s id=%s project_id=%s n=%d", label, pk, project_id, len(refs))
        if drop:
            model._default_manager.filter(pk__in=[d[0] for d in drop]).delete()
        keep = [d for d in due if d not in drop]
        if keep:
            model._default_manager.filter(pk__in=[d[0] for d in keep]).update(
                due_at=now + grace, sweeps=F("sweeps") + 1
            )
    return Claimed(rows=[(pk, pid, list(refs)) for pk, pid, refs, _ in keep], dropped=len(drop))


def debts_queue(task: Any, claimed: Claimed, *, label: str) -> int:
    """Queue TASK for each claimed debt (kwargs project_id, snapshot_refs, pending_id); how many
    were queued. A broker still down leaves a debt for the next sweep."""
    queued = 0
    for pk, project_id, refs in claimed.rows:
        try:
            debt_enqueue(task, project_id=project_id, snapshot_refs=refs, pending_id=pk)
            queued += 1
        except Exception:  # noqa: BLE001 - still down; the next sweep tries again
            logger.exception("%s.sweep_enqueue_failed id=%s", label, pk)
    return queued
