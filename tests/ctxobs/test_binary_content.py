"""A tool that returns bytes or text that is not valid Unicode: the SDK neither raises into the
agent nor drops the turn, and the real ingest API accepts what it sends."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

import ctxobs
from core.services import project_create
from ctxobs.hashing import content_hash

pytestmark = pytest.mark.django_db(transaction=True)

PNG_HEAD = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"


@pytest.fixture
def server(live_server: Any) -> tuple[str, str]:
    _, key = project_create(name="binary")
    return live_server.url, key


def _stored(url: str, key: str, snapshot_id: str) -> dict[str, Any]:
    r = httpx.get(f"{url}/api/v1/snapshots/{snapshot_id}", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return r.json()


def test_tool_results_as_bytes_and_broken_text_are_sent_and_stored(server) -> None:
    url, key = server
    errors: list[ctxobs.CtxobsDeliveryError] = []
    obs = ctxobs.Client(url, key, on_error=errors.append, flush_interval=0.05, flush_at_exit=False)
    broken = (b"status=ok \xff\xfe " + PNG_HEAD).decode("utf-8", "surrogateescape")
    with obs.turn(session_id="bin-1", model="gpt-4o", context_window=8000) as t:
        t.block("system", [{"role": "system", "content": "You read files."}])
        t.block("tool_results", [
            {"role": "tool", "tool_call_id": "c1", "content": PNG_HEAD},
            {"role": "tool", "tool_call_id": "c2", "content": broken},
            {"role": "tool", "tool_call_id": "c3", "content": "nul\x00inside"},
        ])
        # The agent's own reads of the turn work with such content too.
        assert t.tokens() > 0 and t.watermark() > 0
        t.output({"choices": [{"message": {"role": "assistant", "content": "done \udcff"}}]})
    assert obs.flush(timeout=20)
    assert errors == [] and obs.stats()["sent"] == 1 and obs.stats()["failed"] == 0

    got = _stored(url, key, t.snapshot_id)
    messages = got["blocks"][1]["messages"]
    # Bytes are recorded as the text they decode to, every byte kept (surrogateescape), so
    # the original bytes can be had back; broken text and NULs arrive as the agent had them.
    assert messages[0]["content"].encode("utf-8", "surrogateescape") == PNG_HEAD
    assert messages[1]["content"] == broken
    assert messages[2]["content"] == "nul\x00inside"
    assert got["blocks"][1]["hash"] == content_hash(messages)
    assert got["output"]["text"] == "done \udcff"
    obs.close(timeout=2)
