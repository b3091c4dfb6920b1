"""Alerts from episodes: new alerts for new condition episodes, changes to the ones that a late
or continuing finding extends, the session alert counts kept by ingest, and alert states."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction
from django.db.models import Count
from django.utils import timezone

from alerts import kinds as K
from alerts import rules as R
from alerts.models import TITLE_MAX_CHARS, Alert, AlertRule
from ingest import selectors as ingest_selectors
from ingest import services as ingest_services
from ingest.types import TurnRow

logger = logging.getLogger(__name__)

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
# Sent as float8[]: a rule's figures may be ints (a count of compressions) or floats (a fill), and
# psycopg refuses to send a list that mixes the two.
_FLOAT_COLUMNS = frozenset({"value", "threshold", "peak_value"})


def alerts_update(alerts: list[Alert]) -> None:
    """Write the episode fields of changed ALERTS in one statement. Plain SQL: the ORM's
    bulk_update builds a CASE per field and row, which costs more than the update itself."""
    now = timezone.now()
    cols: dict[str, list[Any]] = {f: [] for f in _UPDATE_COLUMNS}
    for a in alerts:
        a.updated_at = now
        for f in _UPDATE_COLUMNS[:-1]:
            v = getattr(a, f)
            cols[f].append(float(v) if f in _FLOAT_COLUMNS and v is not None else v)
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


def episode_of(a: Alert) -> R.Episode:
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


def alerts_from_episodes(
    *,
    project_id: int,
    episodes: dict[int, dict[int, list[R.Episode]]],
    rules: dict[int, AlertRule],
    specs: dict[int, R.RuleSpec],
    lines: dict[int, list[TurnRow]],
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
    anchors = ingest_selectors.snapshot_outlines(
        project_id=project_id, snapshot_refs=sorted({ep.snapshot_ref for _, ep in anchored})
    )
    storm_windows: dict[int, list[int]] = {}
    for sref, ep in anchored:
        if specs[ep.rule_id].kind == K.COMPRESSION_STORM:
            line = turn_lines[sref]
            idx = next(i for i, t in enumerate(line) if t.ref == ep.snapshot_ref)
            n = int(specs[ep.rule_id].params["turns"])
            storm_windows[ep.snapshot_ref] = [t.ref for t in line[max(0, idx - n + 1) : idx + 1]]
    compressed: dict[int, dict[str, int]] = {}
    if storm_windows:
        per = ingest_selectors.compressed_tokens_by_block(
            project_id=project_id, snapshot_refs=sorted({r for w in storm_windows.values() for r in w})
        )
        for anchor, wrefs in storm_windows.items():
            acc: dict[str, int] = defaultdict(int)
            for r in wrefs:
                for k, v in per.get(r, {}).items():
                    acc[k] += v
            compressed[anchor] = dict(acc)
    usable = {t.ref: t.usable_tokens for line in turn_lines.values() for t in line}

    def contrib(ep: R.Episode) -> list[R.Contributor]:
        outline = anchors.get(ep.snapshot_ref)
        return R.contributors(
            specs[ep.rule_id].kind,
            blocks=outline.blocks if outline else [],
            usable_tokens=usable.get(ep.snapshot_ref, 1),
            change=outline.change if outline else None,
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
                            title=ep.title[:TITLE_MAX_CHARS],
                            session_ref=sref,
                            session_id=last.session_id,
                            agent=last.agent,
                            model=last.model_name,
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
                            ep.title[:TITLE_MAX_CHARS],
                            ep.unit,
                        )
                        a.contributors, a.dedup_key = contrib(ep), key
                    to_update.append(a)
    return to_create, to_update


def _lock_key(project_id: int, session_ref: int) -> int:
    digest = hashlib.blake2b(f"alerts:{project_id}:{session_ref}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def session_locks_take(*, project_id: int, session_refs: Sequence[int]) -> None:
    """Hold the alerts of SESSION_REFS until the transaction ends: whoever writes a session's
    alerts or its alert count takes this first (in the same order, so two writers never
    deadlock)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_advisory_xact_lock(k) FROM unnest(%s::bigint[]) WITH ORDINALITY AS u(k, i) ORDER BY i",
            [sorted(_lock_key(project_id, s) for s in session_refs)],
        )


def session_alert_counts_add(*, project_id: int, alerts: Sequence[Alert]) -> None:
    """Add ALERTS, just created, to their sessions' alert counts."""
    per_session: dict[int, int] = defaultdict(int)
    for a in alerts:
        per_session[a.session_ref] += 1
    ingest_services.session_alert_counts_add(project_id=project_id, added=per_session)


def session_alert_counts_refresh(*, project_id: int, session_refs: Sequence[int]) -> None:
    """Recount the alerts of SESSION_REFS into their sessions' alert counts. Under the sessions'
    locks (taken again if the caller holds them), so that an evaluation that adds alerts
    meanwhile is counted once: before the recount or by its own increment after it."""
    if not session_refs:
        return
    session_locks_take(project_id=project_id, session_refs=session_refs)
    counts = dict.fromkeys(session_refs, 0)
    rows = (
        Alert.objects.filter(project_id=project_id, session_ref__in=list(session_refs))
        .values_list("session_ref")
        .annotate(n=Count("id"))
        .order_by()
    )
    counts.update(dict(rows))
    ingest_services.session_alert_counts_set(project_id=project_id, counts=counts)


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

