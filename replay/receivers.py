"""Signal and registry receivers of the replay app: auto-triage of flagged turns."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.db import transaction

from core.registry import TurnFlagged
from replay.models import QueuePriority

logger = logging.getLogger(__name__)


def on_snapshots_stored(
    sender: Any, *, project_id: int, validation_failed_refs: Sequence[int] = (), **kwargs: Any
) -> None:
    """Turns whose output failed validation: queue their triage check after the commit (the
    worker reads the project's setting and the turns; the ingest request only queues a task, and
    only when a turn failed)."""
    if not validation_failed_refs:
        return
    refs = [int(r) for r in validation_failed_refs]
    transaction.on_commit(lambda: _enqueue(project_id, refs))


def _enqueue(project_id: int, refs: list[int]) -> None:
    from replay.tasks import triage_validation

    try:
        triage_validation.apply_async(args=[project_id, refs], priority=QueuePriority.TRIAGE)
    except Exception:  # noqa: BLE001 - the broker is down: these turns go untriaged
        logger.exception("replay.triage_validation_enqueue_failed project_id=%s n=%d", project_id, len(refs))


def on_turns_flagged(flags: Sequence[TurnFlagged]) -> None:
    """Alerts just created (inside their transaction): a triage per turn, queued at commit."""
    from replay.services.triage import triages_record

    triages_record(flags=flags)
