"""The turn page's "why counts differ" in a real headless Chromium: the drift against the model's
usual ratio, and the provider's per-message overhead with this turn's numbers, one click away."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from core.models import Membership
from core.services import project_create
from ingest.models import Snapshot
from insights.counts import analyze_counts
from tests.ingest.test_browser import _login, _shot
from tests.insights.test_counts import estimated_turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_turn_page_explains_the_drift_and_the_overhead(live_server: Any, browser_page: Any) -> None:
    from ingest.services import snapshot_batch_ingest

    project, _ = project_create(name="demo")
    user = get_user_model().objects.create_user(username="demo", password="demo-pass-1")
    Membership.objects.create(project=project, user=user, role="admin")
    snapshot_batch_ingest(project=project, batch=[estimated_turn(t, usual=-0.13) for t in range(6)])
    snapshot_batch_ingest(project=project, batch=[estimated_turn(6, usual=-0.13, dropped=250)])
    refs = list(Snapshot.objects.filter(project=project).order_by("turn").values_list("id", flat=True))
    analyze_counts(project_id=project.pk, snapshot_refs=refs)

    page, errors = browser_page
    _login(page, live_server.url)
    page.goto(f"{live_server.url}/p/{project.pk}/s/steady/t/5/")
    drift = page.locator("#count-drift")
    assert "(0.0% drift)" in drift.inner_text() and "bad" not in (drift.get_attribute("class") or "")
    why = page.locator("#count-drift details.count-why")
    assert not why.locator("table").is_visible()
    why.locator("summary").click()
    table = why.locator("table")
    assert table.is_visible()
    text = why.inner_text()
    assert "llama.cpp · Llama 3 template" in text and "usual drift of -13.0%" in text
    assert "× 2 messages" in text  # the system and history blocks' two messages
    _shot(page, "turn-count-drift")

    page.goto(f"{live_server.url}/p/{project.pk}/s/steady/t/6/")
    assert "bad" in (page.locator("#count-drift").get_attribute("class") or "")
    assert "(25.0% drift)" in page.locator("#count-drift").inner_text()
    assert errors == []
