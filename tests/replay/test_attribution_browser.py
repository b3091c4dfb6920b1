"""An attribution job's page in a real headless Chromium: the ranked bar chart draws a bar per
block with the noise band, and a block's link opens its text on the turn page."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from core.models import Membership
from replay.services.jobs import replay_job_create
from replay.services.runs import replay_run_execute
from tests.ingest.test_browser import _shot, browser_page  # noqa: F401
from tests.replay.helpers import PLANTED_CODE_MEMORY, planted_code_snapshot, post
from tests.waiting import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_attribution_chart_ranks_the_blocks_and_links_to_the_turn(
    live_server: Any,
    browser_page: tuple[Any, list[str]],  # noqa: F811
    api: Any,
    private_project: Any,
    stub_endpoint: Any,
    stub_server: Any,
) -> None:
    user = get_user_model().objects.create_user(username="demo", password="demo-pass-1")
    Membership.objects.create(project=private_project, user=user, role="editor")
    wire = planted_code_snapshot()
    post(api, wire)
    job = replay_job_create(
        project=private_project,
        endpoint=stub_endpoint,
        spec={"kind": "attribution", "snapshot_id": wire["snapshot_id"], "ablations": 16},
    )
    # The answer follows the request (the memory block's text in the prompt or not), so the runs
    # come out the same whether this test or a worker left running by another test executes them.
    stub_server.answer = lambda body: (
        "Your locker code is 4417." if PLANTED_CODE_MEMORY in str(body.get("prompt")) else "I do not know."
    )
    for r in job.runs.order_by("pk"):
        replay_run_execute(run_id=r.pk)
    wait_until(lambda: not job.runs.filter(status__in=("pending", "running")).exists(), 30, "the job's runs")

    page, errors = browser_page
    base = live_server.url.replace("127.0.0.1", "localhost")
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", "demo")
    page.fill("input[name=password]", "demo-pass-1")
    page.click("button[type=submit]")
    page.wait_for_url("**/p/*/")
    page.goto(f"{base}/p/{private_project.pk}/replays/{job.pk}/")
    page.wait_for_selector("#attribution-chart .barlayer .point")
    assert page.locator("#attribution-chart .barlayer .point").count() == 4
    # The noise band is drawn, and the first (top) label is the memory block, a link to its text.
    assert page.locator("#attribution-chart .ytick a").count() == 4
    assert page.locator("#attribution-chart .shapelayer path").count() >= 1
    ticks = page.eval_on_selector_all(
        "#attribution-chart .ytick text",
        "els => els.map(e => [e.getBoundingClientRect().top, e.textContent])",
    )
    labels = [text for _, text in sorted(ticks)]  # top to bottom
    assert labels[0] == "memory" and sorted(labels) == ["history", "memory", "retrieval", "tools"]
    assert page.locator("[data-testid=attribution-top]").inner_text() == "memory"
    _shot(page, "replay-attribution", locator=page.locator("#attribution"))
    page.locator("[data-testid=attribution-table] a", has_text="memory").click()
    page.wait_for_url("**/t/*/#block-2")
    assert "locker code is 4417" in (page.locator("#block-body-2").text_content() or "")
    assert errors == []
