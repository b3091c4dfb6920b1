"""OTLP ingest rate against the snapshot API's on the same turns, end to end until readable.

    python bench/otlp.py [--batches 30] [--concurrency 4] [--web-workers 2]

Uses DATABASE_URL / REDIS_URL, or the embedded PostgreSQL and Redis. Starts gunicorn on a free
port. Builds agent turns (system prompt, tool definitions, a growing history, a tool exchange,
the user message; about 2.5k tokens), then sends them twice, to two projects:

- as OTel GenAI chat spans recorded by the real OpenTelemetry SDK and encoded by its OTLP
  encoder, 100 spans per `ExportTraceServiceRequest`, protobuf, gzip, to /api/v1/otlp/v1/traces;
- as the wire snapshots those spans map to, 100 per batch, JSON, gzip, to /api/v1/snapshots.

Both answer after the commit, so a turn is readable when its request returns. Bodies are built
before the clock starts. The last line printed is one JSON object with the headline figures
(target: OTLP at least half the snapshot API's rate).
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

import httpx  # noqa: E402
from django.conf import settings  # noqa: E402
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from core.services import project_create  # noqa: E402
from ingest.otlp.decode import decode_traces_protobuf  # noqa: E402
from ingest.otlp.mapping import spans_to_snapshots  # noqa: E402

BATCH = 100
_SYL = ["ka", "ro", "mi", "te", "su", "lan", "dor", "vi", "ne", "sha", "quo", "bri", "el", "tum", "xa", "po"]
WORDS = [a + b + c for a in _SYL for b in _SYL for c in ("", "n", "s", "r", "ta", "le", "mo", "ik", "us")]


def text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def turn_attributes(
    rng: random.Random, session: str, turn: int, system: str, tools: list[Any], history: list[dict[str, Any]]
) -> dict[str, Any]:
    """One chat call's OTel GenAI attributes (content captured on the span)."""
    user = {"role": "user", "parts": [{"type": "text", "content": text(rng, 20)}]}
    call = {
        "role": "assistant",
        "parts": [
            {"type": "tool_call", "id": f"c{turn}", "name": "search", "arguments": {"q": text(rng, 4)}}
        ],
    }
    result = {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": f"c{turn}", "response": text(rng, 250)}],
    }
    messages = [*history[-12:], user, call, result]
    history.extend([user, {"role": "assistant", "parts": [{"type": "text", "content": text(rng, 25)}]}])
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.conversation.id": session,
        "gen_ai.system_instructions": json.dumps([{"type": "text", "content": system}]),
        "gen_ai.input.messages": json.dumps(messages),
        "gen_ai.output.messages": json.dumps(
            [
                {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": text(rng, 30)}],
                    "finish_reason": "stop",
                }
            ]
        ),
        "gen_ai.tool.definitions": json.dumps(tools),
        "gen_ai.usage.input_tokens": 2500,
        "gen_ai.usage.output_tokens": 40,
    }


def make_spans(n_batches: int, seed: int) -> list[list[ReadableSpan]]:
    """Batches of 100 spans: 100 sessions advance one turn per batch."""
    rng = random.Random(seed)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench.otlp")
    stamp = datetime.now(UTC).strftime("%H%M%S%f")
    sessions: list[tuple[str, str, list[Any], list[dict[str, Any]]]] = []
    for i in range(BATCH):
        tools = [
            {
                "type": "function",
                "name": f"tool_{k}",
                "description": text(rng, 60),
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            }
            for k in range(3)
        ]
        sessions.append((f"otlp-bench-{stamp}-{i}", text(rng, 420), tools, []))
    batches = []
    for b in range(n_batches):
        exporter.clear()
        for sid, system, tools, history in sessions:
            with tracer.start_as_current_span(
                "chat gpt-4o", attributes=turn_attributes(rng, sid, b, system, tools, history)
            ):
                pass
        batches.append(list(exporter.get_finished_spans()))
    provider.shutdown()
    return batches


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(workers: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = dict(
        os.environ,
        DATABASE_URL=settings.DATABASE_URL,
        REDIS_URL=settings.REDIS_URL,
        CTXOBS_INGEST_RATE_LIMIT="0",
        CTXOBS_LOG_LEVEL="WARNING",
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "config.wsgi:application",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            str(workers),
            "--timeout",
            "120",
            "--log-level",
            "warning",
        ],
        cwd=str(ROOT),
        env=env,
    )
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


