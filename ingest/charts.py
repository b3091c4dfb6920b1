"""Figures and colours of the dashboard, ORM-free: plain rows in, plotly figures / SVG points out.

The one palette of the app lives here: a block kind and a tier have the same colour in the
timeline chart, the tables, the turn page and the overview (CSS variables are generated from
these dicts by the `palette_css` template tag).

One module, a little over the usual size: every figure draws from the one palette and the
shared layout helpers here (`_layout`, `typed_array`, `_day_axis`), which keeps the charts alike.
"""

from __future__ import annotations

import array
import base64
import html
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import plotly.graph_objects as go

from core.registry import TimelineOverlay
from ctxobs.wire import BLOCK_KINDS, TIERS
from ingest.types import AlertMarker, TurnChartRow

KIND_COLOURS: dict[str, str] = {
    "system": "#4c5b75",
    "tools": "#7e57c2",
    "constraints": "#c2185b",
    "memory": "#00897b",
    "summary": "#8d6e63",
    "history": "#1e88e5",
    "retrieval": "#f9a825",
    "tool_results": "#ef6c00",
    "user": "#43a047",
    "other": "#9e9e9e",
}
TIER_COLOURS: dict[str, str] = {
    "ok": "#2e7d32",
    "warn": "#c99a00",
    "compress": "#ef6c00",
    "force": "#d84315",
    "break": "#b71c1c",
}
EVENT_COLOURS: dict[str, str] = {
    "watermark": "#1b1f24",
    "compression": "#6a1b9a",
    "validation": "#b71c1c",
    "alert": "#d50000",
    "finding": "#e65100",
}
FONT = "-apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"


def kind_colour(kind: str) -> str:
    return KIND_COLOURS.get(kind, KIND_COLOURS["other"])


def kind_css_class(kind: str) -> str:
    """The CSS class carrying a kind's colour (see the palette_css template tag)."""
    return f"k-{kind}" if kind in KIND_COLOURS else "k-other"


def ordered_kinds(kinds: Iterable[str]) -> list[str]:
    """Kinds in the canonical order (most stable first), unknown kinds last."""
    present = set(kinds)
    known = [k for k in BLOCK_KINDS if k in present]
    return known + sorted(present - set(known))


def _text(value: Any) -> str:
    # Plotly renders a subset of HTML in hover/labels; untrusted text goes in as entities.
    return html.escape(str(value), quote=False)


AXIS = {
    "gridcolor": "#eef0f3",
    "zeroline": False,
    "linecolor": "#d0d6dd",
    "showline": True,
    "ticks": "outside",
    "tickcolor": "#d0d6dd",
    "ticklen": 4,
    "automargin": True,
}


def _layout(**extra: Any) -> dict[str, Any]:
    """The common layout. No named plotly template: applying one costs 30-300 ms per figure in
    plotly.py, more than the whole 2,000-turn timeline; the few styles it gave are set here."""
    for axis in ("xaxis", "yaxis", "yaxis2"):
        if axis in extra:
            extra[axis] = {**AXIS, **extra[axis]}
    base: dict[str, Any] = {
        "template": "none",
        "font": {"family": FONT, "size": 12, "color": "#1b1f24"},
        "margin": {"l": 56, "r": 56, "t": 16, "b": 40},
        "legend": {"orientation": "h", "y": -0.18, "x": 0, "font": {"size": 11}},
        "hoverlabel": {"font": {"family": FONT, "size": 12}},
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
    }
    base.update(extra)
    return base


# Smallest signed integer type that holds the values, as plotly does for numpy arrays.
_INT_TYPES = (("b", "i1", 2**7), ("h", "i2", 2**15), ("i", "i4", 2**31))


