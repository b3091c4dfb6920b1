"""Security settings a person clicks, in headless Chromium: the throttled sign-in message, a key
created with the replay scope and its badge, the private-address switch with its warning, and the
auto-triage switch and its budget."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections

from core import signin
from core.env import redis_client_url
from core.models import IngestKey, Membership, Project
from core.services import project_create
from tests.ingest.test_browser import browser_page  # noqa: F401 - the shared Chromium fixture

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "admin pass phrase 7"


@pytest.fixture(autouse=True)
def clean_counters() -> Iterator[None]:
    r = redis.Redis.from_url(redis_client_url(settings.REDIS_URL))
    for key in r.scan_iter(signin.PREFIX + "*"):
        r.delete(key)
    yield
    for key in r.scan_iter(signin.PREFIX + "*"):
        r.delete(key)


@pytest.fixture
def admin_project(db: Any) -> Project:
    project, _ = project_create(name="shop")
    user = get_user_model().objects.create_user(username="root", password=PASSWORD)
    Membership.objects.create(project=project, user=user, role="admin")
    return project


def _close_db() -> None:
    # Inside Playwright's sync API the ORM runs in another context than the test's and opens its
    # own connection, which would otherwise stay open and block dropping the test database.
    connections.close_all()


def _sign_in(page: Any, base: str, password: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", "root")
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_load_state()


def _settings_page(
    live_server: Any, project: Project, browser: tuple[Any, list[str]]
) -> tuple[Any, list[str]]:
    """The admin signed in, on PROJECT's settings page."""
    page, errors = browser
    base = live_server.url.replace("127.0.0.1", "localhost")
    _sign_in(page, base, PASSWORD)
    page.goto(f"{base}/p/{project.pk}/settings/")
    return page, errors


def test_a_throttled_sign_in_says_how_long_to_wait(
    live_server: Any, admin_project: Project, browser_page: tuple[Any, list[str]]  # noqa: F811
) -> None:
    page, _ = browser_page
    base = live_server.url.replace("127.0.0.1", "localhost")
    for i in range(5):
        _sign_in(page, base, f"wrong {i}")
    assert page.locator("#signin-throttled").inner_text() == (
        "Too many failed sign-ins. Try again in 15 minutes."
    )
    _sign_in(page, base, PASSWORD)
    assert page.url.endswith("/login/")
    assert "Try again in 15 minutes" in page.locator("#signin-throttled").inner_text()


def test_admin_creates_a_replay_key_and_allows_private_addresses(
    live_server: Any, admin_project: Project, browser_page: tuple[Any, list[str]]  # noqa: F811
) -> None:
    page, errors = _settings_page(live_server, admin_project, browser_page)

    # Off by default: an agent's key cannot start replays.
    box = page.locator("input[name=replay]")
    assert not box.is_checked()
    page.fill("input[name=name]", "agent")
    page.click("text=Create key")
    page.wait_for_selector("#new-key")
    page.fill("input[name=name]", "ci")
    page.check("input[name=replay]")
    page.click("text=Create key")
    page.wait_for_selector("#new-key")
    ci = IngestKey.objects.get(project=admin_project, name="ci")
    agent = IngestKey.objects.get(project=admin_project, name="agent")
    _close_db()
    assert (ci.scopes, agent.scopes) == (["ingest", "replay"], ["ingest"])
    assert page.locator(f"tr[data-key='{ci.prefix}'] .scope-replay").inner_text() == "replay"
    assert page.locator(f"tr[data-key='{agent.prefix}'] .scope-replay").count() == 0
    assert page.locator(f"tr[data-key='{agent.prefix}'] .scope-ingest").is_visible()

    # The private-address switch: off, its warning on screen, then on.
    network = page.locator("#network")
    assert network.locator(".warning").is_visible()
    assert "internal network" in network.locator(".warning").inner_text()
    assert not network.locator("input[name=allow_private]").is_checked()
    network.locator("input[name=allow_private]").check()
    network.locator("button[type=submit]").click()
    page.wait_for_selector("#private-state.bad")
    assert page.locator("#network input[name=allow_private]").is_checked()
    assert errors == []
    admin_project.refresh_from_db()
    assert admin_project.allow_private_endpoints is True
    _close_db()


def test_admin_turns_auto_triage_on_from_the_settings_page_and_a_bad_budget_is_held_back(
    live_server: Any, admin_project: Project, browser_page: tuple[Any, list[str]]  # noqa: F811
) -> None:
    page, errors = _settings_page(live_server, admin_project, browser_page)

    triage = page.locator("#triage")
    assert triage.locator("#triage-state").inner_text() == "off"
    triage.locator("input[name=enabled]").check()
    triage.locator("input[name=daily_calls]").fill("-5")
    triage.locator("button[type=submit]").click()
    # The browser holds a negative budget back and says why (the server's own reasons, for a form
    # sent without the browser's checks, are tested in tests/replay/test_triage.py).
    budget = triage.locator("input[name=daily_calls]")
    assert budget.evaluate("e => e.validationMessage") != ""
    assert page.url.endswith(f"/p/{admin_project.pk}/settings/")
    admin_project.refresh_from_db()
    assert admin_project.triage_enabled is False
    _close_db()

    page.locator("#triage input[name=daily_calls]").fill("120")
    page.locator("#triage button[type=submit]").click()
    page.wait_for_selector("#triage-state >> text=on")
    assert page.url.endswith(f"/p/{admin_project.pk}/settings/#triage")
    assert "120 calls a day" in page.locator("#triage").inner_text()
    assert "Auto-triage is on, within 120 model calls a day." in page.content()
    assert errors == []
    admin_project.refresh_from_db()
    assert (admin_project.triage_enabled, admin_project.triage_daily_calls) == (True, 120)
    _close_db()
