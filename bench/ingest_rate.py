"""Ingest throughput over HTTP against a raw COPY of the same rows, and stored bytes per snapshot.

    python bench/ingest_rate.py [--batches 200] [--concurrency 4] [--web-workers 2]
                                [--encoding zstd|gzip|none] [--block-hashes] [--step-batches 50]
                                [--server uvicorn|gunicorn] [--segments 4] [--own-sessions]

Uses DATABASE_URL / REDIS_URL, or the embedded PostgreSQL and Redis. Starts the web server
(gunicorn's sync workers serving config.wsgi, as BENCHMARKS.md's series has measured it;
--server uvicorn for config.asgi under uvicorn, as scripts/up runs it) on a free port, sends
realistic snapshots (12 blocks, about 6k tokens, most blocks repeating from the previous turn of
their 50-turn session) in batches of 100, gzip-compressed as the SDK sends them (--encoding zstd:
one zstd frame at level 3, which the API takes too; none: plain JSON) and built before
the clock starts, and COPYs the same rows straight into the same tables. The two alternate: the
HTTP phase runs in --segments parts, each between two parts of the COPY, and the ratio is of
their totals, so that the machine's drifting speed weighs on both alike.
With --block-hashes, as the SDK does with `send_block_hashes=True`, a block whose content an earlier
batch brought and the server acknowledged goes as its content address (`hash`) instead of its
messages; by default every block goes whole, as the SDK sends it by default.
By default every batch carries one turn of the same 100 sessions and any client thread sends the
next batch, so two batches of the same sessions are always in flight together and wait for each
other's session rows (the store's worst case). With --own-sessions each thread sends the batches of
sessions of its own (as many sets of 100 as the default run has in all), in order and one at a
time, as an SDK process sends its agent's turns.
Also reports the CPU time per snapshot of the web server, of PostgreSQL and of the load
generator, and how the machine's time went during the HTTP phase and the raw COPY
(`machine_time_shares`, from /proc/stat: on a virtual machine, `steal` is the time the hypervisor
gave to others while this one had work to run, which slows both phases by a share that drifts
from minute to minute). Then stores --step-batches more batches in process, one at a time, and
reports what each step of the store costs a batch on average (`ingest.store_steps`, wall
milliseconds), the CPU its PostgreSQL backend spent, and how long the batch holds its sessions'
row locks (concurrent batches of the same sessions wait for each other through them). The last
line printed is one JSON object with the headline figures. BENCH_SERVER_LOG_LEVEL=DEBUG lets the
web server log the same steps for each batch it stores (`ingest.store_steps`).
"""

from __future__ import annotations

import argparse
import gc
import gzip
import http.client
import json
import logging
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
import zstandard  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

from core.management.commands.ctxobs_up import web_argv  # noqa: E402
from core.models import Project  # noqa: E402
from core.services import project_create  # noqa: E402
from ctxobs.hashing import block_hashes  # noqa: E402
from ingest.services import snapshot_batch_ingest  # noqa: E402

# A few thousand distinct pseudo-words, so that text compresses about as well as real prose.
_SYL = ["ka", "ro", "mi", "te", "su", "lan", "dor", "vi", "ne", "sha", "quo", "bri", "el", "tum", "xa", "po"]
WORDS = [
    a + b + c
    for a in _SYL
    for b in _SYL
    for c in ("", "n", "s", "r", "ta", "le", "mo", "ik", "us", "ed", "or", "ia", "um", "en", "al", "ix")
]
TURNS_PER_SESSION = 50
BATCH = 100


def text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


