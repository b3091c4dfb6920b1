"""Two batches written at the same time by separate database connections."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from django.db import connection, transaction

from ingest.models import AgentSession, Snapshot
from ingest.services import snapshot_batch_ingest
from tests.factories import block, snapshot

pytestmark = pytest.mark.django_db(transaction=True)

T = TypeVar("T")


def _wait_for_blocked(query_like: str, timeout: float = 20.0) -> bool:
    """True once another backend of this database waits on a lock in a statement LIKE QUERY_LIKE
    (ours holds it). Parallel test workers share the server, each with a database of its own."""
    deadline = time.monotonic() + timeout
    with connection.cursor() as cur:
        while time.monotonic() < deadline:
            cur.execute("SELECT pg_stat_clear_snapshot()")
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query LIKE %s",
                [query_like],
            )
            if cur.fetchone()[0]:
                return True
            time.sleep(0.02)
    return False


def _second_while_first_held(
    project: Any, first: list[dict[str, Any]], second: list[dict[str, Any]], check: Callable[[], T]
) -> tuple[list[T], Any]:
    """Stores the batch FIRST in a transaction another thread holds open, and while it is held
    the batch SECOND here. The holding thread runs CHECK (which waits for SECOND to block) before
    it commits. What CHECK returned (nothing if FIRST failed) and SECOND's result."""
    holding = threading.Event()
    seen: list[T] = []

    def first_batch() -> None:
        try:
            with transaction.atomic():
                snapshot_batch_ingest(project=project, batch=first)
                holding.set()
                seen.append(check())
        finally:
            holding.set()
            connection.close()

    t = threading.Thread(target=first_batch)
    t.start()
    assert holding.wait(20)
    result = snapshot_batch_ingest(project=project, batch=second)
    t.join(30)
    return seen, result


def _own_blocks(tag: str) -> list[dict[str, Any]]:
    """Blocks no other batch of the test brings. A batch stores its texts before it locks its
    sessions, so a second batch bringing the same new texts would wait on those rows, before
    reaching the lock a test is about."""
    return [block("system", "system", f"System prompt of {tag}"), block("user", "user", f"Question of {tag}")]


def test_snapshot_id_committed_meanwhile_by_another_batch_is_reported_duplicate(project: Any) -> None:
    """A resend that reaches another connection while the first send is still being written:
    the second batch's duplicate check cannot see the uncommitted row, so its COPY meets it at
    the unique index. The batch is then run again and reports the snapshot as a duplicate, and
    the rest of it is stored once."""
    resent = snapshot(session_id="first", turn=0)
    other = snapshot(session_id="second", turn=1, blocks=_own_blocks("other"))
    # The same snapshot_id in another session, with other texts: no lock shared before the COPY.
    moved = dict(resent, session_id="second", blocks=_own_blocks("moved"))

    saw_blocked, result = _second_while_first_held(
        project, [resent], [moved, other], lambda: _wait_for_blocked("COPY ingest_snapshot %")
    )

    assert saw_blocked == [True], "the second batch's COPY never waited on the first batch"
    assert [(r["snapshot_id"], r["status"]) for r in result.results] == [
        (resent["snapshot_id"], "duplicate"), (other["snapshot_id"], "created")]
    stored = Snapshot.objects.get(project=project, snapshot_id=resent["snapshot_id"])
    assert stored.session_id == "first"
    assert Snapshot.objects.filter(project=project).count() == 2
    # The aggregates of the rolled-back attempt are gone with it: "second" counts one turn.
    assert AgentSession.objects.get(project=project, session_id="second").turn_count == 1
    assert AgentSession.objects.get(project=project, session_id="first").turn_count == 1


@pytest.mark.parametrize("stored_before", [5, 0], ids=["stored-session", "new-session"])
@pytest.mark.parametrize("meanwhile", [0, 2], ids=["turn-before-ours", "turn-after-ours"])
def test_a_turn_stored_by_another_batch_between_the_session_read_and_its_lock_is_the_previous_turn(
    project: Any, stored_before: int, meanwhile: int
) -> None:
    """A batch reads its sessions before it locks them, and takes the short way to the previous
    turn (the session's `max_turn` as read) only when nothing else was stored in between. Here
    another batch stores a turn meanwhile: the turn before ours must still be found as its previous
    turn, whether the session existed before or that other batch created it; and a turn after ours
    (ours arrives late) must be found and given ours as its previous turn."""
    if stored_before:
        snapshot_batch_ingest(
            project=project, batch=[snapshot(session_id="s", turn=t) for t in range(stored_before)]
        )
    ours = stored_before + 1
    other = stored_before + meanwhile
    saw_blocked, _ = _second_while_first_held(
        project,
        [snapshot(session_id="s", turn=other)],
        [snapshot(session_id="s", turn=ours, blocks=_own_blocks("our turn"))],
        lambda: _wait_for_blocked("%INSERT INTO ingest_session %"),
    )

    assert saw_blocked == [True], "the second batch's session upsert never waited on the first batch"
    prev = dict(Snapshot.objects.filter(project=project, session_id="s").values_list("turn", "prev_turn"))
    before_both = stored_before - 1 if stored_before else None
    if other < ours:
        assert (prev[other], prev[ours]) == (before_both, other)
    else:
        assert (prev[ours], prev[other]) == (before_both, ours)
    assert AgentSession.objects.get(project=project, session_id="s").turn_count == stored_before + 2


def test_a_batch_waiting_on_its_sessions_has_already_written_its_texts(project: Any) -> None:
    """Texts name no session: a batch stores its new block and message texts before it takes its
    sessions' row locks, so a batch of the same sessions waits for the other only from the session
    upsert on, with its texts already written (the locks its backend holds say so)."""
    snapshot_batch_ingest(project=project, batch=[snapshot(session_id="s", turn=0)])

    def locks_of_the_waiting_batch() -> set[str] | None:
        if not _wait_for_blocked("%INSERT INTO ingest_session %"):
            return None
        with connection.cursor() as cur:
            cur.execute(
                """
                SELECT DISTINCT c.relname FROM pg_locks l
                JOIN pg_class c ON c.oid = l.relation
                JOIN pg_stat_activity a ON a.pid = l.pid
                WHERE a.datname = current_database() AND a.wait_event_type = 'Lock'
                  AND a.query LIKE '%%INSERT INTO ingest_session %%'
                  AND l.mode = 'RowExclusiveLock' AND l.granted
                """
            )
            return {r[0] for r in cur.fetchall()}

    later = snapshot(session_id="s", turn=2, blocks=_own_blocks("turn 2"))
    seen, _ = _second_while_first_held(
        project, [snapshot(session_id="s", turn=1)], [later], locks_of_the_waiting_batch
    )
    held = [h for h in seen if h is not None]

    assert held, "the second batch never waited on the first batch's session lock"
    assert {"ingest_blockcontent", "ingest_messagecontent"} <= held[0], held
    assert "ingest_snapshot" not in held[0]
    prev = dict(Snapshot.objects.filter(project=project, session_id="s").values_list("turn", "prev_turn"))
    assert prev == {0: None, 1: 0, 2: 1}
