"""What replay adds to pages and commands of other apps (registered in ReplayConfig.ready)."""

from __future__ import annotations

from pathlib import Path

from core.models import Project
from core.registry import LocalModel, StartupFailed, TurnPageExtension

# Replay buttons on a turn's page; the page's context (project, membership, snapshot, blocks) is
# all the partial needs.
TURN_ACTIONS = TurnPageExtension(name="replay.turn_actions", template="replay/_turn_actions.html")


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
    except Exception as exc:
        localmodel.stop(server)
        raise StartupFailed(f"the local model server did not become ready: {exc}") from exc
    model_endpoints.local_endpoint_register(project=project, base_url=server.base_url)
    return LocalModel(
        base_url=server.base_url, stop=lambda: localmodel.stop(server), model_file=server.model_file)
