"""The example agent end to end: the real local model server, the real ingest API on a live
server, the example run as the demo runs it (a subprocess), then the stored snapshots read back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core.models import Project
from ingest.models import Snapshot
from ingest.selectors import snapshot_full
from replay import localmodel

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


def run_example(*, base_url: str, endpoint: str, key: str, turns: int, seed: int = 7) -> dict[str, Any]:
    cmd = [
        sys.executable, str(ROOT / "examples" / "agent_loop.py"), "--base-url", base_url,
        "--sessions", "1", "--turns", str(turns), "--seed", str(seed), "--max-tokens", "40",
    ]
    env = dict(os.environ, CTXOBS_ENDPOINT=endpoint, CTXOBS_API_KEY=key)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def stored_snapshots(project: Project) -> list[dict[str, Any]]:
    rows = Snapshot.objects.filter(project=project).order_by("session_id", "turn")
    return [snapshot_full(snapshot=s) for s in rows]


def test_example_agent_stores_tools_recall_compression_retries_and_fallback(
    live_server: Any, project_and_key: tuple[Project, str], local_model: localmodel.LocalModelServer
) -> None:
    project, key = project_and_key
    # The agent's world (tool failures, flights, recall noise) is seeded apart from the model:
    # with seed 7 both flight searches succeed and the weather call fails within four messages,
    # whatever the model answers. Retries and the fallback come from the model's own output.
    result = run_example(base_url=local_model.base_url, endpoint=live_server.url, key=key, turns=4)

    sdk = result["sdk"]
    assert sdk["sent"] == result["calls"] and sdk["failed"] == 0 and sdk["dropped"] == 0
    snaps = stored_snapshots(project)
    assert len(snaps) == result["calls"]
    assert {s["session_id"] for s in snaps} == {snaps[0]["session_id"]}
    assert all(s["output"] is not None and s["output"]["usage"]["completion_tokens"] > 0 for s in snaps), (
        "every call reached the model server and its reply was recorded"
    )

    # tools ran, and one of them failed with an error result the model was shown
    tool_msgs = [
        m["content"] for s in snaps for b in s["blocks"] if b["kind"] == "tool_results" for m in b["messages"]
    ]
    assert any("search_flights" in c and '"status": "ok"' in c for c in tool_msgs)
    assert any('"status": "error"' in c for c in tool_msgs)

    # memory recall: scored and ranked items, some injected into the memory block, a stale one flagged
    recall = [r for s in snaps for r in s["recall"]]
    assert recall and all(r["channel"] == "keyword" and r["rank"] >= 1 for r in recall)
    assert any(r["injected"] and r["block"] == "memory" for r in recall)
    assert any(r["stale"] and not r["injected"] for r in recall)
    assert any(b["kind"] == "memory" for s in snaps for b in s["blocks"])

    # the watermark passed 70% on a call, and the next call carries the rolling summary
    by_turn = {s["turn"]: s for s in snaps}
    summaries = [
        (s, ev) for s in snaps for ev in s["compression"] if ev["strategy"] == "rolling_summary"
    ]
    assert summaries, [round(s["derived"]["watermark"], 3) for s in snaps]
    snap, ev = summaries[0]
    assert ev["watermark"] >= 0.70 and ev["block"] == "history" and ev["ref"].startswith("archive/")
    assert ev["tokens_after"] < ev["tokens_before"]
    # The watermark the agent acted on is the one the dashboard shows for the turn before.
    source = by_turn[snap["turn"] - 1]["derived"]
    assert source["watermark"] == pytest.approx(ev["watermark"], abs=1e-4)
    summary_block = next(b for b in snap["blocks"] if b["key"] == "summary")
    assert summary_block["compressed"] and "User asked:" in summary_block["messages"][0]["content"]
    assert snap["derived"]["watermark"] < ev["watermark"]

    # validation: failed outcomes, a retry with the error fed back, and the fallback reply
    outcomes = [v for s in snaps for v in s["validation"]]
    assert any(not v["passed"] and v["layer"] == "structure" for v in outcomes)
    assert any(v["attempt"] == 2 for v in outcomes)
    retried = next(s for s in snaps if any(v["attempt"] == 2 for v in s["validation"]))
    user_block = next(b for b in retried["blocks"] if b["key"] == "user")
    assert "Your last reply was rejected" in user_block["messages"][-1]["content"]
    assert retried["retries"] >= 1
    fallbacks = [s for s in snaps if s["fallback_used"]]
    assert len(fallbacks) == result["fallbacks"] >= 1
    assert all(s["retries"] == 2 and not all(v["passed"] for v in s["validation"]) for s in fallbacks)
