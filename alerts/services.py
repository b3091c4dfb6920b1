"""Writes of the alerts app: rules, evaluation after ingest, alert states, channels, deliveries."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from alerts import channels as ch
from alerts import rules as R
from alerts import selectors
from alerts.errors import InvalidChannel, InvalidRule
from alerts.models import (
    SEVERITY_RANK,
    Alert,
    AlertRule,
    Channel,
    Delivery,
    DeliveryAttempt,
    PendingEvaluation,
)
from core.models import Project
from ctxobs.retry import RETRY_AFTER_MAX_S, backoff_delay

logger = logging.getLogger(__name__)


# --- rules -------------------------------------------------------------------
DEFAULT_RULES: tuple[dict[str, Any], ...] = (
    {
        "name": "Entered the warn tier",
        "kind": R.TIER_CROSSING,
        "severity": "info",
        "params": {"tier": "warn"},
        "enabled": False,
    },
    {
        "name": "Entered the compress tier",
        "kind": R.TIER_CROSSING,
        "severity": "info",
        "params": {"tier": "compress"},
    },
    {
        "name": "Entered the force tier",
        "kind": R.TIER_CROSSING,
        "severity": "warning",
        "params": {"tier": "force"},
    },
    {"name": "Circuit break", "kind": R.TIER_CROSSING, "severity": "critical", "params": {"tier": "break"}},
    {"name": "Watermark spike", "kind": R.WATERMARK_SPIKE, "severity": "warning", "params": {}},
    {"name": "One huge block", "kind": R.BLOCK_SHARE, "severity": "warning", "params": {}},
    {"name": "Compression storm", "kind": R.COMPRESSION_STORM, "severity": "warning", "params": {}},
    {"name": "Validation failing", "kind": R.VALIDATION_FAILURE_RATE, "severity": "warning", "params": {}},
    {"name": "Recall misses", "kind": R.RECALL_MISS_RATE, "severity": "info", "params": {}},
    {"name": "Count drift", "kind": R.COUNT_DRIFT, "severity": "info", "params": {}},
)


def default_rules_create(*, project: Project) -> list[AlertRule]:
    """The default rules of a new project (once: a project that has rules gets none)."""
    if AlertRule.objects.filter(project=project).exists():
        return []
    objs = []
    for d in DEFAULT_RULES:
        params, _ = R.validate_params(d["kind"], d["params"])
        objs.append(
            AlertRule(
                project=project,
                name=d["name"],
                kind=d["kind"],
                severity=d["severity"],
                params=params,
                enabled=d.get("enabled", True),
                is_default=True,
            )
        )
    return AlertRule.objects.bulk_create(objs)


RULE_FIELDS = (
    "name",
    "kind",
    "severity",
    "enabled",
    "params",
    "agent",
    "model",
    "cooldown_turns",
    "cooldown_seconds",
)


def _rule_clean(data: dict[str, Any]) -> dict[str, Any]:
    errors: dict[str, str] = {}
    out: dict[str, Any] = {}
    name = str(data.get("name") or "").strip()
    if not name:
        errors["name"] = "required"
    elif len(name) > 100:
        errors["name"] = "at most 100 characters"
    out["name"] = name
    kind = data.get("kind")
    if kind not in R.KINDS:
        errors["kind"] = f"one of {', '.join(R.KINDS)}"
    else:
        params, perrs = R.validate_params(kind, data.get("params") or {})
        errors.update({f"params.{k}": v for k, v in perrs.items()})
        out["params"] = params
    out["kind"] = kind
    sev = data.get("severity") or "warning"
    if sev not in R.SEVERITIES:
        errors["severity"] = f"one of {', '.join(R.SEVERITIES)}"
    out["severity"] = sev
    out["enabled"] = bool(data.get("enabled", True))
    for f in ("agent", "model"):
        v = str(data.get(f) or "").strip()
        if len(v) > 256:
            errors[f] = "at most 256 characters"
        out[f] = v
    for f, default, hi in (("cooldown_turns", 20, 100_000), ("cooldown_seconds", 1800, 30 * 86400)):
        v = data.get(f, default)
        try:
            n = int(v if v not in (None, "") else default)
        except (TypeError, ValueError):
            errors[f] = "must be a whole number"
            continue
        if not 0 <= n <= hi:
            errors[f] = f"between 0 and {hi}"
        out[f] = n
    if errors:
        raise InvalidRule(errors)
    return out


def rule_create(*, project: Project, data: dict[str, Any]) -> AlertRule:
    clean = _rule_clean(data)
    rule = AlertRule.objects.create(project=project, **clean)
    logger.info("alerts.rule_created project_id=%s rule_id=%s kind=%s", project.pk, rule.pk, rule.kind)
    return rule


def rule_update(*, rule: AlertRule, data: dict[str, Any]) -> AlertRule:
    """Update RULE with the fields given in DATA (the others keep their values)."""
    current = {f: getattr(rule, f) for f in RULE_FIELDS}
    merged = {**current, **{k: v for k, v in data.items() if k in RULE_FIELDS}}
    if "kind" in data and data["kind"] != rule.kind and "params" not in data:
        merged["params"] = {}
    clean = _rule_clean(merged)
    for f, v in clean.items():
        setattr(rule, f, v)
    rule.save()
    logger.info("alerts.rule_updated project_id=%s rule_id=%s", rule.project_id, rule.pk)
    return rule


def rule_delete(*, rule: AlertRule) -> None:
    logger.info("alerts.rule_deleted project_id=%s rule_id=%s", rule.project_id, rule.pk)
    with transaction.atomic():
        sessions = list(Alert.objects.filter(rule=rule).values_list("session_ref", flat=True).distinct())
        project_id = rule.project_id
        rule.delete()
        _session_alert_counts_refresh(project_id=project_id, session_refs=sessions)


PREVIEW_DAYS = 7
PREVIEW_MAX_SNAPSHOTS = 20_000


def rule_preview(
    *,
    project: Project,
    data: dict[str, Any],
    days: int = PREVIEW_DAYS,
    max_snapshots: int = PREVIEW_MAX_SNAPSHOTS,
) -> dict[str, Any]:
    """How many alerts the rule in DATA would have raised over the stored snapshots of the last
    DAYS days (at most MAX_SNAPSHOTS, the most recent), with the same evaluation and cooldown
    as live evaluation. Writes nothing."""
    clean = _rule_clean({**data, "name": data.get("name") or "preview"})
    started = time.perf_counter()
    spec = R.RuleSpec(
        id=0,
        kind=clean["kind"],
        params=clean["params"],
        agent=clean["agent"],
        model=clean["model"],
        cooldown_turns=clean["cooldown_turns"],
        cooldown_seconds=float(clean["cooldown_seconds"]),
        thresholds=project.thresholds,
    )
    since = timezone.now() - timedelta(days=days)
    lines, truncated = selectors.recent_lines(
        project_id=project.pk, since=since, limit=max_snapshots, with_blocks=spec.kind == R.BLOCK_SHARE
    )
    fired = 0
    sessions = 0
    examples: list[dict[str, Any]] = []
    n_snapshots = 0
    for rows in lines.values():
        n_snapshots += len(rows)
        turns = selectors.turns_from_rows(rows)
        eps = R.episodes_for(R.evaluate_line([spec], turns), {0: spec}).get(0, [])
        if eps:
            sessions += 1
            fired += len(eps)
            for ep in eps[: max(0, 10 - len(examples))]:
                examples.append(
                    {"session_id": rows[0]["session_id"], "turn": ep.first_turn, "title": ep.title}
                )
    return {
        "fired": fired,
        "sessions": sessions,
        "snapshots": n_snapshots,
        "truncated": truncated,
        "days": days,
        "examples": examples,
        "ms": round((time.perf_counter() - started) * 1000, 1),
    }


# --- evaluation --------------------------------------------------------------
def _lock_key(project_id: int, session_ref: int) -> int:
    digest = hashlib.blake2b(f"alerts:{project_id}:{session_ref}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


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
    window = min(R.MAX_WINDOW_TURNS, max(R.window_turns(s) for s in specs))
    need_blocks = any(s.kind == R.BLOCK_SHARE for s in specs)

    # Findings are a function of committed snapshots alone, so they are computed without the
    # session lock; only reading and writing alerts happens under it.
    lines = selectors.snapshot_neighbourhoods(
        project_id=project_id, snapshot_refs=refs, window=window, with_blocks=need_blocks
    )
    fired, turn_lines = _findings(lines=lines, refs=refs, specs=specs, window=window, res=res)
    if not fired:
        _log_eval(project_id, refs, res, started)
        return res

    new_deliveries: list[int] = []
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute(
                "SELECT pg_advisory_xact_lock(k)"
                " FROM unnest(%s::bigint[]) WITH ORDINALITY AS u(k, i) ORDER BY i",
                [sorted(_lock_key(project_id, s) for s in fired)],
            )
        existing_rows = selectors.episodes_near(project_id=project_id, probes=_probes(fired, by_id))
        rows_by_id = {a.pk: a for a in existing_rows}
        existing: dict[int, dict[int, list[R.Episode]]] = defaultdict(dict)
        for a in existing_rows:
            if _may_take(a, fired[a.session_ref], by_id[a.rule_id]):
                existing[a.session_ref].setdefault(a.rule_id, []).append(_episode_of(a))

        episodes = {sref: R.episodes_for(fs, by_id, existing[sref]) for sref, fs in fired.items()}
        to_create, to_update = _alerts_from_episodes(
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
            per_session: dict[int, int] = defaultdict(int)
            for a in to_create:
                per_session[a.session_ref] += 1
            _session_alert_counts_add(project_id=project_id, added=per_session)
            new_deliveries = _deliveries_create(project_id=project_id, alerts=to_create)
        if to_update:
            _alerts_update(to_update)
            res.updated = len(to_update)
    if new_deliveries:
        transaction.on_commit(lambda: _deliveries_enqueue(new_deliveries))
    _log_eval(project_id, refs, res, started)
    return res


# --- pending evaluations and the sweeper ---------------------------------------
def _sweep_grace() -> timedelta:
    return timedelta(seconds=float(settings.CTXOBS_ALERT_SWEEP_GRACE_SECONDS))


def pending_evaluation_record(*, project_id: int, snapshot_refs: list[int]) -> int:
    """Record that SNAPSHOT_REFS are owed an evaluation; its id. Called inside the ingest
    transaction, so the debt is stored with the snapshots or not at all: one row per batch."""
    now = timezone.now()
    row = PendingEvaluation.objects.create(
        project_id=project_id, snapshot_refs=snapshot_refs, created_at=now, due_at=now + _sweep_grace()
    )
    return int(row.pk)


def pending_evaluation_done(*, pending_id: int, deferred: list[int], retry_in: float | None) -> None:
    """The evaluation of PENDING_ID has run: forget it, or keep only its DEFERRED snapshots,
    due for the sweeper a grace after their own wait (their re-evaluation is queued too)."""
    qs = PendingEvaluation.objects.filter(pk=pending_id)
    if not deferred:
        qs.delete()
        return
    due = timezone.now() + timedelta(seconds=retry_in or 0.0) + _sweep_grace()
    qs.update(snapshot_refs=deferred, due_at=due)


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

    Safe to run twice and concurrently: each pending evaluation is claimed by moving its due
    time a grace ahead before it is queued, and both tasks are idempotent, so racing the
    normal path costs only a repeated evaluation or a skipped delivery claim."""
    from alerts.tasks import alerts_deliver_task, alerts_evaluate_task

    started = time.monotonic()
    now = timezone.now()
    grace = _sweep_grace()
    n_evaluations = 0
    # Pages until nothing is due or the time budget is spent: after a long outage the backlog
    # is one row per ingest batch, far more than one page.
    while True:
        with transaction.atomic():
            due = list(
                PendingEvaluation.objects.select_for_update(skip_locked=True)
                .filter(due_at__lte=now)
                .order_by("due_at")
                .values_list("id", "project_id", "snapshot_refs")[:limit]
            )
            if due:
                PendingEvaluation.objects.filter(pk__in=[p[0] for p in due]).update(
                    due_at=now + grace, sweeps=F("sweeps") + 1
                )
        for pending_id, project_id, refs in due:
            alerts_evaluate_task.apply_async(
                kwargs={"project_id": project_id, "snapshot_refs": list(refs), "pending_id": pending_id}
            )
        n_evaluations += len(due)
        if len(due) < limit or time.monotonic() - started > SWEEP_BUDGET_SECONDS:
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
_UPDATE_COLUMNS = (
    "id",
    "turn",
    "ts",
    "snapshot_ref",
    "last_turn",
    "last_ts",
    "value",
    "threshold",
    "peak_value",
    "title",
    "unit",
    "dedup_key",
    "contributors",
)


