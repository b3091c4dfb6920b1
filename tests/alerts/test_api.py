"""The alerts REST API: keys read, signed-in editors write (with CSRF)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from alerts import kinds as K
from alerts.models import Alert, AlertRule
from core.models import Membership
from tests.alerts.conftest import sized_snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture
def raised(poster, project):
    for s in ("s-1", "s-2"):
        for i, f in enumerate([0.3, 0.9, 0.97]):
            poster.post([sized_snapshot(turn=i, fill=f, session_id=s)])
    return project


def editor_client(project, role: str = "editor") -> Client:
    user = get_user_model().objects.create_user(f"u-{role}", password="pw")
    Membership.objects.create(project=project, user=user, role=role)
    c = Client(enforce_csrf_checks=True)
    c.force_login(user)
    c.get(f"/p/{project.pk}/alerts/")  # sets the CSRF cookie
    return c


def csrf(c: Client) -> dict[str, str]:
    return {"HTTP_X_CSRFTOKEN": c.cookies["csrftoken"].value}


def test_list_with_an_ingest_key_and_filters(api, raised):
    r = api.get("/alerts")
    assert r.status_code == 200
    body = r.json()
    assert body["count"] == Alert.objects.filter(project=raised).count() > 0
    item = body["items"][0]
    assert item["turn_url"] == f"/p/{raised.pk}/s/{item['session_id']}/t/{item['turn']}/"
    assert set(item["contributors"][0]) >= {"key", "kind", "tokens", "share", "delta", "position"}
    r = api.get("/alerts", session="s-2")
    assert {i["session_id"] for i in r.json()["items"]} == {"s-2"}
    rule = AlertRule.objects.get(project=raised, kind=K.TIER_CROSSING, params__tier="break")
    r = api.get("/alerts", rule=rule.pk)
    assert [i["rule_id"] for i in r.json()["items"]] == [rule.pk, rule.pk]
    assert api.get("/alerts", state="resolved").json()["count"] == 0


def test_keys_cannot_acknowledge_or_write_rules(api, raised):
    a = Alert.objects.filter(project=raised).first()
    r = api.client.post(f"/api/v1/alerts/{a.pk}/ack", **api.headers())
    assert r.status_code == 403
    r = api.client.post(
        "/api/v1/alert-rules",
        data=json.dumps({"name": "x", "kind": K.COUNT_DRIFT}),
        content_type="application/json",
        **api.headers(),
    )
    assert r.status_code == 403
    a.refresh_from_db()
    assert a.state == "open"


def test_editor_acks_and_resolves_with_csrf(raised):
    c = editor_client(raised)
    a = Alert.objects.filter(project=raised).first()
    assert c.post(f"/api/v1/alerts/{a.pk}/ack").status_code == 403, "no CSRF token"
    r = c.post(f"/api/v1/alerts/{a.pk}/ack", **csrf(c))
    assert r.status_code == 200 and r.json()["state"] == "acknowledged"
    r = c.post(f"/api/v1/alerts/{a.pk}/resolve", **csrf(c))
    assert r.json()["state"] == "resolved" and r.json()["resolved_at"]


def test_viewer_cannot_write(raised):
    c = editor_client(raised, "viewer")
    a = Alert.objects.filter(project=raised).first()
    assert c.post(f"/api/v1/alerts/{a.pk}/ack", **csrf(c)).status_code == 403
    assert c.get("/api/v1/alerts").status_code == 200


def test_rules_create_update_and_validation(api, project):
    c = editor_client(project)
    body = {
        "name": "big tool output",
        "kind": K.BLOCK_SHARE,
        "severity": "critical",
        "params": {"share_pct": 25, "block_kinds": ["tool_results"]},
        "model": "gpt-4o",
    }
    r = c.post("/api/v1/alert-rules", data=json.dumps(body), content_type="application/json", **csrf(c))
    assert r.status_code == 201, r.content
    rid = r.json()["id"]
    assert r.json()["params"] == {"share_pct": 25.0, "block_kinds": ["tool_results"]}
    r = c.patch(
        f"/api/v1/alert-rules/{rid}",
        data=json.dumps({"enabled": False, "params": {"share_pct": 50}}),
        content_type="application/json",
        **csrf(c),
    )
    assert r.status_code == 200 and r.json()["enabled"] is False and r.json()["params"]["share_pct"] == 50
    bad = {"name": "x", "kind": K.COMPRESSION_STORM, "params": {"events": -1}}
    r = c.post("/api/v1/alert-rules", data=json.dumps(bad), content_type="application/json", **csrf(c))
    assert r.status_code == 422 and "params.events" in r.json()["errors"]
    listed = api.get("/alert-rules").json()
    assert rid in [x["id"] for x in listed]


def test_other_projects_alerts_are_invisible(raised, db):
    from core.services import project_create

    other, key = project_create(name="other")
    c = Client()
    r = c.get("/api/v1/alerts", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert r.json()["count"] == 0
    a = Alert.objects.filter(project=raised).first()
    assert c.get(f"/api/v1/alerts/{a.pk}", HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 404
