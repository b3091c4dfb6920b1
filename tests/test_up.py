"""The README's first command: embedded PostgreSQL + Redis, demo project, web + worker; rerun reuses data."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.factories import snapshot

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(home: Path, port: int) -> tuple[subprocess.Popen[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["CTXOBS_HOME"] = str(home)
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "ctxobs_up", "--port", str(port), "--no-model", "--no-demo", "--workers", "1"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    found: dict[str, str] = {}
    deadline = time.monotonic() + 120
    lines = []
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if m := re.search(r"running at (\S+)", line):
            found["url"] = m.group(1).rstrip("/")
        if m := re.search(r"UI login:\s+(\S+) / (\S+)", line):
            found["user"], found["password"] = m.group(1), m.group(2)
        if m := re.search(r"demo ingest key:\s+(\S+)", line):
            found["key"] = m.group(1)
        if {"url", "key", "password"} <= set(found) and "API docs" in line:
            return proc, found
    proc.kill()
    raise AssertionError("ctxobs_up did not come up:\n" + "".join(lines))


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


@pytest.mark.e2e
def test_up_starts_everything_with_embedded_services_and_reuses_data_on_rerun(tmp_path):
    home = tmp_path / "home"
    port = _free_port()
    proc, found = _start(home, port)
    sent = snapshot(session_id=f"up-{uuid.uuid4()}")
    try:
        base = found["url"]
        headers = {"Authorization": f"Bearer {found['key']}"}
        r = httpx.post(f"{base}/api/v1/snapshots", json={"snapshots": [sent]}, headers=headers, timeout=30)
        assert r.status_code == 200, r.text
        assert httpx.get(f"{base}/api/v1/docs", timeout=10).status_code == 200
        # The UI login that was printed works.
        with httpx.Client(base_url=base, timeout=10, follow_redirects=True) as c:
            page = c.get("/login/")
            assert page.status_code == 200
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
            r = c.post("/login/", data={"username": found["user"], "password": found["password"],
                                        "csrfmiddlewaretoken": token}, headers={"Referer": f"{base}/login/"})
            assert r.status_code == 200 and "/login/" not in str(r.url)
    finally:
        _stop(proc)
    assert (home / "pg").is_dir() and (home / "redis").is_dir()

    proc, again = _start(home, port)
    try:
        assert again["key"] == found["key"] and again["password"] == found["password"]
        r = httpx.get(f"{again['url']}/api/v1/snapshots/{sent['snapshot_id']}",
                      headers={"Authorization": f"Bearer {again['key']}"}, timeout=10)
        assert r.status_code == 200 and r.json()["session_id"] == sent["session_id"]
    finally:
        _stop(proc)
