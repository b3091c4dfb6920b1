"""Dashboard pages against the real database: content, escaping, permissions, query counts."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from core.models import IngestKey, Membership, Project
from core.services import ingest_key_authenticate, project_create
from ingest.models import AgentSession
from tests.factories import snapshot
from tests.ingest.dashboard_factories import HOSTILE, demo_session, hostile_session, ingest, many_sessions

ESCAPED = "&lt;script&gt;"


def make_user(name: str, project: Project | None = None, role: str = "viewer") -> Any:
    user = get_user_model().objects.create_user(username=name, password="pw-" + name)
    if project is not None:
        Membership.objects.create(project=project, user=user, role=role)
    return user


def login(user: Any) -> Client:
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def admin_client(project: Project) -> Client:
    return login(make_user("alice", project, "admin"))


@pytest.fixture
def demo(project: Project) -> AgentSession:
    ingest(project, demo_session())
    return AgentSession.objects.get(project=project, session_id="support-7431")


def urls(project: Project, session_id: str, turn: int = 1) -> dict[str, str]:
    p = project.pk
    return {
        "overview": reverse("ingest:overview", args=[p]),
        "sessions": reverse("ingest:sessions", args=[p]),
        "timeline": reverse("ingest:timeline", args=[p, session_id]),
        "chart": reverse("ingest:chart_data", args=[p, session_id]),
        "turn": reverse("ingest:turn", args=[p, session_id, turn]),
        "compare": reverse("ingest:turn", args=[p, session_id, turn]) + "?compare=0",
        "block": reverse("ingest:block", args=[p, session_id, turn, 1]),
        "settings": reverse("ingest:settings", args=[p]),
    }


# --- navigation -------------------------------------------------------------------------
def test_pages_need_a_login(client: Client, project: Project, demo: AgentSession) -> None:
    for name, url in urls(project, demo.session_id).items():
        r = client.get(url)
        assert r.status_code == 302, name
        assert r["Location"].startswith("/login/"), name


def test_login_page_logs_in_and_lands_on_the_only_project(client: Client, project: Project) -> None:
    make_user("bob", project, "viewer")
    assert client.get("/login/").status_code == 200
    r = client.post("/login/", {"username": "bob", "password": "pw-bob"})
    assert r.status_code == 302
    r = client.get("/")
    assert r.status_code == 302
    assert r["Location"] == reverse("ingest:overview", args=[project.pk])


def test_home_lists_only_the_users_projects(db: Any) -> None:
    a, _ = project_create(name="alpha")
    b, _ = project_create(name="beta")
    project_create(name="gamma-hidden")
    user = make_user("carol", a, "viewer")
    Membership.objects.create(project=b, user=user, role="admin")
    body = login(user).get("/").content.decode()
    assert "alpha" in body and "beta" in body
    assert "gamma-hidden" not in body


def test_project_switcher_lists_memberships(db: Any) -> None:
    a, _ = project_create(name="alpha")
    b, _ = project_create(name="beta")
    user = make_user("dan", a, "viewer")
    Membership.objects.create(project=b, user=user, role="viewer")
    body = login(user).get(reverse("ingest:overview", args=[a.pk])).content.decode()
    assert reverse("ingest:overview", args=[b.pk]) in body


# --- the pages show the facts ---------------------------------------------------------------
def test_sessions_list_shows_rows_with_sparkline_and_filters(
    admin_client: Client, project: Project, demo: AgentSession
) -> None:
    ingest(project, many_sessions(3, prefix="other"))
    body = admin_client.get(reverse("ingest:sessions", args=[project.pk])).content.decode()
    assert "support-7431" in body and "other-00002" in body
    assert body.count("<polyline") == 4
    r = admin_client.get(reverse("ingest:sessions", args=[project.pk]), {"q": "7431"})
    assert "support-7431" in r.content.decode() and "other-00001" not in r.content.decode()
    r = admin_client.get(reverse("ingest:sessions", args=[project.pk]), {"failures": "yes", "tier": "force"})
    text = r.content.decode()
    assert "support-7431" in text and "other-00000" not in text
    r = admin_client.get(reverse("ingest:sessions", args=[project.pk]), {"q": "7431"}, HTTP_HX_REQUEST="true")
    assert r.templates[0].name == "ingest/_sessions_table.html"
    assert "<html" not in r.content.decode()


def test_sessions_list_paginates(admin_client: Client, project: Project) -> None:
    ingest(project, many_sessions(60, turns=1))
    url = reverse("ingest:sessions", args=[project.pk])
    first = admin_client.get(url, {"sort": "session_id"}).content.decode()
    second = admin_client.get(url, {"sort": "session_id", "page": 2}).content.decode()
    assert "bulk-00000" in first and "bulk-00049" in first and "bulk-00050" not in first
    assert "bulk-00050" in second and "bulk-00059" in second and "bulk-00000" not in second
    assert "page 1 of 2" in first
    assert ">60 matching<" in first


def test_the_sessions_count_stops_a_fixed_way_past_the_page_and_paging_goes_on(
    admin_client: Client, project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ingest import views

    monkeypatch.setattr(views, "SESSIONS_COUNT_AHEAD", 60)
    ingest(project, many_sessions(120, turns=1))
    url = reverse("ingest:sessions", args=[project.pk])
    pages = [admin_client.get(url, {"sort": "session_id", "page": n}).content.decode() for n in (1, 2, 3)]

    assert ">more than 60 matching<" in pages[0] and "page 1 of more than 1<" in pages[0]
    assert "bulk-00000" in pages[0] and "bulk-00049" in pages[0] and "page=2" in pages[0]
    assert ">more than 110 matching<" in pages[1] and "bulk-00050" in pages[1] and "bulk-00099" in pages[1]
    # From page 3 the count reaches the end: exact again.
    assert ">120 matching<" in pages[2] and "page 3 of 3<" in pages[2]
    assert "bulk-00100" in pages[2] and "bulk-00119" in pages[2] and "page=4" not in pages[2]
    # A page number past the end, or not a number, still gets a page.
    assert admin_client.get(url, {"page": str(2**63)}).status_code == 200
    assert admin_client.get(url, {"page": "x\x00"}).status_code == 200


def test_timeline_page_and_chart_data(admin_client: Client, project: Project, demo: AgentSession) -> None:
    u = urls(project, demo.session_id)
    body = admin_client.get(u["timeline"]).content.decode()
    assert 'data-chart-src="' + u["chart"] in body
    assert body.count('class="pill t-') >= 24  # one row per turn, tier-coloured
    assert "/assets/plotly-" in body and "cdn" not in body.lower()
    fig = admin_client.get(u["chart"]).json()
    names = [t.get("name") for t in fig["data"]]
    for kind in ("system", "tools", "history", "summary", "tool_results", "user"):
        assert kind in names
    assert "watermark %" in names and "compression" in names and "validation failed" in names
    bar = next(t for t in fig["data"] if t["name"] == "history")
    assert bar["type"] == "bar"
    assert fig["layout"]["barmode"] == "stack"
    assert len(fig["layout"]["shapes"]) == 4  # warn, compress, force, break bands


def test_timeline_compare_form_redirects_to_the_diff(
    admin_client: Client, project: Project, demo: AgentSession
) -> None:
    r = admin_client.get(urls(project, demo.session_id)["timeline"], {"compare": "3", "turn": "10"})
    assert r.status_code == 302
    assert r["Location"] == reverse("ingest:turn", args=[project.pk, demo.session_id, 10]) + "?compare=3"


def test_turn_page_shows_blocks_changes_and_outcomes(
    admin_client: Client, project: Project, demo: AgentSession
) -> None:
    url = reverse("ingest:turn", args=[project.pk, demo.session_id, 14])
    r = admin_client.get(url)
    assert r.status_code == 200
    body = r.content.decode()
    for key in ("system", "tools", "constraints", "memory", "summary", "history", "tool_results", "user"):
        assert f'<td class="mono key">{key}</td>' in body
    assert "pinned" in body and "compressed" in body
    assert "Against the previous turn (13)" in body
    assert "rolling_summary" in body and "spool/h0" in body  # compression event
    assert "m-88" in body and "stale" in body  # recall list
    assert "Searching again for turn 14." in body
    assert reverse("ingest:turn", args=[project.pk, demo.session_id, 13]) in body
    assert reverse("ingest:turn", args=[project.pk, demo.session_id, 15]) in body
    change = r.context["change"]
    assert [b["key"] for b in change["entered"]] == ["summary"]
    fuller = admin_client.get(reverse("ingest:turn", args=[project.pk, demo.session_id, 13])).content.decode()
    assert "E_MISSING_FIELD" in fuller and "order_id missing" in fuller  # fails when the context is full
    assert {b["key"] for b in change["shrank"]} == {"history"}


def test_turn_diff_against_any_turn_is_word_level(
    admin_client: Client, project: Project, demo: AgentSession
) -> None:
    url = reverse("ingest:turn", args=[project.pk, demo.session_id, 8])
    r = admin_client.get(url, {"compare": "2"})
    change = r.context["change"]
    assert change["other_turn"] == 2 and not change["is_previous"]
    memory = next(d for d in change["diffs"] if d["key"] == "memory")
    assert ("insert", "; prefers morning flights") in memory["segments"]
    body = r.content.decode()
    assert "<ins>; prefers morning flights</ins>" in body
    r = admin_client.get(url, {"compare": "999"})
    assert "this session has no turn 999" in r.content.decode()


def test_drift_is_highlighted(admin_client: Client, project: Project, demo: AgentSession) -> None:
    drifted = admin_client.get(reverse("ingest:turn", args=[project.pk, demo.session_id, 9]))
    fine = admin_client.get(reverse("ingest:turn", args=[project.pk, demo.session_id, 8]))
    assert drifted.context["drift_flag"] is True
    assert fine.context["drift_flag"] is False
    assert 'class="drift"' in drifted.content.decode()


def test_long_contents_are_cut_with_show_all(admin_client: Client, project: Project) -> None:
    long_text = "word " * 2000
    ingest(
        project,
        [
            snapshot(
                session_id="long",
                turn=0,
                blocks=[
                    {
                        "key": "retrieval",
                        "kind": "retrieval",
                        "messages": [{"role": "system", "content": long_text + "END"}],
                    }
                ],
            )
        ],
    )
    body = admin_client.get(reverse("ingest:turn", args=[project.pk, "long", 0])).content.decode()
    assert "show all" in body and "END" not in body
    full = admin_client.get(reverse("ingest:block", args=[project.pk, "long", 0, 0]), HTTP_HX_REQUEST="true")
    assert "END" in full.content.decode() and "<html" not in full.content.decode()


ODD_IDS = [
    pytest.param("team/a/42", id="slashes"),
    pytest.param("a/t/5", id="ends-like-a-turn-path"),
    pytest.param("x/chart.json", id="ends-like-chart-data"),
    pytest.param("run/t/2/b/1/", id="ends-like-a-block-path"),
    pytest.param(f"{HOSTILE}/t/1", id="script-and-slashes"),
    pytest.param("..", id="dot-dot"),
    pytest.param(".", id="dot"),
    pytest.param("50% off?x=1#frag", id="percent-query-fragment"),
    pytest.param("til~de~2F~7E", id="tilde-escapes"),
    pytest.param("客户/会话 1", id="unicode-space"),
]


@pytest.mark.parametrize("session_id", ODD_IDS)
def test_any_session_id_addresses_its_own_pages(
    admin_client: Client, project: Project, session_id: str
) -> None:
    ingest(project, demo_session(session_id=session_id, turns=3))
    if "/" in session_id:
        # A decoy named like the prefix a raw path would route to, with a turn 5 of its own.
        ingest(project, demo_session(session_id=session_id.split("/")[0], turns=6, agent="decoy-bot"))
    for name, url in urls(project, session_id).items():
        r = admin_client.get(url)
        assert r.status_code == 200, (name, url)
        if name == "chart":
            assert {t.get("name") for t in r.json()["data"]} >= {"system", "history", "watermark %"}
        elif name in ("timeline", "turn", "compare", "block"):
            assert r.context["session"].session_id == session_id, (name, url)
            assert r.context["session"].agent == "travel-bot", (name, url)
    body = admin_client.get(urls(project, session_id)["timeline"]).content.decode()
    assert HOSTILE not in body


def test_session_segment_round_trips() -> None:
    from ingest.routing import session_id_from_segment, session_id_segment

    for p in ODD_IDS:
        sid = p.values[0]
        seg = session_id_segment(sid)
        assert "/" not in seg and seg not in (".", "..")
        assert session_id_from_segment(seg) == sid
    assert session_id_segment("support-7431") == "support-7431"
    assert session_id_segment("team/42") == "team~2F42"


def test_links_with_raw_slashes_redirect_to_their_page(admin_client: Client, project: Project) -> None:
    ingest(project, demo_session(session_id="team/a/42", turns=3))
    p = project.pk
    old_new = {
        f"/p/{p}/s/team/a/42/": reverse("ingest:timeline", args=[p, "team/a/42"]),
        f"/p/{p}/s/team/a/42/t/2/": reverse("ingest:turn", args=[p, "team/a/42", 2]),
        f"/p/{p}/s/team/a/42/t/2/b/1/": reverse("ingest:block", args=[p, "team/a/42", 2, 1]),
        f"/p/{p}/s/team/a/42/chart.json": reverse("ingest:chart_data", args=[p, "team/a/42"]),
        f"/p/{p}/s/team/a/42/t/1/?compare=0": reverse("ingest:turn", args=[p, "team/a/42", 1]) + "?compare=0",
    }
    for old, new in old_new.items():
        r = admin_client.get(old)
        assert r.status_code == 302, old
        assert r["Location"] == new, old
        assert admin_client.get(new).status_code == 200, new
    assert admin_client.get(f"/p/{p}/s/team/b/42/").status_code == 404


def test_ambiguous_old_link_prefers_the_session_that_exists(admin_client: Client, project: Project) -> None:
    ingest(project, demo_session(session_id="a/t/5", turns=3))
    p = project.pk
    # No session "a": the old link can only have meant the session "a/t/5".
    r = admin_client.get(f"/p/{p}/s/a/t/5/x/")
    assert r.status_code == 404
    r = admin_client.get(f"/p/{p}/s/a/t/5/")
    assert r.status_code == 302 and r["Location"] == reverse("ingest:timeline", args=[p, "a/t/5"])
    ingest(project, demo_session(session_id="a", turns=6))
    # The new link of "a/t/5" is unambiguous; the raw path now names turn 5 of "a".
    new = admin_client.get(reverse("ingest:timeline", args=[p, "a/t/5"]))
    assert new.context["session"].session_id == "a/t/5"
    r = admin_client.get(f"/p/{p}/s/a/t/5/")
    assert r.status_code == 200
    assert r.context["session"].session_id == "a" and r.context["snapshot"].turn == 5


def test_legacy_links_respect_project_access(project: Project) -> None:
    ingest(project, demo_session(session_id="team/a/42", turns=3))
    other, _ = project_create(name="other-co")
    outsider = login(make_user("mallory", other, "admin"))
    assert outsider.get(f"/p/{project.pk}/s/team/a/42/").status_code == 404


def test_overview_aggregates(admin_client: Client, project: Project, demo: AgentSession) -> None:
    r = admin_client.get(reverse("ingest:overview", args=[project.pk]), {"days": "all"})
    assert r.status_code == 200
    stats = r.context["stats"]
    assert stats["totals"]["turns"] == 24
    assert stats["totals"]["compressions"] == 1
    assert sum(n for _, n in stats["wm_buckets"]) == 24
    assert sum(n for _, _, n in stats["tiers"]) == 24
    assert stats["compression"][0][1:] == ("rolling_summary", 1)
    assert r.context["injection_rate"] == pytest.approx(0.5)
    high = [b for b in stats["bands"] if b[0] >= 0.8]
    low = [b for b in stats["bands"] if b[0] < 0.5]
    assert high and all(f > 0 for _, c, f in high), stats["bands"]
    assert low and all(f == 0 for _, _, f in low), stats["bands"]
    body = r.content.decode()
    for fig in (
        "fig-activity",
        "fig-watermarks",
        "fig-tiers",
        "fig-compression",
        "fig-failures",
        "fig-recall",
    ):
        assert f'id="{fig}"' in body


def test_overview_rollup_follows_new_and_late_snapshots(
    admin_client: Client, project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime

    from ingest import dashboard
    from ingest.dashboard import overview_refresh

    # No look back below the mark: a transaction running elsewhere in the cluster (another test
    # process's) would make the refresh look again at these turns and recompute their day.
    monkeypatch.setattr(dashboard, "RESCAN_IDS", 0)
    url = reverse("ingest:overview", args=[project.pk])
    ingest(project, demo_session(turns=6, compress_at=3))
    first = admin_client.get(url, {"days": "all"}).context["stats"]
    assert first["totals"]["turns"] == 6
    assert overview_refresh(project_id=project.pk) == []  # nothing new: nothing recomputed
    # Another session the same day, and a late one for a day weeks earlier.
    ingest(project, demo_session(session_id="later", turns=4, compress_at=2))
    ingest(project, demo_session(session_id="late", turns=3, start=datetime(2026, 10, 3, 9, tzinfo=UTC)))
    again = admin_client.get(url, {"days": "all"}).context["stats"]
    assert again["totals"]["turns"] == 13
    assert again["totals"]["compressions"] == 2
    assert [d.date().isoformat() for d in again["days"]] == ["2026-10-03", "2026-12-01"]
    assert again["turns"] == [3, 10] and again["sessions"] == [1, 2]
    # Time in tier: 30 s between turns, the last turn of each session counts nothing.
    assert sum(h for _, h, _ in again["tiers"]) * 3600 == pytest.approx(30 * (5 + 3 + 2))
    assert {s for _, s, _ in again["compression"]} == {"rolling_summary"}


def test_a_big_day_is_counted_by_the_beat_task_and_the_page_says_how_fresh_it_is(
    admin_client: Client, project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past INLINE_REFRESH_MAX_TURNS turns in the (day, session) pairs to recompute, a view reads
    the rollup as it is and says since when; the beat task's refresh counts the new turns and the
    sessions."""
    from ingest import dashboard
    from ingest.tasks import overview_refresh_task

    # No look back below the mark: a transaction running elsewhere in the cluster (another test
    # process's) would make each refresh look again at these few turns, past the small bound.
    monkeypatch.setattr(dashboard, "RESCAN_IDS", 0)
    url = reverse("ingest:overview", args=[project.pk])
    ingest(project, demo_session(turns=6, compress_at=3))
    first = admin_client.get(url, {"days": "all"})
    assert first.context["stats"]["totals"]["turns"] == 6 and not first.context["stats"]["behind"]
    assert 'id="overview-as-of"' not in first.content.decode()
    monkeypatch.setattr(dashboard, "INLINE_REFRESH_MAX_TURNS", 3)  # the new session brings 4
    ingest(project, demo_session(session_id="later", turns=4, compress_at=2))
    behind = admin_client.get(url, {"days": "all"})
    stats = behind.context["stats"]
    assert stats["behind"] and stats["totals"]["turns"] == 6 and stats["totals"]["sessions"] == 1
    assert 'id="overview-as-of"' in behind.content.decode()
    assert overview_refresh_task.apply().get() == 1  # the beat task, run here
    fresh = admin_client.get(url, {"days": "all"}).context["stats"]
    assert not fresh["behind"] and fresh["totals"]["turns"] == 10 and fresh["totals"]["sessions"] == 2
    # More new turns than the bound: not even their days are looked up.
    monkeypatch.setattr(dashboard, "INLINE_REFRESH_MAX_TURNS", 2)
    ingest(project, demo_session(session_id="third", turns=3))
    assert dashboard.overview_refresh(project_id=project.pk, max_turns=2) is None
    assert admin_client.get(url, {"days": "all"}).context["stats"]["totals"]["turns"] == 10
    assert overview_refresh_task.apply().get() == 1
    for period in ("1", "30", "all"):  # each period's count, as stored, is the sessions' own count
        stats = admin_client.get(url, {"days": period}).context["stats"]
        live = AgentSession.objects.filter(project=project)
        if stats["since"] is not None:
            live = live.filter(last_seen__date__gte=stats["since"])
        assert stats["totals"]["sessions"] == live.count()


