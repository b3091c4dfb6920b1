"""The published OpenAPI schema against the running app: a bounded schemathesis run of every
operation with every check, in-process (WSGI) with a real ingest key on the real test database.

Replays go to a model endpoint on a local port that refuses connections, so no run can reach a
paid API; no Celery worker runs here, and the queued jobs are removed from the test broker after.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from pydantic import TypeAdapter, ValidationError
from schemathesis.config import SchemathesisConfig

from config.wsgi import application
from core.models import Project
from core.params import Instant
from core.services import project_create
from ctxobs.validate import parse_ts
from tests.factories import full_snapshot

pytestmark = pytest.mark.django_db

SEED = 20261203
_REJECTED = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]
CONFIG = SchemathesisConfig.from_dict({
    "seed": SEED,
    "generation": {"max-examples": 50, "deterministic": True, "database": "none"},
    "checks": {
        "enabled": True,
        # 413 (a batch or a body over its documented limit) is a refusal too.
        "negative_data_rejection": {"expected-statuses": _REJECTED},
    },
    "operations": [{
        "include-path": "/api/v1/snapshots",
        # A batch is judged item by item: a bad item next to good ones is rejected in a 207.
        "checks": {"negative_data_rejection": {"expected-statuses": [*_REJECTED, "207"]}},
    }, {
        # So are the items of an evaluation set.
        "include-path-regex": "^/api/v1/datasets",
        "checks": {"negative_data_rejection": {"expected-statuses": [*_REJECTED, "207"]}},
    }],
})


def _states_what_json_schema_cannot(snap: Any) -> bool:
    """The rules of a snapshot JSON Schema cannot state (see ctxobs.wire): the reserve below the
    window, a timestamp that stays within years 1-9999 once in UTC, and a block sent by hash
    whose content the project holds (none here: tests/ingest/test_block_hashes.py has them)."""
    if not isinstance(snap, dict):
        return True
    blocks = snap.get("blocks")
    if isinstance(blocks, list) and any(isinstance(b, dict) and "hash" in b for b in blocks):
        return False
    model = snap.get("model")
    if isinstance(model, dict):
        window, reserve = model.get("context_window"), model.get("reserve_tokens")
        # Whole floats (8000.0) are integers to the schema and to validation alike.
        if isinstance(window, int | float) and isinstance(reserve, int | float) and reserve >= window:
            return False
    ts = snap.get("ts")
    return not isinstance(ts, str) or parse_ts(ts) is not None or not _looks_like_date_time(ts)


def _looks_like_date_time(ts: str) -> bool:
    try:
        datetime.fromisoformat(ts.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return False
    return True


def _instant_or_not_a_date_time(value: Any) -> bool:
    if not isinstance(value, str) or not _looks_like_date_time(value):
        return True
    try:
        TypeAdapter(Instant).validate_python(value)
    except ValidationError:
        return False
    return True


@pytest.fixture
def wsgi_in_test_transaction(db: Any) -> Iterator[None]:
    """Let the WSGI handler serve inside the test's transaction: it closes "old" connections at
    each request's start and end, which would close the test's own. Django's test client does
    the same."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def keyed_project(wsgi_in_test_transaction: None) -> tuple[Project, str]:
    from core.services import ingest_key_create
    from replay.services.model_endpoints import endpoint_create

    project, _ = project_create(name="schema")
    # Both scopes, so that the replay operations are exercised past their scope check.
    key = ingest_key_create(project=project, name="schemathesis", scopes=("ingest", "replay"))[1]
    project.allow_private_endpoints = True
    project.save(update_fields=["allow_private_endpoints"])
    from tests.ctxobs.conftest import free_port

    endpoint_create(project=project, name="refusing", base_url=f"http://127.0.0.1:{free_port()}/v1",
                    model="none", api_key="unused", is_default=True)
    return project, key


# Fetching the schema touches no table: it can be loaded when the module is collected.
schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", application, config=CONFIG)


