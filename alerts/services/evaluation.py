"""Evaluation after ingest: the enabled rules of a project on new snapshots and their
neighbouring turns, the evaluations owed to ingest batches, and the sweeper that queues again
what the normal path left unfinished."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from alerts import kinds as K
from alerts import rules as R
from alerts import selectors
from alerts.models import Alert, AlertRule, Delivery, PendingEvaluation
from alerts.services.delivery import deliveries_enqueue
from alerts.services.episodes import (
    alerts_from_episodes,
    alerts_update,
    episode_of,
    session_alert_counts_add,
    session_locks_take,
)
from alerts.services.incidents import incidents_group, incidents_touch
from core import debts, registry
from ingest import selectors as ingest_selectors
from ingest.types import TurnRow

logger = logging.getLogger(__name__)


@dataclass
class EvaluateResult:
    created: list[int]
    updated: int = 0
    findings: int = 0
    evaluated: int = 0
    # Snapshots whose earlier turns are missing, to evaluate again once these are due.
    deferred: list[int] = field(default_factory=list)
    retry_in: float | None = None


def _lateness() -> float:
    return float(settings.CTXOBS_ALERT_LATENESS_SECONDS)


def alerts_evaluate(*, project_id: int, snapshot_refs: list[int]) -> EvaluateResult:
    """Evaluate the enabled rules of the project on the snapshots SNAPSHOT_REFS (and on the
    turns that follow them within the rules' windows, whose neighbourhood a late turn changes).

    Safe to run twice and in any order: the alerts of a session are written under an advisory
    lock, and a finding within the cooldown of an existing alert of its rule extends that alert.
    Every read is bounded by the rules' windows and cooldowns, so the cost per snapshot does not
    grow with the session's length: two queries when nothing fires.
    """
    started = time.perf_counter()
    refs = sorted({int(r) for r in snapshot_refs})
    res = EvaluateResult(created=[])
    if not refs:
        return res
    rules = list(
        AlertRule.objects.filter(project_id=project_id, enabled=True).select_related("project").order_by("id")
    )
    if not rules:
        return res
    specs = selectors.rule_specs(rules=rules, thresholds=rules[0].project.thresholds)
    by_id = {s.id: s for s in specs}
    window = min(K.MAX_WINDOW_TURNS, max(R.window_turns(s) for s in specs))
    need_blocks = any(s.kind == K.BLOCK_SHARE for s in specs)

    # Findings are a function of committed snapshots alone, so they are computed without the
    # session lock; only reading and writing alerts happens under it.
    lines = ingest_selectors.turn_neighbourhoods(
        project_id=project_id, snapshot_refs=refs, window=window, with_blocks=need_blocks
    )
    lint = (selectors.lint_checks(project_id=project_id, lines=lines)
            if any(s.kind == K.LINT_FINDING for s in specs) else None)
    drifts = (selectors.count_drifts(project_id=project_id, lines=lines)
              if any(s.kind == K.COUNT_DRIFT for s in specs) else None)
    fired, turn_lines = _findings(lines=lines, refs=refs, specs=specs, window=window, res=res, lint=lint,
                                  drifts=drifts)
    if not fired:
        _log_eval(project_id, refs, res, started)
        return res

    new_deliveries: list[int] = []
    with transaction.atomic():
        session_locks_take(project_id=project_id, session_refs=list(fired))
        existing_rows = selectors.episodes_near(project_id=project_id, probes=_probes(fired, by_id))
        rows_by_id = {a.pk: a for a in existing_rows}
        existing: dict[int, dict[int, list[R.Episode]]] = defaultdict(dict)
        for a in existing_rows:
            if _may_take(a, fired[a.session_ref], by_id[a.rule_id]):
                existing[a.session_ref].setdefault(a.rule_id, []).append(episode_of(a))

        episodes = {sref: R.episodes_for(fs, by_id, existing[sref]) for sref, fs in fired.items()}
        to_create, to_update = alerts_from_episodes(
            project_id=project_id,
            episodes=episodes,
            rules={r.pk: r for r in rules},
            specs=by_id,
            lines=lines,
            turn_lines=turn_lines,
            rows_by_id=rows_by_id,
        )
        if to_create:
            Alert.objects.bulk_create(to_create)
            res.created = [a.pk for a in to_create]
            session_alert_counts_add(project_id=project_id, alerts=to_create)
            # Channels hear about incidents, not alerts: grouping records the state changes owed.
            new_deliveries = incidents_group(project_id=project_id, alerts=to_create)
            # Other apps' follow-up on the turns (replay's auto-triage), stored with the alerts.
            registry.turns_flagged(
                [
                    registry.TurnFlagged(
                        project_id=project_id,
                        snapshot_ref=a.snapshot_ref,
                        reason="alert",
                        alert_id=a.pk,
                        project=rules[0].project,
                    )
                    for a in to_create
                ]
            )
        if to_update:
            alerts_update(to_update)
            incidents_touch(alerts=to_update)
            res.updated = len(to_update)
    if new_deliveries:
        transaction.on_commit(lambda: deliveries_enqueue(new_deliveries))
    _log_eval(project_id, refs, res, started)
    return res



def _findings(
    *,
    lines: dict[int, list[TurnRow]],
    refs: list[int],
    specs: list[R.RuleSpec],
    window: int,
    res: EvaluateResult,
    lint: dict[int, tuple[str, ...]] | None = None,
    drifts: dict[int, selectors.Drift] | None = None,
) -> tuple[dict[int, list[R.Finding]], dict[int, list[R.Turn]]]:
    """Findings per session on the requested snapshots and, for a late one, on the turns after
    it within the window; records counts and deferrals in RES."""
    wanted = set(refs)
    # A turn whose predecessor has not arrived (yet) is judged without its history for a
    # while: rules that compare with earlier turns wait for the late turn, whose own
    # evaluation re-evaluates this one, or for the lateness allowance to pass.
    history_specs = [s for s in specs if R.window_turns(s) > 0]
    local_specs = [s for s in specs if R.window_turns(s) == 0]
    now = timezone.now()
    lateness = timedelta(seconds=_lateness())
    fired: dict[int, list[R.Finding]] = {}
    turn_lines: dict[int, list[R.Turn]] = {}
    for sref, line in lines.items():
        targets: set[int] = set()
        for i, row in enumerate(line):
            if row.ref in wanted:
                targets.update(r.ref for r in line[i : i + window + 1])
        res.evaluated += len(targets)
        turns = selectors.turns_from_rows(line, lint, drifts)
        turn_lines[sref] = turns
        complete: set[int] = set()
        waiting: set[int] = set()
        for i, row in enumerate(line):
            if row.ref not in targets:
                continue
            prev_turn = line[i - 1].turn if i > 0 else None
            has_history = row.turn == 0 if prev_turn is None else prev_turn >= row.turn - 1
            if has_history or not history_specs or row.received_at + lateness <= now:
                complete.add(row.ref)
            else:
                waiting.add(row.ref)
                due = (row.received_at + lateness - now).total_seconds()
                res.retry_in = max(res.retry_in or 0.0, due)
        res.deferred.extend(waiting)
        found = R.evaluate_line(specs, turns, complete)
        if waiting and local_specs:
            found += R.evaluate_line(local_specs, turns, waiting)
        res.findings += len(found)
        if found:
            fired[sref] = found
    return fired, turn_lines


def _probes(fired: dict[int, list[R.Finding]], specs: dict[int, R.RuleSpec]) -> list[selectors.EpisodeProbe]:
    out = []
    for sref, fs in sorted(fired.items()):
        for rule_id in sorted({f.rule_id for f in fs}):
            spec = specs[rule_id]
            mine = [f for f in fs if f.rule_id == rule_id]
            lo_ts = min(f.turn.ts for f in mine) - timedelta(seconds=spec.cooldown_seconds)
            out.append(
                selectors.EpisodeProbe(
                    session_ref=sref,
                    rule_id=rule_id,
                    from_turn=min(f.turn.turn for f in mine) - spec.cooldown_turns,
                    from_ts=lo_ts if spec.cooldown_seconds > 0 else None,
                )
            )
    return out


def _may_take(a: Alert, findings: list[R.Finding], spec: R.RuleSpec) -> bool:
    """Whether alert A's span, widened by its rule's cooldown, reaches the turns or times of
    FINDINGS (the alerts that `episode_join` may extend)."""
    mine = [f for f in findings if f.rule_id == a.rule_id]
    if not mine:
        return False
    lo, hi = min(f.turn.turn for f in mine), max(f.turn.turn for f in mine)
    if a.turn <= hi + spec.cooldown_turns and a.last_turn >= lo - spec.cooldown_turns:
        return True
    if spec.cooldown_seconds > 0:
        cd = timedelta(seconds=spec.cooldown_seconds)
        lo_ts, hi_ts = min(f.turn.ts for f in mine), max(f.turn.ts for f in mine)
        return a.ts <= hi_ts + cd and a.last_ts >= lo_ts - cd
    return False



def _log_eval(project_id: int, refs: list[int], res: EvaluateResult, started: float) -> None:
    logger.info(
        "alerts.evaluated project_id=%s snapshots=%d evaluated=%d findings=%d created=%d updated=%d"
        " deferred=%d ms=%.1f",
        project_id,
        len(refs),
        res.evaluated,
        res.findings,
        len(res.created),
        res.updated,
        len(res.deferred),
        (time.perf_counter() - started) * 1000,
    )



# --- pending evaluations and the sweeper ---------------------------------------
def _sweep_grace() -> timedelta:
    return timedelta(seconds=float(settings.CTXOBS_ALERT_SWEEP_GRACE_SECONDS))


def pending_evaluation_record(*, project_id: int, snapshot_refs: list[int]) -> int:
    """Record that SNAPSHOT_REFS are owed an evaluation; its id. Called inside the ingest
    transaction, so the debt is stored with the snapshots or not at all: one row per batch."""
    return debts.debt_record(PendingEvaluation, project_id=project_id, snapshot_refs=snapshot_refs,
                             grace=_sweep_grace())


def pending_evaluation_done(*, pending_id: int, deferred: list[int], retry_in: float | None) -> None:
    """The evaluation of PENDING_ID has run: forget it, or keep only its DEFERRED snapshots,
    due for the sweeper a grace after their own wait (their re-evaluation is queued too)."""
    if not deferred:
        debts.debt_forget(PendingEvaluation, pending_id=pending_id)
        return
    due = timezone.now() + timedelta(seconds=retry_in or 0.0) + _sweep_grace()
    debts.debt_keep(PendingEvaluation, pending_id=pending_id, due=due, snapshot_refs=deferred)


SWEEP_LIMIT = 500
# Well inside the sweep task's soft time limit (60 s).
SWEEP_BUDGET_SECONDS = 20.0


@dataclass(frozen=True, slots=True)
class SweepResult:
    evaluations: int
    deliveries: int


def alerts_sweep(*, limit: int = SWEEP_LIMIT) -> SweepResult:
    """Queue again the evaluations and deliveries that the normal path left unfinished a grace
    after they were due (never queued because the broker was down, or lost with a killed
    worker), and the deliveries whose in-flight attempt outlived its lease.

    Safe to run twice and concurrently: each pending evaluation is claimed before it is queued
    (core.debts), and both tasks are idempotent, so racing the normal path costs only a repeated
    evaluation or a skipped delivery claim."""
    from alerts.tasks import alerts_deliver_task, alerts_evaluate_task

    started = time.monotonic()
    now = timezone.now()
    grace = _sweep_grace()
    n_evaluations = 0
    # Pages until nothing is due or the time budget is spent: after a long outage the backlog
    # is one row per ingest batch, far more than one page.
    while True:
        claimed = debts.debts_claim(PendingEvaluation, grace=grace, limit=limit, now=now)
        n_evaluations += debts.debts_queue(alerts_evaluate_task, claimed, label="alerts")
        if len(claimed.rows) < limit or time.monotonic() - started > SWEEP_BUDGET_SECONDS:
            break
    overdue = now - grace
    open_states = [Delivery.Status.PENDING, Delivery.Status.RETRYING]
    stalled = list(
        Delivery.objects.filter(
            Q(status=Delivery.Status.PENDING, next_attempt_at__isnull=True, created_at__lte=overdue)
            | Q(status__in=open_states, next_attempt_at__lte=overdue)
            | Q(status=Delivery.Status.SENDING, lease_until__lte=now)
        )
        .order_by("created_at")
        .values_list("id", flat=True)[:limit]
    )
    for did in stalled:
        alerts_deliver_task.apply_async(kwargs={"delivery_id": did})
    if n_evaluations or stalled:
        logger.info("alerts.swept evaluations=%d deliveries=%d", n_evaluations, len(stalled))
    return SweepResult(evaluations=n_evaluations, deliveries=len(stalled))


# The columns an episode change writes, in the order of the UPDATE below.