def post_all(
    base: str, path: str, key: str, ctype: str, bodies: list[bytes], concurrency: int
) -> dict[str, Any]:
    """POST BODIES over keep-alive connections from CONCURRENCY threads; elapsed and failures."""
    lock = threading.Lock()
    it = iter(bodies)
    failures: list[int] = []
    host, port = base.removeprefix("http://").split(":")
    headers = {"Authorization": f"Bearer {key}", "Content-Type": ctype, "Content-Encoding": "gzip"}

    def worker() -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        try:
            while True:
                with lock:
                    body = next(it, None)
                if body is None:
                    return
                conn.request("POST", path, body=body, headers=headers)
                r = conn.getresponse()
                r.read()
                if r.status != 200:
                    with lock:
                        failures.append(r.status)
        finally:
            conn.close()

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"elapsed_s": time.perf_counter() - t0, "failures": failures}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=30, help="requests of 100 turns each")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--web-workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    started = time.perf_counter()

    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")
    _, otlp_key = project_create(name=f"bench-otlp-{stamp}")
    _, snap_key = project_create(name=f"bench-otlp-snapshots-{stamp}")

    print(f"recording {args.batches} x {BATCH} spans...", flush=True)
    span_batches = make_spans(args.batches, args.seed)
    otlp_bodies = [gzip.compress(encode_spans(b).SerializeToString(), compresslevel=5) for b in span_batches]
    snap_bodies = []
    for i, body in enumerate(otlp_bodies):
        # The very snapshots the OTLP path stores (another project, so the same session ids),
        # numbered as it numbers them.
        snaps = [snap for _, snap in spans_to_snapshots(decode_traces_protobuf(gzip.decompress(body)).spans)]
        for snap in snaps:
            snap["snapshot_id"] = str(uuid.uuid4())
            snap["turn"] = i
        snap_bodies.append(gzip.compress(json.dumps({"snapshots": snaps}).encode(), compresslevel=5))
    print(
        f"OTLP {len(otlp_bodies[0]) / 1e6:.2f} MB per request, snapshots {len(snap_bodies[0]) / 1e6:.2f} MB",
        flush=True,
    )

    proc, base = start_server(args.web_workers)
    try:
        # Warm-up (connections, caches), not counted: one request of each.
        warm = make_spans(1, args.seed + 1)
        _, warm_key = project_create(name=f"bench-otlp-warm-{stamp}")
        post_all(
            base,
            "/api/v1/otlp/v1/traces",
            warm_key,
            "application/x-protobuf",
            [gzip.compress(encode_spans(warm[0]).SerializeToString())],
            1,
        )
        snap = post_all(
            base, "/api/v1/snapshots", snap_key, "application/json", snap_bodies, args.concurrency
        )
        otlp = post_all(
            base, "/api/v1/otlp/v1/traces", otlp_key, "application/x-protobuf", otlp_bodies, args.concurrency
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    n = args.batches * BATCH
    result = {
        "bench": "otlp",
        "turns": n,
        "batch_size": BATCH,
        "concurrency": args.concurrency,
        "web_workers": args.web_workers,
        "otlp_spans_per_s": round(n / otlp["elapsed_s"]),
        "snapshot_api_per_s": round(n / snap["elapsed_s"]),
        "otlp_vs_snapshot_api": round(snap["elapsed_s"] / otlp["elapsed_s"], 3),
        "failures": {"otlp": otlp["failures"][:5], "snapshots": snap["failures"][:5]},
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
