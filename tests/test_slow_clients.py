"""The web server of docker-compose.yml, and the one `scripts/up` starts, survive slow clients:
500 connections that send POST headers with a large Content-Length and then a byte every few
seconds (loopback only, for a bounded time) while /healthz and a page answer within a second.
Each command line is run as a process (no Docker engine here), on the test database and Redis."""

from __future__ import annotations

import shlex
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.processes import ROOT, Processes, free_port, keep_logs_on_failure, process_env
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SLOW_CLIENTS = 500
ATTACK_SECONDS = 20
BYTE_EVERY_S = 3.0
IDLE_S = 6  # the body idle bound the server is started with, to see a stalled body end


def compose_web_argv(port: int) -> list[str]:
    """The web service's server command line from docker-compose.yml, on 127.0.0.1:PORT."""
    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    command = spec["services"]["web"]["command"]
    server = command.split("&&", 1)[1].strip().rstrip('"')
    argv = shlex.split(server)
    assert argv[0] == "uvicorn", argv
    argv = [sys.executable, "-m", *argv]
    argv[argv.index("--host") + 1] = "127.0.0.1"
    argv[argv.index("--port") + 1] = str(port)
    # Two processes on this two-core machine (compose runs four).
    argv[argv.index("--workers") + 1] = "2"
    return argv


def _answer(s: socket.socket) -> str:
    """Everything the server sent until it closed the connection."""
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    return data.decode(errors="replace")


def _slow_client(port: int, content_length: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(
        f"POST /api/v1/snapshots HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer x\r\n"
        f"Content-Type: application/json\r\nContent-Length: {content_length}\r\n\r\n".encode()
    )
    return s


def up_web_argv(port: int) -> list[str]:
    """The web server command line of `scripts/up` (manage.py ctxobs_up), on 127.0.0.1:PORT."""
    from core.management.commands.ctxobs_up import web_argv

    return web_argv(host="127.0.0.1", port=port, workers=2)


@pytest.fixture(params=["compose", "scripts-up"])
def compose_web(request: Any, tmp_path: Path) -> Any:
    processes = Processes(process_env(CTXOBS_WEB_BODY_IDLE_S=str(IDLE_S)), tmp_path / "logs")
    port = free_port()
    argv = compose_web_argv(port) if request.param == "compose" else up_web_argv(port)
    proc = processes.spawn("web", argv)
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"the web server exited; see {processes.log('web')}")
        try:
            return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(answers, 90, f"the {request.param} web command to answer")
    try:
        yield port, url, proc
    finally:
        processes.close()
        keep_logs_on_failure(request, tmp_path / "logs")


def test_the_compose_web_server_answers_health_and_pages_within_a_second_under_500_slow_clients(
    compose_web: Any,
) -> None:
    port, url, proc = compose_web
    clients = [_slow_client(port, 10_000_000) for _ in range(SLOW_CLIENTS)]
    stop = threading.Event()
    sent = [0]

    def trickle() -> None:
        while not stop.wait(BYTE_EVERY_S):
            for c in clients:
                try:
                    c.sendall(b" ")
                    sent[0] += 1
                except OSError:
                    pass

    dripper = threading.Thread(target=trickle, daemon=True)
    dripper.start()
    slowest: dict[str, float] = {}
    try:
        deadline = time.monotonic() + ATTACK_SECONDS
        with httpx.Client(base_url=url, timeout=5) as http:
            while time.monotonic() < deadline:
                for path in ("/healthz", "/login/"):
                    started = time.monotonic()
                    r = http.get(path)
                    took = time.monotonic() - started
                    slowest[path] = max(slowest.get(path, 0.0), took)
                    assert r.status_code == 200, (path, r.status_code)
                    assert took < 1.0, (path, took)
                time.sleep(0.5)
        assert proc.poll() is None
        assert sent[0] >= SLOW_CLIENTS * 2, "the slow clients did send"
    finally:
        stop.set()
        dripper.join(timeout=10)
        for c in clients:
            c.close()
    print(f"slowest answers under {SLOW_CLIENTS} slow clients: {slowest}")  # noqa: T201


def test_a_stalled_body_ends_with_408_and_an_oversized_one_with_413_without_a_view_thread(
    compose_web: Any,
) -> None:
    port, url, _ = compose_web
    stalled = _slow_client(port, 1000)
    stalled.settimeout(IDLE_S + 10)
    started = time.monotonic()
    answer = _answer(stalled)
    assert answer.startswith("HTTP/1.1 408"), answer
    assert IDLE_S - 1 <= time.monotonic() - started <= IDLE_S + 5
    stalled.close()
    big = _slow_client(port, 64 * 1024 * 1024)
    big.settimeout(10)
    answer = _answer(big)
    assert answer.startswith("HTTP/1.1 413") and "max_body_bytes" in answer, answer
    big.close()
    # Bodies that arrive are served as before.
    r = httpx.post(f"{url}/api/v1/snapshots", content=b"{}", headers={"Content-Type": "application/json"})
    assert r.status_code == 401
