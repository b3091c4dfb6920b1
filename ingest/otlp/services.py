"""OTLP writes: model-call spans (and GenAI detail log records) stored as snapshots through the
snapshot batch path, so they are validated, deduplicated and derived exactly like SDK snapshots."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from core.models import Project
from ingest import selectors, services
from ingest.otlp import mapping
from ingest.otlp.decode import LogRecord, Span

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OtlpResult:
    """What became of an export: snapshots created / already stored, and the items refused
    (spans or log records), with the first reasons for the `partial_success` message."""

    created: int
    duplicate: int
    rejected: int
    message: str


def _number_turns(*, project: Project, snapshots: list[dict[str, Any]]) -> None:
    """Number SNAPSHOTS (already in start order) after each session's last stored turn.

    OTLP carries no turn index: a session's model calls are numbered in the order they started.
    A re-exported span keeps its snapshot id, so it is reported as a duplicate whatever number
    it gets here."""
    next_turn: dict[str, int] = {}
    for snap in snapshots:
        sid = snap["session_id"]
        if sid not in next_turn:
            session = selectors.session_get(project=project, session_id=sid)
            next_turn[sid] = session.max_turn + 1 if session is not None and session.turn_count else 0
        snap["turn"] = next_turn[sid]
        next_turn[sid] += 1


def _store(*, project: Project, snapshots: list[dict[str, Any]]) -> OtlpResult:
    if not snapshots:
        return OtlpResult(0, 0, 0, "")
    _number_turns(project=project, snapshots=snapshots)
    result = services.snapshot_batch_ingest(project=project, batch=snapshots)
    reasons = []
    for r in result.results:
        if r["status"] == "rejected":
            errors = r.get("errors") or []
            loc = ".".join(str(x) for x in errors[0]["loc"][2:]) if errors else ""
            msg = errors[0]["msg"] if errors else ""
            span = snapshots[r["index"]]["tags"].get(mapping.TAG_SPAN, "?")
            reasons.append(f"span {span}: {loc} {msg}".strip())
    message = "; ".join(reasons[:5]) + (f"; and {len(reasons) - 5} more" if len(reasons) > 5 else "")
    return OtlpResult(result.created, result.duplicate, result.rejected, message)


def otlp_traces_ingest(*, project: Project, spans: list[Span]) -> OtlpResult:
    """Store the innermost model-call spans of SPANS as snapshots; other spans are accepted and
    dropped (they carry no context)."""
    pairs = mapping.spans_to_snapshots(spans, model_windows=project.model_windows)
    res = _store(project=project, snapshots=[snap for _, snap in pairs])
    logger.info(
        "ingest.otlp_traces project_id=%s spans=%d model_calls=%d created=%d duplicate=%d rejected=%d",
        project.pk,
        len(spans),
        len(pairs),
        res.created,
        res.duplicate,
        res.rejected,
    )
    return res


def otlp_logs_ingest(*, project: Project, records: list[LogRecord]) -> OtlpResult:
    """Store each `gen_ai.client.inference.operation.details` record of RECORDS as a snapshot
    (its id is its span's, so a span exported with the same content is the same snapshot)."""
    spans = [s for r in records if (s := mapping.log_to_span(r)) is not None]
    pairs = [
        (s, mapping.span_to_snapshot(s, model_windows=project.model_windows))
        for s in sorted(spans, key=lambda s: (s.start_ns, s.span_id))
    ]
    res = _store(project=project, snapshots=[snap for _, snap in pairs])
    logger.info(
        "ingest.otlp_logs project_id=%s records=%d model_calls=%d created=%d duplicate=%d rejected=%d",
        project.pk,
        len(records),
        len(pairs),
        res.created,
        res.duplicate,
        res.rejected,
    )
    return res
