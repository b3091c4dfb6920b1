"""Incidents on a generated fleet: do alerts group into what was planted, how many messages would a
channel get per hour, and what grouping costs the evaluation.

    python bench/incidents.py [--sessions 200] [--noise 30] [--seed 27]

Uses DATABASE_URL / REDIS_URL, or the embedded PostgreSQL and Redis. Run it on a database of its
own: `incidents_sweep` is global (it auto-resolves every project's quiet incidents), and a beat on
a shared database would resolve the bench's incidents with the real clock.

A simulated day (two days ago, UTC) of SESSIONS sessions of four agents. Five incidents are
planted, each one cause hitting several sessions of one agent within about 20 minutes:

  P1 travel-bot   tool results from `search` overflow the window (14 sessions, 14:05)
  P2 support-bot  retrieved `kb` text jumps the watermark, raising several rules at once (8, 09:30)
  P3 code-bot     outputs keep failing validation (10, 17:40)
  P4 research-bot compression storm on the history (9, 11:15)
  P5 code-bot     `repo_map` grows to a third of the window, below the compress tier (7, 20:50)

NOISE other sessions (random agent, random time) carry one isolated condition each (a history
spike, a validation blip, recall misses, a small compression storm, one big tool result); the rest
are healthy. Snapshots go through `snapshot_batch_ingest` (with its receivers: the outbox rows are
written as in production) one batch per simulated minute, `alerts_evaluate` runs in process on
each batch with the project's default rules, and `incidents_sweep(now=...)` runs every simulated
minute, as beat does, so incidents auto-resolve and reopen on the simulated clock. A webhook
channel (default limit: 20 messages an hour) is configured; no worker runs, so deliveries stay
pending: each Delivery row is dated by the simulated minute that created it, and the channel's
hourly limit is applied to those dates by a model of `_rate_claim` / `held_release`.

An incident pages only once it is confirmed (a critical alert, alerts from 2 sessions, alerts on 3
turns of a session, or alert activity lasting 15 minutes: the defaults of IncidentPolicy); until
then it is pending and silent, and one that goes quiet first resolves as transient. The bench counts
confirmed incidents against the plants (the target: at most 1.5x, every plant found in a confirmed
incident) and reports the pending and transient ones apart.

Grouping cost: `incidents_group` and `incidents_touch` are wrapped, in this process only, by a
timer (wall, this process's CPU, the PostgreSQL backend's CPU from /proc); the same three are
taken around every `alerts_evaluate` and every `snapshot_batch_ingest` call, so grouping is
reported as a share of evaluation and against ingest CPU (as bench/alerts_outbox.py measures it).

The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.urls import get_resolver  # noqa: E402

from alerts import kinds as K  # noqa: E402
from alerts.models import Alert, AlertRule, Delivery, Incident  # noqa: E402
from alerts.services import channels as alert_channels  # noqa: E402
from alerts.services import evaluation as alert_evaluation  # noqa: E402
from alerts.services.incidents import incidents_sweep  # noqa: E402
from alerts.services.rules import default_rules_create  # noqa: E402
from core.models import Project  # noqa: E402
from core.services import project_create  # noqa: E402
from ingest.services import snapshot_batch_ingest  # noqa: E402

WINDOW = 10_000
USABLE = WINDOW - int(WINDOW * 0.15)
TICK = timedelta(seconds=60)
# After the last turn: long enough for every incident to go quiet and resolve (the quiet period
# grows with each reopen, up to quiet_max_factor times).
TAIL = timedelta(seconds=K.INCIDENT_DEFAULTS.quiet_seconds * K.INCIDENT_DEFAULTS.quiet_max_factor + 300)
DAY0 = (datetime.now(UTC) - timedelta(days=2)).replace(hour=0, minute=0, second=0, microsecond=0)
COMPRESS_AT = 0.58  # healthy sessions compress their history here, below the compress tier (0.70)

# agent -> (tool_results key, retrieval key)
AGENTS: dict[str, tuple[str, str]] = {
    "travel-bot": ("search", "guides"),
    "support-bot": ("ticket_lookup", "kb"),
    "code-bot": ("run_tests", "docs"),
    "research-bot": ("fetch", "papers"),
}


@dataclass(frozen=True)
class Plant:
    label: str
    agent: str
    kind: str
    sessions: int
    at: timedelta  # start of the window, from DAY0
    what: str


PLANTS = (
    Plant(
        "P1",
        "travel-bot",
        "tool_overflow",
        14,
        timedelta(hours=14, minutes=5),
        "tool results from `search` overflow the window",
    ),
    Plant(
        "P2",
        "support-bot",
        "retrieval_jump",
        8,
        timedelta(hours=9, minutes=30),
        "retrieved `kb` jumps the watermark (tier crossings + spike + block share at one turn)",
    ),
    Plant(
        "P3", "code-bot", "validation", 10, timedelta(hours=17, minutes=40), "outputs keep failing validation"
    ),
    Plant(
        "P4", "research-bot", "storm", 9, timedelta(hours=11, minutes=15), "compression storm on the history"
    ),
    Plant(
        "P5",
        "code-bot",
        "block_share",
        7,
        timedelta(hours=20, minutes=50),
        "`repo_map` grows to a third of the window",
    ),
)
PLANT_SPREAD_S = 20 * 60  # the planted hits of one incident fall within this many seconds
NOISE_KINDS = ("history_spike", "validation_blip", "recall_miss", "noise_storm", "big_tool")


@dataclass
class Session:
    sid: str
    agent: str
    label: str  # a plant label, "noise:<kind>" or "healthy"
    kind: str
    start: datetime
    gap_s: int
    turns: int
    hit: int | None
    snaps: list[dict[str, Any]] = field(default_factory=list)


def _block(key: str, kind: str, tokens: int, content: str) -> dict[str, Any]:
    role = {"system": "system", "tool_results": "tool", "history": "user"}.get(kind, "user")
    msg: dict[str, Any] = {"role": role, "content": content}
    if role == "tool":
        msg["tool_call_id"] = "c1"
    return {"key": key, "kind": kind, "tokens": tokens, "messages": [msg]}


def build(s: Session, rng: random.Random) -> None:
    """The snapshots of S: a healthy agent (history grows and is compressed once it nears the
    compress tier, small tool results and retrieval, recall mostly hits, validation mostly
    passes), with S's planted or noise condition from turn S.hit on."""
    tool_key, retr_key = AGENTS[s.agent]
    hist = rng.randint(300, 900)
    for t in range(s.turns):
        ts = s.start + timedelta(seconds=s.gap_s * t + rng.randint(0, 10))
        hist += rng.randint(80, 220)
        tool, retr = rng.randint(200, 900), rng.randint(200, 600)
        comp: list[dict[str, Any]] = []
        if 700 + hist + tool + retr > COMPRESS_AT * USABLE:
            before = 700 + hist + tool + retr
            comp.append(
                {
                    "strategy": "rolling_summary",
                    "block": "history",
                    "tokens_before": hist,
                    "tokens_after": int(hist * 0.3),
                    "watermark": round(before / USABLE, 3),
                }
            )
            hist = int(hist * 0.3)
        failed = rng.random() < 0.03
        miss = t % 5 == 4
        extra: list[dict[str, Any]] = []
        d = t - s.hit if s.hit is not None else -1
        k = s.kind
        if k == "tool_overflow" and 0 <= d <= 2:
            tool = 4600
        elif k == "tool_overflow" and d == 3:
            comp.append(
                {
                    "strategy": "truncate",
                    "block": tool_key,
                    "tokens_before": 4600,
                    "tokens_after": tool,
                    "watermark": 0.9,
                }
            )
        elif k == "retrieval_jump" and 0 <= d <= 2:
            retr = 4200
        elif k == "retrieval_jump" and d == 3:
            comp.append(
                {
                    "strategy": "truncate",
                    "block": retr_key,
                    "tokens_before": 4200,
                    "tokens_after": retr,
                    "watermark": 0.9,
                }
            )
        elif k == "validation" and 0 <= d < 8:
            failed = True
        elif k == "storm" and 0 <= d < 4:
            pumped = hist + 1500
            comp.append(
                {
                    "strategy": "rolling_summary",
                    "block": "history",
                    "tokens_before": pumped,
                    "tokens_after": int(pumped * 0.35),
                    "watermark": 0.6,
                }
            )
            hist = int(pumped * 0.35)
        elif k == "block_share" and d == 0:
            comp.append(
                {
                    "strategy": "rolling_summary",
                    "block": "history",
                    "tokens_before": hist,
                    "tokens_after": 600,
                    "watermark": 0.5,
                }
            )
            hist = 600
        elif k == "history_spike" and d == 0:
            hist += 2000
        elif k == "history_spike" and d == 1:
            comp.append(
                {
                    "strategy": "rolling_summary",
                    "block": "history",
                    "tokens_before": hist,
                    "tokens_after": int(hist * 0.3),
                    "watermark": 0.6,
                }
            )
            hist = int(hist * 0.3)
        elif k == "validation_blip" and 0 <= d < 6:
            failed = True
        elif k == "recall_miss" and 0 <= d < 6:
            miss = True
        elif k == "noise_storm" and 0 <= d < 3:
            pumped = hist + 800
            comp.append(
                {
                    "strategy": "rolling_summary",
                    "block": "history",
                    "tokens_before": pumped,
                    "tokens_after": int(pumped * 0.4),
                    "watermark": 0.55,
                }
            )
            hist = int(pumped * 0.4)
        elif k == "big_tool" and d == 0:
            tool = 3000
        if k == "block_share" and 0 <= d <= 6:
            # The repo map replaces retrieval and grows; the window stays below the compress tier.
            extra.append(_block("repo_map", "other", (1200, 2000, 2700, 2700, 2700, 2700, 800)[d], "repo"))
            retr = 0
            tool = min(tool, 500)
            if d == 6:
                comp.append(
                    {
                        "strategy": "truncate",
                        "block": "repo_map",
                        "tokens_before": 2700,
                        "tokens_after": 800,
                        "watermark": 0.6,
                    }
                )
        blocks = [
            _block("system", "system", 300, "You are a fleet agent."),
            _block("tools", "tools", 400, "tool definitions"),
            _block(tool_key, "tool_results", tool, f"result {t}"),
        ]
        if retr:
            blocks.append(_block(retr_key, "retrieval", retr, f"passage {t}"))
        blocks += extra
        blocks.append(_block("history", "history", hist, f"turn {t}"))
        blocks[0]["pinned"] = True
        s.snaps.append(
            {
                "snapshot_id": str(uuid.uuid4()),
                "session_id": s.sid,
                "turn": t,
                "agent": s.agent,
                "ts": ts.isoformat(),
                "model": {"name": "gpt-4o", "context_window": WINDOW},
                "blocks": blocks,
                "compression": comp,
                "validation": [
                    {
                        "layer": "structure",
                        "check": "json_schema",
                        "passed": not failed,
                        "code": "E_JSON" if failed else "",
                    }
                ],
                "recall": [
                    {"memory_id": "m1", "channel": "vector", "score": 0.5, "rank": 1, "injected": not miss}
                ],
            }
        )


