"""Alert latency with a real Celery worker, and evaluation cost as a session grows.

    python bench/alerts_eval.py [--sessions 40] [--turns 2000]

Uses DATABASE_URL / REDIS_URL, or the embedded PostgreSQL and Redis. Starts a Celery worker on
the alerts queue and a local webhook receiver (http.server, signature verified), then:

1. latency: for each of N sessions, ingests a calm turn and then a turn in the force tier, and
   measures from the start of the committing ingest call to the first alert row of that session
   (its created_at) and to the first signed webhook request the receiver accepts;
2. flat cost: grows one session to --turns turns (watermark cycling across the tiers every 40
   turns, a minute apart, so each cycle raises new alerts and the session's alerts pile up) and
   at several lengths times `alerts_evaluate` on one freshly appended turn over three cycles,
   interleaved with the first cycles of a fresh session, with query counts. "Flat": at the
   longest length the median is at most 1.25x the fresh session's, with no more queries.

The last line printed is one JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from alerts.channels import SIGNATURE_HEADER, TIMESTAMP_HEADER, signature_verify  # noqa: E402
from alerts.models import Alert  # noqa: E402
from alerts.services import channels as alert_channels  # noqa: E402
from alerts.services import evaluation as alert_evaluation  # noqa: E402
from core.models import Project  # noqa: E402
from core.services import project_create  # noqa: E402
from ingest.models import Snapshot  # noqa: E402
from ingest.services import snapshot_batch_ingest  # noqa: E402
from ingest.signals import snapshots_stored  # noqa: E402

WINDOW = 10_000
USABLE = WINDOW - int(WINDOW * 0.15)
BASE_TS = datetime.now(UTC) - timedelta(hours=6)


def snap(session_id: str, turn: int, fill: float, **extra: Any) -> dict[str, Any]:
    total = int(round(fill * USABLE))
    return {
        "snapshot_id": str(uuid.uuid4()), "session_id": session_id, "turn": turn, "agent": "bench-bot",
        "ts": (BASE_TS + timedelta(seconds=5 * turn)).isoformat(),
        "model": {"name": "gpt-4o", "context_window": WINDOW},
        "blocks": [
            {"key": "system", "kind": "system", "tokens": 300, "pinned": True,
             "messages": [{"role": "system", "content": "You are a benchmark assistant."}]},
            {"key": "tool_results", "kind": "tool_results", "tokens": 400,
             "messages": [{"role": "tool", "tool_call_id": "c1", "content": f"result {turn % 7}"}]},
            {"key": "history", "kind": "history", "tokens": max(0, total - 700),
             "messages": [{"role": "user", "content": f"turn {turn}"}]},
        ],
        **extra,
    }


class Receiver:
    def __init__(self) -> None:
        self.secret = ""
        self.hits: dict[str, float] = {}
        self.bad = 0
        rx = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                at = time.time()
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                ok = signature_verify(rx.secret, self.headers.get(TIMESTAMP_HEADER, ""), body,
                                      self.headers.get(SIGNATURE_HEADER, ""))
                if ok:
                    sid = json.loads(body).get("alert", {}).get("session_id", "")
                    rx.hits.setdefault(sid, at)
                else:
                    rx.bad += 1
                self.send_response(200 if ok else 401)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"


def start_worker() -> subprocess.Popen[bytes]:
    from config.celery import app

    env = dict(os.environ, DATABASE_URL=settings.DATABASE_URL, REDIS_URL=settings.REDIS_URL)
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", "alerts", "-c", "4",
         "--pool", "prefork", "-l", "WARNING", "-n", f"bench-alerts-{os.getpid()}@%h"],
        env=env, cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    name = f"bench-alerts-{os.getpid()}@{os.uname().nodename}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("celery worker exited early")
        try:
            if app.control.inspect(timeout=1, destination=[name]).ping():
                return proc
        except Exception:  # noqa: BLE001, S110 - the broker may not answer yet
            pass
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError("celery worker did not come up")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def latency(n_sessions: int, project: Project) -> dict[str, Any]:
    project.allow_private_endpoints = True
    project.save()
    rx = Receiver()
    _, rx.secret = alert_channels.channel_create(project=project, kind="webhook",
                                                 data={"name": "bench", "url": rx.url, "timeout_seconds": 5})
    to_alert: list[float] = []
    to_hook: list[float] = []
    try:
        for i in range(n_sessions):
            sid = f"lat-{i}"
            snapshot_batch_ingest(project=project, batch=[snap(sid, 0, 0.3)])
            time.sleep(0.05)
            t0 = time.time()
            snapshot_batch_ingest(project=project, batch=[snap(sid, 1, 0.9)])
            deadline = time.monotonic() + 30
            created = None
            while time.monotonic() < deadline:
                row = (Alert.objects.filter(project=project, session_id=sid).order_by("created_at")
                       .values_list("created_at", flat=True).first())
                if row is not None:
                    created = row
                    break
                time.sleep(0.005)
            if created is None:
                raise RuntimeError(f"no alert for {sid} within 30 s")
            to_alert.append(created.timestamp() - t0)
            while time.monotonic() < deadline and sid not in rx.hits:
                time.sleep(0.005)
            if sid not in rx.hits:
                raise RuntimeError(f"no webhook for {sid} within 30 s")
            to_hook.append(rx.hits[sid] - t0)
    finally:
        rx.server.shutdown()
    return {
        "sessions": n_sessions,
        "alert_p50_s": round(statistics.median(to_alert), 3), "alert_p95_s": round(pct(to_alert, 0.95), 3),
        "webhook_p50_s": round(statistics.median(to_hook), 3), "webhook_p95_s": round(pct(to_hook, 0.95), 3),
        "bad_signatures": rx.bad,
    }


CYCLE = 40  # turns of one fill cycle (calm -> break tier -> compression)
PROBE_CYCLES = 3  # cycles timed per session length
# Turns of the long session are a minute apart, so the default cooldowns (20 turns, 30 min) end
# within each cycle and every cycle raises new alerts: the session's alert count grows with it.
FLAT_STEP = timedelta(seconds=60)
FLAT_TS = datetime.now(UTC) - timedelta(days=3)
FLAT_RATIO_MAX = 1.25


def fill_at(turn: int) -> float:
    # Climbs from 30% into the break tier over a cycle, then a compression drops it back.
    return 0.3 + 0.68 * (turn % CYCLE) / (CYCLE - 1)


def long_snap(turn: int, session_id: str = "long-session") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if turn % CYCLE == 0 and turn:
        out["compression"] = [
            {"strategy": "rolling_summary", "block": "history", "tokens_before": 6000,
             "tokens_after": 1500, "watermark": 0.98}
        ]
    out["validation"] = [
        {"layer": "structure", "check": "json_schema", "passed": turn % 3 != 0,
         "code": "" if turn % 3 else "E_JSON"}
    ]
    out["recall"] = [
        {"memory_id": "m1", "channel": "vector", "score": 0.5, "rank": 1, "injected": turn % 2 == 0}
    ]
    prompt_tokens = int(fill_at(turn) * USABLE) + (0 if turn % 5 else 900)
    out["output"] = {"text": "ok", "usage": {"prompt_tokens": prompt_tokens}}
    s = snap(session_id, turn, fill_at(turn), **out)
    s["ts"] = (FLAT_TS + FLAT_STEP * turn).isoformat()
    return s


def timed_evaluate(project: Project, session_id: str, turn: int) -> dict[str, Any]:
    """Ingest one turn of SESSION_ID and time `alerts_evaluate` on it, with its query count."""
    snapshot_batch_ingest(project=project, batch=[long_snap(turn, session_id)])
    ref = Snapshot.objects.get(project=project, session_id=session_id, turn=turn).id
    with CaptureQueriesContext(connection) as ctx:
        started = time.perf_counter()
        res = alert_evaluation.alerts_evaluate(project_id=project.pk, snapshot_refs=[ref])
        ms = (time.perf_counter() - started) * 1000
    return {"ms": ms, "queries": len(ctx.captured_queries), "fired": bool(res.created or res.updated)}


def flat_cost(max_turns: int) -> dict[str, Any]:
    """Time and queries of `alerts_evaluate` on one freshly ingested turn as a session grows.

    At each checkpoint the last PROBE_CYCLES full cycles of turns before it are timed, interleaved
    turn by turn with the first cycles of a fresh session (same phase, same rules, same project),
    so both see the same mix of quiet and firing turns and the same load from anything else on
    the machine; the figure per length is the ratio of the two medians."""
    project, _ = project_create(name=f"bench-alerts-flat-{uuid.uuid4().hex[:8]}")
    timed = PROBE_CYCLES * CYCLE
    lengths = (4 * CYCLE, 13 * CYCLE, 25 * CYCLE, 50 * CYCLE, max_turns)
    checkpoints = sorted({c for c in lengths if timed < c <= max_turns})
    out: dict[str, dict[str, Any]] = {}
    # Evaluation is driven by hand here: the worker must not race the measurements.
    snapshots_stored.disconnect(dispatch_uid="alerts.evaluate")
    try:
        turn = 0
        for cp in checkpoints:
            # Grow to the timed cycles before cp without timing (evaluated in bulk so alerts exist).
            while turn < cp - timed:
                n = min(250, cp - timed - turn)
                snapshot_batch_ingest(project=project, batch=[long_snap(t) for t in range(turn, turn + n)])
                refs = list(
                    Snapshot.objects.filter(project=project, turn__gte=turn, turn__lt=turn + n)
                    .values_list("id", flat=True)
                )
                for chunk in range(0, len(refs), 50):
                    part = refs[chunk:chunk + 50]
                    alert_evaluation.alerts_evaluate(project_id=project.pk, snapshot_refs=part)
                turn += n
            long: list[dict[str, Any]] = []
            short: list[dict[str, Any]] = []
            for i in range(timed):
                # Alternating which goes first (ABBA) so neither gains from the other's warm-up.
                if i % 2 == 0:
                    short.append(timed_evaluate(project, f"short-{cp}", i))
                    long.append(timed_evaluate(project, "long-session", turn))
                else:
                    long.append(timed_evaluate(project, "long-session", turn))
                    short.append(timed_evaluate(project, f"short-{cp}", i))
                turn += 1
            row: dict[str, Any] = {}
            for name, runs in (("short", short), ("long", long)):
                ms = [r["ms"] for r in runs]
                firing = [r["ms"] for r in runs if r["fired"]]
                row[name] = {
                    "ms_median": round(statistics.median(ms), 2), "ms_p95": round(pct(ms, 0.95), 2),
                    "ms_median_firing": round(statistics.median(firing), 2) if firing else None,
                    "firing": len(firing), "queries_max": max(r["queries"] for r in runs),
                }
            row["ratio"] = round(row["long"]["ms_median"] / max(row["short"]["ms_median"], 1e-6), 2)
            row["alerts_in_long_session"] = Alert.objects.filter(
                project=project, session_id="long-session").count()
            out[str(cp)] = row
    finally:
        from alerts import receivers

        snapshots_stored.connect(receivers.on_snapshots_stored, dispatch_uid="alerts.evaluate")
        project.delete()
    last = out[str(checkpoints[-1])]
    return {
        "by_turns": out, "last": checkpoints[-1], "ratio": last["ratio"],
        "flat": last["ratio"] <= FLAT_RATIO_MAX
        and last["long"]["queries_max"] <= last["short"]["queries_max"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=40)
    ap.add_argument("--turns", type=int, default=2000)
    args = ap.parse_args()
    started = time.monotonic()
    worker = start_worker()
    project, _ = project_create(name=f"bench-alerts-{uuid.uuid4().hex[:8]}")
    try:
        lat = latency(args.sessions, project)
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
        project.delete()
    print(f"latency: {json.dumps(lat)}", flush=True)
    flat = flat_cost(args.turns)
    print(f"evaluation cost by session length: {json.dumps(flat['by_turns'])}", flush=True)
    by_turns = flat["by_turns"]
    print(json.dumps({
        "commit_to_alert_p95_s": lat["alert_p95_s"], "commit_to_alert_p50_s": lat["alert_p50_s"],
        "commit_to_webhook_p95_s": lat["webhook_p95_s"], "commit_to_webhook_p50_s": lat["webhook_p50_s"],
        "latency_sessions": lat["sessions"], "bad_signatures": lat["bad_signatures"],
        "eval_ms_median_by_turns": {k: v["long"]["ms_median"] for k, v in by_turns.items()},
        "eval_ms_median_fresh_session": {k: v["short"]["ms_median"] for k, v in by_turns.items()},
        "eval_ratio_by_turns": {k: v["ratio"] for k, v in by_turns.items()},
        "eval_ms_median_firing_by_turns": {k: v["long"]["ms_median_firing"] for k, v in by_turns.items()},
        "eval_queries_max_by_turns": {k: v["long"]["queries_max"] for k, v in by_turns.items()},
        "eval_queries_max_fresh_session": max(v["short"]["queries_max"] for v in by_turns.values()),
        "alerts_in_session_by_turns": {k: v["alerts_in_long_session"] for k, v in by_turns.items()},
        f"eval_ms_ratio_{flat['last']}_vs_fresh_session": flat["ratio"],
        "eval_flat_max_ratio": FLAT_RATIO_MAX, "eval_flat": flat["flat"],
        "seconds": round(time.monotonic() - started, 1),
    }))


if __name__ == "__main__":
    main()
