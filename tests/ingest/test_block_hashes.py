"""Blocks sent by hash: a block whose content the project holds may come as its content address and
token count instead of its messages. It is stored as if it had come whole; an address the project
does not hold (never sent, another project's, expired) rejects that snapshot alone, naming the
block, so that the sender can send it whole."""

from __future__ import annotations

import uuid
from datetime import date, timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from core.models import Project
from core.services import project_create
from ctxobs.hashing import block_hashes
from ingest import retention, selectors, store
from ingest.services import snapshot_batch_ingest
from tests.factories import block, snapshot

pytestmark = pytest.mark.django_db(transaction=True)


def _turn(session: str, turn: int, system: str, memory: str, user: str) -> dict[str, Any]:
    return snapshot(
        session_id=session, turn=turn, snapshot_id=str(uuid.uuid4()),
        blocks=[block("system", "system", system, tokens=40), block("memory", "memory", memory, tokens=12),
                block("user", "user", user, tokens=5)],
    )


def _by_hash(snap: dict[str, Any], *keys: str) -> dict[str, Any]:
    """SNAP with the blocks KEYS sent as their content address, as the SDK sends them."""
    out = dict(snap, blocks=[])
    for b in snap["blocks"]:
        if b["key"] in keys:
            b = {k: v for k, v in b.items() if k != "messages"} | {"hash": block_hashes(b["messages"])[0]}
        out["blocks"].append(b)
    return out


def _texts(project: Project, session: str) -> list[dict[str, Any]]:
    """Each stored turn of SESSION in its wire form, without the ids the store gives it."""
    sess = selectors.session_get(project=project, session_id=session)
    assert sess is not None
    refs = [s.id for s in selectors.session_turns(project=project, session=sess)]
    wire = selectors.snapshots_wire(project=project, snapshot_refs=refs)
    return [{k: v for k, v in wire[r].items() if k != "snapshot_id"} for r in refs]


def _forget() -> None:
    store._known_blocks.clear()
    store._known_messages.clear()


def _words() -> tuple[str, str]:
    tag = uuid.uuid4().hex  # content no other test (and no memo of this process) has seen
    return f"You are a travel agent {tag}.", f"The user lives in Guangzhou {tag}."


def test_a_turn_with_blocks_by_hash_is_stored_as_the_same_turn_sent_whole() -> None:
    whole, by_hash = project_create(name="whole")[0], project_create(name="by-hash")[0]
    system, memory = _words()
    turns = [_turn("s", t, system, memory, f"question {t}") for t in range(3)]
    assert snapshot_batch_ingest(project=whole, batch=turns).created == 3
    assert snapshot_batch_ingest(project=by_hash, batch=turns[:1]).created == 1
    res = snapshot_batch_ingest(project=by_hash, batch=[_by_hash(t, "system", "memory") for t in turns[1:]])
    assert (res.created, res.rejected) == (2, 0), res.results
    assert _texts(by_hash, "s") == _texts(whole, "s")
    assert [t["blocks"][0]["messages"][0]["content"] for t in _texts(by_hash, "s")] == [system] * 3


def test_an_unknown_hash_rejects_its_snapshot_alone_naming_the_block(api: Any, project: Project) -> None:
    system, memory = _words()
    never_sent = f"{memory} and likes tea"
    good = _turn("s", 0, system, memory, "hi")
    unknown = _turn("s", 1, system, never_sent, "again")
    r = api.post_snapshots([good, _by_hash(unknown, "system", "memory")])
    assert r.status_code == 207
    body = r.json()
    assert [x["status"] for x in body["results"]] == ["created", "rejected"]
    # The system block is held (the good turn of the same batch brought it); the memory block is not.
    (error,) = body["results"][1]["errors"]
    assert error["loc"] == ["snapshots", 1, "blocks", 1, "hash"]
    assert "unknown block content" in error["msg"] and error["hint"] == "send the block's messages"
    assert (body["created"], body["rejected"]) == (1, 1)
    assert [t["turn"] for t in _texts(project, "s")] == [0]
    again = api.post_snapshots([_by_hash(unknown, "system")])
    assert again.status_code == 200, again.json()
    assert [t["blocks"][1]["messages"][0]["content"] for t in _texts(project, "s")] == [memory, never_sent]


def test_a_batch_may_bring_a_content_whole_and_refer_to_it_by_hash() -> None:
    project = project_create(name="same-batch")[0]
    system, memory = _words()
    batch = [_turn("s", 0, system, memory, "a"),
             _by_hash(_turn("s", 1, system, memory, "b"), "system", "memory")]
    res = snapshot_batch_ingest(project=project, batch=batch)
    assert (res.created, res.rejected) == (2, 0), res.results


def test_another_projects_content_is_unknown() -> None:
    mine, theirs = project_create(name="mine")[0], project_create(name="theirs")[0]
    system, memory = _words()
    assert snapshot_batch_ingest(project=theirs, batch=[_turn("s", 0, system, memory, "a")]).created == 1
    res = snapshot_batch_ingest(project=mine, batch=[_by_hash(_turn("s", 0, system, memory, "a"), "system")])
    assert res.rejected == 1
    assert res.results[0]["errors"][0]["loc"] == ["snapshots", 0, "blocks", 0, "hash"]
    assert selectors.session_get(project=mine, session_id="s") is None


def _last_seen(project: Project, table: str, hashes: list[str]) -> set[date]:
    with connection.cursor() as cur:
        cur.execute(f"SELECT last_seen FROM {table} WHERE project_id = %s AND hash = ANY(%s)",  # noqa: S608
                    [project.pk, hashes])
        return {r[0] for r in cur.fetchall()}


def test_a_block_by_hash_keeps_its_content_and_messages_from_expiring() -> None:
    project = project_create(name="kept")[0]
    system, memory = _words()
    first = _turn("s", 0, system, memory, "a")
    assert snapshot_batch_ingest(project=project, batch=[first]).created == 1
    h, mh = block_hashes(first["blocks"][0]["messages"])
    long_ago = timezone.now().date() - timedelta(days=20)
    with connection.cursor() as cur:
        for table in ("ingest_blockcontent", "ingest_messagecontent"):
            cur.execute(f"UPDATE {table} SET last_seen = %s WHERE project_id = %s",  # noqa: S608
                        [long_ago, project.pk])
    _forget()  # as a web server process that has not seen it today
    later = _by_hash(_turn("s", 1, system, memory, "b"), "system")
    res = snapshot_batch_ingest(project=project, batch=[later])
    assert res.created == 1, res.results
    today = timezone.now().date()
    assert _last_seen(project, "ingest_blockcontent", [h]) == {today}
    assert _last_seen(project, "ingest_messagecontent", mh) == {today}


def test_content_removed_by_retention_is_unknown_and_can_be_sent_whole_again() -> None:
    project = project_create(name="expired")[0]
    project.retention_days = 1
    project.save(update_fields=["retention_days"])
    system, memory = _words()
    assert snapshot_batch_ingest(project=project, batch=[_turn("old", 0, system, memory, "a")]).created == 1
    retention.expire(now=timezone.now() + timedelta(days=3))
    _forget()  # the next day: the memos of what was seen today start empty
    later = _turn("new", 0, system, memory, "b")
    res = snapshot_batch_ingest(project=project, batch=[_by_hash(later, "system", "memory")])
    assert res.rejected == 1
    assert [e["loc"][3] for e in res.results[0]["errors"]] == [0, 1]
    assert snapshot_batch_ingest(project=project, batch=[later]).created == 1
    assert _texts(project, "new")[0]["blocks"][0]["messages"][0]["content"] == system
