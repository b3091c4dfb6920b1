"""Replays and triages of turns that retention removed: runs made before the turn expired and
executed after it end with "turn expired" (no model call, no retry), on a real worker; a new job
or triage on such a turn is refused with the same words."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from core import registry
from core.services import ingest_key_create
from ingest import retention
from ingest.models import Snapshot
from replay.errors import turn_expired
from replay.models import ReplayRun, Triage
from replay.services import runs, triage
from replay.services.jobs import replay_job_create
from tests import factories as f
from tests.ingest.aging import age
from tests.replay.conftest import wait_job
from tests.replay.helpers import PLANTED_MEMORY, PLANTED_QUESTION, PLANTED_SYSTEM, post

RETENTION_DAYS = 5


def _wire() -> dict[str, Any]:
    return f.snapshot(
        blocks=[
            f.block("system", "system", PLANTED_SYSTEM, pinned=True),
            f.block("memory", "memory", PLANTED_MEMORY),
            f.block("user", "user", PLANTED_QUESTION),
        ]
    )


def _expire(project: Any) -> None:
    """Turns of PROJECT ten days old, past its retention, and expiry run."""
    project.retention_days = RETENTION_DAYS
    project.save(update_fields=["retention_days"])
    age(project, 10)
    retention.expire()
    assert not Snapshot.objects.filter(project=project).exists()


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_runs_of_a_turn_that_expired_after_the_job_was_made_end_with_turn_expired(
    celery_worker_process: Any, api: Any, stub_endpoint: Any, stub_server: Any, admin_client_: Client
) -> None:
    project = stub_endpoint.project
    # The job's runs wait in the queue while no replay worker runs.
    celery_worker_process.stop("worker-replay")
    wire = _wire()
    post(api, wire)
    job = replay_job_create(
        project=project, endpoint=stub_endpoint,
        spec={"kind": "plain", "snapshot_id": wire["snapshot_id"], "samples": 2},
    )
    assert job.n_runs == 2
    _expire(project)

    celery_worker_process.start("worker-replay")
    job = wait_job(job.pk, timeout=90)

    reason = turn_expired(RETENTION_DAYS)
    assert (job.status, job.n_failed, job.n_done) == ("failed", 2, 0)
    for run in ReplayRun.objects.filter(job=job):
        assert (run.status, run.error, run.attempts, run.model_calls) == ("failed", reason, 0, 0)
        assert run.next_attempt_at is None and run.finished_at is not None
        # Run again (a second delivery): nothing more happens.
        assert runs.replay_run_execute(run_id=run.pk).state == "already_failed"
    assert stub_server.completion_calls() == []
    page = admin_client_.get(f"/p/{project.pk}/replays/{job.pk}/")
    body = page.content.decode()
    assert page.status_code == 200
    assert reason in body and 'id="job-turns-expired"' in body and "turn expired</span>" in body

    # A new job on the expired turn: the form says why, with a 404 (by snapshot id, which leaves
    # no trace once removed, both possibilities; by session, which does, that it expired).
    resp = admin_client_.post(
        f"/p/{project.pk}/replays/new", {"snapshot_id": wire["snapshot_id"], "kind": "plain", "samples": "1"}
    )
    assert resp.status_code == 404 and f"older than the {RETENTION_DAYS} days" in resp.content.decode()
    resp = admin_client_.post(
        f"/p/{project.pk}/replays/new", {"session_id": wire["session_id"], "kind": "plain", "samples": "1"}
    )
    assert resp.status_code == 404 and reason in resp.content.decode()


@pytest.mark.django_db
def test_the_api_refuses_a_job_on_an_expired_turn_with_the_reason(
    api: Any, stub_endpoint: Any, client: Client
) -> None:
    project = stub_endpoint.project
    wire = _wire()
    post(api, wire)
    _expire(project)
    key = ingest_key_create(project=project, name="ci", scopes=("ingest", "replay"))[1]
    resp = client.post(
        "/api/v1/replays", {"snapshot_id": wire["snapshot_id"], "kind": "plain", "samples": 1},
        content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert resp.status_code == 404, resp.content
    assert f"older than the {RETENTION_DAYS} days" in resp.json()["detail"]
    resp = client.post(
        "/api/v1/replays", {"session_id": wire["session_id"], "kind": "plain", "samples": 1},
        content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert resp.status_code == 404 and turn_expired(RETENTION_DAYS) in resp.json()["detail"]
    resp = client.post(
        "/api/v1/replays", {"session_id": "never-sent", "kind": "plain", "samples": 1},
        content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert resp.status_code == 404 and "expired" not in resp.json()["detail"]


@pytest.mark.django_db
def test_a_triage_of_a_turn_that_expired_before_it_started_is_skipped_as_expired(
    api: Any, stub_endpoint: Any
) -> None:
    project = stub_endpoint.project
    project.triage_enabled = True
    project.save(update_fields=["triage_enabled"])
    wire = _wire()
    post(api, wire)
    snap = Snapshot.objects.get(project=project, snapshot_id=wire["snapshot_id"])
    [tid] = triage.triages_record(
        flags=[registry.TurnFlagged(project_id=project.pk, snapshot_ref=snap.id, reason="alert",
                                    project=project)]
    )
    _expire(project)

    assert triage.triage_start(triage_id=tid) == "skipped"
    t = Triage.objects.get(pk=tid)
    assert (t.status, t.reason, t.job_id) == ("skipped", turn_expired(RETENTION_DAYS), None)
    assert triage.triage_start(triage_id=tid) == "nothing_to_do"