def _alerts_update(alerts: list[Alert]) -> None:
    """Write the episode fields of changed ALERTS in one statement. Plain SQL: the ORM's
    bulk_update builds a CASE per field and row, which costs more than the update itself."""
    now = timezone.now()
    cols: dict[str, list[Any]] = {f: [] for f in _UPDATE_COLUMNS}
    for a in alerts:
        a.updated_at = now
        for f in _UPDATE_COLUMNS[:-1]:
            cols[f].append(getattr(a, f))
        cols["contributors"].append(json.dumps(a.contributors))
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE alerts_alert a SET turn = v.turn, ts = v.ts, snapshot_ref = v.snapshot_ref,
                last_turn = v.last_turn, last_ts = v.last_ts, value = v.value, threshold = v.threshold,
                peak_value = v.peak_value, title = v.title, unit = v.unit, dedup_key = v.dedup_key,
                contributors = v.contributors::jsonb, updated_at = %s
            FROM unnest(%s::bigint[], %s::int[], %s::timestamptz[], %s::bigint[], %s::int[],
                        %s::timestamptz[], %s::float8[], %s::float8[], %s::float8[], %s::text[],
                        %s::text[], %s::text[], %s::text[])
                AS v(id, turn, ts, snapshot_ref, last_turn, last_ts, value, threshold, peak_value,
                     title, unit, dedup_key, contributors)
            WHERE a.id = v.id
            """,
            [now, *cols.values()],
        )


def _findings(
    *,
    lines: dict[int, list[dict[str, Any]]],
    refs: list[int],
    specs: list[R.RuleSpec],
    window: int,
    res: EvaluateResult,
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
            if row["id"] in wanted:
                targets.update(r["id"] for r in line[i : i + window + 1])
        res.evaluated += len(targets)
        turns = selectors.turns_from_rows(line)
        turn_lines[sref] = turns
        complete, waiting = set(), set()
        for i, row in enumerate(line):
            if row["id"] not in targets:
                continue
            prev_turn = line[i - 1]["turn"] if i > 0 else None
            has_history = row["turn"] == 0 if prev_turn is None else prev_turn >= row["turn"] - 1
            if has_history or not history_specs or row["received_at"] + lateness <= now:
                complete.add(row["id"])
            else:
                waiting.add(row["id"])
                due = (row["received_at"] + lateness - now).total_seconds()
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


def _episode_of(a: Alert) -> R.Episode:
    return R.Episode(
        rule_id=a.rule_id,
        first_turn=a.turn,
        last_turn=a.last_turn,
        first_ts=a.ts,
        last_ts=a.last_ts,
        value=a.value,
        threshold=a.threshold,
        peak_value=a.peak_value,
        title=a.title,
        snapshot_ref=a.snapshot_ref,
        unit=a.unit,
        alert_id=a.pk,
    )


def _alerts_from_episodes(
    *,
    project_id: int,
    episodes: dict[int, dict[int, list[R.Episode]]],
    rules: dict[int, AlertRule],
    specs: dict[int, R.RuleSpec],
    lines: dict[int, list[dict[str, Any]]],
    turn_lines: dict[int, list[R.Turn]],
    rows_by_id: dict[int, Alert],
) -> tuple[list[Alert], list[Alert]]:
    """New alerts for new episodes and the changed existing ones (unsaved)."""
    # Contributing blocks for new alerts and for alerts whose anchor moved to an earlier turn.
    anchored = [
        (sref, ep)
        for sref, per_rule in episodes.items()
        for eps in per_rule.values()
        for ep in eps
        if ep.created or ep.anchor_moved
    ]
    anchors = selectors.anchors_of(
        project_id=project_id, snapshot_refs=sorted({ep.snapshot_ref for _, ep in anchored})
    )
    storm_windows: dict[int, list[int]] = {}
    for sref, ep in anchored:
        if specs[ep.rule_id].kind == R.COMPRESSION_STORM:
            line = turn_lines[sref]
            idx = next(i for i, t in enumerate(line) if t.ref == ep.snapshot_ref)
            n = int(specs[ep.rule_id].params["turns"])
            storm_windows[ep.snapshot_ref] = [t.ref for t in line[max(0, idx - n + 1) : idx + 1]]
    compressed: dict[int, dict[str, int]] = {}
    if storm_windows:
        per = selectors.compressed_tokens_by_block_per_snapshot(
            project_id=project_id, snapshot_refs=sorted({r for w in storm_windows.values() for r in w})
        )
        for anchor, wrefs in storm_windows.items():
            acc: dict[str, int] = defaultdict(int)
            for r in wrefs:
                for k, v in per.get(r, {}).items():
                    acc[k] += v
            compressed[anchor] = dict(acc)
    usable = {t.ref: t.usable_tokens for line in turn_lines.values() for t in line}

    def contrib(ep: R.Episode) -> list[dict[str, Any]]:
        blocks, change = anchors.get(ep.snapshot_ref, ([], {}))
        return R.contributors(
            specs[ep.rule_id].kind,
            blocks=blocks,
            usable_tokens=usable.get(ep.snapshot_ref, 1),
            change=change,
            compressed_tokens=compressed.get(ep.snapshot_ref),
            block_kinds=specs[ep.rule_id].params.get("block_kinds") or (),
        )

    to_create: list[Alert] = []
    to_update: list[Alert] = []
    for sref, per_rule in episodes.items():
        last = lines[sref][-1]
        for rule_id, eps in per_rule.items():
            rule = rules[rule_id]
            for ep in eps:
                key = f"{rule_id}:{sref}:{ep.first_turn}"
                if ep.created:
                    to_create.append(
                        Alert(
                            project_id=project_id,
                            rule=rule,
                            rule_kind=rule.kind,
                            severity=rule.severity,
                            title=ep.title[:500],
                            session_ref=sref,
                            session_id=last["session_id"],
                            agent=last["agent"],
                            model=last["model_name"],
                            turn=ep.first_turn,
                            snapshot_ref=ep.snapshot_ref,
                            ts=ep.first_ts,
                            last_turn=ep.last_turn,
                            last_ts=ep.last_ts,
                            value=ep.value,
                            threshold=ep.threshold,
                            peak_value=ep.peak_value,
                            unit=ep.unit,
                            contributors=contrib(ep),
                            dedup_key=key,
                        )
                    )
                elif ep.changed and ep.alert_id is not None:
                    a = rows_by_id[ep.alert_id]
                    a.last_turn, a.last_ts, a.peak_value = ep.last_turn, ep.last_ts, ep.peak_value
                    if ep.anchor_moved:
                        a.turn, a.ts, a.snapshot_ref = ep.first_turn, ep.first_ts, ep.snapshot_ref
                        a.value, a.threshold, a.title, a.unit = (
                            ep.value,
                            ep.threshold,
                            ep.title[:500],
                            ep.unit,
                        )
                        a.contributors, a.dedup_key = contrib(ep), key
                    to_update.append(a)
    return to_create, to_update


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


def _session_alert_counts_add(*, project_id: int, added: dict[int, int]) -> None:
    """Add the alerts just created to AgentSession.alert_count (the one ingest field this app
    owns): an increment, not a recount, so that it costs the same in a session with many alerts."""
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE ingest_session s SET alert_count = s.alert_count + v.n
            FROM unnest(%s::bigint[], %s::int[]) AS v(id, n)
            WHERE s.project_id = %s AND s.id = v.id
            """,
            [list(added), list(added.values()), project_id],
        )


