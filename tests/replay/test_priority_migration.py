"""Jobs stored before queue priorities: `migrate` gives an experiment's job the experiments'
priority and a triage's job triage's, so that a run of theirs the reclaimer queues again keeps
its place behind a person's replays. Run on a database of its own, created for the test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db.backends.base.base import BaseDatabaseWrapper

from replay.models import QueuePriority
from tests.scratch_db import migrate, scratch_database

BEFORE = ("replay", "0007_frozen_contexts")
ALIAS = "replay_priority"


@pytest.fixture
def scratch_db(django_db_setup: Any, django_db_blocker: Any) -> Iterator[BaseDatabaseWrapper]:
    with scratch_database(django_db_blocker, prefix="ctxobs_priority", alias=ALIAS) as conn:
        yield conn


def test_jobs_stored_before_priorities_get_their_kind_s_priority(scratch_db: BaseDatabaseWrapper) -> None:
    executor = migrate(scratch_db, [BEFORE])
    apps = executor.loader.project_state([BEFORE], at_end=True).apps
    db = ALIAS
    project = apps.get_model("core", "Project").objects.using(db).create(name="shop")
    endpoint = apps.get_model("replay", "ModelEndpoint").objects.using(db).create(
        project=project, name="local", base_url="http://127.0.0.1:8011/v1", model="gemma")
    job_model = apps.get_model("replay", "ReplayJob")
    jobs = {kind: job_model.objects.using(db).create(project=project, endpoint=endpoint, kind=kind)
            for kind in ("without", "experiment", "attribution", "loo")}
    now = datetime.now(tz=UTC)
    # The attribution job is a triage's; the leave-one-out one a person's.
    apps.get_model("replay", "Triage").objects.using(db).create(
        project=project, snapshot_ref=1, snapshot_uuid=uuid.uuid4(), session_id="s", turn=0,
        received_at=now, trigger="alert", job=jobs["attribution"], job_kind="attribution")

    migrate(scratch_db)

    with scratch_db.cursor() as cur:
        cur.execute("SELECT kind, priority FROM replay_replayjob")
        got = dict(cur.fetchall())
    assert got == {
        "without": QueuePriority.PERSON,
        "experiment": QueuePriority.EXPERIMENT,
        "attribution": QueuePriority.TRIAGE,
        "loo": QueuePriority.PERSON,
    }
