"""Retention on the real PostgreSQL: per-project bounded deletes, whole days dropped when every
project allows it, texts kept while a kept turn uses them, registered derived rows, sessions,
rollups, pages of expired turns, the settings section, and expiry beside live ingest."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, connections
from django.test import Client

from alerts.models import Alert, AlertRule
from core import registry
from core.models import Membership, Project
from core.services import project_create
from ingest import partitions, retention
from ingest.dashboard import overview_refresh
from ingest.models import AgentSession, BlockContent, MessageContent, Snapshot
from ingest.services import snapshot_batch_ingest
from replay.models import ModelEndpoint, ReplayJob, ReplayVariant
from tests.factories import SYSTEM_PROMPT, block, full_snapshot, snapshot
from tests.ingest.aging import age


def _session(sid: str, turns: int, *, shared: str = SYSTEM_PROMPT) -> list[dict[str, Any]]:
    out = []
    for t in range(turns):
        snap = full_snapshot(session_id=sid, turn=t)
        snap["blocks"] = [
            block("system", "system", shared, pinned=True),
            block("user", "user", f"{sid} question {t}"),
        ]
        out.append(snap)
    return out


def _project(name: str, days: int) -> Project:
    project, _ = project_create(name=name)
    project.retention_days = days
    project.save()
    return project


def _counts(project: Project) -> dict[str, int]:
    out: dict[str, int] = {"snapshots": Snapshot.objects.filter(project=project).count()}
    with connection.cursor() as cur:
        for table in partitions.PARTITIONED_TABLES[1:]:
            cur.execute(f"SELECT count(*) FROM {table} WHERE project_id = %s", [project.pk])
            out[table[7:]] = cur.fetchone()[0]
    return out


@pytest.fixture
def derived_table(db: Any) -> Iterator[str]:
    """A derived per-turn table of another app, registered for expiry."""
    name = "test_turn_figures"
    with connection.cursor() as cur:
        cur.execute(
            f"CREATE TABLE {name} (project_id bigint NOT NULL, received_at timestamptz NOT NULL, v int)"
        )
    registry.expiring_table_add(registry.ExpiringTable(table=name, time_column="received_at"))
    yield name
    registry._expiring.pop(name, None)


@pytest.mark.django_db
def test_a_short_retention_deletes_its_projects_old_turns_and_keeps_texts_a_kept_turn_uses(
    derived_table: str,
) -> None:
    short, long = _project("short", 5), _project("long", 30)
    snapshot_batch_ingest(project=short, batch=_session("old", 3))
    snapshot_batch_ingest(project=long, batch=_session("old", 3))
    age(short, 10)
    age(long, 10)
    overview_refresh(project_id=short.pk)
    now = datetime.now(tz=UTC)
    with connection.cursor() as cur:
        for table in ("ingest_overview_day", "ingest_overview_session_day"):
            cur.execute(f"SELECT count(*) FROM {table} WHERE project_id = %s", [short.pk])
            assert cur.fetchone()[0] == 1, table  # the old session's day, before expiry
        cur.execute(
            f"INSERT INTO {derived_table} VALUES (%s, %s, 1), (%s, %s, 2), (%s, %s, 3)",
            [short.pk, now - timedelta(days=10), short.pk, now, long.pk, now - timedelta(days=10)],
        )
    # A new session of the short project uses the same system prompt as the old one.
    snapshot_batch_ingest(project=short, batch=_session("new", 2))
    old_user_text = "old question 0"

    report = retention.expire()

    # The day is still the long project's: only the short project's rows went, by bounded deletes.
    assert report.partitions_dropped == []
    assert report.snapshots_deleted == 3
    assert _counts(short) == {"snapshots": 2, "compressionevent": 2, "recallitem": 2, "validationoutcome": 2}
    assert _counts(long)["snapshots"] == 3
    assert list(AgentSession.objects.filter(project=short).values_list("session_id", flat=True)) == ["new"]
    assert AgentSession.objects.filter(project=long).count() == 1
    # Texts: the shared system prompt stays, the old turns' own user texts go.
    texts = [
        m["content"] for m in MessageContent.objects.filter(project=short).values_list("message", flat=True)
    ]
    assert SYSTEM_PROMPT in texts and old_user_text not in texts
    assert not any("old question" in t for t in texts)
    assert BlockContent.objects.filter(project=short).count() == 3  # system + two new user blocks
    # Every kept turn still has all its blocks' texts.
    from ingest.selectors import snapshots_blocks

    refs = list(Snapshot.objects.filter(project=short).values_list("id", flat=True))
    for blocks in snapshots_blocks(project_id=short.pk, snapshot_refs=refs).values():
        assert [len(b["messages"]) for b in blocks] == [1, 1]
    # Derived rows and rollups before the cutoff.
    with connection.cursor() as cur:
        cur.execute(f"SELECT v FROM {derived_table} ORDER BY v")
        assert [r[0] for r in cur.fetchall()] == [2, 3]
        for table in ("ingest_overview_day", "ingest_overview_session_day"):
            cur.execute(
                f"SELECT count(*) FROM {table} WHERE project_id = %s AND day < %s",
                [short.pk, (now - timedelta(days=5)).date()],
            )
            assert cur.fetchone()[0] == 0, table


@pytest.mark.django_db
def test_whole_days_are_dropped_once_every_projects_retention_has_passed_them(derived_table: str) -> None:
    a, b = _project("a", 5), _project("b", 7)
    snapshot_batch_ingest(project=a, batch=_session("s", 4))
    snapshot_batch_ingest(project=b, batch=_session("s", 2))
    age(a, 10)
    age(b, 10)
    old_day = (datetime.now(tz=UTC) - timedelta(days=10)).date()
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {derived_table} VALUES (%s, %s, 1)",
            [b.pk, datetime.now(tz=UTC) - timedelta(days=10)],
        )

    report = retention.expire()

    assert partitions.partition_name("ingest_snapshot", old_day) in report.partitions_dropped
    assert report.snapshots_deleted == 6
    assert old_day not in {
        p.day for t in partitions.PARTITIONED_TABLES for p in partitions.partitions_list(t)
    }
    assert AgentSession.objects.filter(project__in=[a, b]).count() == 0
    assert BlockContent.objects.filter(project__in=[a, b]).count() == 0
    assert MessageContent.objects.filter(project__in=[a, b]).count() == 0
    with connection.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {derived_table}")
        assert cur.fetchone()[0] == 0
    # Ingest goes on as before; a text that expired is stored again when a new turn sends it.
    assert snapshot_batch_ingest(project=a, batch=_session("s2", 1)).created == 1
    assert MessageContent.objects.filter(project=a).count() == 2


@pytest.mark.django_db
def test_day_sums_go_once_the_cutoff_has_passed_the_whole_day() -> None:
    from insights.cache_models import CacheBreakDay, CacheDay

    p = _project("p", 5)
    now = datetime(2026, 12, 3, 15, 0, tzinfo=UTC)
    cutoff = retention.project_cutoff(p, now)  # 28 November, 15:00: part of that day is kept
    days = [cutoff.date() - timedelta(days=1), cutoff.date(), now.date()]
    for d in days:
        CacheDay.objects.create(project=p, day=d, turns=1)
        CacheBreakDay.objects.create(project=p, day=d, break_key="system", reason="timestamp", turns=1)
    retention.expire(now=now)
    assert sorted(CacheDay.objects.filter(project=p).values_list("day", flat=True)) == days[1:]
    assert sorted(CacheBreakDay.objects.filter(project=p).values_list("day", flat=True)) == days[1:]


@pytest.mark.django_db
def test_a_session_keeps_its_recent_turns_with_its_counts_recomputed() -> None:
    p = _project("p", 5)
    snapshot_batch_ingest(project=p, batch=_session("s", 3))
    age(p, 10)
    snapshot_batch_ingest(project=p, batch=[full_snapshot(session_id="s", turn=3, ts=datetime.now(tz=UTC))])
    retention.expire()
    s = AgentSession.objects.get(project=p, session_id="s")
    assert s.turn_count == 1
    assert list(Snapshot.objects.filter(project=p).values_list("turn", flat=True)) == [3]


# --- pages of expired turns ----------------------------------------------------------------
def _admin(project: Project) -> Client:
    user = get_user_model().objects.create_user(username=f"u{uuid.uuid4().hex[:6]}", password="pw")
    Membership.objects.create(project=project, user=user, role="admin")
    c = Client()
    c.force_login(user)
    return c


@pytest.mark.django_db
def test_alert_and_replay_pages_of_an_expired_turn_say_so_and_the_turn_page_is_a_404() -> None:
    p = _project("p", 5)
    snapshot_batch_ingest(project=p, batch=_session("gone", 2))
    snap = Snapshot.objects.get(project=p, turn=1)
    rule = AlertRule.objects.create(project=p, name="drift", kind="count_drift")
    alert = Alert.objects.create(
        project=p,
        rule=rule,
        rule_kind="count_drift",
        severity="warning",
        title="drift",
        session_ref=snap.session_ref,
        session_id="gone",
        turn=1,
        snapshot_ref=snap.id,
        ts=snap.ts,
        last_turn=1,
        last_ts=snap.ts,
        value=1,
        threshold=0.5,
        peak_value=1,
        dedup_key="d:1:1",
    )
    endpoint = ModelEndpoint.objects.create(
        project=p, name="local", base_url="http://127.0.0.1:1/v1", model="m"
    )
    job = ReplayJob.objects.create(project=p, endpoint=endpoint, kind="plain", status="done")
    ReplayVariant.objects.create(
        job=job,
        position=0,
        snapshot_ref=snap.id,
        snapshot_uuid=snap.snapshot_id,
        session_id="gone",
        turn=1,
        label="baseline",
        is_baseline=True,
    )
    client = _admin(p)
    alert_url, job_url = f"/p/{p.pk}/alerts/{alert.pk}/", f"/p/{p.pk}/replays/{job.pk}/"
    assert "turn expired" not in client.get(alert_url).content.decode()

    age(p, 10)
    retention.expire()

    page = client.get(alert_url)
    assert page.status_code == 200 and "turn expired" in page.content.decode()
    page = client.get(job_url)
    assert page.status_code == 200 and "turn expired" in page.content.decode()
    turn = client.get(f"/p/{p.pk}/s/gone/t/1/")
    assert turn.status_code == 404 and "Turn expired" in turn.content.decode()
    assert "keeps turns 5 days" in turn.content.decode()


@pytest.mark.django_db
def test_the_api_answers_404_with_the_reason_for_an_expired_snapshot(client: Client) -> None:
    p, key = project_create(name="api")
    p.retention_days = 5
    p.save()
    snapshot_batch_ingest(project=p, batch=[snapshot(session_id="s", turn=0)])
    sid = str(Snapshot.objects.get(project=p).snapshot_id)
    age(p, 10)
    retention.expire()
    r = client.get(f"/api/v1/snapshots/{sid}", HTTP_AUTHORIZATION=f"Bearer {key}")
    # A snapshot id leaves no trace once removed: the answer names both possibilities.
    assert r.status_code == 404 and "older than the 5 days" in r.json()["detail"]
    r = client.get("/api/v1/sessions/s/timeline", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert r.status_code == 404 and "expired" in r.json()["detail"]
    r = client.get("/api/v1/export", {"session_id": "s"}, HTTP_AUTHORIZATION=f"Bearer {key}")
    assert r.status_code == 404 and "expired" in r.json()["detail"]
    for never in ("/api/v1/sessions/never/timeline", "/api/v1/export?session_id=never"):
        r = client.get(never, HTTP_AUTHORIZATION=f"Bearer {key}")
        assert r.status_code == 404 and "no such session" in r.json()["detail"], never
        assert "expired" not in r.json()["detail"]


def _page_404(client: Client, url: str) -> tuple[str, str]:
    """The heading and the message of a 404 page."""
    r = client.get(url)
    assert r.status_code == 404, (url, r.status_code)
    body = r.content.decode()
    heading = body.split("<h1>", 1)[1].split("</h1>", 1)[0]
    message = body.split("</h1>", 1)[1].split("</p>", 1)[0]
    return heading, message


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["partition-dropped", "rows-deleted"])
def test_pages_say_expired_only_for_what_retention_removed(path: str) -> None:
    p = _project("p", 5)
    if path == "rows-deleted":
        # A project that keeps its turns longer shares the day: it is not dropped whole.
        other = _project("other", 30)
        snapshot_batch_ingest(project=other, batch=_session("kept", 1))
        age(other, 10)
    snapshot_batch_ingest(project=p, batch=_session("gone", 2))
    snapshot_batch_ingest(project=p, batch=_session("part", 1))
    age(p, 10)
    snapshot_batch_ingest(project=p, batch=_session("part", 3)[2:])  # turn 2 arrives today
    report = retention.expire()
    assert bool(report.partitions_dropped) == (path == "partition-dropped")
    client = _admin(p)
    base = f"/p/{p.pk}/s"

    assert _page_404(client, f"{base}/gone/t/1/")[0] == "Turn expired"
    heading, message = _page_404(client, f"{base}/gone/")
    assert heading == "Session expired" and "keeps turns 5 days" in message
    assert client.get(f"{base}/part/").status_code == 200
    heading, message = _page_404(client, f"{base}/part/t/0/")
    assert heading == "Turn expired" and "keeps turns 5 days" in message

    for never in (f"{base}/never/", f"{base}/never/t/0/", f"{base}/part/t/7/", f"{base}/gone/t/9/"):
        heading, message = _page_404(client, never)
        if never.endswith("/gone/t/9/"):
            # A turn the session never had, of a session that did expire: the session is what is gone.
            assert heading == "Session expired", never
            continue
        assert heading == "Not found" and "expired" not in message and "not found" in message, never


# --- settings ---------------------------------------------------------------------------------
@pytest.mark.django_db
def test_retention_is_shown_and_edited_in_settings_within_its_bounds() -> None:
    p = _project("p", 30)
    client = _admin(p)
    page = client.get(f"/p/{p.pk}/settings/").content.decode()
    assert 'id="retention"' in page and 'value="30"' in page and 'max="3650"' in page
    for bad, message in (
        ("3651", "At most 3650 days."),
        ("0", "At least 1 day."),
        ("x", "A whole number of days."),
    ):
        r = client.post(f"/p/{p.pk}/settings/retention/", {"retention_days": bad})
        assert r.status_code == 400 and message in r.content.decode()
    p.refresh_from_db()
    assert p.retention_days == 30
    r = client.post(f"/p/{p.pk}/settings/retention/", {"retention_days": "90"})
    assert r.status_code == 302
    p.refresh_from_db()
    assert p.retention_days == 90


@pytest.mark.django_db
def test_only_an_admin_changes_retention() -> None:
    p = _project("p", 30)
    user = get_user_model().objects.create_user(username="viewer", password="pw")
    Membership.objects.create(project=p, user=user, role="editor")
    c = Client()
    c.force_login(user)
    assert c.post(f"/p/{p.pk}/settings/retention/", {"retention_days": "1"}).status_code in (403, 404)
    p.refresh_from_db()
    assert p.retention_days == 30


# --- beside live ingest ------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_expiry_runs_beside_ingest_without_errors_or_long_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    old, live = _project("old", 5), _project("live", 30)
    for n in range(6):
        snapshot_batch_ingest(project=old, batch=_session(f"old-{n}", 50))
    snapshot_batch_ingest(project=live, batch=_session("warm", 5))
    age(old, 10)
    monkeypatch.setattr(retention, "BATCH", 40)  # many small batches, to interleave with ingest

    stop = threading.Event()
    latencies: list[float] = []
    errors: list[BaseException] = []

    def ingest() -> None:
        try:
            n = 0
            while not stop.is_set() or n < 5:
                t0 = time.monotonic()
                res = snapshot_batch_ingest(project=live, batch=_session(f"live-{n}", 10))
                latencies.append(time.monotonic() - t0)
                assert res.created == 10, res.results
                n += 1
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=ingest)
    thread.start()
    try:
        report = retention.expire()
    finally:
        stop.set()
        thread.join(120)
    assert errors == []
    assert report.snapshots_deleted == 300
    assert Snapshot.objects.filter(project=old).count() == 0
    assert Snapshot.objects.filter(project=live).count() == 5 + 10 * len(latencies)
    assert len(latencies) >= 5 and max(latencies) < 2.0, latencies


# --- the beat tasks on a real worker ------------------------------------------------------------
def test_beat_runs_partition_upkeep_and_expiry() -> None:
    from django.conf import settings

    tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert {"ingest.partitions_ensure", "ingest.expire"} <= tasks


@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_runs_expiry_and_partition_upkeep(celery_worker_process: Any) -> None:
    from ingest.tasks import expire_task, partitions_ensure_task
    from tests.waiting import wait_until

    p = _project("p", 5)
    snapshot_batch_ingest(project=p, batch=_session("s", 3))
    age(p, 10)
    last = datetime.now(tz=UTC).date() + timedelta(days=partitions.DAYS_AHEAD)
    for table in reversed(partitions.PARTITIONED_TABLES):
        partitions.partition_drop(partitions.Partition(table, partitions.partition_name(table, last), last))

    expire_task.delay()
    partitions_ensure_task.delay()

    wait_until(
        lambda: not (
            Snapshot.objects.filter(project=p).exists() or AgentSession.objects.filter(project=p).exists()
        ),
        60,
        "the worker to expire the turns and their session",
    )
    wait_until(
        lambda: all(
            last in {q.day for q in partitions.partitions_list(t)} for t in partitions.PARTITIONED_TABLES
        ),
        60,
        "the worker to create the partitions ahead",
    )


@pytest.mark.django_db(transaction=True)
def test_a_day_partition_that_cannot_get_its_lock_is_retried_by_the_worker_without_the_next_tick(
    celery_worker_process: Any,
) -> None:
    import psycopg

    from ingest.tasks import partitions_ensure_task
    from tests.waiting import wait_until

    last = datetime.now(tz=UTC).date() + timedelta(days=partitions.DAYS_AHEAD)
    for table in reversed(partitions.PARTITIONED_TABLES):
        partitions.partition_drop(partitions.Partition(table, partitions.partition_name(table, last), last))

    def has_last(table: str) -> bool:
        return last in {q.day for q in partitions.partitions_list(table)}

    others = [t for t in partitions.PARTITIONED_TABLES if t != "ingest_recallitem"]
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"], port=settings["PORT"] or 5432, user=settings["USER"], dbname=settings["NAME"]
    ) as other:
        # Attaching a day needs the default partition's lock, as expiry's deletes there would hold it.
        other.execute(f'LOCK TABLE "{partitions.default_name("ingest_recallitem")}" IN ACCESS EXCLUSIVE MODE')
        partitions_ensure_task.delay()
        wait_until(lambda: all(has_last(t) for t in others), 60, "the other tables' partitions")
        assert not has_last("ingest_recallitem")
        assert partitions.partitions_missing() == [partitions.partition_name("ingest_recallitem", last)]
    # The lock is gone; nothing but the task's own retry creates the partition.
    wait_until(lambda: has_last("ingest_recallitem"), 60, "the task's retry to create the partition")
    assert partitions.partitions_missing() == []
