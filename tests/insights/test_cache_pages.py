"""The prompt-cache lens on the pages: the turn page, the timeline chart's overlay, the overview
panel and the prices settings (validation, errors, permissions)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.urls import reverse

from core.models import Project
from ingest import selectors
from insights.cache_analysis import cache_analyze
from tests.ingest.test_views import login, make_user
from tests.insights.cache_factories import cache_turn

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def analysed(api: Any, project: Project) -> Project:
    snaps = [cache_turn(0, cached=0), cache_turn(1, cached=3072)]
    for i in (2, 3):
        snaps.append(
            cache_turn(i, system=f"You are a travel assistant. {HOSTILE} Now: 2026-12-01 08:0{i}", cached=0)
        )
    r = api.post_snapshots(snaps)
    assert r.status_code == 200
    refs = [selectors.snapshot_by_uuid(project=project, snapshot_id=s["snapshot_id"]).id for s in snaps]
    cache_analyze(project_id=project.pk, snapshot_refs=refs)
    return project


def test_turn_page_shows_the_prefix_the_break_and_the_cost(analysed: Project) -> None:
    c = login(make_user("vera", analysed))
    html = c.get(reverse("ingest:turn", args=[analysed.pk, "cache-1", 3])).content.decode()
    assert 'id="cache-lens"' in html
    assert "a date or time changed in an early block" in html
    assert "08:02" in html and "system" in html
    assert "lost to misses" in html
    assert HOSTILE not in html  # the detail quotes no raw page text unescaped
    html1 = c.get(reverse("ingest:turn", args=[analysed.pk, "cache-1", 1])).content.decode()
    assert "3,072" in html1  # reported cached tokens
    assert "3,200" in html1  # expected: 3,200-token prefix in 128-token steps


def test_turn_page_before_analysis_says_so(api: Any, project: Project) -> None:
    api.post_snapshots([cache_turn(0)])
    html = (
        login(make_user("vera", project))
        .get(reverse("ingest:turn", args=[project.pk, "cache-1", 0]))
        .content.decode()
    )
    assert "Not analysed yet" in html


def test_timeline_chart_has_the_cached_prefix_line(analysed: Project) -> None:
    c = login(make_user("vera", analysed))
    fig = json.loads(c.get(reverse("ingest:chart_data", args=[analysed.pk, "cache-1"])).content)
    names = [t.get("name") for t in fig["data"]]
    assert "cached prefix" in names and "cache reads" in names
    prefix = next(t for t in fig["data"] if t["name"] == "cached prefix")
    assert any("a date or time changed" in t for t in prefix["text"])


def test_overview_panel_shows_hit_rate_money_and_breakers(analysed: Project) -> None:
    c = login(make_user("vera", analysed))
    html = c.get(reverse("ingest:overview", args=[analysed.pk]) + "?days=all").content.decode()
    assert 'id="cache-overview"' in html
    assert 'id="cache-breakers"' in html and '<td class="mono">system</td>' in html
    assert "lost to cache misses" in html


def test_settings_link_to_prices_and_prices_page_lists_defaults(analysed: Project) -> None:
    c = login(make_user("ada", analysed, "admin"))
    html = c.get(reverse("ingest:settings", args=[analysed.pk])).content.decode()
    assert reverse("insights:prices", args=[analysed.pk]) in html
    page = c.get(reverse("insights:prices", args=[analysed.pk])).content.decode()
    assert "gpt-4o-mini" in page and "claude-sonnet-4" in page


def test_saving_prices(analysed: Project) -> None:
    c = login(make_user("ada", analysed, "admin"))
    url = reverse("insights:prices", args=[analysed.pk])
    r = c.post(url, {"price_table": json.dumps({"My-Model": {"input": 1, "output": 2}})})
    assert r.status_code == 302
    analysed.refresh_from_db()
    assert analysed.price_table == {"my-model": {"input": 1.0, "output": 2.0}}
    page = c.get(url).content.decode()
    assert "this project" in page


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("{not json", "price_table"),
        ("[1, 2]", "price_table"),
        (json.dumps({"gpt-4o": {"output": 1}}), "gpt-4o.input"),
        (json.dumps({"gpt-4o": {"input": -1}}), "gpt-4o.input"),
        (json.dumps({"gpt-4o": {"input": "cheap"}}), "gpt-4o.input"),
        (json.dumps({"gpt-4o": {"input": 1, "cahced_input": 1}}), "gpt-4o.cahced_input"),
        (json.dumps({"gpt-4o": 3}), "gpt-4o"),
    ],
    ids=["bad-json", "not-object", "no-input", "negative", "text", "unknown-field", "not-entry"],
)
def test_bad_prices_are_refused_with_the_field_named(analysed: Project, body: str, field: str) -> None:
    c = login(make_user("ada", analysed, "admin"))
    r = c.post(reverse("insights:prices", args=[analysed.pk]), {"price_table": body})
    assert r.status_code == 400
    html = r.content.decode()
    assert 'id="price-errors"' in html and f"<code>{field}</code>" in html
    analysed.refresh_from_db()
    assert analysed.price_table == {}


def test_prices_need_the_admin_role(analysed: Project) -> None:
    c = login(make_user("eddie", analysed, "editor"))
    url = reverse("insights:prices", args=[analysed.pk])
    assert c.get(url).status_code in (403, 404)
    assert c.post(url, {"price_table": "{}"}).status_code in (403, 404)


def test_the_lens_adds_one_query_to_the_turn_page(
    analysed: Project, django_assert_max_num_queries: Any
) -> None:
    c = login(make_user("vera", analysed))
    # The page's 18 (its own, the lint's findings card, the count drift) and the lens's one.
    with django_assert_max_num_queries(19):
        r = c.get(reverse("ingest:turn", args=[analysed.pk, "cache-1", 3]))
    assert r.context["cache_session"].turns == 4
    assert r.context["cache_session"].breakers[0].key == "system"
