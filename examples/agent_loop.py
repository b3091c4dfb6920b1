"""A small but real travel-booking agent loop, observed with the ctxobs SDK's explicit API.

    python examples/agent_loop.py --base-url http://127.0.0.1:8011/v1 --model gemma-3-270m \
        --sessions 2 --turns 8            # snapshots go to CTXOBS_ENDPOINT with CTXOBS_API_KEY

What it does per user message, one model call = one ctxobs turn (snapshot):
- tools run by the agent's router (search_flights and get_weather fail now and then with an
  error result, which stays in history — the "echo chamber" the dashboard should make visible);
- memory recall by keyword overlap (scored, ranked, injected above a threshold; a stale
  memory is flagged) and retrieval of policy documents;
- blocks system / tools / constraints / memory / summary / history / retrieval /
  tool_results / user, in that order (stable first);
- after each call the agent reads `t.watermark()`: from 60% it drops old tool outputs from
  history (kept in an archive, referenced by id), from 70% it folds older history into a
  rolling summary; each step is recorded as a compression event on the next turn. The
  agent budgets a 1,280-token window (`--context-window`) so that two rounds of flight
  search results pass 70% by the third message, as a long conversation would on a real
  window;
- the reply must be JSON {"action", "reply", "flight_id"}: a structure layer (JSON, required
  fields, enum) and a semantic layer (known flight, within budget, sane reply length);
  on failure the error is fed back and the call retried (at most twice), then a fixed
  fallback reply is used.

The model is meant to be Gemma 3 270M, a tiny *base* model served by llama-cpp-python:
its output is mostly junk, which the validators and the fallback absorb. `run()` is the
entry point for start-up scripts.

The agent talks to the model the way a replay does: chat completions, the messages the blocks
make, and exactly the parameters it records on the turn (`t.request()`): temperature
(`--temperature`, 0 by default), max_tokens, response_format (`--no-json-mode` leaves it out),
and a seed only when it samples (temperature > 0). "Replay as saved" of one of its turns on the
same local server therefore sends the same request, and at temperature 0 gets the same answer.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import openai  # noqa: E402

import ctxobs  # noqa: E402
from ctxobs import tokens  # noqa: E402

log = logging.getLogger("agent_loop")

SYSTEM_PROMPT = (
    "You are Tern, a travel-booking assistant. Help the user find and book flights. "
    "Always answer with one JSON object and nothing else: "
    '{"action": "answer" | "search" | "book", "reply": "<text for the user>", '
    '"flight_id": "<id from the search results or null>"}. '
    "Never invent flight ids. Respect every constraint in the constraints list. "
    "Keep replies under 60 words."
)
TOOLS_TEXT = (
    "Tools the agent runs for you (results appear as tool results):\n"
    "- search_flights(origin, destination, day): flights with id, departure time and price in EUR\n"
    "- get_weather(city): today's forecast\n"
    "- book_flight(flight_id): books a seat, returns a booking reference"
)
DOCS = {
    "doc-baggage": "Baggage policy: one cabin bag up to 8 kg and one checked bag up to 23 kg are included.",
    "doc-visa": "Visa: travellers to China from the EU may enter visa-free for up to 30 days for tourism.",
    "doc-cancel": "Cancellation: free within 24 hours of booking; afterwards a fee of 80 EUR applies.",
    "doc-seats": "Seats: window and aisle seats can be chosen for free at booking time.",
}
MEMORIES = [
    ("m-1", "Home airport is Berlin BER", False),
    ("m-2", "Prefers a window seat on long flights", False),
    ("m-3", "Vegetarian meals", False),
    ("m-4", "Lives in Munich", True),  # outdated: moved to Berlin
    ("m-5", "Travels for work to Guangzhou each spring", False),
]
USER_SCRIPT = [
    "I want to fly from Berlin to Guangzhou on Friday, budget 600 euros.",
    "Please remember that I prefer a window seat.",
    "Search the flights again please, and avoid red-eye flights.",
    "What's the weather in Guangzhou?",
    "Book the cheapest flight that fits.",
    "What is the baggage allowance?",
    "Do I need a visa for China?",
    "Change it to Saturday instead and search again.",
    "Book the cheapest one on Saturday.",
    "What happens if I cancel?",
]
FALLBACK = {
    "action": "answer",
    "reply": "Sorry, I could not complete that. A human agent will follow up.",
    "flight_id": None,
}
WORD = re.compile(r"[a-z0-9]+")


class ModelServerUnreachable(RuntimeError):
    pass


# --- the agent's world: tools, memory, retrieval -------------------------------------


@dataclass
class Session:
    session_id: str
    rng: random.Random  # the world: tool failures, flights, recall noise
    model_rng: random.Random  # sampling seeds, so retries do not change what the tools return
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: str = ""
    constraints: list[str] = field(default_factory=list)
    memories: list[tuple[str, str, bool]] = field(default_factory=lambda: list(MEMORIES))
    last_flights: list[dict[str, Any]] = field(default_factory=list)
    archive: dict[str, str] = field(default_factory=dict)  # externalised originals by id
    pending_compression: list[dict[str, Any]] = field(default_factory=list)
    tool_seq: int = 0


def _words(text: str) -> set[str]:
    return set(WORD.findall(text.lower()))


def search_flights(s: Session, day: str) -> dict[str, Any]:
    if s.rng.random() < 0.3:
        return {"status": "error", "message": "upstream timeout after 30s", "retry": True}
    flights = []
    for _ in range(5):
        hour = s.rng.choice([1, 7, 9, 13, 18, 23])
        flights.append(
            {
                "id": f"CA{s.rng.randint(100, 999)}",
                "day": day,
                "dep": f"{hour:02d}:15",
                "duration": f"{s.rng.randint(11, 19)}h{s.rng.randint(0, 59):02d}",
                "stops": s.rng.choice([0, 1, 1, 2]),
                "fare": s.rng.choice(["economy light", "economy", "economy flex"]),
                "price": s.rng.randint(380, 820),
                "red_eye": hour < 5 or hour >= 23,
            }
        )
    s.last_flights = flights
    return {"status": "ok", "flights": flights}


def get_weather(s: Session, city: str) -> dict[str, Any]:
    if s.rng.random() < 0.3:
        return {"status": "error", "message": "weather service returned 503", "retry": True}
    return {"status": "ok", "city": city, "forecast": s.rng.choice(["sunny 29C", "showers 24C", "humid 31C"])}


def book_flight(s: Session) -> dict[str, Any]:
    options = [f for f in s.last_flights if not f["red_eye"]] or s.last_flights
    if not options:
        return {"status": "error", "message": "no search results to book from"}
    cheapest = min(options, key=lambda f: f["price"])
    if s.rng.random() < 0.2:
        return {"status": "error", "message": f"seat unavailable on {cheapest['id']}"}
    return {"status": "ok", "booking": f"BK{s.rng.randint(10000, 99999)}", "flight_id": cheapest["id"]}


def run_tools(s: Session, text: str) -> list[tuple[str, str, dict[str, Any]]]:
    """The agent's router: which tools this user message needs (the base model cannot call them)."""
    low = text.lower()
    day = "saturday" if "saturday" in low else "friday"
    calls: list[tuple[str, str, dict[str, Any]]] = []

    def call(name: str, result: dict[str, Any]) -> None:
        s.tool_seq += 1
        calls.append((f"t{s.tool_seq}", name, result))

    if any(w in low for w in ("search", "fly", "flight")) and "book" not in low:
        call("search_flights", search_flights(s, day))
    if "weather" in low:
        call("get_weather", get_weather(s, "Guangzhou"))
    if "book" in low:
        if not s.last_flights:
            call("search_flights", search_flights(s, day))
        call("book_flight", book_flight(s))
    return calls