@schema.hook
def filter_case(context: Any, case: Any) -> bool:
    """Schema-valid cases only where the schema can say so: drop positive batches that break a
    rule JSON Schema cannot express (negative cases are kept whatever they hold)."""
    if case.meta is None or case.meta.generation.mode.name.lower() != "positive":
        return True
    if case.operation.path.startswith(("/api/v1/datasets", "/api/v1/strategies", "/api/v1/sweeps")):
        # Checks and operations are validated by their kind (a regex that compiles, the fields
        # an operation of that kind needs, a JSON Schema that is one): refused with a 400 naming
        # the field, which these rules JSON Schema cannot state earn.
        body = case.body if isinstance(case.body, dict) else {}
        if any(body.get(k) for k in ("checks", "operations", "values")):
            return False
        items = body.get("items") or []
        if any(isinstance(s, dict) and s.get("checks") for s in items):
            return False
        if not all(_states_what_json_schema_cannot(s) for s in items):
            return False
    if case.operation.path != "/api/v1/snapshots":
        # A date-time query parameter: RFC 3339 allows any offset below 24 h and years from 1,
        # but an instant is one only within ±14:00 and once in UTC still within years 1-9999.
        query = case.query or {}
        return all(_instant_or_not_a_date_time(query[k]) for k in ("since", "until") if k in query)
    if not isinstance(case.body, dict):
        return True
    items = case.body.get("snapshots")
    return not isinstance(items, list) or all(_states_what_json_schema_cannot(s) for s in items)


@schema.parametrize()
# One project and key for all the examples of an operation, on purpose.
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
def test_every_operation_behaves_as_its_schema_says(case: Any, keyed_project: tuple[Project, str]) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {keyed_project[1]}"})


def _published(client: Any) -> dict[str, Any]:
    r = client.get("/api/v1/openapi.json")
    assert r.status_code == 200
    return r.json()


def test_every_operation_documents_the_errors_it_can_answer(client: Any) -> None:
    doc = _published(client)
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            statuses = set(op["responses"])
            where = f"{method.upper()} {path}"
            assert {"401", "503"} <= statuses, where
            assert "Retry-After" in op["responses"]["503"]["headers"], where
            if op.get("parameters") or "requestBody" in op:
                assert "422" in statuses, where
            if "requestBody" in op:
                assert "400" in statuses, where
    assert {"413", "429"} <= set(doc["paths"]["/api/v1/snapshots"]["post"]["responses"])


def test_empty_model_name_is_refused_by_the_schema_and_by_the_api(client: Any, api: Any) -> None:
    body = _published(client)["paths"]["/api/v1/snapshots"]["post"]["requestBody"]
    snap = body["content"]["application/json"]["schema"]["properties"]["snapshots"]["items"]
    assert snap["properties"]["model"]["properties"]["name"]["minLength"] == 1
    assert snap["properties"]["session_id"]["minLength"] == 1
    s = full_snapshot()
    s["model"]["name"] = ""
    r = api.post_snapshots([s])
    assert r.status_code == 422
    assert r.json()["results"][0]["errors"][0]["loc"] == ["snapshots", 0, "model", "name"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("context_window", 2**31, id="window-beyond-int32"),
        pytest.param("context_window", 8000.0, id="whole-float-window"),
    ],
)
def test_model_numbers_are_judged_as_the_schema_says(api: Any, field: str, value: Any) -> None:
    s = full_snapshot()
    s["model"][field] = value
    r = api.post_snapshots([s])
    # A whole float is the integer JSON Schema says it is; beyond 32 bits is refused, not a 500.
    assert r.status_code == (200 if isinstance(value, float) else 422), r.content


def test_the_utc_offset_bound_is_in_the_schema_and_enforced(client: Any, api: Any) -> None:
    import re

    doc = _published(client)
    params = {p["name"]: p for p in doc["paths"]["/api/v1/export"]["get"]["parameters"]}
    for name in ("since", "until"):
        (stated,) = [s for s in params[name]["schema"]["anyOf"] if s.get("type") == "string"]
        assert "±14:00" in stated["description"]
        pattern = re.compile(stated["pattern"])
        for value, taken in (("2026-12-01T08:00:00+14:00", True), ("2026-12-01T08:00:00-1400", True),
                             ("2026-12-01T08:00:00Z", True), ("2026-12-01T08:00:00+14:30", False),
                             ("2026-12-01T08:00:00-15:00", False)):
            assert bool(pattern.match(value)) == taken, value
            r = api.get("/export", **{name: value})
            assert r.status_code == (200 if taken else 422), (value, r.content)
            if not taken:
                assert "-14:00 and +14:00" in json.dumps(r.json())