def test_plotly_js_is_served_from_the_package(client: Client) -> None:
    import plotly

    r = client.get(reverse("ingest:plotly_js", args=[plotly.__version__]))
    assert r.status_code == 200
    head = b"".join(r.streaming_content)[:2000]
    assert b"plotly" in head.lower()
    assert "immutable" in r["Cache-Control"]
    again = client.get(reverse("ingest:plotly_js", args=[plotly.__version__]), HTTP_IF_NONE_MATCH=r["ETag"])
    assert again.status_code == 304


def test_plotly_js_is_the_basic_bundle_of_the_packages_plotly_js(
    admin_client: Client, project: Project, demo: AgentSession
) -> None:
    from ingest import views

    # The vendored bundle must follow the plotly package: after an upgrade of plotly, update
    # static/vendor/plotly-basic.min.js to the same plotly.js version (npm plotly.js-basic-dist-min).
    assert views.plotly_js_version(views.PLOTLY_BASIC_JS) == views.plotly_js_version(views.PLOTLY_PACKAGE_JS)
    assert views.PLOTLY_BUNDLE == "basic"
    page = admin_client.get(reverse("ingest:timeline", args=[project.pk, demo.session_id])).content.decode()
    src = reverse("ingest:plotly_js", args=[views.PLOTLY_VERSION]) + "?bundle=basic"
    assert f'<script src="{src}" defer></script>' in page
    body = b"".join(admin_client.get(src).streaming_content)
    assert body[:300].startswith(b"/**\n* plotly.js (basic") and len(body) < 2_000_000
    # It registers bar, scatter and pie: every trace type the dashboard's figures use.
    overview = admin_client.get(reverse("ingest:overview", args=[project.pk])).context["figures"]
    chart = admin_client.get(reverse("ingest:chart_data", args=[project.pk, demo.session_id])).json()
    used = {t["type"] for fig in [*overview.values(), chart] for t in fig["data"]}
    assert used <= {"bar", "scatter", "pie"}, used


