"""Replay orchestration overhead, model-call count and worker scaling, end to end.

    .venv/bin/python bench/replay_jobs.py          # about a minute; last line is one JSON object

Uses the PostgreSQL of DATABASE_URL (or the embedded one) but runs on a throwaway database of its
own (created and dropped here) and on a Celery queue of its own on REDIS_URL, so it neither
sees nor disturbs other work. It starts:
- the embedded local model (replay.localmodel: Gemma 3 270M behind llama-cpp-python's server);
- a counting reverse proxy on loopback in front of it, registered as the project's endpoint: it
  counts every request that reaches the model server and times each one from the moment it is
  forwarded to the moment the server's full answer is back (the model's own time: the server
  sends no `timings` of its own, and this leaves out our HTTP client and the proxy itself);
- real `celery worker` processes on the bench queue.

It ingests one realistic turn (D blocks, one of them a memory block with a planted fact) through
the HTTP API, then starts leave-one-out jobs through `POST /api/v1/replays` (K baseline samples):
1. overhead, one worker process (units run one after another): each unit's share of the wall time
   from dispatch (the API call) to the job's last stored result is the time from the previous
   unit's stored result (or the dispatch) to its own; overhead = that share minus the model's
   own time for it. Reported as % of the model time, p50/p95 over units, and for the whole job;
2. model calls: the requests the proxy saw for the job == its runs (K baseline samples and K of
   each of the D variants); then every run of the job is
   delivered to the worker a second time and the proxy must see no new request;
3. throughput: variants/s of the same job with 1 worker process and with 2 (two `celery worker`
   instances with one process each, as two hosts would run them).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

K = 3  # baseline samples (the noise floor), the default
# The answer is one short sentence; a bound on its length keeps the run within five minutes.
PARAMS = {"max_tokens": 32}
TARGET_OVERHEAD_PCT = 5.0
QUEUE = f"bench-replay-{os.getpid()}"
NODE = os.uname().nodename

SYSTEM = (
    "You are Wayfarer, a travel assistant for a corporate travel desk. Answer the traveller's "
    "question in one short sentence. Use the facts in memory and in the retrieved documents; never "
    "invent flight numbers, prices or dates. If a tool result contradicts memory, trust the tool."
)
TOOLS = json.dumps(
    {
        "tools": [
            {
                "name": "search_flights",
                "parameters": {"from": "IATA code", "to": "IATA code", "date": "YYYY-MM-DD"},
            },
            {"name": "hold_seat", "parameters": {"flight": "flight number", "seat": "seat code"}},
            {"name": "policy_lookup", "parameters": {"topic": "string"}},
        ]
    }
)
CONSTRAINTS = (
    "Policy: economy class for flights under six hours; book at least 14 days ahead when possible; "
    "the per-night hotel cap is 180 EUR; receipts must be uploaded within 30 days."
)
MEMORY = (
    "Memory: the traveller's name is Lena Ortiz; her destination city is Guangzhou; she prefers a "
    "window seat; her loyalty programme is Star Alliance Gold."
)
RETRIEVAL = (
    "Document 'Canton Fair visitor guide' (excerpt): the autumn session runs in three phases at the "
    "Pazhou complex. Visitors need a badge, which is issued on site with a passport and an invitation "
    "letter. The metro line 8 stops at Xingang East and Pazhou stations next to the halls. Hotels "
    "near the venue fill up early; book at least a month ahead during the fair."
)
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "Hi, I need to plan my trip for the trade fair next month."},
    {"role": "assistant", "content": "Happy to help. Which dates are you thinking of?"},
    {"role": "user", "content": "Leaving on the 14th and back on the 19th, from Frankfurt."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {
                    "name": "search_flights",
                    "arguments": '{"from":"FRA","to":"CAN","date":"2026-10-14"}',
                },
            }
        ],
    },
]
TOOL_RESULT = json.dumps(
    {
        "flights": [
            {
                "flight": "LH 782",
                "depart": "2026-10-14T13:45",
                "arrive": "2026-10-15T07:20",
                "price_eur": 812,
            },
            {
                "flight": "CZ 332",
                "depart": "2026-10-14T21:05",
                "arrive": "2026-10-15T15:10",
                "price_eur": 655,
            },
        ]
    }
)
QUESTION = "Remind me: which city am I flying to?"


def turn_wire() -> dict[str, Any]:
    def blk(key: str, kind: str, messages: list[dict[str, Any]], **flags: Any) -> dict[str, Any]:
        return {"key": key, "kind": kind, "messages": messages, **flags}

    blocks = [
        blk("system", "system", [{"role": "system", "content": SYSTEM}], pinned=True),
        blk("tools", "tools", [{"role": "system", "content": TOOLS}]),
        blk("constraints", "constraints", [{"role": "system", "content": CONSTRAINTS}], pinned=True),
        blk("memory", "memory", [{"role": "system", "content": MEMORY}]),
        blk("retrieval", "retrieval", [{"role": "system", "content": RETRIEVAL}]),
        blk("history", "history", HISTORY),
        blk(
            "tool_results",
            "tool_results",
            [{"role": "tool", "tool_call_id": "call_1", "content": TOOL_RESULT}],
        ),
        blk("user", "user", [{"role": "user", "content": QUESTION}]),
    ]
    return {
        "snapshot_id": str(uuid.uuid4()),
        "session_id": "bench-trip",
        "turn": 5,
        "agent": "wayfarer",
        "ts": datetime.now(UTC).isoformat(),
        "model": {"name": "gpt-4o-mini", "context_window": 8000},
        "params": {"temperature": 0, "max_tokens": 256},
        "blocks": blocks,
        "output": {"text": "You are flying to Guangzhou.", "tool_calls": [], "finish_reason": "stop"},
    }


def warmup_wire() -> dict[str, Any]:
    wire = turn_wire()
    wire.update(snapshot_id=str(uuid.uuid4()), session_id="bench-warmup", turn=0)
    wire["blocks"] = [
        {"key": "system", "kind": "system", "messages": [{"role": "system", "content": "Answer briefly."}]},
        {"key": "user", "kind": "user", "messages": [{"role": "user", "content": "Say hello."}]},
    ]
    return wire


def ingest(client: Client, key: str, wire: dict[str, Any]) -> None:
    """POST /api/v1/snapshots with one snapshot, which must be stored."""
    resp = client.post(
        "/api/v1/snapshots",
        data=json.dumps({"snapshots": [wire]}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    if resp.status_code not in (200, 207) or resp.json()["results"][0]["status"] not in (
        "accepted",
        "created",
    ):
        raise RuntimeError(f"snapshot not ingested: {resp.content[:300]!r}")


# --- the counting proxy -------------------------------------------------------------
class CountingProxy:
    """A reverse proxy on loopback in front of the model server: forwards every request and
    records (path, wall start, wall end, upstream ms) for each POST."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        local = threading.local()
        proxy = self

        def client() -> httpx.Client:
            if not hasattr(local, "client"):
                local.client = httpx.Client(timeout=120.0)
            return local.client

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes; with Nagle's algorithm on, the body would
            # wait for the client's delayed ACK (40 ms) on a kept-alive connection. The model
            # server (uvicorn) sets TCP_NODELAY too.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {"Content-Type": self.headers.get("Content-Type") or "application/json"}
                started = time.time()
                t0 = time.perf_counter()
                resp = client().request(method, proxy.upstream + self.path, content=body, headers=headers)
                upstream_ms = (time.perf_counter() - t0) * 1000.0
                ended = time.time()
                if method == "POST":
                    with proxy.lock:
                        proxy.calls.append(
                            {
                                "path": self.path,
                                "start": started,
                                "end": ended,
                                "ms": upstream_ms,
                                "status": resp.status_code,
                            }
                        )
                payload = resp.content
                self.send_response(resp.status_code)
                self.send_header("Content-Type", resp.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:  # noqa: N802
                self._forward("POST")

            def do_GET(self) -> None:  # noqa: N802
                self._forward("GET")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def completions_since(self, t: float) -> list[dict[str, Any]]:
        with self.lock:
            return [c for c in self.calls if c["start"] >= t and c["path"].endswith("/completions")]


# --- workers ----------------------------------------------------------------------------
def worker_env() -> dict[str, str]:
    from django.conf import settings

    db = connection.settings_dict
    host = db["HOST"]
    auth = f"{db['USER']}:{db['PASSWORD']}" if db["PASSWORD"] else db["USER"]
    if host.startswith("/"):
        url = f"postgresql://{auth}@/{db['NAME']}?host={host}"
    else:
        port = f":{db['PORT']}" if db["PORT"] else ""
        url = f"postgresql://{auth}@{host}{port}/{db['NAME']}"
    return dict(os.environ, DATABASE_URL=url, REDIS_URL=settings.REDIS_URL)


def start_worker(name: str, log: Path) -> subprocess.Popen[bytes]:
    from config.celery import app

    fh = log.open("ab")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "-Q",
            QUEUE,
            "-c",
            "1",
            "--pool",
            "prefork",
            "-l",
            "WARNING",
            "-n",
            f"{name}@{NODE}",
        ],
        env=worker_env(),
        cwd=str(ROOT),
        stdout=fh,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"celery worker exited early; see {log}")
        try:
            if app.control.inspect(timeout=1, destination=[f"{name}@{NODE}"]).ping():
                return proc
        except Exception:  # noqa: BLE001, S110 - the broker may not answer yet
            pass
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"celery worker did not come up; see {log}")


