"""Scale figures of the partitioned store: ingest rate, page times and expiry at N snapshots.

    CTXOBS_TEST_DB_NAME=ctxobs_bench_scale .venv/bin/python bench/scale.py --snapshots 5000000
    .venv/bin/python bench/scale.py --snapshots 200000        # a small run, a few minutes

Works in a throwaway database of its own (Django's test database: CTXOBS_TEST_DB_NAME names it),
created, migrated and dropped here. Steps:
1. 100,000 snapshots (2,000 sessions of 50 turns) generated in SQL, spread over the last DAYS days;
   then, at this size, the ingest rate through the real HTTP API (gunicorn, bench/ingest_rate.py's
   batches of 100 realistic snapshots) and the server time and query count of a session's timeline,
   the sessions list and the overview (bench/pages.py's measurement, in-process).
2. The rest up to N, generated the same way, one day partition at a time. Realistic rows: 50-turn
   sessions whose system, tools and memory blocks repeat (a few shared texts), one new block and
   message per turn, a validation outcome per turn, every fifth turn a recall item, and the
   prompt-cache lens's row of every turn with its day sums (what the overview's cache panel reads).
3. The same ingest rate and pages at N (against the figures at 100k: within 20% and 1.5x, the same
   query counts; each page's three slowest queries named), the overview's first view after a new
   batch of 100 turns (at 100k and at N: the rollup recomputes the days they fall on), and the
   disk bytes per snapshot (snapshot, child and content tables and indexes).
4. Expiry of the oldest day (retention set so that every project's cutoff passes it: the day's
   partitions are dropped, its sessions and texts deleted) timed, while the HTTP ingest runs beside
   it; the ingest rate during expiry against the rate at N (within 20%).
Prints one line per figure and a JSON summary as the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402
from django.urls import reverse  # noqa: E402

from bench import ingest_rate  # noqa: E402
from bench.ingest_rate import http_ingest, make_batches, start_server  # noqa: E402
from bench.pages import measure, measure_first  # noqa: E402

TURNS = 50
SMALL = 100_000
SHARED_MEMORIES = 20


def _shared_contents(cur: Any, pid: int, day: str) -> None:
    """The texts every session repeats: a system prompt, tool definitions, a pool of memories."""
    cur.execute(
        """
        INSERT INTO ingest_messagecontent (project_id, hash, message, last_seen)
        SELECT %(pid)s, md5('msg-' || k), jsonb_build_object('role', 'system', 'content',
               repeat('Shared instructions ' || k || '. ', 40)), %(day)s::date
        FROM unnest(ARRAY['system', 'tools']) k
        UNION ALL
        SELECT %(pid)s, md5('msg-memory-' || g), jsonb_build_object('role', 'system', 'content',
               'Memory ' || g || ': the user prefers window seats and morning flights.'), %(day)s::date
        FROM generate_series(0, %(m)s - 1) g
        ON CONFLICT DO NOTHING
        """,
        {"pid": pid, "day": day, "m": SHARED_MEMORIES},
    )
    cur.execute(
        """
        INSERT INTO ingest_blockcontent (project_id, hash, message_hashes, chars, tokens, encoding,
            created_at, last_seen)
        SELECT m.project_id, md5('block-' || m.hash), ARRAY[m.hash], length(m.message::text), 300,
               'o200k_base', now(), %(day)s::date
        FROM ingest_messagecontent m
        WHERE m.project_id = %(pid)s AND m.hash IN (
            SELECT md5('msg-' || k) FROM unnest(ARRAY['system', 'tools']) k
            UNION ALL SELECT md5('msg-memory-' || g) FROM generate_series(0, %(m)s - 1) g)
        ON CONFLICT DO NOTHING
        """,
        {"pid": pid, "day": day, "m": SHARED_MEMORIES},
    )


def generate(pid: int, *, sessions: int, day: datetime, tag: str) -> None:
    """SESSIONS sessions of TURNS turns that arrived on DAY, with their per-turn rows and texts."""
    d = day.date().isoformat()
    p = {"pid": pid, "n": sessions, "turns": TURNS, "day": day, "d": d, "tag": tag, "m": SHARED_MEMORIES}
    with connection.cursor() as cur:
        _shared_contents(cur, pid, d)
        cur.execute(
            """
            WITH s AS (
                INSERT INTO ingest_session (project_id, session_id, agent, model, turn_count, max_turn,
                    first_seen, last_seen, max_watermark, max_tier, failed_validations, compression_events,
                    alert_count, first_received)
                SELECT %(pid)s, 'bulk-' || %(tag)s || '-' || g,
                       (ARRAY['travel-bot','support-bot','coder'])[1 + g %% 3],
                       'gpt-4o', %(turns)s, %(turns)s - 1, %(day)s + (g %% 80000) * interval '1 s',
                       %(day)s + (g %% 80000) * interval '1 s' + interval '25 min', 0.3 + (g %% 60) / 100.0,
                       CASE WHEN g %% 60 >= 55 THEN 'force' WHEN g %% 60 >= 40 THEN 'compress'
                            WHEN g %% 60 >= 30 THEN 'warn' ELSE 'ok' END, g %% 3, 0, 0,
                       LEAST(%(day)s + (g %% 80000) * interval '1 s', %(day)s + interval '86399 s')
                FROM generate_series(1, %(n)s) g
                RETURNING id, session_id, agent, first_seen, max_watermark
            )
            INSERT INTO ingest_snapshot (project_id, snapshot_id, session_ref, session_id, turn, agent, ts,
                received_at, model_name, context_window, reserve_tokens, encoding, counts_estimated, params,
                tags, total_tokens, watermark, tier, kind_tokens, n_blocks, n_compression, n_recall,
                n_recall_injected, n_validation, n_validation_failed, retries, fallback_used, output,
                prompt_tokens_reported, completion_tokens, latency_ms, count_drift, prev_turn, change,
                block_keys, block_kinds, block_hashes, block_tokens, block_flags)
            SELECT %(pid)s, gen_random_uuid(), s.id, s.session_id, t, s.agent,
                   s.first_seen + t * interval '30 s',
                   LEAST(s.first_seen + t * interval '30 s', %(day)s + interval '86399 s'),
                   'gpt-4o', 128000, 19200,
                   'o200k_base', false, '{"temperature": 0}'::jsonb, '{"env": "prod"}'::jsonb,
                   900 + 60 * t, (900 + 60 * t) / 108800.0, 'ok',
                   jsonb_build_object('system', 300, 'tools', 300, 'memory', 300, 'user', 60 * t),
                   4, 0, (t %% 5 = 0)::int, (t %% 5 = 0)::int, 1, 0, 0, false,
                   jsonb_build_object('text', 'Answer ' || t, 'finish_reason', 'stop'),
                   900 + 60 * t, 40, 800, 0,
                   CASE WHEN t > 0 THEN t - 1 END,
                   '{"entered": [], "left": [], "grew": ["user"], "shrank": []}'::jsonb,
                   ARRAY['system', 'tools', 'memory', 'user'], ARRAY['system', 'tools', 'memory', 'user'],
                   ARRAY[md5('block-' || md5('msg-system')), md5('block-' || md5('msg-tools')),
                         md5('block-' || md5('msg-memory-' || (s.id %% %(m)s))),
                         md5('block-' || md5(s.session_id || '/' || t))],
                   ARRAY[300, 300, 300, 60 * t], ARRAY[2, 0, 0, 0]::smallint[]
            FROM s CROSS JOIN generate_series(0, %(turns)s - 1) t
            """,
            p,
        )
        # One new text per turn (the user's input), and the per-turn rows.
        cur.execute(
            """
            INSERT INTO ingest_messagecontent (project_id, hash, message, last_seen)
            SELECT %(pid)s, md5(x.session_id || '/' || x.turn), jsonb_build_object('role', 'user', 'content',
                   'Question ' || x.turn || ' of ' || x.session_id
                   || ': find me a flight to Guangzhou on Friday.'),
                   %(d)s::date
            FROM (SELECT session_id, turn FROM ingest_snapshot
                  WHERE project_id = %(pid)s AND received_at >= %(day)s
                    AND received_at < %(day)s + interval '1 day'
                    AND session_id LIKE 'bulk-' || %(tag)s || '-%%') x
            ON CONFLICT DO NOTHING
            """,
            p,
        )
        cur.execute(
            """
            INSERT INTO ingest_blockcontent (project_id, hash, message_hashes, chars, tokens, encoding,
                created_at,
                last_seen)
            SELECT %(pid)s, md5('block-' || m.hash), ARRAY[m.hash], 90, 20, 'o200k_base', now(), %(d)s::date
            FROM ingest_messagecontent m WHERE m.project_id = %(pid)s AND m.last_seen = %(d)s::date
            ON CONFLICT DO NOTHING
            """,
            p,
        )
        cur.execute(
            """
            INSERT INTO ingest_validationoutcome (project_id, snapshot_ref, position, received_at, layer,
                "check",
                passed, code, message, attempt)
            SELECT project_id, id, 0, received_at, 'structure', 'json_schema', true, '', '', 1
            FROM ingest_snapshot
            WHERE project_id = %(pid)s AND received_at >= %(day)s AND received_at < %(day)s + interval '1 day'
              AND session_id LIKE 'bulk-' || %(tag)s || '-%%'
            """,
            p,
        )
        cur.execute(
            """
            INSERT INTO ingest_recallitem (project_id, snapshot_ref, position, received_at, memory_id,
                channel,
                score, rank, injected, stale, conflicting, block, preview)
            SELECT project_id, id, 0, received_at, 'm-' || (session_ref %% %(m)s), 'vector', 0.8, 1,
                   true, false,
                   false, 'memory', 'the user prefers window seats'
            FROM ingest_snapshot
            WHERE project_id = %(pid)s AND received_at >= %(day)s AND received_at < %(day)s + interval '1 day'
              AND session_id LIKE 'bulk-' || %(tag)s || '-%%' AND turn %% 5 = 0
            """,
            p,
        )
        # The prompt-cache lens's row of every turn (what its analyzer writes after ingest): the
        # overview's cache panel reads these, so a bench without them would hide its cost.
        cur.execute(
            """
            INSERT INTO insights_turncache (project_id, snapshot_ref, session_ref, turn, received_at, ts,
                model_name, provider, assembly_version, prev_turn, gap_seconds, prompt_tokens,
                completion_tokens, n_blocks, prefix_blocks, prefix_tokens, reason, detail, break_position,
                break_key, break_kind, expected_cached, expected_written, potential_cached, reported_cached,
                note, cost_no_cache, cost_expected, cost_actual, cost_lost)
            SELECT project_id, id, session_ref, turn, received_at, ts, model_name, 'openai',
                   'v' || (1 + turn / 25), prev_turn, CASE WHEN turn > 0 THEN 30 END, total_tokens, 40, 4,
                   CASE WHEN turn = 0 THEN 0 WHEN turn %% 10 = 7 THEN 2 ELSE 3 END,
                   CASE WHEN turn = 0 THEN 0 WHEN turn %% 10 = 7 THEN 600 ELSE 900 END,
                   CASE WHEN turn = 0 THEN 'first_turn' WHEN turn %% 10 = 7 THEN 'timestamp' ELSE 'tail' END,
                   '', CASE WHEN turn > 0 AND turn %% 10 = 7 THEN 2 END,
                   CASE WHEN turn > 0 AND turn %% 10 = 7 THEN 'memory' ELSE '' END,
                   CASE WHEN turn > 0 AND turn %% 10 = 7 THEN 'memory' ELSE '' END,
                   CASE WHEN turn = 0 THEN 0 WHEN turn %% 10 = 7 THEN 512 ELSE 896 END, 0,
                   CASE WHEN turn = 0 THEN 0 ELSE 896 END,
                   CASE WHEN turn %% 2 = 0 AND turn > 0 THEN 896 END, '',
                   total_tokens * 2.5e-6, total_tokens * 2e-6, total_tokens * 2e-6,
                   CASE WHEN turn %% 10 = 7 THEN 1e-6 ELSE 0 END
            FROM ingest_snapshot
            WHERE project_id = %(pid)s AND received_at >= %(day)s AND received_at < %(day)s + interval '1 day'
              AND session_id LIKE 'bulk-' || %(tag)s || '-%%'
            """,
            p,
        )
        # And the day sums the analyzer keeps beside them, recomputed for the whole day.
        cur.execute("DELETE FROM insights_cacheday WHERE project_id = %(pid)s AND day = %(d)s::date", p)
        cur.execute("DELETE FROM insights_cachebreakday WHERE project_id = %(pid)s AND day = %(d)s::date", p)
        for sql in CACHE_DAY_SUMS:
            cur.execute(sql, p)


CACHE_DAY_SUMS = [
    """
    INSERT INTO insights_cacheday (project_id, day, turns, prompt_tokens, cached_tokens, expected_cached,
        reported_turns, breaks, cost_no_cache, cost_expected, cost_actual, cost_lost, priced_turns)
    SELECT %(pid)s, %(d)s::date, count(*), sum(prompt_tokens),
           sum(coalesce(reported_cached, expected_cached)), sum(expected_cached), count(reported_cached),
           count(*) FILTER (WHERE reason NOT IN ('first_turn', 'kept', 'tail')), sum(cost_no_cache),
           sum(cost_expected), sum(coalesce(cost_actual, cost_expected)), sum(cost_lost), count(cost_no_cache)
    FROM insights_turncache
    WHERE project_id = %(pid)s AND received_at >= %(day)s AND received_at < %(day)s + interval '1 day'
    """,
    """
    INSERT INTO insights_cachebreakday (project_id, day, break_key, reason, break_kind, turns)
    SELECT %(pid)s, %(d)s::date, break_key, reason, max(break_kind), count(*)
    FROM insights_turncache
    WHERE project_id = %(pid)s AND received_at >= %(day)s AND received_at < %(day)s + interval '1 day'
      AND reason NOT IN ('first_turn', 'kept', 'tail')
    GROUP BY break_key, reason
    """,
]


def analyze() -> None:
    """The steady state of a store whose rows arrived over days: vacuumed and analysed (autovacuum's
    work, which SQL generation outruns), the generation's dirty pages written (a checkpoint), and
    no autovacuum worker still busy on the tables when a measurement starts."""
    with connection.cursor() as cur:
        for t in ("ingest_session", "ingest_snapshot", "ingest_blockcontent", "ingest_messagecontent",
                  "ingest_validationoutcome", "ingest_recallitem", "insights_turncache"):
            cur.execute(f"VACUUM (ANALYZE) {t}")
        cur.execute("CHECKPOINT")
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'"
                " AND datname = current_database()"
            )
            if cur.fetchone()[0] == 0:
                break
            time.sleep(1)


PG_SETTINGS = ("server_version", "shared_buffers", "max_wal_size", "checkpoint_timeout", "wal_compression",
               "autovacuum")


def pg_settings() -> dict[str, str]:
    """The server settings the ingest figures depend on (docs/scale.md, "PostgreSQL settings")."""
    with connection.cursor() as cur:
        cur.execute("SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY(%s)",
                    [list(PG_SETTINGS)])
        return dict(cur.fetchall())


def disk_bytes() -> int:
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c
            WHERE c.relkind = 'r' AND (c.relname LIKE 'ingest_snapshot%%'
               OR c.relname LIKE 'ingest_compression%%'
               OR c.relname LIKE 'ingest_recall%%' OR c.relname LIKE 'ingest_validation%%'
               OR c.relname IN ('ingest_session', 'ingest_blockcontent', 'ingest_messagecontent'))
            """
        )
        return int(cur.fetchone()[0])


