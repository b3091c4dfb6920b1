"""Every page of every app: anonymous visitors go to the login page, titles are plain text."""

from __future__ import annotations

import html
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.urls.converters import IntConverter, PathConverter, StringConverter

from alerts.models import AlertRule
from alerts.services import channels as alert_channels
from core.models import Membership, Project
from core.services import project_create
from ingest.models import Snapshot
from tests.ingest.dashboard_factories import demo_session, ingest

pytestmark = pytest.mark.django_db

# Open to everyone on purpose; everything else that is not the API or the admin is a page.
PUBLIC = {"ingest:login", "ingest:logout", "ingest:healthz", "ingest:plotly_js"}
SELF_AUTHENTICATING = ("api", "admin")


def _patterns() -> list[tuple[str, URLPattern]]:
    found: list[tuple[str, URLPattern]] = []

    def walk(patterns: list[Any], namespaces: list[str]) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, namespaces + ([p.namespace] if p.namespace else []))
            elif p.name:
                found.append((":".join([*namespaces, p.name]), p))

    walk(get_resolver().url_patterns, [])
    return found


def _example_kwargs(pattern: URLPattern) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for name, conv in getattr(pattern.pattern, "converters", {}).items():
        if isinstance(conv, IntConverter):
            kwargs[name] = 1
        elif isinstance(conv, PathConverter):
            kwargs[name] = "a/b/c"
        elif type(conv) is StringConverter:
            kwargs[name] = "ack"
        else:  # a session id
            kwargs[name] = "s-1"
    return kwargs


PAGES = [
    (name, p)
    for name, p in _patterns()
    if name not in PUBLIC and not name.startswith(tuple(f"{ns}:" for ns in SELF_AUTHENTICATING))
]


def test_the_page_list_covers_every_app() -> None:
    apps = {name.split(":")[0] for name, _ in PAGES}
    assert {"ingest", "replay", "alerts"} <= apps
    assert len(PAGES) >= 30


@pytest.mark.parametrize(("name", "pattern"), PAGES, ids=[name for name, _ in PAGES])
def test_an_anonymous_visitor_is_sent_to_log_in(name: str, pattern: URLPattern) -> None:
    project_create(name="somebody else's")
    path = reverse(name, kwargs=_example_kwargs(pattern))
    for method in ("get", "post"):
        r = getattr(Client(), method)(path)
        assert r.status_code == 302, (method, path, r.status_code)
        where = urlsplit(r["Location"])
        assert where.path == "/login/"
        assert parse_qs(where.query)["next"] == [path]


def test_public_endpoints_stay_public_and_the_api_answers_401(client: Client) -> None:
    assert client.get("/login/").status_code == 200
    assert client.get("/healthz").status_code == 200
    assert client.get("/static/css/ctxobs.css").status_code == 200
    assert client.get("/api/v1/docs").status_code == 200
    r = client.get("/api/v1/sessions")
    assert r.status_code == 401 and r["Content-Type"].startswith("application/json")
    # The admin keeps its own login page.
    r = client.get("/admin/")
    assert r.status_code == 302 and urlsplit(r["Location"]).path == "/admin/login/"


def test_after_logging_in_the_visitor_lands_on_the_page_asked_for() -> None:
    project, _ = project_create(name="acme")
    user = get_user_model().objects.create_user("ann", password="pw-ann-12345")
    Membership.objects.create(project=project, user=user, role="viewer")
    c = Client()
    page = f"/p/{project.pk}/replays/"
    login = c.get(page)["Location"]
    r = c.post(login, {"username": "ann", "password": "pw-ann-12345"})
    assert r.status_code == 302 and r["Location"] == page
    assert c.get(page).status_code == 200


HOSTILE_NAME = "</title><script>window.__pwned=1</script> & co"
TITLE = re.compile(r"<title>(.*?)</title>", re.S)


def test_every_page_title_is_plain_text_with_untrusted_names_escaped(client: Client) -> None:
    project, _ = project_create(name=HOSTILE_NAME)
    project_create(name="second")  # the project list page shows when there are two
    user = get_user_model().objects.create_superuser("root", password="pw-root-12345")
    for p in Project.objects.all():
        Membership.objects.create(project=p, user=user, role="admin")
    client.force_login(user)
    ingest(project, demo_session(session_id="support-7431", turns=3))
    snap = Snapshot.objects.filter(project=project).order_by("turn").first()
    assert snap is not None
    rule = AlertRule.objects.filter(project=project).first()
    assert rule is not None
    channel, _ = alert_channels.channel_create(
        project=project, kind="email", data={"name": "<b>ops</b>", "recipients": "ops@example.com"}
    )
    pid, sid = project.pk, "support-7431"
    pages = [
        reverse("ingest:home"),
        reverse("ingest:overview", args=[pid]),
        reverse("ingest:sessions", args=[pid]),
        reverse("ingest:settings", args=[pid]),
        reverse("ingest:timeline", args=[pid, sid]),
        reverse("ingest:turn", args=[pid, sid, snap.turn]),
        reverse("ingest:block", args=[pid, sid, snap.turn, 0]),
        reverse("replay:list", args=[pid]),
        reverse("replay:endpoints", args=[pid]),
        reverse("alerts:list", args=[pid]),
        reverse("alerts:rules", args=[pid]),
        reverse("alerts:rule_new", args=[pid]),
        reverse("alerts:rule", args=[pid, rule.pk]),
        reverse("alerts:channels", args=[pid]),
        reverse("alerts:channel", args=[pid, channel.pk]),
    ]
    titles = {}
    for page in pages:
        r = client.get(page)
        assert r.status_code == 200, page
        found = TITLE.findall(r.content.decode())
        assert len(found) == 1, page
        titles[page] = found[0]
    for page, raw in titles.items():
        assert "<" not in raw and "\n" not in raw, f"{page}: markup in <title>: {raw!r}"
        assert html.unescape(raw).endswith(" · ctxobs"), page
    settings_title = html.unescape(titles[reverse("ingest:settings", args=[pid])])
    assert settings_title == f"Settings · {HOSTILE_NAME} · ctxobs"
    assert html.unescape(titles[reverse("ingest:overview", args=[pid])]) == f"{HOSTILE_NAME} · ctxobs"


def test_an_expired_session_in_a_partial_update_sends_the_whole_tab_to_log_in() -> None:
    project, _ = project_create(name="acme")
    page = f"http://testserver/p/{project.pk}/replays/1/"
    r = Client().get(
        f"/p/{project.pk}/replays/1/progress", HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL=page
    )
    assert r.status_code == 200 and "Location" not in r
    where = urlsplit(r["HX-Redirect"])
    assert where.path == "/login/" and parse_qs(where.query)["next"] == [f"/p/{project.pk}/replays/1/"]
