"""What the prompt-cache lens adds to pages of other apps (registered in InsightsConfig.ready):
its panel on the turn page, lines on the session timeline, a panel on the overview and a
section in the project settings."""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from typing import Any

from core.registry import PagePanel, TimelineOverlay, TurnPageExtension
from insights import cache as C
from insights import cache_selectors, prices

PREFIX_COLOUR = "#0b7285"
CACHED_COLOUR = "#e8590c"


def turn_context(*, project: Any, snapshot: Any, **_: Any) -> dict[str, Any]:
    found = cache_selectors.turn_cache_in_session(project_id=project.pk, snapshot_ref=snapshot.id)
    if found is None:
        return {"cache": None}
    row, summary = found
    shortfall = C.read_shortfall(
        provider=row.provider, expected_cached=row.expected_cached, reported_cached=row.reported_cached
    )
    return {
        "cache": row,
        "cache_reason": C.REASONS.get(row.reason, row.reason),
        "cache_breaks": row.reason not in C.NOT_BREAKS,
        "cache_share": row.prefix_tokens / row.prompt_tokens * 100 if row.prompt_tokens else 0.0,
        "cache_shortfall": shortfall,
        "cache_session": summary,
    }


TURN_CACHE = TurnPageExtension(
    name="insights.cache", template="insights/_turn_cache.html", context=turn_context
)


def timeline_overlays(*, project_id: int, session_ref: int) -> list[TimelineOverlay]:
    line = cache_selectors.session_cache_line(project_id=project_id, session_ref=session_ref)
    if not line:
        return []
    turns = [t for t, _, _, _ in line]
    reasons = [C.REASONS.get(r, r) for _, _, _, r in line]
    return [
        TimelineOverlay(
            name="cached prefix",
            colour=PREFIX_COLOUR,
            turns=turns,
            values=[p for _, p, _, _ in line],
            texts=[
                f"{p:,} tokens shared with the previous turn ({why})"
                for (_, p, _, _), why in zip(line, reasons, strict=True)
            ],
        ),
        TimelineOverlay(
            name="cache reads",
            colour=CACHED_COLOUR,
            turns=turns,
            values=[c for _, _, c, _ in line],
            texts=[f"{c:,} cached tokens" for _, _, c, _ in line],
            dash="dot",
        ),
    ]


def overview_context(*, project: Any, since: date | None = None, **_: Any) -> dict[str, Any]:
    start = datetime.combine(since, time(0), tzinfo=UTC) if since is not None else None
    return {"cache_summary": cache_selectors.project_cache_summary(project_id=project.pk, since=start)}


OVERVIEW_PANEL = PagePanel(
    name="insights.cache", template="insights/_overview_cache.html", context=overview_context
)


def settings_context(*, project: Any, **_: Any) -> dict[str, Any]:
    return {
        "price_own_count": len(project.price_table or {}),
        "price_default_count": len(prices.DEFAULT_PRICES),
    }


SETTINGS_SECTION = PagePanel(
    name="insights.prices", template="insights/_settings_prices.html", context=settings_context
)
