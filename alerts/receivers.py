"""Signal receivers: evaluation after each ingest commit, default rules for new projects."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)


def on_snapshots_committed(sender: Any, *, project_id: int, snapshot_refs: list[int], **kwargs: Any) -> None:
    """Enqueue the evaluation of the new snapshots. Sent after the ingest commit, so the worker
    sees the rows; a broker outage must not fail the (already acknowledged) ingest."""
    if not snapshot_refs:
        return
    from alerts.tasks import alerts_evaluate_task

    try:
        alerts_evaluate_task.apply_async(
            kwargs={"project_id": project_id, "snapshot_refs": list(snapshot_refs)}
        )
    except Exception:  # noqa: BLE001 - the broker is down; evaluation is re-runnable from the CLI
        logger.exception("alerts.enqueue_failed project_id=%s n=%d", project_id, len(snapshot_refs))


def on_project_saved(sender: Any, *, instance: Any, created: bool, raw: bool = False, **kwargs: Any) -> None:
    if not created or raw:
        return
    from alerts.services import default_rules_create

    # Runs inside the transaction that creates the project: both are stored, or neither.
    default_rules_create(project=instance)
