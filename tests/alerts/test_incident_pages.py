"""The Incidents pages through the Django test client on the real database: incidents made by the
real grouping path (snapshots posted through the ingest API, then the evaluation), the list's
filters and counts, roles and CSRF on the actions, escaping, query counts, other projects."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from alerts.models import Alert, Incident
from core.models import Membership, Project
from core.services import project_create, project_triage_set
from replay.models import Triage
from tests.alerts.conftest import Poster, sized_snapshot
from tests.factories import block

pytestmark = pytest.mark.django_db

EVIL = "<script>alert(1)</script>"


def member(project: Project, role: str, name: str | None = None) -> Any:
    user = get_user_model().objects.create_user(name or f"{role}-{project.pk}", password="pw-" + role)
    Membership.objects.create(project=project, user=user, role=role)
    return user


def jump(poster: Poster, session_id: str, *, at: datetime, agent: str, fill: float = 0.9, **kw: Any) -> None:
    """Turn 0 at 30%, turn 1 jumping to FILL: several default rules fire on one turn."""
    poster.post(
        [
            sized_snapshot(turn=0, fill=0.3, session_id=session_id, ts=at, agent=agent),
            sized_snapshot(
                turn=1, fill=fill, session_id=session_id, ts=at + timedelta(seconds=10), agent=agent, **kw
            ),
        ]
    )


@pytest.fixture
def incidents(poster: Poster, project: Project) -> dict[str, Incident]:
    """travel-bot: one incident over two sessions three hours ago; billing-bot: a tool result
    keyed with markup flooding the window ten minutes ago, and its break tier (critical)."""
    now = timezone.now().replace(microsecond=0)
    jump(poster, "s-1", at=now - timedelta(hours=3), agent="travel-bot")
    jump(poster, "s-2", at=now - timedelta(hours=3) + timedelta(minutes=2), agent="travel-bot")
    tool = block(EVIL, "tool_results", "results", tokens=5000)
    jump(
        poster, "s/3 <b>", at=now - timedelta(minutes=10), agent="billing-bot", fill=0.99, extra_blocks=[tool]
    )
    travel = Incident.objects.get(project=project, agent="travel-bot")
    billing = Incident.objects.get(project=project, agent="billing-bot")
    assert travel.session_count == 2 and billing.session_count == 1
    assert EVIL in billing.title and billing.severity == "critical" and travel.severity == "warning"
    return {"travel": travel, "billing": billing}


def ids(r: Any) -> list[int]:
    return [i.pk for i in r.context["incidents"]]


def test_the_list_shows_unresolved_incidents_by_default_with_counts_and_row_facts(client, incidents):
    travel, billing = incidents["travel"], incidents["billing"]
    project_id = travel.project_id
    client.force_login(member(travel.project, "viewer"))
    r = client.get(f"/p/{project_id}/incidents/")
    assert r.status_code == 200 and r.context["status"] == "unresolved"
    assert ids(r) == [billing.pk, travel.pk], "last seen first"
    body = r.content.decode()
    assert "2 open · 0 acknowledged · 0 muted · 0 resolved" in body
    row = re.search(rf'<tr id="incident-{travel.pk}".*?</tr>', body, re.S)
    assert row is not None
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.S)
    assert (
        "travel-bot" in cells[2] and cells[3].strip() == "2" and cells[4].strip() == str(travel.alert_count)
    )
    assert f'title="{timezone.localtime(travel.first_seen):%Y-%m-%d %H:%M:%S}' in row.group(0), (
        "exact time on hover"
    )
    assert "ago" in cells[5] and "reopened" not in row.group(0)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param({"status": "resolved"}, ["travel"], id="resolved"),
        pytest.param({"status": "open"}, ["billing"], id="open"),
        pytest.param({"status": "all"}, ["billing", "travel"], id="all"),
        pytest.param({"status": "all", "severity": "critical"}, ["billing"], id="severity"),
        pytest.param({"status": "all", "agent": "travel-bot"}, ["travel"], id="agent"),
        pytest.param({"status": "all", "since": "1h"}, ["billing"], id="since"),
        pytest.param({"status": "nonsense"}, ["billing"], id="unknown-status-is-unresolved"),
    ],
)
def test_filters_narrow_the_list(client, incidents, query, expected):
    from alerts.services.incidents import incident_resolve

    travel = incidents["travel"]
    user = member(travel.project, "editor")
    incident_resolve(incident=travel, user=user)
    client.force_login(user)
    r = client.get(f"/p/{travel.project_id}/incidents/", query)
    assert ids(r) == [incidents[k].pk for k in expected]
    counts = r.context["counts"]
    assert (counts["unresolved"], counts["open"], counts["resolved"], counts["all"]) == (1, 1, 1, 2)


def test_a_status_tab_keeps_the_other_filters_and_htmx_gets_the_table_only(client, incidents):
    travel = incidents["travel"]
    client.force_login(member(travel.project, "viewer"))
    r = client.get(f"/p/{travel.project_id}/incidents/", {"agent": "travel-bot"}, HTTP_HX_REQUEST="true")
    body = r.content.decode()
    assert body.startswith('<div id="incidents-table">') and "<html" not in body
    assert f"/p/{travel.project_id}/incidents/?status=resolved&amp;agent=travel-bot" in body


def test_viewer_reads_but_cannot_acknowledge(client, incidents):
    travel = incidents["travel"]
    client.force_login(member(travel.project, "viewer"))
    r = client.get(f"/p/{travel.project_id}/incidents/{travel.pk}/")
    assert r.status_code == 200
    assert "Acknowledge" not in r.content.decode() and "Resolve" not in r.content.decode()
    for action in ("ack", "resolve", "mute"):
        r = client.post(f"/p/{travel.project_id}/incidents/{travel.pk}/{action}/", {"minutes": "30"})
        assert r.status_code == 403, action
    travel.refresh_from_db()
    assert travel.status == "open" and travel.acknowledged_at is None


def test_editor_acknowledges_mutes_and_resolves(client, incidents):
    travel = incidents["travel"]
    user = member(travel.project, "editor")
    client.force_login(user)
    base = f"/p/{travel.project_id}/incidents/{travel.pk}/"
    r = client.post(base + "ack/", {"next": base})
    assert r.status_code == 302 and r["Location"] == base
    travel.refresh_from_db()
    assert travel.status == "acknowledged" and travel.acknowledged_by == user

    before = timezone.now()
    r = client.post(base + "mute/", {"minutes": "30"}, HTTP_HX_REQUEST="true")
    assert r.status_code == 200
    travel.refresh_from_db()
    assert travel.status == "muted"
    assert timedelta(minutes=29) < travel.muted_until - before < timedelta(minutes=31)
    body = r.content.decode()
    assert body.startswith('<div class="card" id="incident-status">') and "muted until" in body

    r = client.post(base + "resolve/")
    assert r.status_code == 302 and r["Location"] == base
    travel.refresh_from_db()
    assert (travel.status, travel.resolved_by, travel.resolution) == ("resolved", user, "user")
    page = client.get(base).content.decode()
    assert f"by {user.get_username()}" in page and 'name="resolve"' not in page


@pytest.mark.parametrize("minutes", ["45", "", "abc", "-30"])
def test_mute_takes_only_the_offered_durations(client, incidents, minutes):
    travel = incidents["travel"]
    client.force_login(member(travel.project, "editor"))
    r = client.post(
        f"/p/{travel.project_id}/incidents/{travel.pk}/mute/", {"minutes": minutes}, HTTP_HX_REQUEST="true"
    )
    assert r.status_code == 422 and "Not done" in r.content.decode()
    travel.refresh_from_db()
    assert travel.status == "open" and travel.muted_until is None


def test_a_resolved_incident_cannot_be_muted(client, incidents):
    travel = incidents["travel"]
    client.force_login(member(travel.project, "editor"))
    base = f"/p/{travel.project_id}/incidents/{travel.pk}/"
    client.post(base + "resolve/")
    r = client.post(base + "mute/", {"minutes": "30"}, follow=True)
    assert "Not done: a resolved incident cannot be muted." in r.content.decode()
    travel.refresh_from_db()
    assert travel.status == "resolved"


def test_actions_need_the_csrf_token(incidents):
    travel = incidents["travel"]
    c = Client(enforce_csrf_checks=True)
    c.force_login(member(travel.project, "editor"))
    r = c.post(f"/p/{travel.project_id}/incidents/{travel.pk}/ack/")
    assert r.status_code == 403
    travel.refresh_from_db()
    assert travel.status == "open"


def test_untrusted_text_is_escaped_on_the_list_and_the_page(client, incidents):
    billing = incidents["billing"]
    client.force_login(member(billing.project, "admin"))
    for path in ("", f"{billing.pk}/"):
        body = client.get(f"/p/{billing.project_id}/incidents/{path}", {"status": "all"}).content.decode()
        assert EVIL not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body, path
    body = client.get(f"/p/{billing.project_id}/incidents/{billing.pk}/").content.decode()
    assert "s/3 <b>" not in body and "s/3 &lt;b&gt;" in body, "the session id"
    figure = json.loads(
        re.search(r'<script id="incident-figure" type="application/json">(.*?)</script>', body, re.S).group(1)
    )
    texts = [t for trace in figure["data"] for t in trace["text"]]
    assert texts and all("<script>" not in t for t in texts)
    assert any("&lt;script&gt;" in t for t in texts), "plotly renders HTML in hover texts: entities only"
    assert {y for trace in figure["data"] for y in trace["y"]} == {"s/3 &lt;b&gt;"}


def test_the_incident_page_links_its_sessions_turns_and_alerts_and_charts_them(client, incidents):
    travel = incidents["travel"]
    pid = travel.project_id
    client.force_login(member(travel.project, "viewer"))
    r = client.get(f"/p/{pid}/incidents/{travel.pk}/")
    body = r.content.decode()
    assert [s["session_id"] for s in r.context["sessions"]] == ["s-1", "s-2"]
    for sid in ("s-1", "s-2"):
        assert f'href="/p/{pid}/s/{sid}/"' in body and f'href="/p/{pid}/s/{sid}/t/1/"' in body
    alerts = list(Alert.objects.filter(incident=travel))
    assert len(alerts) == travel.alert_count == len(r.context["alerts"])
    for a in alerts:
        assert f'href="/p/{pid}/alerts/{a.pk}/"' in body
    figure = r.context["figure"]
    assert sum(len(t["x"]) for t in figure["data"]) == len(alerts), "one marker per alert"
    assert {t["name"] for t in figure["data"]} <= {"info", "warning", "critical"}
    assert {y for t in figure["data"] for y in t["y"]} == {"s-1", "s-2"}
    assert 'data-figure="incident-figure"' in body and "plotly" in body
    # The alert's page names its incident.
    assert (
        f'href="/p/{pid}/incidents/{travel.pk}/"'
        in client.get(f"/p/{pid}/alerts/{alerts[0].pk}/").content.decode()
    )


def test_deliveries_are_shown_to_admins_only(client, incidents):
    from alerts.services import channels as alert_channels

    billing = incidents["billing"]
    channel, _ = alert_channels.channel_create(
        project=billing.project, kind="email", data={"name": "ops mail", "recipients": "ops@example.com"}
    )
    from alerts.models import Delivery

    Delivery.objects.create(
        project=billing.project, incident=billing, channel=channel, event="opened", sequence=1, status="sent"
    )
    client.force_login(member(billing.project, "admin"))
    body = client.get(f"/p/{billing.project_id}/incidents/{billing.pk}/").content.decode()
    assert 'id="incident-deliveries"' in body and "ops mail" in body and ">sent<" in body
    client.force_login(member(billing.project, "editor"))
    body = client.get(f"/p/{billing.project_id}/incidents/{billing.pk}/").content.decode()
    assert 'id="incident-deliveries"' not in body


def test_run_triage_asks_for_one_on_the_first_alerts_turn_and_the_verdict_becomes_the_culprit(
    client, incidents, django_capture_on_commit_callbacks
):
    travel = incidents["travel"]
    project = travel.project
    pid = project.pk
    client.force_login(member(project, "editor"))
    base = f"/p/{pid}/incidents/{travel.pk}/"
    body = client.get(base).content.decode()
    assert "Auto-triage is off for this project" in body and "incident-run-triage" not in body
    r = client.post(base + "triage/", follow=True)
    assert "Not done: auto-triage is off for this project." in r.content.decode()
    assert not Triage.objects.filter(project=project).exists()

    project_triage_set(project=project, enabled=True, daily_calls=50)
    body = client.get(base).content.decode()
    assert 'data-testid="incident-run-triage"' in body
    anchor = Alert.objects.filter(incident=travel).order_by("ts", "id").first()
    assert anchor is not None
    with django_capture_on_commit_callbacks(execute=False) as queued:
        r = client.post(base + "triage/")
    assert r.status_code == 302 and r["Location"] == base
    assert len(queued) == 1, "the triage start is queued after the commit"
    t = Triage.objects.get(project=project)
    assert (t.snapshot_ref, t.status, t.alert_ids) == (anchor.snapshot_ref, "queued", [anchor.pk])
    body = client.get(base).content.decode()
    assert 'data-testid="triage-status">queued' in body and "incident-run-triage" not in body

    Triage.objects.filter(pk=t.pk).update(
        status="done",
        finished_at=timezone.now(),
        result={
            "block": "history",
            "score": 0.83,
            "noise": 0.05,
            "ranking": [{"key": "history", "score": 0.83}],
        },
    )
    body = client.get(base).content.decode()
    assert (
        f"turn 1 of {anchor.session_id}: most responsible block: history (score 0.83, noise band 0.05)"
        in body
    )


def test_another_projects_incident_is_404(client, incidents):
    travel = incidents["travel"]
    other, _ = project_create(name="other")
    user = member(other, "admin", name="other-admin")
    client.force_login(user)
    assert client.get(f"/p/{other.pk}/incidents/{travel.pk}/").status_code == 404
    assert client.post(f"/p/{other.pk}/incidents/{travel.pk}/ack/").status_code == 404
    assert client.get(f"/p/{travel.project_id}/incidents/").status_code == 404, "not a member"
    assert client.get(f"/p/{travel.project_id}/incidents/{travel.pk}/").status_code == 404
    travel.refresh_from_db()
    assert travel.status == "open"


def test_unknown_action_is_404(client, incidents):
    travel = incidents["travel"]
    client.force_login(member(travel.project, "editor"))
    assert client.post(f"/p/{travel.project_id}/incidents/{travel.pk}/delete/").status_code == 404


def test_alerts_in_the_navigation_leads_to_incidents_and_all_alerts_is_one_click_away(client, incidents):
    travel = incidents["travel"]
    pid = travel.project_id
    client.force_login(member(travel.project, "viewer"))
    overview = client.get(f"/p/{pid}/").content.decode()
    assert re.search(rf'<a href="/p/{pid}/incidents/"[^>]*>Alerts</a>', overview)
    body = client.get(f"/p/{pid}/incidents/").content.decode()
    assert f'<a href="/p/{pid}/alerts/">All alerts</a>' in body
    assert re.search(rf'<a href="/p/{pid}/incidents/"[^>]*class="on"[^>]*>Alerts</a>', body)
    body = client.get(f"/p/{pid}/alerts/").content.decode()
    assert f'<a href="/p/{pid}/incidents/">Incidents</a>' in body


def test_list_query_count_is_constant_in_rows(client, incidents, poster, django_assert_max_num_queries):
    project = incidents["travel"].project
    client.force_login(member(project, "admin"))
    with django_assert_max_num_queries(10):
        r = client.get(f"/p/{project.pk}/incidents/", {"status": "all"})
    assert len(r.context["incidents"]) == 2
    now = timezone.now().replace(microsecond=0)
    for n in range(6):
        jump(poster, f"more-{n}", at=now - timedelta(minutes=30 + n), agent=f"bot-{n}")
    with django_assert_max_num_queries(10):
        r = client.get(f"/p/{project.pk}/incidents/", {"status": "all"})
    assert len(r.context["incidents"]) == 8


def test_page_query_count_is_constant_in_alerts_and_sessions(
    client, incidents, poster, django_assert_max_num_queries
):
    travel = incidents["travel"]
    project = travel.project
    client.force_login(member(project, "admin"))
    base = f"/p/{project.pk}/incidents/{travel.pk}/"
    with django_assert_max_num_queries(13):
        client.get(base)
    start = travel.first_seen
    for n in range(5):
        jump(poster, f"s-x{n}", at=start + timedelta(minutes=3 + n), agent="travel-bot")
    travel.refresh_from_db()
    assert travel.session_count == 7
    with django_assert_max_num_queries(13):
        r = client.get(base)
    assert len(r.context["sessions"]) == 7
