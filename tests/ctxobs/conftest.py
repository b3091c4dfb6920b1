"""Fixtures for the SDK tests: real local HTTP servers on 127.0.0.1 (no patching of our code).

`IngestServer` speaks the ingest API's wire protocol (POST/GET /api/v1/snapshots), validates
with the shared wire contract, deduplicates by snapshot_id like the real API, and can be told
to fail (refuse connections until started, 5xx, 429 + Retry-After, 413, 401).
`OpenAIServer` speaks the chat completions API (JSON and SSE streaming) and keeps every
request body so tests can check what reached the "provider".
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

import ctxobs
from ctxobs.validate import validate_snapshot

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server:
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    def start(self) -> _Server:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


class IngestServer(_Server):
    def __init__(self, api_key: str = "test-key", port: int | None = None) -> None:
        super().__init__(port)
        self.api_key = api_key
        self.stored: dict[str, dict[str, Any]] = {}
        self.posts: list[dict[str, Any]] = []  # every POST: ids, status, gzip, time
        self.script: deque[tuple[int, dict[str, str]]] = deque()  # forced responses, in order; 0 = normal
        self.reject_ids: set[str] = set()
        self.max_items: int | None = None

    def accepted_ids(self) -> list[str]:
        """Ids in every POST answered 200/207 (an item sent twice after success shows twice)."""
        return [i for p in self.posts if p["status"] in (200, 207) for i in p["ids"]]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                sid = self.path.rstrip("/").rsplit("/", 1)[-1]
                with server.lock:
                    item = server.stored.get(sid)
                if item is None:
                    self._send(404, {"detail": "not found"})
                else:
                    self._send(200, item)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                gz = self.headers.get("Content-Encoding") == "gzip"
                body = json.loads(gzip.decompress(raw) if gz else raw)
                items = body.get("snapshots", [])
                ids = [str(it.get("snapshot_id")) for it in items]
                with server.lock:
                    post: dict[str, Any] = {"ids": ids, "gzip": gz, "time": time.monotonic()}
                    server.posts.append(post)
                    if self.headers.get("Authorization") != f"Bearer {server.api_key}":
                        post["status"] = 401
                    elif server.script and server.script[0][0] == 0:
                        server.script.popleft()  # 0: this one is answered normally
                    elif server.script:
                        status, headers = server.script.popleft()
                        post["status"] = status
                        self._send(status, {"detail": "scripted"}, headers)
                        return
                    elif server.max_items is not None and len(items) > server.max_items:
                        post["status"] = 413
                    if post.get("status") in (401, 413):
                        self._send(post["status"], {"detail": "refused"})
                        return
                    results = []
                    for i, it in enumerate(items):
                        _, errors = validate_snapshot(it, i)
                        sid = ids[i]
                        if sid in server.reject_ids and not errors:
                            errors = [{"loc": ["snapshots", i], "msg": "refused by test", "hint": "none"}]
                        if errors:
                            results.append(
                                {"index": i, "snapshot_id": sid, "status": "rejected", "errors": errors}
                            )
                        elif sid in server.stored:
                            results.append(
                                {"index": i, "snapshot_id": sid, "status": "duplicate", "errors": []}
                            )
                        else:
                            server.stored[sid] = it
                            results.append(
                                {"index": i, "snapshot_id": sid, "status": "created", "errors": []}
                            )
                    counts = {
                        s: sum(r["status"] == s for r in results)
                        for s in ("created", "duplicate", "rejected")
                    }
                    status = 422 if counts["rejected"] == len(results) else 207 if counts["rejected"] else 200
                    post["status"] = status
                self._send(status, {"results": results, **counts})

        return Handler


class OpenAIServer(_Server):
    """A tiny OpenAI-compatible chat completions server."""

    def __init__(self, port: int | None = None) -> None:
        super().__init__(port)
        self.requests: list[dict[str, Any]] = []
        self.reply_text = "Hello there, traveller."
        self.tool_call: dict[str, Any] | None = None
        self.fail_next: int | None = None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, payload: Any) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                req = json.loads(raw)
                with server.lock:
                    server.requests.append(req)
                    fail, server.fail_next = server.fail_next, None
                if fail:
                    self._json(fail, {"error": {"message": "bad request", "type": "invalid_request_error"}})
                    return
                usage = {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}
                call = server.tool_call
                if req.get("stream"):
                    self._stream(req, call, usage)
                    return
                message: dict[str, Any] = {
                    "role": "assistant",
                    "content": None if call else server.reply_text,
                }
                if call:
                    message["tool_calls"] = [call]
                self._json(
                    200,
                    {
                        "id": "chatcmpl-1",
                        "object": "chat.completion",
                        "created": 1,
                        "model": req.get("model"),
                        "choices": [
                            {
                                "index": 0,
                                "message": message,
                                "finish_reason": "tool_calls" if call else "stop",
                            }
                        ],
                        "usage": usage,
                    },
                )

            def _stream(
                self, req: dict[str, Any], call: dict[str, Any] | None, usage: dict[str, int]
            ) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
                    payload = {
                        "id": "chatcmpl-1",
                        "object": "chat.completion.chunk",
                        "created": 1,
                        "model": req.get("model"),
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                        **extra,
                    }
                    self._write(f"data: {json.dumps(payload)}\n\n")

                chunk({"role": "assistant", "content": ""})
                if call:
                    args = call["function"]["arguments"]
                    chunk(
                        {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": call["id"],
                                    "type": "function",
                                    "function": {"name": call["function"]["name"], "arguments": ""},
                                }
                            ]
                        }
                    )
                    for i in range(0, len(args), 5):
                        chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[i : i + 5]}}]})
                    chunk({}, "tool_calls")
                else:
                    words = server.reply_text.split(" ")
                    for i, w in enumerate(words):
                        chunk({"content": w if i == 0 else " " + w})
                    chunk({}, "stop")
                if (req.get("stream_options") or {}).get("include_usage"):
                    payload = {
                        "id": "chatcmpl-1",
                        "object": "chat.completion.chunk",
                        "created": 1,
                        "model": req.get("model"),
                        "choices": [],
                        "usage": usage,
                    }
                    self._write(f"data: {json.dumps(payload)}\n\n")
                self._write("data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")

            def _write(self, text: str) -> None:
                data = text.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        return Handler


class BlackholeServer:
    """Accepts TCP connections and never answers: the worst case for a sender."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = int(self.sock.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.sock.close()


