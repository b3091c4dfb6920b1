"""Figure builders of the dashboard: one palette, tier bands, markers, compact arrays."""

from __future__ import annotations

import base64
import json
import struct

import pytest

from core.registry import TimelineOverlay
from ingest import charts


def _rows(n: int) -> list[dict]:
    return [
        {
            "turn": t,
            "total_tokens": 100 * t,
            "watermark": t / n,
            "tier": "ok",
            "kind_tokens": {"history": 80 * t, "system": 20 * t},
            "n_compression": int(t == 3),
            "n_validation_failed": int(t == 4),
        }
        for t in range(n)
    ]


def test_timeline_uses_the_palette_and_project_thresholds() -> None:
    fig = charts.figure_json(charts.timeline_figure(rows=_rows(10), thresholds=(0.5, 0.6, 0.8, 0.9)))
    bars = {t["name"]: t for t in fig["data"] if t["type"] == "bar"}
    assert list(bars) == ["system", "history"]  # canonical order, most stable first
    assert bars["history"]["marker"]["color"] == charts.KIND_COLOURS["history"]
    bands = [(s["y0"], s["y1"], s["fillcolor"]) for s in fig["layout"]["shapes"]]
    assert bands[0] == (50, 60, charts.TIER_COLOURS["warn"])
    assert bands[-1][0] == 90 and bands[-1][2] == charts.TIER_COLOURS["break"]
    names = [t["name"] for t in fig["data"]]
    assert "compression" in names and "validation failed" in names


def test_timeline_of_2000_turns_is_compact() -> None:
    body = json.dumps(
        charts.figure_json(charts.timeline_figure(rows=_rows(2000), thresholds=(0.6, 0.7, 0.85, 0.95)))
    )
    assert len(body) < 120_000  # typed arrays, not 2,000-element JSON lists per trace
    assert '"bdata"' in body


def test_alert_markers_are_escaped_for_plotly() -> None:
    fig = charts.figure_json(
        charts.timeline_figure(
            rows=_rows(5),
            thresholds=(0.6, 0.7, 0.85, 0.95),
            alerts=[
                {
                    "turn": 2,
                    "severity": "warning",
                    "title": "<img src=x onerror=alert(1)>",
                    "rule_kind": "spike",
                    "alert_id": 1,
                }
            ],
        )
    )
    alert = next(t for t in fig["data"] if t["name"] == "alert")
    assert alert["text"] == ["warning: &lt;img src=x onerror=alert(1)&gt;"]


def _values(spec: dict) -> list[float]:
    """The values of a plotly typed array (charts.typed_array)."""
    fmt = {"i1": "b", "i2": "h", "i4": "i", "f8": "d"}[spec["dtype"]]
    raw = base64.b64decode(spec["bdata"])
    return list(struct.unpack(f"<{len(raw) // struct.calcsize(fmt)}{fmt}", raw))


def _busy_rows(n: int) -> list[dict]:
    """Rows with every event the timeline marks: compression (turns 3 and 6, the one on 6 made by
    the provider), a provider edit alone (turn 8), two failed checks (turn 4), and a kind unknown
    to the palette."""
    return [
        {
            "turn": t,
            "watermark": t / n,
            "kind_tokens": {"history": 80 * t, "system": 20 * t, "zeta": t},
            "n_compression": int(t in (3, 6)),
            "n_provider_edits": int(t in (6, 8)),
            "n_validation_failed": 2 * int(t == 4),
        }
        for t in range(n)
    ]


def _marker(turn: int, severity: str, title: str, **extra: object) -> dict:
    return {"turn": turn, "severity": severity, "title": title, "rule_kind": "spike", "alert_id": 1,
            "state": "open", **extra}


