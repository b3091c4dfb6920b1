"""Incidents: alerts grouped into what belongs together, and the state changes channels hear about.

Grouping runs where alerts are created (the evaluation on the worker, inside its transaction):
an alert joins the incident of an alert of its session within the session window, else an
incident of its agent and cause seen within the group window, else reopens one of them resolved
within the reopen window, else opens a new one. A new incident is pending: it sends nothing until
it is confirmed (a critical alert, several sessions, or a condition that persists), and one that
goes quiet first resolves as transient, unannounced, so that an isolated blip never pages. A
recurrence is held to the same bar: a resolved incident whose cause returns reopens pending, and
announces "reopened" only once the recurrence is confirmed; unconfirmed, it goes back to resolved
without a message. The quiet period before auto-resolve grows with each reopen, so a cause that
keeps returning stays one open incident instead of flapping. Each
state change sent out (opened, escalated, reopened, resolved, triaged) takes the incident's next
sequence number and one delivery per channel, unique per (incident, channel, event, sequence):
running a task twice sends nothing twice.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, DateTimeField, ExpressionWrapper, F, Q, Value
from django.db.models.functions import Least
from django.utils import timezone

from alerts import channels as ch
from alerts import kinds as K
from alerts import selectors
from alerts.errors import InvalidIncidentAction
from alerts.models import SEVERITY_RANK, TITLE_MAX_CHARS, Alert, Channel, Delivery, Incident

logger = logging.getLogger(__name__)

UNRESOLVED = (
    Incident.Status.PENDING,
    Incident.Status.OPEN,
    Incident.Status.ACKNOWLEDGED,
    Incident.Status.MUTED,
)
MAX_MUTE_MINUTES = 30 * 24 * 60
SWEEP_LIMIT = 500


def _lock_key(project_id: int, agent: str, cause: str) -> int:
    digest = hashlib.blake2b(f"incident:{project_id}:{agent}:{cause}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def cause_locks_take(*, project_id: int, keys: Sequence[tuple[str, str]]) -> None:
    """Hold (agent, cause) of the project until the transaction ends, so that two evaluations of
    sessions of one agent never open two incidents for one cause (sorted: no deadlock)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_advisory_xact_lock(k) FROM unnest(%s::bigint[]) WITH ORDINALITY AS u(k, i) ORDER BY i",
            [sorted({_lock_key(project_id, a, c) for a, c in keys})],
        )


def _rank(severity: str) -> int:
    return SEVERITY_RANK.get(severity, -1)


@dataclass
class _Touched:
    incident: Incident
    alerts: list[Alert]
    sessions: set[int]
    created: bool = False
    reopened: bool = False
    block_kind: str = ""


# An earlier alert of a session that belongs to an incident: (turn, last_turn, ts, last_ts, incident id).
_Neighbour = tuple[int, int, datetime, datetime, int]


def incidents_group(*, project_id: int, alerts: Sequence[Alert], project_level: bool = False) -> list[int]:
    """Group ALERTS (just created, in the caller's transaction) into incidents; the ids of the
    deliveries their state changes owe, to queue after the commit. PROJECT_LEVEL: alerts about
    the project as a whole (the cache rules), grouped per cause with no agent or session window.
    Step by step: the (agent, cause) locks, the session neighbours, the candidate incidents
    (row-locked), the sessions they already hold, each alert joined in session and turn order,
    then each touched incident written in id order."""
    alerts = [a for a in alerts if a.pk is not None]
    if not alerts:
        return []
    now = timezone.now()
    w = selectors.incident_windows(project_id=project_id)
    cause_of = {a.pk: K.incident_cause(a.rule_kind, a.contributors) for a in alerts}
    keys = sorted({(_agent_of(a, project_level), cause_of[a.pk]) for a in alerts})
    cause_locks_take(project_id=project_id, keys=keys)

    new_ids = [a.pk for a in alerts]
    neighbours: defaultdict[int, list[_Neighbour]] = defaultdict(list)
    if not project_level:
        neighbours = _session_neighbours(project_id, alerts, new_ids, w)
    locked = _candidates_lock(project_id, alerts, keys, w, neighbours)
    grouping = _Grouping(
        project_id=project_id,
        project_level=project_level,
        now=now,
        w=w,
        cause_of=cause_of,
        neighbours=neighbours,
        locked=locked,
        known_sessions=_known_sessions(locked, alerts, new_ids),
    )
    for a in sorted(alerts, key=lambda x: (x.session_ref, x.turn, x.pk)):
        grouping.join(a)
    delivery_ids: list[int] = []
    # The new alerts point at their incidents before any incident is settled: a confirmation
    # test reads an incident's alerts, these included.
    _alerts_incident_set(grouping.touched)
    for iid in sorted(grouping.touched):
        delivery_ids += grouping.settle(iid)
    return delivery_ids


