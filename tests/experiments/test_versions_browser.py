"""The Versions page in a real headless Chromium, as a logged-in member: the figures table, the
watermark box chart drawn by the dashboard's plotly.js, and the verdict on the newest version."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from core.models import Membership, Project
from tests.experiments.test_versions import post, version_turns
from tests.ingest.test_browser import _login, _shot, browser_page  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_versions_page_shows_the_figures_the_chart_and_the_verdict(
    live_server: Any,
    browser_page: tuple[Any, list[str]],  # noqa: F811
    api: Any,
    project: Project,
) -> None:
    user = get_user_model().objects.create_user(username="demo", password="demo-pass-1")
    Membership.objects.create(project=project, user=user, role="viewer")
    post(api, version_turns("v14", failing=False) + version_turns("v15", failing=True))

    page, errors = browser_page
    base = live_server.url.replace("127.0.0.1", "localhost")
    _login(page, base)
    page.goto(f"{base}/p/{project.pk}/experiments/versions/?tag=assembly_version")

    headers = page.locator("#versions-table thead th.value").all_inner_texts()
    assert headers == ["v14", "v15"]
    failures = page.locator("#versions-table tr.figure-validation_failure td.cell").all_inner_texts()
    assert [cell.split("\n")[0] for cell in failures] == ["0.042", "0.500"]

    verdict = page.locator("#verdict li.dir-worse")
    assert verdict.count() == 1
    assert verdict.is_visible()
    text = verdict.inner_text()
    assert text.startswith("v15: validation failure rate 0.5 against 0.042 for v14") and "worse" in text
    noise = page.locator("#step-1 li.figure-watermark")
    assert noise.is_visible() and "no difference beyond noise" in noise.inner_text()

    # One box (bar), whisker and median per version, and the means with their intervals.
    page.wait_for_selector("#versions-chart[data-rendered='1']")
    assert page.locator("#versions-chart .barlayer .point").count() == 2
    assert page.locator("#versions-chart .errorbar").count() == 2
    ticks = page.locator("#versions-chart .xtick text").all_text_contents()
    assert ticks == ["v14", "v15"]
    _shot(page, "experiments-versions", full_page=True)
    assert errors == []