def count() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM ingest_snapshot")
        return int(cur.fetchone()[0])


def pages(client: Client, pid: int, sid: str) -> dict[str, Any]:
    urls = {
        "timeline": reverse("ingest:timeline", args=[pid, sid]),
        "sessions": reverse("ingest:sessions", args=[pid]),
        "overview": reverse("ingest:overview", args=[pid]) + "?days=30",
    }
    from ingest.dashboard import overview_refresh_all

    overview_refresh_all()  # as the beat task keeps it: the daily rollup up to date
    client.get(urls["overview"])
    return {name: measure(client, url) for name, url in urls.items()}


def overview_after_new_batch(client: Client, project: Any, seed: int) -> tuple[float, float]:
    """Server time of the overview's first view after one batch of 100 new turns arrived (the view
    brings the daily rollup up to date itself only while that is cheap), and the time the beat
    task's refresh then takes (ms)."""
    from ingest.dashboard import overview_refresh_all
    from ingest.services import snapshot_batch_ingest

    snapshot_batch_ingest(project=project, batch=make_batches(1, seed)[0])
    view = measure_first(client, reverse("ingest:overview", args=[project.pk]) + "?days=30")
    t = time.perf_counter()
    overview_refresh_all()
    return view, round((time.perf_counter() - t) * 1000, 1)