def typed_array(values: Sequence[float]) -> dict[str, str]:
    """VALUES as a plotly.js typed array (`{"dtype", "bdata"}`, little-endian): a 2,000-turn trace is
    a few KiB of base64 instead of a JSON list. Built with the standard library, so the server
    needs no numpy (plotly encodes only numpy arrays this way)."""
    arr, dtype = array.array("d", values), "f8"
    if all(isinstance(v, int) for v in values):
        lo, hi = (min(values), max(values)) if values else (0, 0)
        for code, name, bound in _INT_TYPES:
            # A C int is not 32 bits on every platform: only use a type of the size plotly.js reads.
            if -bound <= lo and hi < bound and array.array(code).itemsize == int(name[1]):
                arr, dtype = array.array(code, values), name
                break
    if sys.byteorder == "big":
        arr.byteswap()
    return {"dtype": dtype, "bdata": base64.b64encode(arr.tobytes()).decode("ascii")}


def figure_json(fig: go.Figure) -> dict[str, Any]:
    """A figure as a JSON-ready dict (typed arrays stay base64-encoded, which keeps it compact)."""
    out: dict[str, Any] = json.loads(fig.to_json(engine="json"))
    return out


# --- the session timeline -------------------------------------------------------
# Above this many turns the timeline draws block kinds as stacked areas rather than bars.
DENSE_TURNS = 300


def _kind_traces(rows: Sequence[TurnChartRow], turns: dict[str, str]) -> list[dict[str, Any]]:
    """The tokens of each block kind per turn, stacked: bars, or step areas for a dense timeline."""
    kinds = ordered_kinds(k for r in rows for k in (r["kind_tokens"] or {}))
    dense = len(rows) > DENSE_TURNS
    traces: list[dict[str, Any]] = []
    for kind in kinds:
        ys = typed_array([int((r["kind_tokens"] or {}).get(kind, 0)) for r in rows])
        if dense:
            # Stacked step areas: one SVG path per kind instead of one rectangle per turn and
            # kind (14,000 for a 2,000-turn session, seconds to draw); at this density columns
            # are under a pixel wide, so the picture is the same.
            traces.append(
                {
                    "type": "scatter",
                    "x": turns,
                    "y": ys,
                    "name": kind,
                    "stackgroup": "tokens",
                    "mode": "lines",
                    "line": {"shape": "hv", "width": 0, "color": kind_colour(kind)},
                    "fillcolor": kind_colour(kind),
                    "hovertemplate": "%{y:,} tokens<extra>" + kind + "</extra>",
                }
            )
            continue
        traces.append(
            {
                "type": "bar",
                "x": turns,
                "y": ys,
                "name": kind,
                "marker": {"color": kind_colour(kind), "line": {"width": 0}},
                "hovertemplate": "%{y:,} tokens<extra>" + kind + "</extra>",
            }
        )
    return traces


def _watermark_trace(turns: dict[str, str], wm: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "scatter",
        "x": turns,
        "y": wm,
        "name": "watermark %",
        "yaxis": "y2",
        "mode": "lines",
        "line": {"color": EVENT_COLOURS["watermark"], "width": 1.6},
        "hovertemplate": "watermark %{y:.1f}%<extra></extra>",
    }


@dataclass(frozen=True, slots=True)
class _Marks:
    """Markers of one kind on the watermark line: the indexes of the turns marked and a hover
    text for each."""

    name: str
    symbol: str
    colour: str
    pick: list[int]
    texts: list[str]


def _marker_trace(marks: _Marks, turn_list: Sequence[int], wm_list: Sequence[float]) -> dict[str, Any]:
    return {
        "type": "scatter",
        "x": [turn_list[i] for i in marks.pick],
        "y": [wm_list[i] for i in marks.pick],
        "name": marks.name,
        "yaxis": "y2",
        "mode": "markers",
        "marker": {
            "symbol": marks.symbol,
            "size": 10,
            "color": marks.colour,
            "line": {"width": 1, "color": "#ffffff"},
        },
        "text": marks.texts,
        "hovertemplate": "%{text}<extra>" + marks.name + "</extra>",
    }