# --- hostile content stays text ---------------------------------------------------------------
def test_hostile_content_is_escaped_everywhere(admin_client: Client, project: Project) -> None:
    snaps = hostile_session()
    ingest(project, snaps)
    sid = snaps[0]["session_id"]
    for name, url in urls(project, sid, turn=1).items():
        r = admin_client.get(url)
        assert r.status_code == 200, name
        body = r.content.decode()
        assert HOSTILE not in body, name
        if name not in ("chart", "settings"):
            assert ESCAPED in body or "\\u0026lt;script\\u0026gt;" in body, name
    diff = admin_client.get(urls(project, sid)["turn"]).content.decode()
    assert "<ins>" in diff and HOSTILE not in diff


# --- permissions -------------------------------------------------------------------------------
def test_other_projects_pages_are_404(project: Project, demo: AgentSession) -> None:
    other, _ = project_create(name="other-co")
    outsider = login(make_user("eve", other, "admin"))
    for name, url in urls(project, demo.session_id).items():
        assert outsider.get(url).status_code == 404, name
    for url in (
        reverse("ingest:key_create", args=[project.pk]),
        reverse("ingest:member_add", args=[project.pk]),
    ):
        assert outsider.post(url, {"name": "x", "username": "eve", "role": "admin"}).status_code == 404
    assert not Membership.objects.filter(project=project, user__username="eve").exists()


