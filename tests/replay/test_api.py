"""The replay API: preview, create, read, cancel; who may do what."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from core.services import ingest_key_create
from replay.models import ReplayJob
from tests.replay.conftest import member_client
from tests.replay.helpers import planted_fact_snapshot, post


@pytest.fixture
def planted(api: Any, private_project: Any) -> dict[str, Any]:
    wire = planted_fact_snapshot()
    post(api, wire)
    return wire


def _post(client: Client, path: str, body: dict[str, Any], **extra: Any) -> Any:
    return client.post(f"/api/v1{path}", data=json.dumps(body), content_type="application/json", **extra)


@pytest.mark.django_db
def test_preview_shows_the_cost_and_stores_nothing(
    api: Any, planted: dict[str, Any], stub_endpoint: Any
) -> None:
    resp = _post(
        api.client,
        "/replays/preview",
        {"kind": "loo", "snapshot_id": planted["snapshot_id"], "samples": 3},
        **api.headers(),
    )
    assert resp.status_code == 200, resp.content
    body = resp.json()
    # 3 baseline samples, and as many answers without each of the 3 blocks.
    assert body["estimate"]["model_calls"] == 3 + 3 * 3
    assert body["estimate"]["prompt_tokens"] > 0
    assert [v["is_baseline"] for v in body["variants"]] == [True, False, False, False]
    assert not ReplayJob.objects.exists()


@pytest.fixture
def replay_key(private_project: Any) -> str:
    return ingest_key_create(project=private_project, name="ci", scopes=("ingest", "replay"))[1]


@pytest.mark.django_db
def test_a_replay_key_starts_and_reads_a_job(
    api: Any, replay_key: str, planted: dict[str, Any], stub_endpoint: Any
) -> None:
    resp = _post(
        api.client,
        "/replays",
        {
            "kind": "without",
            "snapshot_id": planted["snapshot_id"],
            "block": "memory",
            "samples": 2,
            "params": {"max_tokens": 8},
        },
        **api.headers(replay_key),
    )
    assert resp.status_code == 201, resp.content
    job = resp.json()
    assert job["status"] == "pending" and job["n_runs"] == 4 and job["estimate"]["model_calls"] == 4
    # Asked through the API by a person's key: its calls go ahead of triage and experiments.
    assert job["priority"] == "person"
    got = api.get(f"/replays/{job['id']}")
    assert got.status_code == 200
    turns = got.json()["turns"]
    assert len(turns) == 1 and [v["label"] for v in turns[0]["variants"]] == [
        "baseline (unchanged)",
        "without memory",
    ]
    cancel = _post(api.client, f"/replays/{job['id']}/cancel", {}, **api.headers(replay_key))
    assert cancel.status_code == 200 and cancel.json()["status"] == "cancelled"


@pytest.mark.django_db
def test_bad_requests_are_explained(
    api: Any, replay_key: str, planted: dict[str, Any], stub_endpoint: Any
) -> None:
    resp = _post(
        api.client,
        "/replays",
        {"kind": "without", "snapshot_id": planted["snapshot_id"], "block": "nope"},
        **api.headers(replay_key),
    )
    assert resp.status_code == 400 and "no block" in resp.json()["detail"]
    resp = _post(
        api.client,
        "/replays",
        {"kind": "plain", "snapshot_id": "00000000-0000-0000-0000-000000000000"},
        **api.headers(replay_key),
    )
    assert resp.status_code == 404


@pytest.mark.django_db
def test_another_projects_key_sees_no_job(
    api: Any, replay_key: str, planted: dict[str, Any], stub_endpoint: Any
) -> None:
    from core.services import project_create

    _, other_key = project_create(name="other", scopes=("ingest", "replay"))
    resp = _post(
        api.client,
        "/replays",
        {"kind": "plain", "snapshot_id": planted["snapshot_id"]},
        **api.headers(replay_key),
    )
    job_id = resp.json()["id"]
    assert api.get(f"/replays/{job_id}", key=other_key).status_code == 404
    assert (
        _post(
            api.client,
            "/replays",
            {"kind": "plain", "snapshot_id": planted["snapshot_id"]},
            **api.headers(other_key),
        ).status_code
        == 404
    )


@pytest.mark.django_db
def test_an_ingest_only_key_reads_but_may_not_start_or_cancel_replays(
    api: Any, replay_key: str, planted: dict[str, Any], stub_endpoint: Any
) -> None:
    body = {"kind": "plain", "snapshot_id": planted["snapshot_id"], "samples": 1}
    refused = _post(api.client, "/replays", body, **api.headers())
    assert refused.status_code == 403, refused.content
    detail = refused.json()["detail"]
    assert "lacks the replay scope" in detail and "--replay" in detail
    assert not ReplayJob.objects.exists()

    job = _post(api.client, "/replays", body, **api.headers(replay_key)).json()
    assert api.get(f"/replays/{job['id']}").status_code == 200, "agents still read their project"
    cancel = _post(api.client, f"/replays/{job['id']}/cancel", {}, **api.headers())
    assert cancel.status_code == 403 and "replay scope" in cancel.json()["detail"]
    assert ReplayJob.objects.get(pk=job["id"]).status != "cancelled"


@pytest.mark.django_db
def test_logged_in_viewers_read_but_only_editors_start_jobs(
    private_project: Any,
    planted: dict[str, Any],
    stub_endpoint: Any,
) -> None:
    viewer = member_client(private_project, "viewer")
    body = {"kind": "plain", "snapshot_id": planted["snapshot_id"]}
    assert _post(viewer, "/replays", body).status_code == 403
    editor = member_client(private_project, "editor")
    resp = _post(editor, "/replays", body)
    assert resp.status_code == 201
    assert viewer.get(f"/api/v1/replays/{resp.json()['id']}").status_code == 200


@pytest.mark.django_db
def test_a_session_post_without_the_csrf_token_is_refused(
    private_project: Any, planted: dict[str, Any], stub_endpoint: Any
) -> None:
    from django.contrib.auth import get_user_model

    from core.models import Membership

    user = get_user_model().objects.create_user(username="csrf-editor", password="pw-12345678")
    Membership.objects.create(project=private_project, user=user, role="editor")
    c = Client(enforce_csrf_checks=True)
    c.force_login(user)
    resp = _post(c, "/replays", {"kind": "plain", "snapshot_id": planted["snapshot_id"]})
    assert resp.status_code == 403 and "CSRF" in resp.json()["detail"]
    assert not ReplayJob.objects.exists()


@pytest.mark.django_db
def test_snapshot_id_with_its_session_id_names_that_turn_and_another_session_is_404(
    api: Any, planted: dict[str, Any], stub_endpoint: Any
) -> None:
    body = {"kind": "plain", "snapshot_id": planted["snapshot_id"], "samples": 1}
    same = {**body, "session_id": planted["session_id"]}
    resp = _post(api.client, "/replays/preview", same, **api.headers())
    assert resp.status_code == 200, resp.content
    assert [v["snapshot_id"] for v in resp.json()["variants"]] == [planted["snapshot_id"]]
    resp = _post(api.client, "/replays/preview", {**body, "session_id": "another"}, **api.headers())
    assert resp.status_code == 404
    assert "session" in resp.json()["detail"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"kind": "plain"}, id="no-turns"),
        pytest.param({"kind": "plain", "snapshot_id": ""}, id="empty-snapshot-id"),
        pytest.param({"kind": "without", "session_id": "s"}, id="without-needs-block"),
    ],
)
def test_a_request_the_schema_refuses_is_a_422_naming_the_problem(
    api: Any, replay_key: str, stub_endpoint: Any, body: dict[str, Any]
) -> None:
    resp = _post(api.client, "/replays", body, **api.headers(replay_key))
    assert resp.status_code == 422, resp.content
    assert not ReplayJob.objects.exists()


@pytest.mark.django_db
def test_a_filter_that_matches_no_turn_is_a_404(
    api: Any, planted: dict[str, Any], stub_endpoint: Any
) -> None:
    resp = _post(api.client, "/replays/preview", {"filter": {"agent": "nobody"}}, **api.headers())
    assert resp.status_code == 404
    assert resp.json()["detail"] == "no turn matches"


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/replays", "/replays/preview"])
@pytest.mark.parametrize("value", [5, "x", True, [], [{"q": "a"}]],
                         ids=["number", "string", "true", "empty-list", "list-of-object"])
def test_a_filter_that_is_not_an_object_is_422(
    api: Any, replay_key: str, planted: dict[str, Any], stub_endpoint: Any, path: str, value: Any
) -> None:
    resp = _post(api.client, path, {"kind": "plain", "filter": value}, **api.headers(replay_key))
    assert resp.status_code == 422, resp.content
    errors = resp.json()["detail"]
    assert any("filter" in e["loc"] and "must be an object" in e["msg"] for e in errors), errors
    assert not ReplayJob.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["params", "operations"])
def test_other_nested_objects_are_objects_too(
    api: Any, replay_key: str, planted: dict[str, Any], stub_endpoint: Any, field: str
) -> None:
    body: dict[str, Any] = {"kind": "custom", "snapshot_id": planted["snapshot_id"],
                            "operations": [{"op": "remove", "key": "memory"}]}
    body[field] = 5 if field == "params" else [5]
    resp = _post(api.client, "/replays", body, **api.headers(replay_key))
    assert resp.status_code == 422, resp.content
    assert not ReplayJob.objects.exists()


@pytest.mark.django_db
def test_an_object_filter_still_plans_a_replay(
    api: Any, replay_key: str, planted: dict[str, Any], stub_endpoint: Any
) -> None:
    resp = _post(api.client, "/replays/preview", {"kind": "plain", "filter": {}}, **api.headers(replay_key))
    assert resp.status_code == 200 and resp.json()["variants"], resp.content


@pytest.mark.django_db
def test_a_project_without_a_model_endpoint_is_a_409_with_its_reason(
    api: Any, replay_key: str, planted: dict[str, Any]
) -> None:
    resp = _post(api.client, "/replays", {"kind": "plain", "snapshot_id": planted["snapshot_id"]},
                 **api.headers(replay_key))
    assert resp.status_code == 409, resp.content
    assert "no model endpoint" in resp.json()["detail"]
    assert not ReplayJob.objects.exists()
    doc = api.client.get("/api/v1/openapi.json").json()
    answer = doc["paths"]["/api/v1/replays"]["post"]["responses"]["409"]
    assert "model endpoint" in answer["description"]
    assert answer["content"]["application/json"]["schema"]
