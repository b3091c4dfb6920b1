"""What evaluating a check costs per answer (experiments.checks).

    .venv/bin/python bench/checks.py [--answers 300] [--seed 7]

ANSWERS realistic answers of about 2,000 characters: travel-assistant prose with numbers,
names, dates and a closing question (for the text, number, regex, length and repeat-question
checks), and order JSON of the same size, half of it in a ```json fence (for the JSON checks);
each answer also carries one tool call. Every check is validated once (regexes and schema
validators are compiled then, as in production), then evaluated on each answer built afresh,
so what an answer computes once for all checks (its parsed JSON, numbers, sentences) is paid
by every check here. Reported: microseconds per answer per check, median and p95, against the
target of <= 1 ms for the text, regex and JSON checks; the consistent checks (replay.measures'
distances on the whole text, a 1,536-dimension embedding for the semantic one) are reported
for scale. Also: all checks on one answer together (evaluate_all). The last line printed is
one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments import checks  # noqa: E402
from experiments.checks import Answer, CheckContext  # noqa: E402

TARGET_US = 1000.0
CITIES = ["Guangzhou", "Shenzhen", "Chengdu", "Hangzhou", "Xi'an", "Kunming", "Xiamen", "Guilin"]
AIRLINES = ["China Southern", "Air China", "Hainan Airlines", "Sichuan Airlines"]
HOTELS = ["Garden Hotel", "White Swan", "Hilton Tianhe", "Canton Tower Inn", "Pearl River Suites"]


def prose(rng: random.Random, chars: int = 2000) -> str:
    """A travel assistant's answer: options with prices, dates, codes, then a question."""
    city = rng.choice(CITIES)
    parts = [f"Here is what I found for your trip to {city} from May {rng.randint(1, 9)} to "
             f"May {rng.randint(10, 20)}, within your budget of {rng.choice([600, 800, 1200])} EUR."]
    while sum(len(p) for p in parts) < chars - 220:
        parts.append(rng.choice([
            f"{rng.choice(AIRLINES)} flight CZ{rng.randint(100, 999)} leaves at {rng.randint(6, 22)}:"
            f"{rng.choice(['05', '30', '45'])} and costs {rng.randint(300, 2500):,} CNY return, "
            f"{rng.randint(2, 4)} hours door to door.",
            f"The {rng.choice(HOTELS)} is {rng.uniform(0.5, 9.5):.1f} km from the centre, rated "
            f"{rng.uniform(3.5, 5.0):.1f} stars, {rng.randint(60, 240)} EUR per night with breakfast.",
            f"Booking reference PNR-{rng.randint(10000, 99999)} holds the seats until "
            f"{rng.randint(12, 23)}:00 today; after that the fare may change by up to 15%.",
            f"Temperatures in {city} will be around {rng.randint(18, 31)} degrees, with rain on "
            f"{rng.randint(1, 3)} of the days, so pack a light jacket.",
            "Metro line 3 connects the airport with the hotel district in about 40 minutes for 7 CNY.",
        ]))
    parts.append(rng.choice([
        "Would you like me to book the first option?",
        "What is your budget for the hotel?",
        "Which of these flights works best for you?",
        "Shall I hold the room as well?",
    ]))
    return " ".join(parts)


def order_json(rng: random.Random, chars: int = 2000) -> str:
    items = []
    order: dict[str, Any] = {"order": {"id": f"A-{rng.randint(10, 99)}", "currency": "EUR", "items": items,
                                       "paid": rng.random() < 0.8}, "total": 0}
    while len(json.dumps(order)) < chars - 120:
        qty, price = rng.randint(1, 5), round(rng.uniform(3, 250), 2)
        items.append({"sku": f"KB-{rng.randint(1, 9)}", "name": rng.choice(HOTELS + AIRLINES), "qty": qty,
                      "unit_price": price, "note": "gift wrap" if rng.random() < 0.3 else ""})
        order["total"] = round(order["total"] + qty * price, 2)
    text = json.dumps(order, indent=None)
    return f"Here is the order:\n```json\n{text}\n```" if rng.random() < 0.5 else text


def tool_call(rng: random.Random) -> dict[str, Any]:
    args = {"destination": rng.choice(CITIES), "passengers": rng.randint(1, 4), "filters": {"direct": True}}
    fn = {"name": "search_flights", "arguments": json.dumps(args)}
    return {"id": "call_1", "type": "function", "function": fn}


SCHEMA = {
    "type": "object",
    "required": ["order", "total"],
    "properties": {
        "total": {"type": "number", "minimum": 0},
        "order": {
            "type": "object",
            "required": ["id", "items"],
            "properties": {
                "id": {"type": "string", "pattern": "^A-\\d+$"},
                "items": {"type": "array", "items": {
                    "type": "object",
                    "required": ["sku", "qty"],
                    "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
                }},
            },
        },
    },
}