KEY = "test-key"


@pytest.fixture(autouse=True)
def cache_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's cache directory for this test: default spools land here, not in ~/.cache."""
    path = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(path))
    monkeypatch.delenv("CTXOBS_SPOOL", raising=False)
    return path


@pytest.fixture
def ingest() -> Iterator[IngestServer]:
    """An ingest server that is already listening."""
    server = IngestServer(KEY).start()
    yield server
    server.stop()


@pytest.fixture
def ingest_down() -> Iterator[IngestServer]:
    """An ingest server on a reserved port that is NOT listening yet: call `.start()`."""
    server = IngestServer(KEY)
    yield server
    server.stop()


@pytest.fixture
def provider() -> Iterator[OpenAIServer]:
    server = OpenAIServer().start()
    yield server
    server.stop()


FAST = {"flush_interval": 0.05, "backoff_base": 0.05, "backoff_max": 0.3, "flush_at_exit": False}


@pytest.fixture
def make_client() -> Iterator:
    """Build Clients with fast timings; each is closed after the test."""
    made: list[ctxobs.Client] = []

    def make(endpoint: str, **kw: object) -> ctxobs.Client:
        opts = {**FAST, **kw}
        c = ctxobs.Client(endpoint, opts.pop("api_key", KEY), **opts)  # type: ignore[arg-type]
        made.append(c)
        return c

    yield make
    for c in made:
        c.close(timeout=1)


@pytest.fixture
def blackhole() -> Iterator[BlackholeServer]:
    server = BlackholeServer()
    yield server
    server.close()


@pytest.fixture
def ingest_factory() -> Iterator:
    """Make extra ingest servers (e.g. one on a given port, started later)."""
    made: list[IngestServer] = []

    def make(port: int | None = None) -> IngestServer:
        s = IngestServer(KEY, port)
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()


def spool_lines(directory: Path) -> list[bytes]:
    """Every snapshot line in the spool DIRECTORY's files, oldest file first."""
    return [
        line
        for p in sorted(directory.glob("*.jsonl"))
        for line in p.read_bytes().splitlines()
        if line.strip()
    ]


class ApiServer:
    """The real ingest API (gunicorn serving config.wsgi) in its own process, on the test
    database and Redis: it can be stopped for an outage and started again on the same port."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ApiServer:
        fh = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "config.wsgi:application", "-b", f"127.0.0.1:{self.port}",
             "-w", "1", "--threads", "4", "--timeout", "60"],
            env=self.env, stdout=fh, stderr=subprocess.STDOUT, cwd=str(ROOT),
        )
        fh.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the API server exited early; see {self.log}")
            try:
                if httpx.get(f"{self.url}/api/v1/openapi.json", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the API server did not come up; see {self.log}")

    def stop(self) -> None:
        """Quick shutdown (SIGQUIT): the port refuses connections once this returns."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture
def api_server(transactional_db: Any) -> Iterator[tuple[ApiServer, str]]:
    """The real ingest API in a separate process (not yet started: call `.start()`) and an
    ingest key of a project on the test database."""
    from django.conf import settings

    from core.services import project_create

    db = settings.DATABASES["default"]
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    host = str(db["HOST"])
    if host.startswith("/"):
        env["DATABASE_URL"] = f"postgresql://{db['USER']}:{db['PASSWORD']}@/{db['NAME']}?host={host}"
    else:
        port = f":{db['PORT']}" if db["PORT"] else ""
        env["DATABASE_URL"] = f"postgresql://{db['USER']}:{db['PASSWORD']}@{host}{port}/{db['NAME']}"
    env["REDIS_URL"] = settings.REDIS_URL
    log = Path(os.environ.get("CTXOBS_TEST_ARTIFACTS", "artifacts")) / "ctxobs-api-server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    _, key = project_create(name="sdk-spool")
    server = ApiServer(env, log)
    yield server, key
    server.stop()