@pytest.mark.parametrize("role", ["viewer", "editor"])
def test_settings_are_admin_only(project: Project, role: str) -> None:
    c = login(make_user(f"u-{role}", project, role))
    key = IngestKey.objects.filter(project=project).first()
    admin = make_user("root", project, "admin")
    m = Membership.objects.get(project=project, user=admin)
    p = project.pk
    assert c.get(reverse("ingest:settings", args=[p])).status_code == 403
    assert c.post(reverse("ingest:key_create", args=[p]), {"name": "x"}).status_code == 403
    assert c.post(reverse("ingest:key_revoke", args=[p, key.pk])).status_code == 403
    assert (
        c.post(reverse("ingest:member_add", args=[p]), {"username": "root", "role": "viewer"}).status_code
        == 403
    )
    assert c.post(reverse("ingest:member_role", args=[p, m.pk]), {"role": "viewer"}).status_code == 403
    assert c.post(reverse("ingest:member_remove", args=[p, m.pk])).status_code == 403
    assert IngestKey.objects.filter(project=project).count() == 1
    m.refresh_from_db()
    assert m.role == "admin"
    assert "Settings</a>" not in c.get(reverse("ingest:overview", args=[p])).content.decode()


def test_viewer_sees_pages_but_not_replay_actions(project: Project, demo: AgentSession) -> None:
    from django.conf import settings

    c = login(make_user("viewer1", project, "viewer"))
    for name, url in urls(project, demo.session_id).items():
        if name != "settings":
            assert c.get(url).status_code == 200, name
    r = c.get(urls(project, demo.session_id)["turn"])
    assert r.context["replay_enabled"] == ("replay" in settings.INSTALLED_APPS)
    assert r.context["is_editor"] is False


