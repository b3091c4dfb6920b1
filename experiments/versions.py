"""The Versions page: did a new value of a tag (an assembly version, a prompt revision) make live
traffic worse? Figures per tag value with 95% intervals over sessions, each value against the one
before it, and a box chart of the watermark; no replay, only the turns already stored.

Turns of one session are not independent (the same conversation, the same user), so the
intervals resample whole sessions (a cluster bootstrap). Every figure is a ratio of sums over
turns (mean watermark = sum of watermarks / turns, failure rate = failed checks / checks): each
session weighs by how much it contributes, and the figure is the plain per-turn figure.
"""

from __future__ import annotations

import html
import math
import random
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from typing import Any, cast

import plotly.graph_objects as go
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from core.access import page_context, project_access
from ctxobs.validate import parse_ts
from experiments.stats import BETTER, SAME, WORSE, format_number, format_p
from ingest import selectors as ingest_selectors
from insights.prices import Price, price_for, price_table

DEFAULT_TAG = "assembly_version"
DEFAULT_DAYS = 7
MAX_VALUES = 12
MAX_TAG_CHARS = 256
NONE_LABEL = "(none)"
LEVEL = 0.95
N_BOOT = 1000
# Resampling costs N_BOOT x sessions in Python per figure and value. Above this many sessions a
# resample draws this many and its spread is scaled to the real number (an m-out-of-n bootstrap):
# the interval stays that of all the sessions at a bounded cost.
MAX_RESAMPLE = 250
# With fewer sessions on a side, a percentile interval over so few clusters is too narrow to
# call a difference.
MIN_SESSIONS = 3
_DIGITS = re.compile(r"(\d+)")


@dataclass(frozen=True)
class Figure:
    """A per-turn figure: the numerator and denominator each session contributes, and what the
    denominator counts (`basis`: "turns", "checks")."""

    key: str
    label: str
    higher_is_better: bool
    basis: str
    money: bool = False


FIGURES: tuple[Figure, ...] = (
    Figure("watermark", "mean watermark", higher_is_better=False, basis="turns"),
    Figure("compressions", "compressions per turn", higher_is_better=False, basis="turns"),
    Figure("validation_failure", "validation failure rate", higher_is_better=False, basis="checks"),
    # Recalled memories that reached the prompt: a lower rate means recall fetched what assembly dropped.
    Figure("recall_injection", "recall injection rate", higher_is_better=True, basis="recalled items"),
    Figure("cache_hit", "cache hit rate", higher_is_better=True, basis="turns reporting cache"),
    Figure("cost", "cost per turn (USD)", higher_is_better=False, basis="priced turns", money=True),
)


@dataclass(frozen=True)
class Estimate:
    """A figure of one tag value: its value, the LEVEL interval over sessions, how many units
    the denominator counts (`basis`) and how many sessions contributed."""

    value: float
    lo: float
    hi: float
    basis: int
    sessions: int
    replicates: tuple[float, ...] = field(repr=False, compare=False)


@dataclass(frozen=True)
class Group:
    """The turns of one tag value (None: without the tag) in the period."""

    value: str | None
    label: str
    turns: int
    sessions: int
    first_received: datetime
    watermark_median: float
    watermark_p90: float
    watermark_quantiles: tuple[float, ...]
    estimates: dict[str, Estimate | None]


@dataclass(frozen=True)
class Comparison:
    """A figure of a value against the value before it: the difference, its interval, a p-value
    (None when too few sessions to test) and the verdict in words."""

    figure: Figure
    value: float
    base: float
    diff: float
    lo: float
    hi: float
    p: float | None
    direction: str
    words: str


@dataclass(frozen=True)
class Step:
    group: Group
    base: Group
    comparisons: list[Comparison]

    @property
    def worse(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.direction == WORSE]

    @property
    def better(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.direction == BETTER]


@dataclass(frozen=True)
class Report:
    tag: str
    groups: list[Group]
    steps: list[Step]
    total_values: int
    figure: dict[str, Any] | None


