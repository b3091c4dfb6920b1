"""Template helpers of the dashboard: formatting, the palette as CSS, query strings."""

from __future__ import annotations

import json
from typing import Any

from django import template
from django.http import QueryDict
from django.urls import reverse
from django.utils.html import escape, format_html_join
from django.utils.safestring import SafeString, mark_safe

from ingest import charts
from ingest.views import PLOTLY_BUNDLE, PLOTLY_VERSION

register = template.Library()


@register.simple_tag
def palette_css() -> SafeString:
    """CSS variables and classes for block kinds and tiers, from the one palette in ingest.charts."""
    rules = [":root{"]
    rules += [f"--kind-{k}:{c};" for k, c in charts.KIND_COLOURS.items()]
    rules += [f"--tier-{t}:{c};" for t, c in charts.TIER_COLOURS.items()]
    rules += [f"--ev-{e}:{c};" for e, c in charts.EVENT_COLOURS.items()]
    rules.append("}")
    rules += [f".k-{k}{{--c:{c}}}" for k, c in charts.KIND_COLOURS.items()]
    rules += [f".t-{t}{{--c:{c}}}" for t, c in charts.TIER_COLOURS.items()]
    # Only constants of our own go in here; nothing from a request or a snapshot.
    return mark_safe("<style>" + "".join(rules) + "</style>")  # noqa: S308


@register.simple_tag
def kind_legend() -> SafeString:
    return format_html_join(
        "",
        '<span class="legend-item"><i class="swatch k-{}"></i>{}</span>',
        ((k, k) for k in charts.KIND_COLOURS),
    )


@register.filter
def kind_class(kind: str) -> str:
    return charts.kind_css_class(kind)


@register.filter
def tier_class(tier: str) -> str:
    return f"t-{tier}" if tier in charts.TIER_COLOURS else "t-ok"


@register.filter
def pct(value: float | None, digits: int = 1) -> str:
    """A fraction as a percentage: 0.634 -> '63.4%'."""
    if value is None:
        return "–"
    return f"{value * 100:.{digits}f}%"


@register.filter
def num(value: float | int | None, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


@register.filter
def width(value: float | None) -> str:
    """A CSS width in percent from a number, clamped to 0..100 (numbers only reach the style)."""
    try:
        v = float(value or 0)
    except (TypeError, ValueError):
        v = 0.0
    return f"{max(0.0, min(100.0, v)):.2f}%"


@register.filter
def as_json(value: Any) -> str:
    """VALUE as compact JSON text, as a user would write it in a form (escaped by the template)."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


@register.filter
def signed(value: int | float | None) -> str:
    if value is None:
        return "–"
    return f"{value:+,}"


@register.simple_tag(takes_context=True)
def query(context: dict[str, Any], **kwargs: Any) -> str:
    """The current query string with KWARGS replaced (None or '' removes a key)."""
    request = context.get("request")
    q: QueryDict = request.GET.copy() if request is not None else QueryDict(mutable=True)
    for k, v in kwargs.items():
        if v is None or v == "":
            q.pop(k, None)
        else:
            q[k] = str(v)
    s = q.urlencode()
    return f"?{s}" if s else "?"


@register.simple_tag
def plotly_src() -> str:
    """URL of the dashboard's plotly.js (ingest.views.PLOTLY_JS); the bundle is named in the query, so
    a browser that cached the other one for this version fetches it anew."""
    return reverse("ingest:plotly_js", kwargs={"version": PLOTLY_VERSION}) + f"?bundle={PLOTLY_BUNDLE}"


_SEGMENT_TAGS = {
    "insert": ("<ins>", "</ins>"),
    "delete": ("<del>", "</del>"),
    "skip": ('<span class="skip">', "</span>"),
}


@register.filter
def diff_html(segments: list[tuple[str, str]]) -> SafeString:
    """A word diff's segments (core.textdiff) as HTML: each text escaped, inside <ins>, <del> or
    a skip note. One call instead of template tags per segment: a rewritten block has hundreds of
    segments, and rendering them tag by tag was a fifth of the turn page's time."""
    out = []
    for op, text in segments:
        start, end = _SEGMENT_TAGS.get(op, ("", ""))
        out.append(f"{start}{escape(text)}{end}")
    # Only our fixed tags and escaped text are joined here.
    return mark_safe("".join(out))  # noqa: S308
