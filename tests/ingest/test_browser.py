"""The dashboard in a real headless Chromium: log in, open the demo session, the chart renders
without console errors, click a turn, see its blocks and the diff. Screenshots go to the test
artifacts folder (CTXOBS_TEST_ARTIFACTS/screenshots); the ones the README shows (docs/screenshots/)
are rewritten only when CTXOBS_UPDATE_DOC_SCREENSHOTS=1."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from core.models import Membership, Project
from core.services import project_create
from tests.ingest.dashboard_factories import (
    demo_session,
    hostile_session,
    ingest,
    long_session,
    many_sessions,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
# The tracked screenshots change only on purpose, so that a test run leaves the checkout clean.
SHOTS = (
    ROOT / "docs" / "screenshots"
    if os.environ.get("CTXOBS_UPDATE_DOC_SCREENSHOTS") == "1"
    else Path(os.environ.get("CTXOBS_TEST_ARTIFACTS") or ROOT / "artifacts") / "screenshots"
)
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture
def seeded(db: Any) -> Project:
    project, _ = project_create(name="demo")
    user = get_user_model().objects.create_user(username="demo", password="demo-pass-1")
    Membership.objects.create(project=project, user=user, role="admin")
    ingest(project, many_sessions(12, turns=6, prefix="checkout"))
    ingest(project, demo_session())
    ingest(project, hostile_session())
    return project


@pytest.fixture
def browser_page(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, list[str]]]:
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls the live server makes
    # run in their own threads, this only lifts Django's guard for the test thread itself.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        context = browser.new_context(viewport={"width": 1440, "height": 900}, device_scale_factor=1)
        page = context.new_page()
        page.on(
            "console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None
        )
        page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
        # The dashboard must work offline: any request leaving the live server is an error.
        page.on(
            "request",
            lambda r: (
                None
                if r.url.startswith(("http://localhost", "data:"))
                else errors.append(f"external request: {r.url}")
            ),
        )
        yield page, errors
        context.close()
        browser.close()


def _login(page: Any, base: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", "demo")
    page.fill("input[name=password]", "demo-pass-1")
    page.click("button[type=submit]")
    page.wait_for_url("**/p/*/")


def _shot(page: Any, name: str, *, full_page: bool = False, locator: Any = None) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    if locator is not None:
        # The sticky top bar would cover the top of an element scrolled into view.
        page.add_style_tag(content="header.topbar { position: static; }")
        locator.screenshot(path=str(path))
    else:
        page.screenshot(path=str(path), full_page=full_page)
    assert path.stat().st_size > 10_000


def test_demo_session_chart_click_turn_blocks_and_diff(
    live_server: Any, seeded: Project, browser_page: tuple[Any, list[str]]
) -> None:
    page, errors = browser_page
    base = live_server.url.replace("127.0.0.1", "localhost")
    _login(page, base)

    # Overview: every figure rendered by plotly.js from the package.
    page.wait_for_selector("[data-figure='fig-failures'][data-rendered='1']")
    assert page.locator("[data-figure][data-rendered='1']").count() == 6
    _shot(page, "overview", full_page=True)

    page.click("nav.nav >> text=Sessions")
    page.wait_for_selector("table.sessions")
    assert page.locator("table.sessions svg.spark polyline").count() == 14
    page.fill("input[name=q]", "7431")
    page.wait_for_function("document.querySelectorAll('table.sessions tbody tr').length === 1")
    page.fill("input[name=q]", "")
    page.wait_for_function("document.querySelectorAll('table.sessions tbody tr').length === 14")
    _shot(page, "sessions")

    page.click("text=support-7431")
    page.wait_for_selector("#timeline-chart[data-rendered='1']")
    # One bar per turn in each kind trace, the watermark line and the event markers are drawn.
    assert page.locator("#timeline-chart .barlayer .point").count() >= 24 * 6
    assert page.locator("#timeline-chart .scatterlayer .trace").count() >= 3
    n_rows = page.locator("table.turns tbody tr").count()
    assert n_rows == 24
    _shot(page, "timeline", full_page=True)

    # Click the column of turn 14 (the compression) in the chart.
    point = page.evaluate(
        """() => {
            const gd = document.getElementById('timeline-chart');
            const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
            const box = gd.getBoundingClientRect();
            return {x: box.left + xa._offset + xa.l2p(14), y: box.top + ya._offset + ya.l2p(200)};
        }"""
    )
    page.mouse.move(point["x"], point["y"])
    page.mouse.click(point["x"], point["y"])
    page.wait_for_url("**/t/14/")

    blocks = page.locator("table.blocks td.key")
    assert [blocks.nth(i).inner_text() for i in range(blocks.count())] == [
        "system",
        "tools",
        "constraints",
        "memory",
        "summary",
        "history",
        "tool_results",
        "user",
    ]
    assert "summary +300" in page.locator("#diff .chg.entered").inner_text()
    assert "history 4,480 → 640" in page.locator("#diff .chg.shrank").inner_text()
    # Expand a block: its messages are there, as text.
    page.locator("tr.block-body details summary").nth(4).click()
    assert "Summary of turns 0-13" in page.locator("#block-body-4").inner_text()
    _shot(page, "turn", full_page=True)

    # Compare with any turn: the word-level diff shows the memory line that was added.
    page.fill("#diff input[name=compare]", "2")
    page.click("#diff button[type=submit]")
    page.wait_for_url("**/t/14/?compare=2*")
    ins = page.locator("#diff pre.diff ins")
    assert ins.count() > 0
    assert any("prefers morning flights" in ins.nth(i).inner_text() for i in range(ins.count()))
    _shot(page, "diff", locator=page.locator("#diff"))

    # Previous / next navigation.
    page.click("a[rel=next]")
    page.wait_for_url("**/t/15/")
    assert errors == [], errors


def test_hostile_session_renders_as_text(
    live_server: Any, seeded: Project, browser_page: tuple[Any, list[str]]
) -> None:
    page, errors = browser_page
    base = live_server.url.replace("127.0.0.1", "localhost")
    _login(page, base)
    page.click("nav.nav >> text=Sessions")
    page.fill("input[name=q]", "script")
    page.wait_for_function("document.querySelectorAll('table.sessions tbody tr').length === 1")
    page.click("table.sessions tbody a")
    page.wait_for_selector("#timeline-chart[data-rendered='1']")
    assert "<script>" in page.locator("h1").inner_text()
    page.click("table.turns tbody a >> nth=1")
    page.wait_for_url("**/t/1/")
    page.locator("tr.block-body details summary").nth(1).click()
    assert "<script>window.__pwned=1</script>" in page.locator("#block-body-1").inner_text()
    assert page.locator("#diff pre.diff").count() >= 1
    assert page.evaluate("() => window.__pwned === undefined")
    assert page.evaluate("() => [...document.scripts].every(s => !s.textContent.includes('__pwned'))")
    assert errors == [], errors


def test_a_2000_turn_timeline_renders_and_answers_clicks(
    live_server: Any, seeded: Project, browser_page: tuple[Any, list[str]]
) -> None:
    snaps = long_session(session_id="marathon/2000", turns=2000)
    for i in range(0, len(snaps), 500):
        ingest(seeded, snaps[i : i + 500])
    page, errors = browser_page
    base = live_server.url.replace("127.0.0.1", "localhost")
    _login(page, base)
    page.click("nav.nav >> text=Sessions")
    page.fill("input[name=q]", "marathon")
    page.wait_for_function("document.querySelectorAll('table.sessions tbody tr').length === 1")
    page.click("table.sessions tbody a")
    page.wait_for_selector("#timeline-chart[data-rendered='1']", timeout=60_000)
    assert "marathon/2000" in page.locator("h1").inner_text()
    drawn = page.evaluate(
        """() => {
            const gd = document.getElementById('timeline-chart');
            const kinds = gd._fullData.filter(t => t.stackgroup === 'tokens');
            return {kinds: kinds.length, width: Math.max(...kinds.map(t => t._length || t.x.length)),
                    paths: document.querySelectorAll('#timeline-chart .scatterlayer .js-fill').length,
                    range: gd._fullLayout.xaxis.range};
        }"""
    )
    # Every kind as one filled area over all 2,000 turns (not 2,000 rectangles each).
    assert drawn["kinds"] == 4 and drawn["width"] == 2000, drawn
    assert drawn["paths"] >= 4, drawn
    assert drawn["range"][1] >= 1999, drawn
    # The chart still answers: a click on a column far to the right opens that turn.
    point = page.evaluate(
        """() => {
            const gd = document.getElementById('timeline-chart');
            const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
            const box = gd.getBoundingClientRect();
            return {x: box.left + xa._offset + xa.l2p(1900), y: box.top + ya._offset + ya.l2p(200)};
        }"""
    )
    page.mouse.move(point["x"], point["y"])
    page.mouse.click(point["x"], point["y"])
    page.wait_for_url("**/t/*/")
    turn = int(page.url.rstrip("/").rsplit("/", 1)[1])
    assert 1880 <= turn <= 1920, page.url
    assert "marathon~2F2000" in page.url
    assert errors == [], errors


def test_api_docs_render_their_operations_with_no_network(live_server: Any, browser_page: Any) -> None:
    """/api/v1/docs loads Swagger UI from our own static files: with every request that leaves
    the live server refused, the page still lists the operations."""
    page, errors = browser_page
    refused: list[str] = []

    def offline(route: Any) -> None:
        if route.request.url.startswith(live_server.url):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    page.route("**/*", offline)
    page.goto(f"{live_server.url}/api/v1/docs")
    page.wait_for_selector(".opblock-summary-path", timeout=60_000)
    paths = {t.replace("\u200b", "").strip() for t in page.locator(".opblock-summary-path").all_inner_texts()}
    assert {"/api/v1/snapshots", "/api/v1/sessions", "/api/v1/sessions/{session_id}/timeline"} <= paths
    assert page.locator(".swagger-ui .info .title").inner_text().startswith("ctxobs API")
    assert refused == []
    assert errors == []


def test_binary_tool_output_shows_its_nul_bytes_visibly(
    live_server: Any, browser_page: tuple[Any, list[str]]
) -> None:
    from tests.factories import full_snapshot

    project, _ = project_create(name="demo")
    user = get_user_model().objects.create_user(username="demo", password="demo-pass-1")
    Membership.objects.create(project=project, user=user, role="admin")
    snap = full_snapshot(session_id="binary-read", turn=0)
    snap["blocks"][2]["messages"][2]["content"] = "PK\x03\x04\x00\x00 zip header"
    snap["output"]["text"] = "read \udcff of it"
    ingest(project, [snap])
    page, errors = browser_page
    base = live_server.url.replace("127.0.0.1", "localhost")
    _login(page, base)
    page.goto(f"{base}/p/{project.pk}/s/binary-read/t/0/")
    page.locator("tr.block-body details summary").nth(2).click()
    assert "\x04\u2400\u2400 zip header" in page.locator("#block-body-2").inner_text()
    assert "read \ufffd of it" in page.locator("pre.output").inner_text()
    assert errors == [], errors


def test_timeline_requests_its_chart_data_while_plotly_js_loads(
    live_server: Any, seeded: Project, browser_page: tuple[Any, list[str]]
) -> None:
    from ingest import views

    page, errors = browser_page
    base = live_server.url.replace("127.0.0.1", "localhost")
    _login(page, base)
    page.goto(f"{base}/p/{seeded.pk}/s/support-7431/")
    page.wait_for_selector("#timeline-chart[data-rendered='1']")
    seen = page.evaluate(
        """() => {
            const nav = performance.getEntriesByType('navigation')[0];
            const chart = performance.getEntriesByType('resource').find(e => e.name.includes('/chart.json'));
            const js = performance.getEntriesByType('resource').find(e => e.name.includes('/assets/plotly-'));
            return {chart: chart.startTime, dcl: nav.domContentLoadedEventStart, js: js.name,
                    version: window.Plotly.version};
        }"""
    )
    # Requested before DOMContentLoaded, i.e. before plotly.js (a deferred script) has run, not
    # after it as when the request waited for plotly.js.
    assert seen["chart"] < seen["dcl"], seen
    # The basic bundle of the plotly.js version the installed plotly package ships.
    assert seen["js"].endswith("?bundle=basic"), seen
    assert seen["version"] == views.plotly_js_version(views.PLOTLY_PACKAGE_JS), seen
    assert errors == [], errors
