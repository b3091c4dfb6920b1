"""What recording the alert evaluation a batch owes (one alerts_pendingevaluation row per batch,
in the ingest transaction) costs the ingest path, measured in process and interleaved.

    python bench/alerts_outbox.py [--pairs 60]

Uses DATABASE_URL / REDIS_URL, or the embedded PostgreSQL and Redis. Stores the realistic
batches of bench/ingest_rate.py (100 snapshots of 100 sessions, ~6k tokens each) with
`snapshot_batch_ingest`, alternating (ABBA) between
  * enqueue: the evaluation is only queued after the commit (what ingest did before the outbox;
    ingest no longer has an after-commit signal, so this bench queues it with on_commit), and
  * outbox: the pending row is written in the transaction and the evaluation queued after it.
Interleaving puts both under the same load, which matters on a shared machine. Reports the
median per batch of wall time and of this process's CPU, the mean of its PostgreSQL backend's
CPU (from /proc), and the differences. The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from alerts import receivers  # noqa: E402
from alerts.models import PendingEvaluation  # noqa: E402
from bench.ingest_rate import BATCH, make_batches  # noqa: E402
from core.models import Project  # noqa: E402
from core.services import project_create  # noqa: E402
from ingest.services import snapshot_batch_ingest  # noqa: E402
from ingest.signals import snapshots_stored  # noqa: E402


def _enqueue_only(sender: Any, *, project_id: int, snapshot_refs: list[int], **kwargs: Any) -> None:
    from alerts.tasks import alerts_evaluate_task

    refs = list(snapshot_refs)
    transaction.on_commit(
        lambda: alerts_evaluate_task.apply_async(kwargs={"project_id": project_id, "snapshot_refs": refs})
    )


def _mode(mode: str) -> None:
    snapshots_stored.disconnect(dispatch_uid="alerts.evaluate")
    snapshots_stored.disconnect(dispatch_uid="bench.enqueue_only")
    if mode == "outbox":
        snapshots_stored.connect(receivers.on_snapshots_stored, dispatch_uid="alerts.evaluate")
    else:
        snapshots_stored.connect(_enqueue_only, dispatch_uid="bench.enqueue_only")


def _backend_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _store(project: Project, batch: list[dict[str, Any]], backend: int | None) -> tuple[float, float, float]:
    pg0 = _backend_cpu_s(backend) if backend else 0.0
    cpu0, t0 = time.process_time(), time.perf_counter()
    res = snapshot_batch_ingest(project=project, batch=batch)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    pg = (_backend_cpu_s(backend) - pg0) if backend else 0.0
    assert res.created == len(batch), res
    return wall * 1000, cpu * 1000, pg * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=60, help="ABBA pairs of batches of 100 snapshots")
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    started = time.perf_counter()
    call_command("migrate", interactive=False, verbosity=0)
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")
    project, _ = project_create(name=f"bench-outbox-{stamp}")
    n = 2 * args.pairs + 4
    print(f"generating {n} batches of {BATCH} snapshots...", flush=True)
    batches = iter(make_batches(n, args.seed))
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = int(cur.fetchone()[0])
    backend = pid if Path(f"/proc/{pid}/stat").exists() else None  # a remote server: wall only

    for mode in ("enqueue", "outbox"):  # warm-up, not counted
        _mode(mode)
        _store(project, next(batches), backend)
        _store(project, next(batches), backend)
    samples: dict[str, list[tuple[float, float, float]]] = {"enqueue": [], "outbox": []}
    pending0 = PendingEvaluation.objects.filter(project=project).count()
    for i in range(args.pairs):
        order = ("enqueue", "outbox") if i % 2 == 0 else ("outbox", "enqueue")
        for mode in order:
            _mode(mode)
            samples[mode].append(_store(project, next(batches), backend))
    _mode("outbox")
    rows = PendingEvaluation.objects.filter(project=project).count() - pending0
    assert rows == args.pairs, (rows, args.pairs)

    def med(mode: str, k: int) -> float:
        # PostgreSQL's CPU is read in clock ticks (10 ms), too coarse for a median per batch.
        values = [s[k] for s in samples[mode]]
        return statistics.fmean(values) if k == 2 else statistics.median(values)

    result: dict[str, Any] = {
        "bench": "alerts_outbox",
        "batches_per_mode": args.pairs,
        "batch_size": BATCH,
        "outbox_rows_per_batch": rows / args.pairs,
    }
    for k, name in enumerate(("wall_ms", "cpu_ms", "pg_cpu_ms")):
        a, b = med("enqueue", k), med("outbox", k)
        result[f"{name}_per_batch"] = {
            "enqueue": round(a, 2),
            "outbox": round(b, 2),
            "delta": round(b - a, 2),
            "delta_pct": round(100 * (b - a) / a, 1) if a else None,
        }
    result["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
