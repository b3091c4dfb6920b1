"""The Incidents pages in a real headless Chromium: a person opens Alerts and lands on Incidents,
filters by status, opens an incident, sees its sessions, alerts and chart, acknowledges it, mutes
it for 30 minutes, resolves it and switches to the flat list of all alerts. Incidents are made
by the real path: snapshots through the ingest API, then the alert evaluation."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from django.utils import timezone

from alerts.models import Incident
from alerts.services.incidents import incident_resolve
from core.models import Membership, Project
from tests.alerts.conftest import Poster, sized_snapshot
from tests.ingest.test_browser import _login, _shot, browser_page  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _jump(poster: Poster, session_id: str, *, agent: str, minutes_ago: float) -> None:
    at = timezone.now().replace(microsecond=0) - timedelta(minutes=minutes_ago)
    poster.post(
        [
            sized_snapshot(turn=0, fill=0.3, session_id=session_id, ts=at, agent=agent),
            sized_snapshot(
                turn=1, fill=0.9, session_id=session_id, ts=at + timedelta(seconds=10), agent=agent
            ),
        ]
    )


@pytest.fixture
def with_incidents(poster: Poster, project: Project) -> dict[str, Incident]:
    user = get_user_model().objects.create_user(username="demo", password="demo-pass-1")
    Membership.objects.create(project=project, user=user, role="editor")
    _jump(poster, "s-1", agent="travel-bot", minutes_ago=20)
    _jump(poster, "s-2", agent="travel-bot", minutes_ago=15)
    _jump(poster, "s-9", agent="billing-bot", minutes_ago=90)
    # One session of search-bot, one turn: pending, not confirmed (nothing paged).
    _jump(poster, "s-5", agent="search-bot", minutes_ago=5)
    billing = Incident.objects.get(project=project, agent="billing-bot")
    incident_resolve(incident=billing, user=user)
    pending = Incident.objects.get(project=project, agent="search-bot")
    assert pending.status == "pending"
    return {
        "travel": Incident.objects.get(project=project, agent="travel-bot"),
        "billing": billing,
        "pending": pending,
    }


def test_a_person_triages_an_incident_from_the_alerts_entry(
    live_server: Any,
    with_incidents: dict[str, Incident],
    browser_page: tuple[Any, list[str]],  # noqa: F811 - the fixture imported above
) -> None:
    page, errors = browser_page
    try:
        _triage_an_incident(page, live_server, with_incidents)
    finally:
        # The ORM reads above ran while Playwright's event loop held this thread, on a connection
        # of their own that the test's teardown does not close.
        connections.close_all()
    assert errors == []


def _triage_an_incident(page: Any, live_server: Any, incidents: dict[str, Incident]) -> None:
    travel, billing, pending = incidents["travel"], incidents["billing"], incidents["pending"]
    pid = travel.project_id
    base = live_server.url.replace("127.0.0.1", "localhost")
    _login(page, base)

    # The project's Alerts entry lands on the Incidents, the unresolved ones by default.
    page.click("header.topbar nav.nav >> text=Alerts")
    page.wait_for_url(f"**/p/{pid}/incidents/")
    assert page.locator("h1").inner_text() == "Incidents"
    rows = page.locator("#incidents-table tr.incident-row")
    assert rows.count() == 1 and rows.first.get_attribute("id") == f"incident-{travel.pk}"

    # Filter by status: the resolved tab shows the other incident only, then back to all.
    page.click("nav.status-tabs a[data-status=resolved]")
    page.wait_for_url("**status=resolved")
    assert [rows.nth(i).get_attribute("id") for i in range(rows.count())] == [f"incident-{billing.pk}"]
    assert "resolved" in rows.first.locator("td.state").inner_text()
    # Pending incidents are one tab away, counted in the tab's label.
    tab = page.locator("nav.status-tabs a[data-status=pending]")
    assert " ".join(tab.inner_text().split()) == "pending 1"
    assert " ".join(page.locator("nav.status-tabs a[data-status=transient]").inner_text().split()) == (
        "transient 0"
    )
    tab.click()
    page.wait_for_url("**status=pending")
    assert [rows.nth(i).get_attribute("id") for i in range(rows.count())] == [f"incident-{pending.pk}"]
    assert rows.first.locator("td.state").inner_text().strip() == "pending"
    page.click("nav.status-tabs a[data-status=all]")
    page.wait_for_url("**status=all")
    assert rows.count() == 3
    # The agent filter swaps the table in place (htmx) and keeps the status.
    page.select_option("form.filters select[name=agent]", "travel-bot")
    page.wait_for_function("() => document.querySelectorAll('#incidents-table tr.incident-row').length === 1")
    assert rows.first.get_attribute("id") == f"incident-{travel.pk}"
    assert "agent=travel-bot" in page.url and "status=all" in page.url
    _shot(page, "incidents-list")

    # The incident: its sessions, alerts and the chart of its alerts.
    page.click(f"#incident-{travel.pk} a.incident-link")
    page.wait_for_url(f"**/p/{pid}/incidents/{travel.pk}/")
    assert page.locator("#incident-title").inner_text() == travel.title
    sessions = page.locator("table.incident-sessions a.session-link")
    assert sessions.all_inner_texts() == ["s-1", "s-2"]
    assert page.locator("table.incident-alerts tbody tr").count() == travel.alert_count
    page.wait_for_selector("#incident-chart[data-rendered='1']")
    markers = page.evaluate(
        "() => document.getElementById('incident-chart').data.reduce((n, t) => n + t.x.length, 0)"
    )
    assert markers == travel.alert_count
    assert "Auto-triage is off for this project" in page.locator("#triage").inner_text()
    _shot(page, "incident-page", full_page=True)

    state = page.locator("#incident-state")
    page.click("#incident-status button[name=ack]")
    page.wait_for_function(
        "() => document.querySelector('#incident-state').innerText.includes('acknowledged')"
    )
    assert page.locator("#incident-status button[name=ack]").count() == 0
    travel.refresh_from_db()
    assert travel.status == "acknowledged" and travel.acknowledged_by is not None

    page.select_option("#incident-status select[name=minutes]", "30")
    page.click("#incident-status button[name=mute]")
    page.wait_for_function(
        "() => document.querySelector('#incident-state').innerText.includes('muted until')"
    )
    travel.refresh_from_db()
    assert travel.status == "muted" and travel.muted_until is not None
    assert timedelta(minutes=28) < travel.muted_until - timezone.now() <= timedelta(minutes=30)

    page.click("#incident-status button[name=resolve]")
    page.wait_for_function("() => document.querySelector('#incident-state').innerText.startsWith('resolved')")
    assert page.locator("#incident-status button").count() == 0
    travel.refresh_from_db()
    assert travel.status == "resolved" and travel.resolution == "user"
    assert "resolved" in state.inner_text()

    # A session of the incident opens its timeline.
    page.click("table.incident-sessions a.session-link >> text=s-2")
    page.wait_for_url(f"**/p/{pid}/s/s-2/")

    # The flat list of all alerts is one click away from the Incidents.
    page.goto(f"{base}/p/{pid}/incidents/")
    page.click("nav.seg >> text=All alerts")
    page.wait_for_url(f"**/p/{pid}/alerts/")
    assert page.locator("h1").inner_text() == "Alerts"
    assert page.locator("#alerts-table tr.alert-row").count() >= travel.alert_count + billing.alert_count
    page.click("nav.seg >> text=Incidents")
    page.wait_for_url(f"**/p/{pid}/incidents/")
