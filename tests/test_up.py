"""The README's first command: embedded PostgreSQL + Redis, demo project, web, workers and beat;
rerun reuses data."""

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
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from core.tasking import WORKER_QUEUES
from tests.factories import snapshot
from tests.replay.test_chat_shapes import TEMPLATE_TOKENS

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_a_foreground_job() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def _start(home: Path, port: int, *extra: str, argv: list[str] | None = None
           ) -> tuple[subprocess.Popen[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["CTXOBS_HOME"] = str(home)
    args = list(extra) or ["--no-model", "--no-demo"]
    # In a session of its own, as in a terminal: Ctrl-C goes to its whole process group. And with
    # SIGINT and SIGQUIT at their defaults, as a terminal's foreground job has them: a test run
    # started in the background of a shell (`scripts/test &`) inherits them ignored, and a process
    # started with SIGINT ignored keeps ignoring it (Python installs KeyboardInterrupt only when
    # SIGINT is at its default).
    proc = subprocess.Popen(
        [*(argv or [sys.executable, "manage.py", "ctxobs_up"]), "--port", str(port), "--workers", "1",
         *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, preexec_fn=_as_a_foreground_job,
    )
    found: dict[str, str] = {}
    deadline = time.monotonic() + 300
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
        if m := re.search(r"local model \(OpenAI-compatible\):\s+(\S+)", line):
            found["model"] = m.group(1)
        if {"url", "key", "password"} <= set(found) and "logs:" in line:
            return proc, found
    proc.kill()
    raise AssertionError("ctxobs_up did not come up:\n" + "".join(lines))


def _worker_queues(
    proc: subprocess.Popen[str], timeout: float = 90.0
) -> tuple[dict[str, set[str]], list[str]]:
    """The queues each live Celery worker started by ctxobs_up consumes (asked over its broker),
    and the command lines of its beat processes."""
    import psutil
    from celery import Celery

    kids = psutil.Process(proc.pid).children()
    beats = [" ".join(k.cmdline()) for k in kids if "beat" in k.cmdline()]
    redis_url = next(k.environ()["REDIS_URL"] for k in kids if "worker" in k.cmdline())
    app = Celery(broker=redis_url)
    deadline = time.monotonic() + timeout
    found: dict[str, set[str]] = {}
    while time.monotonic() < deadline:
        replies = app.control.inspect(timeout=2).active_queues() or {}
        found = {node: {q["name"] for q in queues} for node, queues in replies.items()}
        if len(found) >= len(WORKER_QUEUES):  # every worker answers, a restarted one included
            break
        time.sleep(1)
    app.close()
    return found, beats


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


@pytest.mark.e2e
def test_up_starts_everything_with_embedded_services_and_reuses_data_on_rerun(tmp_path, monkeypatch):
    home = tmp_path / "home"
    port = _free_port()
    monkeypatch.setenv("CTXOBS_ALERT_SWEEP_SECONDS", "1")
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
        # Celery beat runs the alerts sweeper on the worker.
        worker_log = home / "logs" / "worker.log"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not re.search(r"Task alerts\.sweep\[\S+\] succeeded",
                                                            worker_log.read_text(errors="replace")):
            time.sleep(0.5)
        assert re.search(r"Task alerts\.sweep\[\S+\] succeeded", worker_log.read_text(errors="replace"))
        # Alerts are served while replays run: a worker of their own, apart from the replay one,
        # and the one beat that re-queues replay runs of a dead worker.
        queues, beats = _worker_queues(proc)
        assert sorted(map(sorted, queues.values())) == [["alerts", "default"], ["maintenance"], ["replay"]], (
            queues
        )
        assert len(beats) == 1, beats
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


@pytest.mark.e2e
@pytest.mark.timeout(1800)
def test_up_starts_the_local_model_fills_the_demo_and_replays_work_offline(tmp_path):
    """The first command with its defaults: the local model is registered as the demo
    project's endpoint, the example agent fills the demo project through the real ingest API,
    and a "without memory" replay of a demo turn runs on the worker against that model."""
    home = tmp_path / "home"
    port = _free_port()
    proc, found = _start(home, port, "--demo-sessions", "1", "--demo-turns", "3")
    try:
        assert "model" in found, "the local model server was not started"
        assert proc.stdout is not None
        demo = ""
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and "example agent" not in demo:
            demo = proc.stdout.readline()
            assert demo, "ctxobs_up stopped before the example agent finished"
        assert "filled the demo project" in demo, demo
        # Then the demo's experiments start: a set of the agent's turns, two strategies and the control.
        started = ""
        while time.monotonic() < deadline and "ctxobs: the demo set" not in started:
            started = proc.stdout.readline()
            assert started, "ctxobs_up stopped before the demo's experiments started"
        assert "runs 3 experiments" in started, started
        base = found["url"]
        headers = {"Authorization": f"Bearer {found['key']}"}
        with httpx.Client(base_url=f"{base}/api/v1", headers=headers, timeout=30) as api:
            items = api.get("/sessions").json()["items"]
            assert len(items) == 1 and items[0]["turn_count"] >= 3, items
            timeline = api.get(f"/sessions/{items[0]['session_id']}/timeline").json()
            snaps = [api.get(f"/snapshots/{t['snapshot_id']}").json() for t in timeline["turns"]]
            for snap in snaps:
                assert snap["blocks"][0]["key"] == "system"
            # The agent's calls reached the local model: its answers and reported usage are stored.
            answered = [s for s in snaps if s["output"] and s["output"].get("usage", {}).get("prompt_tokens")]
            assert answered, [s["output"] for s in snaps]
            # Recall injects the memory block on the turns whose message matches a memory.
            snap = next(s for s in snaps if any(b["key"] == "memory" for b in s["blocks"]))
            snap_id = snap["snapshot_id"]

            r = api.post("/replays", json={"kind": "without", "snapshot_id": snap_id, "block": "memory",
                                           "samples": 1, "params": {"max_tokens": 16}})
            assert r.status_code == 201, r.text
            job_id = r.json()["id"]
            # The demo's experiments share the replay worker; this job goes ahead of their queued calls.
            deadline = time.monotonic() + 600
            job = r.json()
            while time.monotonic() < deadline and job["status"] not in ("done", "failed", "cancelled"):
                time.sleep(1)
                job = api.get(f"/replays/{job_id}").json()
            assert job["status"] == "done", job
            runs = [run for t in job["turns"] for v in t["variants"] for run in v["runs"]]
            assert len(runs) == 2 and all(run["status"] == "done" for run in runs), runs
            without = next(v for t in job["turns"] for v in t["variants"] if not v["is_baseline"])
            baseline = next(v for t in job["turns"] for v in t["variants"] if v["is_baseline"])
            # The local model saw fewer prompt tokens without the memory block: it reached the model.
            assert without["runs"][0]["prompt_tokens"] < baseline["runs"][0]["prompt_tokens"]
            # A base model with no chat template: reached through the transcript, its answers hold
            # no other model's chat-template tokens.
            for run in runs:
                assert run["api_mode"] == "completions", run
                assert not [t for t in TEMPLATE_TOKENS if t in run["output_text"]], run["output_text"]
            # Nor do the agent's own answers, which reached the model through its chat API.
            for s in answered:
                text = s["output"].get("text") or ""
                assert not [t for t in TEMPLATE_TOKENS if t in text], text
            # The demo's experiments end on the local model, and the comparison page has its figures.
            deadline = time.monotonic() + 900
            exps = api.get("/experiments").json()
            while time.monotonic() < deadline and not all(
                e["status"] in ("done", "partial", "failed", "cancelled") for e in exps
            ):
                time.sleep(2)
                exps = api.get("/experiments").json()
            assert len(exps) == 3 and all(e["status"] in ("done", "partial") for e in exps), exps
            by_strategy = {e["strategy"]: e for e in exps}
            assert "as saved" in by_strategy, by_strategy.keys()
            strategies = [e for e in exps if e["strategy"] != "as saved"]
            for e in strategies:
                assert e["vs_control"]["metrics"], e
                tokens = next(m for m in e["vs_control"]["metrics"] if m["name"] == "prompt_tokens")
                # A strategy with nothing to act on in a short demo session is "not applicable".
                assert tokens["pairs"] + e["n_not_applicable"] == e["n_items"], e
            ids = ",".join(str(e["id"]) for e in [by_strategy["as saved"], *strategies])
            compare = api.get("/experiments/compare", params={"ids": ids})
            assert compare.status_code == 200 and len(compare.json()["rows"]) == 2, compare.text
        # The worker counted the demo's Gemma prompts with the local model's own vocabulary.
        with httpx.Client(base_url=base, timeout=30, follow_redirects=True) as c:
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', c.get("/login/").text).group(1)
            r = c.post("/login/", data={"username": found["user"], "password": found["password"],
                                        "csrfmiddlewaretoken": token}, headers={"Referer": f"{base}/login/"})
            project_path = re.search(r"/p/\d+/", str(r.url)).group(0)
            turn_url = f"{project_path}s/{quote(items[0]['session_id'], safe='')}/t/{answered[-1]['turn']}/"
            deadline = time.monotonic() + 60
            page = c.get(turn_url).text
            while time.monotonic() < deadline and 'with <span class="mono">GGUF vocabulary' not in page:
                time.sleep(1)
                page = c.get(turn_url).text
            assert 'with <span class="mono">GGUF vocabulary' in page, page[:3000]
    finally:
        _stop(proc)


def _processes_of(proc: subprocess.Popen[str], home: Path) -> list[Any]:
    """PROC's descendants, and the embedded servers that keep their data under HOME."""
    import psutil

    found = {p.pid: p for p in psutil.Process(proc.pid).children(recursive=True) if _cmdline(p)}
    for p in psutil.process_iter(["cmdline"]):
        if str(home) in " ".join(p.info["cmdline"] or []):
            found.setdefault(p.pid, p)
    found.pop(proc.pid, None)
    return list(found.values())


def _cmdline(p: Any) -> str:
    """P's command line; empty once it has exited (a zombie has none)."""
    import psutil

    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def _wait_gone(procs: list[Any], timeout: float) -> list[Any]:
    """Those of PROCS still running after TIMEOUT (an exited process not yet reaped is gone)."""
    import psutil

    def running(p: Any) -> bool:
        try:
            return bool(p.is_running() and p.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

    deadline = time.monotonic() + timeout
    alive = [p for p in procs if running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if running(p)]
    return alive


@pytest.mark.e2e
@pytest.mark.parametrize(("to_group", "sig"), [(True, signal.SIGINT), (False, signal.SIGTERM)],
                         ids=["ctrl-c-to-the-group", "sigterm-to-up-alone"])
def test_stopping_scripts_up_stops_every_process_it_started_within_10_s(tmp_path, to_group, sig):
    """Ctrl-C (SIGINT to scripts/up's process group, as a terminal sends it), or SIGTERM to the
    command alone (a service manager), while the example agent is talking to the local model: up,
    web, workers, beat, the model server, the agent and the embedded PostgreSQL and Redis are all
    gone within 10 s."""
    import psutil

    home = tmp_path / "home"
    port = _free_port()
    proc, found = _start(home, port, "--demo-sessions", "3", "--demo-turns", "40",
                         argv=[str(ROOT / "scripts" / "up")])
    procs: list[Any] = []
    try:
        assert "model" in found, "the local model server was not started"
        deadline = time.monotonic() + 120
        agent = []
        while time.monotonic() < deadline and not agent:
            agent = [p for p in psutil.Process(proc.pid).children(recursive=True)
                     if "agent_loop.py" in _cmdline(p)]
            time.sleep(0.5)
        assert agent, "the example agent did not start"
        time.sleep(3)  # mid-conversation: the agent waits on the model
        procs = _processes_of(proc, home)
        names = sorted({_cmdline(p)[:60] for p in procs})
        assert len(procs) >= 6, names
        started = time.monotonic()
        if to_group:
            os.killpg(proc.pid, sig)
        else:
            # scripts/up execs manage.py: the process it started is the command itself.
            proc.send_signal(sig)
        alive = _wait_gone(procs, timeout=10)
        assert not alive, [_cmdline(p)[:80] for p in alive]
        proc.wait(timeout=max(0.1, 10 - (time.monotonic() - started)))
        took = time.monotonic() - started
        assert took <= 10, took
    finally:
        for p in [*procs, proc]:
            if p.poll() is None if isinstance(p, subprocess.Popen) else p.is_running():
                p.kill()


@pytest.mark.e2e
def test_a_crashed_worker_is_restarted_with_backoff_and_the_stack_keeps_running(tmp_path):
    """kill -9 of the alerts worker scripts/up started: up logs it, starts the worker again (a
    longer pause the second time in a row) and the web server and the other processes go on."""
    import threading

    import psutil

    home = tmp_path / "home"
    port = _free_port()
    proc, found = _start(home, port)
    lines: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()

    def alerts_worker() -> Any:
        kids = psutil.Process(proc.pid).children()
        return next((k for k in kids if "default,alerts" in _cmdline(k)), None)

    def wait_for(what: str, check: Any, timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if value := check():
                return value
            time.sleep(0.2)
        raise AssertionError(f"{what}; up said: {''.join(lines)[-2000:]}")

    try:
        others = {k.pid for k in psutil.Process(proc.pid).children()} - {alerts_worker().pid}
        for attempt, pause in ((1, "1 s"), (2, "2 s")):
            victim = wait_for("the alerts worker", alerts_worker)
            victim.kill()
            wait_for("the exit logged",
                     lambda a=attempt: sum("worker exited (killed by SIGKILL)" in x for x in lines) >= a)
            logged = [x for x in lines if "worker exited" in x][-1]
            assert f"restarting it in {pause}" in logged, logged
            new = wait_for("a new alerts worker",
                           lambda v=victim: (w := alerts_worker()) and w.pid != v.pid and w)
            assert any(f"worker restarted (pid {new.pid})" in x for x in lines), lines[-5:]
            assert proc.poll() is None
            assert httpx.get(f"{found['url']}/healthz", timeout=10).status_code == 200
        # The other processes were left alone, and the new worker serves its queues.
        assert others <= {k.pid for k in psutil.Process(proc.pid).children()}
        queues, _ = _worker_queues(proc)
        assert sorted(map(sorted, queues.values())) == [["alerts", "default"], ["maintenance"], ["replay"]], (
            queues
        )
    finally:
        _stop(proc)
