"""The background sender against the real ingest API: accepted, rejected with field errors,
refused for a wrong key, throttled with Retry-After, down and back; the test front injects only
what the API cannot be made to answer on demand (5xx bursts, a proxy's 413)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter

import ctxobs
from tests.ctxobs.conftest import KEY, ROOT, spool_lines
from tests.waiting import wait_until


def record_turns(obs: ctxobs.Client, n: int, session: str = "s1", text: str = "hello") -> list[str]:
    ids = []
    for i in range(n):
        with obs.turn(session_id=session, model="gpt-4o-mini", context_window=8192) as t:
            t.block("system", [{"role": "system", "content": "You are a travel agent."}], pinned=True)
            t.block("user", [{"role": "user", "content": f"{text} {i}"}])
            t.output("ok")
        ids.append(t.snapshot_id)
    return ids


def wire_snapshot(i: int) -> dict:
    """A minimal valid wire snapshot built by hand, as a third-party sender would."""
    return {
        "snapshot_id": f"00000000-0000-4000-8000-{i:012d}",
        "session_id": "s",
        "turn": i,
        "ts": "2026-12-02T08:15:03.120Z",
        "model": {"name": "gpt-4o", "context_window": 128000},
        "blocks": [{"key": "user", "kind": "user", "messages": [{"role": "user", "content": "hi"}]}],
    }


def test_snapshots_survive_refused_connections_5xx_and_429_with_none_lost_or_stored_twice(
    ingest_down, make_client
) -> None:
    obs = make_client(ingest_down.url, batch_size=10, max_retries=30)
    ids = record_turns(obs, 30)
    wait_until(lambda: obs.stats()["retried"] >= 2, 10, "the sender to meet refused connections")
    ingest_down.script.extend([(500, {}), (503, {}), (429, {"Retry-After": "1"})])
    ingest_down.start()
    assert obs.flush(timeout=30)
    assert sorted(ingest_down.stored) == sorted(ids)
    # Once acknowledged, an item is never sent again.
    assert Counter(ingest_down.accepted_ids()) == Counter(ids)
    stats = obs.stats()
    assert stats["sent"] == 30 and stats["failed"] == 0 and stats["dropped"] == 0
    assert stats["retried"] >= 3
    assert all(p["gzip"] for p in ingest_down.posts)


def test_retry_after_is_honoured(ingest_throttled, make_client) -> None:
    obs = make_client(ingest_throttled.url)
    ids = record_turns(obs, 1)
    assert obs.flush(timeout=10)
    # The API takes one request per 2 s: the next batch, sent at once, is answered 429.
    ids += record_turns(obs, 1, session="s2")
    assert obs.flush(timeout=20)
    statuses = [p["status"] for p in ingest_throttled.posts]
    assert statuses[0] == 200 and 429 in statuses and statuses[-1] == 200, statuses
    n = statuses.index(429)
    throttled, accepted = ingest_throttled.posts[n], ingest_throttled.posts[n + 1]
    assert accepted["status"] == 200 and int(throttled["retry_after"]) >= 1
    assert accepted["time"] - throttled["time"] >= int(throttled["retry_after"]) - 0.05
    assert sorted(ingest_throttled.stored) == sorted(ids)


def test_enqueue_returns_at_once_while_the_server_hangs(blackhole, make_client) -> None:
    obs = make_client(blackhole.url, timeout=30, batch_size=5)
    worst = 0.0
    start = time.perf_counter()
    for i in range(500):
        t0 = time.perf_counter()
        obs.record(wire_snapshot(i))
        worst = max(worst, time.perf_counter() - t0)
    total = time.perf_counter() - start
    # Behaviour, not speed: a blocking send would take the 30 s request timeout, so any bound well
    # under it shows that recording does not wait on the server. What queueing costs is measured
    # in bench/sdk.py.
    assert total < 15.0 and worst < 5.0
    assert obs.stats()["enqueued"] == 500
    assert obs.flush(timeout=0.2) is False


def test_full_queue_drops_the_oldest_and_counts_them(ingest_down, make_client) -> None:
    obs = make_client(ingest_down.url, max_queue=5, batch_size=100, flush_interval=30)
    ids = record_turns(obs, 8)
    stats = obs.stats()
    assert stats["dropped"] == 3 and stats["queued"] == 5
    ingest_down.start()
    assert obs.flush(timeout=10)
    assert sorted(ingest_down.stored) == sorted(ids[3:])


def bad_snapshot(i: int, session: str = "s1") -> dict:
    """A snapshot the API refuses (a negative turn), sent by a client that does not validate locally."""
    return {**wire_snapshot(10_000 + i), "snapshot_id": str(uuid.uuid4()), "session_id": session, "turn": -1}


def test_rejected_item_is_reported_once_and_not_retried(ingest, make_client) -> None:
    errors: list[ctxobs.CtxobsDeliveryError] = []
    obs = make_client(ingest.url, on_error=errors.append, batch_size=3, flush_interval=5, validate=False)
    bad = bad_snapshot(1)
    ids = [*record_turns(obs, 1), bad["snapshot_id"]]
    obs.record(bad)
    ids += record_turns(obs, 1, text="again")
    assert obs.flush(timeout=10)
    ids2 = record_turns(obs, 2, session="s2")
    assert obs.flush(timeout=10)
    sent = [i for p in ingest.posts for i in p["ids"]]
    assert sent.count(ids[1]) == 1
    assert [e.snapshot_ids for e in errors] == [[ids[1]]]
    assert errors[0].kind == "rejected"
    assert [e["loc"][-1] for e in errors[0].errors] == ["turn"] and errors[0].errors[0]["msg"]
    assert set(ingest.stored) == {ids[0], ids[2], *ids2}
    assert obs.stats()["failed"] == 1 and obs.stats()["sent"] == 4


def test_invalid_snapshot_is_refused_locally_and_reported(ingest, make_client) -> None:
    errors: list[ctxobs.CtxobsDeliveryError] = []
    obs = make_client(ingest.url, on_error=errors.append)
    obs.record({"snapshot_id": "not-a-uuid", "session_id": "s", "turn": 0})
    assert obs.flush(timeout=5)
    assert ingest.posts == []
    assert errors[0].kind == "invalid" and any(e["loc"][-1] == "snapshot_id" for e in errors[0].errors)


def test_wrong_api_key_is_reported_once_per_batch(ingest, make_client) -> None:
    errors: list[ctxobs.CtxobsDeliveryError] = []
    obs = make_client(ingest.url, api_key="wrong", on_error=errors.append, batch_size=10, flush_interval=5)
    record_turns(obs, 4)
    assert obs.flush(timeout=5)
    assert len(ingest.posts) == 1
    assert [e.kind for e in errors] == ["auth"] and errors[0].status == 401
    assert obs.stats()["failed"] == 4


def test_a_batch_refused_as_too_large_is_split_until_it_fits(ingest, make_client) -> None:
    ingest.max_items = 2
    obs = make_client(ingest.url, batch_size=8, flush_interval=5)
    ids = record_turns(obs, 8)
    assert obs.flush(timeout=10)
    assert sorted(ingest.stored) == sorted(ids)


def test_disabled_client_sends_nothing_but_turns_still_work(ingest) -> None:
    obs = ctxobs.Client(ingest.url, KEY, disabled=True)
    ids = record_turns(obs, 2)
    assert len(ids) == 2 and obs.flush(1)
    # No sender thread was started, so nothing can still be on its way.
    assert obs.transport._thread is None
    assert ingest.posts == [] and obs.stats()["enqueued"] == 0


def test_sample_rate_keeps_or_drops_whole_sessions(ingest, make_client) -> None:
    obs = make_client(ingest.url, sample_rate=0.5)
    sessions = [f"sess-{i}" for i in range(40)]
    for s in sessions:
        record_turns(obs, 3, session=s)
    assert obs.flush(timeout=10)
    kept = Counter(snap["session_id"] for snap in ingest.stored.values())
    assert all(n == 3 for n in kept.values())
    assert 5 < len(kept) < 35
    assert obs.stats()["sampled_out"] == 3 * (40 - len(kept))


def test_push_sends_a_spool_left_offline_once(ingest_down, make_client, tmp_path) -> None:
    spool = tmp_path / "spool"
    obs = make_client(ingest_down.url, spool=spool, max_retries=2, batch_size=5)
    ids = record_turns(obs, 12)
    wait_until(lambda: obs.stats()["spooled"] >= 12, 15, "every snapshot to be spooled")
    assert obs.stats()["spooled"] == 12
    obs.close(timeout=1)  # offline: nothing sends the spool but `ctxobs push`
    lines = spool_lines(spool)
    assert len(lines) == 12
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(b"".join(line + b"\n" for line in lines))

    ingest_down.start()
    env = {**os.environ, "CTXOBS_ENDPOINT": ingest_down.url, "CTXOBS_API_KEY": KEY}
    first = subprocess.run(
        [sys.executable, "-m", "ctxobs", "push", str(spool)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert first.returncode == 0, first.stderr
    assert '"created": 12' in first.stdout
    assert list(spool.glob("*.jsonl")) == []  # a spool directory loses what was delivered
    second = subprocess.run(
        [sys.executable, "-m", "ctxobs", "push", str(copy), "--delete"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 0 and '"duplicate": 12' in second.stdout
    assert sorted(ingest_down.stored) == sorted(ids)
    assert not copy.exists()


def test_push_without_a_path_sends_the_default_spool(ingest_down, make_client, cache_home) -> None:
    obs = make_client(ingest_down.url, max_retries=0, batch_size=5)
    ids = record_turns(obs, 6)
    wait_until(lambda: obs.stats()["spooled"] >= 6, 15, "every snapshot to be spooled")
    obs.close(timeout=1)
    assert obs.transport.spool_dir is not None and spool_lines(obs.transport.spool_dir)
    ingest_down.start()
    env = {**os.environ, "CTXOBS_ENDPOINT": ingest_down.url, "CTXOBS_API_KEY": KEY}
    proc = subprocess.run(
        [sys.executable, "-m", "ctxobs", "push"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(ingest_down.stored) == sorted(ids)
    assert spool_lines(obs.transport.spool_dir) == []


def test_push_to_an_unreachable_server_exits_2_and_keeps_the_file(ingest_down, tmp_path) -> None:
    spool = tmp_path / "s.jsonl"
    spool.write_text('{"snapshot_id": "0b6f3c1e-6a43-4d0e-9a53-3f1f0f8f2a10"}\n')
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxobs",
            "push",
            str(spool),
            "--endpoint",
            ingest_down.url,
            "--retries",
            "0",
            "--delete",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and spool.exists()


def test_snapshots_still_queued_at_exit_go_to_the_spool(ingest_down, tmp_path) -> None:
    spool = tmp_path / "exit"
    script = (
        "import ctxobs\n"
        f"obs = ctxobs.Client({ingest_down.url!r}, 'k', spool={str(spool)!r}, exit_timeout=0.5,"
        " backoff_base=0.05, backoff_max=0.2)\n"
        "for i in range(7):\n"
        "    with obs.turn(session_id='x', model='gpt-4o') as t:\n"
        "        t.block('user', [{'role': 'user', 'content': 'hi'}])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert len(set(spool_lines(spool))) == 7


def test_on_error_callback_that_raises_does_not_stop_delivery(ingest, make_client) -> None:
    def boom(_: ctxobs.CtxobsDeliveryError) -> None:
        raise RuntimeError("callback bug")

    obs = make_client(ingest.url, on_error=boom, validate=False)
    obs.record(bad_snapshot(0))
    record_turns(obs, 1)
    assert obs.flush(timeout=5)
    later = record_turns(obs, 1, session="later")
    assert obs.flush(timeout=5)
    assert later[0] in ingest.stored


def test_many_threads_recording_at_once_lose_nothing(ingest, make_client) -> None:
    obs = make_client(ingest.url, batch_size=50)
    out: list[list[str]] = []

    def worker(n: int) -> None:
        out.append(record_turns(obs, 25, session=f"t{n}"))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert obs.flush(timeout=20)
    assert len(ingest.stored) == 200
    turns = sorted(s["turn"] for s in ingest.stored.values() if s["session_id"] == "t3")
    assert turns == list(range(25))