def fleet(n_sessions: int, n_noise: int, rng: random.Random) -> list[Session]:
    out: list[Session] = []
    for p in PLANTS:
        for i in range(p.sessions):
            gap = rng.randint(30, 90)
            hit = rng.randint(5, 10)
            hit_at = DAY0 + p.at + timedelta(seconds=rng.randint(0, PLANT_SPREAD_S))
            turns = hit + 10 + rng.randint(0, 10)
            out.append(
                Session(
                    f"{p.agent}-{p.label.lower()}-{i:02d}",
                    p.agent,
                    p.label,
                    p.kind,
                    hit_at - timedelta(seconds=gap * hit),
                    gap,
                    turns,
                    hit,
                )
            )
    rest = n_sessions - len(out)
    if rest < n_noise:
        raise SystemExit(f"--sessions must leave room for {n_noise} noise sessions")
    agents = list(AGENTS)
    for i in range(rest):
        agent = agents[i % len(agents)]
        gap = rng.randint(30, 90)
        turns = rng.randint(15, 35)
        start = DAY0 + timedelta(seconds=rng.randint(10 * 60, 23 * 3600 - gap * turns))
        if i < n_noise:
            kind = NOISE_KINDS[i % len(NOISE_KINDS)]
            out.append(
                Session(
                    f"{agent}-n-{i:03d}",
                    agent,
                    f"noise:{kind}",
                    kind,
                    start,
                    gap,
                    turns,
                    rng.randint(4, turns - 8),
                )
            )
        else:
            out.append(Session(f"{agent}-h-{i:03d}", agent, "healthy", "", start, gap, turns, None))
    for s in out:
        build(s, rng)
    return out


