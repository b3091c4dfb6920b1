"""Counts you can trust: the "counts" analyzer.

For every new turn whose provider reported its prompt tokens:

1. our count is the prompt counted with the model family's own tokenizer and chat-template
   overhead when one is configured (`insights.counts_tokenizers`), else ingest's count
   (tiktoken, estimated with cl100k_base for models OpenAI does not tokenize);
2. the turn's ratio is reported / ours; the model's usual ratio is the median of that ratio over
   its last USUAL_WINDOW turns in the project (USUAL_MIN at least; else 1.0, and an estimate
   is then flagged only beyond ESTIMATE_WARN);
3. the drift is measured against the usual ratio: (ours x usual - reported) / reported, flagged
   beyond COUNT_DRIFT_WARN. An estimate that always reads 8% low is the model's usual and is not
   flagged; a turn whose provider saw less than usual (a dropped message) is.

Idempotent: each turn's row is written again with the same figures when the analyzer runs twice.
"""

from __future__ import annotations

import logging
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.dispatch import Signal
from django.utils import timezone

from core import registry
from ctxobs import tokens as tok
from ctxobs.wire import COUNT_DRIFT_WARN
from ingest import selectors
from ingest.types import CountInput, Message
from insights import counts_tokenizers
from insights.models import ModelCountRatio, TurnCount

logger = logging.getLogger(__name__)

# Sent inside the transaction that stores the calibrated counts, with project_id and
# snapshot_refs (the turns analysed). The alerts app owes those turns a count-drift evaluation,
# recorded in the same transaction: the rule judges the calibrated drift, which exists only now.
counts_analyzed = Signal()

USUAL_WINDOW = 50
USUAL_MIN = 5
# Before a model has a usual ratio, a count ingest marked estimated is compared with the
# provider's with this wider margin: cl100k_base standing in for another family's tokenizer is
# commonly 5-20% off, and so is the family's own vocabulary under a chat template that is not
# quite the one the server applies. Flagging each new model's first turns teaches people to
# ignore flags.
ESTIMATE_WARN = 0.25


@dataclass(frozen=True, slots=True)
class Calibrated:
    ours: int
    ratio: float
    usual_ratio: float | None
    usual_n: int
    drift: float
    flagged: bool


def usual_ratio(history: Sequence[float]) -> float | None:
    """The median of the last USUAL_WINDOW ratios; None with fewer than USUAL_MIN."""
    recent = history[-USUAL_WINDOW:]
    return statistics.median(recent) if len(recent) >= USUAL_MIN else None


def calibrate(ours: int, reported: int, history: Sequence[float], *, exact: bool) -> Calibrated:
    """The drift of one turn against the usual ratio of the turns before it (HISTORY, oldest
    first); without one, against zero, with the wider ESTIMATE_WARN margin unless EXACT."""
    ours = max(1, ours)
    usual = usual_ratio(history)
    expected = ours * (usual if usual is not None else 1.0)
    drift = (expected - reported) / reported
    margin = COUNT_DRIFT_WARN if usual is not None or exact else ESTIMATE_WARN
    return Calibrated(
        ours=ours, ratio=reported / ours, usual_ratio=usual, usual_n=min(len(history), USUAL_WINDOW),
        drift=drift, flagged=abs(drift) > margin,
    )


# --- counting with the family's tokenizer ------------------------------------------------------
def _message_texts(m: Message) -> tuple[list[str], bool]:
    """The texts of one message that the template writes out, and whether it has a name."""
    texts: list[str] = []
    for key, value in m.items():
        if key in ("role", "block") or key.startswith("ctxobs_") or value is None:
            continue
        texts.append(value if isinstance(value, str) else tok._value_text(value))
    return texts, bool(m.get("name"))


def native_counts(project_id: int, inputs: Sequence[CountInput]) -> dict[int, tuple[int, str]]:
    """Per snapshot whose model family has a tokenizer: (prompt tokens, the tokenizer's label).
    Messages are read for those snapshots only (three queries); each distinct text is counted once."""
    families = {i.ref: counts_tokenizers.for_model(i.model_name) for i in inputs}
    refs = [ref for ref, t in families.items() if t is not None and not counts_tokenizers.is_down(t)]
    if not refs:
        return {}
    blocks = selectors.snapshots_blocks(project_id=project_id, snapshot_refs=refs)
    by_ref = {i.ref: i for i in inputs}
    out: dict[int, tuple[int, str]] = {}
    for ref in refs:
        family = families[ref]
        assert family is not None
        if counts_tokenizers.is_down(family):
            continue  # it failed on an earlier turn of this batch
        snap = by_ref[ref]
        texts: list[str] = []
        n_messages = n_names = 0
        for b in blocks.get(ref, []):
            for m in b["messages"]:
                t, named = _message_texts(m)
                texts.extend(t)
                n_messages += 1
                n_names += named
        if isinstance(snap.tools, list) and snap.tools:
            texts.append(tok._value_text(snap.tools))
        overhead = tok.template_overhead(snap.model_name).total(n_messages, n_names)
        if overhead is None:
            overhead = tok.OPENAI_OVERHEAD.total(n_messages, n_names) or 0
        try:
            n = sum(family.count(texts))
        except counts_tokenizers.TokenizerUnavailable as exc:
            counts_tokenizers.unavailable(family, exc)
            continue
        out[ref] = (n + overhead, family.label)
    return out