def test_the_timeline_draws_its_layers_in_order_on_their_axes() -> None:
    """Kinds, the watermark line, the event markers (on the watermark axis), then other apps'
    lines; a marker on a turn not drawn is left out, and so is a layer with nothing to mark."""
    fig = charts.figure_json(
        charts.timeline_figure(
            rows=_busy_rows(10),
            thresholds=(0.5, 0.6, 0.8, 0.9),
            alerts=[
                _marker(2, "warning", "a <b>"), _marker(2, "critical", "b"), _marker(99, "critical", "gone"),
                *(_marker(7, "info", f"n{i}") for i in range(6)),  # the first five are listed
            ],
            findings=[_marker(5, "info", "lint", source="lint")],
            overlays=[
                TimelineOverlay(name="cache <x>", colour="#123456", turns=[0, 5], values=[1.5, 2.0],
                                texts=["t<1>", "t2"], dash="dot"),
                TimelineOverlay(name="plain", colour="#654321", turns=[1], values=[3.0]),
            ],
        )
    )
    data = fig["data"]
    assert [(t["type"], t["name"]) for t in data] == [
        ("bar", "system"), ("bar", "history"), ("bar", "zeta"),
        ("scatter", "watermark %"),
        ("scatter", "compression"), ("scatter", "provider edit"), ("scatter", "validation failed"),
        ("scatter", "alert"), ("scatter", "lint finding"),
        ("scatter", "cache <x>"), ("scatter", "plain"),
    ]
    by_name = {t["name"]: t for t in data}
    assert by_name["zeta"]["marker"]["color"] == charts.KIND_COLOURS["other"]
    assert _values(by_name["history"]["y"]) == [80 * t for t in range(10)]
    assert _values(by_name["watermark %"]["y"]) == [t * 10 for t in range(10)]
    marks = {
        name: (t["x"], t["y"], t["text"], t["marker"]["symbol"])
        for name, t in by_name.items()
        if name in ("compression", "provider edit", "validation failed", "alert", "lint finding")
    }
    assert marks == {
        "compression": ([3], [30.0], ["1 compression event(s)"], "diamond"),
        "provider edit": ([6, 8], [60.0, 80.0], ["1 edit(s) made by the provider"] * 2, "diamond-open"),
        "validation failed": ([4], [40.0], ["2 failed check(s)"], "x"),
        "alert": (
            [2, 7],
            [20.0, 70.0],
            ["warning: a &lt;b&gt;<br>critical: b", "<br>".join(f"info: n{i}" for i in range(5))],
            "triangle-up",
        ),
        "lint finding": ([5], [50.0], ["info: lint"], "star"),
    }
    assert all(by_name[name]["yaxis"] == "y2" for name in ("watermark %", *marks))
    assert by_name["alert"]["marker"]["color"] == charts.EVENT_COLOURS["alert"]
    cache, plain = by_name["cache <x>"], by_name["plain"]
    assert "yaxis" not in cache and _values(cache["x"]) == [0, 5] and _values(cache["y"]) == [1.5, 2.0]
    assert cache["text"] == ["t&lt;1&gt;", "t2"]
    assert cache["hovertemplate"] == "%{text}<extra>cache &lt;x&gt;</extra>"
    assert cache["line"] == {"color": "#123456", "width": 1.6, "dash": "dot", "shape": "hv"}
    assert "text" not in plain and plain["hovertemplate"] == "%{y:,}<extra>plain</extra>"
    layout = fig["layout"]
    assert [(s["y0"], s["y1"], s["fillcolor"]) for s in layout["shapes"]] == [
        (50, 60, charts.TIER_COLOURS["warn"]), (60, 80, charts.TIER_COLOURS["compress"]),
        (80, 90, charts.TIER_COLOURS["force"]), (90, 100, charts.TIER_COLOURS["break"]),
    ]
    assert layout["yaxis2"]["range"] == [0, 100] and layout["yaxis2"]["tickvals"] == [0, 50, 60, 80, 90]
    assert layout["bargap"] == 0.15 and layout["barmode"] == "stack" and layout["showlegend"] is False

    quiet = charts.figure_json(
        charts.timeline_figure(
            rows=_rows(5), thresholds=(0.5, 0.6, 0.8, 0.9), findings=[_marker(99, "info", "x")]
        )
    )
    assert [t["name"] for t in quiet["data"]] == [
        "system", "history", "watermark %", "compression", "validation failed"
    ]


def test_a_dense_timeline_stacks_areas_and_an_empty_one_draws_the_bands() -> None:
    dense = charts.figure_json(charts.timeline_figure(rows=_busy_rows(301), thresholds=(0.5, 0.6, 0.8, 0.9)))
    kinds = dense["data"][:3]
    assert [(t["type"], t["name"], t["stackgroup"], t["line"]["shape"]) for t in kinds] == [
        ("scatter", k, "tokens", "hv") for k in ("system", "history", "zeta")
    ]
    assert [t["name"] for t in dense["data"][3:]] == [
        "watermark %", "compression", "provider edit", "validation failed"
    ]
    # The watermark axis goes to 100%, or 5 points past the highest watermark when that is higher.
    assert dense["layout"]["bargap"] == 0 and dense["layout"]["yaxis2"]["range"] == [0, 104.67]

    empty = charts.figure_json(charts.timeline_figure(rows=[], thresholds=(0.5, 0.6, 0.8, 0.9)))
    assert [t["name"] for t in empty["data"]] == ["watermark %"]
    assert empty["layout"]["yaxis2"]["range"] == [0, 100] and len(empty["layout"]["shapes"]) == 4


def test_sparkline_points() -> None:
    pts = charts.sparkline_points([0.0, 0.5, 1.0], width=100, height=22)
    assert pts.split() == ["0.0,21.0", "50.0,11.0", "100.0,1.0"]
    assert charts.sparkline_points([]) == ""
    assert len(charts.sparkline_points([0.3]).split()) == 3


@pytest.mark.parametrize(
    ("values", "dtype", "fmt"),
    [([0, 1, 127], "i1", "b"), ([-129, 5], "i2", "h"), ([40_000, 0], "i4", "i"),
     ([2**40, 1], "f8", "d"), ([0.5, 99.95], "f8", "d"), ([], "i1", "b")],
    ids=["int8", "int16", "int32", "beyond-int32", "floats", "empty"],
)
def test_typed_arrays_use_the_smallest_type_and_keep_the_values(values, dtype, fmt) -> None:
    spec = charts.typed_array(values)
    assert spec["dtype"] == dtype
    raw = base64.b64decode(spec["bdata"])
    assert list(struct.unpack(f"<{len(values)}{fmt}", raw)) == [float(v) if fmt == "d" else v for v in values]