def update_constraints(s: Session, text: str) -> None:
    low = text.lower()
    m = re.search(r"budget (\d+)", low)
    if m:
        s.constraints = [c for c in s.constraints if not c.startswith("budget")] + [
            f"budget <= {m.group(1)} EUR"
        ]
    if "red-eye" in low and "no red-eye flights" not in s.constraints:
        s.constraints.append("no red-eye flights")
    if "window seat" in low and "window seat" not in s.constraints:
        s.constraints.append("window seat")


def recall(s: Session, text: str, t: ctxobs.Turn) -> list[dict[str, Any]]:
    """Score memories by word overlap; inject those over the threshold (top 3)."""
    q = _words(text) | {"trip", "flight"}
    scored = []
    for mid, mem, stale in s.memories:
        w = _words(mem)
        scored.append((len(q & w) / max(1, len(w)) + s.rng.random() * 0.1, mid, mem, stale))
    scored.sort(reverse=True)
    injected = []
    for rank, (score, mid, mem, stale) in enumerate(scored[:4], start=1):
        inject = score >= 0.15 and rank <= 3 and not stale
        t.recall(
            mid,
            score=round(score, 3),
            injected=inject,
            block="memory" if inject else None,
            channel="keyword",
            rank=rank,
            stale=stale,
            preview=mem[:60],
        )
        if inject:
            injected.append({"role": "user", "content": f"[memory {mid}] {mem}"})
    if "remember" in text.lower():
        s.memories.append((f"m-{len(s.memories) + 1}", text.strip(), False))
    return injected