# --- cost meters -----------------------------------------------------------------------------------
_backend_pid: int | None = None


def _backend_cpu_s() -> float:
    if _backend_pid is None:
        return 0.0
    fields = Path(f"/proc/{_backend_pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Meter:
    calls: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    pg_s: float = 0.0
    samples_ms: list[float] = field(default_factory=list)

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        pg0, cpu0, t0 = _backend_cpu_s(), time.process_time(), time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            wall = time.perf_counter() - t0
            self.calls += 1
            self.wall_s += wall
            self.cpu_s += time.process_time() - cpu0
            self.pg_s += _backend_cpu_s() - pg0
            self.samples_ms.append(wall * 1000)

    def figures(self, per: int) -> dict[str, Any]:
        """Totals, and per PER units (snapshots) in ms."""
        return {
            "calls": self.calls,
            "wall_s": round(self.wall_s, 3),
            "cpu_s": round(self.cpu_s, 3),
            "pg_cpu_s": round(self.pg_s, 2),
            "cpu_plus_pg_ms_per_snapshot": round(1000 * (self.cpu_s + self.pg_s) / max(per, 1), 4),
            "wall_ms_per_snapshot": round(1000 * self.wall_s / max(per, 1), 4),
        }


def wrap(meter: Meter, fn: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        return meter.run(fn, *args, **kwargs)

    return timed


# --- the simulated day ---------------------------------------------------------------------------
GROUPING_CALLS = ("incidents_group", "incidents_touch")


@dataclass
class Run:
    ingest: Meter = field(default_factory=Meter)
    evaluate: Meter = field(default_factory=Meter)
    group: Meter = field(default_factory=Meter)
    sweep: Meter = field(default_factory=Meter)
    eval_firing_ms: list[float] = field(default_factory=list)
    group_share_firing: list[float] = field(default_factory=list)
    delivery_at: dict[int, datetime] = field(default_factory=dict)
    ticks: list[datetime] = field(default_factory=list)
    snapshots: int = 0
    created: int = 0
    updated: int = 0
    resolved: int = 0


def simulate(project: Project, sessions: list[Session]) -> Run:
    run = Run()
    snaps = sorted((sn for s in sessions for sn in s.snaps), key=lambda sn: sn["ts"])
    by_tick: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for sn in snaps:
        by_tick[int((datetime.fromisoformat(sn["ts"]) - DAY0) / TICK)].append(sn)
    last = max(by_tick)
    end = last + int(TAIL / TICK)
    # The names evaluation calls grouping by, timed in this process only (the code is unchanged).
    originals = {name: getattr(alert_evaluation, name) for name in GROUPING_CALLS}
    for name, fn in originals.items():
        setattr(alert_evaluation, name, wrap(run.group, fn))
    last_delivery = 0
    try:
        for tick in range(end + 1):
            now = DAY0 + TICK * (tick + 1)
            batch = by_tick.get(tick, [])
            if batch:
                res = run.ingest.run(snapshot_batch_ingest, project=project, batch=batch)
                assert res.created == len(batch), res
                run.snapshots += len(batch)
                g0 = run.group.wall_s
                ev = run.evaluate.run(
                    alert_evaluation.alerts_evaluate, project_id=project.pk, snapshot_refs=res.snapshot_refs
                )
                run.created += len(ev.created)
                run.updated += ev.updated
                if ev.created:
                    run.eval_firing_ms.append(run.evaluate.samples_ms[-1])
                    run.group_share_firing.append(
                        (run.group.wall_s - g0) * 1000 / max(run.evaluate.samples_ms[-1], 1e-6)
                    )
            sw = run.sweep.run(incidents_sweep, now=now)
            run.resolved += sw.resolved
            run.ticks.append(now)
            for did in Delivery.objects.filter(project=project, pk__gt=last_delivery).values_list(
                "id", flat=True
            ):
                run.delivery_at[did] = now
                last_delivery = max(last_delivery, did)
            if tick % 120 == 0:
                print(
                    f"  {now:%H:%M} simulated: {run.snapshots} snapshots, {run.created} alerts, "
                    f"{Incident.objects.filter(project=project).count()} incidents",
                    flush=True,
                )
    finally:
        for name, fn in originals.items():
            setattr(alert_evaluation, name, fn)
    return run


# --- reading the result --------------------------------------------------------------------------
def judge(project: Project, sessions: list[Session], n_noise: int) -> dict[str, Any]:
    """Each alert labelled by what raised it: a plant ("P1".."P5") or a noise event ("noise") at or
    after its session's hit turn; "stray" before it (the 3% of validation outcomes that fail at
    random can raise an alert early in a session); "healthy" in a healthy session."""
    by_sid = {s.sid: s for s in sessions}
    alerts = list(
        Alert.objects.filter(project=project).values(
            "id", "session_id", "turn", "rule_kind", "incident_id", "severity", "ts", "title"
        )
    )
    label: dict[int, str] = {}
    for a in alerts:
        s = by_sid[a["session_id"]]
        if s.hit is None:
            label[a["id"]] = "healthy"
        elif a["turn"] < s.hit:
            label[a["id"]] = "stray"
        else:
            label[a["id"]] = "noise" if s.label.startswith("noise:") else s.label
    incs = {i.pk: i for i in Incident.objects.filter(project=project)}
    per_inc: dict[int, Counter[str]] = defaultdict(Counter)
    sessions_of: dict[int, set[str]] = defaultdict(set)
    ungrouped: Counter[str] = Counter()
    for a in alerts:
        if a["incident_id"] is None:
            ungrouped[label[a["id"]]] += 1
            continue
        per_inc[a["incident_id"]][label[a["id"]]] += 1
        sessions_of[a["incident_id"]].add(a["session_id"])

    plants: dict[str, Any] = {}
    for p in PLANTS:
        mine = [a for a in alerts if label[a["id"]] == p.label]
        sids = {a["session_id"] for a in mine}
        holding = sorted(iid for iid, c in per_inc.items() if c[p.label])
        majority = [iid for iid in holding if per_inc[iid][p.label] * 2 > sum(per_inc[iid].values())]
        main = max(holding, key=lambda iid: per_inc[iid][p.label], default=None)
        confirmed_majority = [iid for iid in majority if incs[iid].confirmed_at is not None]
        plants[p.label] = {
            "agent": p.agent,
            "what": p.what,
            "sessions": p.sessions,
            "sessions_alerted": len(sids),
            "alerts": len(mine),
            "rule_kinds": dict(Counter(a["rule_kind"] for a in mine)),
            "incidents_holding_its_alerts": len(holding),
            "found": bool(majority),
            # Found and paged: the incident holding most of its alerts was confirmed.
            "found_confirmed": bool(confirmed_majority),
            "elsewhere": [
                f"{a['session_id']} {a['rule_kind']} in incident {a['incident_id']} "
                f"({incs[a['incident_id']].title if a['incident_id'] else 'none'})"
                for a in mine
                if a["incident_id"] != main
            ],
            "main_incident": None
            if main is None
            else {
                "id": main,
                "title": incs[main].title,
                "cause": incs[main].cause,
                "severity": incs[main].severity,
                "sessions": len(sessions_of[main] & sids),
                "alerts": per_inc[main][p.label],
                "other_alerts_merged": sum(per_inc[main].values()) - per_inc[main][p.label],
                "merged": [
                    f"{label[a['id']]} {a['session_id']} {a['rule_kind']} at {a['ts']:%H:%M}"
                    for a in alerts
                    if a["incident_id"] == main and label[a["id"]] != p.label
                ],
                "planted_alerts_span": "{:%H:%M}-{:%H:%M}".format(
                    min(a["ts"] for a in mine), max(a["ts"] for a in mine)
                ),
                "opened_count": incs[main].opened_count,
                "confirmed": incs[main].confirmed_at is not None,
                "status": incs[main].status,
                "resolution": incs[main].resolution,
            },
        }
    planted = {p.label for p in PLANTS}
    with_planted = [iid for iid, c in per_inc.items() if any(c[k] for k in planted)]
    without_planted = [iid for iid in per_inc if iid not in with_planted]
    noise_sessions = [s for s in sessions if s.label.startswith("noise:")]
    noise_alerted = {a["session_id"] for a in alerts if label[a["id"]] == "noise"}
    by_noise_kind: dict[str, dict[str, int]] = {}
    for kind in NOISE_KINDS:
        kind_sids = {s.sid for s in noise_sessions if s.kind == kind}
        by_noise_kind[kind] = {
            "sessions": len(kind_sids),
            "alerted": len(kind_sids & noise_alerted),
            "incidents": len(
                kind_incs := {
                    a["incident_id"]
                    for a in alerts
                    if a["session_id"] in kind_sids and label[a["id"]] == "noise" and a["incident_id"]
                }
            ),
            "confirmed": sum(1 for iid in kind_incs if incs[iid].confirmed_at is not None),
        }
    counts = Counter(label.values())
    n_inc = len(incs)
    confirmed = {iid for iid, i in incs.items() if i.confirmed_at is not None}
    transient = {iid for iid, i in incs.items() if i.resolution == Incident.Resolution.TRANSIENT}
    # What a channel got per hour when each alert was its own message (before incidents).
    alerts_h = Counter(int((a["ts"] - DAY0) / timedelta(hours=1)) for a in alerts)
    return {
        "plants": plants,
        "planted": len(PLANTS),
        "all_found": all(v["found"] for v in plants.values()),
        "all_found_confirmed": all(v["found_confirmed"] for v in plants.values()),
        "alerts": len(alerts),
        "alerts_by_label": dict(sorted(counts.items())),
        "alerts_ungrouped": sum(ungrouped.values()),
        "alerts_by_severity": dict(Counter(a["severity"] for a in alerts)),
        "alerts_max_per_hour": max(alerts_h.values(), default=0),
        "incidents": n_inc,
        "incidents_with_planted_alerts": len(with_planted),
        "incidents_without_planted_alerts": len(without_planted),
        "incidents_confirmed": len(confirmed),
        "incidents_confirmed_with_planted_alerts": len(confirmed & set(with_planted)),
        "incidents_confirmed_without_planted_alerts": len(confirmed - set(with_planted)),
        "incidents_transient": len(transient),
        "incidents_pending_at_end": sum(1 for i in incs.values() if i.status == Incident.Status.PENDING),
        "confirmed_background_only": [
            f"{incs[iid].title} ({dict(per_inc[iid])})" for iid in sorted(confirmed - set(with_planted))
        ],
        "ratio_confirmed_incidents_to_planted": round(len(confirmed) / len(PLANTS), 2),
        "incidents_touching_healthy_sessions": sum(1 for c in per_inc.values() if c["healthy"]),
        "background_in_planted_incidents": {
            k: sum(per_inc[iid][k] for iid in with_planted) for k in ("noise", "stray", "healthy")
        },
        "noise_events": n_noise,
        "noise_sessions_alerted": len(noise_alerted),
        "noise_by_kind": by_noise_kind,
        "stray_alerts": [
            f"{a['session_id']} turn {a['turn']} {a['rule_kind']} at {a['ts']:%H:%M}"
            for a in alerts
            if label[a["id"]] in ("stray", "healthy")
        ],
        "ratio_planted_incidents_to_planted": round(len(with_planted) / len(PLANTS), 2),
        "ratio_all_incidents_to_planted": round(n_inc / len(PLANTS), 2),
        "ratio_background_incidents_to_noise_events": round(len(without_planted) / max(n_noise, 1), 2),
        "alerts_per_incident": round(len(alerts) / max(n_inc, 1), 2),
        "incidents_reopened": sum(1 for i in incs.values() if i.opened_count > 1),
        "incidents_auto_resolved": sum(1 for i in incs.values() if i.resolution == Incident.Resolution.AUTO),
        "incidents_reopened_confirmed": sum(1 for iid in confirmed if incs[iid].opened_count > 1),
        "incidents_unresolved_at_end": sum(1 for i in incs.values() if i.status != Incident.Status.RESOLVED),
    }


def messages(project: Project, run: Run, max_per_hour: int) -> dict[str, Any]:
    """Delivery rows per channel per simulated hour, and what the channel's hourly limit would
    send or hold: a delivery is sent when fewer than MAX_PER_HOUR went out in the rolling hour
    before it, else held; at each sweep one held message goes out when the hour has room,
    carrying the others (as `_rate_claim` and `held_release` do)."""
    rows = list(Delivery.objects.filter(project=project).order_by("id").values("id", "channel_id", "event"))
    out: dict[str, Any] = {}
    for cid in sorted({r["channel_id"] for r in rows}):
        mine = [r for r in rows if r["channel_id"] == cid]
        created_h: Counter[int] = Counter()
        by_event: Counter[str] = Counter(r["event"] for r in mine)
        due: dict[datetime, list[int]] = defaultdict(list)
        for r in mine:
            at = run.delivery_at[r["id"]]
            due[at].append(r["id"])
            created_h[int((at - DAY0 - timedelta(microseconds=1)) / timedelta(hours=1))] += 1
        sent: deque[datetime] = deque()
        sent_h: Counter[int] = Counter()
        held_h: Counter[int] = Counter()
        held = 0
        held_max = 0
        for now in run.ticks:
            hour = int((now - DAY0 - timedelta(microseconds=1)) / timedelta(hours=1))
            while sent and sent[0] <= now - timedelta(hours=1):
                sent.popleft()
            for _ in due.get(now, []):
                if len(sent) < max_per_hour:
                    sent.append(now)
                    sent_h[hour] += 1
                    held = 0
                else:
                    held += 1
                    held_h[hour] += 1
                    held_max = max(held_max, held)
            if held and len(sent) < max_per_hour:
                sent.append(now)
                sent_h[hour] += 1
                held = 0
        hours = sorted(created_h)
        out[str(cid)] = {
            "deliveries": len(mine),
            "by_event": dict(by_event),
            "per_hour": {f"{h:02d}": created_h[h] for h in hours},
            "max_per_hour": max(created_h.values(), default=0),
            "median_per_active_hour": statistics.median(created_h.values()) if created_h else 0,
            "hours_over_limit": sum(1 for v in created_h.values() if v > max_per_hour),
            "limit": max_per_hour,
            "model_sent_max_per_hour": max(sent_h.values(), default=0),
            "model_held": sum(held_h.values()),
            "model_held_max_at_once": held_max,
        }
    return out


def bench_project(prefix: str) -> tuple[Project, Any, list[str]]:
    """A new project with the default rules of a new project and one webhook channel at the
    default limit (nothing listens: no worker sends), and the PostgreSQL backend's pid for the
    cost meters. Returns (project, channel, enabled rule kinds)."""
    global _backend_pid
    project, _ = project_create(name=f"{prefix}-{uuid.uuid4().hex[:8]}")
    default_rules_create(project=project)
    rules = list(AlertRule.objects.filter(project=project, enabled=True).values_list("kind", flat=True))
    project.allow_private_endpoints = True
    project.save()
    channel, _ = alert_channels.channel_create(
        project=project,
        kind="webhook",
        data={"name": "on-call", "url": "http://127.0.0.1:9/hook", "timeout_seconds": 5},
    )
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = int(cur.fetchone()[0])
    _backend_pid = pid if Path(f"/proc/{pid}/stat").exists() else None  # a remote server: no PG CPU
    return project, channel, rules


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--noise", type=int, default=30)
    ap.add_argument("--seed", type=int, default=27)
    args = ap.parse_args()
    started = time.monotonic()
    call_command("migrate", interactive=False, verbosity=0)
    rng = random.Random(args.seed)
    sessions = fleet(args.sessions, args.noise, rng)
    n_snaps = sum(len(s.snaps) for s in sessions)
    print(
        f"{len(sessions)} sessions, {n_snaps} snapshots, {len(PLANTS)} planted incidents "
        f"({sum(p.sessions for p in PLANTS)} sessions), {args.noise} noise sessions",
        flush=True,
    )

    project, channel, rules = bench_project("bench-incidents")
    # A worker process builds the URL map once, at its first link (the digest's turn links): a
    # start-up cost of the process, not of grouping, and kept out of the figures as a worker that
    # has run for a while has paid it.
    get_resolver().url_patterns  # noqa: B018

    try:
        run = simulate(project, sessions)
        verdict = judge(project, sessions, args.noise)
        msgs = messages(project, run, channel.max_per_hour)
    finally:
        purged = _purge_queued_tasks()
    g, e, i = run.group, run.evaluate, run.ingest
    cost = {
        "ingest": i.figures(run.snapshots),
        "evaluate": e.figures(run.snapshots),
        "grouping": g.figures(run.snapshots),
        "sweep": run.sweep.figures(run.snapshots),
        "grouping_share_of_evaluate_wall_pct": round(100 * g.wall_s / max(e.wall_s, 1e-9), 1),
        "grouping_share_of_evaluate_cpu_plus_pg_pct": round(
            100 * (g.cpu_s + g.pg_s) / max(e.cpu_s + e.pg_s, 1e-9), 1
        ),
        "grouping_vs_ingest_cpu_plus_pg_pct": round(
            100 * (g.cpu_s + g.pg_s) / max(i.cpu_s + i.pg_s, 1e-9), 1
        ),
        "grouping_vs_ingest_process_cpu_pct": round(100 * g.cpu_s / max(i.cpu_s, 1e-9), 1),
        "grouping_cpu_plus_pg_ms_per_100_snapshots": round(100_000 * (g.cpu_s + g.pg_s) / run.snapshots, 2),
        "evaluate_firing_ms_median": round(statistics.median(run.eval_firing_ms), 2)
        if run.eval_firing_ms
        else None,
        "grouping_share_of_firing_evaluate_median_pct": round(
            100 * statistics.median(run.group_share_firing), 1
        )
        if run.group_share_firing
        else None,
        "evaluate_ms_median": round(statistics.median(e.samples_ms), 2),
        "ingest_ms_median": round(statistics.median(i.samples_ms), 2),
        "snapshots_per_batch_mean": round(run.snapshots / max(i.calls, 1), 2),
        "pg_cpu_measured": _backend_pid is not None,
    }
    for p, v in verdict["plants"].items():
        print(
            f"{p} {v['agent']}: {v['sessions_alerted']}/{v['sessions']} sessions alerted, "
            f"{v['alerts']} alerts "
            f"in {v['incidents_holding_its_alerts']} incident(s), found={v['found']}; main: "
            f"{json.dumps(v['main_incident'])}",
            flush=True,
        )
        if v["elsewhere"]:
            print(f"   {p} alerts outside its main incident: {v['elsewhere']}", flush=True)
    print(f"noise by kind: {json.dumps(verdict['noise_by_kind'])}", flush=True)
    print(f"confirmed incidents without planted alerts: {verdict['confirmed_background_only']}", flush=True)
    print(
        f"stray alerts (before a session's hit, or in healthy sessions): {verdict['stray_alerts']}",
        flush=True,
    )
    print(f"messages per channel: {json.dumps(msgs)}", flush=True)
    print(f"cost: {json.dumps(cost)}", flush=True)
    ch: dict[str, Any] = next(iter(msgs.values()), {})
    print(
        json.dumps(
            {
                "bench": "incidents",
                "sessions": len(sessions),
                "snapshots": run.snapshots,
                "enabled_rule_kinds": sorted(set(rules)),
                "planted": verdict["planted"],
                "all_planted_found": verdict["all_found"],
                "all_planted_found_confirmed": verdict["all_found_confirmed"],
                "found": {p: v["found"] for p, v in verdict["plants"].items()},
                "incidents_holding_each_plant": {
                    p: v["incidents_holding_its_alerts"] for p, v in verdict["plants"].items()
                },
                "sessions_in_main_incident": {
                    p: f"{(v['main_incident'] or {}).get('sessions', 0)}/{v['sessions']}"
                    for p, v in verdict["plants"].items()
                },
                "alerts": verdict["alerts"],
                "alerts_by_label": verdict["alerts_by_label"],
                "alerts_max_per_hour": verdict["alerts_max_per_hour"],
                "alerts_ungrouped": verdict["alerts_ungrouped"],
                "incidents": verdict["incidents"],
                "incidents_confirmed": verdict["incidents_confirmed"],
                "incidents_confirmed_with_planted_alerts": verdict["incidents_confirmed_with_planted_alerts"],
                "incidents_confirmed_without_planted_alerts": verdict[
                    "incidents_confirmed_without_planted_alerts"
                ],
                "incidents_transient": verdict["incidents_transient"],
                "incidents_pending_at_end": verdict["incidents_pending_at_end"],
                "ratio_confirmed_incidents_to_planted": verdict["ratio_confirmed_incidents_to_planted"],
                "incidents_with_planted_alerts": verdict["incidents_with_planted_alerts"],
                "incidents_without_planted_alerts": verdict["incidents_without_planted_alerts"],
                "incidents_touching_healthy_sessions": verdict["incidents_touching_healthy_sessions"],
                "noise_events": verdict["noise_events"],
                "noise_sessions_alerted": verdict["noise_sessions_alerted"],
                "background_in_planted_incidents": verdict["background_in_planted_incidents"],
                "ratio_planted_incidents_to_planted": verdict["ratio_planted_incidents_to_planted"],
                "ratio_all_incidents_to_planted": verdict["ratio_all_incidents_to_planted"],
                "ratio_background_incidents_to_noise_events": verdict[
                    "ratio_background_incidents_to_noise_events"
                ],
                "target_ratio": 1.5,
                "target_met": verdict["all_found_confirmed"]
                and verdict["ratio_confirmed_incidents_to_planted"] <= 1.5,
                "alerts_per_incident": verdict["alerts_per_incident"],
                "incidents_reopened": verdict["incidents_reopened"],
                "incidents_auto_resolved": verdict["incidents_auto_resolved"],
                "incidents_unresolved_at_end": verdict["incidents_unresolved_at_end"],
                "messages": ch.get("deliveries"),
                "messages_by_event": ch.get("by_event"),
                "messages_max_per_hour": ch.get("max_per_hour"),
                "channel_limit_per_hour": ch.get("limit"),
                "hours_over_limit": ch.get("hours_over_limit"),
                "model_held": ch.get("model_held"),
                "grouping_share_of_evaluate_wall_pct": cost["grouping_share_of_evaluate_wall_pct"],
                "grouping_share_of_evaluate_cpu_plus_pg_pct": cost[
                    "grouping_share_of_evaluate_cpu_plus_pg_pct"
                ],
                "grouping_vs_ingest_cpu_plus_pg_pct": cost["grouping_vs_ingest_cpu_plus_pg_pct"],
                "grouping_on_ingest_path": False,
                "queued_tasks_purged": purged,
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    )


def _purge_queued_tasks() -> int | None:
    """No worker runs: drop the evaluation, analysis and delivery tasks ingest and evaluation
    queued on this REDIS_URL, so that a worker started on it later does not act on them."""
    from django.conf import settings

    from config.celery import app

    names = {settings.CELERY_TASK_DEFAULT_QUEUE, *(r["queue"] for r in settings.CELERY_TASK_ROUTES.values())}
    purged = 0
    try:
        with app.connection_for_write() as conn:
            for name in sorted(names):
                purged += int(conn.default_channel.queue_purge(name) or 0)
    except Exception:  # noqa: BLE001 - the broker may be gone; nothing queued then
        return None
    return purged


if __name__ == "__main__":
    main()