def _event_marks(rows: Sequence[TurnChartRow]) -> list[_Marks]:
    """Turns with compression events, provider edits and failed validation checks."""
    # Edits the provider made on its side get their own marker: the client's log does not show them.
    comp = [i for i, r in enumerate(rows) if r["n_compression"] > r.get("n_provider_edits", 0)]
    edits = [i for i, r in enumerate(rows) if r.get("n_provider_edits", 0)]
    fail = [i for i, r in enumerate(rows) if r["n_validation_failed"]]
    return [
        _Marks(
            "compression",
            "diamond",
            EVENT_COLOURS["compression"],
            comp,
            [f"{rows[i]['n_compression'] - rows[i].get('n_provider_edits', 0)} compression event(s)"
             for i in comp],
        ),
        _Marks(
            "provider edit",
            "diamond-open",
            EVENT_COLOURS["compression"],
            edits,
            [f"{rows[i].get('n_provider_edits', 0)} edit(s) made by the provider" for i in edits],
        ),
        _Marks(
            "validation failed",
            "x",
            EVENT_COLOURS["validation"],
            fail,
            [f"{rows[i]['n_validation_failed']} failed check(s)" for i in fail],
        ),
    ]


def _pinned_marks(
    rows: Sequence[TurnChartRow], name: str, symbol: str, colour: str, pinned: Sequence[AlertMarker]
) -> _Marks:
    """Turns with PINNED markers (alerts, lint findings), each with the first five titles."""
    index = {r["turn"]: i for i, r in enumerate(rows)}
    by_turn: dict[int, list[str]] = {}
    for a in pinned:
        if a.get("turn") in index:
            by_turn.setdefault(a["turn"], []).append(
                f"{_text(a.get('severity', ''))}: {_text(a.get('title', ''))}"
            )
    return _Marks(
        name,
        symbol,
        colour,
        [index[t] for t in sorted(by_turn)],
        ["<br>".join(by_turn[t][:5]) for t in sorted(by_turn)],
    )


def _overlay_trace(ov: TimelineOverlay) -> dict[str, Any]:
    return {
        "type": "scatter",
        "x": typed_array([int(t) for t in ov.turns]),
        "y": typed_array([float(v) for v in ov.values]),
        "name": ov.name,
        "mode": "lines",
        "line": {"color": ov.colour, "width": 1.6, "dash": ov.dash, "shape": "hv"},
        "text": [_text(t) for t in ov.texts] if ov.texts else None,
        "hovertemplate": ("%{text}" if ov.texts else "%{y:,}") + "<extra>" + _text(ov.name) + "</extra>",
    }


def _tier_bands(thresholds: tuple[float, float, float, float], top: float) -> list[dict[str, Any]]:
    """A band behind the watermark axis for each tier above "ok", up to TOP."""
    bounds = [0.0, *[t * 100 for t in thresholds], top]
    shapes = []
    for tier, lo, hi in zip(TIERS, bounds, bounds[1:], strict=False):
        if tier == "ok" or hi <= lo:
            continue
        shapes.append(
            {
                "type": "rect",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "yref": "y2",
                "y0": lo,
                "y1": hi,
                "fillcolor": TIER_COLOURS[tier],
                "opacity": 0.12,
                "line": {"width": 0},
                "layer": "below",
            }
        )
    return shapes


def _timeline_layout(
    n_rows: int, thresholds: tuple[float, float, float, float], top: float
) -> dict[str, Any]:
    return _layout(
        barmode="stack",
        bargap=0.15 if n_rows < 200 else 0.0,
        hovermode="x unified",
        xaxis={"title": {"text": "turn"}, "showgrid": False, "zeroline": False},
        yaxis={"title": {"text": "tokens"}, "rangemode": "tozero", "gridcolor": "#eef0f3"},
        yaxis2={
            "title": {"text": "watermark %"},
            "overlaying": "y",
            "side": "right",
            "range": [0, top],
            "showgrid": False,
            "ticksuffix": "%",
            # Ticks at the tier thresholds: the bands read as the project's tiers.
            "tickvals": [0, *[round(t * 100, 1) for t in thresholds]],
        },
        shapes=_tier_bands(thresholds, top),
        # The page draws the legend (same palette as the tables); plotly's would repeat it.
        showlegend=False,
        margin={"l": 56, "r": 56, "t": 10, "b": 40},
        height=360,
        uirevision="timeline",
    )