def _session_alert_counts_refresh(*, project_id: int, session_refs: list[int]) -> None:
    """Recount AgentSession.alert_count (the one ingest field this app owns) for SESSION_REFS."""
    if not session_refs:
        return
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE ingest_session s SET alert_count = (
                SELECT count(*) FROM alerts_alert a
                WHERE a.project_id = s.project_id AND a.session_ref = s.id)
            WHERE s.project_id = %s AND s.id = ANY(%s::bigint[])
            """,
            [project_id, list(session_refs)],
        )


# --- alert states ------------------------------------------------------------
def alert_acknowledge(*, alert: Alert, user: Any) -> Alert:
    """open -> acknowledged (an acknowledged or resolved alert is left as it is)."""
    with transaction.atomic():
        a = Alert.objects.select_for_update().get(pk=alert.pk)
        if a.state == Alert.State.OPEN:
            a.state = Alert.State.ACKNOWLEDGED
            a.acknowledged_at = timezone.now()
            a.acknowledged_by = user if getattr(user, "pk", None) else None
            a.save(update_fields=["state", "acknowledged_at", "acknowledged_by", "updated_at"])
            logger.info("alerts.acknowledged project_id=%s alert_id=%s", a.project_id, a.pk)
    return a


def alert_resolve(*, alert: Alert, user: Any) -> Alert:
    """open or acknowledged -> resolved."""
    with transaction.atomic():
        a = Alert.objects.select_for_update().get(pk=alert.pk)
        if a.state != Alert.State.RESOLVED:
            now = timezone.now()
            if a.acknowledged_at is None:
                a.acknowledged_at = now
                a.acknowledged_by = user if getattr(user, "pk", None) else None
            a.state = Alert.State.RESOLVED
            a.resolved_at = now
            a.resolved_by = user if getattr(user, "pk", None) else None
            a.save(
                update_fields=[
                    "state",
                    "acknowledged_at",
                    "acknowledged_by",
                    "resolved_at",
                    "resolved_by",
                    "updated_at",
                ]
            )
            logger.info("alerts.resolved project_id=%s alert_id=%s", a.project_id, a.pk)
    return a


# --- channels ----------------------------------------------------------------
def _channel_clean(project: Project, data: dict[str, Any], *, kind: str) -> dict[str, Any]:
    errors: dict[str, str] = {}
    out: dict[str, Any] = {}
    name = str(data.get("name") or "").strip()
    if not name or len(name) > 100:
        errors["name"] = "required, at most 100 characters"
    out["name"] = name
    sev = data.get("min_severity") or "info"
    if sev not in R.SEVERITIES:
        errors["min_severity"] = f"one of {', '.join(R.SEVERITIES)}"
    out["min_severity"] = sev
    out["enabled"] = bool(data.get("enabled", True))
    if kind == Channel.Kind.WEBHOOK:
        url = str(data.get("url") or "").strip()
        problem = (
            ch.webhook_url_problem(url, allow_private=project.allow_private_endpoints) if url else "required"
        )
        if problem:
            errors["url"] = problem
        out["url"] = url
        try:
            timeout = float(data.get("timeout_seconds") or 5.0)
            if not 0.1 <= timeout <= 30:
                raise ValueError
            out["timeout_seconds"] = timeout
        except (TypeError, ValueError):
            errors["timeout_seconds"] = "a number of seconds between 0.1 and 30"
        try:
            attempts = int(data.get("max_attempts") or 5)
            if not 1 <= attempts <= 10:
                raise ValueError
            out["max_attempts"] = attempts
        except (TypeError, ValueError):
            errors["max_attempts"] = "a whole number between 1 and 10"
    elif kind == Channel.Kind.EMAIL:
        raw = data.get("recipients") or []
        if isinstance(raw, str):
            raw = list(raw.replace(";", ",").replace("\n", ",").split(","))
        recips = [str(r).strip() for r in raw if str(r).strip()]
        from django.core.exceptions import ValidationError
        from django.core.validators import validate_email

        bad = []
        for r in recips:
            try:
                validate_email(r)
            except ValidationError:
                bad.append(r)
        if not recips:
            errors["recipients"] = "at least one address"
        elif bad:
            errors["recipients"] = "not an e-mail address: " + ", ".join(bad[:3])
        elif len(recips) > 50:
            errors["recipients"] = "at most 50 addresses"
        out["recipients"] = recips
        try:
            attempts = int(data.get("max_attempts") or 3)
            if not 1 <= attempts <= 10:
                raise ValueError
            out["max_attempts"] = attempts
        except (TypeError, ValueError):
            errors["max_attempts"] = "a whole number between 1 and 10"
    else:
        errors["kind"] = "webhook or email"
    if errors:
        raise InvalidChannel(errors)
    return out


def channel_create(*, project: Project, kind: str, data: dict[str, Any]) -> tuple[Channel, str | None]:
    """A new channel; for a webhook also its signing secret, returned in clear this once."""
    clean = _channel_clean(project, data, kind=kind)
    secret = ch.secret_new() if kind == Channel.Kind.WEBHOOK else None
    channel = Channel.objects.create(
        project=project, kind=kind, secret_encrypted=ch.secret_encrypt(secret) if secret else "", **clean
    )
    logger.info("alerts.channel_created project_id=%s channel_id=%s kind=%s", project.pk, channel.pk, kind)
    return channel, secret


def channel_update(*, channel: Channel, data: dict[str, Any]) -> Channel:
    fields = ["name", "min_severity", "enabled", "url", "timeout_seconds", "max_attempts", "recipients"]
    current = {f: getattr(channel, f) for f in fields}
    clean = _channel_clean(
        channel.project, {**current, **{k: v for k, v in data.items() if k in fields}}, kind=channel.kind
    )
    for f, v in clean.items():
        setattr(channel, f, v)
    channel.save()
    return channel


def channel_secret_rotate(*, channel: Channel) -> str:
    secret = ch.secret_new()
    channel.secret_encrypted = ch.secret_encrypt(secret)
    channel.save(update_fields=["secret_encrypted"])
    logger.info("alerts.channel_secret_rotated project_id=%s channel_id=%s", channel.project_id, channel.pk)
    return secret


def channel_delete(*, channel: Channel) -> None:
    logger.info("alerts.channel_deleted project_id=%s channel_id=%s", channel.project_id, channel.pk)
    channel.delete()


def channel_test_send(*, channel: Channel) -> Delivery:
    """Queue a test message to CHANNEL; its result shows in the channel's delivery log."""
    d = Delivery.objects.create(project_id=channel.project_id, channel=channel, is_test=True)
    transaction.on_commit(lambda: _deliveries_enqueue([d.pk]))
    return d


