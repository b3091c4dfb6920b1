"""The turn page's tools block in a real headless Chromium: a turn of an agent with MCP tools shows
the server groups with their tool counts and tokens, each tool's tokens, a tool's JSON schema one
click away, and a tool call that reads as a Python call with its raw JSON one click away."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from core.models import Membership, Project
from core.services import project_create
from ctxobs import tokens as tok
from ingest import tools_view
from tests.ingest.dashboard_factories import HOSTILE, ingest
from tests.ingest.test_turn_tools import GITHUB_CREATE, MCP_TOOLS, tools_turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
SHOTS = (
    Path(os.environ.get("CTXOBS_TEST_ARTIFACTS") or Path(__file__).resolve().parents[2] / "artifacts")
    / "screenshots"
)


@pytest.fixture
def seeded(db: Any) -> Project:
    project, _ = project_create(name="tools")
    user = get_user_model().objects.create_user(username="demo", password="demo-pass-1")
    Membership.objects.create(project=project, user=user, role="viewer")
    hostile = {
        "type": "function",
        "function": {
            "name": "mcp__evil__run",
            "description": f"Runs {HOSTILE}",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    ingest(project, [tools_turn(session_id="mcp-agent", tools=[*MCP_TOOLS, hostile])])
    return project


@pytest.fixture
def browser_page(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, list[str]]]:
    from playwright.sync_api import sync_playwright

    # The live server's ORM calls run in their own threads; this lifts Django's async guard for
    # the test thread, where Playwright's sync API runs its event loop.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        page = context.new_page()
        page.on(
            "console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None
        )
        page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
        yield page, errors
        context.close()
        browser.close()


def test_mcp_tools_show_their_groups_tokens_schema_and_readable_calls(
    live_server: Any, seeded: Project, browser_page: tuple[Any, list[str]]
) -> None:
    page, errors = browser_page
    base = live_server.url.replace("127.0.0.1", "localhost")
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", "demo")
    page.fill("input[name=password]", "demo-pass-1")
    page.click("button[type=submit]")
    page.wait_for_url("**/p/*/")
    page.goto(base + reverse("ingest:turn", args=[seeded.pk, "mcp-agent", 0]))

    overview = tools_view.describe_tools(MCP_TOOLS, tok.get_counter("o200k_base"))  # gpt-4o's encoding
    github = next(g for g in overview.groups if g.name == "mcp__github")

    # The tools block is closed like every block; opening it shows the groups, not "No messages".
    tools_block = page.locator("details.tools-block")
    assert not tools_block.locator("table.tools-table").is_visible()
    tools_block.locator("> summary").click()
    group = page.locator("tbody[data-group='mcp__github']")
    assert group.locator(".group-name").inner_text() == "mcp__github"
    assert group.locator(".group-count").inner_text() == "2 tools"
    assert group.locator(".group-tokens").inner_text() == str(github.tokens)
    assert page.locator("tbody[data-group='mcp__filesystem'] .group-count").inner_text() == "1 tool"

    create = page.locator("#tool-1")
    assert create.locator(".tool-tokens").inner_text() == str(github.tools[0].tokens)
    assert create.locator(".tool-sig").inner_text() == (
        "mcp__github__create_issue"
        "(owner: string, repo: string, title: string, body?: string, labels?: string[])"
    )
    # The schema is one click away, as the JSON sent.
    schema = create.locator("details.raw pre")
    assert not schema.is_visible()
    create.locator("details.raw summary").click()
    assert schema.is_visible()
    assert json.loads(schema.inner_text()) == GITHUB_CREATE

    # Untrusted description: text, not markup.
    assert f"Runs {HOSTILE}" in page.locator("tbody[data-group='mcp__evil'] .tool-desc").inner_text()
    assert page.evaluate("() => window.__pwned === undefined")

    # A tool call in the history reads as a call; its raw JSON is one click away.
    page.locator("tr.block-body details:has(#block-body-2) > summary").click()
    call = page.locator("#block-body-2 .toolcall").first
    assert call.locator(".call-sig").inner_text() == 'get_current_weather(location="Oslo", unit="celsius")'
    raw = call.locator("details.raw pre")
    assert not raw.is_visible()
    call.locator("details.raw summary").click()
    assert json.loads(raw.inner_text())["function"]["name"] == "get_current_weather"
    invalid = page.locator("#block-body-2 .toolcall", has_text="mcp__github__create_issue")
    assert invalid.locator(".flag.bad").inner_text() == "invalid JSON"
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.add_style_tag(content="header.topbar { position: static; }")
    page.locator("table.blocks").screenshot(path=str(SHOTS / "turn-tools.png"))
    assert errors == [], errors