def timeline_figure(
    *,
    rows: Sequence[TurnChartRow],
    thresholds: tuple[float, float, float, float],
    alerts: Sequence[AlertMarker] = (),
    findings: Sequence[AlertMarker] = (),
    overlays: Sequence[TimelineOverlay] = (),
) -> go.Figure:
    """One column per turn: tokens stacked by block kind; the watermark (%) on a second axis over
    the tier bands; markers for compression events, validation failures and alerts; the lines
    other apps registered (core.registry.timeline_overlays) on the token axis.

    ROWS are timeline rows (turn, watermark, kind_tokens, n_compression, n_validation_failed);
    ALERTS are markers with turn, severity, title; FINDINGS (lint findings) the same.
    """
    turn_list = [int(r["turn"]) for r in rows]
    wm_list = [round(float(r["watermark"]) * 100, 2) for r in rows]
    turns = typed_array(turn_list)
    marks = _event_marks(rows)
    if alerts:
        marks.append(_pinned_marks(rows, "alert", "triangle-up", EVENT_COLOURS["alert"], alerts))
    if findings:
        marks.append(_pinned_marks(rows, "lint finding", "star", EVENT_COLOURS["finding"], findings))
    # Traces as dicts, validated once when the figure is built: adding traces and updating the
    # layout one at a time re-validates the figure on every step (5x slower for 2,000 turns).
    traces = [
        *_kind_traces(rows, turns),
        _watermark_trace(turns, typed_array(wm_list)),
        *(_marker_trace(m, turn_list, wm_list) for m in marks if m.pick),
        *(_overlay_trace(ov) for ov in overlays),
    ]
    top = max(100.0, max(wm_list) + 5 if wm_list else 100.0)
    return go.Figure(data=traces, layout=_timeline_layout(len(rows), thresholds, top))


# --- sessions list sparkline ------------------------------------------------------
def sparkline_points(values: Sequence[float], *, width: int = 96, height: int = 22, top: float = 1.0) -> str:
    """SVG polyline points for VALUES (watermarks) scaled to 0..max(TOP, max(values))."""
    if not values:
        return ""
    hi = max(top, *values)
    n = len(values)
    step = width / (n - 1) if n > 1 else 0
    pts = []
    for i, v in enumerate(values):
        x = i * step if n > 1 else width / 2
        y = height - (v / hi) * (height - 2) - 1
        pts.append(f"{x:.1f},{y:.1f}")
    if n == 1:
        pts.insert(0, f"0,{pts[0].split(',')[1]}")
        pts.append(f"{width},{pts[0].split(',')[1]}")
    return " ".join(pts)


def sparkline_y(value: float, *, height: int = 22, top: float = 1.0, values: Sequence[float] = ()) -> float:
    """The y of a threshold line in a sparkline drawn by `sparkline_points` with the same VALUES."""
    hi = max(top, *values) if values else top
    return round(height - (value / hi) * (height - 2) - 1, 1)


# --- project overview ---------------------------------------------------------------
DAY_MS = 86_400_000
# Bars on a date axis are as wide as their given width in ms; plotly's default for a lone day is ~0.
DAY_BAR = DAY_MS * 0.7


