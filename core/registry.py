"""What other apps add to pages and commands they do not own, filled in their AppConfig.ready().

core and ingest render and run what is registered here without importing the apps that provide
it, so an app that is not installed simply adds nothing (see the import-linter layers in
pyproject.toml).

- Turn page extensions: a partial template rendered on a turn's page, with the page's context
  (project, membership, snapshot, blocks…) and whatever its context provider adds.
- The local model server that `manage.py ctxobs_up` starts for the demo project.
- Session markers: events another app pins on a session's timeline (alerts' fired alerts).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from core.models import Project


@dataclass(frozen=True)
class TurnPageExtension:
    name: str
    template: str
    # Called with keyword arguments request, project, membership, snapshot and blocks; returns
    # extra context for the page. None when the page's own context is enough.
    context: Callable[..., dict[str, Any]] | None = None


_turn_page: dict[str, TurnPageExtension] = {}


def turn_page_extension_add(extension: TurnPageExtension) -> None:
    """Render EXTENSION on every turn page; registering a name again replaces it."""
    _turn_page[extension.name] = extension


def turn_page_extensions() -> list[TurnPageExtension]:
    """The registered extensions, in the order they were first registered."""
    return list(_turn_page.values())


class StartupFailed(Exception):
    """A start-up step could not do its job; the message says why, for the operator."""


@dataclass(frozen=True)
class LocalModel:
    base_url: str
    stop: Callable[[], None]


class LocalModelStarter(Protocol):
    def __call__(self, *, project: Project, log_path: Path) -> LocalModel:
        """Start a local OpenAI-compatible model server usable by PROJECT and wait until it
        answers, or raise StartupFailed."""
        ...


_local_model: list[LocalModelStarter] = []


def local_model_starter_set(starter: LocalModelStarter) -> None:
    _local_model[:] = [starter]


def local_model_starter() -> LocalModelStarter | None:
    return _local_model[0] if _local_model else None


# Whether a project already holds data, asked by `ctxobs_up` before it fills the demo project
# with the example agent: a restart must not add a second set of demo sessions.
_has_data: dict[str, Callable[[Project], bool]] = {}


def project_data_check_add(name: str, check: Callable[[Project], bool]) -> None:
    _has_data[name] = check


def project_has_data(project: Project) -> bool:
    return any(check(project) for check in _has_data.values())


# Markers on a session's timeline: (project_id, session_ref) -> one dict per marker with at least
# turn, rule_kind, severity, title and alert_id (the timeline's alert markers).
SessionMarkers = Callable[..., Sequence[Mapping[str, object]]]
_session_markers: dict[str, SessionMarkers] = {}


def session_markers_add(name: str, provider: SessionMarkers) -> None:
    _session_markers[name] = provider


def session_markers(*, project_id: int, session_ref: int) -> list[Mapping[str, object]]:
    out: list[Mapping[str, object]] = []
    for provider in _session_markers.values():
        out.extend(provider(project_id=project_id, session_ref=session_ref))
    return out


# Tables of derived rows that belong to a turn (another app's per-turn findings or figures). Retention
# removes a project's rows older than its cutoff from each registered table together with the turns
# they belong to: TIME_COLUMN holds the turn's received time, PROJECT_COLUMN its project.
@dataclass(frozen=True)
class ExpiringTable:
    table: str
    time_column: str
    project_column: str = "project_id"


_expiring: dict[str, ExpiringTable] = {}


def expiring_table_add(table: ExpiringTable) -> None:
    _expiring[table.table] = table


def expiring_tables() -> list[ExpiringTable]:
    return list(_expiring.values())


# --- Timeline overlays, overview panels and settings sections ------------------------------
# Lines another app draws over a session's timeline chart, on its token axis: (project_id,
# session_ref) -> overlays, each a named series of (turn, tokens) points with a hover text each.
@dataclass(frozen=True)
class TimelineOverlay:
    name: str
    colour: str
    turns: Sequence[int]
    values: Sequence[float]
    texts: Sequence[str] = ()
    dash: str = "solid"


TimelineOverlays = Callable[..., Sequence[TimelineOverlay]]
_timeline_overlays: dict[str, TimelineOverlays] = {}


def timeline_overlays_add(name: str, provider: TimelineOverlays) -> None:
    _timeline_overlays[name] = provider


def timeline_overlays(*, project_id: int, session_ref: int) -> list[TimelineOverlay]:
    out: list[TimelineOverlay] = []
    for provider in _timeline_overlays.values():
        out.extend(provider(project_id=project_id, session_ref=session_ref))
    return out


# A partial template on the project overview or the settings page; CONTEXT is called with
# keyword arguments request, project, membership (and, on the overview, since: the first day
# shown, or None for all time) and returns the partial's context.
@dataclass(frozen=True)
class PagePanel:
    name: str
    template: str
    context: Callable[..., dict[str, Any]] | None = None


_overview_panels: dict[str, PagePanel] = {}
_settings_sections: dict[str, PagePanel] = {}


def overview_panel_add(panel: PagePanel) -> None:
    _overview_panels[panel.name] = panel


def overview_panels() -> list[PagePanel]:
    return list(_overview_panels.values())


def settings_section_add(section: PagePanel) -> None:
    _settings_sections[section.name] = section


def settings_sections() -> list[PagePanel]:
    return list(_settings_sections.values())