def stop_worker(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


# --- jobs ---------------------------------------------------------------------------------
def start_job(client: Client, key: str, body: dict[str, Any]) -> tuple[int, float]:
    """POST /api/v1/replays; (job id, wall time of dispatch: just before the call)."""
    dispatched = time.time()
    resp = client.post(
        "/api/v1/replays",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    if resp.status_code != 201:
        raise RuntimeError(f"job not created: {resp.status_code} {resp.content[:300]!r}")
    return int(resp.json()["id"]), dispatched


def wait_job(job_id: int, timeout: float = 240.0) -> Any:
    from replay.models import ReplayJob

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = ReplayJob.objects.get(pk=job_id)
        if job.finished:
            return job
        time.sleep(0.05)
    raise RuntimeError(f"replay job {job_id} did not finish within {timeout:g}s")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def overhead(job: Any, dispatched: float, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Per unit of a job run by one worker process, one unit at a time: its share of the wall
    time and the model's own time for it (the proxy's record that falls inside its claim)."""
    runs = sorted(job.runs.select_related("variant"), key=lambda r: r.finished_at)
    calls = sorted(calls, key=lambda c: c["start"])
    if len(runs) != len(calls):
        raise RuntimeError(f"{len(runs)} runs but {len(calls)} model calls")
    units = []
    prev = dispatched
    for run, call in zip(runs, calls, strict=True):
        claimed, finished = run.claimed_at.timestamp(), run.finished_at.timestamp()
        if not claimed - 0.005 <= call["start"] <= call["end"] <= finished + 0.005:
            raise RuntimeError(f"model call outside run {run.pk}'s claim: units did not run one at a time")
        share_ms = (finished - prev) * 1000.0
        units.append(
            {
                "variant": run.variant.label,
                "unit": f"{run.variant.label} #{run.sample}",
                "prompt_tokens": run.prompt_tokens,
                "share_ms": share_ms,
                "model_ms": call["ms"],
                "overhead_ms": share_ms - call["ms"],
                "overhead_pct": 100.0 * (share_ms - call["ms"]) / call["ms"],
                # where the overhead goes: before the task starts (dispatch, queue, pick-up), inside it
                # around the call (claim, render, store, job recount), and the HTTP hop to the server
                "before_task_ms": share_ms - run.work_ms,
                "in_task_ms": run.work_ms - run.latency_ms,
                "http_ms": run.latency_ms - call["ms"],
            }
        )
        prev = finished
    wall_ms = (runs[-1].finished_at.timestamp() - dispatched) * 1000.0
    model_ms = sum(u["model_ms"] for u in units)
    o = [u["overhead_pct"] for u in units]
    first = units[0]
    for u in units:
        print(
            f"  {u['unit']:34s} prompt {u['prompt_tokens']:4d} tok  model {u['model_ms']:7.0f} ms  "
            f"overhead {u['overhead_ms']:5.0f} ms ({u['overhead_pct']:4.1f}%)  "
            f"before task {u['before_task_ms']:4.0f}  in task {u['in_task_ms']:4.0f}  "
            f"http {u['http_ms']:3.0f}",
            flush=True,
        )
    per_variant: dict[str, list[float]] = {}
    for u in units:
        acc = per_variant.setdefault(u["variant"], [0.0, 0.0])
        acc[0] += u["overhead_ms"]
        acc[1] += u["model_ms"]
    variant_pct = {k: 100.0 * o / m for k, (o, m) in per_variant.items()}
    return {
        "units": len(units),
        "variant_overhead_pct": {k: round(v, 2) for k, v in variant_pct.items()},
        "variants_within_target": sum(v <= TARGET_OVERHEAD_PCT for v in variant_pct.values()),
        "variants": len(variant_pct),
        "job_wall_s": round(wall_ms / 1000.0, 2),
        "model_s": round(model_ms / 1000.0, 2),
        "job_overhead_pct": round(100.0 * (wall_ms - model_ms) / model_ms, 2),
        "overhead_pct_p50": round(statistics.median(o), 2),
        "overhead_pct_p95": round(pct(o, 0.95), 2),
        "overhead_ms_p50": round(statistics.median(u["overhead_ms"] for u in units), 1),
        "overhead_ms_p95": round(pct([u["overhead_ms"] for u in units], 0.95), 1),
        "model_ms_p50": round(statistics.median(u["model_ms"] for u in units), 1),
        "model_ms_p95": round(pct([u["model_ms"] for u in units], 0.95), 1),
        "first_unit_overhead_ms": round(first["overhead_ms"], 1),
        "completion_tokens_p50": statistics.median(r.completion_tokens or 0 for r in runs),
        "breakdown_ms_p50": {
            k: round(statistics.median(u[k] for u in units), 1)
            for k in ("before_task_ms", "in_task_ms", "http_ms")
        },
    }


def busy_s(calls: list[dict[str, Any]]) -> float:
    """The length of the union of the calls' intervals at the server."""
    total, end = 0.0, 0.0
    for start, stop in sorted((c["start"], c["end"]) for c in calls):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def redelivery(run_ids: list[int], proxy: CountingProxy) -> int:
    """Deliver every run once more to the workers; the model requests that caused (must be 0)."""
    from config.celery import app
    from replay.tasks import run_execute

    since = time.time()
    for rid in run_ids:
        run_execute.delay(rid)
    # The queue drains, then the last delivery finishes (a finished run returns at once).
    with app.connection_for_write() as conn:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and conn.default_channel.client.llen(QUEUE):
            time.sleep(0.1)
    time.sleep(1.5)
    return len(proxy.completions_since(since))


def main() -> None:
    from config.celery import app
    from core.models import Project
    from core.services import project_create
    from ingest import signals
    from replay import localmodel
    from replay.models import ReplayRun
    from replay.services import model_endpoints

    started = time.monotonic()
    # Route replay tasks to the bench's own queue (the API call enqueues from this process).
    app.conf.task_routes = {"replay.*": {"queue": QUEUE}}
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = f"ctxobs_bench_replay_{os.getpid()}"
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    tmp = Path(tempfile.mkdtemp(prefix="ctxobs-bench-replay-"))
    server = None
    proxy = None
    workers: list[subprocess.Popen[bytes]] = []
    try:
        # Nobody consumes ingest follow-up tasks for this throwaway database: do not enqueue any.
        signals.snapshots_stored.receivers.clear()
        signals.snapshots_stored.sender_receivers_cache.clear()

        server = localmodel.start(log_path=tmp / "localmodel.log")
        localmodel.wait_ready(server.base_url, timeout=120, process=server.process)
        model_ready_s = time.monotonic() - started
        proxy = CountingProxy(server.base_url.removesuffix("/v1"))

        project, key = project_create(name="bench-replay", scopes=("ingest", "replay"))
        Project.objects.filter(pk=project.pk).update(allow_private_endpoints=True)
        project.refresh_from_db()
        endpoint = model_endpoints.local_endpoint_register(project=project, base_url=proxy.base_url)

        client = Client()
        wire = turn_wire()
        ingest(client, key, wire)
        d = len(wire["blocks"])
        loo = {"kind": "loo", "snapshot_id": wire["snapshot_id"], "samples": K, "params": PARAMS}

        workers.append(start_worker(f"bench-replay-1-{os.getpid()}", tmp / "worker-1.log"))
        # Warm-up: the worker's first task opens its database connection and imports what it
        # needs, and the model server allocates its buffers; a long-lived worker pays this once.
        # It replays another turn, so the measured job's first prompt is not already evaluated.
        warm = warmup_wire()
        ingest(client, key, warm)
        wid, _ = start_job(client, key, {"kind": "plain", "snapshot_id": warm["snapshot_id"], "samples": 1})
        wait_job(wid)

        # 1 + 2: one worker process, units one at a time.
        job_id, dispatched = start_job(client, key, loo)
        job = wait_job(job_id)
        # Its runs: the K baseline samples and each of the D variants as many times.
        if job.status != "done" or job.n_done != job.n_runs:
            raise RuntimeError(f"leave-one-out job ended {job.status} with {job.n_done} of {job.n_runs} done")
        calls = proxy.completions_since(dispatched)
        one = overhead(job, dispatched, calls)
        bookkept = sum(ReplayRun.objects.filter(job=job).values_list("model_calls", flat=True))
        run_ids = list(job.runs.values_list("id", flat=True))
        extra_calls = redelivery(run_ids, proxy)
        from replay.selectors import job_results

        turn = job_results(job=job)["turns"][0]
        memory_changed = next(e["changed"] for e in turn["variants"] if e["variant"].target_key == "memory")
        thr1 = len(run_ids) / one["job_wall_s"]

        # 3: the same job with two worker processes.
        workers.append(start_worker(f"bench-replay-2-{os.getpid()}", tmp / "worker-2.log"))
        # llama.cpp reuses the longest prompt prefix of its previous request; replaying the
        # unrelated turn first gives the second job the same starting point as the first.
        wid, _ = start_job(client, key, {"kind": "plain", "snapshot_id": warm["snapshot_id"], "samples": 1})
        wait_job(wid)
        job2_id, dispatched2 = start_job(client, key, loo)
        job2 = wait_job(job2_id)
        if job2.status != "done":
            raise RuntimeError(f"second leave-one-out job ended {job2.status}")
        wall2 = max(r.finished_at.timestamp() for r in job2.runs.all()) - dispatched2
        calls2 = proxy.completions_since(dispatched2)
        # The server answers one request at a time (llama-cpp-python holds a lock per request),
        # so with two workers a request may wait there: the time at least one request was at the
        # server, against the wall time, says how much of the job the model was the bottleneck.
        busy2 = busy_s(calls2)
        thr2 = job2.n_done / wall2
    finally:
        for w in workers:
            stop_worker(w)
        if proxy is not None:
            proxy.server.shutdown()
        if server is not None:
            localmodel.stop(server)
        connection.creation.destroy_test_db(old_name, verbosity=0)

    print(f"1 worker, leave-one-out over {d} blocks + {K} baseline samples: {json.dumps(one)}", flush=True)
    print(f"2 workers: wall {wall2:.2f}s, model server busy {busy2:.2f}s", flush=True)
    print(
        json.dumps(
            {
                "bench": "replay",
                "model": endpoint.model,
                "blocks": d,
                "baseline_samples": K,
                "prompt_tokens_baseline": turn["baseline_runs"][0].prompt_tokens,
                "model_calls_expected": job.n_runs,
                "model_calls_at_server": len(calls),
                "model_calls_bookkept": bookkept,
                "model_calls_after_redelivery": extra_calls,
                "memory_removal_changed_answer": memory_changed,
                "model_ms_p50": one["model_ms_p50"],
                "model_ms_p95": one["model_ms_p95"],
                "overhead_ms_p50": one["overhead_ms_p50"],
                "overhead_ms_p95": one["overhead_ms_p95"],
                "overhead_pct_p50": one["overhead_pct_p50"],
                "overhead_pct_p95": one["overhead_pct_p95"],
                "job_overhead_pct": one["job_overhead_pct"],
                "variant_overhead_pct_max": max(one["variant_overhead_pct"].values()),
                "variants_within_5pct": f"{one['variants_within_target']}/{one['variants']}",
                "overhead_breakdown_ms_p50": one["breakdown_ms_p50"],
                "first_unit_overhead_ms": one["first_unit_overhead_ms"],
                "completion_tokens_p50": one["completion_tokens_p50"],
                "throughput_1_worker_per_s": round(thr1, 3),
                "throughput_2_workers_per_s": round(thr2, 3),
                "speedup_2_vs_1": round(thr2 / thr1, 2),
                "job_wall_s_1_worker": one["job_wall_s"],
                "job_wall_s_2_workers": round(wall2, 2),
                "model_server_busy_s_2_workers": round(busy2, 2),
                "model_ready_s": round(model_ready_s, 1),
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