def test_replay_actions_need_the_editor_role(project: Project, demo: AgentSession) -> None:
    from django.conf import settings

    url = urls(project, demo.session_id, turn=14)["turn"]
    viewer = login(make_user("viewer2", project, "viewer"))
    editor = login(make_user("editor2", project, "editor"))
    as_viewer = viewer.get(url).content.decode()
    as_editor = editor.get(url).content.decode()
    assert 'id="replay-actions"' not in as_viewer
    if "replay" not in settings.INSTALLED_APPS:
        assert 'id="replay-actions"' not in as_editor
        return
    assert 'id="replay-actions"' in as_editor
    snap_id = str(editor.get(url).context["snapshot"].snapshot_id)
    refused = viewer.post(
        reverse("replay:create", args=[project.pk]), {"snapshot_id": snap_id, "kind": "plain"}
    )
    assert refused.status_code == 403


# --- keys and members ----------------------------------------------------------------------------
def test_admin_creates_a_key_shown_once_and_revokes_it(admin_client: Client, project: Project) -> None:
    p = project.pk
    r = admin_client.post(reverse("ingest:key_create", args=[p]), {"name": "prod"})
    assert r.status_code == 200
    assert r["Cache-Control"] == "no-store"
    raw = r.context["new_raw_key"]
    assert raw in r.content.decode()
    key = ingest_key_authenticate(raw=raw)
    assert key.project_id == p and key.name == "prod"
    assert raw not in admin_client.get(reverse("ingest:settings", args=[p])).content.decode()
    assert not IngestKey.objects.filter(key_hash=raw).exists()
    r = admin_client.post(reverse("ingest:key_revoke", args=[p, key.pk]))
    assert r.status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_keys_are_ingest_only_unless_the_replay_box_is_ticked(admin_client: Client, project: Project) -> None:
    p = project.pk
    page = admin_client.get(reverse("ingest:settings", args=[p])).content.decode()
    box = page.split('<input type="checkbox" name="replay"')[1].split(">")[0]
    assert "checked" not in box
    admin_client.post(reverse("ingest:key_create", args=[p]), {"name": "agent"})
    admin_client.post(reverse("ingest:key_create", args=[p]), {"name": "ci", "replay": "on"})
    assert IngestKey.objects.get(project=project, name="agent").scopes == ["ingest"]
    ci = IngestKey.objects.get(project=project, name="ci")
    assert ci.scopes == ["ingest", "replay"]
    page = admin_client.get(reverse("ingest:settings", args=[p])).content.decode()
    row = page.split(f'data-key="{ci.prefix}"')[1].split("</tr>")[0]
    assert 'class="scope scope-replay"' in row
    assert page.count('class="scope scope-replay"') == 1


