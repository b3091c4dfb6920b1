"""The contamination lint after ingest: read the new turns (and the turn before each) through
ingest.selectors, run insights.lint's checks and store one `Finding` per turn and check.

Idempotent: a finding is unique per (project, snapshot, check), so a second run over the same
turns stores nothing new. The findings and `findings_stored` (the alerts app records the
evaluation of its lint rules there) commit together, so a finding is never stored without the
evaluation that may alert on it.
"""

from __future__ import annotations

import logging
import time

from django.db import transaction

from core import pgtext
from ingest import selectors as ingest_selectors
from ingest.types import TurnContent
from insights import lint
from insights.lint_signals import findings_stored
from insights.models import Finding

logger = logging.getLogger(__name__)


def lint_turn_of(content: TurnContent) -> lint.LintTurn:
    return lint.LintTurn(
        turn=content["turn"],
        context_window=content["context_window"],
        blocks=[
            lint.LintBlock(key=b["key"], kind=b["kind"], tokens=b["tokens"], messages=b["messages"],
                           pinned=b["pinned"], compressed=b["compressed"], n_messages=n)
            for b, n in zip(content["blocks"], content["message_counts"], strict=True)
        ],
        compression=content["compression"],
        recall=content["recall"],
        output=content["output"],
    )


def lint_analyze(*, project_id: int, snapshot_refs: list[int]) -> None:
    """Lint the turns SNAPSHOT_REFS of the project and store what the checks find."""
    started = time.perf_counter()
    contents = ingest_selectors.turn_contents(
        project_id=project_id, snapshot_refs=snapshot_refs, message_kinds=lint.MESSAGE_KINDS)
    rows: list[Finding] = []
    for ref in dict.fromkeys(snapshot_refs):
        c = contents.get(ref)
        if c is None:
            continue
        prev = contents.get(c["prev_ref"]) if c["prev_ref"] is not None else None
        issues = lint.lint_turn(lint_turn_of(c), lint_turn_of(prev) if prev is not None else None)
        for issue in issues:
            rows.append(Finding(
                project_id=project_id, snapshot_ref=ref, session_ref=c["session_ref"], turn=c["turn"],
                received_at=c["received_at"], check_name=issue.check, severity=issue.severity,
                block_keys=list(issue.block_keys), evidence=pgtext.shown(issue.evidence),
                details=pgtext.shown(issue.details),
            ))
    if rows:
        with transaction.atomic():
            Finding.objects.bulk_create(rows, ignore_conflicts=True)
            findings_stored.send(sender=Finding, project_id=project_id,
                                 snapshot_refs=sorted({r.snapshot_ref for r in rows}))
    logger.info("insights.lint project_id=%s snapshots=%d findings=%d ms=%.1f", project_id,
                len(snapshot_refs), len(rows), (time.perf_counter() - started) * 1000)
