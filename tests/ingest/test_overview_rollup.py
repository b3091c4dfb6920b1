"""The overview's rollup, kept per (day, session) and moved by differences: whatever order and
batches the turns arrive in, the day rows that a refresh after each batch leaves equal a rebuild
from the stored turns, and both equal the figures counted straight from the turns."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from core.models import Project
from ingest import dashboard
from ingest.services import snapshot_batch_ingest
from tests.factories import block, snapshot
from tests.ingest.dashboard_factories import demo_session

pytestmark = pytest.mark.django_db

_COLUMNS = ("day", "sessions", "turns", "recalled", "injected", "validated", "failed", "compressions",
            "max_watermark", "buckets", "tiers", "strategies")


def _at(snap: dict[str, Any], when: datetime) -> dict[str, Any]:
    return {**snap, "ts": when.isoformat().replace("+00:00", "Z")}


def _turns() -> list[dict[str, Any]]:
    """Sessions that cross midnight, resume days later, or sit on days of their own."""
    out: list[dict[str, Any]] = []
    # 24 turns 30 s apart from 23:55: the day's last turns find their successors after midnight.
    out += demo_session(session_id="midnight", turns=24, compress_at=14,
                        start=datetime(2026, 11, 30, 23, 55, tzinfo=UTC))
    # Six turns, then the same session three days later (its last turn there now has a next one).
    resumed = demo_session(session_id="resumed", turns=12, compress_at=8,
                           start=datetime(2026, 11, 27, 10, 0, tzinfo=UTC))
    out += resumed[:6]
    out += [_at(s, datetime(2026, 11, 30, 9, 0, tzinfo=UTC) + timedelta(minutes=3 * i))
            for i, s in enumerate(resumed[6:])]
    # A turn twelve minutes after the one before: past the 10-minute cap.
    noon = datetime(2026, 11, 30, 12, tzinfo=UTC)
    slow = demo_session(session_id="slow", turns=4, compress_at=99, start=noon)
    out += [_at(s, noon + timedelta(minutes=12 * i)) for i, s in enumerate(slow)]
    for n in range(5):
        out += demo_session(session_id=f"short-{n}", turns=3, compress_at=1,
                            start=datetime(2026, 11, 26 + n, 15, 30, tzinfo=UTC))
    return out


def _rows(project: Project) -> list[tuple[Any, ...]]:
    import json

    with connection.cursor() as cur:
        cur.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM ingest_overview_day WHERE project_id = %s ORDER BY day",  # noqa: S608
            [project.pk],
        )
        rows = cur.fetchall()
    out = []
    for r in rows:
        tiers = {t: [n, round(secs, 6)] for t, (n, secs) in json.loads(r[10]).items()}
        out.append((*r[:9], json.loads(r[9]), tiers, json.loads(r[11])))
    return out


def _direct(snaps: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per day, counted from the wire snapshots: sessions, turns, compressions and the seconds spent
    in tiers (a turn counts the time to the session's next turn, at most 600 s; the last, none)."""
    when = {s["snapshot_id"]: datetime.fromisoformat(s["ts"].replace("Z", "+00:00")) for s in snaps}
    by_session: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in snaps:
        by_session[s["session_id"]].append(s)
    days: dict[str, dict[str, Any]] = defaultdict(lambda: {"sessions": set(), "turns": 0, "compressions": 0,
                                                            "seconds": 0.0})
    for sid, turns in by_session.items():
        turns.sort(key=lambda s: s["turn"])
        for i, s in enumerate(turns):
            day = days[when[s["snapshot_id"]].date().isoformat()]
            day["sessions"].add(sid)
            day["turns"] += 1
            day["compressions"] += len(s.get("compression") or [])
            if i + 1 < len(turns):
                gap = (when[turns[i + 1]["snapshot_id"]] - when[s["snapshot_id"]]).total_seconds()
                day["seconds"] += min(dashboard.MAX_TURN_GAP_SECONDS, gap)
    return {d: {**v, "sessions": len(v["sessions"])} for d, v in days.items()}


