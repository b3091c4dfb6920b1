"""Out-of-range and malformed values on every read endpoint and page: a 422 (API) or a page
that treats them as absent, never a 5xx, and a read never claims "nothing was stored"."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from core.models import Membership, Project
from tests.factories import full_snapshot

pytestmark = pytest.mark.django_db

BIG = str(2**63)
HUGE = "99999999999999999999"

API_QUERY_CASES = [
    ("/sessions", "offset", BIG), ("/sessions", "offset", "-1"), ("/sessions", "offset", HUGE),
    ("/sessions", "limit", BIG), ("/sessions", "limit", "-1"), ("/sessions", "limit", "0"),
    ("/sessions", "since", "2026-01-01T00:00:00-18:23"), ("/sessions", "until", "2026-01-01T00:00:00+18:23"),
    ("/sessions", "since", "0001-01-01T00:00:00+01:00"), ("/sessions", "until", "9999-12-31T23:59:59-01:00"),
    ("/sessions", "since", "not a date"),
    ("/sessions", "min_watermark", "NaN"), ("/sessions", "min_watermark", "inf"),
    ("/sessions", "min_watermark", "-inf"),
    ("/alerts", "offset", BIG), ("/alerts", "offset", "-1"), ("/alerts", "limit", BIG),
    ("/alerts", "limit", "-1"), ("/alerts", "rule", BIG), ("/alerts", "rule", "NaN"),
]


@pytest.mark.parametrize(("path", "name", "value"), API_QUERY_CASES,
                         ids=[f"{p[1:]}-{n}-{v}" for p, n, v in API_QUERY_CASES])
def test_out_of_range_query_value_is_a_422_naming_the_parameter(api, path, name, value):
    r = api.get(path, **{name: value})
    assert r.status_code == 422, (r.status_code, r.content)
    text = r.content.decode()
    assert name in text
    assert "nothing was stored" not in text


@pytest.mark.parametrize("path", [
    "/sessions/s-1/timeline", "/sessions/a\x00b/timeline", f"/snapshots/{BIG}", "/snapshots/-1",
    f"/alerts/{BIG}", "/alerts/-1", f"/replays/{BIG}", "/replays/-1", "/replays/NaN",
])
def test_path_values_out_of_range_are_a_clean_4xx(api, path):
    api.post_snapshots([full_snapshot()])
    r = api.get(path)
    assert r.status_code in (200, 404, 422), (r.status_code, r.content)
    assert "nothing was stored" not in r.content.decode()


@pytest.mark.parametrize(("name", "value"), [("q", "a\x00b"), ("agent", "\x00"), ("model", "x\x00")])
def test_filter_text_holding_nul_matches_nothing(api, name, value):
    api.post_snapshots([full_snapshot()])
    r = api.get("/sessions", **{name: value})
    assert r.status_code == 200, r.content
    assert r.json()["count"] == 0


@pytest.fixture
def admin(project: Project) -> Client:
    user = get_user_model().objects.create_user(username="root", password="pw-root")
    Membership.objects.create(project=project, user=user, role="admin")
    c = Client()
    c.force_login(user)
    return c


def _page_urls(p: int) -> list[str]:
    return [
        f"/p/{p}/sessions/?page={HUGE}", f"/p/{p}/sessions/?page=-1", f"/p/{p}/sessions/?page=NaN",
        f"/p/{p}/sessions/?since=2026-01-01T00:00:00-18:23", f"/p/{p}/sessions/?min_watermark=NaN",
        f"/p/{p}/sessions/?q=a%00b", f"/p/{p}/sessions/?agent=%00", f"/p/{p}/?days={HUGE}",
        f"/p/{p}/s/s-1/?page={HUGE}", f"/p/{p}/s/s-1/?page=-{HUGE}", f"/p/{p}/s/s-1/?turn={HUGE}&compare=0",
        f"/p/{p}/s/s-1/t/0/?compare={HUGE}", f"/p/{p}/s/s-1/t/{HUGE}/", f"/p/{p}/s/s-1/t/{BIG}/",
        f"/p/{p}/s/s-1/t/0/b/{HUGE}/", f"/p/{p}/s/a%00b/", f"/p/{p}/s/a%00b/chart.json",
        f"/p/{HUGE}/", f"/p/{BIG}/sessions/",
        f"/p/{p}/alerts/?page={HUGE}", f"/p/{p}/alerts/?rule={HUGE}", f"/p/{p}/alerts/?session=a%00b",
        f"/p/{p}/alerts/?state=%00", f"/p/{p}/sessions/?tier=%00&sort=%00", f"/p/{p}/s/s-1/t/0/?compare=-1",
        f"/p/{p}/alerts/{HUGE}/", f"/p/{p}/alerts/rules/{HUGE}/", f"/p/{p}/alerts/channels/{HUGE}/",
        f"/p/{p}/replays/?page={HUGE}", f"/p/{p}/replays/{HUGE}/", f"/p/{p}/replays/{HUGE}/progress",
        f"/p/{p}/replays/1/runs/{HUGE}/", f"/p/{p}/endpoints/?page={HUGE}",
    ]


def test_pages_never_answer_5xx_to_out_of_range_query_or_path_values(api, admin, project):
    api.post_snapshots([full_snapshot()])
    failures: list[tuple[str, int]] = []
    for url in _page_urls(project.pk):
        r: Any = admin.get(url)
        if r.status_code >= 500:
            failures.append((url, r.status_code))
    assert failures == []


@pytest.mark.parametrize("project_param", ["\u00b2", HUGE, BIG, "-1", "0x1"])
def test_a_members_project_parameter_out_of_range_is_a_404(admin, project_param):
    r = admin.get("/api/v1/sessions", {"project": project_param})
    assert r.status_code == 404, r.content
