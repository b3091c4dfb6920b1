"""Export as JSONL in the wire format, and `ctxobs push` of the file into another project: the same
turns, blocks, hashes and events come back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from core.models import Membership, Project
from core.services import project_create
from ingest.models import Snapshot
from ingest.selectors import snapshot_events
from ingest.services import snapshot_batch_ingest
from tests.factories import block, full_snapshot, message, snapshot

ROOT = Path(__file__).resolve().parents[2]


def _session(sid: str, turns: int) -> list[dict[str, Any]]:
    out = []
    for t in range(turns):
        s = full_snapshot(session_id=sid, turn=t)
        s["blocks"].append(
            block(
                "retrieval",
                "retrieval",
                messages=[message("tool", f"doc {t} \u00e9\u4e2d <b>", tool_call_id=f"r{t}")],
            )
        )
        s["blocks"].append(block("tools", "tools", messages=[]))
        s["params"]["tools"] = [
            {"type": "function", "function": {"name": "search_flights", "parameters": {}}}
        ]
        out.append(s)
    return out


def _stored(project: Project) -> list[tuple[Any, ...]]:
    rows = []
    for s in Snapshot.objects.filter(project=project).order_by("session_id", "turn"):
        ev = snapshot_events(project_id=project.pk, snapshot_ref=s.id)
        rows.append(
            (
                str(s.snapshot_id),
                s.session_id,
                s.turn,
                s.ts,
                s.block_keys,
                s.block_hashes,
                s.block_tokens,
                s.block_flags,
                s.total_tokens,
                s.watermark,
                s.tier,
                s.output,
                s.tags,
                s.params,
                ev,
            )
        )
    return rows


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxobs", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.django_db(transaction=True)
def test_export_then_push_into_another_project_gives_the_same_turns(live_server: Any, tmp_path: Path) -> None:
    source, source_key = project_create(name="source")
    target, target_key = project_create(name="target")
    assert (
        snapshot_batch_ingest(project=source, batch=_session("keep", 4) + _session("other", 2)).created == 6
    )
    out = tmp_path / "keep.jsonl"

    exported = _cli(
        "export",
        "--session",
        "keep",
        "-o",
        str(out),
        env={"CTXOBS_ENDPOINT": live_server.url, "CTXOBS_API_KEY": source_key},
    )
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout) == {"file": str(out), "snapshots": 4}
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["turn"] for line in lines] == [0, 1, 2, 3]

    pushed = _cli("push", str(out), env={"CTXOBS_ENDPOINT": live_server.url, "CTXOBS_API_KEY": target_key})
    assert pushed.returncode == 0, pushed.stderr
    assert '"created": 4' in pushed.stdout

    keep = [r for r in _stored(source) if r[1] == "keep"]
    assert _stored(target) == keep
    # Pushing the same file again stores nothing twice.
    again = _cli("push", str(out), env={"CTXOBS_ENDPOINT": live_server.url, "CTXOBS_API_KEY": target_key})
    assert '"duplicate": 4' in again.stdout


@pytest.mark.django_db
def test_export_by_arrival_time_and_its_errors(client: Client) -> None:
    project, key = project_create(name="p")
    snapshot_batch_ingest(project=project, batch=[snapshot(session_id="a", turn=t) for t in range(3)])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    now = datetime.now(tz=UTC)
    r = client.get("/api/v1/export", {"since": (now - timedelta(hours=1)).isoformat()}, **auth)
    assert r.status_code == 200 and r["Content-Type"].startswith("application/x-ndjson")
    body = b"".join(r.streaming_content).decode()
    assert len(body.splitlines()) == 3
    r = client.get("/api/v1/export", {"since": (now + timedelta(hours=1)).isoformat()}, **auth)
    assert b"".join(r.streaming_content) == b""
    r = client.get(
        "/api/v1/export", {"since": now.isoformat(), "until": (now - timedelta(hours=1)).isoformat()}, **auth
    )
    assert r.status_code == 200 and b"".join(r.streaming_content) == b""  # an empty range
    r = client.get("/api/v1/export", {"since": "yesterday"}, **auth)
    assert r.status_code in (400, 422) and "since" in r.content.decode()
    r = client.get("/api/v1/export", {"session_id": "nope"}, **auth)
    assert r.status_code == 404
    assert client.get("/api/v1/export", {"session_id": "a"}).status_code == 401


@pytest.mark.django_db
def test_the_session_page_links_to_its_export(client: Client) -> None:
    from django.contrib.auth import get_user_model

    project, _ = project_create(name="p")
    snapshot_batch_ingest(project=project, batch=[snapshot(session_id="a b/<c>", turn=0)])
    user = get_user_model().objects.create_user(username="v", password="pw")
    Membership.objects.create(project=project, user=user, role="viewer")
    client.force_login(user)
    page = client.get(f"/p/{project.pk}/s/a%20b%2F%3Cc%3E/", follow=True)
    assert page.status_code == 200
    link = f"/api/v1/export?project={project.pk}&amp;session_id=a%20b%2F%3Cc%3E"
    assert link in page.content.decode()
    r = client.get(f"/api/v1/export?project={project.pk}&session_id=a%20b%2F%3Cc%3E")
    assert r.status_code == 200 and json.loads(b"".join(r.streaming_content))["session_id"] == "a b/<c>"