def _alerts_incident_set(touched: dict[int, _Touched]) -> None:
    """Point each touched incident's new alerts at it: one UPDATE for the whole batch."""
    pairs = [(a.pk, iid) for iid, t in touched.items() for a in t.alerts]
    if not pairs:
        return
    with connection.cursor() as cur:
        cur.execute(
            f"UPDATE {Alert._meta.db_table} a SET incident_id = v.incident"  # noqa: S608 - a model's table
            " FROM unnest(%s::bigint[], %s::bigint[]) AS v(id, incident) WHERE a.id = v.id",
            [[p[0] for p in pairs], [p[1] for p in pairs]],
        )


def _agent_of(a: Alert, project_level: bool) -> str:
    return "" if project_level else a.agent


def _session_neighbours(
    project_id: int, alerts: Sequence[Alert], new_ids: Sequence[int], w: K.IncidentWindows
) -> defaultdict[int, list[_Neighbour]]:
    """Session ref -> the incidents of neighbouring alerts in the same sessions: the earlier
    alerts with an incident near the batch's alerts of that session (bounded by each session's
    span of turns and of time, widened by the session window). One statement, written by hand:
    it runs on every evaluation that raises an alert, and the ORM's compilation of its
    per-session conditions cost more than the query."""
    wt, ws = w.session_window_turns, timedelta(seconds=w.session_window_seconds)
    span: dict[int, list[Alert]] = defaultdict(list)
    for a in alerts:
        span[a.session_ref].append(a)
    srefs = sorted(span)
    bounds = [
        (min(a.turn for a in span[s]) - wt, max(a.turn for a in span[s]) + wt,
         min(a.ts for a in span[s]) - ws, max(a.ts for a in span[s]) + ws)
        for s in srefs
    ]
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT a.session_ref, a.turn, a.last_turn, a.ts, a.last_ts, a.incident_id
            FROM unnest(%s::bigint[], %s::int[], %s::int[], %s::timestamptz[], %s::timestamptz[])
                AS s(ref, lo_turn, hi_turn, lo_ts, hi_ts)
            JOIN {Alert._meta.db_table} a ON a.project_id = %s AND a.session_ref = s.ref
            WHERE a.incident_id IS NOT NULL AND a.id <> ALL(%s::bigint[])
              AND ((a.turn <= s.hi_turn AND a.last_turn >= s.lo_turn)
                   OR (a.ts <= s.hi_ts AND a.last_ts >= s.lo_ts))
            """,  # noqa: S608 - a model's table
            [srefs, [b[0] for b in bounds], [b[1] for b in bounds], [b[2] for b in bounds],
             [b[3] for b in bounds], project_id, list(new_ids)],
        )
        rows = cur.fetchall()
    neighbours: defaultdict[int, list[_Neighbour]] = defaultdict(list)
    for sref, turn, last_turn, ts, last_ts, iid in rows:
        neighbours[sref].append((turn, last_turn, ts, last_ts, iid))
    return neighbours


def _candidates_lock(
    project_id: int,
    alerts: Sequence[Alert],
    keys: Sequence[tuple[str, str]],
    w: K.IncidentWindows,
    neighbours: defaultdict[int, list[_Neighbour]],
) -> dict[int, Incident]:
    """The incidents the alerts may join, row-locked: those of their (agent, cause) KEYS seen
    within the group window or resolved within the reopen window, and their session NEIGHBOURS'.
    Found and locked by one statement, in id order (two evaluations touching the same incidents
    never deadlock); a row changed meanwhile is read as it is once locked."""
    lo = min(a.ts for a in alerts)
    # An incident that reopened stays open for longer than the group window (its quiet period
    # grows with each reopen): the cause returning meanwhile joins it.
    longest_open = max(w.group_window_seconds, _quiet_seconds(w, w.quiet_max_factor))
    table = Incident._meta.db_table
    found = Incident.objects.raw(
        f"""
        SELECT * FROM {table}
        WHERE project_id = %s
          AND (((agent, cause) IN (SELECT * FROM unnest(%s::text[], %s::text[]))
                AND (last_seen >= %s
                     OR (status = ANY(%s) AND opened_count > 1 AND last_seen >= %s)
                     OR resolved_at >= %s))
               OR id = ANY(%s::bigint[]))
        ORDER BY id
        FOR UPDATE
        """,  # noqa: S608 - a model's table
        [project_id, [k[0] for k in keys], [k[1] for k in keys],
         lo - timedelta(seconds=w.group_window_seconds), [str(s) for s in UNRESOLVED],
         lo - timedelta(seconds=longest_open), lo - timedelta(seconds=w.reopen_window_seconds),
         sorted({n[4] for ns in neighbours.values() for n in ns})],
    )
    return {i.pk: i for i in found}


def _known_sessions(
    locked: dict[int, Incident], alerts: Sequence[Alert], new_ids: Sequence[int]
) -> defaultdict[int, set[int]]:
    """Incident id -> the alerts' sessions the LOCKED incident already held before them: what
    its session count already includes."""
    known: defaultdict[int, set[int]] = defaultdict(set)
    if locked:
        with connection.cursor() as cur:
            cur.execute(
                f"""
                SELECT DISTINCT incident_id, session_ref FROM {Alert._meta.db_table}
                WHERE incident_id = ANY(%s::bigint[]) AND session_ref = ANY(%s::bigint[])
                  AND id <> ALL(%s::bigint[])
                """,  # noqa: S608 - a model's table
                [sorted(locked), sorted({a.session_ref for a in alerts}), list(new_ids)],
            )
            for iid, sref in cur.fetchall():
                known[iid].add(sref)
    return known


@dataclass
class _Grouping:
    """One call of incidents_group: what it found (the windows, each alert's cause, the session
    neighbours, the locked candidates and the sessions they hold) and what its alerts have
    touched so far (the incidents, and the batch's alerts per session with their incident)."""

    project_id: int
    project_level: bool
    now: datetime
    w: K.IncidentWindows
    cause_of: dict[int, str]
    neighbours: defaultdict[int, list[_Neighbour]]
    locked: dict[int, Incident]
    known_sessions: defaultdict[int, set[int]]
    touched: dict[int, _Touched] = field(default_factory=dict)
    batch_in_session: defaultdict[int, list[tuple[Alert, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )

    def in_session_window(self, a: Alert, turn: int, last_turn: int, ts: datetime, last_ts: datetime) -> bool:
        wt, ws = self.w.session_window_turns, timedelta(seconds=self.w.session_window_seconds)
        return (turn - wt <= a.turn <= last_turn + wt) or (ts - ws <= a.ts <= last_ts + ws)

    def pick_session(self, a: Alert) -> Incident | None:
        """The incident of an alert of A's session within the session window, one of the batch's
        or an earlier one."""
        if self.project_level:
            return None
        hits: list[Incident] = []
        for other, iid in self.batch_in_session[a.session_ref]:
            if self.in_session_window(a, other.turn, other.last_turn, other.ts, other.last_ts):
                hits.append(self.touched[iid].incident)
        for turn, last_turn, ts, last_ts, iid in self.neighbours[a.session_ref]:
            if iid in self.locked and self.in_session_window(a, turn, last_turn, ts, last_ts):
                hits.append(self.locked[iid])
        # One resolved before it was confirmed stays closed: nobody heard of it to hear it reopen.
        hits = [i for i in hits if i.status != Incident.Status.RESOLVED or i.confirmed_at is not None]
        if not hits:
            return None
        # An unresolved incident first, then the one seen last.
        return max(hits, key=lambda i: (i.status != Incident.Status.RESOLVED, i.last_seen, i.pk))

    def pick_cause(self, a: Alert) -> Incident | None:
        """An unresolved incident of A's agent and cause within the group window, or within its
        quiet period when that is longer (it reopened; the one seen last), else a confirmed one
        resolved within the reopen window (the one resolved last). A cause without a block key
        is the rule family alone ("validation_failure_rate") and reopens for any later session
        of the agent too: its recurrence is pending until it is confirmed like a new incident,
        so a lone blip in another session pages nobody."""
        agent, cause = _agent_of(a, self.project_level), self.cause_of[a.pk]
        mine = [
            i
            for i in [*self.locked.values(), *(t.incident for t in self.touched.values() if t.created)]
            if i.agent == agent and i.cause == cause
        ]
        group = timedelta(seconds=self.w.group_window_seconds)
        open_ = [
            i
            for i in mine
            if i.status != Incident.Status.RESOLVED
            and i.first_seen - group <= a.ts <= i.last_seen + _open_reach(self.w, i.opened_count)
        ]
        if open_:
            return max(open_, key=lambda i: (i.last_seen, i.pk))
        reopen = timedelta(seconds=self.w.reopen_window_seconds)
        back = [
            i
            for i in mine
            if i.status == Incident.Status.RESOLVED
            and i.resolved_at is not None
            and i.confirmed_at is not None
            and a.ts <= i.resolved_at + reopen
        ]
        if back:
            return max(back, key=lambda i: (i.resolved_at or i.last_seen, i.pk))
        return None

    def pick(self, a: Alert) -> Incident | None:
        """The session's incident (one event is one incident), unless it is about another rule
        family and the alert's own cause has an incident, or the alert names a block and the
        session's incident names none: a validation blip early in a session does not swallow its
        later window overflow."""
        by_session, by_cause = self.pick_session(a), self.pick_cause(a)
        cause = self.cause_of[a.pk]
        if by_session is None or _family(by_session.cause) == _family(cause):
            return by_session or by_cause
        if by_cause is not None or (":" in cause and ":" not in by_session.cause):
            return by_cause
        return by_session

    def join(self, a: Alert) -> None:
        """A joins the incident it picks, or a new pending one; a resolved incident it joins
        reopens, pending (silent) until the recurrence is confirmed; `reopened_at` is the turn
        time the cause returned, from which the recurrence is judged. The incident's span and
        severity follow A at once (the batch's later alerts pick by them); its counts, digest
        and event wait for settle()."""
        inc = self.pick(a)
        if inc is None:
            inc = self.open(a)
        t = self.touched.get(inc.pk)
        if t is None:
            t = self.touched[inc.pk] = _Touched(inc, [], set(self.known_sessions[inc.pk]))
        if inc.status == Incident.Status.RESOLVED:
            inc.status = Incident.Status.PENDING
            inc.opened_count += 1
            inc.reopened_at = a.ts
            inc.resolved_at, inc.resolved_by, inc.resolution = None, None, Incident.Resolution.NONE
            inc.acknowledged_at, inc.acknowledged_by = None, None
            t.reopened = True
        elif t.reopened and inc.reopened_at is not None and a.ts < inc.reopened_at:
            # Another session of the batch saw the cause return earlier.
            inc.reopened_at = a.ts
        t.alerts.append(a)
        t.sessions.add(a.session_ref)
        inc.first_seen = min(inc.first_seen, a.ts)
        inc.last_seen = max(inc.last_seen, a.last_ts)
        if _rank(a.severity) > _rank(inc.severity):
            inc.severity = a.severity
        a.incident_id = inc.pk
        self.batch_in_session[a.session_ref].append((a, inc.pk))

    def open(self, a: Alert) -> Incident:
        """A new pending incident of A's agent and cause, created now (the batch's later alerts
        may join it); the kind of A's biggest block is kept for its title."""
        top = a.contributors[0] if a.contributors else {}
        inc = Incident.objects.create(
            project_id=self.project_id,
            agent=_agent_of(a, self.project_level),
            cause=self.cause_of[a.pk],
            title=self.cause_of[a.pk][:TITLE_MAX_CHARS],
            severity=a.severity,
            status=Incident.Status.PENDING,
            first_seen=a.ts,
            last_seen=a.last_ts,
        )
        self.touched[inc.pk] = _Touched(inc, [], set(), created=True, block_kind=str(top.get("kind") or ""))
        return inc

    def settle(self, iid: int) -> list[int]:
        """Write what the batch did to touched incident IID: its counts, digest and title, the
        event it owes (recorded), then its row; the deliveries' ids. (Its new alerts already point
        at it: `_alerts_incident_set`.)"""
        t = self.touched[iid]
        inc = t.incident
        inc.alert_count += len(t.alerts)
        inc.session_count = (
            len(t.sessions) if t.created else inc.session_count + len(t.sessions - self.known_sessions[iid])
        )
        added = [a.pk for a in t.alerts]
        room = max(0, K.DIGEST_ALERTS - len(inc.digest_alert_ids))
        inc.digest_alert_ids = [*inc.digest_alert_ids, *added[:room]]
        inc.digest_more += len(added) - min(room, len(added))
        block_kind = t.block_kind or _block_kind(t.alerts, inc.cause)
        inc.title = _title(inc, block_kind, project_level=self.project_level)
        event = self.event(t)
        delivery_ids = _event_record(inc, event) if event else []
        inc.save()
        logger.info(
            "alerts.incident_grouped project_id=%s incident_id=%s alerts=%d event=%s status=%s",
            self.project_id,
            iid,
            len(t.alerts),
            event or "-",
            inc.status,
        )
        return delivery_ids

    def event(self, t: _Touched) -> str:
        """The event the batch makes T's incident send ("" for none): "opened" when a pending one
        is confirmed now (unless muted), "reopened" when a recurrence is, or "escalated" when its
        severity rose above the one last notified (unless muted)."""
        inc = t.incident
        if inc.confirmed_at is None or _recurring(inc):
            # Pending: the alerts wait in the digest for the message that confirmation sends.
            reason = "project" if self.project_level else _confirm_reason(inc, self.w)
            return _confirm(inc, now=self.now, reason=reason) if reason else ""
        if inc.status != Incident.Status.MUTED and _rank(inc.severity) > _rank(inc.notified_severity):
            return "escalated"
        return ""


def _family(cause: str) -> str:
    return cause.partition(":")[0]


def _recurring(inc: Incident) -> bool:
    """INC was announced, resolved, and its cause has returned: pending again until the
    recurrence is confirmed (then "reopened"; quiet first, it resolves again without a word)."""
    return inc.status == Incident.Status.PENDING and inc.confirmed_at is not None


def _confirm_reason(inc: Incident, w: K.IncidentWindows) -> str:
    """Why the pending INC is confirmed now ("" while it is not): a critical alert, alerts from
    several sessions, alert activity lasting long enough, or alerts raised on several turns of
    one session (the turn query only when the cheaper tests fail)."""
    if _recurring(inc):
        return _recurrence_confirm_reason(inc, w)
    if _rank(inc.severity) >= _rank("critical"):
        return "critical"
    if inc.session_count >= w.confirm_sessions:
        return "sessions"
    if (inc.last_seen - inc.first_seen).total_seconds() >= w.confirm_seconds:
        return "lasted"
    turns = (
        Alert.objects.filter(incident_id=inc.pk)
        .order_by()
        .values("session_ref")
        .annotate(n=Count("turn", distinct=True))
        .values_list("n", flat=True)
    )
    if max(turns, default=0) >= w.confirm_turns:
        return "turns"
    return ""


def _recurrence_confirm_reason(inc: Incident, w: K.IncidentWindows) -> str:
    """The same bar as a new incident's, counted from the recurrence on (`reopened_at`, a turn
    time): what the incident held before it was resolved does not confirm its return."""
    since = inc.reopened_at or inc.first_seen
    if (inc.last_seen - since).total_seconds() >= w.confirm_seconds:
        return "lasted"
    per_session = list(
        Alert.objects.filter(incident_id=inc.pk, ts__gte=since)
        .order_by()
        .values("session_ref")
        .annotate(n=Count("turn", distinct=True), critical=Count("id", filter=Q(severity="critical")))
        .values_list("n", "critical")
    )
    if any(c for _, c in per_session):
        return "critical"
    if len(per_session) >= w.confirm_sessions:
        return "sessions"
    if max((n for n, _ in per_session), default=0) >= w.confirm_turns:
        return "turns"
    return ""


def _confirm(inc: Incident, *, now: datetime, reason: str) -> str:
    """Confirm the pending INC (locked by the caller): the event it owes (recorded by the caller),
    "opened", "reopened" for a recurrence (`confirmed_at` keeps the first confirmation), or ""
    while it is muted (the unmute sends it)."""
    again = inc.confirmed_at is not None
    if not again:
        inc.confirmed_at = now
    if inc.status == Incident.Status.PENDING:
        inc.status = Incident.Status.OPEN
    logger.info(
        "alerts.incident_confirmed project_id=%s incident_id=%s reason=%s again=%s",
        inc.project_id,
        inc.pk,
        reason,
        again,
    )
    if inc.status == Incident.Status.MUTED:
        return ""
    return "reopened" if again else "opened"


def _block_kind(alerts: Sequence[Alert], cause: str) -> str:
    """The kind of the block the CAUSE names ("context_pressure:search" -> the kind of `search`),
    from the alerts' contributors: a later alert's biggest block may be another one."""
    _, _, key = cause.partition(":")
    for a in alerts:
        for c in a.contributors or []:
            if key and str(c.get("key") or "") == key:
                return str(c.get("kind") or "")
    return ""


def _title(inc: Incident, block_kind: str, *, project_level: bool = False) -> str:
    if not block_kind and ":" in inc.cause:
        key = inc.cause.partition(":")[2]
        kinds = [
            str(c.get("kind") or "")
            for cs in Alert.objects.filter(incident_id=inc.pk).values_list("contributors", flat=True)[:20]
            for c in cs or []
            if str(c.get("key") or "") == key
        ]
        block_kind = kinds[0] if kinds else ""
    return K.incident_title(
        cause=inc.cause,
        block_kind=block_kind,
        agent=inc.agent,
        sessions=inc.session_count,
        since=inc.first_seen,
        project_level=project_level or (not inc.agent and inc.cause == K.CACHE_HIT_RATE_FELL),
    )[:TITLE_MAX_CHARS]


def _channels(project_id: int) -> list[Channel]:
    return list(Channel.objects.filter(project_id=project_id, enabled=True).order_by("id"))


def _digest_rows(project_id: int, alert_ids: Sequence[int]) -> list[dict[str, Any]]:
    rows = (
        Alert.objects.filter(project_id=project_id, pk__in=list(alert_ids))
        .order_by("ts", "id")
        .values("id", "session_id", "turn", "rule_kind", "severity", "title", "ts")
    )
    return [
        {
            "id": r["id"],
            "session_id": r["session_id"],
            "turn": r["turn"],
            "rule_kind": r["rule_kind"],
            "severity": r["severity"],
            "title": r["title"],
            "ts": r["ts"].isoformat(),
            "turn_path": ch.turn_path(project_id, r["session_id"], r["turn"]),
        }
        for r in rows
    ]


def _event_record(inc: Incident, event: str, chans: Sequence[Channel] | None = None) -> list[int]:
    """Record EVENT of INC (locked by the caller, saved by the caller): the next sequence number, the
    digest of the alerts grouped since the last message, and one pending delivery per channel
    that takes its severity. Nothing while it is muted: the digest waits for the next message."""
    if inc.status == Incident.Status.MUTED:
        return []
    inc.event_sequence += 1
    if event in ("opened", "escalated", "reopened"):
        inc.notified_severity = inc.severity
    digest = {
        "alerts": _digest_rows(inc.project_id, inc.digest_alert_ids),
        "more": inc.digest_more,
        "severity": inc.severity,
        "status": inc.status,
    }
    inc.digest_alert_ids, inc.digest_more = [], 0
    chans = _channels(inc.project_id) if chans is None else chans
    objs = [
        Delivery(
            project_id=inc.project_id,
            incident=inc,
            channel=c,
            event=event,
            sequence=inc.event_sequence,
            digest=digest,
        )
        for c in chans
        if _rank(inc.severity) >= _rank(c.min_severity)
    ]
    created = Delivery.objects.bulk_create(objs)
    logger.info(
        "alerts.incident_event project_id=%s incident_id=%s event=%s sequence=%d deliveries=%d",
        inc.project_id,
        inc.pk,
        event,
        inc.event_sequence,
        len(created),
    )
    return [int(d.pk) for d in created]


def _enqueue_after_commit(ids: list[int]) -> None:
    if ids:
        from alerts.services.delivery import deliveries_enqueue

        transaction.on_commit(lambda: deliveries_enqueue(ids))


def incidents_touch(*, alerts: Sequence[Alert]) -> None:
    """Alerts of incidents whose episode went on (a later turn extended them): their incidents
    were seen then, which keeps them from resolving while the condition lasts, and a pending one
    whose condition has now lasted the confirmation period is confirmed (its "opened" is queued
    after the caller's commit)."""
    latest: dict[int, datetime] = {}
    for a in alerts:
        if a.incident_id is not None:
            latest[a.incident_id] = max(latest.get(a.incident_id, a.last_ts), a.last_ts)
    if not latest:
        return
    # Locked in id order (as incidents_group locks), moved forward by one UPDATE; two plain
    # statements, as this runs on every evaluation that extends an alert.
    table = Incident._meta.db_table
    locked = list(Incident.objects.raw(
        f"SELECT * FROM {table} WHERE id = ANY(%s::bigint[]) ORDER BY id FOR UPDATE",  # noqa: S608
        [sorted(latest)],
    ))
    later = [inc for inc in locked if inc.last_seen < latest[inc.pk]]
    if later:
        with connection.cursor() as cur:
            cur.execute(
                f"UPDATE {table} i SET last_seen = v.ts"  # noqa: S608 - a model's table
                " FROM unnest(%s::bigint[], %s::timestamptz[]) AS v(id, ts) WHERE i.id = v.id",
                [[inc.pk for inc in later], [latest[inc.pk] for inc in later]],
            )
        for inc in later:
            inc.last_seen = latest[inc.pk]
    pending = [
        inc for inc in locked
        if inc.status != Incident.Status.RESOLVED
        and (inc.confirmed_at is None or inc.status == Incident.Status.PENDING)
    ]
    windows: dict[int, K.IncidentWindows] = {}
    ids: list[int] = []
    now = timezone.now()
    for inc in pending:
        w = windows.get(inc.project_id) or windows.setdefault(
            inc.project_id, selectors.incident_windows(project_id=inc.project_id)
        )
        since = (inc.reopened_at if _recurring(inc) else None) or inc.first_seen
        if (inc.last_seen - since).total_seconds() < w.confirm_seconds:
            continue
        event = _confirm(inc, now=now, reason="lasted")
        if event:
            ids += _event_record(inc, event)
        inc.save()
    _enqueue_after_commit(ids)


# --- the sweep: unmute, auto-resolve, release held messages --------------------------------------
@dataclass(frozen=True, slots=True)
class IncidentSweepResult:
    resolved: int
    unmuted: int
    released: int


def incidents_sweep(*, now: datetime | None = None, limit: int = SWEEP_LIMIT) -> IncidentSweepResult:
    """Unmute incidents whose mute has passed (announcing an escalation that happened meanwhile),
    resolve those quiet for their project's quiet period times how often they opened (up to the
    policy's quiet_max_factor; resolved_by "auto"), and hand the
    channels' held messages to a worker once the channel's hour has room.

    Safe to run twice and concurrently: every change re-checks its row under a lock, and each
    message is a delivery unique per (incident, channel, event, sequence)."""
    now = now or timezone.now()
    unmuted = 0
    for iid in Incident.objects.filter(status=Incident.Status.MUTED, muted_until__lte=now).values_list(
        "id", flat=True
    )[:limit]:
        with transaction.atomic():
            inc = Incident.objects.select_for_update().filter(pk=iid).first()
            if inc is None or inc.status != Incident.Status.MUTED or (inc.muted_until or now) > now:
                continue
            if inc.acknowledged_at:
                inc.status = Incident.Status.ACKNOWLEDGED
            else:
                inc.status = Incident.Status.OPEN if inc.confirmed_at else Incident.Status.PENDING
            inc.muted_until = None
            if inc.confirmed_at is None:
                ids = []
            elif inc.event_sequence == 0:
                # Confirmed while muted: its "opened" was held until now.
                ids = _event_record(inc, "opened")
            elif _rank(inc.severity) > _rank(inc.notified_severity):
                ids = _event_record(inc, "escalated")
            else:
                ids = []
            inc.save()
            _enqueue_after_commit(ids)
            unmuted += 1

    floor = min(K.INCIDENT_DEFAULTS.quiet_seconds, selectors.incident_quiet_min())
    # An incident that reopened waits longer (quiet_seconds x opened_count, capped); the scan
    # skips those still within it in SQL at the least factor any project allows.
    cands = list(
        Incident.objects.filter(status__in=UNRESOLVED, last_seen__lt=now - timedelta(seconds=floor))
        .alias(wait=Least(F("opened_count"), Value(max(1, selectors.incident_quiet_factor_min()))))
        .filter(
            last_seen__lt=ExpressionWrapper(
                Value(now) - Value(timedelta(seconds=floor)) * F("wait"), output_field=DateTimeField()
            )
        )
        .order_by("last_seen")
        .values_list("id", "project_id", "last_seen", "opened_count")[:limit]
    )
    windows = {pid: selectors.incident_windows(project_id=pid) for pid in sorted({c[1] for c in cands})}
    resolved = 0
    for iid, pid, last_seen, opened_count in cands:
        cutoff = now - timedelta(seconds=_quiet_seconds(windows[pid], opened_count))
        if last_seen >= cutoff:
            continue
        with transaction.atomic():
            inc = (
                Incident.objects.select_for_update()
                .filter(pk=iid, status__in=UNRESOLVED, last_seen__lt=cutoff)
                .first()
            )
            if inc is None:
                continue
            ids = _resolve(inc, now=now, user=None)
            inc.save()
            _enqueue_after_commit(ids)
            resolved += 1
    released = held_release(now=now)
    if unmuted or resolved or released:
        logger.info("alerts.incidents_swept resolved=%d unmuted=%d released=%d", resolved, unmuted, released)
    return IncidentSweepResult(resolved=resolved, unmuted=unmuted, released=released)


def _open_reach(w: K.IncidentWindows, opened_count: int) -> timedelta:
    """How long after its last alert an unresolved incident of the cause takes a new one: the
    group window, or, once it has reopened, its (longer) quiet period: it is still open."""
    group = w.group_window_seconds
    return timedelta(seconds=group if opened_count <= 1 else max(group, _quiet_seconds(w, opened_count)))


def _quiet_seconds(w: K.IncidentWindows, opened_count: int) -> int:
    """How long an incident opened OPENED_COUNT times must be quiet to resolve on its own."""
    return w.quiet_seconds * max(1, min(opened_count, w.quiet_max_factor))


def _resolve(inc: Incident, *, now: datetime, user: Any) -> list[int]:
    was_muted = inc.status == Incident.Status.MUTED
    recurrence_unconfirmed = _recurring(inc)
    inc.status = Incident.Status.RESOLVED
    inc.resolved_at = now
    inc.resolved_by = user if getattr(user, "pk", None) else None
    inc.resolution = Incident.Resolution.USER if inc.resolved_by else Incident.Resolution.AUTO
    inc.muted_until = None
    if inc.confirmed_at is None:
        # Never confirmed, never announced: it ends as silently as it lived.
        if not inc.resolved_by:
            inc.resolution = Incident.Resolution.TRANSIENT
        return []
    if was_muted or recurrence_unconfirmed:
        # Silenced to the end (nothing was announced while muted), or a return of its cause that
        # was never announced: nothing is now.
        return []
    return _event_record(inc, "resolved")


def held_release(*, now: datetime | None = None) -> int:
    """For each channel holding messages whose hour has room again: the latest held message is
    queued, and its claim folds the others in (alerts.services.delivery)."""
    now = now or timezone.now()
    channel_ids = list(
        Delivery.objects.filter(status=Delivery.Status.HELD)
        .order_by("channel_id")
        .values_list("channel_id", flat=True)
        .distinct()
    )
    released: list[int] = []
    since = now - timedelta(seconds=K.RATE_WINDOW_SECONDS)
    for cid in sorted(channel_ids):
        with transaction.atomic():
            c = Channel.objects.filter(pk=cid).first()
            if c is None:
                continue
            used = Delivery.objects.filter(channel_id=cid, claimed_at__gte=since).count()
            if used >= c.max_per_hour:
                continue
            d = (
                Delivery.objects.select_for_update(skip_locked=True)
                .filter(channel_id=cid, status=Delivery.Status.HELD)
                .order_by("-held_at", "-id")
                .first()
            )
            if d is None:
                continue
            Delivery.objects.filter(pk=d.pk, status=Delivery.Status.HELD).update(
                status=Delivery.Status.PENDING, next_attempt_at=None
            )
            released.append(int(d.pk))
    _enqueue_now(released)
    return len(released)


def _enqueue_now(ids: list[int]) -> None:
    if ids:
        from alerts.services.delivery import deliveries_enqueue

        deliveries_enqueue(ids)


# --- what people do to an incident ------------------------------------------------------------
def incident_acknowledge(*, incident: Incident, user: Any) -> Incident:
    """open (or pending) -> acknowledged (no message; an acknowledged incident still resolves when
    quiet, and a pending one still announces itself when it is confirmed)."""
    with transaction.atomic():
        inc = Incident.objects.select_for_update().get(pk=incident.pk)
        live = (Incident.Status.PENDING, Incident.Status.OPEN, Incident.Status.MUTED)
        if inc.status in live and inc.acknowledged_at is None:
            inc.acknowledged_at = timezone.now()
            inc.acknowledged_by = user if getattr(user, "pk", None) else None
            if inc.status != Incident.Status.MUTED:
                inc.status = Incident.Status.ACKNOWLEDGED
            inc.save(update_fields=["status", "acknowledged_at", "acknowledged_by", "updated_at"])
            logger.info("alerts.incident_acknowledged project_id=%s incident_id=%s", inc.project_id, inc.pk)
    return inc


def incident_resolve(*, incident: Incident, user: Any, now: datetime | None = None) -> Incident:
    """Any unresolved state -> resolved by USER; channels get "resolved" (not when it was muted)."""
    with transaction.atomic():
        inc = Incident.objects.select_for_update().get(pk=incident.pk)
        if inc.status != Incident.Status.RESOLVED:
            ids = _resolve(inc, now=now or timezone.now(), user=user)
            inc.save()
            _enqueue_after_commit(ids)
            logger.info("alerts.incident_resolved project_id=%s incident_id=%s", inc.project_id, inc.pk)
    return inc


def incident_mute(*, incident: Incident, user: Any, minutes: int, now: datetime | None = None) -> Incident:
    """Mute for MINUTES: it keeps grouping alerts, and channels hear nothing until it passes."""
    if not isinstance(minutes, int) or not 1 <= minutes <= MAX_MUTE_MINUTES:
        raise InvalidIncidentAction(f"minutes must be a whole number from 1 to {MAX_MUTE_MINUTES}")
    with transaction.atomic():
        inc = Incident.objects.select_for_update().get(pk=incident.pk)
        if inc.status == Incident.Status.RESOLVED:
            raise InvalidIncidentAction("a resolved incident cannot be muted")
        inc.status = Incident.Status.MUTED
        inc.muted_until = (now or timezone.now()) + timedelta(minutes=minutes)
        inc.save(update_fields=["status", "muted_until", "updated_at"])
        logger.info(
            "alerts.incident_muted project_id=%s incident_id=%s minutes=%d", inc.project_id, inc.pk, minutes
        )
    return inc


# --- follow-ups: the culprit found after the incident was announced ---------------------------
def incidents_triaged(*, project_id: int, alert_ids: Sequence[int]) -> list[int]:
    """A triage of a turn of these alerts finished: each of their announced incidents owes its
    channels one "triaged" message (sequence 0: at most one per incident and channel, however
    many of its turns are triaged). The delivery ids, queued after the commit."""
    iids = sorted(
        set(
            Alert.objects.filter(
                project_id=project_id, pk__in=list(alert_ids), incident__isnull=False
            ).values_list("incident_id", flat=True)
        )
    )
    out: list[int] = []
    if not iids:
        return out
    with transaction.atomic():
        incs = list(
            Incident.objects.filter(pk__in=iids, event_sequence__gt=0)
            .exclude(status=Incident.Status.MUTED)
            .order_by("id")
        )
        announced = set(
            Delivery.objects.filter(incident_id__in=[i.pk for i in incs], sequence__gt=0).values_list(
                "incident_id", "channel_id"
            )
        )
        objs = [
            Delivery(
                project_id=project_id,
                incident=i,
                channel_id=cid,
                event="triaged",
                sequence=0,
                digest={"alerts": [], "more": 0, "severity": i.severity, "status": i.status},
            )
            for i in incs
            for cid in sorted({c for ii, c in announced if ii == i.pk})
        ]
        Delivery.objects.bulk_create(objs, ignore_conflicts=True)
        out = list(
            Delivery.objects.filter(
                incident_id__in=[i.pk for i in incs], event="triaged", status=Delivery.Status.PENDING
            ).values_list("id", flat=True)
        )
        _enqueue_after_commit(out)
    return out