# --- the analyzer ----------------------------------------------------------------------------
Key = tuple[datetime, int]  # (received_at, snapshot_ref): the order turns are calibrated in


def _history(
    project_id: int, models: list[str], batch: list[CountInput]
) -> dict[str, list[tuple[Key, float]]]:
    """Per model, in order, the analysed turns outside the batch that a batch turn may look back
    on: the last USUAL_WINDOW before the batch's first turn and every one between its first and
    its last (one query)."""
    first, last = (batch[0].received_at, batch[0].ref), (batch[-1].received_at, batch[-1].ref)
    refs = [i.ref for i in batch]
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT model_name, received_at, snapshot_ref, ratio FROM (
                SELECT model_name, received_at, snapshot_ref, ratio,
                       row_number() OVER (PARTITION BY model_name
                                          ORDER BY received_at DESC, snapshot_ref DESC) AS rn
                FROM insights_turncount
                WHERE project_id = %(p)s AND model_name = ANY(%(models)s)
                  AND (received_at, snapshot_ref) < (%(first_at)s, %(first_ref)s)
            ) h WHERE rn <= %(window)s
            UNION ALL
            SELECT model_name, received_at, snapshot_ref, ratio FROM insights_turncount
            WHERE project_id = %(p)s AND model_name = ANY(%(models)s)
              AND (received_at, snapshot_ref) > (%(first_at)s, %(first_ref)s)
              AND (received_at, snapshot_ref) < (%(last_at)s, %(last_ref)s)
              AND NOT (snapshot_ref = ANY(%(refs)s::bigint[]))
            ORDER BY 2, 3
            """,
            {"p": project_id, "models": models, "first_at": first[0], "first_ref": first[1],
             "last_at": last[0], "last_ref": last[1], "refs": refs, "window": USUAL_WINDOW},
        )
        rows = cur.fetchall()
    out: dict[str, list[tuple[Key, float]]] = defaultdict(list)
    for model, at, ref, ratio in rows:
        out[model].append(((at, ref), ratio))
    return out


def analyze_counts(*, project_id: int, snapshot_refs: list[int]) -> None:
    """The analyzer: calibrate the new turns' counts and record them (see the module docstring)."""
    batch = [i for i in selectors.count_inputs(project_id=project_id, snapshot_refs=snapshot_refs)
             if i.reported and i.reported > 0]
    if not batch:
        return
    natives = native_counts(project_id, batch)
    models = sorted({i.model_name for i in batch})
    others = _history(project_id, models, batch)
    history: dict[str, list[float]] = defaultdict(list)
    taken: dict[str, int] = defaultdict(int)
    rows: list[TurnCount] = []
    for i in batch:  # in the order received
        # The analysed turns of other batches received before this one join its history first.
        before, seen = others[i.model_name], taken[i.model_name]
        while seen < len(before) and before[seen][0] < (i.received_at, i.ref):
            history[i.model_name].append(before[seen][1])
            seen += 1
        taken[i.model_name] = seen
        native = natives.get(i.ref)
        ours = native[0] if native else i.counted
        assert i.reported is not None
        c = calibrate(ours, i.reported, history[i.model_name], exact=not i.counts_estimated)
        history[i.model_name].append(c.ratio)
        label = native[1] if native else (
            f"{i.encoding or 'cl100k_base'}{' (estimated)' if i.counts_estimated else ''}")
        rows.append(TurnCount(
            project_id=project_id, snapshot_ref=i.ref, received_at=i.received_at, model_name=i.model_name,
            counted=i.counted, native=native[0] if native else None, tokenizer=label[:300],
            reported=i.reported,
            ratio=c.ratio, usual_ratio=c.usual_ratio, usual_n=c.usual_n, drift=c.drift, flagged=c.flagged,
        ))
    with transaction.atomic():
        _store(project_id, rows, models, history)
    flagged = sum(r.flagged for r in rows)
    if flagged:
        logger.info("insights.counts_flagged project_id=%s n=%d flagged=%d", project_id, len(rows), flagged)


def _store(
    project_id: int, rows: list[TurnCount], models: list[str], history: dict[str, list[float]]
) -> None:
    TurnCount.objects.bulk_create(
        rows, update_conflicts=True, unique_fields=["project", "snapshot_ref"],
        update_fields=["received_at", "model_name", "counted", "native", "tokenizer", "reported", "ratio",
                       "usual_ratio", "usual_n", "drift", "flagged"],
    )
    now = timezone.now()
    usual = [
        ModelCountRatio(project_id=project_id, model_name=m, ratio=r, n=min(len(history[m]), USUAL_WINDOW),
                        updated_at=now)
        for m in models if (r := usual_ratio(history[m])) is not None
    ]
    if usual:
        ModelCountRatio.objects.bulk_create(
            usual, update_conflicts=True, unique_fields=["project", "model_name"],
            update_fields=["ratio", "n", "updated_at"],
        )
    counts_analyzed.send(
        sender=TurnCount, project_id=project_id, snapshot_refs=[r.snapshot_ref for r in rows])


def register() -> None:
    """The analyzer, its per-turn table's expiry and the pages' drift figures."""
    from insights import counts_selectors, pipeline

    pipeline.analyzer_add("counts", analyze_counts)
    registry.expiring_table_add(
        registry.ExpiringTable(table=TurnCount._meta.db_table, time_column="received_at"))
    registry.count_drift_provider_set(counts_selectors.count_drifts)
