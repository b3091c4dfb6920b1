"""A channel's hourly message limit in a real headless Chromium: an admin adds a webhook channel
with a limit of its own, finds it on the channel's page and changes it there; a value out of range
is refused with the reason and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connections

from alerts.models import Channel
from core.models import Membership, Project
from tests.ingest.test_browser import _login, browser_page  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_admin_sets_and_changes_a_channels_hourly_limit(
    live_server: Any,
    project: Project,
    browser_page: tuple[Any, list[str]],  # noqa: F811 - the fixture imported above
) -> None:
    project.allow_private_endpoints = True
    project.save()
    user = get_user_model().objects.create_user(username="demo", password="demo-pass-1")
    Membership.objects.create(project=project, user=user, role="admin")
    page, errors = browser_page
    try:
        base = live_server.url.replace("127.0.0.1", "localhost")
        _login(page, base)
        page.goto(f"{base}/p/{project.pk}/alerts/channels/")
        form = page.locator("form.channel-form")
        assert form.locator("input[name=max_per_hour]").input_value() == "20"  # the default
        form.locator("input[name=name]").fill("on-call")
        form.locator("input[name=url]").fill("http://127.0.0.1:9/hook")
        form.locator("input[name=max_per_hour]").fill("5")
        form.locator("button[name=create]").click()
        page.wait_for_selector("#channel-secret")
        channel = Channel.objects.get(project=project)
        assert channel.max_per_hour == 5
        limit = page.locator("form[data-testid=channel-limit] input[name=max_per_hour]")
        assert limit.input_value() == "5"

        page.goto(f"{base}/p/{project.pk}/alerts/channels/{channel.pk}/")
        limit.fill("12")
        page.click("form[data-testid=channel-limit] button[name=limit]")
        page.wait_for_selector("text=At most 12 messages an hour.")
        assert limit.input_value() == "12"
        channel.refresh_from_db()
        assert channel.max_per_hour == 12

        # Out of range (the browser's own check is lifted to reach the server's).
        page.evaluate("() => document.querySelector('form[data-testid=channel-limit]').noValidate = true")
        limit.fill("0")
        page.click("form[data-testid=channel-limit] button[name=limit]")
        page.wait_for_selector("text=max_per_hour: a whole number of messages an hour between 1 and 3600")
        channel.refresh_from_db()
        assert channel.max_per_hour == 12
        assert limit.input_value() == "12"
    finally:
        connections.close_all()
    assert errors == []