def retrieve(text: str) -> list[dict[str, Any]]:
    q = _words(text)
    ranked = sorted(DOCS.items(), key=lambda kv: -len(q & _words(kv[1])))
    return [
        {"role": "user", "content": f"[{doc_id}] {body}"} for doc_id, body in ranked[:2] if q & _words(body)
    ]


# --- compression -------------------------------------------------------------------------


def compress(s: Session, watermark: float, counter: tokens.Counter) -> None:
    """Apply the watermark tiers to the session state; events go on the next turn's snapshot."""

    def size(msgs: list[dict[str, Any]]) -> int:
        return tokens.cached_messages_tokens(msgs, counter)

    if watermark >= 0.60:
        before = size(s.history)
        dropped = []
        for i, m in enumerate(s.history[:-2]):
            if m["content"].startswith("[tool ") and " output dropped" not in m["content"]:
                ref_id = m["content"].split("]", 1)[0][6:].split()[0]
                s.archive[ref_id] = m["content"]
                s.history[i] = {
                    "role": "user",
                    "content": f"[tool {ref_id} output dropped; original at archive/{ref_id}]",
                }
                dropped.append(ref_id)
        if dropped:
            s.pending_compression.append(
                {
                    "strategy": "drop_tool_output",
                    "block": "history",
                    "tokens_before": before,
                    "tokens_after": size(s.history),
                    "watermark": round(watermark, 4),
                    "items": dropped,
                    "ref": "archive/",
                }
            )
    if watermark >= 0.70 and len(s.history) > 4:
        old, keep = s.history[:-4], s.history[-4:]
        before = size(old) + (size([{"role": "user", "content": s.summary}]) if s.summary else 0)
        facts = [
            m["content"][:90] for m in old if m["role"] == "user" and not m["content"].startswith("[tool")
        ]
        errors = [m["content"][:70] for m in old if '"status": "error"' in m["content"]]
        ref = f"archive/history-{len(s.archive)}"
        s.archive[ref] = json.dumps(old)
        s.summary = " | ".join(
            filter(
                None,
                [
                    s.summary,
                    "User asked: " + "; ".join(facts),
                    ("Tool errors: " + "; ".join(errors)) if errors else "",
                ],
            )
        )[-900:]
        s.history = keep
        s.pending_compression.append(
            {
                "strategy": "rolling_summary",
                "block": "history",
                "tokens_before": before,
                "tokens_after": size([{"role": "user", "content": s.summary}]),
                "watermark": round(watermark, 4),
                "items": [f"msg-{i}" for i in range(len(old))],
                "ref": ref,
            }
        )


# --- validation --------------------------------------------------------------------------


def validate(text: str | None, s: Session) -> tuple[dict[str, Any] | None, list[tuple[str, str, str, str]]]:
    """(parsed reply or None, failures as (layer, check, code, message))."""
    try:
        data = json.loads(text or "")
    except ValueError:
        return None, [("structure", "json_parse", "E_JSON", "the reply is not valid JSON")]
    if not isinstance(data, dict):
        return None, [("structure", "json_object", "E_NOT_OBJECT", "the reply must be a JSON object")]
    missing = [f for f in ("action", "reply") if f not in data]
    if missing:
        return None, [("structure", "required_fields", "E_MISSING_FIELD", f"missing: {', '.join(missing)}")]
    if data["action"] not in ("answer", "search", "book"):
        return None, [("structure", "action_enum", "E_BAD_ENUM", "action must be answer, search or book")]
    failures = []
    reply = data.get("reply")
    if not isinstance(reply, str) or not reply.strip() or len(reply) > 500:
        failures.append(("semantic", "reply_text", "E_BAD_REPLY", "reply must be 1-500 characters of text"))
    if data["action"] == "book":
        known = {f["id"]: f for f in s.last_flights}
        flight = known.get(str(data.get("flight_id")))
        if flight is None:
            failures.append(
                ("semantic", "known_flight", "E_UNKNOWN_FLIGHT", "flight_id is not in the results")
            )
        else:
            budget = next((int(c.split()[2]) for c in s.constraints if c.startswith("budget")), None)
            if budget is not None and flight["price"] > budget:
                failures.append(
                    ("semantic", "budget", "E_OVER_BUDGET", f"price {flight['price']} > {budget}")
                )
    return (data if not failures else None), failures