# --- deliveries --------------------------------------------------------------
def _deliveries_create(*, project_id: int, alerts: list[Alert]) -> list[int]:
    chans = list(Channel.objects.filter(project_id=project_id, enabled=True))
    if not chans:
        return []
    objs = [
        Delivery(project_id=project_id, alert=a, channel=c)
        for a in alerts
        for c in chans
        if SEVERITY_RANK[a.severity] >= SEVERITY_RANK[c.min_severity]
    ]
    return [d.pk for d in Delivery.objects.bulk_create(objs)]


def _deliveries_enqueue(delivery_ids: list[int]) -> None:
    from alerts.tasks import alerts_deliver_task

    for did in delivery_ids:
        try:
            alerts_deliver_task.apply_async(kwargs={"delivery_id": did})
        except Exception:  # noqa: BLE001 - broker down: the sweeper queues it once it is back
            logger.exception("alerts.deliver_enqueue_failed delivery_id=%s", did)


RETRY_MAX_SECONDS = 300.0


def _backoff(attempt: int, retry_after: float | None) -> float:
    # No jitter: each delivery gets its own time, and the delivery log reads as the schedule.
    base = float(settings.CTXOBS_ALERT_RETRY_BASE_SECONDS)
    return backoff_delay(
        attempt, base=base, cap=RETRY_MAX_SECONDS, retry_after=retry_after, retry_after_cap=RETRY_AFTER_MAX_S
    )


