"""Signal receivers: evaluation after each ingest batch, default rules for new projects."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from core import debts

logger = logging.getLogger(__name__)


def on_snapshots_stored(sender: Any, *, project_id: int, snapshot_refs: list[int], **kwargs: Any) -> None:
    """Record the evaluation the new snapshots are owed, in the ingest transaction, and queue it
    after the commit (so the worker sees the rows). A broker outage must not fail the ingest: the
    task is then never queued, and the sweeper queues it from the recorded row once the broker
    is back."""
    if not snapshot_refs:
        return
    from alerts.services.evaluation import pending_evaluation_record

    refs = list(snapshot_refs)
    pending_id = pending_evaluation_record(project_id=project_id, snapshot_refs=refs)
    transaction.on_commit(lambda: _enqueue(project_id, refs, pending_id))


def on_lint_findings_stored(sender: Any, *, project_id: int, snapshot_refs: list[int], **kwargs: Any) -> None:
    """Lint findings were stored (in this transaction): when the project has an enabled lint rule,
    owe those turns an evaluation, recorded with the findings and queued after the commit. The
    evaluation after ingest may have run before the lint; this one sees the findings, and a
    finding already alerted on extends its alert instead of raising another."""
    from alerts.kinds import LINT_FINDING

    _owe_evaluation(project_id, snapshot_refs, LINT_FINDING)


def on_counts_analyzed(sender: Any, *, project_id: int, snapshot_refs: list[int], **kwargs: Any) -> None:
    """The counts analyzer stored calibrated counts (in this transaction): the count-drift rule
    judges the drift against the model's usual ratio, which exists only now, so those turns are
    owed an evaluation when the project has an enabled count-drift rule."""
    from alerts.kinds import COUNT_DRIFT

    _owe_evaluation(project_id, snapshot_refs, COUNT_DRIFT)


def _owe_evaluation(project_id: int, snapshot_refs: list[int], kind: str) -> None:
    """Record an evaluation of SNAPSHOT_REFS in the current transaction and queue it after the
    commit, when the project has an enabled rule of KIND."""
    if not snapshot_refs:
        return
    from alerts.models import AlertRule
    from alerts.services.evaluation import pending_evaluation_record

    if not AlertRule.objects.filter(project_id=project_id, kind=kind, enabled=True).exists():
        return
    refs = list(snapshot_refs)
    pending_id = pending_evaluation_record(project_id=project_id, snapshot_refs=refs)
    transaction.on_commit(lambda: _enqueue(project_id, refs, pending_id))


def _enqueue(project_id: int, refs: list[int], pending_id: int) -> None:
    from alerts.tasks import alerts_evaluate_task

    try:
        debts.debt_enqueue(alerts_evaluate_task, project_id=project_id, snapshot_refs=refs,
                           pending_id=pending_id)
    except Exception:  # noqa: BLE001 - the broker is down; the sweeper queues it later
        logger.exception(
            "alerts.enqueue_failed project_id=%s pending_id=%s n=%d", project_id, pending_id, len(refs)
        )


def on_project_saved(sender: Any, *, instance: Any, created: bool, raw: bool = False, **kwargs: Any) -> None:
    if not created or raw:
        return
    from alerts.services.rules import default_rules_create

    # Runs inside the transaction that creates the project: both are stored, or neither.
    default_rules_create(project=instance)
