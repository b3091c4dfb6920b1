"""Project, Membership and IngestKey moved from ingest to core without moving data: a database
migrated by the code before the move keeps every row, and every foreign key still holds, after
`migrate` runs forward (and back). Run on a database of its own, created for the test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.executor import MigrationExecutor

from tests.scratch_db import migrate, scratch_database

# The last migrations before tenancy moved to core.
BEFORE = [
    ("ingest", "0006_ingest_key_scopes"),
    ("alerts", "0003_delivery_lease_pending_evaluation"),
    ("replay", "0002_run_lease"),
]
ALIAS = "tenancy_move"


@pytest.fixture
def scratch_db(django_db_setup: Any, django_db_blocker: Any) -> Iterator[BaseDatabaseWrapper]:
    with scratch_database(django_db_blocker, prefix="ctxobs_tenancy", alias=ALIAS) as conn:
        yield conn


def _seed_before(executor: MigrationExecutor) -> dict[str, Any]:
    """Rows of every kind that points at a project, written with the models as they were."""
    apps = executor.loader.project_state(BEFORE, at_end=True).apps
    db = ALIAS
    now = datetime.now(tz=UTC)
    user = apps.get_model("auth", "User").objects.using(db).create(username="ann", password="!")
    project = apps.get_model("ingest", "Project").objects.using(db).create(name="shop", tier_warn=0.5)
    key = apps.get_model("ingest", "IngestKey").objects.using(db).create(
        project=project, name="agent", prefix="cx_abcdefghi", key_hash="a" * 64, scopes=["ingest", "replay"])
    apps.get_model("ingest", "Membership").objects.using(db).create(project=project, user=user, role="admin")
    apps.get_model("ingest", "AgentSession").objects.using(db).create(
        project=project, session_id="s-1", first_seen=now, last_seen=now, turn_count=1)
    snapshot_id = uuid.uuid4()
    apps.get_model("ingest", "Snapshot").objects.using(db).create(
        project=project, snapshot_id=snapshot_id, session_ref=1, session_id="s-1", turn=0, ts=now,
        received_at=now, model_name="m", context_window=1000, reserve_tokens=100, total_tokens=10,
        watermark=0.01, tier="ok")
    apps.get_model("alerts", "AlertRule").objects.using(db).create(
        project=project, name="drift", kind="count_drift")
    apps.get_model("replay", "ModelEndpoint").objects.using(db).create(
        project=project, name="local", base_url="http://127.0.0.1:8011/v1", model="gemma")
    # What `migrate` registers after it runs (admin permissions hang off it).
    content_type = apps.get_model("contenttypes", "ContentType").objects.using(db).create(
        app_label="ingest", model="project")
    return {"project_id": project.pk, "key_id": key.pk, "user_id": user.pk, "snapshot_id": snapshot_id,
            "content_type_id": content_type.pk}


def _check_after(seed: dict[str, Any]) -> None:
    from alerts.models import AlertRule
    from core.models import IngestKey, Membership, Project
    from ingest.models import AgentSession, Snapshot
    from replay.models import ModelEndpoint

    db = ALIAS
    project = Project.objects.using(db).get(pk=seed["project_id"])
    assert (project.name, project.tier_warn) == ("shop", 0.5)
    key = IngestKey.objects.using(db).get(pk=seed["key_id"])
    assert (key.project_id, key.prefix, key.scopes) == (project.pk, "cx_abcdefghi", ["ingest", "replay"])
    member = Membership.objects.using(db).select_related("project").get(user_id=seed["user_id"])
    assert member.project == project and member.role == "admin"
    assert AgentSession.objects.using(db).filter(project=project, session_id="s-1").count() == 1
    assert Snapshot.objects.using(db).get(project=project, snapshot_id=seed["snapshot_id"]).turn == 0
    rules = AlertRule.objects.using(db).filter(project=project)
    assert list(rules.values_list("name", flat=True)) == ["drift"]
    assert ModelEndpoint.objects.using(db).get(project=project).name == "local"
    # The database's foreign keys still point at the same table and still refuse a missing project.
    for model in (IngestKey, Membership, AlertRule, ModelEndpoint):
        with pytest.raises(IntegrityError), transaction.atomic(using=db):
            fields = {"project_id": 999_999, "name": "orphan"} if model is not Membership else {
                "project_id": 999_999, "user_id": seed["user_id"]}
            if model is IngestKey:
                fields.update(prefix="cx_orphan", key_hash="b" * 64)
            if model is AlertRule:
                fields.update(kind="count_drift")
            if model is ModelEndpoint:
                fields.update(base_url="http://127.0.0.1:1/v1", model="m")
            model.objects.using(db).create(**fields)


def test_a_database_migrated_before_the_move_keeps_its_rows_and_foreign_keys(
    scratch_db: BaseDatabaseWrapper,
) -> None:
    executor = migrate(scratch_db, [*BEFORE, ("core", None)])
    assert ("core", "0001_initial") not in executor.loader.applied_migrations
    seed = _seed_before(executor)

    migrate(scratch_db)

    _check_after(seed)
    with scratch_db.cursor() as cur:
        cur.execute("SELECT id, app_label FROM django_content_type WHERE model = 'project'")
        assert cur.fetchall() == [(seed["content_type_id"], "core")]


def test_the_move_migrates_back_and_forward_again(scratch_db: BaseDatabaseWrapper) -> None:
    seed = _seed_before(migrate(scratch_db, [*BEFORE, ("core", None)]))
    migrate(scratch_db)

    executor = migrate(scratch_db, [*BEFORE, ("core", None)])
    project = executor.loader.project_state(BEFORE, at_end=True).apps.get_model("ingest", "Project")
    assert project.objects.using(ALIAS).get(pk=seed["project_id"]).name == "shop"

    migrate(scratch_db)
    _check_after(seed)


def test_a_fresh_database_migrates_and_no_app_has_pending_changes(scratch_db: BaseDatabaseWrapper) -> None:
    migrate(scratch_db)
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()
    call_command("migrate", "--check", database=ALIAS)