class SessionGen:
    """One agent session: stable blocks repeat, history/tool results/user input change per turn."""

    def __init__(self, rng: random.Random, sid: str) -> None:
        self.rng, self.sid, self.turn = rng, sid, 0
        # ~0.75 words per token: block sizes add up to about 6k tokens.
        self.stable = {
            "system": text(rng, 420),
            "tools": text(rng, 850),
            "constraints": text(rng, 110),
            "memory": text(rng, 300),
            "retrieval_1": text(rng, 640),
            "retrieval_2": text(rng, 640),
            "retrieval_3": text(rng, 640),
            "other": text(rng, 60),
        }
        self.summary = text(rng, 480)
        self.history: list[str] = []
        self.t0 = datetime(2026, 12, 1, tzinfo=UTC)

    def next(self) -> dict[str, Any]:
        rng, t = self.rng, self.turn
        self.turn += 1
        self.history.append(text(rng, 25))
        if len(self.history) > 30:  # a rolling summary every so often
            self.history = self.history[-10:]
            self.summary = text(rng, 480)
        kinds = [
            ("system", "system"),
            ("tools", "tools"),
            ("constraints", "constraints"),
            ("memory", "memory"),
            ("summary", "summary"),
            ("history", "history"),
            ("retrieval_1", "retrieval"),
            ("retrieval_2", "retrieval"),
            ("retrieval_3", "retrieval"),
            ("tool_results", "tool_results"),
            ("other", "other"),
            ("user", "user"),
        ]
        blocks = []
        for key, kind in kinds:
            if key == "summary":
                msgs = [{"role": "system", "content": self.summary}]
            elif key == "history":
                msgs = [
                    {"role": "user" if i % 2 == 0 else "assistant", "content": h}
                    for i, h in enumerate(self.history[-12:])
                ]
            elif key == "tool_results":
                msgs = [{"role": "tool", "tool_call_id": f"c{t}", "content": text(rng, 250)}]
            elif key == "user":
                msgs = [{"role": "user", "content": text(rng, 20)}]
            else:
                msgs = [{"role": "system", "content": self.stable[key]}]
            words = sum(len((m["content"] or "").split()) for m in msgs)
            blocks.append(
                {"key": key, "kind": kind, "messages": msgs, "tokens": int(words * 1.33) + 3 * len(msgs)}
            )
        return {
            "snapshot_id": str(uuid.uuid4()),
            "session_id": self.sid,
            "turn": t,
            "agent": "bench-agent",
            "ts": (self.t0 + timedelta(seconds=t)).isoformat(),
            "model": {"name": "gpt-4o", "context_window": 128000, "encoding": "o200k_base"},
            "params": {"temperature": 0},
            "blocks": blocks,
            "output": {
                "text": text(rng, 30),
                "finish_reason": "stop",
                "usage": {"prompt_tokens": sum(b["tokens"] for b in blocks), "completion_tokens": 40},
                "latency_ms": 800,
            },
        }


def make_batches(n_batches: int, seed: int, lanes: int = 1) -> list[list[dict[str, Any]]]:
    """Batches of 100 snapshots: 100 sessions advance one turn per batch, 50 turns each. With
    LANES, batch i belongs to lane i % LANES and each lane has sessions of its own, which advance
    one turn per batch of that lane."""
    rng = random.Random(seed)
    sessions: dict[int, list[SessionGen]] = {}
    made = [0] * lanes
    batches = []
    for b in range(n_batches):
        lane = b % lanes
        if made[lane] % TURNS_PER_SESSION == 0:
            sessions[lane] = [SessionGen(rng, f"bench-{seed}-{b}-{i}") for i in range(BATCH)]
        made[lane] += 1
        batches.append([s.next() for s in sessions[lane]])
    return batches


def by_hash(batches: list[list[dict[str, Any]]], lag: int) -> list[list[dict[str, Any]]]:
    """BATCHES as the SDK sends them: a block whose content went in a batch acknowledged before
    goes as its content address and token count (`hash`, no messages). With LAG requests in flight
    a body is taken only once every batch LAG or more before it has been answered, so a content is
    counted acknowledged from LAG batches after the one that first brought it."""
    first: dict[str, int] = {}
    out = []
    for i, batch in enumerate(batches):
        sent = []
        for snap in batch:
            blocks = []
            for b in snap["blocks"]:
                h = block_hashes(b["messages"])[0]
                seen = first.setdefault(h, i)
                if i - seen >= lag:
                    b = {k: v for k, v in b.items() if k != "messages"} | {"hash": h}
                blocks.append(b)
            sent.append(dict(snap, blocks=blocks))
        out.append(sent)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(workers: int, server: str) -> tuple[subprocess.Popen[bytes], str]:
    """The web server with WORKERS processes: gunicorn's sync workers serving config.wsgi (SERVER
    "gunicorn", this benchmark's series), or uvicorn serving config.asgi with the command line
    `scripts/up` and docker-compose.yml run ("uvicorn")."""
    port = free_port()
    env = dict(
        os.environ,
        DATABASE_URL=settings.DATABASE_URL,
        REDIS_URL=settings.REDIS_URL,
        CTXOBS_INGEST_RATE_LIMIT="0",
        CTXOBS_LOG_LEVEL=os.environ.get("BENCH_SERVER_LOG_LEVEL", "WARNING"),
    )
    if server == "uvicorn":
        argv = [*web_argv(host="127.0.0.1", port=port, workers=workers), "--log-level", "warning",
                "--no-access-log"]
    else:
        argv = [sys.executable, "-m", "gunicorn", "config.wsgi:application", "-b", f"127.0.0.1:{port}",
                "-w", str(workers), "--timeout", "120", "--log-level", "warning"]
    proc = subprocess.Popen(argv, cwd=str(ROOT), env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("gunicorn did not start")


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pids(match: Any) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if match(comm, ppid, cmdline):
                out.append(int(d.name))
    return out


_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def machine_ticks() -> list[int]:
    """The machine's CPU time so far by kind (/proc/stat's first line: user, nice, system, idle,
    iowait, irq, softirq, steal), in clock ticks."""
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]