# --- resampling ------------------------------------------------------------------------------
def _percentile(sorted_values: Sequence[float], q: float) -> float:
    # Linear interpolation between order statistics, as experiments.stats.bootstrap_ci reads its own.
    pos = q * (len(sorted_values) - 1)
    i = math.floor(pos)
    j = min(i + 1, len(sorted_values) - 1)
    return sorted_values[i] + (sorted_values[j] - sorted_values[i]) * (pos - i)


def cluster_ratio_bootstrap(
    series: Sequence[tuple[Sequence[float], Sequence[float]]], *, seed: int, n_boot: int = N_BOOT,
    level: float = LEVEL, max_resample: int = MAX_RESAMPLE,
) -> list[tuple[float, float, float, tuple[float, ...]]]:
    """For each (numerators, denominators) of SERIES, one of each per session (the same sessions
    in every series, each denominator > 0): (ratio, lo, hi, replicates), the sum of numerators
    over the sum of denominators, its percentile interval at LEVEL from N_BOOT resamples of whole
    sessions (one draw of sessions serves every series) and the resampled ratios. Above
    MAX_RESAMPLE sessions each resample draws MAX_RESAMPLE and its deviation from the ratio is
    scaled by sqrt(MAX_RESAMPLE / sessions). The same SEED gives the same intervals."""
    n = len(series[0][0]) if series else 0
    if n == 0 or any(len(nums) != n or len(dens) != n for nums, dens in series):
        raise ValueError("a bootstrap needs the same sessions, at least one, in every series")
    ratios = [math.fsum(nums) / math.fsum(dens) for nums, dens in series]
    if n == 1:
        return [(r, r, r, (r,) * n_boot) for r in ratios]
    m = min(n, max_resample)
    scale = math.sqrt(m / n)
    rng = random.Random(seed)
    population = range(n)
    reps: list[list[float]] = [[] for _ in series]
    for _ in range(n_boot):
        idx = rng.choices(population, k=m)
        pick = itemgetter(*idx)
        for (nums, dens), ratio, out in zip(series, ratios, reps, strict=True):
            r = sum(cast(tuple[float, ...], pick(nums))) / sum(cast(tuple[float, ...], pick(dens)))
            out.append(ratio + (r - ratio) * scale)
    tail = (1 - level) / 2
    result = []
    for ratio, out in zip(ratios, reps, strict=True):
        ordered = sorted(out)
        result.append((ratio, _percentile(ordered, tail), _percentile(ordered, 1 - tail), tuple(out)))
    return result


def _seed(label: str, key: str) -> int:
    # Fixed per value and figure: the page shows the same intervals on every load, and the
    # resamples of two values are independent of each other.
    return zlib.crc32(f"{label}\x00{key}".encode())


# --- per session -----------------------------------------------------------------------------
# Per figure, the columns of ingest.selectors.tag_value_session_sums that give its numerator,
# denominator and basis; the cost comes from the price of each row's model.
_SUMS: dict[str, tuple[str, str, str]] = {
    "watermark": ("watermark", "turns", "turns"),
    "compressions": ("compressions", "turns", "turns"),
    "validation_failure": ("checks_failed", "checks", "checks"),
    "recall_injection": ("injected", "recalled", "recalled"),
    "cache_hit": ("cache_read", "cache_prompt", "cache_turns"),
}


def _session_pairs(
    rows: Sequence[Mapping[str, Any]], price: Callable[[str], Price | None]
) -> dict[str | None, dict[str, list[tuple[int, float, float, int]]]]:
    """Per value, per figure: (session ref, numerator, denominator, basis) of each session with a
    denominator, in the order of the sessions."""
    sessions: dict[tuple[str | None, int], dict[str, list[float]]] = {}
    for r in rows:
        key = (r["value"], r["session_ref"])
        acc = sessions.get(key)
        if acc is None:
            acc = sessions[key] = {f.key: [0.0, 0.0, 0.0] for f in FIGURES}
        for fig, (num, den, basis) in _SUMS.items():
            a = acc[fig]
            a[0] += r[num]
            a[1] += r[den]
            a[2] += r[basis]
        p = price(r["model"])
        if p is not None and r["usage_turns"]:
            a = acc["cost"]
            a[0] += (r["usage_plain"] * p.input + r["usage_cached"] * p.cached_input
                     + r["usage_completion"] * p.output) / 1_000_000
            a[1] += r["usage_turns"]
            a[2] += r["usage_turns"]
    out: dict[str | None, dict[str, list[tuple[int, float, float, int]]]] = {}
    for (value, ref), acc in sorted(sessions.items(), key=lambda kv: (kv[0][1], kv[0][0] or "")):
        per = out.setdefault(value, {f.key: [] for f in FIGURES})
        for fig, (total, weight, count) in acc.items():
            if weight > 0:
                per[fig].append((ref, total, weight, int(count)))
    return out


