"""The prompt-cache lens in a real headless Chromium: the timeline draws the cached-prefix line,
the turn page and the overview show the lens, without console errors or outside requests."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from core.models import Membership, Project
from core.services import project_create
from ingest import selectors
from insights.cache_analysis import cache_analyze
from tests.ingest.dashboard_factories import ingest
from tests.ingest.test_browser import _login, _shot, browser_page  # noqa: F401 - the fixture
from tests.insights.cache_factories import cache_turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def cached_project(db: Any) -> Project:
    project, _ = project_create(name="demo")
    user = get_user_model().objects.create_user(username="demo", password="demo-pass-1")
    Membership.objects.create(project=project, user=user, role="admin")
    snaps = []
    for t in range(8):
        system = (
            "You are a travel assistant."
            if t < 4
            else f"You are a travel assistant. Now 2026-12-01 08:{t:02d}"
        )
        snaps.append(cache_turn(t, cached=3072 if 0 < t < 4 else 0))
        snaps[-1]["blocks"][0]["messages"][0]["content"] = system
    ingest(project, snaps)
    refs = [selectors.snapshot_by_uuid(project=project, snapshot_id=s["snapshot_id"]).id for s in snaps]
    cache_analyze(project_id=project.pk, snapshot_refs=refs)
    return project


def test_cache_lens_in_the_browser(
    live_server: Any,
    cached_project: Project,
    browser_page: tuple[Any, list[str]],  # noqa: F811 - the fixture imported above
) -> None:
    page, errors = browser_page
    base = live_server.url.replace("127.0.0.1", "localhost")
    _login(page, base)
    page.goto(f"{base}/p/{cached_project.pk}/?days=all")
    page.wait_for_selector("#cache-overview")
    assert "system" in page.locator("#cache-breakers").inner_text()
    _shot(page, "cache-overview", locator=page.locator("#cache-overview"))

    page.goto(f"{base}/p/{cached_project.pk}/s/cache-1/")
    page.wait_for_selector("#timeline-chart[data-rendered='1']")
    names = page.evaluate("() => document.getElementById('timeline-chart').data.map(t => t.name)")
    assert "cached prefix" in names and "cache reads" in names
    _shot(page, "cache-timeline", locator=page.locator("#timeline-chart"))

    page.goto(f"{base}/p/{cached_project.pk}/s/cache-1/t/5/")
    lens = page.locator("#cache-lens")
    assert "a date or time changed in an early block" in lens.inner_text()
    _shot(page, "cache-turn", locator=lens)
    assert errors == []
