"""Blocks sent by hash: once the real ingest API has taken a snapshot, later snapshots carry its
repeated blocks as their content address, and what is stored is what sending them whole stores.

A recording front (tests/ctxobs/conftest.py's, extended here) keeps every POST's snapshots as
they reached the API and the API's per-item results. The API is the real one; only the "older
API" test answers by itself, as the API answered before it took blocks by hash.
"""

from __future__ import annotations

import gzip
import io
import json
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest

import ctxobs
from ctxobs.hashing import block_hashes
from tests.ctxobs.conftest import KEY, IngestFront, spool_lines
from tests.waiting import wait_until

FAST: dict[str, Any] = {
    "flush_interval": 0.05, "backoff_base": 0.05, "backoff_max": 0.3, "flush_at_exit": False,
}


class RecordingFront(IngestFront):
    """IngestFront that also keeps, for every POST, the snapshots as they reached the API
    (`snapshots`) and its answer (`status`, per-item `results`), in order."""

    def __init__(self, upstream: str, project: Any, port: int | None = None) -> None:
        super().__init__(upstream, project, port)
        self.sent: list[dict[str, Any]] = []

    def answer(self, snapshots: list[dict[str, Any]]) -> tuple[int, dict[str, Any]] | None:
        """The front's own answer to a POST of SNAPSHOTS; None to pass it to the API."""
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        base = super()._handler()
        front = self

        class Handler(base):
            entry: dict[str, Any] | None = None

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                gz = self.headers.get("Content-Encoding") == "gzip"
                snapshots = json.loads(gzip.decompress(raw) if gz else raw)["snapshots"]
                self.entry = {"snapshots": snapshots, "status": None, "results": None}
                with front.lock:
                    front.sent.append(self.entry)
                own = front.answer(snapshots)
                if own is not None:
                    self.entry["status"], self.entry["results"] = own[0], own[1]["results"]
                    self._send(own[0], json.dumps(own[1]).encode(), {})
                    return
                self.rfile = io.BytesIO(raw)
                super().do_POST()

            def _relay(self, r: httpx.Response) -> None:
                if self.entry is not None:
                    self.entry["status"] = r.status_code
                    answered = r.status_code in (200, 207, 422)
                    self.entry["results"] = r.json().get("results") if answered else None
                super()._relay(r)

        return Handler

    def posts_of(self, snapshot_id: str) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
        """Each time SNAPSHOT_ID reached the API: the snapshot as sent and its result."""
        out = []
        with self.lock:
            for entry in self.sent:
                for i, snap in enumerate(entry["snapshots"]):
                    if snap["snapshot_id"] == snapshot_id:
                        results = entry["results"] or []
                        out.append((snap, next((r for r in results if r.get("index") == i), None)))
        return out


@pytest.fixture
def front(ingest_api: str, sdk_project: Any) -> Iterator[RecordingFront]:
    f = RecordingFront(ingest_api, sdk_project).start()
    yield f
    f.stop()


@pytest.fixture
def clients() -> Iterator[list[ctxobs.Client]]:
    made: list[ctxobs.Client] = []
    yield made
    for c in made:
        c.close(timeout=1)


def client(made: list[ctxobs.Client], endpoint: str, key: str = KEY, **kw: Any) -> ctxobs.Client:
    """A client that sends blocks by hash unless KW says otherwise (the SDK's default is off)."""
    c = ctxobs.Client(endpoint, key, **{**FAST, "send_block_hashes": True, **kw})
    made.append(c)
    return c


def by_hash(block: dict[str, Any]) -> bool:
    return "hash" in block and "messages" not in block


