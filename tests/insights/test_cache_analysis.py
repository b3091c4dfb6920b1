"""The cache analyzer on real PostgreSQL: ingest through the API, analyse, read the stored
figures; idempotent, late turns, retention registration, the per-session and project sums."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from core import registry
from ingest import selectors
from insights import cache as C
from insights import cache_selectors
from insights.cache_analysis import cache_analyze
from insights.cache_models import TurnCache
from tests.insights.cache_factories import SYSTEM_TOKENS, cache_turn

pytestmark = pytest.mark.django_db


def _refs(project: Any, snaps: list[dict[str, Any]]) -> list[int]:
    return [selectors.snapshot_by_uuid(project=project, snapshot_id=s["snapshot_id"]).id for s in snaps]


def _post(api: Any, snaps: list[dict[str, Any]]) -> None:
    r = api.post_snapshots(snaps)
    assert r.status_code == 200, r.content
    assert r.json()["created"] == len(snaps)


def test_a_timestamp_in_the_system_prompt_breaks_the_cache(api: Any, project: Any) -> None:
    snaps = [
        cache_turn(0, cached=0),
        cache_turn(1, cached=3200),
        cache_turn(2, system="You are a travel assistant. Answer in JSON. Now: 2026-12-01 08:01", cached=0),
        cache_turn(3, system="You are a travel assistant. Answer in JSON. Now: 2026-12-01 08:02", cached=0),
    ]
    _post(api, snaps)
    refs = _refs(project, snaps)
    assert cache_analyze(project_id=project.pk, snapshot_refs=refs) == 4
    rows = {r.turn: r for r in TurnCache.objects.filter(project=project)}
    assert rows[0].reason == C.FIRST_TURN and rows[0].expected_cached == 0
    assert rows[1].reason == C.TAIL  # history appeared where the old question was: no break
    assert rows[1].prefix_tokens == SYSTEM_TOKENS + 200
    assert rows[1].expected_cached == (SYSTEM_TOKENS + 200) // 128 * 128
    assert rows[1].reported_cached == 3200
    assert rows[2].reason == C.NEW_CONTENT  # new text, not just a changed time
    assert rows[3].reason == C.TIMESTAMP and "08:01" in rows[3].detail
    assert (rows[3].break_key, rows[3].break_position, rows[3].prefix_tokens) == ("system", 0, 0)
    assert rows[3].expected_cached == 0
    # Money: priced as gpt-4o, the miss on turn 3 lost what the whole previous prompt could have read.
    assert rows[3].cost_no_cache == pytest.approx((rows[3].prompt_tokens * 2.5 + 50 * 10) / 1e6)
    assert rows[3].potential_cached > 3000
    assert rows[3].cost_lost == pytest.approx(rows[3].potential_cached * (2.5 - 1.25) / 1e6)
    assert rows[1].cost_actual == pytest.approx(
        ((rows[1].prompt_tokens - 3200) * 2.5 + 3200 * 1.25 + 50 * 10) / 1e6
    )


def test_analysis_runs_twice_to_the_same_rows(api: Any, project: Any) -> None:
    snaps = [cache_turn(i) for i in range(3)]
    _post(api, snaps)
    refs = _refs(project, snaps)
    cache_analyze(project_id=project.pk, snapshot_refs=refs)
    first = list(TurnCache.objects.filter(project=project).order_by("turn").values())
    cache_analyze(project_id=project.pk, snapshot_refs=refs)
    again = list(TurnCache.objects.filter(project=project).order_by("turn").values())
    assert [{k: v for k, v in r.items() if k != "id"} for r in first] == [
        {k: v for k, v in r.items() if k != "id"} for r in again
    ]


def test_a_late_turn_recomputes_the_turn_after_it(api: Any, project: Any) -> None:
    t0, t1, t2 = (cache_turn(i) for i in range(3))
    _post(api, [t0, t2])
    cache_analyze(project_id=project.pk, snapshot_refs=_refs(project, [t0, t2]))
    assert TurnCache.objects.get(project=project, turn=2).prev_turn == 0
    _post(api, [t1])
    # Only the late turn is analysed; the turn after it is recomputed against it.
    assert cache_analyze(project_id=project.pk, snapshot_refs=_refs(project, [t1])) == 2
    assert TurnCache.objects.get(project=project, turn=2).prev_turn == 1


def test_project_prices_override_the_default_table(api: Any, project: Any) -> None:
    project.price_table = {"gpt-4o": {"input": 10.0}}
    project.save()
    snaps = [cache_turn(0), cache_turn(1, model="unpriced-model")]
    _post(api, snaps)
    cache_analyze(project_id=project.pk, snapshot_refs=_refs(project, snaps))
    first = TurnCache.objects.get(project=project, turn=0)
    assert first.cost_no_cache == pytest.approx((first.prompt_tokens * 10.0 + 50 * 10.0) / 1e6)
    assert TurnCache.objects.get(project=project, turn=1).cost_no_cache is None


def test_session_and_project_sums_and_the_blocks_that_break_most(api: Any, project: Any) -> None:
    snaps = [cache_turn(0, cached=0)]
    for i in range(1, 6):
        snaps.append(cache_turn(i, system=f"You are a travel assistant. Now: 2026-12-01 08:0{i}", cached=0))
    _post(api, snaps)
    cache_analyze(project_id=project.pk, snapshot_refs=_refs(project, snaps))
    session = selectors.session_get(project=project, session_id="cache-1")
    s = cache_selectors.session_cache_summary(project_id=project.pk, session_ref=session.id)
    assert s.turns == 6 and s.breaks == 5
    assert s.hit_rate == 0.0
    assert s.breakers[0].key == "system" and s.breakers[0].turns == 5
    assert "date or time" in s.breakers[0].reasons
    assert s.cost_lost > 0 and s.cost_no_cache >= s.cost_actual
    p = cache_selectors.project_cache_summary(project_id=project.pk)
    assert (p.turns, p.breaks, p.cost_lost) == (6, 5, pytest.approx(s.cost_lost))
    line = cache_selectors.session_cache_line(project_id=project.pk, session_ref=session.id)
    assert [t for t, *_ in line] == list(range(6))


def test_the_table_is_registered_for_retention() -> None:
    tables = {t.table: t for t in registry.expiring_tables()}
    assert tables["insights_turncache"].time_column == "received_at"
    assert tables["insights_turncache"].project_column == "project_id"


def test_reads_are_set_based(api: Any, project: Any, django_assert_max_num_queries: Any) -> None:
    snaps = [cache_turn(i, session_id=f"s-{i % 3}") for i in range(12)]
    _post(api, snaps)
    refs = _refs(project, snaps)
    # pairs, blocks (3), prices, the project's lock, the rows replaced, the day sums, the upsert
    # (savepoint + insert) and the rules of alerts.
    with django_assert_max_num_queries(13):
        cache_analyze(project_id=project.pk, snapshot_refs=refs)


def _row_sums(project: Any) -> tuple[Any, ...]:
    """The project's figures summed over its rows, as the day sums must have them."""
    rows = list(TurnCache.objects.filter(project=project))
    return (
        len(rows),
        sum(r.prompt_tokens for r in rows),
        sum(r.cached for r in rows),
        sum(r.expected_cached for r in rows),
        sum(1 for r in rows if r.reported_cached is not None),
        sum(1 for r in rows if r.reason not in C.NOT_BREAKS),
        pytest.approx(sum(r.cost_lost or 0.0 for r in rows)),
        sum(1 for r in rows if r.cost_no_cache is not None),
    )


