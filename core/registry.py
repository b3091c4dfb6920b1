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
- Flagged turns (an alert fired on it, its output failed validation), alert page extensions,
  extra webhook fields of an alert and follow-up messages about sent alerts: how alerts and
  replay's auto-triage reach each other without importing each other.
- Timeline overlays, overview panels and settings sections (the prompt-cache lens, prices).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from django.http import HttpRequest

    from core.models import Membership, Project

# Each registry point that calls its providers with keyword arguments is a Protocol with that
# signature, so mypy checks both the providers and the caller. The rows of apps above core (a
# snapshot, an alert, an incident) are `Any` here: core cannot name their types.


class TurnPageContext(Protocol):
    def __call__(
        self, *, request: HttpRequest, project: Project, membership: Membership, snapshot: Any, blocks: Any
    ) -> dict[str, Any]:
        """Extra context for a turn's page (SNAPSHOT: ingest's row; BLOCKS: the blocks it shows)."""
        ...


@dataclass(frozen=True)
class TurnPageExtension:
    name: str
    template: str
    # Extra context for the page; None when the page's own context is enough.
    context: TurnPageContext | None = None


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
    model_file: Path | None = None  # the GGUF file it serves, when it has one


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


# Steps `manage.py ctxobs_up` runs once the example agent has filled the demo project (experiments:
# a set of its turns and strategies run against it); each returns a line for the operator.
_demo_steps: dict[str, Callable[[Project], str]] = {}


def demo_step_add(name: str, step: Callable[[Project], str]) -> None:
    _demo_steps[name] = step


def demo_steps() -> list[Callable[[Project], str]]:
    return list(_demo_steps.values())


# Markers on a session's timeline: (project_id, session_ref) -> one dict per marker with at least
# turn, rule_kind, severity, title and alert_id (the timeline's alert markers). SOURCE says what they
# are: "alert" (alerts' fired alerts) or another name ("lint": lint findings); markers carry it too.
class SessionMarkers(Protocol):
    def __call__(self, *, project_id: int, session_ref: int) -> Sequence[Mapping[str, object]]: ...


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
# they belong to: TIME_COLUMN holds the turn's received time, PROJECT_COLUMN its project. A table of
# daily sums has DAYS set and a date (UTC) in TIME_COLUMN: a day goes once the cutoff has passed all of it.
@dataclass(frozen=True)
class ExpiringTable:
    table: str
    time_column: str
    project_column: str = "project_id"
    days: bool = False


_expiring: dict[str, ExpiringTable] = {}


def expiring_table_add(table: ExpiringTable) -> None:
    _expiring[table.table] = table


def expiring_tables() -> list[ExpiringTable]:
    return list(_expiring.values())


# Turns another app singled out for a closer look: a turn an alert fired on, or one whose output
# failed validation. Listeners (replay's auto-triage) are called by alerts when an alert is
# created, inside the transaction that stores it, and must neither fail nor call the network:
# they record what they owe and queue it after the commit.
@dataclass(frozen=True)
class TurnFlagged:
    project_id: int
    snapshot_ref: int
    reason: str  # "alert" or "validation"
    alert_id: int | None = None
    # The project row when the caller has it at hand, so that listeners need not read it again.
    project: Project | None = None


TurnFlaggedListener = Callable[[Sequence[TurnFlagged]], None]
_turn_flagged: dict[str, TurnFlaggedListener] = {}


def turn_flagged_listener_add(name: str, listener: TurnFlaggedListener) -> None:
    _turn_flagged[name] = listener


def turns_flagged(flags: Sequence[TurnFlagged]) -> None:
    """Tell every listener about FLAGS (nothing when FLAGS is empty)."""
    if not flags:
        return
    for listener in _turn_flagged.values():
        listener(flags)


# Alert page extensions: a partial rendered on an alert's page with the page's context (project,
# membership, alert) and whatever its context provider adds (called with request, project,
# membership and alert).
class AlertPageContext(Protocol):
    def __call__(
        self, *, request: HttpRequest, project: Project, membership: Membership, alert: Any
    ) -> dict[str, Any]: ...


