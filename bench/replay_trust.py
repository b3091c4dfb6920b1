"""Can a replay verdict be trusted? Planted-fact turns against the real local model.

    .venv/bin/python bench/replay_trust.py [--turns 24] [--ablations 8] [--samples 1]

The last line printed is one JSON object. Uses the PostgreSQL of DATABASE_URL (or the embedded
one) on a throwaway database of its own (created and dropped here). It starts the embedded local
model (replay.localmodel: Gemma 3 270M behind llama-cpp-python's server) and builds TURNS
planted-fact turns itself: a fact (a code, a number, a reference) that lives only in the memory
block, a question about it in the user block, and irrelevant tool definitions, history and a
retrieved document around them. Each turn is ingested through the HTTP API, then two jobs run
through the replay service functions (replay_job_create, and replay_run_execute for each run, as
the worker runs them, one after another):

- a leave-one-out job (SAMPLES baseline samples, one variant per block);
- an attribution job (SAMPLES baseline samples, ABLATIONS random ablations of the blocks besides
  the system prompt and the question).

It reports, over the turns whose baseline answer contains the fact:
- `without_memory_lost_fact`: the share where the answer without memory no longer has it (>= 95%);
- `irrelevant_moves_less`: the share where removing each irrelevant block (tools, history,
  retrieval) moves the answer less than removing memory (combined distance, replay.measures;
  >= 90%);
- `attribution_memory_first_alone`: the share where attribution ranks memory first, with a
  score above every other block's (>= 80%); and the same for leave-one-out's ranking;
- model calls per job, and the baseline-reuse share (reported by the jobs' estimate once the
  service reuses baselines; null until then).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

PARAMS = {"max_tokens": 16}
SYSTEM = "You are a helpful assistant. Answer the user's question in one short sentence."
FACTS = [
    ("locker code", "4417"),
    ("gate number", "B27"),
    ("booking reference", "QX7PLM"),
    ("seat number", "14C"),
    ("hotel room number", "1208"),
    ("door PIN", "5093"),
    ("parking spot", "P-316"),
    ("ticket number", "88214"),
    ("order number", "A-90331"),
    ("flight number", "LH782"),
    ("table number", "42"),
    ("badge number", "7781"),
]
PHRASES = [
    "Memory: the user's {what} is {value}.",
    "Memory (saved preference): {what} = {value}.",
]
QUESTIONS = [
    "What is my {what}? Answer with it.",
    "Remind me of my {what}, please.",
]
TOOLS = [
    "Tools available: get_weather(city) returns today's forecast; convert_currency(amount, from, to).",
    "Tools available: search_restaurants(area, cuisine); set_alarm(time).",
]
HISTORY = [
    [
        {"role": "user", "content": "Is it going to rain today?"},
        {"role": "assistant", "content": "No, it should stay dry and sunny all day."},
    ],
    [
        {"role": "user", "content": "Can you recommend a good book?"},
        {"role": "assistant", "content": "Try a classic novel; many readers enjoy them."},
    ],
]
RETRIEVAL = [
    "Document: the gym opens at six in the morning. The pool closes at nine. Towels are at the desk.",
    "Document: the museum has three floors. Guided tours start every hour. Photos are allowed.",
    "Document: the bakery sells bread and cakes. It is closed on Mondays.",
]
IRRELEVANT = ("tools", "history", "retrieval")


def planted_turn(i: int) -> tuple[dict[str, Any], str]:
    """Turn I (deterministic): its wire snapshot and the planted fact's value."""
    what, value = FACTS[i % len(FACTS)]
    n = i // len(FACTS)

    def blk(key: str, kind: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        return {"key": key, "kind": kind, "messages": messages}

    blocks = [
        blk("system", "system", [{"role": "system", "content": SYSTEM}]),
        blk("tools", "tools", [{"role": "system", "content": TOOLS[i % len(TOOLS)]}]),
        blk(
            "memory", "memory", [{"role": "system", "content": PHRASES[n % 2].format(what=what, value=value)}]
        ),
        blk("history", "history", HISTORY[(i + n) % len(HISTORY)]),
        blk("retrieval", "retrieval", [{"role": "system", "content": RETRIEVAL[i % len(RETRIEVAL)]}]),
        blk("user", "user", [{"role": "user", "content": QUESTIONS[(i + n) % 2].format(what=what)}]),
    ]
    wire = {
        "snapshot_id": str(uuid.uuid4()),
        "session_id": f"planted-{i:02d}",
        "turn": 1,
        "agent": "bench",
        "ts": (datetime.now(UTC) - timedelta(minutes=i)).isoformat(),
        "model": {"name": "gpt-4o-mini", "context_window": 8000},
        "params": {"temperature": 0},
        "blocks": blocks,
        "output": {"text": f"Your {what} is {value}.", "tool_calls": [], "finish_reason": "stop"},
    }
    return wire, value


def ingest(client: Client, key: str, wire: dict[str, Any]) -> None:
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


def run_job(project: Any, endpoint: Any, spec: dict[str, Any]) -> tuple[Any, dict[str, Any], int]:
    """Create the job, execute each run as the worker would, return (job, its turn's results, calls)."""
    from replay.models import ReplayRun
    from replay.selectors import job_results
    from replay.services.jobs import replay_job_create
    from replay.services.runs import replay_run_execute

    job = replay_job_create(project=project, endpoint=endpoint, spec=spec)
    for run_id in ReplayRun.objects.filter(job=job).order_by("pk").values_list("pk", flat=True):
        replay_run_execute(run_id=run_id)
    job.refresh_from_db()
    calls = sum(ReplayRun.objects.filter(job=job).values_list("model_calls", flat=True))
    (turn,) = job_results(job=job)["turns"]
    return job, turn, calls


def measure_turn(project: Any, endpoint: Any, wire: dict[str, Any], value: str, args: Any) -> dict[str, Any]:
    from replay import measures

    sid = wire["snapshot_id"]
    common = {"snapshot_id": sid, "samples": args.samples, "params": PARAMS}
    loo_job, loo, loo_calls = run_job(project, endpoint, {"kind": "loo", **common})
    att_job, att_turn, att_calls = run_job(
        project, endpoint, {"kind": "attribution", "ablations": args.ablations, "seed": 0, **common}
    )
    base_texts = [r.output_text for r in loo["baseline_runs"]]
    effects = {e["variant"].target_key: e.get("effect") for e in loo["variants"]}
    combined = {k: measures.combined_distance(e) for k, e in effects.items() if e}
    without_memory = next(e for e in loo["variants"] if e["variant"].target_key == "memory")
    att = att_turn["attribution"]
    ranking = loo.get("ranking") or []
    loo_top_alone = bool(
        ranking
        and ranking[0] == "memory"
        and (
            len(ranking) < 2 or measures.rank_key(effects["memory"]) > measures.rank_key(effects[ranking[1]])
        )
    )
    # Leave-one-out over the same sources attribution ablates (system prompt and question fixed).
    src_rank = [k for k in ranking if k not in ("system", "user")]
    loo_src_top_alone = bool(
        src_rank
        and src_rank[0] == "memory"
        and (
            len(src_rank) < 2
            or measures.rank_key(effects["memory"]) > measures.rank_key(effects[src_rank[1]])
        )
    )
    return {
        "session": wire["session_id"],
        "fact": value,
        "baseline": base_texts,
        "baseline_has_fact": all(value.lower() in t.lower() for t in base_texts) and bool(base_texts),
        "without_memory": without_memory["run"].output_text if without_memory.get("run") else None,
        "without_memory_lost_fact": bool(
            without_memory.get("run") and value.lower() not in without_memory["run"].output_text.lower()
        ),
        "distance": {k: round(v, 4) for k, v in combined.items()},
        "irrelevant_moves_less": all(combined.get(k, 1.0) < combined.get("memory", 0.0) for k in IRRELEVANT),
        "irrelevant_moves_less_each": {
            k: combined.get(k, 1.0) < combined.get("memory", 0.0) for k in IRRELEVANT
        },
        "loo_ranking": ranking,
        "loo_memory_first_alone": loo_top_alone,
        "loo_sources_memory_first_alone": loo_src_top_alone,
        "attribution": [(s["key"], round(s["score"], 4)) for s in att["sources"]],
        "attribution_memory_first_alone": bool(att["top"] == "memory" and att["top_alone"]),
        "attribution_r2_holdout": (att["fit"] or {}).get("r2_holdout"),
        "calls": {"loo": loo_calls, "attribution": att_calls},
        "estimate": {"loo": loo_job.estimate, "attribution": att_job.estimate},
    }


def share(rows: list[dict[str, Any]], key: str) -> float | None:
    return round(sum(1 for r in rows if r[key]) / len(rows), 4) if rows else None


def summarize(rows: list[dict[str, Any]], args: Any) -> dict[str, Any]:
    had = [r for r in rows if r["baseline_has_fact"]]
    loo_calls = [r["calls"]["loo"] for r in rows]
    att_calls = [r["calls"]["attribution"] for r in rows]
    result = {
        "turns": len(rows),
        "baseline_had_fact": len(had),
        "without_memory_lost_fact": share(had, "without_memory_lost_fact"),
        "irrelevant_moves_less": share(had, "irrelevant_moves_less"),
        "attribution_memory_first_alone": share(had, "attribution_memory_first_alone"),
        "loo_memory_first_alone": share(had, "loo_memory_first_alone"),
        "loo_sources_memory_first_alone": share(had, "loo_sources_memory_first_alone"),
        "calls_per_job": {
            "loo": sum(loo_calls) / len(loo_calls) if loo_calls else None,
            "attribution": sum(att_calls) / len(att_calls) if att_calls else None,
        },
        "baseline_reuse_share": None,
        "samples": args.samples,
        "ablations": args.ablations,
        "max_tokens": PARAMS["max_tokens"],
        "targets": {
            "without_memory_lost_fact": 0.95,
            "irrelevant_moves_less": 0.9,
            "attribution_memory_first_alone": 0.8,
        },
    }
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=24)
    ap.add_argument("--ablations", type=int, default=8)
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--log", default="", help="append each turn's row (JSON lines) to this file")
    ap.add_argument("--summarize", default="", help="only summarise the rows of this --log file")
    args = ap.parse_args()
    if args.summarize:
        rows = [json.loads(line) for line in Path(args.summarize).read_text().splitlines() if line.strip()]
        print(json.dumps(summarize(rows, args)), flush=True)
        return

    from core.models import Project
    from core.services import project_create
    from ingest import signals
    from replay import localmodel
    from replay.models import ModelEndpoint
    from replay.services import model_endpoints

    started = time.monotonic()
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = f"ctxobs_bench_trust_{os.getpid()}"
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    server = None
    rows: list[dict[str, Any]] = []
    log = open(args.log, "a") if args.log else None  # noqa: SIM115
    try:
        signals.snapshots_stored.receivers.clear()
        signals.snapshots_stored.sender_receivers_cache.clear()
        # The verdicts here need no embeddings: the server skips them, one call less per run.
        server = localmodel.start(embeddings=False)
        localmodel.wait_ready(server.base_url, timeout=180, process=server.process)
        project, key = project_create(name="bench-trust", scopes=("ingest", "replay"))
        Project.objects.filter(pk=project.pk).update(allow_private_endpoints=True)
        project.refresh_from_db()
        endpoint = model_endpoints.local_endpoint_register(project=project, base_url=server.base_url)
        ModelEndpoint.objects.filter(pk=endpoint.pk).update(embeddings_model="")
        endpoint.refresh_from_db()
        client = Client()
        for i in range(args.turns):
            wire, value = planted_turn(i)
            ingest(client, key, wire)
            row = measure_turn(project, endpoint, wire, value, args)
            rows.append(row)
            line = json.dumps(row)
            print(line, flush=True)
            if log:
                log.write(line + "\n")
                log.flush()
    finally:
        if server is not None:
            localmodel.stop(server)
        connection.creation.destroy_test_db(old_name, verbosity=0)
        if log:
            log.close()
    result = summarize(rows, args)
    result["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