def _day_sums(project: Any, since: Any = None) -> tuple[Any, ...]:
    p = cache_selectors.project_cache_summary(project_id=project.pk, since=since)
    return (p.turns, p.prompt_tokens, p.cached_tokens, p.expected_cached, p.reported_turns, p.breaks,
            p.cost_lost, p.priced_turns)


def test_day_sums_follow_repeated_and_late_analyses(api: Any, project: Any) -> None:
    t0, t1, t2, t3 = (cache_turn(0, cached=0), cache_turn(1, cached=3200),
                      cache_turn(2, system="You are a travel assistant. Now: 2026-12-01 08:01", cached=0),
                      cache_turn(3, system="You are a travel assistant. Now: 2026-12-01 08:02", cached=0))
    _post(api, [t0, t2, t3])
    cache_analyze(project_id=project.pk, snapshot_refs=_refs(project, [t0, t2, t3]))
    assert _day_sums(project) == _row_sums(project)
    # The same turns again: rows replaced, sums unchanged.
    cache_analyze(project_id=project.pk, snapshot_refs=_refs(project, [t0, t2, t3]))
    assert _day_sums(project)[0] == 3
    # A late turn changes the row of the turn after it: the sums move by the difference.
    _post(api, [t1])
    cache_analyze(project_id=project.pk, snapshot_refs=_refs(project, [t1]))
    sums = _day_sums(project)
    assert sums == _row_sums(project) and sums[0] == 4 and sums[5] == 2
    p = cache_selectors.project_cache_summary(project_id=project.pk)
    assert [b.key for b in p.breakers] == ["system"] and p.breakers[0].turns == 2
    assert "date or time" in p.breakers[0].reasons
    # A period that starts after today holds nothing.
    later = timezone.now() + timedelta(days=1)
    assert cache_selectors.project_cache_summary(project_id=project.pk, since=later).turns == 0


def test_day_sums_are_registered_for_retention_by_whole_days() -> None:
    tables = {t.table: t for t in registry.expiring_tables()}
    for name in ("insights_cacheday", "insights_cachebreakday"):
        assert (tables[name].time_column, tables[name].days) == ("day", True)


def test_the_migration_backfills_the_same_day_sums_the_analyzer_keeps(api: Any, project: Any) -> None:
    import importlib

    from django.db import connection

    snaps = [cache_turn(0, cached=0)] + [
        cache_turn(i, system=f"You are a travel assistant. Now: 2026-12-01 08:0{i}", cached=0) for i in (1, 2)
    ]
    _post(api, snaps)
    cache_analyze(project_id=project.pk, snapshot_refs=_refs(project, snaps))
    kept = cache_selectors.project_cache_summary(project_id=project.pk)
    backfill = importlib.import_module("insights.migrations.0005_cache_days").BACKFILL
    with connection.cursor() as cur:
        cur.execute("DELETE FROM insights_cacheday")
        cur.execute("DELETE FROM insights_cachebreakday")
        for sql in backfill:
            cur.execute(sql)
    rebuilt = cache_selectors.project_cache_summary(project_id=project.pk)
    assert rebuilt.turns == 3 and rebuilt.breaks == kept.breaks == 2
    assert (rebuilt.prompt_tokens, rebuilt.cached_tokens, rebuilt.priced_turns, rebuilt.breakers) == (
        kept.prompt_tokens, kept.cached_tokens, kept.priced_turns, kept.breakers)
    assert rebuilt.cost_lost == pytest.approx(kept.cost_lost)
    assert rebuilt.cost_actual == pytest.approx(kept.cost_actual)