def test_admin_allows_private_addresses_with_a_warning(admin_client: Client, project: Project) -> None:
    p = project.pk
    page = admin_client.get(reverse("ingest:settings", args=[p])).content.decode()
    assert "Warning:" in page and "internal network" in page
    assert 'name="allow_private"' in page and "public addresses only" in page
    r = admin_client.post(reverse("ingest:network", args=[p]), {"allow_private": "on"})
    assert r.status_code == 302
    project.refresh_from_db()
    assert project.allow_private_endpoints is True
    page = admin_client.get(reverse("ingest:settings", args=[p])).content.decode()
    assert "private addresses allowed" in page
    admin_client.post(reverse("ingest:network", args=[p]), {})
    project.refresh_from_db()
    assert project.allow_private_endpoints is False


def test_only_admins_change_the_address_policy(project: Project) -> None:
    editor = login(make_user("ed", project, "editor"))
    r = editor.post(reverse("ingest:network", args=[project.pk]), {"allow_private": "on"})
    assert r.status_code == 403
    project.refresh_from_db()
    assert project.allow_private_endpoints is False


def test_admin_manages_members(admin_client: Client, project: Project) -> None:
    p = project.pk
    make_user("frank")
    admin_client.post(reverse("ingest:member_add", args=[p]), {"username": "frank", "role": "editor"})
    m = Membership.objects.get(project=project, user__username="frank")
    assert m.role == "editor"
    admin_client.post(reverse("ingest:member_role", args=[p, m.pk]), {"role": "viewer"})
    m.refresh_from_db()
    assert m.role == "viewer"
    r = admin_client.post(
        reverse("ingest:member_add", args=[p]), {"username": "nobody", "role": "viewer"}, follow=True
    )
    assert "no user named" in r.content.decode()
    admin_client.post(reverse("ingest:member_remove", args=[p, m.pk]))
    assert not Membership.objects.filter(pk=m.pk).exists()


