"""Fixtures for the SDK tests: real local HTTP servers on 127.0.0.1 (no patching of our code).

`IngestFront` puts the real ingest API (gunicorn serving config.wsgi on the test database) behind
a recording front on a port of its own, and answers by itself only for failures the real server
cannot be made to produce on demand. `OpenAIServer` speaks the chat completions API and the
Responses API (JSON and SSE streaming) and keeps every request body so tests can check what
reached the "provider".
`BlackholeServer` accepts connections and never answers.
"""

from __future__ import annotations

import gzip
import json
import signal
import socket
import subprocess
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
from ctxobs.hashing import block_hashes
from tests.processes import Processes, artifacts_dir, free_port, keep_logs_on_failure, process_env

ROOT = Path(__file__).resolve().parents[2]


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


class IngestFront(_Server):
    """The real ingest API, reached through a front that records every POST (snapshot ids,
    gzip, arrival time, the API's status and Retry-After) and every body sent, so that tests can
    tell what the SDK sent how often; what is *stored* is read from the test database. A block
    the SDK sent by hash is recorded with the messages it sent earlier under that hash.

    The front answers by itself only for injected failures the real API cannot be made to give at
    a chosen moment: `script` (forced statuses in order, 0 = pass this one through: 5xx bursts, a
    503/429 at a given request, a 400/404 from a misconfigured proxy) and `max_items` (a reverse
    proxy with a smaller body limit than the API's, answering 413). Until `start()` it is not
    listening: a refused connection is an API that is down.
    """

    def __init__(self, upstream: str, project: Any, port: int | None = None) -> None:
        super().__init__(port)
        self.upstream = upstream
        self.project = project
        self.posts: list[dict[str, Any]] = []
        self.bodies: dict[str, dict[str, Any]] = {}  # the last body sent for each snapshot id
        # Messages of the blocks sent whole, by content hash: a block the SDK sends by hash is
        # recorded in `bodies` with them, as the SDK had it.
        self.contents: dict[str, list[Any]] = {}
        self.script: deque[tuple[int, dict[str, str]]] = deque()
        self.max_items: int | None = None

    @property
    def stored(self) -> dict[str, dict[str, Any]]:
        """The project's snapshots in the database, by snapshot id, each as the SDK sent it."""
        from ingest.models import Snapshot

        ids = Snapshot.objects.filter(project=self.project).values_list("snapshot_id", flat=True)
        with self.lock:
            return {str(sid): self.bodies.get(str(sid), {}) for sid in ids}

    def _whole(self, snap: Any) -> Any:
        """SNAP with each block sent by hash given back the messages sent earlier under that hash."""
        if not isinstance(snap, dict) or not isinstance(snap.get("blocks"), list):
            return snap
        blocks = []
        for b in snap["blocks"]:
            if isinstance(b, dict) and isinstance(b.get("messages"), list):
                try:
                    self.contents[block_hashes(b["messages"])[0]] = b["messages"]
                except (AttributeError, TypeError):
                    pass
            elif isinstance(b, dict) and b.get("hash") in self.contents:
                b = {**{k: v for k, v in b.items() if k != "hash"}, "messages": self.contents[b["hash"]]}
            blocks.append(b)
        return {**snap, "blocks": blocks}

    def accepted_ids(self) -> list[str]:
        """Ids in every POST the API answered 200/207 (an item sent twice after success shows twice)."""
        return [i for p in self.posts if p["status"] in (200, 207) for i in p["ids"]]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def _upstream(self, method: str, body: bytes | None = None) -> httpx.Response:
                headers = {k: v for k in ("Authorization", "Content-Type", "Content-Encoding")
                           if (v := self.headers.get(k)) is not None}
                url = server.upstream + self.path
                return httpx.request(method, url, content=body, headers=headers, timeout=60)

            def _relay(self, r: httpx.Response) -> None:
                extra = {"Retry-After": r.headers["Retry-After"]} if "Retry-After" in r.headers else {}
                self._send(r.status_code, r.content, extra)

            def do_GET(self) -> None:
                self._relay(self._upstream("GET"))

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                gz = self.headers.get("Content-Encoding") == "gzip"
                items = json.loads(gzip.decompress(raw) if gz else raw).get("snapshots", [])
                ids = [str(it.get("snapshot_id")) for it in items]
                post: dict[str, Any] = {"ids": ids, "gzip": gz, "time": time.monotonic(), "status": None}
                with server.lock:
                    server.posts.append(post)
                    for sid, it in zip(ids, items, strict=True):
                        server.bodies[sid] = server._whole(it)
                    forced = server.script.popleft() if server.script else (0, {})
                    if not forced[0] and server.max_items is not None and len(items) > server.max_items:
                        forced = (413, {})
                if forced[0]:
                    post["status"] = forced[0]
                    self._send(forced[0], b'{"detail": "injected by the test front"}', forced[1])
                    return
                r = self._upstream("POST", raw)
                # Recorded before the answer goes out: a test reads it as soon as the SDK has it.
                post["status"], post["retry_after"] = r.status_code, r.headers.get("Retry-After")
                self._relay(r)

        return Handler