@dataclass(frozen=True)
class AlertPageExtension:
    name: str
    template: str
    context: AlertPageContext | None = None


_alert_page: dict[str, AlertPageExtension] = {}


def alert_page_extension_add(extension: AlertPageExtension) -> None:
    _alert_page[extension.name] = extension


def alert_page_extensions() -> list[AlertPageExtension]:
    return list(_alert_page.values())


# Incident page extensions: a partial rendered on an incident's page with the page's context
# (project, membership, incident, culprit) and whatever its context provider adds (called with
# request, project, membership, incident and anchor: the incident's first alert, or None).
class IncidentPageContext(Protocol):
    def __call__(
        self, *, request: HttpRequest, project: Project, membership: Membership, incident: Any, anchor: Any
    ) -> dict[str, Any]: ...


@dataclass(frozen=True)
class IncidentPageExtension:
    name: str
    template: str
    context: IncidentPageContext | None = None


_incident_page: dict[str, IncidentPageExtension] = {}


def incident_page_extension_add(extension: IncidentPageExtension) -> None:
    _incident_page[extension.name] = extension


def incident_page_extensions() -> list[IncidentPageExtension]:
    return list(_incident_page.values())


# Extra fields of an alert's webhook payload and e-mail, from other apps: called with
# project_id, alert_id and snapshot_ref (the alert's anchor turn); each returns a dict of
# top-level fields of the payload's "alert" object (JSON values; ids, states and URLs only,
# never prompt text).
class AlertPayloadExtras(Protocol):
    def __call__(self, *, project_id: int, alert_id: int, snapshot_ref: int) -> Mapping[str, Any]: ...


_alert_payload: dict[str, AlertPayloadExtras] = {}


def alert_payload_extras_add(name: str, provider: AlertPayloadExtras) -> None:
    _alert_payload[name] = provider