ROUNDS = 3


def ingest_statements(project: Any, seed: int, n: int = 5) -> dict[str, Any]:
    """Where one batch of 100 snapshots spends its time, in process: the median batch time, the
    part spent in statements Django sees (COPY goes around it), and the slowest statements."""
    import logging
    import statistics
    from collections import defaultdict

    from django.test.utils import CaptureQueriesContext

    from ingest.services import snapshot_batch_ingest

    per: dict[str, list[float]] = defaultdict(list)
    steps: dict[str, list[float]] = defaultdict(list)
    totals, sql, wal = [], [], []

    class Steps(logging.Handler):
        """The store's own timing of each step (ingest.store logs it at DEBUG)."""

        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            if msg.startswith("ingest.store_steps"):
                for part in msg.split()[3:]:
                    k, v = part.split("=")
                    steps[k].append(float(v))

    store_log = logging.getLogger("ingest.store")
    handler, level = Steps(level=logging.DEBUG), store_log.level
    store_log.addHandler(handler)
    store_log.setLevel(logging.DEBUG)
    for i in range(n):
        batch = make_batches(1, seed * 10 + i)[0]
        lsn = _wal_lsn()
        with CaptureQueriesContext(connection) as q:
            t = time.perf_counter()
            snapshot_batch_ingest(project=project, batch=batch)
            totals.append((time.perf_counter() - t) * 1000)
        wal.append(_wal_since(lsn) / 1024)
        sql.append(sum(float(x["time"]) for x in q.captured_queries) * 1000)
        for x in q.captured_queries:
            per[" ".join(x["sql"].split())[:90]].append(float(x["time"]) * 1000)
    store_log.removeHandler(handler)
    store_log.setLevel(level)
    slow = sorted(((statistics.median(v), k) for k, v in per.items()), reverse=True)[:5]
    return {
        "batch_ms": round(statistics.median(totals), 1),
        "store_steps_ms": {k: round(statistics.median(v), 1) for k, v in steps.items()},
        "sql_ms": round(statistics.median(sql), 1),
        "wal_kb": round(statistics.median(wal)),  # WAL the batch wrote (full-page images included)
        "slowest": [{"p50_ms": round(m, 1), "sql": k} for m, k in slow],
    }


