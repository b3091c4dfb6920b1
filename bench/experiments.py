"""Context experiments at 500 items: planning, call reuse, and the comparison page.

    .venv/bin/python bench/experiments.py [--items 500] [--samples 3]   # last line: one JSON object

Uses the PostgreSQL of DATABASE_URL (or the embedded one) on a throwaway database of its own
(created and dropped here). The model is a local HTTP server on loopback answering as an
OpenAI-compatible completions API does (the answer follows the prompt: it states each booking
code whose memory is in it), so the figures are ctxobs's own work, not a model's.

1. planning: `experiment_start` of four strategies (drop tool outputs, keep the last 2 turns,
   top 2 retrieved documents, constraints after system) over ITEMS items x SAMPLES samples: the
   items' plans (operations applied, tokens before and after, not-applicable items), the replay
   job, its variants and runs stored. Target: <= 2 s for the four.
2. calls: every run of the four jobs executed as a replay worker executes it; the model requests
   the server received against the distinct requests of the four jobs (the control of every
   experiment after the first is answered by the first's runs). Target: equal.
3. the comparison page (as saved against the four) server time, over 5 loads, and its query
   count, at ITEMS items and at a tenth of them. Target: <= 300 ms at a fixed query count.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
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

from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext, setup_test_environment  # noqa: E402

STRATEGIES = {
    "drop tool outputs": [{"op": "drop_tool_output", "older_than": 1}],
    "keep the last 2 turns": [{"op": "keep_last_turns", "n": 2}],
    "top 2 documents": [{"op": "top_k", "key": "retrieval", "k": 2}],
    "constraints after system": [{"op": "pin_to_prefix", "key": "constraints"}],
}


class Model:
    """A completions server on loopback: states each planted code found in the prompt."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with model.lock:
                    model.calls += 1
                prompt = str(body.get("prompt") or body.get("messages"))
                codes = sorted({w.strip(".,") for w in prompt.split() if w.startswith("BK")})
                text = "Your booking code is " + ", ".join(codes) + "." if codes else "Which booking?"
                out = json.dumps(
                    {
                        "choices": [{"index": 0, "finish_reason": "stop", "text": text}],
                        "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": 8},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


def turn(i: int) -> dict[str, Any]:
    """A realistic turn: system, tools, constraints, memory with a planted code, a history with
    tool calls and their results, five retrieved documents, the question."""
    call = {
        "id": f"c{i}",
        "type": "function",
        "function": {"name": "search_flights", "arguments": '{"day": "fri"}'},
    }
    docs = "\n\n".join(
        f"[{d}] Policy {d}: economy fares up to {400 + d * 50} EUR need no approval." for d in range(5)
    )
    return {
        "snapshot_id": str(uuid.uuid4()),
        "session_id": f"bench-{i // 10}",
        "turn": i % 10,
        "agent": "travel-bot",
        "ts": datetime.now(tz=UTC).isoformat(),
        "model": {"name": "gpt-4o", "context_window": 128000},
        "params": {"temperature": 0.7, "max_tokens": 64},
        "blocks": [
            {
                "key": "system",
                "kind": "system",
                "pinned": True,
                "messages": [
                    {"role": "system", "content": "You are a travel assistant. Answer in one sentence."}
                ],
            },
            {
                "key": "tools",
                "kind": "tools",
                "messages": [{"role": "system", "content": "Tools: search_flights(day), hold_seat(flight)."}],
            },
            {
                "key": "constraints",
                "kind": "constraints",
                "messages": [{"role": "system", "content": "Never book business class. Reply in English."}],
            },
            {
                "key": "memory",
                "kind": "memory",
                "messages": [{"role": "system", "content": f"Memory: booking code BK{i:04d}; window seat."}],
            },
            {
                "key": "history",
                "kind": "history",
                "messages": [
                    {"role": "user", "content": "Find me a flight on Friday."},
                    {"role": "assistant", "content": None, "tool_calls": [call]},
                    {
                        "role": "tool",
                        "tool_call_id": f"c{i}",
                        "content": json.dumps(
                            {"flights": [{"no": f"CX{n}", "price": 500 + n} for n in range(12)]}
                        ),
                    },
                    {"role": "assistant", "content": "There are 12 flights on Friday."},
                    {"role": "user", "content": "Hold the cheapest one."},
                    {"role": "assistant", "content": "Held CX0 for you."},
                ],
            },
            {"key": "retrieval", "kind": "retrieval", "messages": [{"role": "system", "content": docs}]},
            {
                "key": "user",
                "kind": "user",
                "messages": [{"role": "user", "content": "What is my booking code?"}],
            },
        ],
        "output": {"text": f"Your booking code is BK{i:04d}.", "tool_calls": [], "finish_reason": "stop"},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument(
        "--profile", action="store_true", help="profile the first strategy's start (cProfile)"
    )
    args = parser.parse_args()

    from core.models import Project
    from core.services import project_create
    from experiments import selectors
    from experiments.models import Comparison
    from experiments.services import runs, sets, strategies
    from ingest import signals
    from ingest.services import snapshot_batch_ingest
    from replay.models import ReplayRun
    from replay.services.model_endpoints import endpoint_create
    from replay.services.runs import _job_refresh, replay_run_execute

    setup_test_environment()
    connection.settings_dict["TEST"]["NAME"] = f"ctxobs_bench_experiments_{os.getpid()}"
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    out: dict[str, Any] = {"items": args.items, "samples": args.samples, "strategies": len(STRATEGIES)}
    try:
        # Nobody consumes follow-up tasks for this throwaway database: none are enqueued.
        signals.snapshots_stored.receivers.clear()
        signals.snapshots_stored.sender_receivers_cache.clear()
        from replay import signals as replay_signals

        replay_signals.job_finished.receivers.clear()
        replay_signals.job_finished.sender_receivers_cache.clear()

        model = Model()
        project, _ = project_create(name="bench-experiments")
        Project.objects.filter(pk=project.pk).update(allow_private_endpoints=True)
        project.refresh_from_db()
        endpoint = endpoint_create(
            project=project,
            name="local",
            base_url=model.base_url,
            model="bench",
            mode="completions",
            api_key="",
            timeout_s=10.0,
            is_default=True,
        )
        wires = [turn(i) for i in range(args.items)]
        for i in range(0, len(wires), 100):
            snapshot_batch_ingest(project=project, batch=wires[i : i + 100])
        t0 = time.perf_counter()
        seeds = sets.seeds_from_turns(project=project, snapshot_ids=[w["snapshot_id"] for w in wires])
        for s in seeds:
            s.checks = [
                {
                    "type": "fact",
                    "match": "text",
                    "value": s.snapshot["output"]["text"].split()[-1].strip("."),
                }
            ]
        eval_set = sets.eval_set_create(project=project, name="bench", seeds=seeds)
        out["set_create_s"] = round(time.perf_counter() - t0, 3)
        version = sets.latest_version(eval_set)
        versions = {
            name: strategies.strategy_latest(
                strategies.strategy_create(project=project, name=name, operations=ops)
            )
            for name, ops in STRATEGIES.items()
        }

        def execute(exp: Any) -> None:
            for rid in ReplayRun.objects.filter(job_id=exp.job_id, status="pending").values_list(
                "id", flat=True
            ):
                replay_run_execute(run_id=rid)
            _job_refresh(job_id=exp.job_id)
            runs.experiment_finalize(experiment_id=exp.pk)

        # 1. planning the four (nothing written), then starting each once the one before has run
        planned: dict[str, float] = {}
        for name, sv in versions.items():
            t = time.perf_counter()
            p = runs.experiment_plan(
                project=project,
                set_version=version,
                strategy_version=sv,
                endpoint=endpoint,
                samples=args.samples,
            )
            planned[name] = time.perf_counter() - t
            assert p.job is not None
        out["plan_s"] = {k: round(v, 3) for k, v in planned.items()}
        out["plan_total_s"] = round(sum(planned.values()), 3)
        started: dict[str, float] = {}
        exps = []
        control = runs.experiment_start(
            project=project, set_version=version, endpoint=endpoint, samples=args.samples
        )
        execute(control)
        for name, sv in versions.items():
            profiler = None
            if args.profile and not exps:
                import cProfile

                profiler = cProfile.Profile()
                profiler.enable()
            t = time.perf_counter()
            exp = runs.experiment_start(
                project=project,
                set_version=version,
                strategy_version=sv,
                endpoint=endpoint,
                samples=args.samples,
            )
            if profiler is not None:
                import pstats

                profiler.disable()
                pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(30)
            started[name] = time.perf_counter() - t
            exps.append(exp)
            execute(exp)
        out["start_s"] = {k: round(v, 3) for k, v in started.items()}
        out["start_total_s"] = round(sum(started.values()), 3)
        # 2. calls against distinct requests
        job_ids = [control.job_id, *[e.job_id for e in exps]]
        all_runs = ReplayRun.objects.filter(job_id__in=job_ids)
        keys = set(all_runs.values_list("request_key", "sample"))
        out["model_calls"] = model.calls
        out["distinct_requests"] = len(keys)
        out["runs"] = all_runs.count()
        out["reused"] = all_runs.filter(reused_from__isnull=False).count()
        # 3. the comparison page
        from django.contrib.auth import get_user_model

        from core.models import Membership

        user = get_user_model().objects.create_user("bench", password="bench-pass-1")  # noqa: S106
        Membership.objects.create(project=project, user=user, role="viewer")
        client = Client()
        client.force_login(user)
        # The process's first request imports the URLconf and compiles templates: not the page's cost.
        assert client.get(f"/p/{project.pk}/experiments/").status_code == 200

        def page(ids: list[int]) -> dict[str, Any]:
            """The comparison page of IDS: its first load (the comparisons computed and kept), then
            five loads of the kept ones; server time and queries of each."""
            Comparison.objects.all().delete()
            url = f"/p/{project.pk}/experiments/compare?ids={','.join(map(str, ids))}"
            times, queries = [], []
            for i in range(6):
                profiler = None
                if args.profile and i == 0:
                    import cProfile

                    profiler = cProfile.Profile()
                    profiler.enable()
                with CaptureQueriesContext(connection) as q:
                    t = time.perf_counter()
                    resp = client.get(url)
                    times.append((time.perf_counter() - t) * 1000)
                if profiler is not None:
                    import pstats

                    profiler.disable()
                    pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
                assert resp.status_code == 200, resp.content[:500]
                queries.append(len(q.captured_queries))
            return {
                "first_ms": round(times[0], 1),
                "kept_median_ms": round(statistics.median(times[1:]), 1),
                "first_queries": queries[0],
                "kept_queries": queries[-1],
            }

        out["compare_2"] = page([control.pk, exps[0].pk])
        out["compare_5"] = page([control.pk, *[e.pk for e in exps]])
        fid = selectors.compare(project=project, experiment_ids=[control.pk, exps[0].pk])["rows"][0]
        out["drop_tool_outputs_fidelity"] = next(
            m["verdict"] for m in fid["comparison"]["metrics"] if m["name"] == "fact_fidelity"
        )
        out["targets"] = {
            "planning_4_strategies_le_2s": out["plan_total_s"] <= 2.0,
            "calls_equal_distinct_requests": out["model_calls"] == out["distinct_requests"],
            "compare_le_300ms": out["compare_2"]["first_ms"] <= 300,
        }
        n, k = args.items, args.samples
        rows = [
            ("plan 4 strategies", f"{n} items x {k} samples", f"{out['plan_total_s']} s", "<= 2 s"),
            ("start them (plan, store, enqueue)", "", f"{out['start_total_s']} s", "reported"),
            (
                "model calls / distinct requests",
                f"{out['runs']} runs, {out['reused']} reused",
                f"{out['model_calls']} / {out['distinct_requests']}",
                "equal",
            ),
        ]
        for label, key in (
            ("as saved against one strategy", "compare_2"),
            ("as saved against four", "compare_5"),
        ):
            c = out[key]
            rows.append(
                (
                    f"comparison page, {label}",
                    f"{n} items",
                    f"first {c['first_ms']} ms ({c['first_queries']} queries), then {c['kept_median_ms']} ms "
                    f"({c['kept_queries']} queries)",
                    "<= 300 ms",
                )
            )
        print("| figure | load | value | target |")
        print("|---|---|---|---|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
        print(json.dumps(out))
    finally:
        connection.creation.destroy_test_db(connection.settings_dict["NAME"], verbosity=0)


if __name__ == "__main__":
    main()