def alert_payload_extras(*, project_id: int, alert_id: int, snapshot_ref: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for provider in _alert_payload.values():
        out.update(provider(project_id=project_id, alert_id=alert_id, snapshot_ref=snapshot_ref))
    return out


# A follow-up message about alerts already sent: the app that sends alerts sets it; another app
# calls it (e.g. when a triage of the alert's turn has finished) with project_id, alert_ids and
# the event name. It queues the messages and returns at once.
class AlertFollowUp(Protocol):
    def __call__(self, *, project_id: int, alert_ids: Sequence[int], event: str) -> None: ...


_alert_follow_up: list[AlertFollowUp] = []


def alert_follow_up_set(sender: AlertFollowUp) -> None:
    _alert_follow_up[:] = [sender]


def alert_follow_up(*, project_id: int, alert_ids: Sequence[int], event: str) -> None:
    for sender in _alert_follow_up:
        sender(project_id=project_id, alert_ids=alert_ids, event=event)

# --- sessions-list filters ------------------------------------------------------------------------
# A filter another app adds to the sessions list: a select named NAME on the filter form, with "any"
# (no filtering) and CHOICES() as (value, label); for a picked value, SESSIONS(project_id=,
# value=) gives the session refs (AgentSession.id) that match, as a values_list sub-query or ids.
class SessionsMatching(Protocol):
    def __call__(self, *, project_id: int, value: str) -> Iterable[int]: ...


@dataclass(frozen=True)
class SessionFilter:
    name: str
    label: str
    choices: Callable[[], Sequence[tuple[str, str]]]
    sessions: SessionsMatching


_session_filters: dict[str, SessionFilter] = {}


def session_filter_add(flt: SessionFilter) -> None:
    _session_filters[flt.name] = flt


def session_filters() -> list[SessionFilter]:
    return list(_session_filters.values())


# --- actions on turns selected on a session's timeline ------------------------------------------
# The timeline's turns table shows a checkbox per turn when an app registers an action here; the
# selected turns' snapshot ids are posted (as `snapshot_id`) to the action's URL, with the text
# the user typed as `name` when the action asks for one (experiments: add them to a set).
@dataclass(frozen=True)
class TurnSelectionAction:
    name: str
    label: str  # the button
    url: Callable[[int], str]  # project id -> the URL the selection is posted to
    input_label: str = ""  # a text field posted as `name`; none when empty
    role: str = "editor"  # the least role that sees it


_turn_selection: dict[str, TurnSelectionAction] = {}


def turn_selection_action_add(action: TurnSelectionAction) -> None:
    _turn_selection[action.name] = action


def turn_selection_actions() -> list[TurnSelectionAction]:
    return list(_turn_selection.values())


# --- count drift against a model's usual ratio --------------------------------------------------
# The turn page and the timeline show the count drift (our prompt tokens vs the provider's). An app
# that calibrates counts per model (insights' counts analyzer) provides, per snapshot, the drift
# against the model's usual ratio; the pages fall back to the raw drift for snapshots it has no
# figure for.
@dataclass(frozen=True)
class CountDrift:
    drift: float  # (ours x usual ratio - reported) / reported
    usual_drift: float | None  # the model's usual raw drift (1 / usual ratio - 1); None without a baseline
    usual_n: int  # turns the usual ratio was learned from
    flagged: bool
    counted: int  # our prompt tokens the drift is measured from
    tokenizer: str  # what counted them: the family's tokenizer, or ingest's encoding (estimated)


class CountDrifts(Protocol):
    def __call__(self, *, project_id: int, snapshot_refs: Sequence[int]) -> Mapping[int, CountDrift]: ...


_count_drifts: list[CountDrifts] = []


def count_drift_provider_set(provider: CountDrifts) -> None:
    """PROVIDER(project_id=..., snapshot_refs=[...]) -> {snapshot_ref: CountDrift} (one query)."""
    _count_drifts[:] = [provider]


def count_drifts_provided() -> bool:
    """Whether an app calibrates counts: a turn with reported usage will get a CountDrift."""
    return bool(_count_drifts)


def count_drifts(*, project_id: int, snapshot_refs: Sequence[int]) -> Mapping[int, CountDrift]:
    if not _count_drifts or not snapshot_refs:
        return {}
    return _count_drifts[0](project_id=project_id, snapshot_refs=list(snapshot_refs))


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


class TimelineOverlays(Protocol):
    def __call__(self, *, project_id: int, session_ref: int) -> Sequence[TimelineOverlay]: ...


_timeline_overlays: dict[str, TimelineOverlays] = {}


def timeline_overlays_add(name: str, provider: TimelineOverlays) -> None:
    _timeline_overlays[name] = provider


def timeline_overlays(*, project_id: int, session_ref: int) -> list[TimelineOverlay]:
    out: list[TimelineOverlay] = []
    for provider in _timeline_overlays.values():
        out.extend(provider(project_id=project_id, session_ref=session_ref))
    return out


# A partial template on the project overview or the settings page, with the partial's context.
class PagePanelContext(Protocol):
    def __call__(
        self, *, request: HttpRequest, project: Project, membership: Membership, since: date | None = None
    ) -> dict[str, Any]:
        """SINCE (the overview only): the first day shown, or None for all time."""
        ...


@dataclass(frozen=True)
class PagePanel:
    name: str
    template: str
    context: PagePanelContext | None = None


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


# --- the culprit of an incident ----------------------------------------------------------------
# The verdict of a triage (attribution or leave-one-out) that ran on one of an incident's turns,
# as one line of text: the app that triages sets it; alerts asks it with the incident's project
# and anchor snapshot refs (most recent first) and shows the text on the incident and in its
# messages. None when no finished triage covers those turns.
class IncidentCulprit(Protocol):
    def __call__(self, *, project_id: int, snapshot_refs: Sequence[int]) -> str | None: ...


_incident_culprit: list[IncidentCulprit] = []


def incident_culprit_provider_set(provider: IncidentCulprit) -> None:
    _incident_culprit[:] = [provider]


def incident_culprit(*, project_id: int, snapshot_refs: Sequence[int]) -> str | None:
    if not _incident_culprit or not snapshot_refs:
        return None
    return _incident_culprit[0](project_id=project_id, snapshot_refs=list(snapshot_refs))
