"""Auto-triage: record a triage for each flagged turn of an opted-in project (one per turn),
start its attribution job within the project's daily budget of model calls, attach the verdict
when the job ends, and cancel it. Reads for the pages, the API and the alert webhook too."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum
from django.urls import reverse
from django.utils import timezone

from core import registry
from core.models import Project
from ingest import selectors as ingest_selectors
from replay import selectors, triage
from replay.errors import ReplayError, TurnGone, turn_expired
from replay.models import (
    TRIAGE_FINISHED,
    JobStatus,
    QueuePriority,
    ReplayJob,
    ReplayRun,
    Triage,
    TriageBudget,
)
from replay.services import jobs

logger = logging.getLogger(__name__)

# How often the finisher looks at a running triage's job.
FINISH_POLL_S = 2.0


def utc_day(at: datetime | None = None) -> date:
    return (at or timezone.now()).astimezone(UTC).date()


# --- flagged turns -> triages ------------------------------------------------------------------
def triages_record(*, flags: Sequence[registry.TurnFlagged]) -> list[int]:
    """A queued triage for each flagged turn of a project with triage on that has none yet; an
    alert on a turn already triaged is added to that triage. The ids of the new triages; their
    start is queued when the transaction commits. Never raises: a failure is logged and costs
    only the triage (the caller is storing alerts). Costs no query when the flags carry their
    project and it has triage off."""
    per_project: dict[int, list[registry.TurnFlagged]] = defaultdict(list)
    known: dict[int, Project] = {}
    for f in flags:
        per_project[f.project_id].append(f)
        if f.project is not None:
            known[f.project_id] = f.project
    enabled = {pid for pid, p in known.items() if p.triage_enabled}
    unknown = set(per_project) - set(known)
    if unknown:
        enabled |= set(
            Project.objects.filter(pk__in=sorted(unknown), triage_enabled=True).values_list("pk", flat=True)
        )
    if not enabled:
        return []
    try:
        with transaction.atomic():
            return _triages_record(per_project, enabled)
    except Exception:  # noqa: BLE001 - alerts must be stored whatever triage's state
        logger.exception("replay.triage_record_failed flags=%d", len(flags))
        return []


def _triages_record(per_project: dict[int, list[registry.TurnFlagged]], enabled: set[int]) -> list[int]:
    created: list[int] = []
    for project_id in sorted(enabled):
        mine = per_project[project_id]
        lines = ingest_selectors.turn_neighbourhoods(
            project_id=project_id, snapshot_refs=sorted({f.snapshot_ref for f in mine}), window=0
        )
        rows = {r.ref: r for line in lines.values() for r in line}
        with connection.cursor() as cur:
            for f in sorted(mine, key=lambda f: (f.snapshot_ref, f.alert_id or 0)):
                row = rows.get(f.snapshot_ref)
                if row is None:
                    continue
                alert_ids = [f.alert_id] if f.alert_id is not None else []
                # One statement, so that two evaluations flagging the same turn at once make one
                # triage: the unique (project, turn) decides, and xmax = 0 tells an insert.
                cur.execute(
                    """
                    INSERT INTO replay_triage AS t (project_id, snapshot_ref, snapshot_uuid, session_id, turn,
                        received_at, trigger, alert_ids, status, reason, job_kind, calls_reserved, created_at)
                    VALUES (%s, %s, %s, %s, %s, %s, %s, %s::bigint[], 'queued', '', '', 0, %s)
                    ON CONFLICT (project_id, snapshot_ref) DO UPDATE SET alert_ids = (
                        SELECT coalesce(array_agg(DISTINCT a ORDER BY a), '{}')
                        FROM unnest(t.alert_ids || EXCLUDED.alert_ids) AS a)
                    RETURNING id, (xmax = 0) AS inserted
                    """,
                    [
                        project_id,
                        row.ref,
                        row.snapshot_id,
                        row.session_id,
                        row.turn,
                        row.received_at,
                        f.reason,
                        alert_ids,
                        timezone.now(),
                    ],
                )
                tid, inserted = cur.fetchone()
                if inserted:
                    created.append(int(tid))
                    logger.info(
                        "replay.triage_queued triage_id=%s project_id=%s snapshot_ref=%s trigger=%s",
                        tid,
                        project_id,
                        row.ref,
                        f.reason,
                    )
    if created:
        ids = list(created)
        transaction.on_commit(lambda: _enqueue_start(ids))
    return created


def _enqueue_start(triage_ids: list[int]) -> None:
    from replay.tasks import triage_start

    for tid in triage_ids:
        try:
            triage_start.apply_async(args=[tid], priority=QueuePriority.TRIAGE)
        except Exception:  # noqa: BLE001 - the broker is down: the triage stays queued
            logger.exception("replay.triage_enqueue_failed triage_id=%s", tid)


def triages_for_failed_validation(*, project_id: int, snapshot_refs: Sequence[int]) -> list[int]:
    """Triages for those of SNAPSHOT_REFS whose output failed a validation check (a stored
    outcome that did not pass), if the project has triage on."""
    project = Project.objects.filter(pk=project_id, triage_enabled=True).first()
    if project is None:
        return []
    lines = ingest_selectors.turn_neighbourhoods(
        project_id=project_id, snapshot_refs=list(snapshot_refs), window=0
    )
    wanted = set(snapshot_refs)
    flags = [
        registry.TurnFlagged(
            project_id=project_id, snapshot_ref=r.ref, reason=Triage.Trigger.VALIDATION, project=project
        )
        for line in lines.values()
        for r in line
        if r.ref in wanted and r.n_validation_failed > 0
    ]
    return triages_record(flags=flags)


# --- the budget ----------------------------------------------------------------------------
def _budget_reserve(*, project_id: int, day: date, calls: int, cap: int) -> bool:
    """Add CALLS to the project's use of DAY if the total stays within CAP, atomically (the row
    stays locked until the caller's transaction ends, so concurrent triages queue behind it)."""
    if calls > cap:
        return False
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO replay_triagebudget AS b (project_id, day, calls) VALUES (%s, %s, %s)
            ON CONFLICT (project_id, day) DO UPDATE SET calls = b.calls + EXCLUDED.calls
                WHERE b.calls + EXCLUDED.calls <= %s
            RETURNING calls
            """,
            [project_id, day, calls, cap],
        )
        return cur.fetchone() is not None


def budget_used(*, project: Project, day: date | None = None) -> int:
    """The model calls triage reserved for PROJECT on DAY (today, UTC)."""
    row = (
        TriageBudget.objects.filter(project=project, day=day or utc_day())
        .values_list("calls", flat=True)
        .first()
    )
    return int(row or 0)


# --- start, finish, cancel -----------------------------------------------------------------
def _skip(t: Triage, reason: str) -> str:
    t.status = Triage.Status.SKIPPED
    t.reason = reason[:500]
    t.finished_at = timezone.now()
    t.save(update_fields=["status", "reason", "finished_at"])
    logger.info("replay.triage_skipped triage_id=%s project_id=%s reason=%s", t.pk, t.project_id, t.reason)
    return "skipped"


def triage_start(*, triage_id: int) -> str:
    """Start a queued triage: plan its job, reserve the job's model calls in today's budget and
    create the job, all in one transaction; or record why it is skipped. Safe to run twice:
    only a queued triage starts."""
    with transaction.atomic():
        t = (
            Triage.objects.select_for_update(of=("self",))
            .select_related("project")
            .filter(pk=triage_id)
            .first()
        )
        if t is None or t.status != Triage.Status.QUEUED:
            return "nothing_to_do"
        project = t.project
        if not project.triage_enabled:
            return _skip(t, "triage was turned off for this project")
        endpoint = selectors.endpoint_default(project=project)
        if endpoint is None:
            return _skip(t, "this project has no default model endpoint")
        blocks = ingest_selectors.snapshot_blocks(project_id=project.pk, snapshot_ref=t.snapshot_ref)
        spec = triage.triage_job_spec(
            snapshot_id=str(t.snapshot_uuid),
            blocks=blocks,
            job_kinds=jobs.JOB_KINDS,
            title=f"triage — {t.session_id} turn {t.turn}",
        )
        try:
            plan = jobs.replay_job_plan(project=project, spec=spec)
        except TurnGone:
            # The turn was stored when it was flagged: retention has removed it since.
            return _skip(t, turn_expired(project.retention_days))
        except ReplayError as exc:
            return _skip(t, f"nothing to attribute: {exc.detail}")
        calls = int(plan.estimate["model_calls"])
        cap = int(project.triage_daily_calls)
        try:
            # A savepoint: a job that cannot be created gives its reservation back.
            with transaction.atomic():
                if not _budget_reserve(project_id=project.pk, day=utc_day(), calls=calls, cap=cap):
                    return _skip(t, f"daily budget of {cap} calls reached")
                job = jobs.replay_job_create(project=project, spec=spec, endpoint=endpoint,
                                             priority=QueuePriority.TRIAGE)
                if job.n_runs != calls:
                    # Never spend more than was reserved.
                    raise ReplayError(f"the job would make {job.n_runs} calls, {calls} were reserved")
        except ReplayError as exc:
            return _skip(t, f"the replay job could not be created: {exc.detail}")
        t.status = Triage.Status.RUNNING
        t.job = job
        t.job_kind = job.kind
        t.calls_reserved = calls
        t.started_at = timezone.now()
        t.save(update_fields=["status", "job", "job_kind", "calls_reserved", "started_at"])
        transaction.on_commit(lambda: _enqueue_finish(triage_id, countdown=FINISH_POLL_S))
    logger.info(
        "replay.triage_started triage_id=%s project_id=%s job_id=%s calls=%s", t.pk, project.pk, job.pk, calls
    )
    return "started"


def _enqueue_finish(triage_id: int, *, countdown: float) -> None:
    from replay.tasks import triage_finish

    try:
        triage_finish.apply_async(args=[triage_id], countdown=countdown, priority=QueuePriority.TRIAGE)
    except Exception:  # noqa: BLE001 - the broker is down: the page still shows the job
        logger.exception("replay.triage_finish_enqueue_failed triage_id=%s", triage_id)


def triage_finish(*, triage_id: int) -> float | None:
    """Attach the verdict of a running triage whose job has ended; the seconds until the next
    look while the job runs, else None. Safe to run twice."""
    t = Triage.objects.select_related("job", "project").filter(pk=triage_id).first()
    if t is None or t.status != Triage.Status.RUNNING:
        return None
    job = t.job
    result: triage.TriageResult | None = None
    if job is not None:
        if not job.finished:
            return FINISH_POLL_S
        if job.status == JobStatus.DONE:
            res = selectors.job_results(job=job)
            turn = next((x for x in res["turns"] if x["snapshot_ref"] == t.snapshot_ref), None)
            blocks = ingest_selectors.snapshot_blocks(project_id=t.project_id, snapshot_ref=t.snapshot_ref)
            result = triage.triage_result(
                turn=turn,
                block_kinds={b["key"]: b["kind"] for b in blocks},
                block_positions={b["key"]: b["position"] for b in reversed(blocks)},
                method=job.kind,
            )
    with transaction.atomic():
        cur = Triage.objects.select_for_update().get(pk=triage_id)
        if cur.status != Triage.Status.RUNNING:
            return None
        if job is None:
            cur.status, cur.reason = Triage.Status.FAILED, "its replay job was deleted"
        elif job.status == JobStatus.CANCELLED:
            cur.status, cur.reason = Triage.Status.CANCELLED, "its replay job was cancelled"
        elif result is None or result["block"] is None:
            error = (
                ReplayRun.objects.filter(job=job, status=ReplayRun.Status.FAILED)
                .exclude(error="")
                .values_list("error", flat=True)
                .first()
            )
            cur.status = Triage.Status.FAILED
            if error and error == turn_expired(t.project.retention_days):
                cur.reason = error  # its runs found the turn removed by retention
            else:
                cur.reason = (f"no block could be measured: {error}" if error
                              else "no block could be measured")[:500]
            cur.result = dict(result) if result else None
        else:
            cur.status, cur.result = Triage.Status.DONE, dict(result)
        cur.finished_at = timezone.now()
        cur.save(update_fields=["status", "reason", "result", "finished_at"])
        status, alert_ids, project_id = cur.status, list(cur.alert_ids), cur.project_id
        if status == Triage.Status.DONE and alert_ids:
            transaction.on_commit(
                lambda: registry.alert_follow_up(
                    project_id=project_id, alert_ids=alert_ids, event="alert.triaged"
                )
            )
    logger.info(
        "replay.triage_finished triage_id=%s project_id=%s status=%s block=%s",
        triage_id,
        project_id,
        status,
        result["block"] if result else "-",
    )
    return None


def triage_cancel(*, triage_row: Triage) -> Triage:
    """Cancel a triage that has not finished, and its job (no new model call starts; calls
    under way finish). The calls it reserved stay counted for the day."""
    with transaction.atomic():
        t = Triage.objects.select_for_update(of=("self",)).select_related("job").get(pk=triage_row.pk)
        if t.status in TRIAGE_FINISHED:
            return t
        job = t.job
        t.status = Triage.Status.CANCELLED
        t.reason = "cancelled"
        t.finished_at = timezone.now()
        t.save(update_fields=["status", "reason", "finished_at"])
    if job is not None and not job.finished:
        jobs.replay_job_cancel(job=job)
    logger.info("replay.triage_cancelled triage_id=%s project_id=%s", t.pk, t.project_id)
    return t


# --- reads -----------------------------------------------------------------------------------
def triage_get(*, project: Project, triage_id: int) -> Triage | None:
    return Triage.objects.select_related("job").filter(project=project, pk=triage_id).first()


def triage_for_turn(*, project_id: int, snapshot_ref: int) -> Triage | None:
    return (
        Triage.objects.select_related("job").filter(project_id=project_id, snapshot_ref=snapshot_ref).first()
    )


def triage_calls_made(*, triage_row: Triage) -> int:
    """The model calls its job has made so far (retries included)."""
    if triage_row.job_id is None:
        return 0
    total = ReplayRun.objects.filter(job_id=triage_row.job_id).aggregate(n=Sum("model_calls"))["n"]
    return int(total or 0)


def triage_url(t: Triage) -> str:
    root = str(settings.CTXOBS_BASE_URL).rstrip("/")
    path = reverse(
        "ingest:turn", kwargs={"project_id": t.project_id, "session_id": t.session_id, "turn": t.turn}
    )
    return f"{root}{path}#triage"


def triage_out(t: Triage) -> dict[str, Any]:
    """A triage as the API and the webhook show it: ids, states, the verdict, the cost."""
    job: ReplayJob | None = t.job
    return {
        "id": t.pk,
        "status": t.status,
        "reason": t.reason,
        "trigger": t.trigger,
        "snapshot_id": str(t.snapshot_uuid),
        "session_id": t.session_id,
        "turn": t.turn,
        "alert_ids": list(t.alert_ids),
        "job_id": t.job_id,
        "job_kind": t.job_kind,
        "job_status": job.status if job is not None else None,
        "calls_reserved": t.calls_reserved,
        "result": t.result,
        "summary": triage.triage_summary(t.result) if t.status == Triage.Status.DONE else "",
        "created_at": t.created_at.isoformat() if t.created_at else None,
        "finished_at": t.finished_at.isoformat() if t.finished_at else None,
        "url": triage_url(t),
    }


def alert_payload_triage(*, project_id: int, alert_id: int, snapshot_ref: int) -> dict[str, Any]:
    """The "triage" field of an alert's webhook: its state, link and, once done, its verdict
    (nothing when the turn has no triage)."""
    t = triage_for_turn(project_id=project_id, snapshot_ref=snapshot_ref)
    if t is None:
        return {}
    out: dict[str, Any] = {"status": t.status, "url": triage_url(t)}
    if t.reason:
        out["reason"] = t.reason
    if t.status == Triage.Status.DONE and t.result:
        out["block"] = t.result.get("block")
        out["score"] = t.result.get("score")
        out["noise"] = t.result.get("noise")
        out["summary"] = triage.triage_summary(t.result)
    return {"triage": out}