def _wal_lsn() -> str:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_current_wal_insert_lsn()::text")
        return str(cur.fetchone()[0])


def _wal_since(lsn: str) -> float:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s::pg_lsn)", [lsn])
        return float(cur.fetchone()[0])


def http_rate(base: str, key: str, n_batches: int, seed: int, rounds: int = ROUNDS) -> dict[str, Any]:
    """The ingest rate over HTTP: ROUNDS runs of N_BATCHES batches of 100, the median run's rate
    (one run of a few seconds on a shared machine is mostly noise); errors summed."""
    runs = []
    for r in range(rounds):
        bodies = [json.dumps({"snapshots": b}).encode() for b in make_batches(n_batches, seed * 100 + r)]
        runs.append(http_ingest(base, key, bodies, 4, "none"))
    runs.sort(key=lambda x: x["snapshots_per_s"])
    median = dict(runs[len(runs) // 2])
    median["errors"] = sum(x["errors"] for x in runs)
    median["rounds_per_s"] = [round(x["snapshots_per_s"]) for x in runs]
    return median


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--snapshots", type=int, default=5_000_000, help="snapshots in all (at least 100,000)")
    ap.add_argument("--days", type=int, default=10, help="days of arrival the bulk spreads over")
    ap.add_argument("--http-batches", type=int, default=50, help="batches of 100 per ingest-rate measurement")
    ap.add_argument("--keep", action="store_true", help="keep the database afterwards (to look into it)")
    args = ap.parse_args()
    from core.models import Membership, Project
    from core.services import project_create
    from ingest import partitions, retention, signals

    started = time.perf_counter()
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    proc = None
    try:
        signals.snapshots_stored.receivers.clear()
        signals.snapshots_stored.sender_receivers_cache.clear()
        project, key = project_create(name="bench-scale")
        user = get_user_model().objects.create_user(username="bench")
        Membership.objects.create(project=project, user=user, role="admin")
        client = Client()
        client.force_login(user)
        today = datetime.now(tz=UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        days = [today - timedelta(days=args.days - i) for i in range(args.days)]  # oldest first
        partitions.partitions_ensure(start=days[0].date())

        # 1. 100k.
        t = time.perf_counter()
        generate(project.pk, sessions=SMALL // TURNS, day=days[-1], tag="small")
        analyze()
        gen_small_s = time.perf_counter() - t
        # The web server works in this throwaway database too.
        url = str(ingest_rate.settings.DATABASE_URL)
        ingest_rate.settings.DATABASE_URL = url.rsplit("/", 1)[0] + "/" + connection.settings_dict["NAME"]
        proc, base = start_server(2)
        http_rate(base, key, 2, 1, rounds=1)  # warm-up
        rate_small = http_rate(base, key, args.http_batches, 11)
        sid = "bulk-small-7"
        pages_small = pages(client, project.pk, sid)
        fresh_small = overview_after_new_batch(client, project, 21)
        stmts_small = ingest_statements(project, 31)
        print(f"at {count():,}: ingest {rate_small['snapshots_per_s']:.0f}/s; "
              f"pages {json.dumps(pages_small)}",
              flush=True)

        # 2. Up to N, one day at a time.
        rest = max(0, args.snapshots - count())
        per_day = rest // args.days // TURNS
        t = time.perf_counter()
        for i, day in enumerate(days):
            generate(project.pk, sessions=per_day, day=day, tag=f"d{i}")
            print(f"  day {day.date()}: {count():,} snapshots, {time.perf_counter() - t:.0f} s", flush=True)
        analyze()
        gen_bulk_s = time.perf_counter() - t
        n = count()

        # 3. At N.
        rate_big = http_rate(base, key, args.http_batches, 12)
        pages_big = pages(client, project.pk, sid)
        fresh_big = overview_after_new_batch(client, project, 22)
        stmts_big = ingest_statements(project, 32)
        per_snapshot = disk_bytes() / count()
        server = pg_settings()
        print(f"at {n:,}: ingest {rate_big['snapshots_per_s']:.0f}/s; pages {json.dumps(pages_big)}; "
              f"{per_snapshot:.0f} bytes per snapshot", flush=True)

        # 4. Expire the oldest day while ingest runs beside it.
        oldest = days[0]
        Project.objects.update(retention_days=(today - oldest).days - 1)
        during: dict[str, Any] = {}
        expiry: dict[str, Any] = {}

        def expire() -> None:
            t0 = time.perf_counter()
            try:
                # At midnight: the cutoff falls exactly at the end of the oldest day.
                report = retention.expire(now=today)
            finally:
                connection.close()
            expiry.update(seconds=round(time.perf_counter() - t0, 2), dropped=report.partitions_dropped,
                          snapshots=report.snapshots_deleted, sessions=report.sessions_deleted,
                          blocks=report.blocks_deleted, messages=report.messages_deleted)

        thread = threading.Thread(target=expire)
        thread.start()
        during = http_rate(base, key, args.http_batches, 13, rounds=1)
        thread.join()
        print(f"expiry of {oldest.date()}: {expiry}; "
              f"ingest meanwhile {during['snapshots_per_s']:.0f}/s", flush=True)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        if args.keep:
            print(f"kept database {connection.settings_dict['NAME']}", flush=True)
        else:
            connection.creation.destroy_test_db(old_name, verbosity=0)

    def ratio(a: float, b: float) -> float:
        return round(a / b, 2) if b else 0.0

    summary = {
        "bench": "scale",
        "snapshots": n,
        "days": args.days,
        "generate_s": {"small": round(gen_small_s, 1), "bulk": round(gen_bulk_s, 1)},
        "ingest_per_s": {"at_100k": round(rate_small["snapshots_per_s"]),
                         "at_n": round(rate_big["snapshots_per_s"]),
                         "during_expiry": round(during["snapshots_per_s"])},
        "ingest_rounds_per_s": {"at_100k": rate_small["rounds_per_s"], "at_n": rate_big["rounds_per_s"]},
        "ingest_batch_in_process": {"at_100k": stmts_small, "at_n": stmts_big},
        "ingest_end_vs_start": ratio(rate_big["snapshots_per_s"], rate_small["snapshots_per_s"]),
        "ingest_during_expiry_vs_end": ratio(during["snapshots_per_s"], rate_big["snapshots_per_s"]),
        "ingest_errors": rate_small["errors"] + rate_big["errors"] + during["errors"],
        "pages_p50_ms": {k: [pages_small[k]["p50_ms"], pages_big[k]["p50_ms"]] for k in pages_small},
        "pages_ratio": {k: ratio(pages_big[k]["p50_ms"], pages_small[k]["p50_ms"]) for k in pages_small},
        "pages_sql_p50_ms": {k: [pages_small[k]["sql_p50_ms"], pages_big[k]["sql_p50_ms"]]
                             for k in pages_small},
        "queries": {k: [pages_small[k]["queries"], pages_big[k]["queries"]] for k in pages_small},
        "overview_after_new_batch_ms": [fresh_small[0], fresh_big[0]],
        "overview_beat_refresh_ms": [fresh_small[1], fresh_big[1]],
        "slowest_queries": {k: [pages_small[k]["slowest_queries"], pages_big[k]["slowest_queries"]]
                            for k in pages_small},
        "expiry": expiry,
        "bytes_per_snapshot": round(per_snapshot),
        "postgres": server,
        "load_avg": os.getloadavg(),
        "total_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
