"""What other apps add to pages and commands they do not own, filled in their AppConfig.ready().

core and ingest render and run what is registered here without importing the apps that provide
it, so an app that is not installed simply adds nothing (see the import-linter layers in
pyproject.toml).

- Turn page extensions: a partial template rendered on a turn's page, with the page's context
  (project, membership, snapshot, blocks…) and whatever its context provider adds.
- The local model server that `manage.py ctxobs_up` starts for the demo project.
- Session markers: events another app pins on a session's timeline (alerts' fired alerts, lint
  findings), each provider with its source.
- Sessions-list filters: a select another app adds to the sessions list (the lint's "finding").
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
# turn, rule_kind, severity, title and alert_id (the timeline's alert markers). SOURCE says what they
# are: "alert" (alerts' fired alerts) or another name ("lint": lint findings); markers carry it too.
SessionMarkers = Callable[..., Sequence[Mapping[str, object]]]
_session_markers: dict[str, tuple[str, SessionMarkers]] = {}


def session_markers_add(name: str, provider: SessionMarkers, *, source: str = "alert") -> None:
    _session_markers[name] = (source, provider)


def session_markers(
    *, project_id: int, session_ref: int, sources: Sequence[str] | None = None
) -> list[Mapping[str, object]]:
    """The markers of a session, of the providers of SOURCES (all when None)."""
    out: list[Mapping[str, object]] = []
    for source, provider in _session_markers.values():
        if sources is None or source in sources:
            found = provider(project_id=project_id, session_ref=session_ref)
            out.extend({"source": source, **m} for m in found)
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


# --- sessions-list filters ------------------------------------------------------------------------
# A filter another app adds to the sessions list: a select named NAME on the filter form, with "any"
# (no filtering) and CHOICES() as (value, label); for a picked value, SESSIONS(project_id=,
# value=) gives the session refs (AgentSession.id) that match, as a values_list sub-query or ids.
@dataclass(frozen=True)
class SessionFilter:
    name: str
    label: str
    choices: Callable[[], Sequence[tuple[str, str]]]
    sessions: Callable[..., Any]


_session_filters: dict[str, SessionFilter] = {}


def session_filter_add(flt: SessionFilter) -> None:
    _session_filters[flt.name] = flt


def session_filters() -> list[SessionFilter]:
    return list(_session_filters.values())