# (label, definition, answers it runs on, held to the 1 ms target)
CASES: list[tuple[str, dict[str, Any], str, bool]] = [
    ("fact text", {"type": "fact", "value": "China  Southern"}, "prose", True),
    ("fact text (absent)", {"type": "fact", "value": "Lufthansa"}, "prose", True),
    ("fact regex", {"type": "fact", "pattern": r"PNR-\d{5}", "flags": "i"}, "prose", True),
    ("fact number", {"type": "fact", "value": 1200, "tolerance": 50}, "prose", True),
    ("fact json_path", {"type": "fact", "path": "$.order.items[0].qty", "value": 2}, "json", True),
    ("valid_json", {"type": "constraint", "rule": "valid_json"}, "json", True),
    ("valid_json (prose)", {"type": "constraint", "rule": "valid_json"}, "prose", True),
    ("json_schema", {"type": "constraint", "rule": "json_schema", "schema": SCHEMA}, "json", True),
    ("not_contains text", {"type": "constraint", "rule": "not_contains", "text": "Expedia"}, "prose", True),
    ("not_contains pattern", {"type": "constraint", "rule": "not_contains", "pattern": r"\bguarantee[ds]?\b",
                              "flags": "i"}, "prose", True),
    ("max_chars", {"type": "constraint", "rule": "max_chars", "limit": 1800}, "prose", True),
    ("max_tokens", {"type": "constraint", "rule": "max_tokens", "limit": 400}, "prose", True),
    ("calls_tool", {"type": "constraint", "rule": "calls_tool", "tool": "search_flights",
                    "arguments": {"filters": {"direct": True}}}, "prose", True),
    ("no_tool", {"type": "constraint", "rule": "no_tool", "tool": "cancel_booking"}, "prose", True),
    ("no_repeat_question", {"type": "no_repeat_question", "slots": [
        {"name": "destination", "value": "Guangzhou"}, {"name": "budget", "value": "600 EUR"},
        {"name": "travel_date", "value": "May 3"}, {"name": "email", "value": "ana@example.com"},
        {"name": "phone", "value": "+86 138 0000 0000"}]}, "prose", True),
    ("consistent edit", {"type": "consistent", "measure": "edit"}, "prose", False),
    ("consistent task", {"type": "consistent", "measure": "task"}, "prose", False),
    ("consistent semantic", {"type": "consistent", "measure": "semantic"}, "prose", False),
]


def embedding(rng: random.Random, dims: int = 1536) -> list[float]:
    return [rng.gauss(0.0, 1.0) for _ in range(dims)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--answers", type=int, default=300, help="answers per check (default 300)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    corpus = {
        "prose": [(prose(rng), [tool_call(rng)]) for _ in range(args.answers)],
        "json": [(order_json(rng), [tool_call(rng)]) for _ in range(args.answers)],
    }
    reference = prose(rng)
    context = CheckContext(reference_text=reference, threshold=0.3, reference_embedding=embedding(rng),
                           answer_embedding=embedding(rng))
    defined = [(label, checks.validate_check(raw), kind, held) for label, raw, kind, held in CASES]
    mean_chars = statistics.mean(len(t) for t, _ in corpus["prose"] + corpus["json"])

    rows: list[dict[str, Any]] = []
    for label, check, kind, held in defined:
        answers = corpus[kind]
        for text, calls in answers[:20]:  # warm-up: first-call costs (encoder load) are not per-answer costs
            checks.evaluate(check, Answer(text, calls), context)
        times, verdicts = [], []
        for text, calls in answers:
            t0 = time.perf_counter_ns()
            result = checks.evaluate(check, Answer(text, calls), context)
            times.append((time.perf_counter_ns() - t0) / 1000.0)
            verdicts.append(result.passed)
        rows.append({
            "check": label, "answers": kind, "median_us": statistics.median(times),
            "p95_us": percentile(times, 0.95), "held": held,
            "passed": sum(1 for v in verdicts if v is True), "n": len(verdicts),
        })

    together = []
    all_checks = [c for _, c, kind, _ in defined if kind == "prose" and c["type"] != "consistent"]
    for text, calls in corpus["prose"]:
        t0 = time.perf_counter_ns()
        checks.evaluate_all(all_checks, Answer(text, calls), context)
        together.append((time.perf_counter_ns() - t0) / 1000.0)

    print(f"experiments.checks: {args.answers} answers per check, mean {mean_chars:,.0f} characters\n")
    print("| check | answers | passed | median µs | p95 µs | target |")
    print("|---|---|---|---:|---:|---|")
    failing = []
    for r in rows:
        if r["held"]:
            ok = r["p95_us"] <= TARGET_US
            target = "≤ 1 ms ✓" if ok else "≤ 1 ms ✗"
            if not ok:
                failing.append(r["check"])
        else:
            target = "—"
        print(f"| {r['check']} | {r['answers']} | {r['passed']}/{r['n']} | {r['median_us']:,.1f} | "
              f"{r['p95_us']:,.1f} | {target} |")
    print(f"| all {len(all_checks)} prose checks (evaluate_all) | prose | — | "
          f"{statistics.median(together):,.1f} | {percentile(together, 0.95):,.1f} | — |")
    print()
    print("target met" if not failing else f"target missed: {', '.join(failing)}")
    print(json.dumps({
        "answers": args.answers,
        "checks": {
            r["check"]: {"median_us": round(r["median_us"], 1), "p95_us": round(r["p95_us"], 1)} for r in rows
        },
        "evaluate_all_median_us": round(statistics.median(together), 1),
        "target_met": not failing,
    }))


if __name__ == "__main__":
    main()
