"""The turn page's reads and numbers: `turn_page(...)` returns one `TurnPage` holding what
ingest/turn.html shows of a turn (its blocks cut for preview with their shares of the prompt and
the usable window, its events, the change against another turn, the count drift, the chat
template's overhead, the tool definitions). The view adds only the access check, the 404s and
what other apps contribute to the page.

Also the presentation rules the session pages share with it: message previews
(`present_messages`, the block page's "show all" too) and the drift a page shows (`drift_view`,
the turns table too).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, cast

from core import pgtext, registry
from core.models import Project
from ctxobs.tokens import TemplateOverhead, get_counter, template_overhead
from ctxobs.wire import COUNT_DRIFT_WARN, usable_window
from ingest import charts, dashboard, selectors, tools_view
from ingest.models import AgentSession, Snapshot
from ingest.types import (
    AlertMarker,
    Message,
    ShownBlock,
    ShownMessage,
    SnapshotEvents,
    StoredBlock,
    TurnComparison,
    ValidationOutcomeRow,
)

PREVIEW_CHARS = 1500
PREVIEW_MESSAGES = 12


# --- shared with the other session pages ----------------------------------------------------
def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, indent=1)


def present_messages(msgs: list[Message], *, full: bool) -> tuple[list[ShownMessage], bool]:
    """Messages ready for the template; cut (unless FULL) to PREVIEW_* with a flag saying so."""
    cut = False
    shown = msgs if full else msgs[:PREVIEW_MESSAGES]
    if len(shown) < len(msgs):
        cut = True
    out: list[ShownMessage] = []
    for m in shown:
        m = pgtext.shown(m)
        text = _content_text(m.get("content"))
        if not full and len(text) > PREVIEW_CHARS:
            text, cut = text[:PREVIEW_CHARS], True
        calls = json.dumps(m["tool_calls"], ensure_ascii=False, indent=1) if m.get("tool_calls") else ""
        out.append(
            {
                "role": m.get("role", "?"),
                "name": m.get("name") or "",
                "tool_call_id": m.get("tool_call_id") or "",
                "text": text,
                "tool_calls": calls,
                "calls": tools_view.message_calls(m),
            }
        )
    return out, cut


def drift_view(raw: float | None, calibrated: registry.CountDrift | None) -> tuple[float | None, bool, str]:
    """The drift a page shows, whether it is flagged, and a title saying what it is measured
    against: the model's usual ratio when an app calibrates counts (core.registry), else zero."""
    if calibrated is None:
        flag = raw is not None and abs(raw) > COUNT_DRIFT_WARN
        return raw, flag, "our prompt tokens vs the provider's"
    if calibrated.usual_drift is None:
        basis = "no usual ratio for this model yet: measured against zero"
    else:
        basis = (f"against this model's usual drift of {calibrated.usual_drift * 100:+.1f}% "
                 f"(median of {calibrated.usual_n} turns)")
    raw_text = f"; raw {raw * 100:+.1f}%" if raw is not None else ""
    return calibrated.drift, calibrated.flagged, f"{calibrated.drift * 100:+.1f}% {basis}{raw_text}"


# --- the page --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KindShare:
    """One block kind in the turn's stacked bar: its tokens and percent of the usable window."""

    kind: str
    tokens: int
    width: float