# --- comparisons -----------------------------------------------------------------------------
def version_key(value: str) -> tuple[tuple[int, int | str], ...]:
    """Natural order: digit runs compare as numbers, so v9 < v10 < v15 and 1.9 < 1.10."""
    return tuple((0, int(part)) if part.isdigit() else (1, part.lower())
                 for part in _DIGITS.split(value) if part)


def _ordered(groups: list[Group]) -> list[Group]:
    """Tagged values in version order when every one holds a number, else by first seen;
    turns without the tag last."""
    tagged = [g for g in groups if g.value is not None]
    untagged = [g for g in groups if g.value is None]
    if tagged and all(_DIGITS.search(g.value or "") for g in tagged):
        tagged.sort(key=lambda g: (version_key(g.value or ""), g.value))
    else:
        tagged.sort(key=lambda g: (g.first_received, g.value or ""))
    return tagged + untagged


def _number(x: float, money: bool = False) -> str:
    # Float noise around zero (a difference of equal means) reads as 0.
    x = 0.0 if abs(x) < 1e-12 else x
    sign = "-" if x < 0 else ""
    return f"{sign}{'$' if money else ''}{format_number(abs(x))}"


def _signed(x: float, money: bool = False) -> str:
    return ("+" if x >= 1e-12 else "") + _number(x, money)


def compare(figure: Figure, group: Group, base: Group, *, level: float = LEVEL) -> Comparison | None:
    """FIGURE of GROUP against BASE (None when either has no such figure): the difference of the
    two, its percentile interval from their independent cluster resamples, and a verdict. A
    difference whose interval leaves out 0 is worse or better by FIGURE's direction, provided
    both sides have MIN_SESSIONS sessions with the figure; otherwise it is within noise."""
    a, b = base.estimates.get(figure.key), group.estimates.get(figure.key)
    if a is None or b is None:
        return None
    diff = b.value - a.value
    diffs = sorted(y - x for x, y in zip(a.replicates, b.replicates, strict=True))
    tail = (1 - level) / 2
    lo, hi = _percentile(diffs, tail), _percentile(diffs, 1 - tail)
    m = figure.money
    ci = f"{format_number(level * 100)}% CI {_signed(lo, m)} to {_signed(hi, m)}"
    head = (f"{group.label}: {figure.label} {_number(b.value, m)} against {_number(a.value, m)} "
            f"for {base.label} ({_signed(diff, m)}, {ci})")
    if min(a.sessions, b.sessions) < MIN_SESSIONS:
        words = (f"{head}: too few sessions to tell ({b.sessions} and {a.sessions}; "
                 f"{MIN_SESSIONS} on each side needed)")
        return Comparison(figure, b.value, a.value, diff, lo, hi, None, SAME, words)
    below = sum(1 for d in diffs if d <= 0)
    above = sum(1 for d in diffs if d >= 0)
    p = min(1.0, 2 * (1 + min(below, above)) / (1 + len(diffs)))
    if lo > 0 or hi < 0:
        direction = BETTER if (diff > 0) == figure.higher_is_better else WORSE
        words = f"{head}: {direction} ({format_p(p)})"
    else:
        direction = SAME
        words = f"{head}: no difference beyond noise ({format_p(p)})"
    return Comparison(figure, b.value, a.value, diff, lo, hi, p, direction, words)