# --- the loop ----------------------------------------------------------------------------


def check_model_server(base_url: str) -> None:
    try:
        r = httpx.get(base_url.rstrip("/") + "/models", timeout=5.0)
        r.raise_for_status()
    except httpx.HTTPError as exc:
        raise ModelServerUnreachable(
            f"the model server at {base_url} is not reachable ({type(exc).__name__}). Start it first, e.g. "
            "the local Gemma 3 270M server (llama-cpp-python), or pass --base-url."
        ) from None


def user_turn(
    obs: ctxobs.Client,
    llm: openai.OpenAI,
    s: Session,
    text: str,
    *,
    model: str,
    window: int,
    max_tokens: int,
    stats: dict[str, Any],
    temperature: float = 0.0,
    json_mode: bool = True,
) -> None:
    counter = tokens.get_counter(model=model)
    update_constraints(s, text)
    tool_calls = run_tools(s, text)
    tool_msgs = [
        {"role": "user", "content": f"[tool {cid} {name}] {json.dumps(result)}"}
        for cid, name, result in tool_calls
    ]
    docs = retrieve(text)
    feedback: list[dict[str, Any]] = []
    final: dict[str, Any] | None = None
    for attempt in range(1, 4):
        # Exactly what the call sends, recorded on the turn: a replay sends it again.
        params: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens}
        if json_mode:
            params["response_format"] = {"type": "json_object"}
        if temperature > 0:
            # Sampling: a seed per call, drawn apart from the world, so that it can be replayed.
            params["seed"] = s.model_rng.randint(0, 2**31 - 1)
        with obs.turn(
            session_id=s.session_id,
            agent="tern-travel",
            model=model,
            context_window=window,
            params=params,
            tags={"example": "agent_loop"},
        ) as t:
            t.block("system", [{"role": "system", "content": SYSTEM_PROMPT}], pinned=True)
            t.block("tools", [{"role": "user", "content": TOOLS_TEXT}], kind="tools")
            if s.constraints:
                t.block(
                    "constraints",
                    [
                        {
                            "role": "user",
                            "content": f"Constraints (v{len(s.constraints)}): {'; '.join(s.constraints)}",
                        }
                    ],
                    pinned=True,
                )
            memory = recall(s, text, t) if attempt == 1 else []
            if memory:
                t.block("memory", memory)
            if s.summary:
                t.block(
                    "summary",
                    [{"role": "user", "content": f"[summary of earlier turns] {s.summary}"}],
                    compressed=True,
                )
            if s.history:
                t.block("history", s.history)
            if docs:
                t.block("retrieval", docs)
            if tool_msgs:
                t.block("tool_results", tool_msgs)
            t.block("user", [{"role": "user", "content": text}, *feedback])
            for ev in s.pending_compression:
                t.compression(**ev)
                stats["compressions"] += 1
            s.pending_compression = []
            try:
                resp = llm.chat.completions.create(**t.request())
                out_text = resp.choices[0].message.content
                t.output(resp)
            except openai.APIError as exc:
                log.warning("agent.model_call_failed session=%s error=%s", s.session_id, type(exc).__name__)
                out_text = None
                t.output(None)
            stats["calls"] += 1
            parsed, failures = validate(out_text, s)
            layers_failed = {f[0] for f in failures}
            for layer in ("structure", "semantic"):
                if layer == "semantic" and "structure" in layers_failed:
                    break
                fails = [f for f in failures if f[0] == layer]
                for _, check, code, message in fails:
                    t.validation(layer, check, passed=False, code=code, message=message, attempt=attempt)
                if not fails:
                    t.validation(layer, "all", passed=True, attempt=attempt)
            if parsed is None and attempt == 3:
                t.fallback()
                stats["fallbacks"] += 1
            watermark = t.watermark()
        if parsed is not None:
            final = parsed
            break
        stats["retries"] += attempt < 3
        # The error goes back to the model; the failed output is not kept in history.
        feedback = [
            {
                "role": "user",
                "content": f"Your last reply was rejected ({failures[0][2]}: "
                f"{failures[0][3]}). Answer again with the JSON object only.",
            }
        ]
    reply = final or FALLBACK
    s.history.append({"role": "user", "content": text})
    s.history.extend(tool_msgs)
    s.history.append({"role": "assistant", "content": json.dumps(reply)})
    log.info(
        "agent.turn session=%s watermark=%.2f tier=%s valid=%s",
        s.session_id,
        watermark,
        ctxobs.wire.tier_for(watermark),
        final is not None,
    )
    compress(s, watermark, counter)


