"""The contamination lint: precision and recall per check on a generated labelled set, and what
running it costs ingest.

    python bench/lint.py [--per-check 50] [--clean 100] [--batches 30] [--rounds 2] [--scores-only]
                         [--holdout MODULE ...]

1. Precision/recall, per check, printed as a table. Two labelled sets: bench/lint_cases.py
   generates two-turn sessions, for every check PER_CHECK with the fault planted (in several
   forms) and PER_CHECK clean ones with a realistic near miss of that check, plus CLEAN plain
   sessions; bench/lint_injection_cases.py holds hand-written retrieved documents and tool results
   for prompt_injection (true injections, and quotation, discussion and documentation of attacks),
   written apart from the check's rules. The checks run on each session's second turn; a finding
   counts as a true positive only on a session planted for that check, so a check firing on
   another check's session is a false positive. Computed twice: in process (insights.lint on the
   wire form) and end to end, from the findings the worker stored after both sets went through
   the HTTP API. --scores-only stops after the in-process table; --rounds 0 after the
   end-to-end one. Then prompt_injection, in process, on each --holdout set: single calls in the
   format of bench/lint_injection_dev2.py (written apart from the check; the check was tuned on it
   after it had served as the holdout, and then on bench/lint_injection_blind.py, the next one) --
   point it at the blind set, bench/lint_injection_blind2.py, to measure the check.
2. Ingest-rate cost. gunicorn (2 workers) and one Celery worker (the default/alerts queues,
   concurrency 2) on this machine, realistic snapshots (bench/ingest_rate.py: 12 blocks, ~6k
   tokens) POSTed in batches of 100 from 4 threads, with the lint on (CTXOBS_LINT=1) and off
   (CTXOBS_LINT=0), alternating, ROUNDS times each. Reported: the HTTP ingest rate, and the rate
   until the worker has also done all the work the batches are owed after commit (alerts
   evaluation, and the lint when on): the end-to-end rate.

Uses DATABASE_URL / REDIS_URL, or the embedded PostgreSQL and Redis. The last line printed is
one JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402

from alerts.models import PendingEvaluation  # noqa: E402
from bench import ingest_rate as IR  # noqa: E402
from bench.lint_cases import Case, labelled_set, wire  # noqa: E402
from bench.lint_injection_cases import injection_set  # noqa: E402
from core.services import project_create  # noqa: E402
from core.tasking import worker_argv  # noqa: E402
from ingest.models import Snapshot  # noqa: E402
from insights import lint  # noqa: E402
from insights.models import Finding, PendingAnalysis  # noqa: E402

# The prompt_injection set written apart from the check, which served as its holdout until the
# check was tuned on it (development data since, as the first blind set is); the second blind set
# (bench.lint_injection_blind2) is the measure.
DEV2 = "bench.lint_injection_dev2"


def scores(cases: list[Case], found: dict[str, set[str]]) -> dict[str, dict[str, float]]:
    """Per check: precision, recall and the counts, FOUND being the checks found per case name."""
    out: dict[str, dict[str, float]] = {}
    for check in lint.CHECKS:
        tp = fp = fn = 0
        for case in cases:
            got, want = check in found.get(case.name, set()), check in case.labels
            tp += got and want
            fp += got and not want
            fn += want and not got
        out[check] = {"precision": round(tp / (tp + fp), 3) if tp + fp else 1.0,
                      "recall": round(tp / (tp + fn), 3) if tp + fn else 1.0, "tp": tp, "fp": fp, "fn": fn}
    return out


def print_table(title: str, generated: dict[str, dict[str, float]], injection: dict[str, dict[str, float]],
                both: dict[str, dict[str, float]]) -> None:
    """Precision and recall per check on each set and on both, as a markdown table."""
    print(title, flush=True)
    print("| check | generated P | generated R | injection set P | injection set R | both P | both R"
          " | tp / fp / fn (both) |")
    print("|---|---|---|---|---|---|---|---|")
    for check in lint.CHECKS:
        g, i, b = generated[check], injection[check], both[check]
        cells = [f"{x[k]:.3f}" for x in (g, i, b) for k in ("precision", "recall")]
        print(f"| {check} | {' | '.join(cells)} | {b['tp']} / {b['fp']} / {b['fn']} |", flush=True)


def split_scores(generated: list[Case], injection: list[Case], found: dict[str, set[str]]
                 ) -> tuple[dict[str, dict[str, float]], ...]:
    return scores(generated, found), scores(injection, found), scores(generated + injection, found)


def in_process(cases: list[Case]) -> dict[str, set[str]]:
    found = {}
    for case in cases:
        t0, t1 = (lint.turn_from_wire(s) for s in wire(case))
        found[case.name] = {i.check for i in lint.lint_turn(t1, t0)}
    return found


def holdout_scores(source: str | Sequence[Mapping[str, Any]] = DEV2) -> dict[str, Any]:
    """prompt_injection on a set of single calls in the holdout format (a case: id, label and the
    blocks of one call, the text in a retrieved document, tool result, memory or history), in
    process: precision, recall and the cases it got wrong. SOURCE: a module holding such a set as
    CASES (bench.lint_injection_dev2, or the blind set bench.lint_injection_blind2), or the cases."""
    cases = importlib.import_module(source).CASES if isinstance(source, str) else source
    tp = fp = fn = 0
    wrong: list[str] = []
    for case in cases:
        blocks = [
            {**b, "tokens": b.get("tokens") or max(1, len(json.dumps(b["messages"])) // 4)}
            for b in case["blocks"]
        ]
        turn = lint.turn_from_wire({"blocks": blocks, "model": {"name": "gpt-4o", "context_window": 128_000}})
        got = any(i.check == lint.PROMPT_INJECTION for i in lint.lint_turn(turn, None))
        tp += got and case["label"]
        fp += got and not case["label"]
        fn += case["label"] and not got
        if got != case["label"]:
            wrong.append(case["id"])
    return {"precision": round(tp / (tp + fp), 3) if tp + fp else 1.0, "recall": round(tp / (tp + fn), 3),
            "tp": tp, "fp": fp, "fn": fn, "cases": len(cases), "wrong": wrong}


def start_worker(lint_on: bool, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, DATABASE_URL=settings.DATABASE_URL, REDIS_URL=settings.REDIS_URL,
               CTXOBS_LINT="1" if lint_on else "0", CTXOBS_LOG_LEVEL="WARNING")
    host = f"lintbench-{os.getpid()}-{int(time.time() * 1000)}@bench"
    fh = log.open("ab")
    proc = subprocess.Popen(worker_argv("worker", concurrency=2, hostname=host), cwd=str(ROOT), env=env,
                            stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if f"{host} ready." in log.read_text(errors="replace"):
            return proc
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited; see {log}")
        time.sleep(0.3)
    raise RuntimeError(f"the worker did not start; see {log}")


def start_web(lint_on: bool) -> tuple[subprocess.Popen[bytes], str]:
    os.environ["CTXOBS_LINT"] = "1" if lint_on else "0"
    try:
        return IR.start_server(2)
    finally:
        os.environ.pop("CTXOBS_LINT", None)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def drained(project_id: int, timeout: float = 900) -> float:
    """Wait until the worker has done all the project's work after commit (the insights analysis
    and the alerts evaluation each batch is owed); when that was (time.perf_counter())."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not (PendingAnalysis.objects.filter(project_id=project_id).exists()
                or PendingEvaluation.objects.filter(project_id=project_id).exists()):
            return time.perf_counter()
        time.sleep(0.1)
    raise RuntimeError("the analysis was not done in time")


