"""Can a replay verdict be trusted? Planted-fact turns against the real local model.

    .venv/bin/python bench/replay_trust.py [--design issue|rich] [--turns 24] [--samples 3]
        [--ablations 32] [--temperature T] [--no-attribution] [--log F]
    .venv/bin/python bench/replay_trust.py --summarize F     # the summary of a (partial) log

The last line printed is one JSON object. Uses the PostgreSQL of DATABASE_URL (or the embedded
one) on a throwaway database of its own (created and dropped here). It starts the embedded local
model (replay.localmodel: Gemma 3 270M, a small *base* model, behind llama-cpp-python's server)
and builds TURNS planted-fact turns itself, of one of two designs (--design):

- `issue` (the default; issue 12's turns): five blocks: a system prompt with two worked examples
  of the answer's shape (about other details, other values), tool definitions, a memory block
  holding the fact (a number; it is nowhere else), a short two-message history, and the question
  ("What is my locker code?"). The irrelevant blocks: tools and history.
- `rich`: eight blocks: the same five, plus a retrieved document, a tool result and a
  conversation summary (irrelevant too: five irrelevant blocks).

The "agent" of these turns talked to the server's completions API with ctxobs's transcript of
its messages and its stops (`agent_call`): a base model continues a transcript ending in
"Assistant:" with the answer, where the server's chat format (llama-2's, the GGUF has no
template) makes it ramble. The endpoint is therefore set to the completions mode, and each row
checks that the baseline's request body is byte for byte the agent's (`request_as_sent`).

Each turn is ingested through the HTTP API, then jobs run through the replay service functions
(replay_job_create, and replay_run_execute for each run, as the worker runs them):

- a leave-one-out job (SAMPLES baseline samples, and SAMPLES answers without each block);
- an attribution job with as many ablations as leave-one-out made variant calls, at least the
  fewest an attribution takes (8), over the sources between the system prompt and the question
  (3 or 6): attribution at leave-one-out's cost;
- an attribution job with ABLATIONS ablations (the product's default is 32), unless that is the
  same count.
Later jobs reuse the turn's baseline samples (same endpoint, model and request).

With --no-attribution only the leave-one-out runs; --temperature overrides the turns' saved 0.

It reports, over the turns whose baseline samples all state the fact (as a whole token):
- `without_memory_changed`: the share where the verdict on "without memory" is "changed"
  (replay.measures.compare; target >= 95%);
- `irrelevant_within_noise_per_block`: per (turn, irrelevant block), the share whose verdict is
  "within noise" (target >= 90%); split by whether the answers without the block kept the fact
  in every sample (`irrelevant_within_noise_where_fact_kept`) or lost it in every one
  (`irrelevant_changed_where_fact_lost`: a lost fact should be "changed");
- `without_memory_changed_where_majority`: the same verdict on turns whose baseline states the
  fact in most samples but not all;
- `without_memory_lost_fact`: the share where the answer without memory no longer states it
  (target >= 95%);
- `irrelevant_moves_less`: the share where removing each irrelevant block (tools and history;
  rich: also retrieval, tool_results, summary) moves the answer less than removing memory
  (target >= 90%).
  "Moves" is the product's measures, task measure first (replay.measures): the pair (task
  distance: the share of the baseline's key facts the answer lost, edit distance: the mean of
  the character- and word-level normalised edit distances, mean over the baseline samples),
  compared lexicographically. Also per (turn, block) pair, and by the combined distance that
  ranks leave-one-out (`_combined`);
- `attribution_memory_first_alone` / `attribution_equal_memory_first_alone`: the share where
  attribution ranks memory first with a score above every other source's (target >= 80%); and
  leave-one-out's: memory first alone over all blocks, and over the same sources;
- model calls per job, and `baseline_reuse_share`: of the answers the jobs needed, the share a
  reused baseline sample gave without a model call.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
# A base model continues text: the system prompt shows it the answer's shape (two worked
# examples about other details), so that it states a value it finds in memory. The examples'
# values (43, 118) are not any turn's fact: the fact lives only in the memory block.
SYSTEM = (
    "You are a helpful assistant. You answer the user's questions about their own details from "
    "your memory notes, with the value only.\n"
    "Example memory: the user's shoe size is 43.\n"
    "Example question: What is my shoe size?\n"
    "Example answer: 43.\n"
    "Example memory: the user's bus line is 118.\n"
    "Example question: What is my bus line?\n"
    "Example answer: 118."
)
# Digits: Gemma 3 270M copies a number from its context far more reliably than a mixed code.
FACTS = [
    ("locker code", "4417"),
    ("hotel room number", "1208"),
    ("door PIN", "5093"),
    ("ticket number", "88214"),
    ("table number", "42"),
    ("badge number", "7781"),
    ("seat number", "14C"),
    ("gate number", "27"),
    ("booking reference", "730519"),
    ("parking spot", "316"),
    ("order number", "90331"),
    ("flight number", "782"),
    ("bike lock code", "2864"),
    ("apartment number", "305"),
    ("phone extension", "6172"),
    ("membership number", "55906"),
    ("mailbox number", "219"),
    ("alarm code", "8350"),
    ("platform number", "9"),
    ("desk number", "611"),
    ("library card number", "40317"),
    ("cabin number", "7264"),
    ("customer number", "193028"),
    ("jersey number", "23"),
]
QUESTION = "What is my {what}?"
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
TOOL_RESULTS = [
    "Tool result (get_weather): sunny, light wind.",
    "Tool result (search_restaurants): a noodle bar and a pizzeria nearby.",
]
SUMMARY = [
    "Summary of the conversation so far: the user asked about the weather.",
    "Summary of the conversation so far: the user asked for a book to read.",
]
# The blocks of each design's turns, in context order. "rich": eight blocks, a leave-one-out of
# 8 calls, as many as an attribution job of 8 ablations (the fewest it takes) over its six sources.
DESIGNS = {
    "issue": ("system", "tools", "memory", "history", "user"),
    "rich": ("system", "tools", "memory", "history", "retrieval", "tool_results", "summary", "user"),
}
RELEVANT = ("system", "memory", "user")


def irrelevant(design: str) -> tuple[str, ...]:
    """The blocks of DESIGN's turns that have nothing to do with the question."""
    return tuple(k for k in DESIGNS[design] if k not in RELEVANT)