def run(
    base_url: str,
    model: str,
    endpoint: str | None,
    api_key: str | None,
    sessions: int = 2,
    turns: int = 8,
    seed: int = 7,
    *,
    context_window: int = 1280,
    max_tokens: int = 64,
    spool_path: str | None = None,
    temperature: float = 0.0,
    json_mode: bool = True,
) -> dict[str, Any]:
    """Run SESSIONS scripted conversations of TURNS user messages; returns counts and SDK stats.

    Raises ModelServerUnreachable (with a message saying what to start) if BASE_URL does not answer.
    """
    check_model_server(base_url)
    obs = ctxobs.Client(endpoint, api_key, agent="tern-travel", spool_path=spool_path)
    llm = openai.OpenAI(
        base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "local"), timeout=300, max_retries=1
    )
    rng = random.Random(seed)
    stats: dict[str, Any] = {
        "sessions": sessions, "calls": 0, "retries": 0, "fallbacks": 0, "compressions": 0
    }
    started = time.perf_counter()
    for n in range(sessions):
        s = Session(
            session_id=f"tern-{seed}-{n}-{rng.randint(1000, 9999)}",
            rng=random.Random(rng.random()),
            model_rng=random.Random(rng.random()),
        )
        script = USER_SCRIPT[:]
        for i in range(turns):
            user_turn(
                obs,
                llm,
                s,
                script[i % len(script)],
                model=model,
                window=context_window,
                max_tokens=max_tokens,
                stats=stats,
                temperature=temperature,
                json_mode=json_mode,
            )
    obs.flush(timeout=30)
    stats["seconds"] = round(time.perf_counter() - started, 1)
    stats["sdk"] = obs.stats()
    return stats


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", default=os.environ.get("AGENT_BASE_URL", "http://127.0.0.1:8011/v1"))
    p.add_argument("--model", default=os.environ.get("AGENT_MODEL", "gemma-3-270m"))
    p.add_argument("--endpoint", default=os.environ.get("CTXOBS_ENDPOINT"))
    p.add_argument("--api-key", default=os.environ.get("CTXOBS_API_KEY"))
    p.add_argument("--sessions", type=int, default=2)
    p.add_argument("--turns", type=int, default=8)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--context-window", type=int, default=1280)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument(
        "--temperature", type=float, default=0.0,
        help="sampling temperature (0: greedy, and a replay as saved reproduces each answer)",
    )
    p.add_argument(
        "--json-mode", action=argparse.BooleanOptionalAction, default=True,
        help="ask for a JSON object (response_format); the server then constrains every token, "
        "which is several times slower on a small CPU",
    )
    p.add_argument("--spool", help="spool directory for snapshots the server cannot take yet")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if not args.endpoint:
        print("note: CTXOBS_ENDPOINT is not set; the agent runs but no snapshots are sent", file=sys.stderr)
    try:
        result = run(
            args.base_url,
            args.model,
            args.endpoint,
            args.api_key,
            args.sessions,
            args.turns,
            args.seed,
            context_window=args.context_window,
            max_tokens=args.max_tokens,
            spool_path=args.spool,
            temperature=args.temperature,
            json_mode=args.json_mode,
        )
    except ModelServerUnreachable as exc:
        print(f"agent_loop: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
