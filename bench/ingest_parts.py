"""Two parts of an ingest batch's CPU, timed apart in one thread: preparing its snapshots (content
addresses, token counts, watermark) and building their store rows.

    python bench/ingest_parts.py [--batches 50] [--warm 10] [--seed 11]

Needs no database (the rows are built, not written). Builds the batches of bench/ingest_rate.py,
decodes and validates them as the endpoint does, prepares --warm batches to fill the process's
memos as a running server's are, then times the preparation of the next --batches (one pass: a
second would find every new message in the memos) and, best of five passes, `_snapshot_row` for
each of their snapshots. Milliseconds of this
thread's CPU per batch of 100; the last line printed is one JSON object. Runs on earlier code
too (copy it into a worktree): it calls only what the store has had since the row types.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.utils import timezone  # noqa: E402

from bench.ingest_rate import make_batches  # noqa: E402
from ctxobs.validate import validate_snapshot  # noqa: E402
from ingest import services, store, wirebody  # noqa: E402

THRESHOLDS = (0.6, 0.75, 0.85, 0.95)


def _best(fn: Any, passes: int) -> float:
    best = float("inf")
    for _ in range(passes):
        t = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=50)
    ap.add_argument("--warm", type=int, default=10)
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    snaps: list[list[Any]] = []
    for batch in make_batches(args.warm + args.batches, args.seed):
        items = wirebody.batch_decode(json.dumps({"snapshots": batch}).encode())
        assert items is not None, "the benchmark's bodies take the fast decoding"
        checked = [validate_snapshot(item, j) for j, item in enumerate(items)]
        assert all(s is not None for s, _ in checked), "every snapshot is valid"
        snaps.append([s for s, _ in checked])
    for batch in snaps[: args.warm]:
        for j, s in enumerate(batch):
            services._prepare(j, s, THRESHOLDS)
    timed = snaps[args.warm :]
    prepared: list[list[Any]] = []
    now = timezone.now()

    def prepare() -> None:
        for batch in timed:
            prepared.append([services._prepare(j, s, THRESHOLDS) for j, s in enumerate(batch)])

    def rows() -> None:
        for batch in prepared:
            for p in batch:
                store._snapshot_row(1, now, p)

    per_batch = {name: round(1000 * _best(fn, passes) / len(timed), 3)
                 for name, fn, passes in (("prepare", prepare, 1), ("rows", rows, 5))}
    print(json.dumps({"bench": "ingest_parts", "batches": len(timed), "cpu_ms_per_batch": per_batch}))


if __name__ == "__main__":
    main()