def planted_turn(i: int, design: str = "issue") -> tuple[dict[str, Any], str]:
    """Turn I of DESIGN (deterministic): its wire snapshot and the planted fact's value."""
    what, value = FACTS[i % len(FACTS)]

    def blk(key: str, kind: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        return {"key": key, "kind": kind, "messages": messages}

    def sys(text: str) -> list[dict[str, Any]]:
        return [{"role": "system", "content": text}]

    blocks = [
        blk("system", "system", sys(SYSTEM)),
        blk("tools", "tools", sys(TOOLS[i % len(TOOLS)])),
        blk("memory", "memory", sys(f"Memory: the user's {what} is {value}.")),
        blk("history", "history", HISTORY[(i // 2) % len(HISTORY)]),
        blk("retrieval", "retrieval", sys(RETRIEVAL[i % len(RETRIEVAL)])),
        blk("tool_results", "tool_results", sys(TOOL_RESULTS[(i // 3) % len(TOOL_RESULTS)])),
        blk("summary", "summary", sys(SUMMARY[(i // 2) % len(SUMMARY)])),
        blk("user", "user", [{"role": "user", "content": QUESTION.format(what=what)}]),
    ]
    blocks = [b for b in blocks if b["key"] in DESIGNS[design]]
    wire = {
        "snapshot_id": str(uuid.uuid4()),
        "session_id": f"planted-{i:02d}",
        "turn": 1,
        "agent": "bench",
        "ts": (datetime.now(UTC) - timedelta(minutes=i)).isoformat(),
        "model": {"name": "gemma-3-270m", "context_window": 4096},
        "params": {"temperature": 0, **PARAMS},
        "blocks": blocks,
        "output": {"text": f"{value}.", "tool_calls": [], "finish_reason": "stop"},
    }
    return wire, value


def agent_call(wire: dict[str, Any]) -> Any:
    """The call the bench's "agent" made for its turn: the completions API of the local server,
    with ctxobs's transcript of its messages (replay.ablation.render_transcript) and its stops,
    and its saved parameters (what a replay in completions mode sends, byte for byte)."""
    from replay import ablation
    from replay.services.model_endpoints import LOCAL_MODEL_NAME

    request = ablation.render_request(wire["blocks"], wire["params"])
    return ablation.build_call(request=request, model=LOCAL_MODEL_NAME, mode="completions")


def has_fact(text: str | None, value: str) -> bool:
    """Whether TEXT states VALUE as a whole token (42 is not in 1420)."""
    return re.search(rf"(?<![\w]){re.escape(value.lower())}(?![\w])", (text or "").lower()) is not None


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


def run_job(project: Any, endpoint: Any, spec: dict[str, Any]) -> tuple[Any, dict[str, Any], dict[str, int]]:
    """Create the job, execute each run as the worker would; (job, its turn's results, its
    counts: calls made, runs, baseline samples reused)."""
    from replay.models import ReplayRun
    from replay.selectors import job_results
    from replay.services.jobs import replay_job_create
    from replay.services.runs import replay_run_execute

    job = replay_job_create(project=project, endpoint=endpoint, spec=spec)
    runs = ReplayRun.objects.filter(job=job)
    for run_id in runs.filter(status=ReplayRun.Status.PENDING).order_by("pk").values_list("pk", flat=True):
        replay_run_execute(run_id=run_id)
    job.refresh_from_db()
    counts = {
        "calls": sum(runs.values_list("model_calls", flat=True)),
        "runs": runs.count(),
        "reused": runs.filter(reused_from__isnull=False).count(),
        "estimate_calls": int(job.estimate["model_calls"]),
        "estimate_reused": int(job.estimate.get("reused") or 0),
    }
    (turn,) = job_results(job=job)["turns"]
    return job, turn, counts


def moved(eff: dict[str, Any] | None) -> tuple[float, float]:
    """How far an answer moved from the baseline, task measure first: (task distance (the share
    of the baseline's key facts it lost; 0 when the baseline states none), edit distance)."""
    if not eff or eff.get("distance") is None:
        return (1.0, 1.0)
    return (float(eff.get("task_distance") or 0.0), float(eff["distance"]))


def first_alone(ranking: list[str], effects: dict[str, Any], key: str = "memory") -> bool:
    from replay import measures

    return bool(
        ranking
        and ranking[0] == key
        and (len(ranking) < 2 or measures.rank_key(effects[key]) > measures.rank_key(effects[ranking[1]]))
    )


def attribution_row(turn: dict[str, Any]) -> dict[str, Any]:
    att = turn["attribution"]
    return {
        "scores": [(x["key"], round(x["score"], 4)) for x in att["sources"]],
        "memory_first_alone": bool(att["top"] == "memory" and att["top_alone"]),
        "r2_holdout": (att["fit"] or {}).get("r2_holdout"),
        "measured": att["measured"],
    }


def measure_turn(project: Any, endpoint: Any, wire: dict[str, Any], value: str, args: Any) -> dict[str, Any]:
    from replay import measures
    from replay.models import ReplayRun

    sid = wire["snapshot_id"]
    common: dict[str, Any] = {"snapshot_id": sid, "samples": args.samples}
    if args.temperature is not None:
        common["params"] = {"temperature": args.temperature}
    loo_job, loo, loo_n = run_job(project, endpoint, {"kind": "loo", **common})
    variants = [e for e in loo["variants"] if not e["variant"].is_baseline]
    # Attribution for as many model calls as leave-one-out made for its variants.
    equal = max(8, sum(1 for e in variants if not e.get("no_change")))
    if args.no_attribution:
        att_eq_job = att_job = None
        att_eq = att_turn = None
        att_eq_n = att_n = {"calls": 0, "runs": 0, "reused": 0}
    else:
        att_eq_job, att_eq, att_eq_n = run_job(
            project, endpoint, {"kind": "attribution", "ablations": equal, "seed": 0, **common}
        )
    if args.no_attribution:
        pass
    elif args.ablations == equal:
        # The same job again would only answer from the same ablations.
        att_job, att_turn, att_n = att_eq_job, att_eq, {**att_eq_n, "calls": 0, "runs": 0, "reused": 0}
    else:
        att_job, att_turn, att_n = run_job(
            project, endpoint, {"kind": "attribution", "ablations": args.ablations, "seed": 0, **common}
        )
    base_runs = list(loo["baseline_runs"])
    base_texts = [r.output_text for r in base_runs]
    sent = agent_call(wire)
    first = ReplayRun.objects.filter(job=loo_job, variant__is_baseline=True, sample=0).first()
    effects = {e["variant"].target_key: e.get("effect") for e in variants}
    combined = {k: measures.combined_distance(e) for k, e in effects.items() if e}
    without_memory = next(e for e in variants if e["variant"].target_key == "memory")
    ranking = loo.get("ranking") or []
    src_rank = [k for k in ranking if k not in ("system", "user")]
    mem = moved(effects.get("memory"))
    less = {k: moved(effects.get(k)) < mem for k in irrelevant(args.design)}
    verdicts = {e["variant"].target_key: e.get("verdict") for e in variants}
    without_memory_runs = [
        r for r in without_memory["runs"] if r.status == ReplayRun.Status.DONE
    ]
    return {
        "session": wire["session_id"],
        "design": args.design,
        "fact": value,
        "baseline": base_texts,
        "baseline_has_fact": bool(base_texts) and all(has_fact(t, value) for t in base_texts),
        "request_as_sent": bool(
            first and first.request_path == sent.path and first.request_body == sent.body
        ),
        "without_memory": without_memory["run"].output_text if without_memory.get("run") else None,
        "without_memory_lost_fact": bool(
            without_memory.get("run") and not has_fact(without_memory["run"].output_text, value)
        ),
        "answers": {e["variant"].target_key: e["run"].output_text for e in variants if e.get("run")},
        "answers_all": {
            e["variant"].target_key: [r.output_text for r in e["runs"] if r.status == ReplayRun.Status.DONE]
            for e in variants
        },
        "moved": {k: [round(x, 4) for x in moved(e)] for k, e in effects.items()},
        "distance": {k: round(v, 4) for k, v in combined.items()},
        "irrelevant_moves_less": all(less.values()),
        "irrelevant_moves_less_each": less,
        "irrelevant_moves_less_combined": all(
            combined.get(k, 1.0) < combined.get("memory", 0.0) for k in irrelevant(args.design)
        ),
        "without_memory_answers": [r.output_text for r in without_memory_runs],
        "without_memory_lost_fact_all": bool(without_memory_runs)
        and not any(has_fact(r.output_text, value) for r in without_memory_runs),
        "verdicts": verdicts,
        "verdict_words": {e["variant"].target_key: e.get("verdict_words") for e in variants},
        "p": {e["variant"].target_key: e.get("p") for e in variants},
        "without_memory_changed": verdicts.get("memory") == measures.CHANGED,
        "irrelevant_within_noise_each": {
            k: verdicts.get(k) == measures.WITHIN_NOISE for k in irrelevant(args.design)
        },
        "irrelevant_within_noise": all(
            verdicts.get(k) == measures.WITHIN_NOISE for k in irrelevant(args.design)
        ),
        "loo_ranking": ranking,
        "loo_memory_first_alone": first_alone(ranking, effects),
        "loo_sources_memory_first_alone": first_alone(src_rank, effects),
        "attribution": attribution_row(att_turn) if att_turn else None,
        "attribution_memory_first_alone": bool(att_turn and attribution_row(att_turn)["memory_first_alone"]),
        "attribution_equal": {**attribution_row(att_eq), "ablations": equal} if att_eq else {"ablations": 0},
        "attribution_equal_memory_first_alone": bool(
            att_eq and attribution_row(att_eq)["memory_first_alone"]
        ),
        "jobs": {"loo": loo_n, "attribution_equal": att_eq_n, "attribution": att_n},
        "estimate": {
            "loo": loo_job.estimate,
            "attribution_equal": att_eq_job.estimate if att_eq_job else None,
            "attribution": att_job.estimate if att_job else None,
        },
        "temperature": args.temperature,
    }


def share(rows: list[dict[str, Any]], key: str) -> float | None:
    return round(sum(1 for r in rows if r[key]) / len(rows), 4) if rows else None


def _mean(values: list[int]) -> float | None:
    return round(sum(values) / len(values), 2) if values else None


def summarize(rows: list[dict[str, Any]], args: Any) -> dict[str, Any]:
    # A log's rows say their design (rows written before there were two are "rich").
    designs = {r.get("design", "rich") for r in rows} or {args.design}
    if len(designs) > 1:
        raise SystemExit(f"rows of more than one design: {sorted(designs)}")
    (design,) = designs
    blocks = irrelevant(design)
    had = [r for r in rows if r["baseline_has_fact"]]
    kinds = ("loo", "attribution_equal", "attribution")
    # A job not run (the default count equal to leave-one-out's) counts in no average.
    calls = {k: [r["jobs"][k]["calls"] for r in rows if r["jobs"][k]["runs"]] for k in kinds}
    reused = sum(r["jobs"][k]["reused"] for r in rows for k in kinds)
    made = sum(sum(v) for v in calls.values())
    pairs = [(r, k) for r in had for k in blocks]
    partial = [
        r
        for r in rows
        if not r["baseline_has_fact"]
        and 2 * sum(1 for t in r["baseline"] if has_fact(t, r["fact"])) > len(r["baseline"])
    ]
    # Turns run with --no-attribution have no attribution to count.
    attributed = [r for r in had if r["jobs"]["attribution_equal"]["runs"]]
    # Rows logged before the distribution verdicts have none.
    verdicts = all("verdicts" in r for r in rows)
    temperatures = sorted({str(r.get("temperature")) for r in rows})
    result = {
        "temperature": temperatures,
        "design": design,
        "turns": len(rows),
        "baseline_had_fact": len(had),
        "request_as_sent": sum(1 for r in rows if r["request_as_sent"]),
        "without_memory_lost_fact": share(had, "without_memory_lost_fact"),
        # The verdicts (replay.measures.compare) on the same turns.
        "without_memory_changed": share(had, "without_memory_changed") if verdicts else None,
        "without_memory_changed_where_lost": (
            share([r for r in had if r["without_memory_lost_fact_all"]], "without_memory_changed")
            if verdicts
            else None
        ),
        "irrelevant_within_noise_per_block": (
            round(sum(1 for r, k in pairs if r["irrelevant_within_noise_each"][k]) / len(pairs), 4)
            if pairs and verdicts
            else None
        ),
        "irrelevant_within_noise_by_block": (
            {k: sum(1 for r in had if r["irrelevant_within_noise_each"][k]) for k in blocks}
            if verdicts
            else None
        ),
        "irrelevant_within_noise": share(had, "irrelevant_within_noise") if verdicts else None,
        # Turns whose baseline states the fact in most but not all samples (the case of
        # one sample missing it): how often the verdict still calls "without memory" changed.
        "baseline_fact_majority_not_all": len(partial),
        "without_memory_changed_where_majority": (
            share(partial, "without_memory_changed") if verdicts else None
        ),
        # The same pairs split by what the answers without the block did with the fact: kept in
        # every answer (the verdict should say "within noise") or lost in every one ("changed").
        **(_by_fact(had, blocks) if verdicts else {}),
        "verdict_counts": _verdict_counts(had, blocks) if verdicts else None,
        "irrelevant_moves_less": share(had, "irrelevant_moves_less"),
        "irrelevant_moves_less_per_block": (
            round(sum(1 for r, k in pairs if r["irrelevant_moves_less_each"][k]) / len(pairs), 4)
            if pairs
            else None
        ),
        "irrelevant_moves_less_by_block": {
            k: sum(1 for r in had if r["irrelevant_moves_less_each"][k]) for k in blocks
        },
        "irrelevant_moves_less_combined": share(had, "irrelevant_moves_less_combined"),
        "attribution_memory_first_alone": share(attributed, "attribution_memory_first_alone"),
        "attribution_equal_memory_first_alone": share(attributed, "attribution_equal_memory_first_alone"),
        "loo_memory_first_alone": share(had, "loo_memory_first_alone"),
        "loo_sources_memory_first_alone": share(had, "loo_sources_memory_first_alone"),
        "calls_per_job": {k: _mean(v) for k, v in calls.items()},
        "runs_per_job": {
            k: _mean([r["jobs"][k]["runs"] for r in rows if r["jobs"][k]["runs"]]) for k in kinds
        },
        # Of the answers the three jobs needed, the share a reused baseline sample gave without a call.
        "baseline_reuse_share": round(reused / (made + reused), 4) if made + reused else None,
        "baseline_samples_reused": reused,
        "model_calls": made,
        "samples": args.samples,
        "ablations": args.ablations,
        "ablations_equal": sorted({r["attribution_equal"]["ablations"] for r in rows}),
        "max_tokens": PARAMS["max_tokens"],
        "targets": {
            "without_memory_lost_fact": 0.95,
            "without_memory_changed": 0.95,
            "irrelevant_within_noise_per_block": 0.9,
            "irrelevant_moves_less": 0.9,
            "attribution_memory_first_alone": 0.8,
        },
    }
    return result


def rejudge(row: dict[str, Any]) -> dict[str, Any]:
    """ROW with its verdicts recomputed by replay.measures from its logged answers, as
    job_results judges them (no tool calls, no embeddings: the bench's server has none)."""
    from replay import measures

    base = list(row["baseline"])
    noise = measures.noise_floor(base)
    verdicts, words = {}, {}
    for key in row["verdicts"]:
        answers = _answers_of(row, key)
        if not answers:
            continue
        eff = measures.effect(answers[0], base, noise, texts=answers, label=f"without {key}")
        verdicts[key], words[key] = eff["verdict"], eff["verdict_words"]
    blocks = irrelevant(row.get("design", "rich"))
    return {
        **row,
        "verdicts": verdicts,
        "verdict_words": words,
        "without_memory_changed": verdicts.get("memory") == measures.CHANGED,
        "irrelevant_within_noise_each": {k: verdicts.get(k) == measures.WITHIN_NOISE for k in blocks},
        "irrelevant_within_noise": all(verdicts.get(k) == measures.WITHIN_NOISE for k in blocks),
    }


def _answers_of(row: dict[str, Any], key: str) -> list[str]:
    """A block's variant answers; rows logged before `answers_all` have the first one only (at
    temperature 0 every sample is the same answer)."""
    if "answers_all" in row:
        return list(row["answers_all"].get(key) or [])
    return [row["answers"][key]] if key in row.get("answers", {}) else []


def _by_fact(rows: list[dict[str, Any]], blocks: tuple[str, ...]) -> dict[str, Any]:
    kept = lost = kept_within = lost_changed = 0
    for r in rows:
        for k in blocks:
            answers = _answers_of(r, k)
            if answers and all(has_fact(a, r["fact"]) for a in answers):
                kept += 1
                kept_within += int(r["verdicts"].get(k) == "within noise")
            elif answers and not any(has_fact(a, r["fact"]) for a in answers):
                lost += 1
                lost_changed += int(r["verdicts"].get(k) == "changed")
    return {
        "irrelevant_fact_kept_pairs": kept,
        "irrelevant_within_noise_where_fact_kept": round(kept_within / kept, 4) if kept else None,
        "irrelevant_fact_lost_pairs": lost,
        "irrelevant_changed_where_fact_lost": round(lost_changed / lost, 4) if lost else None,
    }


def _verdict_counts(rows: list[dict[str, Any]], blocks: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Per block (memory and the irrelevant ones): how many turns got each verdict."""
    out: dict[str, dict[str, int]] = {}
    for k in ("memory", *blocks):
        counts: dict[str, int] = {}
        for r in rows:
            v = str(r["verdicts"].get(k))
            counts[v] = counts.get(v, 0) + 1
        out[k] = counts
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--design",
        choices=sorted(DESIGNS),
        default="issue",
        help="issue: the issue's five-block turns; rich: eight blocks, five of them irrelevant",
    )
    ap.add_argument("--turns", type=int, default=24)
    ap.add_argument("--first", type=int, default=0, help="the first planted turn's number")
    ap.add_argument("--ablations", type=int, default=32)
    ap.add_argument("--samples", type=int, default=3, help="baseline samples; each variant gets as many")
    ap.add_argument(
        "--temperature", type=float, default=None, help="a job override; by default the turn's saved 0"
    )
    ap.add_argument(
        "--no-attribution",
        action="store_true",
        help="leave-one-out only (its verdicts); skip the two attribution jobs",
    )
    ap.add_argument("--log", default="", help="append each turn's row (JSON lines) to this file")
    ap.add_argument("--summarize", default="", help="only summarise the rows of this --log file")
    ap.add_argument(
        "--rejudge",
        action="store_true",
        help="with --summarize: the verdicts again from the logged answers, by the current code",
    )
    args = ap.parse_args()
    if args.summarize:
        rows = [json.loads(line) for line in Path(args.summarize).read_text().splitlines() if line.strip()]
        if args.rejudge:
            rows = [rejudge(r) for r in rows]
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
        # The agent talked to the completions API (agent_call): the replay does too.
        ModelEndpoint.objects.filter(pk=endpoint.pk).update(
            embeddings_model="", mode=ModelEndpoint.Mode.COMPLETIONS
        )
        endpoint.refresh_from_db()
        client = Client()
        for i in range(args.first, args.first + args.turns):
            wire, value = planted_turn(i, args.design)
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
    result["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