def ticks_shares(ticks: list[int]) -> dict[str, float]:
    """TICKS (summed differences of `machine_ticks`) as shares of the time: the steal share is
    the time the hypervisor ran something else while this machine had work to run."""
    total = sum(ticks) or 1
    return {name: round(t / total, 3) for name, t in zip(_STAT_FIELDS, ticks, strict=True)}


def cpu_snapshot(server_pid: int) -> dict[str, float]:
    """CPU seconds so far of the web server (master and workers) and of PostgreSQL: the backends
    connected to this database and the shared background processes (WAL writer, checkpointer...),
    not the backends of other databases on the same server."""
    db = str(settings.DATABASES["default"]["NAME"])
    server = [server_pid, *_pids(lambda _c, ppid, _cmd: ppid == server_pid)]

    def is_store(comm: str, _ppid: int, cmd: str) -> bool:
        if not comm.startswith("postgres"):
            return False
        # user db host(port), or user db [local] on a unix socket
        backend = re.match(r"postgres: (?:\S+: )?\S+ (\S+) (?:\S+\(\d+\)|\[local\])", cmd)
        return backend is None or backend.group(1) == db

    postgres = _pids(is_store)
    return {
        "server": sum(map(_proc_cpu_s, server)),
        "postgres": sum(map(_proc_cpu_s, postgres)),
        "client": time.process_time(),
    }


def encoded(body: bytes, encoding: str) -> bytes:
    """BODY compressed for the Content-Encoding ENCODING: gzip as the SDK compresses it, zstd (one
    frame with its checksum), or none."""
    if encoding == "gzip":
        return gzip.compress(body, compresslevel=5)
    if encoding == "zstd":
        return zstandard.ZstdCompressor(level=3, write_checksum=True).compress(body)
    return body


def http_ingest(
    base: str, key: str, bodies: list[bytes], concurrency: int, encoding: str, *,
    lanes_from: int | None = None,
) -> dict[str, Any]:
    """POST the pre-built BODIES over keep-alive connections from CONCURRENCY threads, each taking
    the next body; with LANES_FROM (the index of the first body in `make_batches(..., lanes=
    CONCURRENCY)`), thread k sends the bodies of lane k only, in order, one at a time.

    The standard library's client keeps the load generator's share of the two cores small.
    ENCODING names the bodies' Content-Encoding ("gzip", "zstd") or "none".
    """
    if encoding not in ("gzip", "zstd", "none"):
        raise ValueError(f"encoding must be gzip, zstd or none, not {encoding!r}")
    latencies: list[float] = []
    errors: list[int] = []
    lock = threading.Lock()
    it = iter(bodies)
    lanes = [it] * concurrency
    if lanes_from is not None:
        lanes = [iter([b for j, b in enumerate(bodies) if (lanes_from + j) % concurrency == k])
                 for k in range(concurrency)]
    host, port = base.removeprefix("http://").split(":")
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    if encoding != "none":
        headers["Content-Encoding"] = encoding

    def worker(k: int) -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        try:
            while True:
                with lock:
                    body = next(lanes[k], None)
                if body is None:
                    return
                t0 = time.perf_counter()
                conn.request("POST", "/api/v1/snapshots", body=body, headers=headers)
                r = conn.getresponse()
                r.read()
                dt = time.perf_counter() - t0
                with lock:
                    latencies.append(dt)
                    if r.status != 200:
                        errors.append(r.status)
        finally:
            conn.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    return {
        "elapsed_s": elapsed,
        "snapshots_per_s": len(bodies) * BATCH / elapsed,
        **_latency_ms(latencies),
        "errors": len(errors),
        "latencies": latencies,
    }