def _day_axis(days: Sequence[Any]) -> dict[str, Any]:
    """A date x axis with one tick per day at most; a short period is padded so plotly does not
    zoom into hours (or milliseconds, for a single day)."""
    axis: dict[str, Any] = {"type": "date", "tickformat": "%b %d", "showgrid": False}
    if days:
        lo, hi = min(days), max(days)
        if (hi - lo).days < 7:
            axis["range"] = [(lo - timedelta(days=1)).isoformat(), (hi + timedelta(days=1)).isoformat()]
            axis["dtick"] = DAY_MS
    return axis


def activity_figure(*, days: Sequence[Any], sessions: Sequence[int], turns: Sequence[int]) -> go.Figure:
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=list(days),
            y=list(turns),
            width=DAY_BAR,
            name="turns",
            marker={"color": "#9fb3c8"},
            hovertemplate="%{x|%Y-%m-%d}: %{y:,} turns<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=list(days),
            y=list(sessions),
            name="sessions",
            yaxis="y2",
            mode="lines+markers",
            line={"color": "#1b1f24", "width": 1.6},
            hovertemplate="%{x|%Y-%m-%d}: %{y:,} sessions<extra></extra>",
        )
    )
    # One assignment validates the layout once; update_layout costs ~60 ms a figure.
    fig.layout = (
        _layout(
            height=260,
            yaxis={"title": {"text": "turns"}, "rangemode": "tozero", "gridcolor": "#eef0f3"},
            yaxis2={
                "title": {"text": "sessions"},
                "overlaying": "y",
                "side": "right",
                "rangemode": "tozero",
                "showgrid": False,
                "tickformat": ",d",
            },
            xaxis=_day_axis(days),
            bargap=0.2,
        )
    )
    return fig


def watermark_histogram_figure(
    *, buckets: Sequence[tuple[float, int]], thresholds: tuple[float, float, float, float], width: float
) -> go.Figure:
    """Turns per watermark bucket (lower edge, count), each bar in its tier's colour."""
    from ctxobs.wire import tier_for

    xs = [round(lo * 100, 1) for lo, _ in buckets]
    fig = go.Figure(
        go.Bar(
            x=xs,
            y=[n for _, n in buckets],
            width=[width * 100 * 0.92] * len(xs),
            offset=0,
            marker={"color": [TIER_COLOURS[tier_for(lo + width / 2, thresholds)] for lo, _ in buckets]},
            hovertemplate="%{x}%–: %{y:,} turns<extra></extra>",
            name="turns",
        )
    )
    # One assignment validates the layout once; update_layout costs ~60 ms a figure.
    fig.layout = (
        _layout(
            height=260,
            showlegend=False,
            xaxis={"title": {"text": "watermark %"}, "ticksuffix": "%"},
            yaxis={"title": {"text": "turns"}, "gridcolor": "#eef0f3"},
        )
    )
    return fig


def tier_time_figure(*, tiers: Sequence[tuple[str, float, int]]) -> go.Figure:
    """Hours spent (and turns) per tier, as horizontal bars in tier colours."""
    names = [t for t, _, _ in tiers]
    fig = go.Figure(
        go.Bar(
            y=names,
            x=[round(h, 2) for _, h, _ in tiers],
            orientation="h",
            marker={"color": [TIER_COLOURS.get(t, "#999") for t in names]},
            text=[f"{n:,} turns" for _, _, n in tiers],
            textposition="auto",
            hovertemplate="%{y}: %{x:.2f} h<extra></extra>",
        )
    )
    # One assignment validates the layout once; update_layout costs ~60 ms a figure.
    fig.layout = (
        _layout(
            height=260,
            showlegend=False,
            xaxis={"title": {"text": "hours"}, "gridcolor": "#eef0f3"},
            yaxis={"autorange": "reversed"},
        )
    )
    return fig


STRATEGY_COLOURS = ["#6a1b9a", "#1e88e5", "#00897b", "#ef6c00", "#c2185b", "#8d6e63", "#546e7a", "#9e9e9e"]