# --- the report ------------------------------------------------------------------------------
def versions_report(
    *, tag: str, summaries: Sequence[Mapping[str, Any]], session_rows: Sequence[Mapping[str, Any]],
    prices: Mapping[str, Price], total_values: int,
) -> Report:
    """The figures of each tag value (SUMMARIES from ingest.selectors.tag_value_summaries, SESSION_ROWS
    from tag_value_session_sums), ordered as versions, each value against the one before it
    (turns without the tag are not compared), and the watermark box chart."""
    cache: dict[str, Price | None] = {}

    def price(model: str) -> Price | None:
        if model not in cache:
            cache[model] = price_for(model, prices)
        return cache[model]

    pairs = _session_pairs(session_rows, price)
    groups: list[Group] = []
    for s in summaries:
        label = NONE_LABEL if s["value"] is None else str(s["value"])
        per = pairs.get(s["value"], {})
        estimates: dict[str, Estimate | None] = {f.key: None for f in FIGURES}
        # Figures over the same sessions (most of them: every session has turns) share each draw.
        populations: dict[tuple[int, ...], list[str]] = {}
        for key, rows in per.items():
            if rows:
                populations.setdefault(tuple(ref for ref, *_ in rows), []).append(key)
        for keys in populations.values():
            found = cluster_ratio_bootstrap(
                [([r[1] for r in per[k]], [r[2] for r in per[k]]) for k in keys], seed=_seed(label, keys[0]))
            for key, (ratio, lo, hi, reps) in zip(keys, found, strict=True):
                rows = per[key]
                estimates[key] = Estimate(ratio, lo, hi, sum(r[3] for r in rows), len(rows), reps)
        q = tuple(s["watermark_quantiles"])
        groups.append(Group(
            value=s["value"], label=label, turns=s["turns"], sessions=s["sessions"],
            first_received=s["first_received"], watermark_median=q[2], watermark_p90=q[4],
            watermark_quantiles=q, estimates=estimates,
        ))
    groups = _ordered(groups)
    tagged = [g for g in groups if g.value is not None]
    steps = []
    for base, group in zip(tagged, tagged[1:], strict=False):
        compared = [compare(f, group, base) for f in FIGURES]
        steps.append(Step(group=group, base=base, comparisons=[c for c in compared if c is not None]))
    return Report(tag=tag, groups=groups, steps=steps, total_values=total_values,
                  figure=watermark_figure(groups) if groups else None)


def watermark_figure(groups: Sequence[Group]) -> dict[str, Any]:
    """A box per value, drawn with bar and scatter traces (the dashboard's plotly.js bundle has no
    box trace): the middle half of the turns' watermarks, the median, whiskers from the 10th to
    the 90th percentile, and the mean with its interval over sessions."""
    # Plotly renders a subset of HTML in labels: tag values go in as entities.
    labels = [html.escape(g.label, quote=False) for g in groups]
    q = [g.watermark_quantiles for g in groups]
    means = [g.estimates["watermark"] for g in groups]
    whisker_x: list[str | None] = []
    whisker_y: list[float | None] = []
    for label, qs in zip(labels, q, strict=True):
        whisker_x += [label, label, None]
        whisker_y += [qs[0], qs[4], None]
    fig = go.Figure()
    fig.add_scatter(x=whisker_x, y=whisker_y, mode="lines", name="10th to 90th percentile",
                    line={"color": "#8a94a3", "width": 1.5}, hoverinfo="skip")
    fig.add_bar(x=labels, base=[qs[1] for qs in q], y=[qs[3] - qs[1] for qs in q], width=0.5,
                name="middle half of turns",
                marker={"color": "#c9dcf2", "line": {"color": "#1e88e5", "width": 1}},
                customdata=[[qs[1], qs[3]] for qs in q],
                hovertemplate="25th %{customdata[0]:.3f} to 75th %{customdata[1]:.3f}<extra></extra>")
    fig.add_scatter(x=labels, y=[qs[2] for qs in q], mode="markers", name="median",
                    marker={"symbol": "line-ew-open", "size": 34, "color": "#1b1f24", "line": {"width": 3}},
                    hovertemplate="median %{y:.3f}<extra></extra>")
    shown = [(label, e) for label, e in zip(labels, means, strict=True) if e is not None]
    fig.add_scatter(
        x=[label for label, _ in shown], y=[e.value for _, e in shown], mode="markers",
        name=f"mean, {format_number(LEVEL * 100)}% CI over sessions",
        marker={"symbol": "diamond", "size": 9, "color": "#c2185b"},
        error_y={"type": "data", "symmetric": False, "array": [e.hi - e.value for _, e in shown],
                 "arrayminus": [e.value - e.lo for _, e in shown], "color": "#c2185b", "width": 6},
        hovertemplate="mean %{y:.3f}<extra></extra>",
    )
    fig.update_layout(
        template="none", height=340, bargap=0.5, showlegend=True,
        font={"size": 12, "color": "#1b1f24"},
        margin={"l": 56, "r": 24, "t": 16, "b": 40},
        legend={"orientation": "h", "y": -0.2, "x": 0, "font": {"size": 11}},
        xaxis={"type": "category", "title": {"text": ""}, "automargin": True},
        yaxis={"title": {"text": "watermark (fill of the usable window)"}, "rangemode": "tozero",
               "gridcolor": "#eef0f3", "zeroline": False},
        paper_bgcolor="#ffffff", plot_bgcolor="#ffffff",
    )
    return cast(dict[str, Any], fig.to_plotly_json())