def _lease(c: Channel) -> timedelta:
    """How long an attempt on C may be in flight: connect, write and read may each take the
    channel's timeout, plus a margin for the rest of the attempt."""
    own = c.timeout_seconds if c.kind == Channel.Kind.WEBHOOK else float(settings.EMAIL_TIMEOUT or 0.0)
    return timedelta(seconds=3 * own + float(settings.CTXOBS_ALERT_DELIVERY_LEASE_SECONDS))


INTERRUPTED = "no result recorded: the attempt was interrupted (its worker stopped) and its lease ran out"


def delivery_attempt(*, delivery_id: int) -> float | None:
    """Make the next attempt of a delivery, if it is due; the seconds until the next attempt
    when one is needed, else None.

    Claim, send, record: the attempt is leased in one short transaction, sent with no
    transaction open and no row locked, and its result recorded in a second short one. Safe to
    run twice: a sent or failed delivery is left alone, one in flight elsewhere is skipped (the
    sweeper takes it up if its lease runs out), and an early call only reports the wait."""
    claim = _delivery_claim(delivery_id=delivery_id)
    if not isinstance(claim, tuple):
        return claim
    d, at = claim
    c = d.channel
    if not c.enabled:
        result = ch.SendResult(False, False, None, "channel disabled")
    elif d.alert is None and not d.is_test:
        result = ch.SendResult(False, False, None, "alert deleted")
    else:
        result = _send(d, c)
    return _delivery_record(d=d, at=at, result=result)


