"""An ingest key is read with its project in one written statement: the same key and project as
the ORM reads, every field converted as the ORM converts it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.errors import AuthError
from core.models import IngestKey, Project, key_prefix
from core.services import LAST_USED_RESOLUTION_S, ingest_key_authenticate, ingest_key_revoke, project_create


def _fields(obj: object, model: type) -> dict[str, object]:
    return {f.attname: getattr(obj, f.attname) for f in model._meta.concrete_fields}


@pytest.mark.django_db
def test_the_key_and_its_project_are_those_the_orm_reads_field_for_field():
    project, raw = project_create(name="lookup")
    # Fields the ORM converts on reading (JSON text parsed), floats and timestamps alike.
    Project.objects.filter(pk=project.pk).update(
        model_windows={"my-model": 32000, "nested": {"k": [1, 2.5, None, "x\u00e9"]}},
        price_table={"gpt-4o": {"input": 2.5, "output": 10.0}},
        tier_warn=0.61,
        retention_days=9,
    )
    ingest_key_authenticate(raw=raw)  # records the key's first use
    key = ingest_key_authenticate(raw=raw)
    assert key.last_used_at is not None
    with CaptureQueriesContext(connection) as reads:
        orm = IngestKey.objects.select_related("project").get(pk=key.pk)
    assert len(reads.captured_queries) == 1
    assert _fields(key, IngestKey) == _fields(orm, IngestKey)
    assert _fields(key.project, Project) == _fields(orm.project, Project)
    assert key.project.model_windows["nested"]["k"] == [1, 2.5, None, "x\u00e9"]
    assert key.project.thresholds == orm.project.thresholds
    # The project came with the key: reading it takes no query, and the instances save as usual.
    with CaptureQueriesContext(connection) as later:
        assert key.project.name == "lookup"
        assert key.project_id == key.project.pk
    assert later.captured_queries == []
    assert not key._state.adding and not key.project._state.adding
    key.project.retention_days = 10
    key.project.save(update_fields=["retention_days"])
    assert Project.objects.get(pk=project.pk).retention_days == 10


@pytest.mark.django_db
def test_a_known_key_takes_one_statement_and_its_use_is_recorded_at_most_once_a_minute():
    _, raw = project_create(name="lookup-uses")
    with CaptureQueriesContext(connection) as first:
        key = ingest_key_authenticate(raw=raw)
    assert len(first.captured_queries) == 2  # the lookup, and the first use recorded
    assert IngestKey.objects.get(pk=key.pk).last_used_at is not None
    with CaptureQueriesContext(connection) as again:
        ingest_key_authenticate(raw=raw)
    assert len(again.captured_queries) == 1
    IngestKey.objects.filter(pk=key.pk).update(
        last_used_at=timezone.now() - timedelta(seconds=LAST_USED_RESOLUTION_S + 5)
    )
    with CaptureQueriesContext(connection) as stale:
        ingest_key_authenticate(raw=raw)
    assert len(stale.captured_queries) == 2


@pytest.mark.django_db
def test_missing_unknown_and_revoked_keys_are_refused_with_their_reason():
    project, raw = project_create(name="lookup-refused")
    with pytest.raises(AuthError, match="missing ingest key"):
        ingest_key_authenticate(raw=None)
    with pytest.raises(AuthError, match="missing ingest key"):
        ingest_key_authenticate(raw="")
    with pytest.raises(AuthError, match="unknown ingest key"):
        ingest_key_authenticate(raw=raw + "x")
    assert ingest_key_authenticate(raw=f"  {raw}  ").project.pk == project.pk
    ingest_key_revoke(prefix=key_prefix(raw), project=project)
    with pytest.raises(AuthError, match="revoked"):
        ingest_key_authenticate(raw=raw)
