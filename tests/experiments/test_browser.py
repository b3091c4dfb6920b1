"""The experiments flow in a real headless Chromium: build a set from turns selected on a session
timeline, confirm the suggested checks, run a strategy and the control, compare them, open an
item that flipped and see its two answers and contexts diffed. The model is a real HTTP server
on loopback answering like an OpenAI-compatible API; the replay runs are executed as a worker
executes them."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from core.models import Membership
from experiments.models import EvalSet, Experiment
from replay.models import ReplayRun
from replay.services.runs import replay_run_execute
from tests import factories as f
from tests.experiments.conftest import fact_answer
from tests.ingest.test_browser import _shot, browser_page  # noqa: F401
from tests.replay.helpers import post
from tests.waiting import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _turn(i: int) -> dict[str, Any]:
    return f.snapshot(
        session_id="trip-42",
        turn=i,
        blocks=[
            f.block("system", "system", "You are a travel assistant.", pinned=True),
            f.block("memory", "memory", f"Memory: booking code BK{i:03d}."),
            f.block("user", "user", "What is my booking code?"),
        ],
        output={"text": f"Your booking code is BK{i:03d}.", "tool_calls": [], "finish_reason": "stop"},
    )


def _run_all(exp: Experiment) -> None:
    exp.refresh_from_db()
    for rid in ReplayRun.objects.filter(job_id=exp.job_id).order_by("pk").values_list("pk", flat=True):
        replay_run_execute(run_id=rid)
    wait_until(
        lambda: not ReplayRun.objects.filter(job_id=exp.job_id, status__in=("pending", "running")).exists(),
        30,
        "the experiment's runs",
    )


def test_a_set_from_a_timeline_selection_run_compared_and_a_flipped_item_opened(
    live_server: Any,
    browser_page: tuple[Any, list[str]],  # noqa: F811
    api: Any,
    private_project: Any,
    stub_endpoint: Any,
    stub_server: Any,
) -> None:
    user = get_user_model().objects.create_user(username="ed", password="ed-pass-12345")
    Membership.objects.create(project=private_project, user=user, role="editor")
    for i in range(4):
        post(api, _turn(i))
    # The answer follows the request, whichever process sends it.
    stub_server.answer = fact_answer({f"BK{i:03d}": f"BK{i:03d}" for i in range(4)})

    page, errors = browser_page
    base = live_server.url.replace("127.0.0.1", "localhost")
    page.goto(f"{base}/login/")
    page.fill("input[name=username]", "ed")
    page.fill("input[name=password]", "ed-pass-12345")
    page.click("button[type=submit]")
    page.wait_for_url("**/p/*/")

    # 1. Three turns selected on the timeline become a set.
    page.goto(f"{base}/p/{private_project.pk}/s/trip-42/")
    for turn in (0, 1, 2):
        page.check(f"input[aria-label='select turn {turn}']")
    page.fill("#turn-selection input[name=name]", "booking codes")
    page.click("#turn-selection button[type=submit]")
    page.wait_for_url("**/experiments/sets/*/")
    assert page.locator("table.items tbody tr").count() == 3
    # 2. The suggested checks (the memory's code that the saved answer states) are confirmed.
    assert page.locator("li.suggestion").count() >= 3
    page.click("#confirm-all")
    page.wait_for_selector("text=Every suggested check is confirmed.")
    assert page.locator("li.suggestion").count() == 0
    assert page.locator("#items .check-list li", has_text="states").count() >= 3
    # 3. A strategy from the presets, then it and the control run on the set.
    page.goto(f"{base}/p/{private_project.pk}/experiments/")
    page.click("#presets button[value='without memory']")
    page.wait_for_selector("#strategies td:has-text('without memory')")
    eval_set = EvalSet.objects.get(project=private_project, name="booking codes")
    page.goto(f"{base}/p/{private_project.pk}/experiments/sets/{eval_set.pk}/")
    page.check("#run-form input[value='as-saved']")
    page.check("#run-form label:has-text('without memory') input")
    page.click("#run-form button:not([name=preview])")
    page.wait_for_url("**/experiments/compare?ids=*")
    exps = list(Experiment.objects.filter(project=private_project).order_by("pk"))
    assert [e.strategy_label for e in exps] == ["as saved", "without memory v1"]
    for e in exps:
        _run_all(e)
    # 4. The comparison: the strategy loses the facts, every item flipped.
    page.wait_for_selector(".compare-row", timeout=20_000)
    verdict = page.locator(".metric-fact_fidelity td.words").inner_text()
    assert "worse" in verdict or "loses" in verdict, verdict
    assert page.locator("table.flipped tbody tr").count() == 3
    _shot(page, "experiments-compare", full_page=True)
    # 5. A flipped item: both answers and both contexts, diffed.
    page.locator("table.flipped tbody tr a").first.click()
    page.wait_for_url("**/items/*/")
    assert "BK000" in " ".join(page.locator("#answer-diff del").all_inner_texts())
    assert "Memory: booking code BK000" in " ".join(page.locator("#context-diff del").all_inner_texts())
    assert errors == []