def test_the_last_admin_cannot_leave_or_be_demoted(admin_client: Client, project: Project) -> None:
    p = project.pk
    me = Membership.objects.get(project=project, user__username="alice")
    r = admin_client.post(reverse("ingest:member_role", args=[p, me.pk]), {"role": "viewer"}, follow=True)
    assert "at least one admin" in r.content.decode()
    admin_client.post(reverse("ingest:member_remove", args=[p, me.pk]))
    me.refresh_from_db()
    assert me.role == "admin"


# --- query counts do not grow with the rows shown ------------------------------------------------
def _queries(c: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        r = c.get(url)
        assert r.status_code == 200, url
    return len(ctx.captured_queries)


@pytest.mark.parametrize("n", [5, 50])
def test_sessions_list_query_count_is_constant(
    admin_client: Client, project: Project, n: int, django_assert_max_num_queries: Any
) -> None:
    ingest(project, many_sessions(n, turns=4))
    with django_assert_max_num_queries(8):
        r = admin_client.get(reverse("ingest:sessions", args=[project.pk]))
    assert len(r.context["rows"]) == n


@pytest.mark.parametrize("n", [5, 50])
def test_session_pages_query_count_is_constant(
    admin_client: Client, project: Project, n: int, django_assert_max_num_queries: Any
) -> None:
    ingest(project, demo_session(turns=n, compress_at=3))
    u = urls(project, "support-7431", turn=n - 1)
    # 19: 16 of the pages' own, and one each for the lint's findings (timeline markers, the turn
    # page's card), the count drift against each model's usual ratio and the prompt-cache lens.
    for name in ("timeline", "chart", "turn", "compare", "overview"):
        with django_assert_max_num_queries(19):
            admin_client.get(u[name])


def test_query_counts_equal_for_few_and_many_rows(admin_client: Client, project: Project) -> None:
    ingest(project, many_sessions(5, turns=2, prefix="few"))
    ingest(project, demo_session(session_id="short", turns=5, compress_at=2))
    few = {
        "sessions": _queries(admin_client, reverse("ingest:sessions", args=[project.pk])),
        **{k: _queries(admin_client, v) for k, v in urls(project, "short", turn=4).items()},
    }
    ingest(project, many_sessions(45, turns=3, prefix="many"))
    ingest(project, demo_session(session_id="long", turns=60, compress_at=30))
    many = {
        "sessions": _queries(admin_client, reverse("ingest:sessions", args=[project.pk])),
        **{k: _queries(admin_client, v) for k, v in urls(project, "long", turn=59).items()},
    }
    assert few == many


def test_turn_page_query_count_is_the_same_for_a_short_and_a_long_session(
    admin_client: Client, project: Project, django_assert_max_num_queries: Any
) -> None:
    ingest(project, demo_session(session_id="short", turns=5, compress_at=2))
    ingest(project, demo_session(session_id="long", turns=150, compress_at=120))
    counts = {}
    for sid, turn in (("short", 4), ("long", 140)):
        for query in ("", "?compare=1"):
            # 16 of the page's own, and one each for the lint's findings card, the count drift
            # against each model's usual ratio and the prompt-cache lens's turn panel.
            with django_assert_max_num_queries(19) as ctx:
                r = admin_client.get(reverse("ingest:turn", args=[project.pk, sid, turn]) + query)
            assert r.status_code == 200
            # The change (against the previous turn, or the one asked for) and the block list with
            # its share bars are part of what was counted.
            assert r.context["change"]["other_turn"] == (turn - 1 if not query else 1)
            assert len(r.context["shown_blocks"]) == 8
            assert r.content.decode().count('<div class="share">') == 8
            counts[sid, query] = len(ctx.captured_queries)
    assert counts["short", ""] == counts["long", ""]
    assert counts["short", "?compare=1"] == counts["long", "?compare=1"]