@dataclass(frozen=True, slots=True)
class TurnPage:
    """Everything ingest/turn.html (and its diff partial) shows of one turn, under the names the
    templates use (`context()`)."""

    session: AgentSession
    snapshot: Snapshot
    prev_turn: int | None
    next_turn: int | None
    # The turn's blocks as stored (text made showable), for the page and the apps extending it.
    blocks: list[StoredBlock]
    shown_blocks: list[ShownBlock]
    # The comparison asked for (`?compare=N`), else against the previous turn; None on the first.
    change: TurnComparison | None
    compare_arg: str
    compare_error: str
    events: SnapshotEvents
    layers: dict[str, list[ValidationOutcomeRow]]  # validation outcomes by layer, in order
    alerts: list[AlertMarker]  # the session's alert markers on this turn
    # Set by senders that know content is missing (OTLP ingest: truncated, redacted, not captured).
    content_incomplete: str | None
    output: dict[str, Any]
    output_calls: list[tools_view.ToolCallView]
    tools: tools_view.ToolsOverview | None
    tools_position: int | None  # the message-less tools block the definitions are counted on
    usable: int
    kinds: list[KindShare]
    drift_flag: bool
    drift_title: str
    drift_warn_pct: int
    drift_pct: float | None
    count_calibrated: registry.CountDrift | None
    overhead: TemplateOverhead
    overhead_messages: int
    overhead_names: int
    overhead_total: int | None

    def context(self) -> dict[str, Any]:
        """The fields as template context."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _compared(
    *, project: Project, session: AgentSession, snapshot: Snapshot, compare_arg: str
) -> tuple[Snapshot | None, str]:
    """The turn to compare SNAPSHOT with and an error for a COMPARE_ARG naming no other turn:
    without one, the previous turn (None on the first)."""
    if not compare_arg:
        if snapshot.prev_turn is None:
            return None, ""
        return selectors.snapshot_by_turn(project=project, session=session, turn=snapshot.prev_turn), ""
    try:
        n = int(compare_arg)
    except ValueError:
        n = -1
    if n < 0 or n == snapshot.turn:
        return None, f"pick another turn of this session than {snapshot.turn}"
    other = selectors.snapshot_by_turn(project=project, session=session, turn=n)
    return other, "" if other is not None else f"this session has no turn {n}"


def _shown_blocks(blocks: list[StoredBlock], *, total: int, usable: int) -> list[ShownBlock]:
    shown: list[ShownBlock] = []
    for b in blocks:
        msgs, cut = present_messages(b["messages"], full=False)
        shown.append(
            cast(ShownBlock, {
                **b,
                "shown": msgs,
                "cut": cut,
                "n_messages": len(b["messages"]),
                "share": (b["tokens"] / total * 100) if total else 0.0,
                "window_share": b["tokens"] / usable * 100,
            })
        )
    return shown


def _layers(outcomes: list[ValidationOutcomeRow]) -> dict[str, list[ValidationOutcomeRow]]:
    layers: dict[str, list[ValidationOutcomeRow]] = {}
    for v in outcomes:
        layers.setdefault(v["layer"], []).append(v)
    return layers


def _content_incomplete(tags: Mapping[str, str]) -> str | None:
    """The sender's reason when it marked the turn's content incomplete ("" for none), else None."""
    if tags.get("ctxobs.content") != "incomplete":
        return None
    return tags.get("ctxobs.content.reason", "")


def _tools(
    snapshot: Snapshot, blocks: list[StoredBlock]
) -> tuple[tools_view.ToolsOverview | None, int | None]:
    """The turn's tool definitions and the position of the block they are counted on."""
    # The definitions travel in params.tools and ingest counts them on the first message-less tools
    # block; the page lists them there, counted by the same rule, with the same encoding.
    tool_defs = tools_view.definitions_of(snapshot.params)
    tools = (
        tools_view.describe_tools(tool_defs, get_counter(snapshot.encoding or None, snapshot.model_name))
        if tool_defs else None
    )
    position = next((b["position"] for b in blocks if b["kind"] == "tools" and not b["messages"]), None)
    return tools, position


def _kinds(kind_tokens: Mapping[str, int], usable: int) -> list[KindShare]:
    return [
        KindShare(kind=k, tokens=kind_tokens[k], width=kind_tokens[k] / usable * 100)
        for k in charts.ordered_kinds(kind_tokens)
    ]


def turn_page(*, project: Project, session: AgentSession, snapshot: Snapshot, compare: str = "") -> TurnPage:
    """The page of SNAPSHOT, a turn of SESSION, with the change against turn COMPARE (the `compare`
    query argument; blank: the previous turn). A fixed number of queries, whatever the turn holds."""
    prev_turn, next_turn = selectors.snapshot_neighbours(project=project, session=session, snapshot=snapshot)
    compare_arg = compare.strip()
    other, compare_error = _compared(
        project=project, session=session, snapshot=snapshot, compare_arg=compare_arg
    )
    blocks, change = dashboard.turn_comparison(project_id=project.pk, snapshot=snapshot, other=other)
    blocks = pgtext.shown(blocks)
    events = pgtext.shown(selectors.snapshot_events(project_id=project.pk, snapshot_ref=snapshot.id))
    usable = usable_window(snapshot.context_window, snapshot.reserve_tokens)
    markers = dashboard.session_alerts(project_id=project.pk, session_ref=session.id)
    out = pgtext.shown(snapshot.output or {})
    calibrated = registry.count_drifts(project_id=project.pk, snapshot_refs=[snapshot.id]).get(snapshot.id)
    drift_shown, drift_flag, drift_title = drift_view(snapshot.count_drift, calibrated)
    n_messages = sum(len(b["messages"]) for b in blocks)
    n_names = sum(1 for b in blocks for m in b["messages"] if m.get("name"))
    overhead = template_overhead(snapshot.model_name)
    tools, tools_position = _tools(snapshot, blocks)
    return TurnPage(
        session=session,
        snapshot=snapshot,
        prev_turn=prev_turn,
        next_turn=next_turn,
        blocks=blocks,
        shown_blocks=_shown_blocks(blocks, total=snapshot.total_tokens or 0, usable=usable),
        change=change,
        compare_arg=compare_arg,
        compare_error=compare_error,
        events=events,
        layers=_layers(events["validation"]),
        alerts=[m for m in markers if m["turn"] == snapshot.turn],
        content_incomplete=_content_incomplete(snapshot.tags or {}),
        output=out,
        output_calls=tools_view.output_calls(out.get("tool_calls")),
        tools=tools,
        tools_position=tools_position,
        usable=usable,
        kinds=_kinds(snapshot.kind_tokens or {}, usable),
        drift_flag=drift_flag,
        drift_title=drift_title,
        drift_warn_pct=round(COUNT_DRIFT_WARN * 100),
        drift_pct=(drift_shown * 100) if drift_shown is not None else None,
        count_calibrated=calibrated,
        overhead=overhead,
        overhead_messages=n_messages,
        overhead_names=n_names,
        overhead_total=overhead.total(n_messages, n_names),
    )
