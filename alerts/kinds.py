"""Alert rule kinds, their parameters and defaults, ORM-free: what a rule may say, and the
cleaning of what a user sends for it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ctxobs.wire import BLOCK_KINDS, COUNT_DRIFT_WARN, TIERS
from insights.lint import CHECKS as LINT_CHECKS

TIER_CROSSING = "tier_crossing"
WATERMARK_SPIKE = "watermark_spike"
BLOCK_SHARE = "block_share"
COMPRESSION_STORM = "compression_storm"
VALIDATION_FAILURE_RATE = "validation_failure_rate"
RECALL_MISS_RATE = "recall_miss_rate"
COUNT_DRIFT = "count_drift"
LINT_FINDING = "lint_finding"
CACHE_HIT_RATE_FELL = "cache_hit_rate_fell"

KINDS: dict[str, str] = {
    TIER_CROSSING: "Tier crossing",
    WATERMARK_SPIKE: "Watermark spike",
    BLOCK_SHARE: "One huge block",
    COMPRESSION_STORM: "Compression storm",
    VALIDATION_FAILURE_RATE: "Validation failure rate",
    RECALL_MISS_RATE: "Recall misses",
    COUNT_DRIFT: "Count drift",
    LINT_FINDING: "Lint finding",
    CACHE_HIT_RATE_FELL: "Cache hit rate fell",
}
# Kinds judged over a project's turns rather than turn by turn in a session: the prompt-cache
# lens compares the hit rate of the newest `tags.assembly_version` with the previous one's
# (alerts.services.cache_rules), after the insights analyzer has stored its figures.
PROJECT_KINDS = (CACHE_HIT_RATE_FELL,)
# The kinds the `kind` columns of the alert tables list as Django choices (which only Django's
# admin forms read; rules are checked against KINDS): the per-session kinds.
STORED_KINDS = {k: v for k, v in KINDS.items() if k not in PROJECT_KINDS}

SEVERITIES = ("info", "warning", "critical")
ALERT_TIERS = TIERS[1:]  # warn, compress, force, break
MAX_WINDOW_TURNS = 100

# A finding within this many turns (or seconds) of an alert of the same rule and session
# extends that alert instead of raising a new one.
DEFAULT_COOLDOWN_TURNS = 20
DEFAULT_COOLDOWN_SECONDS = 1800
MAX_COOLDOWN_TURNS = 100_000
MAX_COOLDOWN_SECONDS = 30 * 86400


@dataclass(frozen=True, slots=True)
class ParamSpec:
    name: str
    label: str
    type: type  # int, float, str (one of choices) or list (a subset of choices; empty = any)
    default: Any
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    help: str = ""


PARAMS: dict[str, tuple[ParamSpec, ...]] = {
    TIER_CROSSING: (
        ParamSpec(
            "tier",
            "Tier entered",
            str,
            "force",
            choices=ALERT_TIERS,
            help="fires when the previous turn was below this tier and this turn is at or above it",
        ),
    ),
    WATERMARK_SPIKE: (
        ParamSpec(
            "rise_points",
            "Rise (points)",
            float,
            20.0,
            0.0,
            200.0,
            help="watermark rise from the previous turn, in percentage points; 0 turns this test off",
        ),
        ParamSpec(
            "median_ratio",
            "Times the recent median",
            float,
            2.0,
            0.0,
            100.0,
            help="watermark at least this many times the median of the recent turns; 0 turns this test off",
        ),
        ParamSpec(
            "median_turns",
            "Median over turns",
            int,
            10,
            2,
            MAX_WINDOW_TURNS,
            help="how many previous turns the median is taken over (at least 3 must exist)",
        ),
        ParamSpec(
            "min_watermark_pct",
            "Ignore below (%)",
            float,
            30.0,
            0.0,
            200.0,
            help="the median test only fires at or above this watermark, so small contexts stay quiet",
        ),
    ),
    BLOCK_SHARE: (
        ParamSpec(
            "share_pct",
            "Share of usable window (%)",
            float,
            30.0,
            1.0,
            200.0,
            help="fires when a single block takes at least this share of the usable window",
        ),
        ParamSpec(
            "block_kinds",
            "Block kinds",
            list,
            ["tool_results", "retrieval", "other"],
            choices=BLOCK_KINDS,
            help="only blocks of these kinds count (comma-separated); empty means any block",
        ),
    ),
    COMPRESSION_STORM: (
        ParamSpec("events", "Compression events", int, 3, 1, 10_000),
        ParamSpec(
            "turns",
            "Within turns",
            int,
            5,
            1,
            MAX_WINDOW_TURNS,
            help="this turn and the turns just before it",
        ),
    ),
    VALIDATION_FAILURE_RATE: (
        ParamSpec("rate_pct", "Failure rate above (%)", float, 50.0, 0.0, 100.0),
        ParamSpec("turns", "Over the last turns", int, 10, 1, MAX_WINDOW_TURNS),
        ParamSpec(
            "min_checks",
            "Minimum checks",
            int,
            3,
            1,
            100_000,
            help="no alert until at least this many validation outcomes are in the window",
        ),
    ),
    RECALL_MISS_RATE: (
        ParamSpec(
            "rate_pct",
            "Miss rate above (%)",
            float,
            50.0,
            0.0,
            100.0,
            help="share of turns where recall ran but injected nothing",
        ),
        ParamSpec("turns", "Over the last turns", int, 10, 1, MAX_WINDOW_TURNS),
        ParamSpec("min_recalls", "Minimum recall turns", int, 3, 1, MAX_WINDOW_TURNS),
    ),
    COUNT_DRIFT: (
        ParamSpec(
            "drift_pct",
            "Drift above (%)",
            float,
            COUNT_DRIFT_WARN * 100,
            0.0,
            10_000.0,
            help="|our prompt count - provider's| / provider's",
        ),
    ),
    LINT_FINDING: (
        ParamSpec(
            "checks",
            "Checks",
            list,
            [],
            choices=tuple(LINT_CHECKS),
            help="fires on a turn where the contamination lint found one of these (comma-separated);"
            " empty means any check",
        ),
    ),
    CACHE_HIT_RATE_FELL: (
        ParamSpec(
            "drop_points",
            "Drop (points)",
            float,
            15.0,
            0.1,
            100.0,
            help="fires when the newest assembly version's cache hit rate is this many percentage "
                 "points below the previous version's",
        ),
        ParamSpec(
            "min_turns",
            "Minimum turns per version",
            int,
            20,
            1,
            100_000,
            help="turns (after the first of their session) each version needs before it is compared",
        ),
    ),
}


def default_params(kind: str) -> dict[str, Any]:
    return {p.name: p.default for p in PARAMS[kind]}


def validate_params(kind: str, raw: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, str]]:
    """Clean PARAMS of a rule of KIND: (values with defaults filled in, {param: error})."""
    if kind not in PARAMS:
        return {}, {"kind": f"unknown rule kind {kind!r}; one of {', '.join(KINDS)}"}
    raw = raw or {}
    clean: dict[str, Any] = {}
    errors: dict[str, str] = {}
    known = {p.name for p in PARAMS[kind]}
    for name in raw:
        if name not in known:
            errors[name] = f"unknown parameter for {kind}; known: {', '.join(sorted(known))}"
    for p in PARAMS[kind]:
        value = raw.get(p.name, p.default)
        if value is None or value == "":
            value = p.default
        if p.type is list:
            items = value.split(",") if isinstance(value, str) else value
            if not isinstance(items, list | tuple):
                errors[p.name] = "must be a list"
                continue
            picked = [str(x).strip() for x in items if str(x).strip()]
            bad = [x for x in picked if x not in p.choices]
            if bad:
                errors[p.name] = f"unknown {', '.join(bad)}; choose from {', '.join(p.choices)}"
                continue
            clean[p.name] = sorted(set(picked), key=p.choices.index)
            continue
        if p.type is str:
            if value not in p.choices:
                errors[p.name] = f"must be one of {', '.join(p.choices)}"
                continue
            clean[p.name] = value
            continue
        try:
            num = p.type(float(value)) if p.type is int else float(value)
        except (TypeError, ValueError):
            errors[p.name] = f"must be a number ({p.type.__name__})"
            continue
        if p.type is int and float(value) != int(float(value)):
            errors[p.name] = "must be a whole number"
            continue
        if p.minimum is not None and num < p.minimum:
            errors[p.name] = f"must be at least {p.minimum:g}"
            continue
        if p.maximum is not None and num > p.maximum:
            errors[p.name] = f"must be at most {p.maximum:g}"
            continue
        clean[p.name] = num
    return clean, errors


# --- incidents ---------------------------------------------------------------------------------
# Rule kinds that read the same condition from different angles form one family: a jump to 90%
# raises a tier crossing, a watermark spike and a block share at once, all about the window.
CONTEXT_PRESSURE = "context_pressure"
FAMILIES: dict[str, str] = {
    TIER_CROSSING: CONTEXT_PRESSURE,
    WATERMARK_SPIKE: CONTEXT_PRESSURE,
    BLOCK_SHARE: CONTEXT_PRESSURE,
}
# Families whose cause names the block that contributed most.
BLOCK_FAMILIES = (CONTEXT_PRESSURE, COMPRESSION_STORM)
CAUSE_MAX_CHARS = 300


def rule_family(kind: str) -> str:
    return FAMILIES.get(kind, kind)


def incident_cause(kind: str, contributors: list[dict[str, Any]] | None) -> str:
    """The machine key of what an alert is about: its rule family, and for the families about
    blocks, the key of its top contributing block ("context_pressure:tool_results")."""
    family = rule_family(kind)
    if family in BLOCK_FAMILIES and contributors:
        key = str(contributors[0].get("key") or "")
        if key:
            return f"{family}:{key}"[:CAUSE_MAX_CHARS]
    return family


_BLOCK_WORDS = {
    "system": "the system prompt",
    "tools": "tool definitions",
    "tool_results": "tool results",
    "retrieval": "retrieved text",
    "memory": "memory",
    "history": "the history",
    "user": "user input",
    "few_shot": "examples",
}


def _block_words(key: str, kind: str) -> str:
    words = _BLOCK_WORDS.get(kind, f"{kind} blocks" if kind else "a block")
    if not key or key == kind:
        return words
    return f"{words} from `{key}`"


_FAMILY_WORDS = {
    COMPRESSION_STORM: "a compression storm",
    VALIDATION_FAILURE_RATE: "outputs kept failing validation",
    RECALL_MISS_RATE: "recall kept missing",
    COUNT_DRIFT: "token counts drifted from the provider's",
    LINT_FINDING: "the contamination lint flagged turns",
    CACHE_HIT_RATE_FELL: "the prompt-cache hit rate fell",
}


def incident_title(
    *, cause: str, block_kind: str, agent: str, sessions: int, since: datetime, project_level: bool = False
) -> str:
    """The cause in words, e.g. "tool results from `search` overflowed the window in 14 sessions of
    agent travel-bot since 14:05 UTC". Plain text: block keys and agent names come from agents,
    and pages escape them."""
    family, _, key = cause.partition(":")
    if family == CONTEXT_PRESSURE:
        what = f"{_block_words(key, block_kind)} overflowed the window" if key else "the window overflowed"
        what = what[0].upper() + what[1:]
    elif family == COMPRESSION_STORM and key:
        what = f"Compression storm on {_block_words(key, block_kind)}"
    else:
        words = _FAMILY_WORDS.get(family, KINDS.get(family, family))
        what = words[0].upper() + words[1:]
    if project_level:
        return f"{what} (project-wide) since {since:%Y-%m-%d %H:%M} UTC"
    where = f"{sessions} session{'s' if sessions != 1 else ''}"
    of = f" of agent {agent}" if agent else ""
    return f"{what} in {where}{of} since {since:%H:%M} UTC"


@dataclass(frozen=True, slots=True)
class IncidentWindows:
    """How alerts group into incidents and when incidents end (a project's IncidentPolicy)."""

    # An alert of a session that starts within this many turns or seconds of an alert of an
    # incident in that session joins the incident, whatever its rule.
    session_window_turns: int = 10
    session_window_seconds: int = 300
    # An alert of the same agent and cause as an open incident seen within this long joins it.
    group_window_seconds: int = 1800
    # An incident with no new alert activity for this long resolves on its own, times how often
    # it has opened, up to quiet_max_factor: a cause that keeps returning stays one open incident
    # rather than resolved and reopened pairs (flapping).
    quiet_seconds: int = 1800
    quiet_max_factor: int = 4
    # The cause returning within this long after resolution reopens the incident.
    reopen_window_seconds: int = 7200
    # A new incident is pending (it sends nothing) until it is confirmed: a critical alert, alerts
    # from this many sessions, alerts raised on this many turns of one session, or alert activity
    # lasting this long. A pending incident that goes quiet resolves as transient, unannounced.
    confirm_sessions: int = 2
    confirm_turns: int = 3
    confirm_seconds: int = 900


INCIDENT_DEFAULTS = IncidentWindows()
INCIDENT_WINDOW_MAX_SECONDS = 30 * 86400
# The alerts a message lists (the rest are counted).
DIGEST_ALERTS = 20
# Messages per channel per rolling hour, unless the channel says otherwise.
DEFAULT_CHANNEL_MAX_PER_HOUR = 20
RATE_WINDOW_SECONDS = 3600
INCIDENT_EVENTS = ("opened", "escalated", "reopened", "resolved", "triaged")
