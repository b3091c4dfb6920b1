"""core.debts, the one policy for work owed to stored snapshots, on the real PostgreSQL: a debt is
claimed by one sweeper at a time, moved a grace ahead and counted; one swept too often is dropped;
finishing forgets it or keeps what is left. Both apps' tables (alerts, insights) follow it."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from alerts.models import PendingEvaluation
from core import debts
from insights.models import PendingAnalysis

GRACE = timedelta(seconds=60)


@pytest.mark.django_db
@pytest.mark.parametrize("model", [PendingAnalysis, PendingEvaluation], ids=["insights", "alerts"])
def test_a_due_debt_is_claimed_once_moved_a_grace_ahead_and_dropped_after_too_many_sweeps(
    project: Any, model: Any
) -> None:
    pid = debts.debt_record(model, project_id=project.pk, snapshot_refs=[3, 4], grace=-GRACE)
    not_due = debts.debt_record(model, project_id=project.pk, snapshot_refs=[5], grace=GRACE)

    claimed = debts.debts_claim(model, grace=GRACE, limit=10, max_sweeps=2)

    assert claimed.rows == [(pid, project.pk, [3, 4])] and claimed.dropped == 0
    row = model.objects.get(pk=pid)
    assert row.sweeps == 1 and row.due_at > timezone.now() + GRACE - timedelta(seconds=5)
    assert debts.debts_claim(model, grace=GRACE, limit=10, max_sweeps=2).rows == []  # no longer due
    model.objects.filter(pk=pid).update(due_at=timezone.now() - GRACE, sweeps=2)
    dropped = debts.debts_claim(model, grace=GRACE, limit=10, max_sweeps=2)
    assert (dropped.rows, dropped.dropped) == ([], 1)
    assert list(model.objects.values_list("pk", flat=True)) == [not_due]


@pytest.mark.django_db
def test_finishing_forgets_a_debt_or_keeps_what_is_left_for_the_sweeper(project: Any) -> None:
    a = debts.debt_record(PendingEvaluation, project_id=project.pk, snapshot_refs=[1, 2, 3], grace=GRACE)
    b = debts.debt_record(PendingEvaluation, project_id=project.pk, snapshot_refs=[7], grace=GRACE)

    c = debts.debt_record(PendingAnalysis, project_id=project.pk, snapshot_refs=[4, 5], grace=GRACE)
    later = timezone.now() + timedelta(hours=1)

    debts.debt_keep(PendingEvaluation, pending_id=a, due=later, snapshot_refs=[2])
    debts.debt_forget(PendingEvaluation, pending_id=b)
    debts.debt_keep(PendingAnalysis, pending_id=c, due=later)

    kept = PendingEvaluation.objects.get()
    assert (kept.pk, kept.snapshot_refs, kept.due_at) == (a, [2], later)
    whole = PendingAnalysis.objects.get()
    assert (whole.pk, whole.snapshot_refs, whole.due_at) == (c, [4, 5], later)
    with pytest.raises(ValueError):
        debts.debt_keep(PendingEvaluation, pending_id=a, due=later, snapshot_refs=[])
    debts.debt_forget(PendingEvaluation, pending_id=a)
    assert not PendingEvaluation.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_debt_another_sweeper_holds_is_skipped_not_waited_for(project: Any) -> None:
    pid = debts.debt_record(PendingAnalysis, project_id=project.pk, snapshot_refs=[1], grace=-GRACE)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                list(PendingAnalysis.objects.select_for_update().filter(pk=pid))
                held.set()
                release.wait(10)
        finally:
            connection.close()

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(10)
        assert debts.debts_claim(PendingAnalysis, grace=GRACE, limit=10).rows == []
    finally:
        release.set()
        t.join()
    assert [r[0] for r in debts.debts_claim(PendingAnalysis, grace=GRACE, limit=10).rows] == [pid]