# --- the page --------------------------------------------------------------------------------
def _when(text: str, *, end: bool) -> datetime | None:
    """A date (UTC; as the END of a range, through that whole day) or an ISO 8601 time (UTC when
    it names no zone); None when neither."""
    text = text.strip()
    if len(text) == 10:
        try:
            day = datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
            return day + timedelta(days=1) if end else day
        except (ValueError, OverflowError):
            return None
    return parse_ts(text) or parse_ts(text + "Z")


def _period(params: Mapping[str, str], now: datetime) -> tuple[datetime, datetime, list[str]]:
    """[since, until) from the query (default: the DEFAULT_DAYS up to now) and what was wrong in it."""
    errors = []
    until = now
    if (raw := params.get("until", "").strip()):
        parsed = _when(raw, end=True)
        if parsed is None:
            errors.append("until: a date (2026-12-01) or an ISO 8601 time; showing up to now")
        else:
            until = parsed
    try:
        since = until - timedelta(days=DEFAULT_DAYS)
    except OverflowError:
        since = datetime.min.replace(tzinfo=UTC)
    if (raw := params.get("since", "").strip()):
        parsed = _when(raw, end=False)
        if parsed is None:
            errors.append(f"since: a date (2026-12-01) or an ISO 8601 time; showing {DEFAULT_DAYS} days")
        elif parsed >= until:
            errors.append(f"since must come before until; showing {DEFAULT_DAYS} days")
        else:
            since = parsed
    return since, until, errors


@require_GET
def versions_page(request: HttpRequest, project_id: int) -> HttpResponse:
    """Each value of a tag on the period's turns, side by side with 95% intervals over sessions,
    and each value against the one before it. Two queries for the figures, whatever the traffic."""
    project, membership = project_access(request, project_id, "viewer")
    params = {k: request.GET.get(k, "") for k in ("tag", "since", "until")}
    tag = params["tag"].strip() or DEFAULT_TAG
    since, until, errors = _period(params, datetime.now(UTC))
    if len(tag) > MAX_TAG_CHARS:
        errors.append(f"tag: at most {MAX_TAG_CHARS} characters; showing {DEFAULT_TAG}")
        tag = DEFAULT_TAG
    summaries, total = ingest_selectors.tag_value_summaries(
        project=project, tag=tag, since=since, until=until, limit=MAX_VALUES)
    rows = ingest_selectors.tag_value_session_sums(
        project=project, tag=tag, since=since, until=until, values=[s["value"] for s in summaries],
    ) if summaries else []
    report = versions_report(tag=tag, summaries=summaries, session_rows=rows,
                             prices=price_table(project.price_table), total_values=total)
    figure_rows = [{"figure": f, "cells": [g.estimates[f.key] for g in report.groups]} for f in FIGURES]
    return render(
        request,
        "experiments/versions.html",
        page_context(
            request, project, membership, report=report, figure_rows=figure_rows,
            latest=report.steps[-1] if report.steps else None, errors=errors, tag=tag, since=since,
            until=until, since_text=params["since"].strip(), until_text=params["until"].strip(),
            default_days=DEFAULT_DAYS, n_boot=N_BOOT, max_resample=MAX_RESAMPLE, min_sessions=MIN_SESSIONS,
            max_values=MAX_VALUES,
        ),
    )
