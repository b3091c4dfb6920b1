"""config.celery: every task's time limits come from settings; the workers a deployment runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.conf import settings

from config.celery import app, time_limits
from core.tasking import WORKER_QUEUES

ROOT = Path(__file__).resolve().parent.parent


def _project_tasks() -> dict[str, object]:
    app.loader.import_default_modules()
    return {name: task for name, task in app.tasks.items() if not name.startswith("celery.")}


def test_every_task_of_the_project_has_a_soft_and_a_hard_time_limit_from_settings() -> None:
    tasks = _project_tasks()
    assert {"replay.run_execute", "replay.runs_reclaim", "alerts.deliver", "alerts.evaluate"} <= set(tasks)
    for name, task in tasks.items():
        soft, hard = task.soft_time_limit, task.time_limit  # type: ignore[attr-defined]
        assert (soft, hard) == time_limits(name), name
        assert 0 < soft < hard, name


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        pytest.param("replay.runs_reclaim", "replay.runs_reclaim", id="exact-name-first"),
        pytest.param("replay.run_execute", "replay.*", id="replay"),
        pytest.param("alerts.deliver", "alerts.*", id="alerts"),
        pytest.param("other.task", "*", id="anything-else"),
    ],
)
def test_a_task_takes_the_limits_of_the_first_matching_pattern(name: str, pattern: str) -> None:
    assert time_limits(name) == settings.CTXOBS_TASK_TIME_LIMITS[pattern]


def test_a_replay_may_run_two_calls_of_the_longest_endpoint_timeout() -> None:
    soft, _ = time_limits("replay.run_execute")
    assert soft >= 2 * 600
    # The broker must not hand a running task to a second worker before its hard limit.
    hard = max(h for _, h in settings.CTXOBS_TASK_TIME_LIMITS.values())
    assert settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] > hard


def test_replays_and_alerts_are_routed_to_queues_that_different_workers_consume() -> None:
    router = app.amqp.router
    queue_of = {name: router.route({}, name)["queue"].name for name in _project_tasks()}
    assert queue_of["replay.run_execute"] == "replay"
    assert queue_of["alerts.deliver"] == queue_of["alerts.evaluate"] == "alerts"
    # The reclaimer must run when every replay worker is busy or dead.
    assert queue_of["replay.runs_reclaim"] == "default"
    consumers = {q: [w for w, qs in WORKER_QUEUES.items() if q in qs] for q in set(queue_of.values())}
    assert all(len(ws) == 1 for ws in consumers.values()), consumers
    assert consumers["replay"] != consumers["alerts"]
    # Maintenance by role: a half-hour expiry never holds up an alert.
    assert queue_of["ingest.expire"] == queue_of["ingest.partitions_ensure"] == "maintenance"
    assert queue_of["ingest.overview_refresh"] == "maintenance"
    assert consumers["maintenance"] != consumers["alerts"]


def test_compose_runs_the_workers_of_config_celery_and_one_beat() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for name, queues in WORKER_QUEUES.items():
        command = services[name]["command"]
        assert "celery -A config worker" in command and f"-Q {','.join(queues)} " in command, name
        assert services[name]["healthcheck"]["test"], name
    beats = [n for n, s in services.items() if " beat" in str(s.get("command", ""))]
    assert beats == ["beat"]


def test_a_channel_closed_after_its_connection_was_detached_fails_as_a_connection_error() -> None:
    """The state kombu leaves after a broker outage (config.celery.guard_detached_redis_channels):
    a channel holding an unacknowledged message, its pool dropped, its transport detached. Closing
    it restores the message; that must fail as an error of a dead connection, which the worker's
    consumer ignores, not as the AttributeError that used to end the worker."""
    from kombu import Connection
    from kombu.common import ignore_errors
    from kombu.transport import redis as kombu_redis

    conn = Connection(settings.REDIS_URL)
    try:
        channel = conn.channel()
        queue = f"test-detached-{id(channel)}"
        channel.queue_declare(queue)
        channel.basic_publish(channel.prepare_message("{}"), exchange="", routing_key=queue)
        message = channel.basic_get(queue, no_ack=False)
        assert message is not None and channel.qos._delivered  # held, unacknowledged
        # What Connection.collect() leaves when the channel's first close failed half-way.
        channel._disconnect_pools()
        conn.transport.client = None
        with pytest.raises(kombu_redis.Transport.connection_errors):
            channel.close()
        channel.closed = False
        channel.qos._delivered.restored = False
        channel.qos._delivered[message.delivery_tag] = message
        ignore_errors(kombu_redis.Transport, channel.close)  # what the consumer steps do
    finally:
        conn.transport.client = conn
        ignore_errors(conn, conn.release)


def test_every_task_is_declared_by_the_project_decorator_with_its_limits_from_one_table() -> None:
    import re

    apps = ("ingest", "insights", "replay", "alerts", "experiments")
    sources = [p for a in apps for p in (ROOT / a).rglob("*.py")]
    assert not [str(p) for p in sources if re.search(r"@(shared_task|app\.task)\b", p.read_text())]
    tasks = _project_tasks()
    assert {"alerts.sweep", "alerts.incidents_sweep", "insights.sweep", "replay.run_execute"} <= set(tasks)
    for name in tasks:
        task = app.tasks[name]
        # Late acknowledgement and no stored result for every task, from the global settings.
        assert task.acks_late is True and task.ignore_result is True, name
        assert (task.soft_time_limit, task.time_limit) == time_limits(name), name
    assert time_limits("alerts.sweep") == (60.0, 90.0)
