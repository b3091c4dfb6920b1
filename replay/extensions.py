"""What replay adds to pages and commands of other apps (registered in ReplayConfig.ready)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.models import Project
from core.registry import (
    AlertPageExtension,
    IncidentPageExtension,
    LocalModel,
    PagePanel,
    StartupFailed,
    TurnPageExtension,
)

# Replay buttons on a turn's page; the page's context (project, membership, snapshot, blocks) is
# all the partial needs.
TURN_ACTIONS = TurnPageExtension(name="replay.turn_actions", template="replay/_turn_actions.html")


# Seconds the model server gets to exit on SIGTERM before it is killed (ctxobs_up stops within
# its STOP_GRACE_S).
STOP_TIMEOUT_S = 5.0


def local_model_start(*, project: Project, log_path: Path) -> LocalModel:
    """Start the embedded model server, wait until it answers and make it PROJECT's default
    endpoint (`manage.py ctxobs_up`)."""
    from replay import localmodel
    from replay.services import model_endpoints

    try:
        server = localmodel.start(log_path=log_path)
    except Exception as exc:
        raise StartupFailed(f"the local model server did not start: {exc}") from exc
    try:
        localmodel.wait_ready(server.base_url, timeout=180, process=server.process)
        model_endpoints.local_endpoint_register(project=project, base_url=server.base_url)
    except BaseException as exc:
        # Ctrl-C while the model loads stops the server too.
        localmodel.stop(server, timeout=STOP_TIMEOUT_S)
        if isinstance(exc, Exception):
            raise StartupFailed(f"the local model server did not become ready: {exc}") from exc
        raise
    return LocalModel(base_url=server.base_url, stop=lambda: localmodel.stop(server, timeout=STOP_TIMEOUT_S),
                      model_file=server.model_file)


def _turn_triage_context(*, project: Project, snapshot: Any, **_: Any) -> dict[str, Any]:
    from replay.services import triage

    # The turn page reads nothing more for a project with triage off (most of them); its
    # triages stay on the alert pages and in the API.
    if not project.triage_enabled:
        return {"triage": None}
    t = triage.triage_for_turn(project_id=project.pk, snapshot_ref=snapshot.id)
    return {"triage": _triage_view(project, t)}


def _alert_triage_context(*, project: Project, alert: Any, **_: Any) -> dict[str, Any]:
    from replay.services import triage

    t = triage.triage_for_turn(project_id=project.pk, snapshot_ref=alert.snapshot_ref)
    return {"triage": _triage_view(project, t)}


def _triage_view(project: Project, t: Any) -> dict[str, Any] | None:
    """What the triage partial shows: the row, its verdict line, the calls made and the
    project's use of today's budget."""
    if t is None:
        return None
    from replay import triage as verdicts
    from replay.services import triage

    return {
        "row": t,
        "summary": verdicts.triage_summary(t.result) if t.status == "done" else "",
        "calls_made": triage.triage_calls_made(triage_row=t),
        "budget_used": triage.budget_used(project=project),
        "budget": project.triage_daily_calls,
    }


# The triage of a turn, on its page and on the page of an alert anchored on it.
TURN_TRIAGE = TurnPageExtension(
    name="replay.triage", template="replay/_triage.html", context=_turn_triage_context
)
ALERT_TRIAGE = AlertPageExtension(
    name="replay.triage", template="replay/_triage.html", context=_alert_triage_context
)


def _incident_triage_context(*, project: Project, anchor: Any, **_: Any) -> dict[str, Any]:
    from replay.services import triage

    if anchor is None:
        return {"triage": None}
    t = triage.triage_for_turn(project_id=project.pk, snapshot_ref=anchor.snapshot_ref)
    return {"triage": _triage_view(project, t)}


# On an incident's page: the triage of its first alert's turn, or the button that asks for one.
INCIDENT_TRIAGE = IncidentPageExtension(
    name="replay.triage", template="replay/_incident_triage.html", context=_incident_triage_context
)


def _triage_settings_context(*, project: Project, **_: Any) -> dict[str, Any]:
    from replay.forms import TriageForm

    return {"triage_form": TriageForm.for_project(project)}


# The auto-triage section of the project settings page; it posts to replay:triage_settings.
SETTINGS_TRIAGE = PagePanel(
    name="replay.triage", template="replay/_settings_triage.html", context=_triage_settings_context
)


# The model endpoints part of the project settings page: a link to replay's endpoints page.
SETTINGS_ENDPOINTS = PagePanel(name="replay.endpoints", template="replay/_settings_endpoints.html")


def incident_culprit(*, project_id: int, snapshot_refs: Sequence[int]) -> str | None:
    """The verdict of the latest finished triage on one of SNAPSHOT_REFS, for an incident of
    alerts (core.registry.incident_culprit); None when none finished."""
    from replay import triage as verdicts
    from replay.models import Triage

    t = (
        Triage.objects.filter(
            project_id=project_id, snapshot_ref__in=snapshot_refs, status=Triage.Status.DONE
        )
        .order_by("-finished_at", "-id")
        .first()
    )
    if t is None:
        return None
    return f"turn {t.turn} of {t.session_id}: {verdicts.triage_summary(t.result)}"