def _delivery_claim(*, delivery_id: int) -> tuple[Delivery, Any] | float | None:
    """Lease the next attempt of the delivery: (the delivery, with `attempts` its number, and
    when it started), or the seconds until it is due, or None when there is nothing to do."""
    with transaction.atomic():
        d = (
            Delivery.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("channel", "channel__project", "alert", "alert__rule")
            .filter(pk=delivery_id)
            .first()
        )
        if d is None or d.status in (Delivery.Status.SENT, Delivery.Status.FAILED):
            return None
        now = timezone.now()
        c = d.channel
        if d.status == Delivery.Status.SENDING:
            if d.lease_until is not None and d.lease_until > now:
                return None
            # The attempt's worker died between claim and record: log the attempt as lost. It
            # counts like a timeout, since the receiver may have had it.
            lease = _lease(c)
            DeliveryAttempt.objects.get_or_create(
                delivery=d,
                number=d.attempts,
                defaults={"at": (d.lease_until or now) - lease, "error": INTERRUPTED},
            )
            logger.warning("alerts.delivery_lease_expired delivery_id=%s attempt=%d", d.pk, d.attempts)
            if d.attempts >= c.max_attempts:
                d.status, d.lease_until, d.next_attempt_at = Delivery.Status.FAILED, None, None
                d.last_status_code, d.last_error = None, INTERRUPTED
                d.save(
                    update_fields=[
                        "status",
                        "lease_until",
                        "next_attempt_at",
                        "last_status_code",
                        "last_error",
                    ]
                )
                return None
        elif d.next_attempt_at is not None and d.next_attempt_at > now + timedelta(milliseconds=200):
            return (d.next_attempt_at - now).total_seconds()
        d.attempts += 1
        d.status = Delivery.Status.SENDING
        d.lease_until = now + _lease(c)
        d.save(update_fields=["attempts", "status", "lease_until"])
    return d, now