class Agent:
    """A session whose turns repeat a system prompt and a memory block (plain messages, the ones
    that go by hash), repeat a retrieved document as content parts and a tool call in the history
    (always sent whole), and ask a new question each turn."""

    def __init__(self, tag: str) -> None:
        self.system = [{"role": "system", "content": f"You are a travel agent ({tag}). " + "Be brief. " * 99}]
        self.memory = [
            {"role": "system", "content": f"The customer ({tag}) prefers trains.", "name": "memory"},
            {"role": "system", "content": None, "name": "empty-note"},
        ]
        self.docs = [{"role": "user", "content": [{"type": "text", "text": f"Timetable {tag}: 08:15 Lyon"}]}]
        self.history = [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "trains", "arguments": "{}"}}]},
            {"role": "tool", "content": "3 trains", "tool_call_id": "call_1"},
        ]

    def turn(self, obs: ctxobs.Client, session: str, n: int, *, memory: bool = True) -> str:
        with obs.turn(session_id=session, model="gpt-4o-mini", context_window=128_000, turn=n) as t:
            t.block("system", self.system, pinned=True)
            if memory:
                t.block("memory", self.memory)
            t.block("retrieval", self.docs)
            t.block("history", self.history)
            t.block("user", [{"role": "user", "content": f"question {n}: Paris to Lyon?"}])
            t.output("ok")
        return t.snapshot_id


def stored_turn(project: Any, session_id: str, turn: int) -> dict[str, Any]:
    """What the server keeps of a turn and shows on its page, without the row's own ids."""
    from ingest import selectors
    from ingest.turn_page import turn_page

    session = selectors.session_get(project=project, session_id=session_id)
    assert session is not None
    snapshot = selectors.snapshot_by_turn(project=project, session=session, turn=turn)
    assert snapshot is not None
    page = turn_page(project=project, session=session, snapshot=snapshot)
    return {
        "blocks": [{k: v for k, v in b.items() if k != "snapshot_ref"} for b in page.blocks],
        "shown": [[m["text"] for m in b["shown"]] for b in page.shown_blocks],
        "arrays": [snapshot.block_keys, snapshot.block_kinds, snapshot.block_hashes, snapshot.block_tokens,
                   snapshot.block_flags],
        "total_tokens": snapshot.total_tokens,
        "kind_tokens": snapshot.kind_tokens,
        "change": snapshot.change,
        "tier": snapshot.tier,
    }


def test_repeated_blocks_go_by_hash_and_are_stored_as_a_client_sending_them_whole_stores(
    front, clients, sdk_project
) -> None:
    agent = Agent(uuid.uuid4().hex)
    errors: list[ctxobs.CtxobsDeliveryError] = []
    hashed = client(clients, front.url, on_error=errors.append)
    whole = client(clients, front.url, on_error=errors.append, send_block_hashes=False)
    turns = 4
    ids: dict[str, list[str]] = {"hashed": [], "whole": []}
    for n in range(turns):
        for name, obs in (("hashed", hashed), ("whole", whole)):
            ids[name].append(agent.turn(obs, name, n))
            assert obs.flush(timeout=20)

    assert errors == []
    system_hash = block_hashes(agent.system)[0]
    memory_hash = block_hashes(agent.memory)[0]
    for n, sid in enumerate(ids["hashed"]):
        [(snap, result)] = front.posts_of(sid)
        assert result is not None and result["status"] == "created"
        blocks = {b["key"]: b for b in snap["blocks"]}
        if n == 0:
            # Nothing acknowledged yet: the first turn goes whole.
            assert not any(by_hash(b) for b in blocks.values())
            continue
        assert blocks["system"] == {"key": "system", "kind": "system", "tokens": blocks["system"]["tokens"],
                                    "pinned": True, "hash": system_hash}
        assert isinstance(blocks["system"]["tokens"], int) and blocks["system"]["tokens"] > 200
        assert by_hash(blocks["memory"]) and blocks["memory"]["hash"] == memory_hash
        # Content parts and tool calls always travel whole; so does what is new this turn.
        for key in ("retrieval", "history", "user"):
            assert "messages" in blocks[key] and "hash" not in blocks[key], key
    for sid in ids["whole"]:
        [(snap, result)] = front.posts_of(sid)
        assert result is not None and result["status"] == "created"
        assert not any(by_hash(b) for b in snap["blocks"])

    for n in range(turns):
        assert stored_turn(sdk_project, "hashed", n) == stored_turn(sdk_project, "whole", n), n
    later = stored_turn(sdk_project, "hashed", 2)["blocks"]
    assert later[0]["messages"] == agent.system and later[0]["content_hash"] == system_hash
    assert later[1]["messages"] == agent.memory and later[1]["content_hash"] == memory_hash

    assert hashed.stats()["blocks_by_hash"] == 2 * (turns - 1)
    assert whole.stats()["blocks_by_hash"] == 0
    assert hashed.stats()["sent"] == whole.stats()["sent"] == turns


