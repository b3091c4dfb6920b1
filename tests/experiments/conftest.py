"""Experiment fixtures: the replay fixtures (the real local model, the scripted OpenAI-compatible
server and its endpoint), and helpers that store planted turns and run an experiment's replay
runs the way a replay worker does."""

from __future__ import annotations

from typing import Any

from replay.models import ReplayRun
from replay.services.runs import _job_refresh, replay_run_execute
from tests.replay.conftest import (  # noqa: F401 - fixtures shared with the replay tests
    StubServer,
    local_endpoint,
    private_project,
    stub_endpoint,
    stub_server,
)


def run_pending(job_id: int) -> int:
    """Execute the job's pending runs in this process, as a replay worker would; how many ran."""
    n = 0
    for rid in ReplayRun.objects.filter(job_id=job_id, status=ReplayRun.Status.PENDING).values_list(
        "id", flat=True
    ):
        replay_run_execute(run_id=rid)
        n += 1
    # What the job's on_commit hook does once every run was reused (a test's transaction never commits).
    _job_refresh(job_id=job_id)
    return n


def fact_answer(facts: dict[str, str]) -> Any:
    """A stub model's answer by the request: each planted fact whose text is in the prompt is
    stated in the answer; a fact whose memory was removed is not."""

    def answer(body: dict[str, Any]) -> str:
        prompt = str(body.get("prompt") or body.get("messages"))
        said = [value for marker, value in facts.items() if marker in prompt]
        return "Here is what I know: " + ", ".join(said) + "." if said else "I do not know."

    return answer