class OpenAIServer(_Server):
    """A tiny OpenAI-compatible chat completions server."""

    def __init__(self, port: int | None = None) -> None:
        super().__init__(port)
        self.requests: list[dict[str, Any]] = []
        self.reply_text = "Hello there, traveller."
        self.tool_call: dict[str, Any] | None = None
        self.fail_next: int | None = None
        # /v1/responses: the output items and usage of the next Response (default: a message
        # saying reply_text, and the usage below).
        self.response_output: list[dict[str, Any]] | None = None
        self.response_usage: dict[str, Any] | None = {
            "input_tokens": 36,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 87,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 123,
        }

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
                if self.path.endswith("/responses"):
                    self._responses(req)
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
                    payload: dict[str, Any] = {
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

            def _responses(self, req: dict[str, Any]) -> None:
                # A Response as the API returns it (fields of openai.types.responses.Response).
                output = server.response_output or [
                    {
                        "type": "message",
                        "id": "msg_67ccd2bf17f0819081ff3bb2cf6508e6",
                        "status": "completed",
                        "role": "assistant",
                        "content": [
                            {"type": "output_text", "text": server.reply_text, "annotations": [],
                             "logprobs": []}
                        ],
                    }
                ]
                resp: dict[str, Any] = {
                    "id": f"resp_{len(server.requests):04d}67ccd2bed1ec8190b14f964abc054267",
                    "object": "response",
                    "created_at": 1741476542,
                    "status": "completed",
                    "background": False,
                    "error": None,
                    "incomplete_details": None,
                    "instructions": req.get("instructions"),
                    "max_output_tokens": req.get("max_output_tokens"),
                    "model": req.get("model"),
                    "output": output,
                    "parallel_tool_calls": True,
                    "previous_response_id": req.get("previous_response_id"),
                    "reasoning": {"effort": None, "summary": None},
                    "store": True,
                    "temperature": 1.0,
                    "text": {"format": {"type": "text"}, "verbosity": "medium"},
                    "tool_choice": "auto",
                    "tools": req.get("tools") or [],
                    "top_p": 1.0,
                    "truncation": "disabled",
                    "usage": server.response_usage,
                    "user": None,
                    "metadata": {},
                }
                if not req.get("stream"):
                    self._json(200, resp)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                seq = iter(range(10_000))

                def event(kind: str, **fields: Any) -> None:
                    payload = {"type": kind, "sequence_number": next(seq), **fields}
                    self._write(f"event: {kind}\ndata: {json.dumps(payload)}\n\n")

                pending = {**resp, "status": "in_progress", "output": [], "usage": None}
                event("response.created", response=pending)
                event("response.in_progress", response=pending)
                for i, item in enumerate(output):
                    if item["type"] == "message":
                        event("response.output_item.added", output_index=i,
                              item={**item, "status": "in_progress", "content": []})
                        text = item["content"][0]["text"]
                        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
                        event("response.content_part.added", item_id=item["id"], output_index=i,
                              content_index=0, part=part)
                        words = text.split(" ")
                        for w, word in enumerate(words):
                            event("response.output_text.delta", item_id=item["id"], output_index=i,
                                  content_index=0, delta=word if w == 0 else " " + word, logprobs=[])
                        event("response.output_text.done", item_id=item["id"], output_index=i,
                              content_index=0, text=text, logprobs=[])
                        event("response.content_part.done", item_id=item["id"], output_index=i,
                              content_index=0, part={**part, "text": text})
                    elif item["type"] == "function_call":
                        event("response.output_item.added", output_index=i,
                              item={**item, "status": "in_progress", "arguments": ""})
                        args = item["arguments"]
                        for a in range(0, len(args), 5):
                            event("response.function_call_arguments.delta", item_id=item["id"],
                                  output_index=i, delta=args[a : a + 5])
                        event("response.function_call_arguments.done", item_id=item["id"],
                              output_index=i, name=item["name"], arguments=args)
                    else:
                        event("response.output_item.added", output_index=i, item=item)
                    event("response.output_item.done", output_index=i, item=item)
                event("response.completed", response=resp)
                self.wfile.write(b"0\r\n\r\n")

            def _write(self, text: str) -> None:
                data = text.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        return Handler


class BlackholeServer:
    """Accepts TCP connections and never answers: the worst case for a sender. Scripted because
    the real API cannot be made to hang on demand."""

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


def _api_processes(name: str, **env: str) -> Iterator[str]:
    processes = Processes(process_env(**env), artifacts_dir() / name)
    try:
        _, url = processes.web()
        yield url
    finally:
        processes.close()


@pytest.fixture(scope="session")
def ingest_api(django_db_setup: Any) -> Iterator[str]:
    """The real ingest API (gunicorn serving config.wsgi) on the test database and Redis, with the
    default settings; its log is in the artifacts folder (ctxobs-api/)."""
    yield from _api_processes("ctxobs-api")


@pytest.fixture(scope="session")
def throttled_ingest_api(django_db_setup: Any) -> Iterator[str]:
    """The real ingest API with a rate limit of one request per 2 s per key (bursts of 1), so that
    it answers 429 with Retry-After."""
    yield from _api_processes(
        "ctxobs-api-throttled", CTXOBS_INGEST_RATE_LIMIT="0.5", CTXOBS_INGEST_RATE_BURST="1"
    )


@pytest.fixture
def sdk_project(transactional_db: Any) -> Any:
    """A project on the test database whose ingest key is KEY."""
    from core.models import IngestKey, hash_key
    from core.services import project_create

    project, _ = project_create(name="sdk")
    IngestKey.objects.create(project=project, name="sdk tests", prefix=KEY[:12], key_hash=hash_key(KEY))
    return project


@pytest.fixture
def ingest_factory(ingest_api: str, sdk_project: Any) -> Iterator:
    """Make fronts of the real API for the test's project (not listening until `.start()`)."""
    made: list[IngestFront] = []

    def make(port: int | None = None, *, upstream: str | None = None) -> IngestFront:
        s = IngestFront(upstream or ingest_api, sdk_project, port)
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()


@pytest.fixture
def ingest(ingest_factory: Any) -> IngestFront:
    """The real ingest API, listening."""
    return ingest_factory().start()


@pytest.fixture
def ingest_down(ingest_factory: Any) -> IngestFront:
    """The real ingest API behind a reserved port that is NOT listening yet: call `.start()`."""
    return ingest_factory()


@pytest.fixture
def ingest_throttled(ingest_factory: Any, throttled_ingest_api: str) -> IngestFront:
    """The rate-limited real ingest API, listening."""
    return ingest_factory(upstream=throttled_ingest_api).start()


@pytest.fixture
def provider() -> Iterator[OpenAIServer]:
    server = OpenAIServer()
    server.start()
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


def spool_lines(directory: Path) -> list[bytes]:
    """Every snapshot line in the spool DIRECTORY's files, oldest file first."""
    return [
        line
        for p in sorted(directory.glob("*.jsonl"))
        for line in p.read_bytes().splitlines()
        if line.strip()
    ]


class ApiServer:
    """The real ingest API (gunicorn serving config.wsgi, tests/processes.py) on the test database
    and Redis: it can be stopped for an outage and started again on the same port."""

    def __init__(self, processes: Processes) -> None:
        self.port = free_port()
        self.processes = processes
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ApiServer:
        self.proc, _ = self.processes.web(port=self.port)
        return self

    def stop(self) -> None:
        """Quick shutdown (SIGQUIT): the port refuses connections once this returns."""
        if self.proc is not None:
            self.processes.stop(self.proc, sig=signal.SIGQUIT)
        self.proc = None


@pytest.fixture
def api_server(
    request: pytest.FixtureRequest, transactional_db: Any, tmp_path: Path
) -> Iterator[tuple[ApiServer, str]]:
    """The real ingest API in a separate process (not yet started: call `.start()`) and an
    ingest key of a project on the test database."""
    from core.services import project_create

    _, key = project_create(name="sdk-spool")
    processes = Processes(process_env(), tmp_path / "logs")
    server = ApiServer(processes)
    yield server, key
    processes.close()
    keep_logs_on_failure(request, tmp_path / "logs")
