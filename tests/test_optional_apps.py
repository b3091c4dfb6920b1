"""The optional apps are a setting (CTXOBS_APPS), not the presence of their files: with each one
left out (and what needs it), every page of what remains renders, the left-out app's pages are
404, and nothing links to them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.factories import snapshot
from tests.processes import ROOT, process_env

# (URL name, needs a session and turn) of each app's pages with no id of their own beyond those.
PAGES: dict[str, list[tuple[str, bool]]] = {
    "ingest": [
        ("ingest:overview", False),
        ("ingest:sessions", False),
        ("ingest:settings", False),
        ("ingest:timeline", True),
        ("ingest:turn", True),
    ],
    "insights": [("insights:prices", False)],
    "replay": [("replay:list", False), ("replay:endpoints", False)],
    "alerts": [("alerts:incidents", False), ("alerts:list", False), ("alerts:rules", False)],
    "experiments": [("experiments:home", False), ("experiments:versions", False)],
}
NEEDS = {"insights": (), "replay": (), "alerts": ("insights",), "experiments": ("insights", "replay")}
# The end of a link to each app's first page.
LINKS = {
    "insights": "/settings/prices/",
    "replay": "/replays/",
    "alerts": "/incidents/",
    "experiments": "/experiments/",
}

RENDER = """
import json, sys
import django
django.setup()
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import NoReverseMatch, reverse

username, project_id, session_id, pages = sys.argv[1], int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
client = Client()
client.force_login(get_user_model().objects.get(username=username))
out = {"apps": [a for a in settings.INSTALLED_APPS if "." not in a], "pages": {}}
for name, with_turn in pages:
    kwargs = {"project_id": project_id}
    if with_turn:
        kwargs["session_id"] = session_id
        if name.endswith(":turn"):
            kwargs["turn"] = 0
    try:
        url = reverse(name, kwargs=kwargs)
    except NoReverseMatch:
        out["pages"][name] = ["unrouted", 0, ""]
        continue
    r = client.get(url)
    out["pages"][name] = [url, r.status_code, r.content.decode(errors="replace")]
print(json.dumps(out))
"""


def _without(app: str) -> list[str]:
    """The optional apps left when APP is out, with those that need it."""
    out = {a for a in NEEDS if a != app}
    return sorted(a for a in out if not set(NEEDS[a]) - out)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("left_out", list(NEEDS))
def test_every_page_renders_with_an_optional_app_left_out(left_out: str) -> None:
    from django.contrib.auth import get_user_model

    from core.models import Membership
    from core.services import project_create
    from ingest.services import snapshot_batch_ingest

    project, _ = project_create(name=f"without-{left_out}")
    user = get_user_model().objects.create_user(username=f"u-{left_out}", password="pw")
    Membership.objects.create(project=project, user=user, role="admin")
    assert snapshot_batch_ingest(project=project, batch=[snapshot(session_id="s-opt", turn=0)]).created == 1

    apps = _without(left_out)
    pages = [p for app_pages in PAGES.values() for p in app_pages]
    env = process_env(CTXOBS_APPS=",".join(apps), DJANGO_SETTINGS_MODULE="config.settings")
    done = subprocess.run(
        [sys.executable, "-c", RENDER, user.username, str(project.pk), "s-opt", json.dumps(pages)],
        cwd=str(ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert left_out not in out["apps"] and all(a in out["apps"] for a in apps), out["apps"]
    for app, app_pages in PAGES.items():
        for name, _ in app_pages:
            url, status, body = out["pages"][name]
            if app == "ingest" or app in apps:
                assert status == 200, (name, url, status, body[-500:])
                # No page links to an app that is not running.
                for gone in sorted(set(NEEDS) - set(apps)):
                    assert f'{LINKS[gone]}"' not in body, (name, gone)
            else:
                assert url == "unrouted", (name, url, status)


def test_an_unknown_or_incomplete_app_list_stops_the_start_with_the_reason() -> None:
    for apps, reason in (("replay,nope", "unknown app 'nope'"), ("alerts", "alerts needs insights too")):
        done = subprocess.run(
            [sys.executable, "-c", "import django; django.setup()"],
            cwd=str(ROOT),
            env={**os.environ, "CTXOBS_APPS": apps, "DJANGO_SETTINGS_MODULE": "config.settings"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode != 0 and reason in done.stderr, done.stderr[-1000:]
