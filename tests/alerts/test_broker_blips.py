"""A broker blip loses no worker: the test's own Redis is stopped and started again, over and over,
at different moments while the worker holds late-acknowledged messages (alert deliveries to a slow
webhook receiver, evaluations of fresh turns). After each blip the same worker process (no
supervisor runs here) delivers the alert of a session sent after the outage within the sweep
interval plus a margin.

What could end the worker: a channel closed again after kombu detached its connection
(`Connection.collect()` sets `transport.client = None`), its QoS restoring the messages it held,
asked the detached client for its hostname: `AttributeError: 'NoneType' object has no attribute
'hostname'`, which the consumer treats as unrecoverable. config.celery.guard_detached_redis_channels
turns it into a connection error (tests/test_celery.py builds that state directly); this test
holds the whole path to it over many blips.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import httpx
import pytest

from alerts.models import AlertRule
from alerts.services import channels as alert_channels
from tests.alerts.conftest import confirm_at_once, sized_snapshot
from tests.alerts.processes import Stack
from tests.alerts.receiver import Receiver
from tests.processes import keep_logs_on_failure
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

CYCLES = 20
SWEEP_SECONDS = 1
GRACE_SECONDS = 2
# What an alert may take beyond the sweep interval once Redis is back: the worker's reconnect
# (Celery retries the broker at once, then every 2 s), the evaluation and the webhook call.
MARGIN_SECONDS = 12


@pytest.fixture
def stack(request: Any, tmp_path: Any, django_db_setup: Any) -> Any:
    s = Stack(tmp_path, {
        "CTXOBS_ALERT_SWEEP_SECONDS": str(SWEEP_SECONDS),
        "CTXOBS_ALERT_SWEEP_GRACE_SECONDS": str(GRACE_SECONDS),
        "CTXOBS_ALERT_DELIVERY_LEASE_SECONDS": "1",
        "CTXOBS_INGEST_RATE_LIMIT": "0",
        # The incidents sweep resolves every quiet session's incident at once (their turn times are
        # long past), a resolved message each: thirty of them at the receiver's 0.6 s are a backlog of
        # 18 s in front of the next opened message, not a broker blip. It runs once an hour here, so
        # only its first tick (at beat's start, with nothing to resolve) falls inside the test.
        "CTXOBS_INCIDENT_SWEEP_SECONDS": "3600",
    })
    s.redis.start()
    try:
        yield s
    finally:
        s.close()
        keep_logs_on_failure(request, tmp_path)


def _post(stack: Stack, key: str, session_id: str) -> None:
    # Two turns, the second crossing the force tier: one alert for the session. An agent per
    # session, so that each session opens an incident of its own (and a message of its own).
    snaps = [sized_snapshot(turn=0, fill=0.3, session_id=session_id, agent=session_id),
             sized_snapshot(turn=1, fill=0.9, session_id=session_id, agent=session_id)]
    for _ in range(30):
        try:
            r = httpx.post(f"{stack.base_url}/api/v1/snapshots", content=json.dumps({"snapshots": snaps}),
                           headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
                           timeout=30)
        except httpx.HTTPError:
            time.sleep(0.2)
            continue
        assert r.status_code == 200, r.text
        return
    raise AssertionError("the web server did not take the turns")


def _alerted(rx: Receiver, session_id: str) -> bool:
    with rx.lock:
        return any(a["session_id"] == session_id for r in rx.requests for a in r["body"]["alerts"])


def test_the_worker_survives_redis_stopping_and_starting_at_any_moment(stack, project, ingest_key):
    rng = random.Random(20261204)
    project.allow_private_endpoints = True
    project.save()
    AlertRule.objects.filter(project=project).exclude(kind="tier_crossing", params__tier="force").delete()
    confirm_at_once(project)  # each session's one alert is announced, not left pending
    # Every delivery is held for a while: the worker holds unacknowledged messages when Redis goes.
    with Receiver(slow_first=10**6, slow_seconds=0.6) as rx:
        # An opened message per session (22 sessions): the channel's default hourly limit would hold
        # some back.
        _, rx.secret = alert_channels.channel_create(
            project=project, kind="webhook",
            data={"name": "hook", "url": rx.url, "timeout_seconds": 5.0, "max_per_hour": 1000})
        stack.web()
        worker = stack.worker()
        stack.beat()
        _post(stack, ingest_key, "warm-up")
        wait_until(lambda: _alerted(rx, "warm-up"), 60, "the first alert")

        took = []
        for cycle in range(CYCLES):
            # In flight: a session's evaluation and delivery, and the blip at a different moment.
            _post(stack, ingest_key, f"during-{cycle}")
            time.sleep(rng.uniform(0.0, 1.2))
            stack.redis.stop(kill=cycle % 3 == 2)
            time.sleep(rng.uniform(0.1, 2.0))
            stack.redis.start()

            after = f"after-{cycle}"
            sent = time.monotonic()
            _post(stack, ingest_key, after)
            wait_until(lambda s=after: _alerted(rx, s), SWEEP_SECONDS + GRACE_SECONDS + MARGIN_SECONDS,
                       f"the alert of {after} (cycle {cycle}; worker log: {stack.log('worker')})")
            took.append(time.monotonic() - sent)
            assert worker.poll() is None, f"the worker exited in cycle {cycle}: see {stack.log('worker')}"

        log = stack.log("worker").read_text(errors="replace")
        assert "Unrecoverable error" not in log
        print(f"alerts after a blip: max {max(took):.1f} s, mean {sum(took) / len(took):.1f} s")  # noqa: T201