@pytest.mark.parametrize(("seed", "rescan"), [(1, 0), (2, 0), (3, dashboard.RESCAN_IDS)])
def test_a_refresh_after_every_batch_leaves_what_a_rebuild_makes(
    project: Project, seed: int, rescan: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With no rescan a refresh looks only at the turns new since the last one; with the default
    # every refresh of this small store looks at all of them again.
    monkeypatch.setattr(dashboard, "RESCAN_IDS", rescan)
    snaps = _turns()
    rng = random.Random(seed)
    rng.shuffle(snaps)  # turns arrive late and out of order, across days
    moved: set[str] = set()
    while snaps:
        n = rng.randint(1, 9)
        batch, snaps = snaps[:n], snaps[n:]
        assert snapshot_batch_ingest(project=project, batch=batch).rejected == 0
        days = dashboard.overview_refresh(project_id=project.pk)
        assert days, "every batch moves at least its own days"
        moved |= {d.isoformat() for d in days}
    incremental = _rows(project)
    # Nothing new: nothing changes. Without a rescan nothing is looked at again either; with one, a
    # transaction running elsewhere in the cluster (another test process's, in a parallel run)
    # makes the refresh look again below its mark, and move nothing.
    again = dashboard.overview_refresh(project_id=project.pk)
    assert _rows(project) == incremental
    if not rescan:
        assert again == []

    assert dashboard.overview_rebuild(project_id=project.pk)
    rebuilt = _rows(project)
    assert incremental == rebuilt

    # The per-turn figures, summed straight from the stored turns.
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT date_trunc('day', ts)::date, sum(n_recall), sum(n_recall_injected),
                   count(*) FILTER (WHERE n_validation > 0), count(*) FILTER (WHERE n_validation_failed > 0),
                   sum(n_compression), max(watermark)
            FROM ingest_snapshot WHERE project_id = %s GROUP BY 1 ORDER BY 1
            """,
            [project.pk],
        )
        stored = cur.fetchall()
    assert [r[0] for r in rebuilt] == [r[0] for r in stored]
    assert [(*r[3:8], pytest.approx(r[8])) for r in rebuilt] == [tuple(r[1:]) for r in stored]
    assert any(r[3] for r in rebuilt) and any(r[6] for r in rebuilt) and any(r[7] for r in rebuilt)

    direct = _direct(_turns())
    assert {r[0].isoformat() for r in rebuilt} == set(direct) == moved
    for r in rebuilt:
        want = direct[r[0].isoformat()]
        assert (r[1], r[2], r[7]) == (want["sessions"], want["turns"], want["compressions"]), r[0]
        assert sum(n for n, _ in r[10].values()) == want["turns"]
        assert sum(secs for _, secs in r[10].values()) == pytest.approx(want["seconds"]), r[0]
        assert sum(n for n, _, _ in r[9].values()) == want["turns"]


def test_a_turn_that_resumes_a_session_days_later_moves_its_previous_day(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dashboard, "RESCAN_IDS", 0)
    first = demo_session(session_id="r", turns=3, compress_at=99, start=datetime(2026, 11, 20, 8, tzinfo=UTC))
    assert snapshot_batch_ingest(project=project, batch=first).rejected == 0
    dashboard.overview_refresh(project_id=project.pk)
    (day,) = _rows(project)
    assert sum(secs for _, secs in day[10].values()) == pytest.approx(60.0)  # 2 gaps of 30 s
    later = demo_session(session_id="r", turns=4, compress_at=99, start=datetime(2026, 11, 24, 8, tzinfo=UTC))
    assert snapshot_batch_ingest(project=project, batch=[later[3]]).rejected == 0
    moved = dashboard.overview_refresh(project_id=project.pk)
    assert [d.isoformat() for d in moved or []] == ["2026-11-20", "2026-11-24"]
    old, new = _rows(project)
    # The 20th's last turn now has a next one, days away: it counts the cap.
    assert sum(secs for _, secs in old[10].values()) == pytest.approx(60.0 + dashboard.MAX_TURN_GAP_SECONDS)
    assert (old[1], old[2], new[1], new[2]) == (1, 3, 1, 1)


def test_a_refresh_counts_only_what_is_new_though_it_looks_back_below_its_mark(project: Project) -> None:
    # The default window below the mark holds every turn here; none of them is counted again. A
    # transaction running elsewhere in the cluster when a refresh reads (a worker's, in the whole
    # suite) makes the next refresh look again at the days below its mark: it may move Monday
    # again, but never count its turns twice.
    monday, friday = datetime(2026, 11, 23, 8, tzinfo=UTC), datetime(2026, 11, 27, 8, tzinfo=UTC)
    first = demo_session(session_id="monday", turns=5, compress_at=99, start=monday)
    assert snapshot_batch_ingest(project=project, batch=first).rejected == 0
    assert [d.isoformat() for d in dashboard.overview_refresh(project_id=project.pk) or []] == ["2026-11-23"]
    later = demo_session(session_id="friday", turns=2, compress_at=99, start=friday)
    assert snapshot_batch_ingest(project=project, batch=later).rejected == 0
    moved = [d.isoformat() for d in dashboard.overview_refresh(project_id=project.pk) or []]
    assert "2026-11-27" in moved and set(moved) <= {"2026-11-23", "2026-11-27"}
    assert [(r[1], r[2]) for r in _rows(project)] == [(1, 5), (1, 2)]


def _own_texts(sid: str, turns: int, start: datetime) -> list[dict[str, Any]]:
    """Turns whose texts no other session shares (a shared text's insert would make a concurrent
    batch wait for the first one's commit)."""
    return [
        snapshot(session_id=sid, turn=t, ts=start + timedelta(seconds=30 * t),
                 blocks=[block("user", "user", f"{sid}: question {t}")])
        for t in range(turns)
    ]


@pytest.mark.django_db(transaction=True)
def test_a_batch_that_commits_after_a_refresh_below_its_mark_is_counted_once(project: Project) -> None:
    """A batch draws its ids, then a later batch commits first and a refresh moves the mark past
    both: the first batch's turns, visible only afterwards, are counted by the next refresh."""
    import threading

    from django.db import connections, transaction

    drawn, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def slow_batch() -> None:
        try:
            with transaction.atomic():
                batch = _own_texts("slow", 3, datetime(2026, 11, 23, 8, tzinfo=UTC))
                assert snapshot_batch_ingest(project=project, batch=batch).created == 3
                drawn.set()
                assert release.wait(30)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=slow_batch)
    thread.start()
    try:
        assert drawn.wait(30)
        fast = _own_texts("fast", 2, datetime(2026, 11, 24, 8, tzinfo=UTC))
        assert snapshot_batch_ingest(project=project, batch=fast).created == 2
        moved = dashboard.overview_refresh(project_id=project.pk) or []
        assert [d.isoformat() for d in moved] == ["2026-11-24"]
        assert [(r[0].isoformat(), r[2]) for r in _rows(project)] == [("2026-11-24", 2)]
    finally:
        release.set()
        thread.join(30)
    assert errors == []
    # The slow batch's ids lie below the mark; the next refresh finds them (and looks again at the
    # fast batch's, written while the slow one ran) and counts each turn once.
    assert "2026-11-23" in {d.isoformat() for d in dashboard.overview_refresh(project_id=project.pk) or []}
    counted = [(r[0].isoformat(), r[1], r[2]) for r in _rows(project)]
    assert counted == [("2026-11-23", 1, 3), ("2026-11-24", 1, 2)]
    # Nothing new: nothing changes (a transaction running elsewhere in the cluster may make the
    # refresh look again below its mark).
    counted = _rows(project)
    dashboard.overview_refresh(project_id=project.pk)
    assert _rows(project) == counted
    dashboard.overview_rebuild(project_id=project.pk)
    assert _rows(project) == counted
