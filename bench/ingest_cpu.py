"""The web process's CPU per ingest batch, step by step, in one thread.

    python bench/ingest_cpu.py [--batches 100] [--warm 50] [--seed 11]

Uses DATABASE_URL / REDIS_URL, or the embedded PostgreSQL and Redis. Builds the batches of
bench/ingest_rate.py (100 snapshots of 12 blocks, gzip level 5 as the SDK sends them), stores
--warm of them to fill the process's caches as a running server's are, then takes the next
--batches through the steps of the ingest endpoint one after the other, and reports the CPU time
of this thread per batch for each (milliseconds): inflating the body, decoding it, validating the
snapshots, preparing them (content addresses, token counts, watermark) and storing them (the
store's Python, psycopg and socket work; PostgreSQL's own work is in its process, not here). The
cyclic collector is paused per batch as the endpoint pauses it. The last line printed is one JSON
object.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402

from bench.ingest_rate import make_batches  # noqa: E402
from core.allocator import allocator_tune  # noqa: E402
from core.services import project_create  # noqa: E402
from ctxobs.validate import validate_snapshot  # noqa: E402
from ctxobs.wire import LIMITS  # noqa: E402
from ingest import services, wirebody  # noqa: E402
from ingest.api import BadRequest, _gunzip  # noqa: E402
from ingest.store import snapshots_store  # noqa: E402

STEPS = ("inflate", "decode", "validate", "prepare", "store")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--warm", type=int, default=50)
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    # The web process's allocator, as config.wsgi sets it (CTXOBS_WEB_MALLOC_TUNE=0: as it comes).
    allocator_tune()
    print(f"generating {args.warm + args.batches} batches of 100 snapshots...", file=sys.stderr)
    bodies = [gzip.compress(json.dumps({"snapshots": b}).encode(), 5)
              for b in make_batches(args.warm + args.batches, args.seed)]
    call_command("migrate", interactive=False, verbosity=0)
    project, _ = project_create(name=f"bench-cpu-{int(time.time())}")
    thresholds = project.thresholds
    spent = dict.fromkeys(STEPS, 0.0)
    clock = time.thread_time
    for i, body in enumerate(bodies):
        if i == args.warm:
            spent = dict.fromkeys(STEPS, 0.0)
        gc.disable()
        try:
            t0 = clock()
            raw = _gunzip(body, LIMITS.max_body_bytes, BadRequest)
            t1 = clock()
            batch = wirebody.batch_decode(raw)
            assert batch is not None, "the benchmark's bodies take the fast decoding"
            t2 = clock()
            snaps = []
            for j, item in enumerate(batch):
                snap, errors = validate_snapshot(item, j)
                assert snap is not None, errors
                snaps.append(snap)
            t3 = clock()
            prepared = [services._prepare(j, snap, thresholds) for j, snap in enumerate(snaps)]
            t4 = clock()
            stored = snapshots_store(project=project, prepared=prepared)
            t5 = clock()
            assert len(stored.created) == len(prepared), "every snapshot is new"
        finally:
            gc.enable()
        for step, took in zip(STEPS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
            spent[step] += took
    per_batch = {step: round(1000 * s / args.batches, 2) for step, s in spent.items()}
    print(json.dumps({"bench": "ingest_cpu", "batches": args.batches, "warm": args.warm,
                      "cpu_ms_per_batch": per_batch, "total_ms": round(sum(per_batch.values()), 2)}))


if __name__ == "__main__":
    main()
