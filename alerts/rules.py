"""Alert rule evaluation, ORM-free.

A rule looks at one turn and the turns before it in the same session (by turn order, at most
`window_turns(rule)` of them) and either finds nothing or returns a `Finding`. Findings of one
rule in one session are grouped into *episodes* (`episode_join`): a finding within the cooldown
of an existing episode extends it instead of raising a new alert, so a session that sits above a
threshold for many turns raises one alert. The same functions serve the post-ingest evaluation
and the rule editor's preview.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from alerts.kinds import (
    BLOCK_SHARE,
    COMPRESSION_STORM,
    COUNT_DRIFT,
    DEFAULT_COOLDOWN_TURNS,
    LINT_FINDING,
    PROJECT_KINDS,
    RECALL_MISS_RATE,
    TIER_CROSSING,
    VALIDATION_FAILURE_RATE,
    WATERMARK_SPIKE,
)
from ctxobs.wire import DEFAULT_TIER_THRESHOLDS, TIERS, occurrence_keys
from ingest.types import BlockChange, BlockOutline
from insights.lint import CHECKS as LINT_CHECK_LABELS


@dataclass(frozen=True, slots=True)
class Turn:
    """What rules need of one stored snapshot."""

    ref: int
    turn: int
    ts: datetime
    watermark: float
    tier: str
    usable_tokens: int
    total_tokens: int = 0
    n_compression: int = 0
    n_validation: int = 0
    n_validation_failed: int = 0
    n_recall: int = 0
    n_recall_injected: int = 0
    count_drift: float | None = None
    # The drift is against the model's usual ratio (not against zero).
    count_drift_calibrated: bool = False
    # The model has no usual ratio yet and its counts analysis did not flag this turn: no verdict.
    count_drift_unproven: bool = False
    agent: str = ""
    model: str = ""
    # The biggest block of each kind: (kind, tokens, key); loaded only when a rule needs it.
    kind_max: tuple[tuple[str, int, str], ...] = ()
    # The contamination-lint checks found on this turn; loaded only when a rule needs them.
    lint_checks: tuple[str, ...] = ()

    def biggest_block(self, kinds: Sequence[str] = ()) -> tuple[int, str]:
        best = (0, "")
        for kind, tokens, key in self.kind_max:
            if (not kinds or kind in kinds) and tokens > best[0]:
                best = (tokens, key)
        return best


@dataclass(frozen=True, slots=True)
class RuleSpec:
    id: int
    kind: str
    params: dict[str, Any]
    agent: str = ""
    model: str = ""
    cooldown_turns: int = DEFAULT_COOLDOWN_TURNS
    # Stored rules carry DEFAULT_COOLDOWN_SECONDS; a bare spec (tests, tools) has turns alone.
    cooldown_seconds: float = 0.0
    # The project's tier thresholds (warn, compress, force, break), for the value shown.
    thresholds: tuple[float, float, float, float] = DEFAULT_TIER_THRESHOLDS

    def applies(self, turn: Turn) -> bool:
        return (not self.agent or self.agent == turn.agent) and (not self.model or self.model == turn.model)


@dataclass(frozen=True, slots=True)
class Finding:
    rule_id: int
    kind: str
    turn: Turn
    value: float
    threshold: float
    title: str
    unit: str = "%"


def window_turns(rule: RuleSpec) -> int:
    """How many turns before the evaluated one the rule looks at."""
    p = rule.params
    if rule.kind in (TIER_CROSSING,):
        return 1
    if rule.kind == WATERMARK_SPIKE:
        return max(1, int(p.get("median_turns", 10)))
    if rule.kind in (COMPRESSION_STORM, VALIDATION_FAILURE_RATE, RECALL_MISS_RATE):
        return max(0, int(p.get("turns", 1)) - 1)
    return 0


def _pct(x: float) -> str:
    return f"{x * 100:.0f}%"


def evaluate(rule: RuleSpec, current: Turn, history: Sequence[Turn]) -> Finding | None:
    """The finding of RULE on CURRENT, given HISTORY: the turns before it, oldest first
    (only the last `window_turns(rule)` are read)."""
    if not rule.applies(current):
        return None
    if rule.kind in PROJECT_KINDS:
        return None  # judged over the project's turns: alerts.services.cache_rules
    judge = _JUDGES.get(rule.kind)
    if judge is None:
        raise ValueError(f"unknown rule kind {rule.kind!r}")
    return judge(rule, current, history)


def _found(
    rule: RuleSpec, current: Turn, value: float, threshold: float, title: str, unit: str = "%"
) -> Finding:
    return Finding(rule.id, rule.kind, current, value, threshold, title, unit)


def _window(history: Sequence[Turn], current: Turn, n_turns: int) -> list[Turn]:
    """The last N_TURNS turns, CURRENT the last of them."""
    return [*history[-(n_turns - 1) :], current] if n_turns > 1 else [current]


def _tier_crossing(rule: RuleSpec, current: Turn, history: Sequence[Turn]) -> Finding | None:
    p = rule.params
    prev = history[-1] if history else None
    target = TIERS.index(p["tier"])
    prev_rank = TIERS.index(prev.tier) if prev is not None else 0
    cur_rank = TIERS.index(current.tier)
    if prev_rank < target <= cur_rank:
        return _found(
            rule,
            current,
            current.watermark * 100,
            rule.thresholds[target - 1] * 100,
            f"Entered the {p['tier']} tier (watermark {_pct(current.watermark)})",
        )
    return None


def _watermark_spike(rule: RuleSpec, current: Turn, history: Sequence[Turn]) -> Finding | None:
    p = rule.params
    prev = history[-1] if history else None
    rise = float(p["rise_points"]) / 100
    if prev is not None and rise > 0:
        jump = current.watermark - prev.watermark
        if jump >= rise:
            return _found(
                rule,
                current,
                jump * 100,
                float(p["rise_points"]),
                f"Watermark jumped +{jump * 100:.0f} points "
                f"({_pct(prev.watermark)} → {_pct(current.watermark)})",
                "points",
            )
    ratio = float(p["median_ratio"])
    recent = history[-int(p["median_turns"]) :]
    if ratio > 0 and len(recent) >= 3 and current.watermark >= float(p["min_watermark_pct"]) / 100:
        median = statistics.median(t.watermark for t in recent)
        if median > 0 and current.watermark >= ratio * median:
            return _found(
                rule,
                current,
                current.watermark / median,
                ratio,
                f"Watermark {_pct(current.watermark)} is {current.watermark / median:.1f}× "
                f"the recent median ({_pct(median)})",
                "×",
            )
    return None


def _block_share(rule: RuleSpec, current: Turn, history: Sequence[Turn]) -> Finding | None:
    p = rule.params
    tokens, key = current.biggest_block(p.get("block_kinds") or ())
    share = tokens / max(1, current.usable_tokens)
    limit = float(p["share_pct"]) / 100
    if tokens and share >= limit:
        return _found(
            rule,
            current,
            share * 100,
            float(p["share_pct"]),
            f"Block '{key}' takes {_pct(share)} of the usable window",
        )
    return None


def _compression_storm(rule: RuleSpec, current: Turn, history: Sequence[Turn]) -> Finding | None:
    p = rule.params
    window = _window(history, current, int(p["turns"]))
    events = sum(t.n_compression for t in window)
    if current.n_compression and events >= int(p["events"]):
        return _found(
            rule,
            current,
            events,
            int(p["events"]),
            f"{events} compression events within {len(window)} turns",
            "events",
        )
    return None


def _validation_failure_rate(rule: RuleSpec, current: Turn, history: Sequence[Turn]) -> Finding | None:
    p = rule.params
    window = _window(history, current, int(p["turns"]))
    checks = sum(t.n_validation for t in window)
    failed = sum(t.n_validation_failed for t in window)
    if current.n_validation_failed and checks >= int(p["min_checks"]):
        rate = failed / checks
        if rate > float(p["rate_pct"]) / 100:
            return _found(
                rule,
                current,
                rate * 100,
                float(p["rate_pct"]),
                f"Validation failure rate {_pct(rate)} over the last {len(window)} turns "
                f"({failed} of {checks} checks)",
            )
    return None


def _recall_miss_rate(rule: RuleSpec, current: Turn, history: Sequence[Turn]) -> Finding | None:
    p = rule.params
    window = _window(history, current, int(p["turns"]))
    ran = [t for t in window if t.n_recall > 0]
    missed = sum(1 for t in ran if t.n_recall_injected == 0)
    is_miss = current.n_recall > 0 and current.n_recall_injected == 0
    if is_miss and len(ran) >= int(p["min_recalls"]):
        rate = missed / len(ran)
        if rate > float(p["rate_pct"]) / 100:
            return _found(
                rule,
                current,
                rate * 100,
                float(p["rate_pct"]),
                f"Recall injected nothing in {missed} of {len(ran)} recall turns "
                f"(last {len(window)} turns)",
            )
    return None


def _count_drift(rule: RuleSpec, current: Turn, history: Sequence[Turn]) -> Finding | None:
    p = rule.params
    if current.count_drift is None or current.count_drift_unproven:
        return None
    drift = abs(current.count_drift)
    if drift * 100 > float(p["drift_pct"]):
        against = "the model's usual ratio" if current.count_drift_calibrated else "the provider's count"
        return _found(
            rule,
            current,
            current.count_drift * 100,
            float(p["drift_pct"]),
            f"Token count drift {current.count_drift * 100:+.0f}% against {against}",
        )
    return None


def _lint_finding(rule: RuleSpec, current: Turn, history: Sequence[Turn]) -> Finding | None:
    wanted = rule.params.get("checks") or ()
    hits = [c for c in current.lint_checks if not wanted or c in wanted]
    if hits:
        names = ", ".join(LINT_CHECK_LABELS.get(c, c) for c in hits)
        return _found(rule, current, len(hits), 1, f"Lint: {names}", "findings")
    return None


# One judge per rule kind that looks at a session's turns: (rule, current, history) -> finding.
_JUDGES: dict[str, Callable[[RuleSpec, Turn, Sequence[Turn]], Finding | None]] = {
    TIER_CROSSING: _tier_crossing,
    WATERMARK_SPIKE: _watermark_spike,
    BLOCK_SHARE: _block_share,
    COMPRESSION_STORM: _compression_storm,
    VALIDATION_FAILURE_RATE: _validation_failure_rate,
    RECALL_MISS_RATE: _recall_miss_rate,
    COUNT_DRIFT: _count_drift,
    LINT_FINDING: _lint_finding,
}


def evaluate_line(
    rules: Sequence[RuleSpec], line: Sequence[Turn], targets: Iterable[int] | None = None
) -> list[Finding]:
    """Findings of RULES on the turns of LINE (one session, in turn order) whose refs are in
    TARGETS (all when None). Each target sees only the turns before it in LINE."""
    wanted = None if targets is None else set(targets)
    window = max((window_turns(r) for r in rules), default=0)
    out: list[Finding] = []
    for i, cur in enumerate(line):
        if wanted is not None and cur.ref not in wanted:
            continue
        history = line[max(0, i - window) : i]
        for rule in rules:
            f = evaluate(rule, cur, history)
            if f is not None:
                out.append(f)
    return out


# --- episodes ----------------------------------------------------------------
@dataclass(slots=True)
class Episode:
    """One alert of a rule in a session: the span of turns it covers and its anchor (first) turn."""

    rule_id: int
    first_turn: int
    last_turn: int
    first_ts: datetime
    last_ts: datetime
    value: float
    threshold: float
    peak_value: float
    title: str
    snapshot_ref: int
    unit: str = "%"
    alert_id: int | None = None
    created: bool = False
    changed: bool = False
    anchor_moved: bool = False

    @classmethod
    def from_finding(cls, f: Finding) -> Episode:
        t = f.turn
        return cls(
            rule_id=f.rule_id,
            first_turn=t.turn,
            last_turn=t.turn,
            first_ts=t.ts,
            last_ts=t.ts,
            value=f.value,
            threshold=f.threshold,
            peak_value=f.value,
            title=f.title,
            snapshot_ref=t.ref,
            unit=f.unit,
            created=True,
        )

    def covers(self, f: Finding, cooldown_turns: int, cooldown_seconds: float) -> bool:
        t = f.turn
        if self.first_turn - cooldown_turns <= t.turn <= self.last_turn + cooldown_turns:
            return True
        if cooldown_seconds > 0:
            cd = timedelta(seconds=cooldown_seconds)
            return self.first_ts - cd <= t.ts <= self.last_ts + cd
        return False


def _peak(a: float, b: float) -> float:
    return a if abs(a) >= abs(b) else b


def episode_join(episodes: list[Episode], f: Finding, rule: RuleSpec) -> Episode:
    """Add finding F to the EPISODES of its rule and session (mutated): it extends the episode
    whose cooldown covers it, or starts a new one. An earlier turn that arrives late becomes the
    anchor of the episode it falls into, so the alert points at the turn that started it."""
    t = f.turn
    for ep in episodes:
        if ep.covers(f, rule.cooldown_turns, rule.cooldown_seconds):
            if t.turn < ep.first_turn:
                ep.first_turn, ep.first_ts, ep.snapshot_ref = t.turn, t.ts, t.ref
                ep.value, ep.threshold, ep.title, ep.unit = f.value, f.threshold, f.title, f.unit
                ep.anchor_moved = ep.changed = True
            if t.turn > ep.last_turn:
                ep.last_turn, ep.last_ts = t.turn, max(ep.last_ts, t.ts)
                ep.changed = True
            peak = _peak(ep.peak_value, f.value)
            if peak != ep.peak_value:
                ep.peak_value, ep.changed = peak, True
            return ep
    ep = Episode.from_finding(f)
    episodes.append(ep)
    return ep


def episodes_for(
    findings: Iterable[Finding], rules: dict[int, RuleSpec], existing: dict[int, list[Episode]] | None = None
) -> dict[int, list[Episode]]:
    """Group FINDINGS of one session into episodes per rule id, starting from EXISTING."""
    out: dict[int, list[Episode]] = existing if existing is not None else {}
    for f in sorted(findings, key=lambda f: (f.turn.turn, f.turn.ts, f.rule_id)):
        episode_join(out.setdefault(f.rule_id, []), f, rules[f.rule_id])
    return out


# --- contributing blocks -----------------------------------------------------
class Contributor(BlockOutline):
    """One block of an alert's anchor turn as the alert keeps it (`Alert.contributors`): the
    block's outline at the time, its share of the usable window, its growth since the previous
    turn and the tokens compression removed from it."""

    share: float
    delta: int
    compressed_tokens: int


def _occurrence_keys(blocks: Sequence[BlockOutline]) -> list[str]:
    return occurrence_keys(b["key"] for b in blocks)


def contributors(
    kind: str,
    *,
    blocks: Sequence[BlockOutline],
    usable_tokens: int,
    change: BlockChange | None = None,
    compressed_tokens: dict[str, int] | None = None,
    block_kinds: Sequence[str] = (),
    limit: int = 3,
) -> list[Contributor]:
    """The blocks that contributed most to a finding of KIND on a turn with BLOCKS (dicts with
    position, key, kind, tokens): growth since the previous turn for tier crossings and spikes,
    tokens removed for compression storms, size otherwise."""
    keyed = _occurrence_keys(blocks)
    usable = max(1, usable_tokens)
    delta: dict[str, int] = {}
    if change:
        for e in change.get("entered") or []:
            delta[e["key"]] = int(e.get("tokens") or 0)
        for g in change.get("grew") or []:
            delta[g["key"]] = int(g.get("after") or 0) - int(g.get("before") or 0)
    rows: list[Contributor] = []
    for okey, b in zip(keyed, blocks, strict=True):
        rows.append(
            {
                "position": b["position"],
                "key": b["key"],
                "kind": b["kind"],
                "tokens": int(b["tokens"]),
                "share": round(int(b["tokens"]) / usable, 4),
                "delta": delta.get(okey, 0),
                "compressed_tokens": (compressed_tokens or {}).get(b["key"], 0),
            }
        )
    if kind in (TIER_CROSSING, WATERMARK_SPIKE):
        rows.sort(key=lambda r: (-r["delta"], -r["tokens"], r["position"]))
    elif kind == COMPRESSION_STORM:
        rows.sort(key=lambda r: (-r["compressed_tokens"], -r["tokens"], r["position"]))
    elif kind == BLOCK_SHARE and block_kinds:
        rows.sort(key=lambda r: (r["kind"] not in block_kinds, -r["tokens"], r["position"]))
    else:
        rows.sort(key=lambda r: (-r["tokens"], r["position"]))
    return rows[:limit]