def _latency_ms(latencies: list[float]) -> dict[str, float]:
    """The median and 99th percentile of LATENCIES (seconds), in milliseconds."""
    lat = sorted(latencies)
    return {"p50_ms": 1000 * lat[len(lat) // 2],
            "p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))]}


def _copy_value(v: Any) -> str:
    """One value in COPY's text format."""
    if v is None:
        return "\\N"
    if isinstance(v, bool):
        return "t" if v else "f"
    if isinstance(v, list):
        v = "{" + ",".join('"' + str(x).replace("\\", "\\\\").replace('"', '\\"') + '"' for x in v) + "}"
    elif isinstance(v, datetime):
        v = v.isoformat()
    return str(v).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _copy_data(rows: list[tuple[Any, ...]]) -> bytes:
    return "".join("\t".join(map(_copy_value, row)) + "\n" for row in rows).encode()


def copy_parts(project: Project, batches: list[list[dict[str, Any]]], parts: int) -> list[CopyPart]:
    """The rows of BATCHES as the store would hold them, in COPY's text format, in PARTS parts of
    consecutive batches: a raw COPY of the same rows straight into the same tables, the store's
    physical limit. Built before any clock starts, so only the database's work is timed.
    """
    pid = project.pk
    now = datetime.now(UTC)
    n = sum(len(b) for b in batches)
    with connection.cursor() as cur:
        cur.execute("SELECT nextval('ingest_snapshot_id_seq') FROM generate_series(1, %s)", [n])
        ids = iter([r[0] for r in cur.fetchall()])
    # Each part's rows: the snapshots of its batches, and the texts they bring first.
    size = max(1, len(batches) // parts)  # the last part takes the rest
    rows: list[tuple[list[Any], list[Any], list[Any]]] = [([], [], []) for _ in range(parts)]
    seen: set[str] = set()
    seen_m: set[str] = set()
    for i, batch in enumerate(batches):
        snap_rows, content_rows, message_rows = rows[min(i // size, parts - 1)]
        for s in batch:
            sid = next(ids)
            total = sum(b["tokens"] for b in s["blocks"])
            hashes = []
            for b in s["blocks"]:
                h, mhs = block_hashes(b["messages"])
                hashes.append(h)
                if h not in seen:
                    seen.add(h)
                    content_rows.append((pid, h, mhs, 0, b["tokens"], "o200k_base", now))
                    for mh, m in zip(mhs, b["messages"], strict=True):
                        if mh not in seen_m:
                            seen_m.add(mh)
                            message_rows.append((pid, mh, json.dumps(m)))
            snap_rows.append(
                (
                    pid,
                    sid,
                    s["snapshot_id"],
                    0,
                    s["session_id"],
                    s["turn"],
                    s["agent"],
                    s["ts"],
                    now,
                    "gpt-4o",
                    128000,
                    19200,
                    "o200k_base",
                    False,
                    "{}",
                    "{}",
                    total,
                    total / 108800,
                    "ok",
                    "{}",
                    12,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    False,
                    json.dumps(s["output"]),
                    "{}",
                    [b["key"] for b in s["blocks"]],
                    [b["kind"] for b in s["blocks"]],
                    hashes,
                    [b["tokens"] for b in s["blocks"]],
                    [0] * len(s["blocks"]),
                )
            )
    return [
        CopyPart(len(snap_rows), _copy_data(snap_rows), _copy_data(content_rows), _copy_data(message_rows))
        for snap_rows, content_rows, message_rows in rows
    ]


class CopyPart(NamedTuple):
    snapshots: int
    snapshot_data: bytes
    content_data: bytes
    message_data: bytes


def copy_timed(part: CopyPart) -> float:
    """COPY PART into its tables; the seconds it took."""
    t0 = time.perf_counter()
    with connection.cursor() as cur:
        raw = cur.cursor
        with raw.copy(
            "COPY ingest_snapshot (project_id, id, snapshot_id, session_ref, session_id, turn, agent, ts,"
            " received_at, model_name, context_window, reserve_tokens, encoding, counts_estimated, params,"
            " tags, total_tokens, watermark, tier, kind_tokens, n_blocks, n_compression, n_recall,"
            " n_recall_injected, n_validation, n_validation_failed, retries, fallback_used, output,"
            " change, block_keys, block_kinds, block_hashes, block_tokens, block_flags) FROM STDIN"
        ) as c:
            c.write(part.snapshot_data)
        with raw.copy(
            "COPY ingest_blockcontent (project_id, hash, message_hashes, chars, tokens, encoding,"
            " created_at) FROM STDIN"
        ) as c:
            c.write(part.content_data)
        with raw.copy("COPY ingest_messagecontent (project_id, hash, message) FROM STDIN") as c:
            c.write(part.message_data)
    return time.perf_counter() - t0


class _StepLog(logging.Handler):
    """Collects the store's own timing of each step of a batch (ingest.store logs it at DEBUG)."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.batches: list[dict[str, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if msg.startswith("ingest.store_steps"):
            self.batches.append({k: float(v) for k, v in (part.split("=") for part in msg.split()[3:])})


def store_steps(project: Project, batches: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Store BATCHES in process, one after the other: the mean milliseconds per batch of each step of
    the store, of the whole batch call (validation and preparation included), and the CPU of this
    connection's PostgreSQL backend per batch (from /proc: the database's own work, without the
    network and the client)."""
    log = logging.getLogger("ingest.store")
    handler, level, propagate = _StepLog(), log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        backend = int(cur.fetchone()[0])
    calls, backend_cpu = [], []
    try:
        for batch in batches:
            cpu0, t0 = _proc_cpu_s(backend), time.perf_counter()
            # The cyclic collector paused while the batch is stored, as the ingest endpoint pauses
            # it (ingest.api): left running, a full collection fell inside one batch's store in
            # fifty (120 ms, in the turn-to-turn changes) and set the steps' means.
            gc.disable()
            try:
                snapshot_batch_ingest(project=project, batch=batch)
            finally:
                gc.enable()
            calls.append(time.perf_counter() - t0)
            backend_cpu.append(_proc_cpu_s(backend) - cpu0)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate
    n = len(handler.batches)
    steps = {k: round(sum(b.get(k, 0.0) for b in handler.batches) / n, 1) for k in handler.batches[0]}
    # The steps are logged in the order they run: from the sessions' upsert to the commit, the
    # batch holds its sessions' row locks (released before the on-commit hooks run).
    names = list(steps)
    locked = names[names.index("sessions"):names.index("commit") + 1]
    return {
        "batches": n,
        "steps_ms": steps,
        "store_ms": round(sum(steps.values()), 1),
        "sessions_locked_ms": round(sum(steps[k] for k in locked), 1),
        "batch_ms": round(1000 * statistics.mean(calls), 1),
        "postgres_cpu_ms": round(1000 * statistics.mean(backend_cpu), 1),
    }


def stored_bytes(project: Project) -> tuple[float, float, float]:
    """Bytes per snapshot: as stored, and if every block's text were stored on every turn
    (raw JSON text, and as PostgreSQL would store it, compressed)."""
    pid = project.pk
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT
              (SELECT coalesce(sum(pg_column_size(s.*)), 0) FROM ingest_snapshot s
               WHERE s.project_id = %(p)s),
              (SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM ingest_blockcontent c
               WHERE c.project_id = %(p)s),
              (SELECT coalesce(sum(pg_column_size(m.*)), 0) FROM ingest_messagecontent m
               WHERE m.project_id = %(p)s),
              (SELECT count(*) FROM ingest_snapshot s WHERE s.project_id = %(p)s)
            """,
            {"p": pid},
        )
        snap_b, content_b, message_b, n = cur.fetchone()
        # Every block's messages once per turn it appears in.
        cur.execute(
            """
            WITH per_block AS (
              SELECT c.hash, sum(octet_length(m.message::text)) AS raw_b,
                     sum(pg_column_size(m.message)) AS col_b
              FROM ingest_blockcontent c
              CROSS JOIN LATERAL unnest(c.message_hashes) AS mh(h)
              JOIN ingest_messagecontent m ON m.project_id = c.project_id AND m.hash = mh.h
              WHERE c.project_id = %(p)s GROUP BY c.hash
            )
            SELECT coalesce(sum(pb.raw_b), 0), coalesce(sum(pb.col_b), 0)
            FROM ingest_snapshot s CROSS JOIN LATERAL unnest(s.block_hashes) AS b(hash)
            JOIN per_block pb ON pb.hash = b.hash
            WHERE s.project_id = %(p)s
            """,
            {"p": pid},
        )
        naive_raw, naive_col = cur.fetchone()
    n = max(1, n)
    actual = float(snap_b + content_b + message_b) / n
    return float(actual), float(snap_b + naive_raw) / n, float(snap_b + naive_col) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=200, help="batches of 100 snapshots (multiple of 50)")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--web-workers", type=int, default=2)
    ap.add_argument("--server", choices=("uvicorn", "gunicorn"), default="gunicorn",
                    help="gunicorn's sync workers serving config.wsgi (the series in BENCHMARKS.md), or"
                         " uvicorn serving config.asgi as scripts/up and docker-compose.yml run it")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--segments", type=int, default=4,
                    help="parts of the HTTP phase, each between two parts of the raw COPY")
    ap.add_argument("--encoding", choices=("gzip", "zstd", "none"), default="gzip",
                    help="the bodies' Content-Encoding: gzip (level 5) as the SDK sends them, zstd (one"
                         " frame, level 3), or none (plain JSON)")
    ap.add_argument("--block-hashes", action="store_true",
                    help="send acknowledged blocks by hash, as the SDK does with send_block_hashes=True")
    ap.add_argument("--own-sessions", action="store_true",
                    help="each client thread sends the batches of sessions of its own, in order and one at"
                         " a time, as an SDK process does (by default every batch carries one turn of the"
                         " same 100 sessions and any thread sends the next, so that two batches of the"
                         " same sessions are always in flight together)")
    ap.add_argument("--step-batches", type=int, default=50,
                    help="batches stored in process for the per-step breakdown (0: none)")
    args = ap.parse_args()
    started = time.perf_counter()
    load_at_start = os.getloadavg()

    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")
    http_project, key = project_create(name=f"bench-http-{stamp}")
    copy_project = project_create(name=f"bench-copy-{stamp}")[0]
    steps_project, _ = project_create(name=f"bench-steps-{stamp}")

    print(f"generating {args.batches} batches of {BATCH} snapshots...", flush=True)
    batches = make_batches(args.batches, args.seed, args.concurrency if args.own_sessions else 1)
    wire = by_hash(batches, args.concurrency) if args.block_hashes else batches
    by_hash_share = statistics.mean(
        sum("hash" in bl for s in b for bl in s["blocks"]) / sum(len(s["blocks"]) for s in b) for b in wire)
    bodies = [json.dumps({"snapshots": b}).encode() for b in wire]
    json_mb = statistics.mean(map(len, bodies)) / 1e6
    bodies = [encoded(b, args.encoding) for b in bodies]
    avg_tokens = statistics.mean(sum(bl["tokens"] for bl in s["blocks"]) for s in batches[0])
    print(
        f"body {json_mb:.2f} MB of JSON per batch, {statistics.mean(map(len, bodies)) / 1e6:.2f} MB sent,"
        f" ~{avg_tokens:.0f} tokens per snapshot, {by_hash_share:.0%} of blocks by hash",
        flush=True,
    )

    # The HTTP phase runs in SEGMENTS parts, each between two parts of the raw COPY of the same
    # rows, and the ratio is of the totals: this machine's speed moves by a third over minutes,
    # so a COPY taken only before and after the HTTP phase could set the ratio more than ingest
    # did. Each part's rate is reported with them.
    copies = copy_parts(copy_project, batches, args.segments + 1)
    size = len(bodies) // args.segments
    segments = [bodies[k * size : (k + 1) * size if k < args.segments - 1 else None]
                for k in range(args.segments)]
    copy_s: list[float] = []
    http_ticks, copy_ticks = [0] * len(_STAT_FIELDS), [0] * len(_STAT_FIELDS)
    http_parts: list[dict[str, Any]] = []
    cpu_used: dict[str, float] = {}
    proc, base = start_server(args.web_workers, args.server)
    try:
        # Warm-up (connections, caches), not counted.
        warm_batches = make_batches(2, args.seed + 1)
        warm = [json.dumps({"snapshots": b}).encode() for b in warm_batches]
        warm = [encoded(b, args.encoding) for b in warm]
        http_ingest(base, key, warm, 2, args.encoding)
        for k, part in enumerate(copies):
            t0 = machine_ticks()
            copy_s.append(copy_timed(part))
            copy_ticks = [a + b - c for a, b, c in zip(copy_ticks, machine_ticks(), t0, strict=True)]
            if k == len(segments):
                break
            cpu0, t0 = cpu_snapshot(proc.pid), machine_ticks()
            http_parts.append(http_ingest(base, key, segments[k], args.concurrency, args.encoding,
                                          lanes_from=k * size if args.own_sessions else None))
            cpu1 = cpu_snapshot(proc.pid)
            http_ticks = [a + b - c for a, b, c in zip(http_ticks, machine_ticks(), t0, strict=True)]
            for name in cpu0:
                cpu_used[name] = cpu_used.get(name, 0.0) + cpu1[name] - cpu0[name]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    http_s = sum(h["elapsed_s"] for h in http_parts)
    http = {
        "elapsed_s": http_s,
        "snapshots_per_s": len(bodies) * BATCH / http_s,
        "parts_snapshots_per_s": [h["snapshots_per_s"] for h in http_parts],
        **_latency_ms([x for h in http_parts for x in h["latencies"]]),
        "errors": sum(h["errors"] for h in http_parts),
    }
    copy_rate = sum(c.snapshots for c in copies) / sum(copy_s)
    copy_rates = [c.snapshots / t for c, t in zip(copies, copy_s, strict=True)]
    http_rates = [round(x) for x in http["parts_snapshots_per_s"]]
    print(f"http: {http['snapshots_per_s']:.0f} snapshots/s, parts {http_rates}", flush=True)
    print(f"raw COPY: {copy_rate:.0f} snapshots/s, parts {[round(x) for x in copy_rates]}", flush=True)
    steps = None
    if args.step_batches:
        step_batches = make_batches(args.step_batches, args.seed + 2)
        steps = store_steps(steps_project, by_hash(step_batches, 1) if args.block_hashes else step_batches)
    print(f"store steps: {steps}", flush=True)
    actual, naive, naive_compressed = stored_bytes(http_project)
    result = {
        "bench": "ingest",
        "snapshots": args.batches * BATCH,
        "batch_size": BATCH,
        "concurrency": args.concurrency,
        "web_workers": args.web_workers,
        "server": args.server,
        "encoding": args.encoding,
        "own_sessions": args.own_sessions,
        "json_mb_per_batch": round(json_mb, 2),
        "sent_mb_per_batch": round(statistics.mean(map(len, bodies)) / 1e6, 3),
        "blocks_by_hash": round(by_hash_share, 3),
        "tokens_per_snapshot": round(avg_tokens),
        "http_snapshots_per_s": round(http["snapshots_per_s"]),
        "raw_copy_snapshots_per_s": round(copy_rate),
        "segments": args.segments,
        "http_parts_snapshots_per_s": [round(x) for x in http["parts_snapshots_per_s"]],
        "raw_copy_parts_snapshots_per_s": [round(x) for x in copy_rates],
        "http_vs_copy": round(http["snapshots_per_s"] / copy_rate, 3),
        "p50_request_ms": round(http["p50_ms"], 1),
        "p99_request_ms": round(http["p99_ms"], 1),
        "http_errors": http["errors"],
        "cpu_ms_per_snapshot": {k: round(1000 * v / (args.batches * BATCH), 3) for k, v in cpu_used.items()},
        "cpu_cores_busy": round(sum(cpu_used.values()) / http["elapsed_s"], 2),
        "machine_time_shares": {"http": ticks_shares(http_ticks), "raw_copy": ticks_shares(copy_ticks)},
        "stored_bytes_per_snapshot": round(actual),
        "naive_bytes_per_snapshot": round(naive),
        "stored_vs_naive": round(actual / naive, 3),
        "naive_compressed_bytes_per_snapshot": round(naive_compressed),
        "stored_vs_naive_compressed": round(actual / naive_compressed, 3),
        "store_steps": steps,
        "load_average": {"start": [round(x, 2) for x in load_at_start],
                         "end": [round(x, 2) for x in os.getloadavg()]},
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