@pytest.mark.django_db(transaction=True)
def test_a_hash_the_server_no_longer_holds_is_sent_again_whole_and_stored_without_a_report(
    api_server, clients
) -> None:
    from core.models import Project
    from ingest.models import BlockContent, Snapshot

    server, key = api_server
    server.start()
    project = Project.objects.get(name="sdk-spool")
    front = RecordingFront(server.url, project).start()
    try:
        agent = Agent(uuid.uuid4().hex)
        errors: list[ctxobs.CtxobsDeliveryError] = []
        obs = client(clients, front.url, key, on_error=errors.append, flush_interval=60, batch_size=100)
        agent.turn(obs, "a", 0)
        assert obs.flush(timeout=20)
        sid = agent.turn(obs, "a", 1)
        assert obs.flush(timeout=20)
        [(snap, _)] = front.posts_of(sid)
        assert by_hash(snap["blocks"][0]) and by_hash(snap["blocks"][1])

        # Retention removed the system prompt's content, and the API restarted since (its memory
        # of content seen today is gone).
        system_hash = block_hashes(agent.system)[0]
        assert BlockContent.objects.filter(project=project, hash=system_hash).delete()[0] == 1
        server.stop()
        server.start()

        # Two turns in one batch, both refused (422): both go again whole, in one POST.
        refused = [agent.turn(obs, "a", 2), agent.turn(obs, "b", 0)]
        assert obs.flush(timeout=30)
        for sid in refused:
            (first, r1), (again, r2) = front.posts_of(sid)
            assert by_hash(first["blocks"][0]) and first["blocks"][0]["hash"] == system_hash
            assert r1 is not None and r1["status"] == "rejected"
            assert [e["loc"][-1] for e in r1["errors"]] == ["hash"] and r1["errors"][0]["loc"][3] == 0
            assert not any(by_hash(b) for b in again["blocks"])
            assert r2 is not None and r2["status"] == "created"
        assert [e["status"] for e in front.sent[-2:]] == [422, 200]
        assert errors == []
        assert BlockContent.objects.filter(project=project, hash=system_hash).exists()

        # That hash is not sent by hash again; the memory block, still held, is.
        sid = agent.turn(obs, "a", 3)
        assert obs.flush(timeout=20)
        [(snap, result)] = front.posts_of(sid)
        assert result is not None and result["status"] == "created"
        assert not by_hash(snap["blocks"][0]) and by_hash(snap["blocks"][1])

        rows = Snapshot.objects.filter(project=project).values_list("session_id", "turn", "block_hashes")
        assert sorted((s, t) for s, t, _ in rows) == [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("b", 0)]
        assert all(h[0] == system_hash for _, _, h in rows)
        stats = obs.stats()
        assert stats["sent"] == 5 and stats["failed"] == 0
        assert stats["blocks_by_hash"] == 2 + 1  # turn 1's two blocks, turn 3's memory block
    finally:
        front.stop()


def test_with_send_block_hashes_off_every_block_goes_whole(front, clients) -> None:
    agent = Agent(uuid.uuid4().hex)
    obs = client(clients, front.url, send_block_hashes=False)
    ids = []
    for n in range(3):
        ids.append(agent.turn(obs, "off", n))
        assert obs.flush(timeout=20)
    sent = [snap for sid in ids for snap, _ in front.posts_of(sid)]
    assert len(sent) == 3
    assert all("messages" in b and "hash" not in b for snap in sent for b in snap["blocks"])
    assert obs.stats()["blocks_by_hash"] == 0 and obs.stats()["sent"] == 3


