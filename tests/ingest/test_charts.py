"""Figure builders of the dashboard: one palette, tier bands, markers, compact arrays."""

from __future__ import annotations

import base64
import json
import struct

import pytest

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
