"""The incident page's figure, ORM-free: an incident's alerts on a time axis, one row per session.

alerts may not import ingest's chart module (the ingest facade contract), so the few layout
values the dashboard's figures share are repeated here.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import plotly.graph_objects as go

from alerts.kinds import SEVERITIES

SEVERITY_COLOURS: dict[str, str] = {"info": "#607d8b", "warning": "#c99a00", "critical": "#b71c1c"}
FONT = "-apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
AXIS = {
    "gridcolor": "#eef0f3",
    "zeroline": False,
    "linecolor": "#d0d6dd",
    "showline": True,
    "automargin": True,
}


@dataclass(frozen=True, slots=True)
class AlertPoint:
    ts: datetime
    session_id: str
    turn: int
    severity: str
    title: str


def _text(value: object) -> str:
    # Plotly renders a subset of HTML in hover texts and tick labels: untrusted text goes in as entities.
    return html.escape(str(value), quote=False)


def incident_timeline_figure(points: Sequence[AlertPoint]) -> dict[str, Any]:
    """One marker per alert: x its turn time, y its session, coloured by severity (a trace per
    severity, so the legend names them). A JSON-ready figure dict."""
    fig = go.Figure()
    for sev in SEVERITIES:
        mine = [p for p in points if p.severity == sev]
        if not mine:
            continue
        fig.add_trace(
            go.Scatter(
                x=[p.ts.isoformat() for p in mine],
                y=[_text(p.session_id) for p in mine],
                mode="markers",
                name=sev,
                marker={"color": SEVERITY_COLOURS[sev], "size": 11, "line": {"color": "#ffffff", "width": 1}},
                text=[f"turn {p.turn}: {_text(p.title)}" for p in mine],
                hovertemplate="%{y}<br>%{x|%Y-%m-%d %H:%M:%S}<br>%{text}<extra></extra>",
            )
        )
    sessions = len({p.session_id for p in points})
    fig.layout = go.Layout(
        template="none",
        font={"family": FONT, "size": 12, "color": "#1b1f24"},
        margin={"l": 56, "r": 24, "t": 16, "b": 40},
        height=min(520, 140 + 28 * sessions),
        legend={"orientation": "h", "y": -0.25, "x": 0, "font": {"size": 11}},
        paper_bgcolor="#ffffff",
        plot_bgcolor="#ffffff",
        xaxis={**AXIS, "type": "date"},
        yaxis={**AXIS, "type": "category", "title": {"text": "session"}},
    )
    out: dict[str, Any] = json.loads(fig.to_json(engine="json"))
    return out