def _delivery_record(*, d: Delivery, at: Any, result: ch.SendResult) -> float | None:
    """Record the result of attempt `d.attempts`; the seconds until the next attempt, if any."""
    c = d.channel
    number = d.attempts
    now = timezone.now()
    retry_in = None
    fields: dict[str, Any] = {
        "last_status_code": result.status_code,
        "last_error": result.error,
        "lease_until": None,
        "sent_at": None,
        "next_attempt_at": None,
    }
    if result.ok:
        fields["status"], fields["sent_at"] = Delivery.Status.SENT, now
    elif result.retryable and number < c.max_attempts:
        retry_in = _backoff(number, result.retry_after)
        fields["status"], fields["next_attempt_at"] = (
            Delivery.Status.RETRYING,
            now + timedelta(seconds=retry_in),
        )
    else:
        fields["status"] = Delivery.Status.FAILED
    with transaction.atomic():
        # update_or_create: a result that arrives after its lease ran out replaces the "lost" entry.
        DeliveryAttempt.objects.update_or_create(
            delivery_id=d.pk,
            number=number,
            defaults={
                "at": at,
                "status_code": result.status_code,
                "error": result.error,
                "duration_ms": result.duration_ms,
            },
        )
        # Only while this attempt still holds the delivery: past its lease another attempt may
        # have taken over, and that one records the delivery's state.
        updated = Delivery.objects.filter(pk=d.pk, attempts=number, status=Delivery.Status.SENDING).update(
            **fields
        )
    if not updated:
        logger.warning("alerts.delivery_superseded delivery_id=%s attempt=%d", d.pk, number)
        return None
    logger.info(
        "alerts.delivery delivery_id=%s channel_id=%s attempt=%d status=%s code=%s ms=%.0f",
        d.pk,
        c.pk,
        number,
        fields["status"],
        result.status_code,
        result.duration_ms,
    )
    return retry_in


def _send(d: Delivery, c: Channel) -> ch.SendResult:
    project_name = c.project.name
    if c.kind == Channel.Kind.WEBHOOK:
        problem = ch.webhook_url_problem(c.url, allow_private=c.project.allow_private_endpoints)
        if problem:
            return ch.SendResult(False, False, None, f"url {problem}")
        try:
            secret = ch.secret_decrypt(c.secret_encrypted)
        except ValueError as exc:
            return ch.SendResult(False, False, None, str(exc))
        if d.is_test:
            payload, event = ch.test_payload(c, project_name=project_name), "test"
        else:
            payload, event = ch.alert_payload(d.alert, project_name=project_name), "alert.opened"
        payload["delivery_id"] = d.pk
        return ch.webhook_send(
            url=c.url,
            secret=secret,
            payload=payload,
            event=event,
            delivery_id=d.pk,
            timeout=c.timeout_seconds,
            allow_private=c.project.allow_private_endpoints,
        )
    if d.is_test:
        subject, text = f"[ctxobs {project_name}] test message", "This is a test delivery from ctxobs."
    else:
        subject, text = ch.alert_email(d.alert, project_name=project_name)
    return ch.email_send(recipients=list(c.recipients), subject=subject, text=text)
