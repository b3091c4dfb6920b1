"""The "cache hit rate fell" rules: after the prompt-cache lens stores the figures of a batch,
compare the cache hit rate of the project's newest `tags.assembly_version` with the previous
version's, and raise one alert per rule and version when it fell by the rule's margin.

Versions are ordered by the time their first turn arrived (within the last WINDOW_DAYS); each
needs the rule's minimum of turns (first turns of sessions, which cannot hit the cache, do not
count). The alert is anchored on the first turn of the newer version. Safe to run twice: the dedup key
"<rule>:cache:<version>" makes a second alert for the same version impossible."""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from alerts import kinds as K
from alerts.models import TITLE_MAX_CHARS, Alert, AlertRule
from alerts.services.delivery import deliveries_enqueue
from alerts.services.episodes import session_alert_counts_add
from alerts.services.incidents import incidents_group
from ingest import selectors as ingest_selectors
from insights import cache_selectors

logger = logging.getLogger(__name__)

# The turns compared: those received in the last WINDOW_DAYS (a deploy is judged within days).
WINDOW_DAYS = 7


def _dedup_key(rule_id: int, version: str) -> str:
    key = f"{rule_id}:cache:{version}"
    if len(key) <= 100:
        return key
    return f"{rule_id}:cache:#{hashlib.sha256(version.encode()).hexdigest()[:40]}"


def cache_rules_evaluate(*, project_id: int) -> list[int]:
    """Evaluate the project's enabled cache-hit-rate rules; the ids of the alerts raised."""
    rules = list(
        AlertRule.objects.filter(project_id=project_id, enabled=True, kind=K.CACHE_HIT_RATE_FELL).order_by(
            "id"
        )
    )
    if not rules:
        return []
    rates = cache_selectors.version_hit_rates(
        project_id=project_id, since=timezone.now() - timedelta(days=WINDOW_DAYS)
    )
    created: list[Alert] = []
    for rule in rules:
        params, errors = K.validate_params(rule.kind, rule.params)
        if errors:
            logger.warning(
                "alerts.cache_rule_invalid rule_id=%s fields=%s", rule.pk, ",".join(sorted(errors))
            )
            continue
        ready = [v for v in rates if v.turns >= int(params["min_turns"])]
        if len(ready) < 2:
            continue
        old, new = ready[-2], ready[-1]
        drop = (old.hit_rate - new.hit_rate) * 100
        if drop < float(params["drop_points"]):
            continue
        alert = _alert_create(
            project_id=project_id,
            rule=rule,
            old=old,
            new=new,
            drop=drop,
            threshold=float(params["drop_points"]),
        )
        if alert is not None:
            created.append(alert)
    if created:
        with transaction.atomic():
            session_alert_counts_add(project_id=project_id, alerts=created)
            ids = incidents_group(project_id=project_id, alerts=created, project_level=True)
        if ids:
            deliveries_enqueue(ids)
        logger.info("alerts.cache_rules_fired project_id=%s alerts=%d", project_id, len(created))
    return [int(a.pk) for a in created]


def _alert_create(
    *, project_id: int, rule: AlertRule, old: Any, new: Any, drop: float, threshold: float
) -> Alert | None:
    key = _dedup_key(int(rule.pk), new.version)
    if Alert.objects.filter(project_id=project_id, dedup_key=key).exists():
        return None
    anchor = ingest_selectors.turn_neighbourhoods(
        project_id=project_id, snapshot_refs=[new.first_snapshot_ref], window=0
    )
    row = next((r for line in anchor.values() for r in line if r.ref == new.first_snapshot_ref), None)
    if row is None:  # the turn expired or was deleted since it was analysed
        return None
    title = (
        f"Cache hit rate fell from {old.hit_rate * 100:.0f}% ({old.version}) to "
        f"{new.hit_rate * 100:.0f}% ({new.version}) after the assembly version changed"
    )
    alert = Alert(
        project_id=project_id,
        rule=rule,
        rule_kind=rule.kind,
        severity=rule.severity,
        title=title[:TITLE_MAX_CHARS],
        session_ref=row.session_ref,
        session_id=row.session_id,
        agent=row.agent,
        model=row.model_name,
        turn=row.turn,
        snapshot_ref=row.ref,
        ts=row.ts,
        last_turn=row.turn,
        last_ts=row.ts,
        value=drop,
        threshold=threshold,
        peak_value=drop,
        unit="points",
        contributors=[],
        dedup_key=key,
    )
    try:
        with transaction.atomic():
            alert.save()
    except IntegrityError:  # raised by a concurrent run
        return None
    return alert


def on_cache_analyzed(sender: Any, *, project_id: int, snapshot_refs: list[int], **kwargs: Any) -> None:
    """Receiver of insights' `cache_analyzed`: new cache figures may change a version's rate."""
    cache_rules_evaluate(project_id=project_id)