def run(lint_on: bool, bodies: list[bytes], n: int, log: Path, *, label: str) -> dict[str, Any]:
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")
    project, key = project_create(name=f"lint-bench-{label}-{stamp}")
    worker = start_worker(lint_on, log)
    web, base = start_web(lint_on)
    try:
        IR.http_ingest(base, key, bodies[:1], 1, "gzip")  # warm-up, counted in nothing below
        drained(project.pk)
        t0 = time.perf_counter()
        http = IR.http_ingest(base, key, bodies[1:], 4, "gzip")
        done = drained(project.pk)
    finally:
        stop(web)
        stop(worker)
    snaps = (len(bodies) - 1) * n
    return {"lint": lint_on, "http_snapshots_per_s": round(http["snapshots_per_s"]),
            "end_to_end_snapshots_per_s": round(snaps / (done - t0)),
            "p50_request_ms": round(http["p50_ms"], 1),
            "errors": http["errors"], "findings": Finding.objects.filter(project=project).count()}


def end_to_end_scores(cases: list[Case], log: Path) -> dict[str, set[str]]:
    """The labelled set through the API and the worker; the checks stored per case's second turn."""
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")
    project, key = project_create(name=f"lint-bench-labelled-{stamp}")
    worker = start_worker(True, log)
    web, base = start_web(True)
    try:
        snaps = [s for c in cases for s in wire(c, prefix="b")]
        bodies = [gzip.compress(json.dumps({"snapshots": snaps[i : i + 100]}).encode())
                  for i in range(0, len(snaps), 100)]
        res = IR.http_ingest(base, key, bodies, 2, "gzip")
        assert res["errors"] == 0, res
        drained(project.pk)
    finally:
        stop(web)
        stop(worker)
    second = dict(Snapshot.objects.filter(project=project, turn=1).values_list("id", "session_id"))
    found: dict[str, set[str]] = defaultdict(set)
    for ref, check in Finding.objects.filter(project=project, snapshot_ref__in=list(second)).values_list(
            "snapshot_ref", "check_name"):
        found[second[ref].removeprefix("b-")].add(check)
    return dict(found)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-check", type=int, default=50)
    ap.add_argument("--clean", type=int, default=100)
    ap.add_argument("--batches", type=int, default=30, help="batches of 100 snapshots per ingest run")
    ap.add_argument("--rounds", type=int, default=2,
                    help="runs with the lint and without, alternating (0: no ingest-rate part)")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--holdout", action="append", metavar="MODULE",
                    help="a module holding a prompt_injection set in the holdout format as CASES, scored"
                         f" in process (repeatable; default {DEV2})")
    ap.add_argument("--scores-only", action="store_true",
                    help="the in-process table only: no server, no worker")
    args = ap.parse_args()
    args.holdout = args.holdout or [DEV2]
    started = time.perf_counter()
    from django.core.management import call_command

    log = Path(os.environ.get("CTXOBS_BENCH_LOG", "/tmp/ctxobs-lint-bench-worker.log"))  # noqa: S108

    generated = labelled_set(per_check=args.per_check, clean=args.clean, seed=args.seed)
    injection = injection_set()
    cases = generated + injection
    t = time.perf_counter()
    local_found = in_process(cases)
    lint_ms = (time.perf_counter() - t) * 1000 / (2 * len(cases))
    local_sets = split_scores(generated, injection, local_found)
    local = local_sets[2]
    print_table(f"{len(generated)} generated + {len(injection)} injection-set sessions; in process"
                f" ({lint_ms:.2f} ms per turn linted):", *local_sets)
    holdout_pr = {}
    for module in args.holdout:
        holdout = holdout_scores(module)
        print(f"prompt_injection on {module} ({holdout['cases']} cases): precision"
              f" {holdout['precision']:.3f}, recall {holdout['recall']:.3f} (tp {holdout['tp']},"
              f" fp {holdout['fp']}, fn {holdout['fn']}); wrong: {', '.join(holdout['wrong'])}", flush=True)
        holdout_pr[module] = [holdout["precision"], holdout["recall"]]
    if args.scores_only:
        print(json.dumps({"bench": "lint", "labelled_sessions": len(cases), "holdout_sets": holdout_pr,
                          "per_check": {c: [s["precision"], s["recall"]] for c, s in local.items()},
                          "injection_set": [local_sets[1][lint.PROMPT_INJECTION]["precision"],
                                            local_sets[1][lint.PROMPT_INJECTION]["recall"]],
                          "lint_ms_per_turn_in_process": round(lint_ms, 3)}))
        return
    call_command("migrate", interactive=False, verbosity=0)
    stored_sets = split_scores(generated, injection, end_to_end_scores(cases, log))
    stored = stored_sets[2]
    print_table("end to end (API + worker, stored findings):", *stored_sets)

    if args.rounds == 0:
        print(json.dumps({"bench": "lint", "labelled_sessions": len(cases), "holdout_sets": holdout_pr,
                          "per_check": {c: [s["precision"], s["recall"]] for c, s in stored.items()},
                          "injection_set": [stored_sets[1][lint.PROMPT_INJECTION]["precision"],
                                            stored_sets[1][lint.PROMPT_INJECTION]["recall"]],
                          "in_process_matches_stored": local == stored,
                          "lint_ms_per_turn_in_process": round(lint_ms, 3),
                          "seconds": round(time.perf_counter() - started, 1)}))
        return
    batches = IR.make_batches(args.batches + 1, args.seed)
    bodies = [gzip.compress(json.dumps({"snapshots": b}).encode(), compresslevel=5) for b in batches]
    runs: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for lint_on in ((False, True) if r % 2 == 0 else (True, False)):
            res = run(lint_on, bodies, IR.BATCH, log, label=f"{'on' if lint_on else 'off'}{r}")
            print(f"  ingest {res}", flush=True)
            runs.append(res)

    def med(on: bool, key: str) -> float:
        return statistics.median(x[key] for x in runs if x["lint"] is on)

    http_off, http_on = med(False, "http_snapshots_per_s"), med(True, "http_snapshots_per_s")
    e2e_off, e2e_on = med(False, "end_to_end_snapshots_per_s"), med(True, "end_to_end_snapshots_per_s")
    result = {
        "bench": "lint",
        "labelled_sessions": len(cases),
        "precision_min": min(s["precision"] for s in stored.values()),
        "recall_min": min(s["recall"] for s in stored.values()),
        "per_check": {c: [s["precision"], s["recall"]] for c, s in stored.items()},
        "injection_set": [stored_sets[1][lint.PROMPT_INJECTION]["precision"],
                          stored_sets[1][lint.PROMPT_INJECTION]["recall"]],
        "holdout_sets": holdout_pr,
        "in_process_matches_stored": local == stored,
        "lint_ms_per_turn_in_process": round(lint_ms, 3),
        "snapshots_per_run": args.batches * IR.BATCH,
        "http_per_s_off_on": [http_off, http_on],
        "http_cost_pct": round((http_off - http_on) / http_off * 100, 1),
        "end_to_end_per_s_off_on": [e2e_off, e2e_on],
        "end_to_end_cost_pct": round((e2e_off - e2e_on) / e2e_off * 100, 1),
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