def test_the_spool_holds_whole_snapshots_and_is_drained_whole(front, clients, tmp_path: Path) -> None:
    agent = Agent(uuid.uuid4().hex)
    spool = tmp_path / "spool"
    obs = client(clients, front.url, spool=spool, max_retries=0)
    agent.turn(obs, "s", 0)
    assert obs.flush(timeout=20)  # acknowledged: later turns would go by hash
    front.stop()
    ids = [agent.turn(obs, "s", n) for n in (1, 2)]
    wait_until(lambda: obs.stats()["spooled"] == 2, 20, "both turns to be spooled")
    lines = [json.loads(line) for line in spool_lines(spool)]
    assert [s["snapshot_id"] for s in lines] == ids
    assert all("messages" in b and "hash" not in b for s in lines for b in s["blocks"])
    assert lines[0]["blocks"][0]["messages"] == agent.system

    front.start()
    assert obs.flush(timeout=30)
    for sid in ids:
        [(snap, result)] = front.posts_of(sid)
        assert result is not None and result["status"] == "created"
        assert not any(by_hash(b) for b in snap["blocks"])
    assert set(ids) <= set(front.stored)
    # Sent live again, the next turn carries its repeated blocks by hash.
    sid = agent.turn(obs, "s", 3)
    assert obs.flush(timeout=20)
    [(snap, _)] = front.posts_of(sid)
    assert by_hash(snap["blocks"][0]) and by_hash(snap["blocks"][1])


class OlderApiFront(RecordingFront):
    """The API as it was before it took blocks by hash: a block without messages is refused
    with the validator's error of that time, for each such item (422 when all are)."""

    def answer(self, snapshots: list[dict[str, Any]]) -> tuple[int, dict[str, Any]] | None:
        if not any(by_hash(b) for s in snapshots for b in s["blocks"]):
            return None
        results = []
        for i, s in enumerate(snapshots):
            errors = [
                {"loc": ["snapshots", i, "blocks", j, "messages"],
                 "msg": "field required: a list of messages", "hint": "send the block's messages as sent"}
                for j, b in enumerate(s["blocks"]) if by_hash(b)
            ]
            results.append({"index": i, "snapshot_id": s["snapshot_id"], "status": "rejected",
                            "errors": errors})
        if any(not r["errors"] for r in results):
            return None  # not needed by the test: one snapshot per POST
        return 422, {"created": 0, "duplicates": 0, "rejected": len(results), "results": results}


def test_an_api_that_takes_no_hashes_gets_the_snapshot_whole_and_no_more_hashes(
    ingest_api, sdk_project, clients
) -> None:
    older = OlderApiFront(ingest_api, sdk_project).start()
    try:
        agent = Agent(uuid.uuid4().hex)
        errors: list[ctxobs.CtxobsDeliveryError] = []
        obs = client(clients, older.url, on_error=errors.append)
        ids = []
        for n in range(3):
            ids.append(agent.turn(obs, "old", n))
            assert obs.flush(timeout=20)
        assert errors == []
        assert set(ids) <= set(older.stored)
        [(first, r1), (again, r2)] = older.posts_of(ids[1])
        assert by_hash(first["blocks"][0]) and r1 is not None and r1["status"] == "rejected"
        assert not any(by_hash(b) for b in again["blocks"]) and r2 is not None and r2["status"] == "created"
        # Switched off: the third turn goes whole at once.
        [(third, r3)] = older.posts_of(ids[2])
        assert not any(by_hash(b) for b in third["blocks"]) and r3 is not None and r3["status"] == "created"
        assert obs.stats()["sent"] == 3 and obs.stats()["failed"] == 0
    finally:
        older.stop()


def test_a_client_sends_every_block_whole_unless_asked(front, clients) -> None:
    agent = Agent(uuid.uuid4().hex)
    obs = ctxobs.Client(front.url, KEY, **FAST)
    clients.append(obs)
    ids = []
    for n in range(3):  # each turn answered before the next: with hashes on, turns 1 and 2 would use them
        ids.append(agent.turn(obs, "default", n))
        assert obs.flush(timeout=20)
    sent = [snap for i in ids for snap, _ in front.posts_of(i)]
    assert len(sent) == 3 and not any(by_hash(b) for snap in sent for b in snap["blocks"])
    assert obs.stats()["blocks_by_hash"] == 0