def compression_figure(*, rows: Sequence[tuple[datetime, str, int]]) -> go.Figure:
    """Compression events per day (ROWS: day, strategy, count), stacked by strategy."""
    by: dict[str, dict[Any, int]] = {}
    for day, strategy, n in rows:
        by.setdefault(strategy, {})[day] = n
    fig = go.Figure()
    for i, (strategy, days) in enumerate(sorted(by.items())):
        fig.add_trace(
            go.Bar(
                x=list(days),
                y=list(days.values()),
                width=DAY_BAR,
                name=_text(strategy),
                marker={"color": STRATEGY_COLOURS[i % len(STRATEGY_COLOURS)]},
                hovertemplate="%{x|%Y-%m-%d}: %{y:,}<extra>" + _text(strategy) + "</extra>",
            )
        )
    # One assignment validates the layout once; update_layout costs ~60 ms a figure.
    fig.layout = (
        _layout(
            height=260,
            barmode="stack",
            xaxis=_day_axis([d for d, _, _ in rows]),
            yaxis={"title": {"text": "events"}, "gridcolor": "#eef0f3"},
        )
    )
    return fig


def failure_rate_figure(
    *, bands: Sequence[tuple[float, int, int]], thresholds: tuple[float, float, float, float], width: float
) -> go.Figure:
    """Share of validated turns with a failed check, per watermark band (lower edge, checked, failed)."""
    from ctxobs.wire import tier_for

    xs = [f"{round(lo * 100)}–{round((lo + width) * 100)}%" for lo, _, _ in bands]
    rates = [(f / c * 100) if c else 0 for _, c, f in bands]
    fig = go.Figure(
        go.Bar(
            x=xs,
            y=rates,
            customdata=[[c, f] for _, c, f in bands],
            marker={"color": [TIER_COLOURS[tier_for(lo + width / 2, thresholds)] for lo, _, _ in bands]},
            hovertemplate=(
                "%{x}: %{y:.1f}% failed (%{customdata[1]:,} of %{customdata[0]:,} turns)<extra></extra>"
            ),
        )
    )
    # One assignment validates the layout once; update_layout costs ~60 ms a figure.
    fig.layout = (
        _layout(
            height=260,
            showlegend=False,
            xaxis={"title": {"text": "watermark band"}},
            yaxis={
                "title": {"text": "turns with a failed check"},
                "ticksuffix": "%",
                "rangemode": "tozero",
                "gridcolor": "#eef0f3",
            },
        )
    )
    return fig


def recall_figure(*, days: Sequence[Any], recalled: Sequence[int], injected: Sequence[int]) -> go.Figure:
    rate = [(i / r * 100) if r else None for r, i in zip(recalled, injected, strict=True)]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(x=list(days), y=list(recalled), width=DAY_BAR, name="recalled", marker={"color": "#b2dfdb"})
    )
    fig.add_trace(
        go.Bar(
            x=list(days),
            y=list(injected),
            width=DAY_BAR,
            name="injected",
            marker={"color": KIND_COLOURS["memory"]},
        )
    )
    fig.add_trace(
        go.Scatter(
            x=list(days),
            y=rate,
            name="injection rate",
            yaxis="y2",
            mode="lines+markers",
            line={"color": "#1b1f24", "width": 1.6},
            hovertemplate="%{x|%Y-%m-%d}: %{y:.1f}% injected<extra></extra>",
        )
    )
    # One assignment validates the layout once; update_layout costs ~60 ms a figure.
    fig.layout = (
        _layout(
            height=260,
            barmode="overlay",
            xaxis=_day_axis(days),
            yaxis={"title": {"text": "memories"}, "gridcolor": "#eef0f3"},
            yaxis2={
                "title": {"text": "injected %"},
                "overlaying": "y",
                "side": "right",
                "range": [0, 105],
                "tickvals": [0, 25, 50, 75, 100],
                "showgrid": False,
                "ticksuffix": "%",
            },
        )
    )
    return fig
