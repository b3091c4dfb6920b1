"""Replay fixtures: the endpoint of the session's local model server (tests/conftest.py), a
scripted OpenAI-compatible HTTP server in a thread, members with roles, and helpers to wait for
jobs."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from core.models import Membership, Project
from replay import localmodel
from replay.models import ModelEndpoint, ReplayJob
from replay.services.model_endpoints import endpoint_create, local_endpoint_register


@pytest.fixture
def private_project(project: Project) -> Project:
    # Test set-up: the local servers listen on loopback, which the project has to allow.
    Project.objects.filter(pk=project.pk).update(allow_private_endpoints=True)
    project.refresh_from_db()
    return project


@pytest.fixture
def local_endpoint(private_project: Project, local_model: localmodel.LocalModelServer) -> ModelEndpoint:
    return local_endpoint_register(project=private_project, base_url=local_model.base_url)


# --- a scripted OpenAI-compatible server ------------------------------------------
class StubServer:
    """A real HTTP server on loopback answering /v1/completions and /v1/chat/completions.
    `script` is consumed one entry per call: (status, headers, delay_s); when it is empty the
    call succeeds with `text`, or with what `answer` makes of the parsed request body when set (the
    same answer to the same request whichever process sends it: a worker of an earlier test may
    run a transactional test's runs). Every request body is recorded, parsed and as the bytes
    received."""

    def __init__(self) -> None:
        self.script: list[tuple[int, dict[str, str], float]] = []
        self.text = "stub answer"
        self.answer: Callable[[dict[str, Any]], str] | None = None
        self.delay = 0.0
        self.calls: list[dict[str, Any]] = []
        self.call_times: list[float] = []
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw or b"{}")
                with stub.lock:
                    stub.calls.append({"path": self.path, "body": body, "raw": raw})
                    stub.call_times.append(time.monotonic())
                    step = stub.script.pop(0) if stub.script else None
                delay = step[2] if step else stub.delay
                if delay:
                    time.sleep(delay)
                if step and step[0] != 200:
                    self.send_response(step[0])
                    for k, v in step[1].items():
                        self.send_header(k, v)
                    payload = json.dumps({"error": {"message": f"scripted {step[0]}"}}).encode()
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                text = stub.answer(body) if stub.answer is not None else stub.text
                if self.path.endswith("/embeddings"):
                    vec = [float(len(text)), 1.0, 0.5]
                    out: dict[str, Any] = {
                        "data": [{"embedding": vec, "index": 0}],
                        "model": body.get("model"),
                    }
                elif self.path.endswith("/chat/completions"):
                    out = {
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": text},
                            }
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 2},
                    }
                else:
                    out = {
                        "choices": [{"index": 0, "finish_reason": "stop", "text": text}],
                        "usage": {
                            "prompt_tokens": len(str(body.get("prompt", "")).split()),
                            "completion_tokens": 2,
                        },
                    }
                payload = json.dumps(out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:  # noqa: N802
                payload = b'{"object": "list", "data": [{"id": "stub"}]}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def completion_calls(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if not c["path"].endswith("/embeddings")]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def stub_server() -> Iterator[StubServer]:
    s = StubServer()
    yield s
    s.close()


@pytest.fixture
def stub_endpoint(private_project: Project, stub_server: StubServer) -> ModelEndpoint:
    return endpoint_create(
        project=private_project,
        name="stub",
        base_url=stub_server.base_url,
        model="stub-model",
        mode="completions",
        api_key="sk-test-secret-123456",
        timeout_s=5.0,
        is_default=True,
    )


# --- a counting proxy in front of a real model server ------------------------------
class CountingProxy:
    """A real HTTP proxy on loopback in front of UPSTREAM (a base URL ending in /v1): forwards
    every request and counts the completion requests the model received, and those under way."""

    def __init__(self, upstream: str) -> None:
        import httpx

        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.started = 0
        self.answered = 0
        self.lock = threading.Lock()
        proxy = self
        client = httpx.Client(timeout=120.0)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                counted = method == "POST" and self.path.endswith("completions")
                if counted:
                    with proxy.lock:
                        proxy.started += 1
                try:
                    r = client.request(method, proxy.upstream + self.path, content=body,
                                       headers={"Content-Type": "application/json"})
                finally:
                    if counted:
                        with proxy.lock:
                            proxy.answered += 1
                self.send_response(r.status_code)
                self.send_header("Content-Type", r.headers.get("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                try:
                    self.wfile.write(r.content)
                except OSError:
                    pass  # the worker that asked was killed

            def do_POST(self) -> None:  # noqa: N802
                self._forward("POST")

            def do_GET(self) -> None:  # noqa: N802
                self._forward("GET")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @property
    def in_flight(self) -> int:
        with self.lock:
            return self.started - self.answered

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def counted_local_endpoint(
    private_project: Project, local_model: localmodel.LocalModelServer
) -> Iterator[tuple[ModelEndpoint, CountingProxy]]:
    """The local model as the project's endpoint, reached through a CountingProxy."""
    proxy = CountingProxy(local_model.base_url)
    ep = local_endpoint_register(project=private_project, base_url=proxy.base_url)
    yield ep, proxy
    proxy.close()


# --- members ------------------------------------------------------------------------
def member_client(project: Project, role: str, username: str | None = None) -> Client:
    user = get_user_model().objects.create_user(
        username=username or f"{role}-{project.pk}", password="pw-12345678"
    )
    Membership.objects.create(project=project, user=user, role=role)
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def editor_client(private_project: Project) -> Client:
    return member_client(private_project, "editor")


@pytest.fixture
def viewer_client(private_project: Project) -> Client:
    return member_client(private_project, "viewer")


@pytest.fixture
def admin_client_(private_project: Project) -> Client:
    return member_client(private_project, "admin")


def wait_job(job_id: int, timeout: float = 90.0) -> ReplayJob:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = ReplayJob.objects.get(pk=job_id)
        if job.finished:
            return job
        time.sleep(0.2)
    raise AssertionError(
        f"job {job_id} did not finish in {timeout}s: {ReplayJob.objects.get(pk=job_id).status}"
    )
